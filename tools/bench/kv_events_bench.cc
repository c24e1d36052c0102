// `kvtier-bench kv-events`: starts two kvtierd child processes (by default the binary next to
// kvtier-bench) with the same settings (a host tier of --host bytes, no disk tier, no pinning, a
// metrics listener on a free loopback port, the kv_events settings below) but for
// kv_events.enabled: false in "off", true in "on". "on" publishes on an ipc:// endpoint in its
// scratch directory, drained by a real subscriber, `kvtierctl watch --format=vllm` (the one next to
// kvtier-bench, or --kvtierctl), whose JSON lines go to a file there (counted at the end: a
// subscriber that received nothing fails the run). Each daemon gets one engine whose host pool is
// a file of 4096 pages of 1 KiB (a GQA layout of 1 layer, 1 KV head of 16 dims, 16 tokens, BF16;
// codec raw): small pages, so that the per-block costs publishing adds weigh the most.
//
// A run offloads fresh blocks into one daemon for --seconds: Offload RPCs of --batch items (each
// a fresh hash, a page index, and --tokens token ids (default the page's 16), which both daemons
// get; "off" only checks their count), acknowledged once stored (--ack=stored, the default: the RPC
// then includes the store's index and event-log updates), from one client thread, each timed on the
// client with steady_clock around the blocking call. Mode "paced" issues the RPCs on a fixed
// schedule of
// --rate blocks/s (an RPC that comes back late is followed at once, without catching up in a
// burst); mode "max" issues the next RPC as soon as the last returns. For each mode there are
// --rounds rounds, each a run on "off" and one on "on" (the order alternating from round to
// round; the idle daemon waits meanwhile), so that a machine's drift weighs on both alike. Each
// round gives on/off ratios of the mean, p50 and p99 RPC time; the table shows their medians and
// every round's mean ratio, the pooled percentiles of each daemon, blocks/s achieved, and
// the publisher's batches published and dropped during the "on" runs (from /metrics) with the
// subscriber's lines received. Every daemon and the subscriber are stopped at the end, on errors
// too. --cpus pins the daemons, the client (this process) and the subscriber to CPU sets, each
// child from its first thread (spawned by a thread pinned for the moment): on a machine with
// spare cores, disjoint sets keep the subscriber and the client off the daemons' cores. The CPUs
// each ran on are read back and reported, pinned or not.
//
// Run: build/bin/kvtier-bench kv-events --seconds=5 --rounds=7
#include "tools/bench/kv_events_bench.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
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
#include "common/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "kvtier/v1/service.grpc.pb.h"
#include "proto/codec_convert.h"
#include "tools/bench/bench_common.h"
#include "tools/bench/cpu_affinity.h"
#include "tools/bench/daemon_process.h"

extern char** environ;

