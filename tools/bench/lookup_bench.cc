// `kvtier-bench lookup`: starts kvtierd (by default the binary next to kvtier-bench) as a child
// process on a scratch directory with small tiers and no metrics listener, as
// tests/integration/daemon_fixture.h does, and waits until Hello answers on its Unix socket. It
// registers one engine whose host pool is a file of 4096 small pages in the scratch directory (a
// GQA layout of 1 layer, 1 KV head of 16 dims, 16 tokens, BF16: 1 KiB a page; codec raw) and
// offloads those pages under one chain of 4096 hashes, acknowledged once stored, so that every
// lookup of a prefix of that chain is all hits. Then, for each chain length L, after 200 untimed
// lookups (and Hellos) it alternates --iterations Lookup RPCs of the chain's first L hashes (engine
// scope) with as many Hello RPCs on the same channel, each timed on the client with steady_clock
// from the creation of its ClientContext to the return of the blocking call. Hello is the
// baseline: the transport round trip (gRPC over the Unix socket, both ends' threads) plus the
// little work the daemon does to answer it (a snapshot of the store's stats and, in CUDA builds, a
// device query); the daemon-side cost of a lookup is not observable from here, so Lookup's excess
// over Hello is its best estimate. Alternating the two makes both see the same machine state. A
// lookup that does not hit all L hashes fails the run. kvtierd is stopped with SIGTERM at the end,
// on errors too. The child process itself is tools/bench/daemon_process.h.
//
// Run: build/bin/kvtier-bench lookup --chains=1,64,4096 --iterations=2000
#include "tools/bench/lookup_bench.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "codec/codec_spec.h"
#include "codec/dtype.h"
#include "codec/page_layout.h"
#include "grpcpp/grpcpp.h"
#include "kvtier/v1/service.grpc.pb.h"
#include "proto/codec_convert.h"
#include "tools/bench/bench_common.h"
#include "tools/bench/daemon_process.h"

namespace kvtier::bench {
namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr uint32_t kPages = 4096;   // pages offloaded: the chain, and the longest lookup
constexpr uint32_t kWarmup = 200;   // untimed lookups (each with a Hello) per chain length
constexpr int kLeaseSeconds = 600;  // asked for; the daemon clamps it (lookups renew it anyway)
constexpr auto kRpcTimeout = std::chrono::seconds(20);

struct LookupBenchFlags {
  std::string kvtierd;  // empty: the kvtierd next to this binary
  std::string dir;      // empty: a fresh directory under /tmp, removed at the end
  std::vector<uint32_t> chains = {1, 64, 4096};
  uint32_t iterations = 2000;
  bool json = false;
};

absl::StatusOr<std::vector<uint32_t>> ParseChains(absl::string_view text) {
  std::vector<uint32_t> values;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    uint32_t value;
    if (!absl::SimpleAtoi(part, &value) || value == 0 || value > kPages) {
      return cli::UsageError(
          absl::StrCat("--chains: '", part, "' is not a chain length in [1, ", kPages, "]"));
    }
    values.push_back(value);
  }
  return values;
}

absl::StatusOr<LookupBenchFlags> ParseFlags(const cli::Values& values) {
  LookupBenchFlags flags;
  for (const auto& [name, given] : values.flags()) {
    std::optional<std::string> value = given;
    if (name == "json") {
      flags.json = true;
      continue;
    }
    if (value->empty()) return cli::UsageError(absl::StrCat("--", name, " needs a value"));
    if (name == "kvtierd") {
      flags.kvtierd = *value;
    } else if (name == "dir") {
      flags.dir = *value;
    } else if (name == "chains") {
      absl::StatusOr<std::vector<uint32_t>> chains = ParseChains(*value);
      if (!chains.ok()) return chains.status();
      flags.chains = *std::move(chains);
    } else if (!absl::SimpleAtoi(*value, &flags.iterations) || flags.iterations == 0 ||
               flags.iterations > 10'000'000) {
      return cli::UsageError(absl::StrCat("--iterations: '", *value, "' is not in [1, 10000000]"));
    }
  }
  return flags;
}

std::chrono::system_clock::time_point RpcDeadline() {
  return std::chrono::system_clock::now() + kRpcTimeout;
}

// "host" for TIER_HOST.
std::string TierName(v1::Tier tier) {
  return absl::AsciiStrToLower(absl::StripPrefix(v1::Tier_Name(tier), "TIER_"));
}

