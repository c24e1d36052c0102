// kvtierctl: the operator's command line for a running kvtierd.
//   kvtierctl [--socket=PATH] [--timeout=SECONDS] status
//   kvtierctl [--socket=PATH] stats [--json] [--namespaces] [--engines]
//   kvtierctl [--socket=PATH] drain [--flush-to-disk] [--cancel]
//   kvtierctl [--socket=PATH] verify
//   kvtierctl [--socket=PATH] clear (--all | --namespace=HEX | [--tenant=T] [--model=M]
//                                    [--partition=P])
// --address=unix:PATH|HOST:PORT replaces --socket; a HOST:PORT is reached over TLS (--tls-ca,
// --tls-cert, --tls-key, --tls-server-name) or, with --insecure, in plain text.
// Exit status: 0 success, 1 the daemon could not be reached or refused (the message says why),
// 2 usage error, 3 verify found corrupt blocks.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/grpcpp.h"
#include "kvtier/v1/service.grpc.pb.h"

namespace {

constexpr const char* kUsage = R"(usage: kvtierctl [--socket=PATH | --address=ADDRESS [TLS options]]
                 [--timeout=SECONDS] COMMAND

commands:
  status                         the daemon's version, incarnation, uptime, engines and tiers
  stats [--json] [--namespaces] [--engines]
                                 per-tier table (or the StatsResponse as JSON)
  drain [--flush-to-disk] [--cancel]
                                 stop taking writes and wait for in-flight work (before a
                                 restart); --flush-to-disk also writes the host tier to disk;
                                 --cancel accepts work again
  verify [--tier=host|disk] [--max-blocks=N] [--report-only] [--namespace=HEX]
                                 read back and check stored blocks (both copies unless --tier);
                                 corrupt ones are listed and removed (kept with --report-only)
  clear (--all | --namespace=HEX | [--tenant=T] [--model=M] [--partition=P])
                                 remove every block of the selected namespaces

--token-file=PATH (or $KVTIER_TOKEN_FILE): a file whose first line is the token to send when the
daemon has authentication on (the admin commands need an admin tenant's token).
--socket defaults to $KVTIER_SOCKET, else /run/kvtier/kvtier.sock; --timeout to 5 seconds
(drain, verify and clear: 600 seconds).

--address=unix:PATH is --socket=PATH; --address=HOST:PORT reaches kvtierd's TCP listener
(tcp.listen) over TLS, with these options:
  --tls-ca=FILE           PEM CA bundle that signed the daemon's certificate (default: the
                          system's roots)
  --tls-cert=FILE         PEM client certificate chain and its key, for a daemon that requires
  --tls-key=FILE          client certificates (tcp.tls.client_ca_file)
  --tls-server-name=NAME  the name the daemon's certificate must carry, when it is not HOST
  --insecure              plain text instead of TLS (a daemon with tcp.insecure, on loopback)
)";

const char* TierName(kvtier::v1::Tier tier) {
  switch (tier) {
    case kvtier::v1::TIER_GPU:
      return "gpu";
    case kvtier::v1::TIER_HOST:
      return "host";
    case kvtier::v1::TIER_DISK:
      return "disk";
    default:
      return "?";
  }
}

std::string Bytes(uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? absl::StrFormat("%d B", b) : absl::StrFormat("%.1f %s", v, units[u]);
}

int Fail(const std::string& what, const grpc::Status& st, const std::string& address) {
  std::cerr << "kvtierctl: " << what << " failed: " << st.error_message();
  if (st.error_code() == grpc::StatusCode::UNAVAILABLE) {
    std::cerr << " (is kvtierd running and listening on " << address << "?)";
  }
  std::cerr << "\n";
  return 1;
}

// Reads the file of `flag` into `out`; false (with a message) when it cannot be read.
bool ReadFlagFile(const char* flag, const std::string& path, std::string* out) {
  std::ifstream in(path);
  if (!in) {
    std::cerr << "kvtierctl: cannot read the " << flag << " file " << path << ": "
              << std::strerror(errno) << "\n";
    return false;
  }
  std::stringstream text;
  text << in.rdbuf();
  *out = text.str();
  return true;
}

void PrintTiers(const kvtier::v1::StatsResponse& stats) {
  std::printf("%-5s %12s %12s %6s %10s %10s %12s %12s %10s\n", "tier", "capacity", "used", "used%",
              "blocks", "hits", "bytes in", "bytes out", "evicted");
  for (const kvtier::v1::TierStats& t : stats.tiers()) {
    const double pct = t.capacity_bytes() == 0 ? 0
                                               : 100.0 * static_cast<double>(t.used_bytes()) /
                                                     static_cast<double>(t.capacity_bytes());
    std::printf("%-5s %12s %12s %5.1f%% %10llu %10llu %12s %12s %10llu\n", TierName(t.tier()),
                Bytes(t.capacity_bytes()).c_str(), Bytes(t.used_bytes()).c_str(), pct,
                static_cast<unsigned long long>(t.blocks()),
                static_cast<unsigned long long>(t.hits()), Bytes(t.bytes_in()).c_str(),
                Bytes(t.bytes_out()).c_str(), static_cast<unsigned long long>(t.evicted_blocks()));
  }
}

}  // namespace