namespace kvtier::bench {
namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr uint32_t kPoolSlots = 4096;
constexpr uint32_t kTokensPerPage = 16;
constexpr uint32_t kWarmupBlocks = 512;  // offloaded into each daemon before the runs
constexpr auto kRpcTimeout = std::chrono::seconds(20);
constexpr auto kSubscriberWait = std::chrono::seconds(20);
constexpr int kLeaseSeconds = 600;

struct KvEventsFlags {
  std::string kvtierd;    // empty: the kvtierd next to this binary
  std::string kvtierctl;  // empty: the kvtierctl next to this binary
  std::string dir;        // empty: a fresh directory under /tmp, removed at the end
  double seconds = 3;
  uint32_t rounds = 5;
  uint32_t rate = 10000;
  uint32_t batch = 16;
  uint32_t tokens = kTokensPerPage;  // token ids sent per block
  std::vector<std::string> modes = {"paced", "max"};
  std::string host = "256MiB";
  v1::WriteAck ack = v1::WRITE_ACK_STORED;
  bool json = false;
  // --cpus: the CPUs of each role; empty: unpinned (the CPUs kvtier-bench was started on).
  std::vector<int> daemon_cpus, client_cpus, subscriber_cpus;
};

// --cpus=daemon:0-3,client:4-5,subscriber:6: a role's CPU list runs to the next "role:" (so
// "daemon:0-1,4,client:2" gives the daemons 0, 1 and 4). Every CPU must be one this process may
// run on; sets may overlap (a machine with few cores), which the run then reports.
absl::Status ParseCpusFlag(absl::string_view text, KvEventsFlags* flags) {
  std::vector<int>* role = nullptr;
  std::string list;
  const auto finish = [&]() -> absl::Status {
    if (role == nullptr) return absl::OkStatus();
    absl::StatusOr<std::vector<int>> cpus = ParseCpuList(list);
    if (!cpus.ok()) return cli::UsageError(absl::StrCat("flag --cpus: ", cpus.status().message()));
    *role = *std::move(cpus);
    return absl::OkStatus();
  };
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    const size_t colon = part.find(':');
    if (colon == absl::string_view::npos) {
      if (role == nullptr) {
        return cli::UsageError(absl::StrCat("flag --cpus: '", part,
                                            "' has no role (daemon:, client: or subscriber:)"));
      }
      absl::StrAppend(&list, ",", part);
      continue;
    }
    KVTIER_RETURN_IF_ERROR(finish());
    const absl::string_view name = part.substr(0, colon);
    if (name == "daemon") {
      role = &flags->daemon_cpus;
    } else if (name == "client") {
      role = &flags->client_cpus;
    } else if (name == "subscriber") {
      role = &flags->subscriber_cpus;
    } else {
      return cli::UsageError(
          absl::StrCat("flag --cpus: role '", name, "' is not daemon, client or subscriber"));
    }
    if (!role->empty()) return cli::UsageError(absl::StrCat("flag --cpus: ", name, " given twice"));
    list = std::string(part.substr(colon + 1));
  }
  KVTIER_RETURN_IF_ERROR(finish());
  absl::StatusOr<std::vector<int>> allowed = AllowedCpus(0);
  if (!allowed.ok()) return allowed.status();
  for (const std::vector<int>* cpus :
       {&flags->daemon_cpus, &flags->client_cpus, &flags->subscriber_cpus}) {
    for (int cpu : *cpus) {
      if (!std::binary_search(allowed->begin(), allowed->end(), cpu)) {
        return cli::UsageError(absl::StrCat("flag --cpus: CPU ", cpu,
                                            " is not one this process may run on (",
                                            FormatCpuList(*allowed), ")"));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<KvEventsFlags> ParseFlags(const cli::Values& values) {
  KvEventsFlags flags;
  if (auto v = values.Get("kvtierd")) flags.kvtierd = *v;
  if (auto v = values.Get("kvtierctl")) flags.kvtierctl = *v;
  if (auto v = values.Get("dir")) flags.dir = *v;
  if (auto v = values.Get("host")) flags.host = *v;
  flags.json = values.Has("json");
  KVTIER_ASSIGN_OR_RETURN(std::optional<double> seconds, values.OptionalDouble("seconds"));
  if (seconds.has_value()) {
    if (!(*seconds > 0 && *seconds <= 3600)) {
      return cli::UsageError(absl::StrCat("flag --seconds: ", *seconds, " is outside (0, 3600]"));
    }
    flags.seconds = *seconds;
  }
  struct Bound {
    const char* name;
    uint32_t min, max;
    uint32_t* out;
  };
  for (const Bound& b :
       {Bound{"rounds", 1, 1000, &flags.rounds}, Bound{"rate", 1, 10'000'000, &flags.rate},
        Bound{"batch", 1, kPoolSlots, &flags.batch},
        Bound{"tokens", 0, kTokensPerPage, &flags.tokens}}) {
    KVTIER_ASSIGN_OR_RETURN(std::optional<uint32_t> v, values.OptionalUint32(b.name));
    if (!v.has_value()) continue;
    if (*v < b.min || *v > b.max) {
      return cli::UsageError(
          absl::StrFormat("flag --%s: %u is outside [%u, %u]", b.name, *v, b.min, b.max));
    }
    *b.out = *v;
  }
  if (auto v = values.Get("modes")) {
    flags.modes = absl::StrSplit(*v, ',');
    for (const std::string& m : flags.modes) {
      if (m != "paced" && m != "max") {
        return cli::UsageError(absl::StrCat("flag --modes: '", m, "' is not paced or max"));
      }
    }
  }
  if (auto v = values.Get("cpus")) KVTIER_RETURN_IF_ERROR(ParseCpusFlag(*v, &flags));
  if (auto v = values.Get("ack")) {
    if (*v == "read") {
      flags.ack = v1::WRITE_ACK_PAGES_READ;
    } else if (*v == "stored") {
      flags.ack = v1::WRITE_ACK_STORED;
    } else {
      return cli::UsageError(absl::StrCat("flag --ack: '", *v, "' is not read or stored"));
    }
  }
  return flags;
}

std::chrono::system_clock::time_point RpcDeadline() {
  return std::chrono::system_clock::now() + kRpcTimeout;
}

// The binary `name` in the directory of kvtier-bench (where DefaultKvtierd finds kvtierd).
absl::StatusOr<std::string> BesideKvtierd(const std::string& kvtierd, absl::string_view name) {
  const size_t slash = kvtierd.rfind('/');
  if (slash == std::string::npos) return absl::NotFoundError("no directory to look for kvtierctl");
  return absl::StrCat(kvtierd.substr(0, slash + 1), name);
}

// A free TCP port on 127.0.0.1 (bound and released); Internal with errno's text.
absl::StatusOr<int> FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  const int saved = errno;
  close(fd);
  if (!ok) return absl::InternalError(absl::StrCat("bind 127.0.0.1:0: ", std::strerror(saved)));
  return ntohs(addr.sin_port);
}

// The body of GET /metrics from 127.0.0.1:port. Unavailable when the listener cannot be reached.
absl::StatusOr<std::string> FetchMetrics(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int saved = errno;
    close(fd);
    return absl::UnavailableError(
        absl::StrCat("metrics on 127.0.0.1:", port, ": ", std::strerror(saved)));
  }
  const std::string req = "GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
  size_t sent = 0;
  while (sent < req.size()) {
    const ssize_t n = write(fd, req.data() + sent, req.size() - sent);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  std::string resp;
  char buf[8192];
  while (true) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    resp.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  const size_t body = resp.find("\r\n\r\n");
  if (!absl::StartsWith(resp, "HTTP/1.1 200") || body == std::string::npos) {
    return absl::UnavailableError(absl::StrCat("metrics on 127.0.0.1:", port, " answered '",
                                               resp.substr(0, resp.find("\r\n")), "'"));
  }
  return resp.substr(body + 4);
}

// The value of the sample `name` (a counter without labels); NotFound when it is absent.
absl::StatusOr<uint64_t> MetricValue(absl::string_view text, absl::string_view name) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::ConsumePrefix(&line, name) || !absl::ConsumePrefix(&line, " ")) continue;
    double v = 0;
    if (absl::SimpleAtod(line, &v)) return static_cast<uint64_t>(v);
  }
  return absl::NotFoundError(absl::StrCat("no sample ", name, " in /metrics"));
}