// The registered engine and what the setup learned about it.
struct Engine {
  std::string engine_id;
  uint64_t hot_page_bytes = 0;
  uint64_t cold_block_bytes = 0;
  std::map<std::string, uint32_t> hit_tiers;  // tier name -> hits of the whole-chain lookup
};

// Registers the engine (its host pool a file of kPages slots in `dir`, zeros: lookups do not read
// pages) and offloads every page under `hashes`, then checks that the whole chain hits.
absl::StatusOr<Engine> RegisterAndOffload(DaemonProcess& daemon, const std::string& dir,
                                          const std::vector<std::string>& hashes) {
  absl::StatusOr<codec::PageLayout> layout =
      codec::BuildGqaLayout({1, 1, 16, 16, codec::DType::kBf16, 0, 0});
  if (!layout.ok()) return layout.status();
  absl::StatusOr<codec::CodecSpec> codec = codec::CodecSpec::Parse("raw");
  if (!codec.ok()) return codec.status();
  const std::string pool_path = dir + "/host-pool";
  const uint64_t pool_bytes = layout->pools[0].slot_bytes * kPages;
  const int fd = open(pool_path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("open ", pool_path, ": ", std::strerror(errno)));
  }
  const int truncated = ftruncate(fd, static_cast<off_t>(pool_bytes));
  const int truncate_errno = errno;
  close(fd);
  if (truncated != 0) {
    return absl::InternalError(absl::StrCat("ftruncate ", pool_path, " to ", pool_bytes,
                                            " bytes: ", std::strerror(truncate_errno)));
  }

  v1::RegisterEngineRequest reg;
  reg.set_engine_name("kvtier-bench-lookup");
  reg.set_model("kvtier-bench");
  proto::LayoutToProto(*layout, reg.mutable_layout());
  proto::CodecToProto(*codec, reg.mutable_codec());
  v1::PoolRegistration* pool = reg.add_pools();
  pool->set_name(layout->pools[0].name);
  pool->set_slots(kPages);
  pool->mutable_shared_memory()->set_path(pool_path);
  pool->mutable_shared_memory()->set_size_bytes(pool_bytes);
  reg.mutable_lease_ttl()->set_seconds(kLeaseSeconds);
  v1::RegisterEngineResponse registered;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(RpcDeadline());
    if (grpc::Status st = daemon.stub().RegisterEngine(&ctx, reg, &registered); !st.ok()) {
      return RpcError("RegisterEngine", st);
    }
  }
  Engine engine;
  engine.engine_id = registered.engine_id();
  engine.hot_page_bytes = registered.hot_page_bytes();
  engine.cold_block_bytes = registered.cold_block_bytes();

  const uint32_t limit = daemon.hello().limits().max_items_per_request();
  const uint32_t batch = limit == 0 ? kPages : std::min(kPages, limit);
  for (uint32_t first = 0; first < kPages; first += batch) {
    const uint32_t count = std::min(batch, kPages - first);
    v1::OffloadRequest req;
    req.set_engine_id(engine.engine_id);
    req.set_ack(v1::WRITE_ACK_STORED);  // indexed when it returns: the lookups below hit
    for (uint32_t i = first; i < first + count; ++i) {
      v1::OffloadItem* item = req.add_items();
      item->set_block_hash(hashes[i]);
      item->set_page_index(i);
    }
    v1::OffloadResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(RpcDeadline());
    if (grpc::Status st = daemon.stub().Offload(&ctx, req, &resp); !st.ok()) {
      return RpcError(absl::StrFormat("Offload of pages %u..%u", first, first + count - 1), st);
    }
    if (resp.results_size() != static_cast<int>(count)) {
      return absl::InternalError(
          absl::StrFormat("Offload of %u pages answered %d results", count, resp.results_size()));
    }
    for (uint32_t i = 0; i < count; ++i) {
      const v1::ItemResult& r = resp.results(static_cast<int>(i));
      if (r.code() != v1::ITEM_CODE_OK && r.code() != v1::ITEM_CODE_ALREADY_STORED) {
        return absl::InternalError(absl::StrFormat("Offload of page %u: %s: %s", first + i,
                                                   v1::ItemCode_Name(r.code()), r.message()));
      }
    }
  }

  v1::LookupRequest req;
  req.set_engine_id(engine.engine_id);
  for (const std::string& h : hashes) req.add_block_hashes(h);
  v1::LookupResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(RpcDeadline());
  if (grpc::Status st = daemon.stub().Lookup(&ctx, req, &resp); !st.ok()) {
    return RpcError("Lookup of the whole chain", st);
  }
  if (resp.hit_pages() != kPages) {
    return absl::FailedPreconditionError(
        absl::StrFormat("after offloading %u pages (acknowledged as stored), a lookup of their "
                        "chain hits only %u",
                        kPages, resp.hit_pages()));
  }
  for (int t : resp.tiers()) ++engine.hit_tiers[TierName(static_cast<v1::Tier>(t))];
  return engine;
}