int main(int argc, char** argv) {
  const char* env = std::getenv("KVTIER_SOCKET");
  std::string address = std::string("unix:") + (env != nullptr ? env : "/run/kvtier/kvtier.sock");
  std::string tls_ca, tls_cert, tls_key, tls_server_name;
  bool insecure = false;
  double timeout = 0;
  std::string command;
  bool json = false, namespaces = false, engines = false;
  bool flush = false, cancel = false, all = false, report_only = false;
  std::string ns_hex, tenant, model, partition, tier;
  uint64_t max_blocks = 0;
  const char* token_env = std::getenv("KVTIER_TOKEN_FILE");
  std::string token_file = token_env != nullptr ? token_env : "";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (absl::StartsWith(arg, "--socket=")) {
      address = "unix:" + arg.substr(9);
    } else if (absl::StartsWith(arg, "--address=")) {
      address = arg.substr(10);
    } else if (absl::StartsWith(arg, "--tls-ca=")) {
      tls_ca = arg.substr(9);
    } else if (absl::StartsWith(arg, "--tls-cert=")) {
      tls_cert = arg.substr(11);
    } else if (absl::StartsWith(arg, "--tls-key=")) {
      tls_key = arg.substr(10);
    } else if (absl::StartsWith(arg, "--tls-server-name=")) {
      tls_server_name = arg.substr(18);
    } else if (arg == "--insecure") {
      insecure = true;
    } else if (absl::StartsWith(arg, "--timeout=")) {
      if (!absl::SimpleAtod(arg.substr(10), &timeout) || timeout <= 0) {
        std::cerr << "kvtierctl: --timeout needs a positive number of seconds\n";
        return 2;
      }
    } else if (arg == "--json") {
      json = true;
    } else if (arg == "--namespaces") {
      namespaces = true;
    } else if (arg == "--engines") {
      engines = true;
    } else if (arg == "--flush-to-disk") {
      flush = true;
    } else if (arg == "--cancel") {
      cancel = true;
    } else if (arg == "--all") {
      all = true;
    } else if (arg == "--report-only") {
      report_only = true;
    } else if (absl::StartsWith(arg, "--tier=")) {
      tier = arg.substr(7);
      if (tier != "host" && tier != "disk") {
        std::cerr << "kvtierctl: --tier is host or disk, not '" << tier << "'\n";
        return 2;
      }
    } else if (absl::StartsWith(arg, "--max-blocks=")) {
      if (!absl::SimpleAtoi(arg.substr(13), &max_blocks) || max_blocks == 0) {
        std::cerr << "kvtierctl: --max-blocks needs a positive number\n";
        return 2;
      }
    } else if (absl::StartsWith(arg, "--token-file=")) {
      token_file = arg.substr(13);
    } else if (absl::StartsWith(arg, "--namespace=")) {
      ns_hex = arg.substr(12);
    } else if (absl::StartsWith(arg, "--tenant=")) {
      tenant = arg.substr(9);
    } else if (absl::StartsWith(arg, "--model=")) {
      model = arg.substr(8);
    } else if (absl::StartsWith(arg, "--partition=")) {
      partition = arg.substr(12);
    } else if (arg == "--help" || arg == "-h") {
      std::cout << kUsage;
      return 0;
    } else if (command.empty() && !absl::StartsWith(arg, "-")) {
      command = arg;
    } else {
      std::cerr << "kvtierctl: unexpected argument '" << arg << "'\n" << kUsage;
      return 2;
    }
  }
  const bool admin = command == "drain" || command == "verify" || command == "clear";
  if (command != "status" && command != "stats" && !admin) {
    std::cerr << (command.empty() ? "kvtierctl: no command\n"
                                  : "kvtierctl: unknown command '" + command + "'\n")
              << kUsage;
    return 2;
  }
  if (timeout == 0) timeout = admin ? 600 : 5;
  const bool tcp = !absl::StartsWith(address, "unix:");
  const bool tls_options =
      !tls_ca.empty() || !tls_cert.empty() || !tls_key.empty() || !tls_server_name.empty();
  if (address.empty() || address == "unix:") {
    std::cerr << "kvtierctl: --address needs unix:PATH or HOST:PORT\n";
    return 2;
  }
  if (!tcp && (tls_options || insecure)) {
    std::cerr << "kvtierctl: --tls-* and --insecure are for a HOST:PORT --address, not " << address
              << "\n";
    return 2;
  }
  if (insecure && tls_options) {
    std::cerr << "kvtierctl: --insecure (plain text) and --tls-* options exclude each other\n";
    return 2;
  }
  if (tls_cert.empty() != tls_key.empty()) {
    std::cerr << "kvtierctl: --tls-cert and --tls-key go together\n";
    return 2;
  }
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  grpc::ChannelArguments channel_args;
  if (tcp && !insecure) {
    grpc::SslCredentialsOptions ssl;
    if ((!tls_ca.empty() && !ReadFlagFile("--tls-ca", tls_ca, &ssl.pem_root_certs)) ||
        (!tls_cert.empty() && !ReadFlagFile("--tls-cert", tls_cert, &ssl.pem_cert_chain)) ||
        (!tls_key.empty() && !ReadFlagFile("--tls-key", tls_key, &ssl.pem_private_key))) {
      return 2;
    }
    credentials = grpc::SslCredentials(ssl);
    if (!tls_server_name.empty()) channel_args.SetSslTargetNameOverride(tls_server_name);
  }
  std::string token;
  if (!token_file.empty()) {
    std::ifstream in(token_file);
    if (!in || !std::getline(in, token) || token.empty()) {
      std::cerr << "kvtierctl: cannot read a token from " << token_file << "\n";
      return 2;
    }
  }
  // Every call carries the token (when there is one).
  auto authorize = [&](grpc::ClientContext& ctx) {
    if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
  };
  auto channel = grpc::CreateCustomChannel(address, credentials, channel_args);
  auto stub = kvtier::v1::KvTier::NewStub(channel);
  if (admin) {
    auto admin_stub = kvtier::v1::KvTierAdmin::NewStub(channel);
    grpc::ClientContext ctx;
    authorize(ctx);
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::milliseconds(static_cast<int64_t>(timeout * 1000)));
    if (command == "drain") {
      kvtier::v1::DrainRequest req;
      req.set_flush_to_disk(flush);
      req.set_cancel(cancel);
      kvtier::v1::DrainResponse resp;
      grpc::Status st = admin_stub->Drain(&ctx, req, &resp);
      if (!st.ok()) return Fail("Drain", st, address);
      if (cancel) {
        std::printf("drain cancelled: accepting work again (%u engines registered)\n",
                    resp.registered_engines());
      } else {
        std::printf(
            "drained in %.3f s: %llu blocks written to disk, %u engines still "
            "registered\n",
            static_cast<double>(resp.elapsed().seconds()) + resp.elapsed().nanos() / 1e9,
            static_cast<unsigned long long>(resp.flushed_blocks()), resp.registered_engines());
      }
      return 0;
    }
    if (command == "verify") {
      kvtier::v1::VerifyRequest req;
      if (tier == "host") req.set_tier(kvtier::v1::TIER_HOST);
      if (tier == "disk") req.set_tier(kvtier::v1::TIER_DISK);
      req.set_report_only(report_only);
      req.set_max_blocks(max_blocks);
      if (!ns_hex.empty()) {
        uint64_t id = 0;
        if (!absl::SimpleHexAtoi(ns_hex, &id)) {
          std::cerr << "kvtierctl: --namespace takes a hexadecimal id, not '" << ns_hex << "'\n";
          return 2;
        }
        req.mutable_namespaces()->set_namespace_id(id);
      }
      kvtier::v1::VerifyResponse resp;
      grpc::Status st = admin_stub->Verify(&ctx, req, &resp);
      if (!st.ok()) return Fail("Verify", st, address);
      std::printf(
          "verified %llu blocks (%s) in %.3f s%s: %llu corrupt, %llu unreadable, %llu "
          "removed\n",
          static_cast<unsigned long long>(resp.checked_blocks()),
          Bytes(resp.checked_bytes()).c_str(),
          static_cast<double>(resp.elapsed().seconds()) + resp.elapsed().nanos() / 1e9,
          resp.complete() ? "" : " (stopped at --max-blocks)",
          static_cast<unsigned long long>(resp.corrupt_blocks()),
          static_cast<unsigned long long>(resp.missing_blocks()),
          static_cast<unsigned long long>(resp.removed_blocks()));
      for (const kvtier::v1::CorruptBlock& c : resp.corrupt()) {
        std::string hash;
        for (unsigned char b : c.block_hash()) hash += absl::StrFormat("%02x", b);
        std::printf("  namespace %016llx block %s (%s): %s\n",
                    static_cast<unsigned long long>(c.namespace_id()), hash.c_str(),
                    c.tier() == kvtier::v1::TIER_DISK ? "disk" : "host", c.message().c_str());
      }
      return resp.corrupt_blocks() + resp.missing_blocks() == 0 ? 0 : 3;
    }
    kvtier::v1::ClearRequest req;
    const bool match = !tenant.empty() || !model.empty() || !partition.empty();
    if (static_cast<int>(all) + static_cast<int>(!ns_hex.empty()) + static_cast<int>(match) != 1) {
      std::cerr << "kvtierctl: clear needs exactly one of --all, --namespace=HEX, or "
                   "--tenant/--model/--partition\n";
      return 2;
    }
    if (all) {
      req.mutable_namespaces()->set_all(true);
    } else if (!ns_hex.empty()) {
      uint64_t id = 0;
      if (!absl::SimpleHexAtoi(ns_hex, &id)) {
        std::cerr << "kvtierctl: --namespace takes a hexadecimal id, not '" << ns_hex << "'\n";
        return 2;
      }
      req.mutable_namespaces()->set_namespace_id(id);
    } else {
      kvtier::v1::NamespaceMatch* m = req.mutable_namespaces()->mutable_match();
      m->set_tenant(tenant);
      m->set_model(model);
      m->set_partition(partition);
    }
    kvtier::v1::ClearResponse resp;
    grpc::Status st = admin_stub->Clear(&ctx, req, &resp);
    if (!st.ok()) return Fail("Clear", st, address);
    std::printf("cleared %u namespaces: %llu blocks removed\n", resp.cleared_namespaces(),
                static_cast<unsigned long long>(resp.removed_blocks()));
    return 0;
  }
  auto deadline = [&] {
    return std::chrono::system_clock::now() +
           std::chrono::milliseconds(static_cast<int64_t>(timeout * 1000));
  };
  kvtier::v1::StatsRequest sreq;
  sreq.set_include_namespaces(namespaces || command == "status");
  sreq.set_include_engines(engines || command == "status");
  kvtier::v1::StatsResponse stats;
  {
    grpc::ClientContext ctx;
    authorize(ctx);
    ctx.set_deadline(deadline());
    grpc::Status st = stub->Stats(&ctx, sreq, &stats);
    if (!st.ok()) return Fail("Stats", st, address);
  }
  if (command == "stats") {
    if (json) {
      std::string out;
      google::protobuf::util::JsonPrintOptions options;
      options.add_whitespace = true;
      options.preserve_proto_field_names = true;
      (void)google::protobuf::util::MessageToJsonString(stats, &out, options);
      std::cout << out;
      return 0;
    }
    PrintTiers(stats);
    std::printf(
        "\noffloaded %s hot as %s cold; onboarded %s cold into %s hot; %llu offload "
        "items not stored\n",
        Bytes(stats.hot_bytes_offloaded()).c_str(), Bytes(stats.cold_bytes_offloaded()).c_str(),
        Bytes(stats.cold_bytes_onboarded()).c_str(), Bytes(stats.hot_bytes_onboarded()).c_str(),
        static_cast<unsigned long long>(stats.dropped_offloads()));
    return 0;
  }
  kvtier::v1::HelloResponse hello;
  {
    grpc::ClientContext ctx;
    authorize(ctx);
    ctx.set_deadline(deadline());
    kvtier::v1::HelloRequest req;
    req.set_client_name("kvtierctl/0.1.0");
    grpc::Status st = stub->Hello(&ctx, req, &hello);
    if (!st.ok()) return Fail("Hello", st, address);
  }
  std::printf("kvtierd %s on %s (%s), API v%u, incarnation %016llx\n",
              hello.server_version().c_str(), hello.node_name().c_str(), address.c_str(),
              hello.api_version(), static_cast<unsigned long long>(hello.incarnation_id()));
  std::printf("up %llds, %s, CUDA %s, %u engines, %d namespaces\n",
              static_cast<long long>(stats.uptime().seconds()),
              hello.draining() ? "DRAINING" : "serving", hello.capabilities().cuda() ? "yes" : "no",
              stats.registered_engines(), stats.namespaces_size());
  for (const kvtier::v1::EngineInfo& e : stats.engines()) {
    std::printf("  engine %s (%s) namespace %016llx, %u pools\n", e.engine_id().c_str(),
                e.engine_name().c_str(), static_cast<unsigned long long>(e.namespace_id()),
                e.pools());
  }
  std::printf("\n");
  PrintTiers(stats);
  return 0;
}