// User and system CPU seconds that process `pid` has used so far (/proc/<pid>/stat); 0 when it
// cannot be read.
double CpuSeconds(pid_t pid) {
  if (pid <= 0) return 0;
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  const std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t comm_end = stat.rfind(')');
  if (comm_end == std::string::npos) return 0;
  // After the command: state (field 3), ..., utime (field 14), stime (field 15).
  std::vector<absl::string_view> fields =
      absl::StrSplit(absl::string_view(stat).substr(comm_end + 1), ' ', absl::SkipEmpty());
  uint64_t utime = 0, stime = 0;
  if (fields.size() < 13 || !absl::SimpleAtoi(fields[11], &utime) ||
      !absl::SimpleAtoi(fields[12], &stime)) {
    return 0;
  }
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

struct PublisherCounters {
  uint64_t published = 0, dropped = 0, lost = 0;
};

absl::StatusOr<PublisherCounters> ReadPublisherCounters(int port) {
  KVTIER_ASSIGN_OR_RETURN(std::string text, FetchMetrics(port));
  PublisherCounters c;
  KVTIER_ASSIGN_OR_RETURN(c.published, MetricValue(text, "kvtier_kv_events_published_total"));
  KVTIER_ASSIGN_OR_RETURN(c.dropped, MetricValue(text, "kvtier_kv_events_dropped_total"));
  KVTIER_ASSIGN_OR_RETURN(c.lost, MetricValue(text, "kvtier_kv_events_lost_total"));
  return c;
}

// `kvtierctl watch --format=vllm --endpoint=E` as a child process, its stdout to a file (one JSON
// line per KV event received) and its stderr to another. The destructor kills (SIGKILL) and reaps
// one that Stop() did not stop.
class Subscriber {
 public:
  Subscriber() = default;
  ~Subscriber() {
    if (pid_ != 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  Subscriber(const Subscriber&) = delete;
  Subscriber& operator=(const Subscriber&) = delete;

  // Spawns the subscriber on `cpus` (empty: this thread's).
  absl::Status Start(const std::string& kvtierctl, const std::string& endpoint,
                     const std::string& output, const std::string& log,
                     const std::vector<int>& cpus) {
    if (access(kvtierctl.c_str(), X_OK) != 0) {
      return absl::NotFoundError(
          absl::StrCat("kvtierctl '", kvtierctl, "' is not executable (--kvtierctl=PATH)"));
    }
    output_ = output;
    log_ = log;
    std::vector<std::string> args = {kvtierctl, "watch", "--format=vllm",
                                     absl::StrCat("--endpoint=", endpoint)};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, output_.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    posix_spawn_file_actions_addopen(&actions, 2, log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int rc = 0;
    {
      ScopedThreadAffinity pinned(cpus);  // the child inherits the spawning thread's CPUs
      if (!pinned.status().ok()) {
        posix_spawn_file_actions_destroy(&actions);
        return pinned.status();
      }
      rc = posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ);
    }
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) {
      pid_ = 0;
      return absl::InternalError(
          absl::StrCat("posix_spawn '", kvtierctl, "': ", std::strerror(rc)));
    }
    return absl::OkStatus();
  }

  // FailedPrecondition (with its stderr) when the subscriber has exited.
  absl::Status CheckRunning() {
    int wstatus = 0;
    if (pid_ == 0 || waitpid(pid_, &wstatus, WNOHANG) != pid_) return absl::OkStatus();
    pid_ = 0;
    return absl::FailedPreconditionError(absl::StrCat(
        "the subscriber (kvtierctl watch) exited (wait status ", wstatus, "): ", ReadAll(log_)));
  }

  // SIGTERM, then waits (SIGKILL after 10 s). An error when it had exited already or did not
  // exit with status 0.
  absl::Status Stop() {
    if (pid_ == 0) return absl::OkStatus();
    const pid_t pid = pid_;
    pid_ = 0;
    kill(pid, SIGTERM);
    const Clock::time_point deadline = Clock::now() + std::chrono::seconds(10);
    int wstatus = 0;
    pid_t reaped;
    while ((reaped = waitpid(pid, &wstatus, WNOHANG)) == 0 && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (reaped == 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      return absl::InternalError("the subscriber did not stop within 10 s of SIGTERM");
    }
    if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
      return absl::InternalError(
          absl::StrCat("the subscriber ended with wait status ", wstatus, ": ", ReadAll(log_)));
    }
    return absl::OkStatus();
  }

  pid_t pid() const { return pid_; }

  // Lines (KV events) it has written so far.
  uint64_t Lines() const {
    std::ifstream in(output_, std::ios::binary);
    uint64_t lines = 0;
    char buf[65536];
    while (in.read(buf, sizeof(buf)) || in.gcount() > 0) {
      lines += static_cast<uint64_t>(std::count(buf, buf + in.gcount(), '\n'));
    }
    return lines;
  }

 private:
  static std::string ReadAll(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }

  pid_t pid_ = 0;
  std::string output_, log_;
};

// One daemon under test, its engine, and the blocks offloaded into it so far.
struct Target {
  std::string name;  // "off", "on"
  std::string dir;
  int metrics_port = 0;
  DaemonProcess daemon;
  std::string engine_id;
  uint64_t hot_page_bytes = 0;
  uint64_t next_block = 0;
};

absl::Status RegisterEngine(Target& t) {
  KVTIER_ASSIGN_OR_RETURN(
      codec::PageLayout layout,
      codec::BuildGqaLayout({1, 1, 16, kTokensPerPage, codec::DType::kBf16, 0, 0}));
  KVTIER_ASSIGN_OR_RETURN(codec::CodecSpec codec, codec::CodecSpec::Parse("raw"));
  const std::string pool_path = t.dir + "/host-pool";
  const uint64_t pool_bytes = layout.pools[0].slot_bytes * kPoolSlots;
  const int fd = open(pool_path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("open ", pool_path, ": ", std::strerror(errno)));
  }
  const int truncated = ftruncate(fd, static_cast<off_t>(pool_bytes));
  const int truncate_errno = errno;
  close(fd);
  if (truncated != 0) {
    return absl::InternalError(
        absl::StrCat("ftruncate ", pool_path, ": ", std::strerror(truncate_errno)));
  }
  v1::RegisterEngineRequest reg;
  reg.set_engine_name("kvtier-bench-kv-events");
  reg.set_model("kvtier-bench");
  proto::LayoutToProto(layout, reg.mutable_layout());
  proto::CodecToProto(codec, reg.mutable_codec());
  v1::PoolRegistration* pool = reg.add_pools();
  pool->set_name(layout.pools[0].name);
  pool->set_slots(kPoolSlots);
  pool->mutable_shared_memory()->set_path(pool_path);
  pool->mutable_shared_memory()->set_size_bytes(pool_bytes);
  reg.mutable_lease_ttl()->set_seconds(kLeaseSeconds);
  v1::RegisterEngineResponse registered;
  grpc::ClientContext ctx;
  ctx.set_deadline(RpcDeadline());
  if (grpc::Status st = t.daemon.stub().RegisterEngine(&ctx, reg, &registered); !st.ok()) {
    return RpcError("RegisterEngine", st);
  }
  t.engine_id = registered.engine_id();
  t.hot_page_bytes = registered.hot_page_bytes();
  return absl::OkStatus();
}

// The Offload of the target's next `batch` blocks: fresh hashes, pages in turn, 16 token ids each.
v1::OffloadRequest NextOffload(Target& t, uint32_t batch, uint32_t tokens, v1::WriteAck ack) {
  v1::OffloadRequest req;
  req.set_engine_id(t.engine_id);
  req.set_ack(ack);
  for (uint32_t i = 0; i < batch; ++i) {
    const uint64_t block = t.next_block++;
    v1::OffloadItem* item = req.add_items();
    item->set_block_hash(SyntheticBlockHash(block));
    item->set_page_index(static_cast<uint32_t>(block % kPoolSlots));
    for (uint32_t k = 0; k < tokens; ++k) {
      item->add_token_ids(static_cast<uint32_t>((block * kTokensPerPage + k) % 151'000));
    }
  }
  return req;
}

// One timed Offload; its RPC time in microseconds. An error for a failed RPC or an item that was
// not newly stored.
absl::StatusOr<double> TimedOffload(Target& t, const v1::OffloadRequest& req) {
  v1::OffloadResponse resp;
  const Clock::time_point start = Clock::now();
  grpc::ClientContext ctx;
  ctx.set_deadline(RpcDeadline());
  const grpc::Status st = t.daemon.stub().Offload(&ctx, req, &resp);
  const double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
  if (!st.ok()) return RpcError(absl::StrCat("Offload into '", t.name, "'"), st);
  if (resp.results_size() != req.items_size()) {
    return absl::InternalError(absl::StrFormat("Offload of %d items answered %d results",
                                               req.items_size(), resp.results_size()));
  }
  for (const v1::ItemResult& r : resp.results()) {
    if (r.code() != v1::ITEM_CODE_OK) {
      return absl::InternalError(absl::StrFormat("Offload into '%s': an item answered %s: %s",
                                                 t.name, v1::ItemCode_Name(r.code()), r.message()));
    }
  }
  return us;
}

struct RunResult {
  std::vector<double> rpc_us;
  uint64_t blocks = 0;
  double seconds = 0;
  PublisherCounters publisher;  // during the run ("on" only)
  double daemon_cpu_s = 0;      // the daemon's CPU time during the run
  double subscriber_cpu_s = 0;  // the subscriber's ("on" only)
};

// Offloads into `t` for flags.seconds, paced (`paced`) or back to back.
absl::StatusOr<RunResult> RunLoad(Target& t, const KvEventsFlags& flags, bool paced) {
  RunResult r;
  const auto interval = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(static_cast<double>(flags.batch) / flags.rate));
  const Clock::time_point start = Clock::now();
  const Clock::time_point end = start + std::chrono::duration_cast<Clock::duration>(
                                            std::chrono::duration<double>(flags.seconds));
  Clock::time_point next = start;
  while (true) {
    if (paced) {
      if (next >= end) break;
      std::this_thread::sleep_until(next);
      next += interval;
      // Late: the next RPC goes at once, and the schedule restarts from now (no burst).
      if (next < Clock::now()) next = Clock::now();
    } else if (Clock::now() >= end) {
      break;
    }
    const v1::OffloadRequest req = NextOffload(t, flags.batch, flags.tokens, flags.ack);
    KVTIER_ASSIGN_OR_RETURN(double us, TimedOffload(t, req));
    r.rpc_us.push_back(us);
    r.blocks += flags.batch;
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return r;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

struct RoundRatios {
  double mean = 0, p50 = 0, p99 = 0;
};

struct ModeReport {
  std::string mode;
  std::vector<RoundRatios> rounds;
  LatencySummary off, on;  // pooled over the rounds
  double off_blocks_per_s = 0, on_blocks_per_s = 0;
  uint64_t off_blocks = 0, on_blocks = 0;
  PublisherCounters publisher;  // summed over the "on" runs
  RoundRatios median;
  double off_cpu_s = 0, on_cpu_s = 0, subscriber_cpu_s = 0;  // summed over the runs
};

struct Report {
  std::string server_version;
  uint64_t hot_page_bytes = 0;
  std::vector<ModeReport> modes;
  PublisherCounters publisher_total;  // the "on" daemon's counters at the end
  uint64_t subscriber_lines = 0;
  // The CPUs each ran on (read back from the kernel): both daemons, the client, the subscriber.
  std::string daemon_cpus, client_cpus, subscriber_cpus;
};

// The CPUs of `pid` as a list; an error when they are not `want` (when `want` is not empty).
absl::StatusOr<std::string> CheckCpus(pid_t pid, const std::vector<int>& want,
                                      absl::string_view who) {
  KVTIER_ASSIGN_OR_RETURN(std::vector<int> cpus, AllowedCpus(pid));
  if (!want.empty() && cpus != want) {
    return absl::InternalError(absl::StrCat(who, " runs on CPUs ", FormatCpuList(cpus), ", not ",
                                            FormatCpuList(want), " (--cpus)"));
  }
  return FormatCpuList(cpus);
}

absl::Status StartTarget(Target& t, const std::string& kvtierd, const std::string& dir,
                         const KvEventsFlags& flags, const std::string& endpoint) {
  t.dir = dir;
  KVTIER_ASSIGN_OR_RETURN(t.metrics_port, FreeLoopbackPort());
  const std::vector<std::string> settings = {
      "host.capacity=" + flags.host,
      "host.chunk=4MiB",
      "host.pin=none",
      "disk.capacity=0",
      "pools.allowed_dirs=[" + dir + "]",
      absl::StrCat("metrics.listen=\"127.0.0.1:", t.metrics_port, "\""),
      absl::StrCat("kv_events.enabled=", t.name == "on" ? "true" : "false"),
      "kv_events.endpoint=\"" + endpoint + "\""};
  DaemonStartOptions options;
  options.client_name = "kvtier-bench kv-events";
  options.cpus = flags.daemon_cpus;
  KVTIER_RETURN_IF_ERROR(t.daemon.Start(kvtierd, dir, settings, options));
  return RegisterEngine(t);
}

// Offloads kWarmupBlocks into `t`.
absl::Status Warm(Target& t, const KvEventsFlags& flags) {
  while (t.next_block < kWarmupBlocks) {
    KVTIER_RETURN_IF_ERROR(
        TimedOffload(t, NextOffload(t, flags.batch, flags.tokens, flags.ack)).status());
  }
  return absl::OkStatus();
}

absl::StatusOr<Report> RunBench(Target& off, Target& on, Subscriber& subscriber,
                                const std::string& kvtierd, const std::string& kvtierctl,
                                const KvEventsFlags& flags, const std::string& dir) {
  const std::string endpoint = "ipc://" + dir + "/on/kv-events.ipc";
  for (Target* t : {&off, &on}) {
    const std::string sub = dir + "/" + t->name;
    if (mkdir(sub.c_str(), 0700) != 0 && errno != EEXIST) {
      return absl::InternalError(absl::StrCat("mkdir ", sub, ": ", std::strerror(errno)));
    }
    KVTIER_RETURN_IF_ERROR(StartTarget(*t, kvtierd, sub, flags, endpoint));
  }
  KVTIER_RETURN_IF_ERROR(subscriber.Start(kvtierctl, endpoint, dir + "/on/subscriber.jsonl",
                                          dir + "/on/subscriber.log", flags.subscriber_cpus));
  Report report;
  KVTIER_ASSIGN_OR_RETURN(report.daemon_cpus,
                          CheckCpus(off.daemon.pid(), flags.daemon_cpus, "the 'off' kvtierd"));
  KVTIER_ASSIGN_OR_RETURN(std::string on_cpus,
                          CheckCpus(on.daemon.pid(), flags.daemon_cpus, "the 'on' kvtierd"));
  if (on_cpus != report.daemon_cpus) {
    return absl::InternalError(absl::StrCat(
        "the kvtierd processes run on different CPUs: ", report.daemon_cpus, " and ", on_cpus));
  }
  KVTIER_ASSIGN_OR_RETURN(report.client_cpus, CheckCpus(0, flags.client_cpus, "the client"));
  KVTIER_ASSIGN_OR_RETURN(report.subscriber_cpus,
                          CheckCpus(subscriber.pid(), flags.subscriber_cpus, "the subscriber"));
  if (!flags.json) {
    std::fprintf(stderr,
                 "kvtierd %s: off (pid %d), on (pid %d, publishing on %s); CPUs: daemons %s, "
                 "client %s, subscriber %s\n",
                 off.daemon.hello().server_version().c_str(), static_cast<int>(off.daemon.pid()),
                 static_cast<int>(on.daemon.pid()), endpoint.c_str(), report.daemon_cpus.c_str(),
                 report.client_cpus.c_str(), report.subscriber_cpus.c_str());
  }
  // The subscriber is subscribed once it has received something: offload until it has.
  KVTIER_RETURN_IF_ERROR(Warm(off, flags));
  const Clock::time_point deadline = Clock::now() + kSubscriberWait;
  while (subscriber.Lines() == 0) {
    KVTIER_RETURN_IF_ERROR(subscriber.CheckRunning());
    if (Clock::now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrFormat("the subscriber received no KV event within %d s of offloads",
                          static_cast<int>(kSubscriberWait.count())));
    }
    KVTIER_RETURN_IF_ERROR(
        TimedOffload(on, NextOffload(on, flags.batch, flags.tokens, flags.ack)).status());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  KVTIER_RETURN_IF_ERROR(Warm(on, flags));

  report.server_version = on.daemon.hello().server_version();
  report.hot_page_bytes = on.hot_page_bytes;
  for (const std::string& mode : flags.modes) {
    ModeReport m;
    m.mode = mode;
    std::vector<double> off_all, on_all;
    double off_seconds = 0, on_seconds = 0;
    for (uint32_t round = 0; round < flags.rounds; ++round) {
      RunResult results[2];  // off, on
      for (int k = 0; k < 2; ++k) {
        const int which = (round % 2 == 0) ? k : 1 - k;  // off first in even rounds
        Target& t = which == 0 ? off : on;
        PublisherCounters before;
        if (which == 1) {
          KVTIER_ASSIGN_OR_RETURN(before, ReadPublisherCounters(t.metrics_port));
        }
        const double daemon_cpu = CpuSeconds(t.daemon.pid());
        const double subscriber_cpu = which == 1 ? CpuSeconds(subscriber.pid()) : 0;
        KVTIER_ASSIGN_OR_RETURN(results[which], RunLoad(t, flags, mode == "paced"));
        results[which].daemon_cpu_s = CpuSeconds(t.daemon.pid()) - daemon_cpu;
        if (which == 1) {
          results[1].subscriber_cpu_s = CpuSeconds(subscriber.pid()) - subscriber_cpu;
          KVTIER_ASSIGN_OR_RETURN(PublisherCounters after, ReadPublisherCounters(t.metrics_port));
          results[1].publisher = {after.published - before.published,
                                  after.dropped - before.dropped, after.lost - before.lost};
          KVTIER_RETURN_IF_ERROR(subscriber.CheckRunning());
        }
      }
      const LatencySummary a = Summarize(results[0].rpc_us);
      const LatencySummary b = Summarize(results[1].rpc_us);
      const RoundRatios ratio{b.mean_us / a.mean_us, b.p50_us / a.p50_us, b.p99_us / a.p99_us};
      m.rounds.push_back(ratio);
      if (!flags.json) {
        std::fprintf(stderr,
                     "%s round %u: off mean %.1f us (%.0f blocks/s), on mean %.1f us (%.0f "
                     "blocks/s): on/off %.3f\n",
                     mode.c_str(), round + 1, a.mean_us,
                     static_cast<double>(results[0].blocks) / results[0].seconds, b.mean_us,
                     static_cast<double>(results[1].blocks) / results[1].seconds, ratio.mean);
      }
      off_all.insert(off_all.end(), results[0].rpc_us.begin(), results[0].rpc_us.end());
      on_all.insert(on_all.end(), results[1].rpc_us.begin(), results[1].rpc_us.end());
      m.off_blocks += results[0].blocks;
      m.on_blocks += results[1].blocks;
      off_seconds += results[0].seconds;
      on_seconds += results[1].seconds;
      m.publisher.published += results[1].publisher.published;
      m.publisher.dropped += results[1].publisher.dropped;
      m.publisher.lost += results[1].publisher.lost;
      m.off_cpu_s += results[0].daemon_cpu_s;
      m.on_cpu_s += results[1].daemon_cpu_s;
      m.subscriber_cpu_s += results[1].subscriber_cpu_s;
    }
    m.off = Summarize(std::move(off_all));
    m.on = Summarize(std::move(on_all));
    m.off_blocks_per_s = static_cast<double>(m.off_blocks) / off_seconds;
    m.on_blocks_per_s = static_cast<double>(m.on_blocks) / on_seconds;
    std::vector<double> means, p50s, p99s;
    for (const RoundRatios& r : m.rounds) {
      means.push_back(r.mean);
      p50s.push_back(r.p50);
      p99s.push_back(r.p99);
    }
    m.median = {Median(means), Median(p50s), Median(p99s)};
    report.modes.push_back(std::move(m));
  }
  // What the subscriber got: every batch published has reached it once the daemon has stopped
  // publishing for a moment.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  KVTIER_ASSIGN_OR_RETURN(report.publisher_total, ReadPublisherCounters(on.metrics_port));
  report.subscriber_lines = subscriber.Lines();
  if (report.subscriber_lines == 0) {
    return absl::FailedPreconditionError("the subscriber received no KV event");
  }
  return report;
}

std::string Ratios(const std::vector<RoundRatios>& rounds) {
  std::vector<std::string> parts;
  for (const RoundRatios& r : rounds) parts.push_back(absl::StrFormat("%.3f", r.mean));
  return absl::StrJoin(parts, " ");
}

void PrintTable(const Report& report, const KvEventsFlags& flags) {
  std::printf(
      "kvtierd %s; Offloads of %u blocks of %llu B with %u token ids each, acknowledged %s; "
      "%u rounds of %.1f s per daemon and mode, off and on alternating\n",
      report.server_version.c_str(), flags.batch,
      static_cast<unsigned long long>(report.hot_page_bytes), flags.tokens,
      flags.ack == v1::WRITE_ACK_STORED ? "once stored" : "once read", flags.rounds, flags.seconds);
  std::printf("CPUs: daemons %s, client %s, subscriber %s\n", report.daemon_cpus.c_str(),
              report.client_cpus.c_str(), report.subscriber_cpus.c_str());
  std::printf("%-8s %-9s %10s %9s %9s %9s %12s %14s\n", "mode", "kv_events", "blocks/s", "mean us",
              "p50 us", "p99 us", "us per block", "CPU us/block");
  for (const ModeReport& m : report.modes) {
    const std::string mode =
        m.mode == "paced" ? absl::StrFormat("%u/s", flags.rate) : std::string("max");
    for (int k = 0; k < 2; ++k) {
      const LatencySummary& l = k == 0 ? m.off : m.on;
      const double blocks = static_cast<double>(k == 0 ? m.off_blocks : m.on_blocks);
      const double cpu_us = 1e6 * (k == 0 ? m.off_cpu_s : m.on_cpu_s) / blocks;
      std::printf("%-8s %-9s %10.0f %9.1f %9.1f %9.1f %12.2f %14.2f\n", mode.c_str(),
                  k == 0 ? "off" : "on", k == 0 ? m.off_blocks_per_s : m.on_blocks_per_s, l.mean_us,
                  l.p50_us, l.p99_us, l.mean_us / flags.batch, cpu_us);
    }
    std::printf("%-8s %-9s %10s %9s %9s %9s %12s %14.2f\n", mode.c_str(), "subscriber", "", "", "",
                "", "", 1e6 * m.subscriber_cpu_s / static_cast<double>(m.on_blocks));
  }
  std::printf("on/off, median of the rounds' ratios (each round's mean ratio):\n");
  for (const ModeReport& m : report.modes) {
    const std::string mode =
        m.mode == "paced" ? absl::StrFormat("%u/s", flags.rate) : std::string("max");
    std::printf("%-8s mean %.3f  p50 %.3f  p99 %.3f   (%s)\n", mode.c_str(), m.median.mean,
                m.median.p50, m.median.p99, Ratios(m.rounds).c_str());
  }
  std::printf("publisher during the on runs:");
  for (const ModeReport& m : report.modes) {
    std::printf(" %s: %llu batches published, %llu dropped, %llu lost;", m.mode.c_str(),
                static_cast<unsigned long long>(m.publisher.published),
                static_cast<unsigned long long>(m.publisher.dropped),
                static_cast<unsigned long long>(m.publisher.lost));
  }
  std::printf(
      "\nin all: %llu batches published, %llu dropped, %llu lost; the subscriber received %llu "
      "KV events\n",
      static_cast<unsigned long long>(report.publisher_total.published),
      static_cast<unsigned long long>(report.publisher_total.dropped),
      static_cast<unsigned long long>(report.publisher_total.lost),
      static_cast<unsigned long long>(report.subscriber_lines));
}

Json LatencyJson(const LatencySummary& l) {
  return Json{{"count", l.count},
              {"mean", l.mean_us},
              {"p50", l.p50_us},
              {"p99", l.p99_us},
              {"max", l.max_us}};
}

Json CountersJson(const PublisherCounters& c) {
  return Json{{"published_batches", c.published},
              {"dropped_batches", c.dropped},
              {"lost_log_events", c.lost}};
}

Json ToJson(const Report& report, const KvEventsFlags& flags) {
  Json doc;
  doc["server_version"] = report.server_version;
  doc["hot_page_bytes"] = report.hot_page_bytes;
  doc["tokens_per_page"] = kTokensPerPage;
  doc["token_ids_per_block"] = flags.tokens;
  doc["batch"] = flags.batch;
  doc["rate"] = flags.rate;
  doc["seconds"] = flags.seconds;
  doc["rounds"] = flags.rounds;
  doc["ack"] = flags.ack == v1::WRITE_ACK_STORED ? "stored" : "read";
  Json modes = Json::array();
  for (const ModeReport& m : report.modes) {
    Json j;
    j["mode"] = m.mode;
    j["off"] = {{"rpc_us", LatencyJson(m.off)},
                {"blocks", m.off_blocks},
                {"blocks_per_s", m.off_blocks_per_s},
                {"daemon_cpu_s", m.off_cpu_s}};
    j["on"] = {{"rpc_us", LatencyJson(m.on)},
               {"blocks", m.on_blocks},
               {"blocks_per_s", m.on_blocks_per_s},
               {"daemon_cpu_s", m.on_cpu_s},
               {"subscriber_cpu_s", m.subscriber_cpu_s},
               {"publisher", CountersJson(m.publisher)}};
    Json rounds = Json::array();
    for (const RoundRatios& r : m.rounds) {
      rounds.push_back({{"mean", r.mean}, {"p50", r.p50}, {"p99", r.p99}});
    }
    j["round_ratios"] = std::move(rounds);
    j["median_ratio"] = {{"mean", m.median.mean}, {"p50", m.median.p50}, {"p99", m.median.p99}};
    modes.push_back(std::move(j));
  }
  doc["modes"] = std::move(modes);
  doc["publisher"] = CountersJson(report.publisher_total);
  doc["subscriber_events"] = report.subscriber_lines;
  doc["cpus"] = {{"daemon", report.daemon_cpus},
                 {"client", report.client_cpus},
                 {"subscriber", report.subscriber_cpus}};
  return doc;
}

}  // namespace

void DeclareKvEventsBenchFlags(cli::Command& command) {
  command.SetDescription(
      "Offload RPC time of a real kvtierd with kv_events on (a kvtierctl watch subscriber "
      "draining\n"
      "its PUB socket) against the same daemon with kv_events off, in alternating runs, paced at\n"
      "--rate blocks/s and as fast as one client goes.");
  command.AddFlag("kvtierd", "PATH",
                  "the daemon binary (default: kvtierd in the directory of kvtier-bench)");
  command.AddFlag("kvtierctl", "PATH",
                  "the subscriber's binary (default: kvtierctl in the directory of kvtier-bench)");
  command.AddFlag("dir", "DIR",
                  "scratch directory for both daemons' state, sockets, logs and pools and the\n"
                  "subscriber's output; created if missing, and kept (default: a fresh directory\n"
                  "under /tmp, removed at the end)");
  command.AddFlag("seconds", "S", "length of each run (default 3)");
  command.AddFlag("rounds", "N", "rounds per mode, each an off and an on run (default 5)");
  command.AddFlag("rate", "N", "blocks per second of the paced mode (default 10000)");
  command.AddFlag("batch", "N", "blocks per Offload RPC, 1 to 4096 (default 16)");
  command.AddFlag("tokens", "N", "token ids sent with each block, 0 to 16 (default 16)");
  command.AddFlag("modes", "M,...", "paced, max or both (default paced,max)");
  command.AddFlag("host", "SIZE", "the daemons' host.capacity (default 256MiB)");
  command.AddFlag("ack", "WHEN", "stored (default) or read: the Offloads' acknowledgement");
  command.AddFlag("cpus", "ROLE:LIST,...",
                  "pin the processes: daemon (both kvtierd), client (this process) and\n"
                  "subscriber, each to a Linux CPU list, e.g. daemon:0-3,client:4-5,subscriber:6\n"
                  "(a list runs to the next ROLE:, so daemon:0-1,4 is 0, 1 and 4); roles left out\n"
                  "run on the CPUs kvtier-bench started on (default: nothing pinned)");
  command.AddSwitch("json", "print JSON instead of the table");
}

int RunKvEventsBench(const cli::Values& values) {
  absl::StatusOr<KvEventsFlags> parsed = ParseFlags(values);
  if (!parsed.ok()) return values.PrintUsageError(parsed.status().message());
  KvEventsFlags& flags = *parsed;
  const auto fail = [](const absl::Status& st) {
    std::fprintf(stderr, "kvtier-bench kv-events: %s\n", st.ToString().c_str());
    return 1;
  };
  std::string kvtierd = flags.kvtierd;
  if (kvtierd.empty()) {
    absl::StatusOr<std::string> found = DefaultKvtierd();
    if (!found.ok()) return fail(found.status());
    kvtierd = *std::move(found);
  }
  std::string kvtierctl = flags.kvtierctl;
  if (kvtierctl.empty()) {
    absl::StatusOr<std::string> self = DefaultKvtierd();
    if (!self.ok()) return fail(self.status());
    absl::StatusOr<std::string> found = BesideKvtierd(*self, "kvtierctl");
    if (!found.ok()) return fail(found.status());
    kvtierctl = *std::move(found);
  }
  // The client's CPUs are this thread's from here on (gRPC's threads start later and inherit
  // them); the roles left out keep the CPUs kvtier-bench started on.
  if (!flags.client_cpus.empty()) {
    absl::StatusOr<std::vector<int>> started_on = AllowedCpus(0);
    if (!started_on.ok()) return fail(started_on.status());
    if (flags.daemon_cpus.empty()) flags.daemon_cpus = *started_on;
    if (flags.subscriber_cpus.empty()) flags.subscriber_cpus = *started_on;
    if (absl::Status st = PinCallingThread(flags.client_cpus); !st.ok()) return fail(st);
  }
  {
    const auto shared = [](const std::vector<int>& a, const std::vector<int>& b) {
      std::vector<int> both;
      std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(both));
      return both;
    };
    const struct {
      const char* names;
      std::vector<int> cpus;
    } overlaps[] = {
        {"the daemons and the client", shared(flags.daemon_cpus, flags.client_cpus)},
        {"the daemons and the subscriber", shared(flags.daemon_cpus, flags.subscriber_cpus)},
        {"the client and the subscriber", shared(flags.client_cpus, flags.subscriber_cpus)}};
    for (const auto& o : overlaps) {
      if (!o.cpus.empty()) {
        std::fprintf(stderr, "kvtier-bench kv-events: note: %s share CPUs %s (--cpus)\n", o.names,
                     FormatCpuList(o.cpus).c_str());
      }
    }
  }
  bool temporary = false;
  absl::StatusOr<std::string> dir =
      PrepareScratchDir(flags.dir, "kvtier-bench-kv-events", &temporary);
  if (!dir.ok()) return fail(dir.status());

  Target off, on;
  off.name = "off";
  on.name = "on";
  Subscriber subscriber;
  absl::StatusOr<Report> report = RunBench(off, on, subscriber, kvtierd, kvtierctl, flags, *dir);
  // On errors too.
  const absl::Status sub_stopped = subscriber.Stop();
  const absl::Status off_stopped = off.daemon.Stop();
  const absl::Status on_stopped = on.daemon.Stop();
  int exit_code = 0;
  for (const absl::Status& st : {report.status(), sub_stopped, off_stopped, on_stopped}) {
    if (!st.ok()) exit_code = fail(st);
  }
  if (exit_code != 0) {
    for (Target* t : {&off, &on}) {
      const std::string log = t->daemon.LogTail();
      if (log.empty()) continue;
      std::fprintf(stderr, "end of the '%s' kvtierd log:\n%s%s", t->name.c_str(), log.c_str(),
                   absl::EndsWith(log, "\n") ? "" : "\n");
    }
  }
  if (temporary) {
    if (absl::Status removed = RemoveScratchDir(*dir); !removed.ok()) fail(removed);
  }
  if (report.ok()) {
    if (flags.json) {
      std::printf("%s\n", ToJson(*report, flags).dump(2).c_str());
    } else {
      PrintTable(*report, flags);
    }
  }
  return exit_code;
}

}  // namespace kvtier::bench