absl::Status Unregister(DaemonProcess& daemon, const std::string& engine_id) {
  v1::UnregisterRequest req;
  req.set_engine_id(engine_id);
  v1::UnregisterResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(RpcDeadline());
  if (grpc::Status st = daemon.stub().Unregister(&ctx, req, &resp); !st.ok()) {
    return RpcError("Unregister", st);
  }
  return absl::OkStatus();
}

struct Row {
  uint32_t chain = 0;
  uint32_t hits = 0;
  LatencySummary lookup;
  LatencySummary hello;
};

// kWarmup untimed, then `iterations` timed Lookups of the first `chain` hashes, each followed by a
// Hello on the same channel. FailedPrecondition when a lookup does not hit every hash.
absl::StatusOr<Row> MeasureChain(DaemonProcess& daemon, const std::string& engine_id,
                                 const std::vector<std::string>& hashes, uint32_t chain,
                                 uint32_t iterations) {
  v1::LookupRequest lookup;
  lookup.set_engine_id(engine_id);
  for (uint32_t i = 0; i < chain; ++i) lookup.add_block_hashes(hashes[i]);
  const v1::HelloRequest hello;
  v1::KvTier::Stub& stub = daemon.stub();
  Row row;
  row.chain = chain;
  row.hits = chain;

  const auto time_lookup = [&](uint32_t index, double* us) -> absl::Status {
    const Clock::time_point start = Clock::now();
    grpc::ClientContext ctx;
    ctx.set_deadline(RpcDeadline());
    v1::LookupResponse resp;
    const grpc::Status st = stub.Lookup(&ctx, lookup, &resp);
    const Clock::time_point end = Clock::now();
    if (!st.ok()) {
      return RpcError(absl::StrFormat("Lookup %u of a %u-hash chain", index, chain), st);
    }
    if (resp.hit_pages() != chain) {
      return absl::FailedPreconditionError(
          absl::StrFormat("Lookup %u of a %u-hash chain hit %u, not all %u (every hash was "
                          "offloaded and acknowledged as stored)",
                          index, chain, resp.hit_pages(), chain));
    }
    *us = std::chrono::duration<double, std::micro>(end - start).count();
    return absl::OkStatus();
  };
  const auto time_hello = [&](double* us) -> absl::Status {
    const Clock::time_point start = Clock::now();
    grpc::ClientContext ctx;
    ctx.set_deadline(RpcDeadline());
    v1::HelloResponse resp;
    const grpc::Status st = stub.Hello(&ctx, hello, &resp);
    const Clock::time_point end = Clock::now();
    if (!st.ok()) return RpcError("Hello", st);
    *us = std::chrono::duration<double, std::micro>(end - start).count();
    return absl::OkStatus();
  };

  double us = 0;
  for (uint32_t i = 0; i < kWarmup; ++i) {
    if (absl::Status st = time_lookup(i, &us); !st.ok()) return st;
    if (absl::Status st = time_hello(&us); !st.ok()) return st;
  }
  std::vector<double> lookup_us, hello_us;
  lookup_us.reserve(iterations);
  hello_us.reserve(iterations);
  for (uint32_t i = 0; i < iterations; ++i) {
    if (absl::Status st = time_lookup(kWarmup + i, &us); !st.ok()) return st;
    lookup_us.push_back(us);
    if (absl::Status st = time_hello(&us); !st.ok()) return st;
    hello_us.push_back(us);
  }
  row.lookup = Summarize(std::move(lookup_us));
  row.hello = Summarize(std::move(hello_us));
  return row;
}

struct Report {
  std::string server_version;
  Engine engine;
  std::vector<Row> rows;
};

// Everything between starting the daemon and stopping it.
absl::StatusOr<Report> RunWithDaemon(DaemonProcess& daemon, const std::string& kvtierd,
                                     const LookupBenchFlags& flags, const std::string& dir) {
  // The flags of tests/integration/daemon_fixture.h (small host and disk tiers, no pinning, pools
  // allowed in the scratch directory) but without the metrics listener.
  const std::vector<std::string> settings = {
      "host.capacity=64MiB", "host.chunk=4MiB", "host.pin=none",
      "disk.capacity=64MiB", "disk.chunk=4MiB", "pools.allowed_dirs=[" + dir + "]",
      "metrics.listen=\"\""};
  DaemonStartOptions options;
  options.client_name = "kvtier-bench lookup";
  if (absl::Status started = daemon.Start(kvtierd, dir, settings, options); !started.ok()) {
    return started;
  }
  Report report;
  report.server_version = daemon.hello().server_version();
  if (!flags.json) {
    std::fprintf(stderr, "kvtierd %s (pid %d) answers on %s/kvtier.sock\n",
                 report.server_version.c_str(), static_cast<int>(daemon.pid()), dir.c_str());
  }
  std::vector<std::string> hashes;
  hashes.reserve(kPages);
  for (uint32_t i = 0; i < kPages; ++i) hashes.push_back(SyntheticBlockHash(i));
  absl::StatusOr<Engine> engine = RegisterAndOffload(daemon, dir, hashes);
  if (!engine.ok()) return engine.status();
  report.engine = *std::move(engine);
  if (!flags.json) std::fprintf(stderr, "offloaded %u pages under one chain\n", kPages);
  for (uint32_t chain : flags.chains) {
    absl::StatusOr<Row> row =
        MeasureChain(daemon, report.engine.engine_id, hashes, chain, flags.iterations);
    if (!row.ok()) return row.status();
    if (!flags.json) {
      std::fprintf(stderr, "chain %u: lookup p50 %.1f us, p99 %.1f us; hello p50 %.1f us\n", chain,
                   row->lookup.p50_us, row->lookup.p99_us, row->hello.p50_us);
    }
    report.rows.push_back(*row);
  }
  if (absl::Status unregistered = Unregister(daemon, report.engine.engine_id); !unregistered.ok()) {
    return unregistered;
  }
  return report;
}

std::string FormatTiers(const std::map<std::string, uint32_t>& tiers) {
  std::vector<std::string> parts;
  for (const auto& [tier, count] : tiers) parts.push_back(absl::StrCat(count, " in ", tier));
  return parts.empty() ? "none" : absl::StrJoin(parts, ", ");
}

void PrintTable(const Report& report, const LookupBenchFlags& flags, const std::string& kvtierd) {
  std::printf(
      "kvtierd %s (%s); %u pages of %llu B offloaded (raw cold blocks of %llu B); "
      "hits of the whole chain: %s\n",
      report.server_version.c_str(), kvtierd.c_str(), kPages,
      static_cast<unsigned long long>(report.engine.hot_page_bytes),
      static_cast<unsigned long long>(report.engine.cold_block_bytes),
      FormatTiers(report.engine.hit_tiers).c_str());
  std::printf(
      "%u timed Lookups per chain after %u warm-up ones, each followed by a Hello on the "
      "same channel\n",
      flags.iterations, kWarmup);
  std::printf("%6s %9s %9s %9s %9s %13s %14s\n", "chain", "p50 us", "p99 us", "p99.9 us", "mean us",
              "hello p50 us", "p99/hello-p99");
  for (const Row& r : report.rows) {
    std::printf("%6u %9.1f %9.1f %9.1f %9.1f %13.1f %13.2fx\n", r.chain, r.lookup.p50_us,
                r.lookup.p99_us, r.lookup.p999_us, r.lookup.mean_us, r.hello.p50_us,
                r.lookup.p99_us / r.hello.p99_us);
  }
}

Json LatencyJson(const LatencySummary& l) {
  return Json{{"p50", l.p50_us}, {"p99", l.p99_us}, {"p99_9", l.p999_us}, {"mean", l.mean_us}};
}

Json ToJson(const Report& report, const LookupBenchFlags& flags, const std::string& kvtierd) {
  Json doc;
  doc["kvtierd"] = kvtierd;
  doc["server_version"] = report.server_version;
  doc["pages"] = kPages;
  doc["hot_page_bytes"] = report.engine.hot_page_bytes;
  doc["cold_block_bytes"] = report.engine.cold_block_bytes;
  Json tiers = Json::object();
  for (const auto& [tier, count] : report.engine.hit_tiers) tiers[tier] = count;
  doc["chain_hit_tiers"] = std::move(tiers);
  doc["iterations"] = flags.iterations;
  doc["warmup"] = kWarmup;
  Json rows = Json::array();
  for (const Row& r : report.rows) {
    Json j;
    j["chain"] = r.chain;
    j["hits"] = r.hits;
    j["lookup_us"] = LatencyJson(r.lookup);
    j["hello_us"] = LatencyJson(r.hello);
    j["p99_over_hello_p99"] = r.lookup.p99_us / r.hello.p99_us;
    rows.push_back(std::move(j));
  }
  doc["chains"] = std::move(rows);
  return doc;
}

}  // namespace

void DeclareLookupBenchFlags(cli::Command& command) {
  command.SetDescription(
      "Lookup RPC latency of a real kvtierd over its Unix socket, for chains that are all hits, "
      "next to\n"
      "the latency of a Hello RPC on the same channel (the transport round trip).");
  command.AddFlag("kvtierd", "PATH",
                  "the daemon binary (default: kvtierd in the directory of kvtier-bench)");
  command.AddFlag("dir", "DIR",
                  "scratch directory for the daemon's state, socket and log and the engine's host\n"
                  "pool file; created if missing, and kept (default: a fresh directory under\n"
                  "/tmp, removed at the end)");
  command.AddFlag("chains", "A,B,...",
                  "chain lengths to look up, each in [1, 4096] (default 1,64,4096)");
  command.AddFlag("iterations", "N",
                  "timed lookups per chain length, after 200 untimed ones (default 2000)");
  command.AddSwitch("json", "print JSON instead of the table");
}

int RunLookupBench(const cli::Values& values) {
  absl::StatusOr<LookupBenchFlags> parsed = ParseFlags(values);
  if (!parsed.ok()) return values.PrintUsageError(parsed.status().message());
  const LookupBenchFlags& flags = *parsed;
  std::string kvtierd = flags.kvtierd;
  if (kvtierd.empty()) {
    absl::StatusOr<std::string> found = DefaultKvtierd();
    if (!found.ok()) {
      std::fprintf(stderr, "kvtier-bench lookup: %s\n", found.status().ToString().c_str());
      return 1;
    }
    kvtierd = *std::move(found);
  }
  bool temporary = false;
  absl::StatusOr<std::string> dir = PrepareScratchDir(flags.dir, "kvtier-bench-lookup", &temporary);
  if (!dir.ok()) {
    std::fprintf(stderr, "kvtier-bench lookup: %s\n", dir.status().ToString().c_str());
    return 1;
  }

  DaemonProcess daemon;
  absl::StatusOr<Report> report = RunWithDaemon(daemon, kvtierd, flags, *dir);
  const absl::Status stopped = daemon.Stop();  // on errors too
  int exit_code = 0;
  if (!report.ok() || !stopped.ok()) {
    exit_code = 1;
    if (!report.ok()) {
      std::fprintf(stderr, "kvtier-bench lookup: %s\n", report.status().ToString().c_str());
    }
    if (!stopped.ok()) {
      std::fprintf(stderr, "kvtier-bench lookup: %s\n", stopped.ToString().c_str());
    }
    const std::string log = daemon.LogTail();
    if (!log.empty()) {
      const std::string where = temporary ? "" : absl::StrCat(" (", *dir, "/kvtierd.log)");
      std::fprintf(stderr, "end of the kvtierd log%s:\n%s%s", where.c_str(), log.c_str(),
                   absl::EndsWith(log, "\n") ? "" : "\n");
    }
  }
  if (temporary) {
    if (absl::Status removed = RemoveScratchDir(*dir); !removed.ok()) {
      std::fprintf(stderr, "kvtier-bench lookup: %s\n", std::string(removed.message()).c_str());
    }
  }
  if (report.ok()) {
    if (flags.json) {
      std::printf("%s\n", ToJson(*report, flags, kvtierd).dump(2).c_str());
    } else {
      PrintTable(*report, flags, kvtierd);
    }
  }
  return exit_code;
}

}  // namespace kvtier::bench
