// `kvtier-bench fairness`: starts kvtierd (by default the binary next to kvtier-bench) as a child
// process with --workers worker threads, a host tier of --host bytes and no disk tier unless
// --disk is given, and registers --bulk-engines "bulk" engines and one "probe" engine, each on a
// gRPC channel (and connection) of its own. A bulk engine's host pool is a file of --batch pages
// of --page-kib KiB (a GQA layout of BF16 layers, 1 KV head of 128 dims, 16 tokens; random N(0, 1)
// values); its codec is the next of --bulk-codecs in turn. While a phase is loaded, every bulk
// engine loops on its own thread: an Offload of all its pages under fresh hashes (acknowledged
// once stored), then an Onboard of those hashes back into the same pages. The probe engine holds
// 64 pages of the same size (nvfp4), offloaded and pinned at the start; it alternates a Lookup of
// their 64 hashes (engine scope) with an Onboard of one of them, --probes of each per phase with
// --probe-gap-ms between calls, each timed on the client with steady_clock around the blocking
// call. A run has --rounds rounds of an unloaded phase (the probe alone: the baseline) followed by
// a loaded one (the probe starts --warmup-ms after every bulk engine has sent its first batch; the
// bulk threads stop after the probe's last call, or --loaded-seconds after they started if that is
// later, and finish the RPC they are in). The table gives each probe's p50, p99 and max in both
// conditions and the loaded ones as ratios to the unloaded ones, and the bulk engines' pages per
// second while loaded. With --baseline-kvtierd a second daemon (an older build) is measured in the
// same run, the same way, on a scratch directory of its own: the rounds alternate between the two
// daemons (the baseline first in odd rounds, the daemon under test first in even ones; the other
// one idles meanwhile), and each gets its table, its ratios against its own unloaded phases. A
// probe whose Lookup does not hit all 64 pinned blocks, or whose Onboard does not onboard its
// page, fails the run, as does any failed RPC. Each kvtierd is stopped with SIGTERM at the end, on
// errors too.
//
// Run: build/bin/kvtier-bench fairness --workers=2 --bulk-engines=4 --rounds=3
//        --baseline-kvtierd=/path/to/old/kvtierd   (one line)
#include "tools/bench/fairness_bench.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "codec/codec_spec.h"
#include "codec/dtype.h"
#include "codec/page_layout.h"
#include "common/annotate.h"
#include "common/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "kvtier/v1/service.grpc.pb.h"
#include "proto/codec_convert.h"
#include "tools/bench/bench_common.h"
#include "tools/bench/daemon_process.h"

namespace kvtier::bench {
namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr uint32_t kProbePages = 64;  // the probe's chain: Lookup of all, Onboard of one
constexpr int kLeaseSeconds = 600;    // asked for; every RPC renews it anyway
// Long enough that a stall of seconds is measured rather than failed.
constexpr auto kRpcTimeout = std::chrono::seconds(300);
constexpr uint32_t kDistinctPages = 16;  // random pages tiled over each pool

struct FairnessFlags {
  std::string kvtierd;                // empty: the kvtierd next to this binary
  std::string baseline_kvtierd;       // empty: none
  std::vector<std::string> settings;  // --set, for `kvtierd` only
  std::string dir;                    // empty: a fresh directory under /tmp, removed at the end
  uint32_t workers = 2;
  uint32_t bulk_engines = 4;
  std::vector<std::string> bulk_codecs = {"nvfp4", "raw"};
  uint32_t page_kib = 32;
  uint32_t batch = 4096;
  uint32_t probes = 200;
  uint32_t rounds = 3;
  uint32_t warmup_ms = 500;
  uint32_t probe_gap_ms = 2;
  uint32_t loaded_seconds = 10;
  std::string host = "2GiB";
  std::string disk = "0";
  bool json = false;
};

// Reads flag `name` into `*out` when given, within [min, max].
absl::Status ReadUint(const cli::Values& values, absl::string_view name, uint32_t min, uint32_t max,
                      uint32_t* out) {
  absl::StatusOr<std::optional<uint32_t>> v = values.OptionalUint32(name);
  if (!v.ok()) return v.status();
  if (!v->has_value()) return absl::OkStatus();
  if (**v < min || **v > max) {
    return cli::UsageError(
        absl::StrFormat("flag --%s: %d is outside [%d, %d]", name, **v, min, max));
  }
  *out = **v;
  return absl::OkStatus();
}

absl::StatusOr<FairnessFlags> ParseFairnessFlags(const cli::Values& values) {
  FairnessFlags flags;
  if (auto v = values.Get("kvtierd")) flags.kvtierd = *v;
  if (auto v = values.Get("baseline-kvtierd")) flags.baseline_kvtierd = *v;
  if (auto v = values.Get("set")) {
    for (absl::string_view kv : absl::StrSplit(*v, ';', absl::SkipEmpty())) {
      if (!absl::StrContains(kv, '=')) {
        return cli::UsageError(absl::StrCat("flag --set: '", kv, "' is not key=value"));
      }
      flags.settings.emplace_back(kv);
    }
  }
  if (auto v = values.Get("dir")) flags.dir = *v;
  if (auto v = values.Get("host")) flags.host = *v;
  if (auto v = values.Get("disk")) flags.disk = *v;
  flags.json = values.Has("json");
  if (auto v = values.Get("bulk-codecs")) {
    flags.bulk_codecs = absl::StrSplit(*v, ',');
    for (const std::string& c : flags.bulk_codecs) {
      if (!codec::CodecSpec::Parse(c).ok()) {
        return cli::UsageError(absl::StrCat("flag --bulk-codecs: '", c, "' is not a codec"));
      }
    }
  }
  struct Bound {
    const char* name;
    uint32_t min, max;
    uint32_t* out;
  };
  for (const Bound& b :
       {Bound{"workers", 1, 256, &flags.workers}, Bound{"bulk-engines", 1, 64, &flags.bulk_engines},
        Bound{"page-kib", 8, 1024, &flags.page_kib}, Bound{"batch", 1, 4096, &flags.batch},
        Bound{"probes", 1, 100000, &flags.probes}, Bound{"rounds", 1, 100, &flags.rounds},
        Bound{"warmup-ms", 0, 600000, &flags.warmup_ms},
        Bound{"probe-gap-ms", 0, 10000, &flags.probe_gap_ms},
        Bound{"loaded-seconds", 0, 3600, &flags.loaded_seconds}}) {
    if (absl::Status st = ReadUint(values, b.name, b.min, b.max, b.out); !st.ok()) return st;
  }
  if (flags.page_kib % 8 != 0) {
    return cli::UsageError(
        absl::StrFormat("flag --page-kib: %d is not a multiple of 8", flags.page_kib));
  }
  return flags;
}

std::chrono::system_clock::time_point RpcDeadline() {
  return std::chrono::system_clock::now() + kRpcTimeout;
}

double MicrosSince(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

// A channel of its own (a separate connection: no subchannel shared with other channels).
std::unique_ptr<v1::KvTier::Stub> ConnectEngine(const std::string& socket) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return v1::KvTier::NewStub(
      grpc::CreateCustomChannel("unix:" + socket, grpc::InsecureChannelCredentials(), args));
}

// An engine's host pool: a file of `slots` pages in the scratch directory, mapped and filled with
// kDistinctPages random BF16 pages in turn.
class PoolFile {
 public:
  static absl::StatusOr<std::unique_ptr<PoolFile>> Create(const std::string& path, uint32_t slots,
                                                          uint64_t page_bytes, uint64_t seed) {
    auto pool = std::unique_ptr<PoolFile>(new PoolFile());
    pool->path_ = path;
    pool->bytes_ = page_bytes * slots;
    const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
      return absl::InternalError(absl::StrCat("open ", path, ": ", std::strerror(errno)));
    }
    if (ftruncate(fd, static_cast<off_t>(pool->bytes_)) != 0) {
      const int e = errno;
      close(fd);
      return absl::InternalError(absl::StrCat("ftruncate ", path, ": ", std::strerror(e)));
    }
    void* base = mmap(nullptr, pool->bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    const int e = errno;
    close(fd);
    if (base == MAP_FAILED) {
      return absl::InternalError(absl::StrCat("mmap ", path, ": ", std::strerror(e)));
    }
    pool->base_ = static_cast<uint8_t*>(base);
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const uint32_t distinct = std::min(slots, kDistinctPages);
    for (uint32_t p = 0; p < distinct; ++p) {
      uint8_t* page = pool->base_ + p * page_bytes;
      for (uint64_t i = 0; i < page_bytes / 2; ++i) {
        codec::StoreFromFloat(codec::DType::kBf16, normal(rng), page, i);
      }
    }
    for (uint32_t p = distinct; p < slots; ++p) {
      std::memcpy(pool->base_ + p * page_bytes, pool->base_ + (p % distinct) * page_bytes,
                  page_bytes);
    }
    return pool;
  }
  ~PoolFile() {
    if (base_ != nullptr) munmap(base_, bytes_);
  }
  const std::string& path() const { return path_; }
  uint64_t bytes() const { return bytes_; }

 private:
  PoolFile() = default;
  std::string path_;
  uint64_t bytes_ = 0;
  uint8_t* base_ = nullptr;
};

// One engine: its channel, pool and registration.
struct EngineHandle {
  std::unique_ptr<v1::KvTier::Stub> stub;
  std::unique_ptr<PoolFile> pool;
  std::string engine_id;
  std::string codec;
};

absl::StatusOr<EngineHandle> RegisterEngine(const std::string& socket, const std::string& dir,
                                            const std::string& name,
                                            const codec::PageLayout& layout,
                                            const std::string& codec_name, uint32_t slots,
                                            uint64_t seed) {
  EngineHandle engine;
  engine.codec = codec_name;
  engine.stub = ConnectEngine(socket);
  absl::StatusOr<std::unique_ptr<PoolFile>> pool =
      PoolFile::Create(absl::StrCat(dir, "/pool-", name), slots, layout.pools[0].slot_bytes, seed);
  if (!pool.ok()) return pool.status();
  engine.pool = *std::move(pool);
  v1::RegisterEngineRequest req;
  req.set_engine_name(name);
  req.set_model("kvtier-bench-fairness");
  proto::LayoutToProto(layout, req.mutable_layout());
  proto::CodecToProto(codec::CodecSpec::Parse(codec_name).value(), req.mutable_codec());
  v1::PoolRegistration* reg = req.add_pools();
  reg->set_name(layout.pools[0].name);
  reg->set_slots(slots);
  reg->mutable_shared_memory()->set_path(engine.pool->path());
  reg->mutable_shared_memory()->set_size_bytes(engine.pool->bytes());
  req.mutable_lease_ttl()->set_seconds(kLeaseSeconds);
  v1::RegisterEngineResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(RpcDeadline());
  if (grpc::Status st = engine.stub->RegisterEngine(&ctx, req, &resp); !st.ok()) {
    return RpcError(absl::StrCat("RegisterEngine of ", name), st);
  }
  engine.engine_id = resp.engine_id();
  return engine;
}

// Offloads pages [0, hashes.size()) of `engine` under `hashes`; the number stored or already
// stored, or the RPC's error.
absl::StatusOr<uint32_t> OffloadPages(EngineHandle& engine,
                                      const std::vector<std::string>& hashes) {
  v1::OffloadRequest req;
  req.set_engine_id(engine.engine_id);
  req.set_ack(v1::WRITE_ACK_STORED);
  for (size_t i = 0; i < hashes.size(); ++i) {
    v1::OffloadItem* item = req.add_items();
    item->set_block_hash(hashes[i]);
    item->set_page_index(static_cast<uint32_t>(i));
  }
  v1::OffloadResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(RpcDeadline());
  if (grpc::Status st = engine.stub->Offload(&ctx, req, &resp); !st.ok()) {
    return RpcError("Offload", st);
  }
  uint32_t stored = 0;
  for (const v1::ItemResult& r : resp.results()) {
    if (r.code() == v1::ITEM_CODE_OK || r.code() == v1::ITEM_CODE_ALREADY_STORED) ++stored;
  }
  return stored;
}

// Onboards `hashes` into pages [first_page, ...) of `engine`; the pages onboarded.
absl::StatusOr<uint32_t> OnboardPages(EngineHandle& engine, const std::string* hashes,
                                      uint32_t count, uint32_t first_page) {
  v1::OnboardRequest req;
  req.set_engine_id(engine.engine_id);
  for (uint32_t i = 0; i < count; ++i) {
    v1::OnboardItem* item = req.add_items();
    item->set_block_hash(hashes[i]);
    item->set_page_index(first_page + i);
  }
  v1::OnboardResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(RpcDeadline());
  if (grpc::Status st = engine.stub->Onboard(&ctx, req, &resp); !st.ok()) {
    return RpcError("Onboard", st);
  }
  return resp.onboarded_pages();
}

// A bulk engine's loop and what it did in the current loaded phase.
struct BulkEngine {
  EngineHandle engine;
  uint32_t index = 0;
  uint64_t generation = 0;  // batches offloaded so far (each under fresh hashes)
  std::atomic<bool> started{false};
  uint64_t offloaded = 0, onboarded = 0;
  std::vector<double> offload_us, onboard_us;
  absl::Status error;

  void Run(uint32_t batch, const std::atomic<bool>& stop) {
    std::vector<std::string> hashes(batch);
    while (!stop.load()) {
      ++generation;
      for (uint32_t i = 0; i < batch; ++i) {
        hashes[i] = SyntheticBlockHash((uint64_t{index + 1} << 48) | (generation << 16) | i);
      }
      started.store(true);
      Clock::time_point start = Clock::now();
      absl::StatusOr<uint32_t> stored = OffloadPages(engine, hashes);
      if (!stored.ok()) {
        error = stored.status();
        return;
      }
      offload_us.push_back(MicrosSince(start));
      offloaded += *stored;
      if (stop.load()) return;
      start = Clock::now();
      absl::StatusOr<uint32_t> read = OnboardPages(engine, hashes.data(), batch, 0);
      if (!read.ok()) {
        error = read.status();
        return;
      }
      onboard_us.push_back(MicrosSince(start));
      onboarded += *read;
    }
  }
};

struct ProbeSamples {
  std::vector<double> lookup_us, onboard_us;
};

// The probe engine: kProbePages pages offloaded under `hashes` and pinned.
struct Probe {
  EngineHandle engine;
  std::vector<std::string> hashes;

  absl::Status Setup() {
    for (uint32_t i = 0; i < kProbePages; ++i) {
      hashes.push_back(SyntheticBlockHash((uint64_t{0xFFFF} << 48) | i));
    }
    absl::StatusOr<uint32_t> stored = OffloadPages(engine, hashes);
    if (!stored.ok()) return stored.status();
    if (*stored != kProbePages) {
      return absl::InternalError(
          absl::StrFormat("the probe's Offload stored %d of %d pages", *stored, kProbePages));
    }
    v1::PinRequest pin;
    pin.set_engine_id(engine.engine_id);
    for (const std::string& h : hashes) pin.add_block_hashes(h);
    pin.mutable_ttl()->set_seconds(kLeaseSeconds);
    v1::PinResponse pinned;
    grpc::ClientContext ctx;
    ctx.set_deadline(RpcDeadline());
    if (grpc::Status st = engine.stub->Pin(&ctx, pin, &pinned); !st.ok()) {
      return RpcError("Pin", st);
    }
    for (const v1::ItemResult& r : pinned.results()) {
      if (r.code() != v1::ITEM_CODE_OK) {
        return absl::InternalError("Pin of the probe's pages: " + v1::ItemCode_Name(r.code()));
      }
    }
    return absl::OkStatus();
  }

  // `count` Lookups of the whole chain alternating with Onboards of one page, `gap` apart.
  absl::Status Measure(uint32_t count, std::chrono::milliseconds gap, ProbeSamples* out) {
    v1::LookupRequest lookup;
    lookup.set_engine_id(engine.engine_id);
    for (const std::string& h : hashes) lookup.add_block_hashes(h);
    for (uint32_t k = 0; k < count; ++k) {
      Clock::time_point start = Clock::now();
      v1::LookupResponse found;
      grpc::ClientContext ctx;
      ctx.set_deadline(RpcDeadline());
      if (grpc::Status st = engine.stub->Lookup(&ctx, lookup, &found); !st.ok()) {
        return RpcError("the probe's Lookup", st);
      }
      out->lookup_us.push_back(MicrosSince(start));
      if (found.hit_pages() != kProbePages) {
        return absl::InternalError(absl::StrFormat(
            "the probe's Lookup hit %d of its %d pinned blocks", found.hit_pages(), kProbePages));
      }
      std::this_thread::sleep_for(gap);
      const uint32_t page = k % kProbePages;
      start = Clock::now();
      absl::StatusOr<uint32_t> read = OnboardPages(engine, &hashes[page], 1, page);
      if (!read.ok()) return read.status();
      out->onboard_us.push_back(MicrosSince(start));
      if (*read != 1) {
        return absl::InternalError(
            absl::StrFormat("the probe's Onboard of pinned page %d onboarded nothing", page));
      }
      std::this_thread::sleep_for(gap);
    }
    return absl::OkStatus();
  }
};

struct Report {
  std::string server_version;
  uint64_t page_bytes = 0;
  ProbeSamples unloaded, loaded;
  double loaded_seconds = 0;
  uint64_t offloaded = 0, onboarded = 0;
  std::vector<double> offload_us, onboard_us;
};

// One loaded phase: the bulk threads run while the probe measures.
absl::Status RunLoadedPhase(const FairnessFlags& flags,
                            std::vector<std::unique_ptr<BulkEngine>>& bulk, Probe& probe,
                            Report* report) {
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  const Clock::time_point start = Clock::now();
  for (auto& b : bulk) {
    b->started = false;
    threads.emplace_back([&flags, &stop, engine = b.get()] { engine->Run(flags.batch, stop); });
  }
  for (auto& b : bulk) {
    while (!b->started.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(flags.warmup_ms));
  absl::Status measured =
      probe.Measure(flags.probes, std::chrono::milliseconds(flags.probe_gap_ms), &report->loaded);
  std::this_thread::sleep_until(start + std::chrono::seconds(flags.loaded_seconds));
  stop = true;
  for (std::thread& t : threads) t.join();
  report->loaded_seconds += std::chrono::duration<double>(Clock::now() - start).count();
  if (!measured.ok()) return measured;
  for (auto& b : bulk) {
    if (!b->error.ok()) {
      return Annotate(b->error, absl::StrCat("bulk engine ", b->index));
    }
  }
  return absl::OkStatus();
}

// One daemon measured: its binary, scratch directory, process, engines and results.
struct Session {
  std::string label;  // "kvtierd" or "baseline"
  std::string kvtierd;
  std::string dir;
  std::vector<std::string> settings;  // beyond the common ones
  DaemonProcess daemon;
  std::vector<std::unique_ptr<BulkEngine>> bulk;
  Probe probe;
  Report report;
};

// Starts the session's daemon, registers the bulk engines and the probe, and warms the probe up.
absl::Status StartSession(const FairnessFlags& flags, Session& session) {
  std::vector<std::string> settings = {absl::StrCat("server.workers=", flags.workers),
                                       "host.capacity=" + flags.host,
                                       "host.pin=none",
                                       "disk.capacity=" + flags.disk,
                                       "pools.allowed_dirs=[" + session.dir + "]",
                                       "metrics.listen=\"\""};
  settings.insert(settings.end(), session.settings.begin(), session.settings.end());
  DaemonStartOptions options;
  options.client_name = "kvtier-bench fairness";
  KVTIER_RETURN_IF_ERROR(session.daemon.Start(session.kvtierd, session.dir, settings, options));
  DaemonProcess& daemon = session.daemon;
  Report& report = session.report;
  report.server_version = daemon.hello().server_version();
  absl::StatusOr<codec::PageLayout> layout =
      codec::BuildGqaLayout({flags.page_kib / 8, 1, 128, 16, codec::DType::kBf16, 0, 0});
  if (!layout.ok()) return layout.status();
  report.page_bytes = layout->pools[0].slot_bytes;
  const uint32_t limit = daemon.hello().limits().max_items_per_request();
  if (limit != 0 && flags.batch > limit) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--batch=%d is above the daemon's max_items_per_request (%d)", flags.batch, limit));
  }
  if (!flags.json) {
    std::fprintf(stderr, "%s: kvtierd %s (pid %d) with %d workers; filling %d pools of %d pages\n",
                 session.label.c_str(), report.server_version.c_str(),
                 static_cast<int>(daemon.pid()), flags.workers, flags.bulk_engines, flags.batch);
  }
  for (uint32_t i = 0; i < flags.bulk_engines; ++i) {
    auto b = std::make_unique<BulkEngine>();
    b->index = i;
    absl::StatusOr<EngineHandle> engine =
        RegisterEngine(daemon.socket_path(), session.dir, absl::StrCat("bulk-", i), *layout,
                       flags.bulk_codecs[i % flags.bulk_codecs.size()], flags.batch, i + 1);
    if (!engine.ok()) return engine.status();
    b->engine = *std::move(engine);
    session.bulk.push_back(std::move(b));
  }
  absl::StatusOr<EngineHandle> engine =
      RegisterEngine(daemon.socket_path(), session.dir, "probe", *layout, "nvfp4", kProbePages, 0);
  if (!engine.ok()) return engine.status();
  session.probe.engine = *std::move(engine);
  KVTIER_RETURN_IF_ERROR(session.probe.Setup());
  // Untimed: connections, the first requests' allocations.
  ProbeSamples warmup;
  return session.probe.Measure(20, std::chrono::milliseconds(0), &warmup);
}

// One round of the session: an unloaded phase, then a loaded one.
absl::Status RunRound(const FairnessFlags& flags, Session& session, uint32_t round) {
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the daemon settles
  KVTIER_RETURN_IF_ERROR(session.probe.Measure(
      flags.probes, std::chrono::milliseconds(flags.probe_gap_ms), &session.report.unloaded));
  KVTIER_RETURN_IF_ERROR(RunLoadedPhase(flags, session.bulk, session.probe, &session.report));
  if (!flags.json) {
    uint64_t offloaded = 0;
    for (auto& b : session.bulk) offloaded += b->offloaded;
    std::fprintf(stderr, "%s: round %d of %d done (%llu pages offloaded so far)\n",
                 session.label.c_str(), round + 1, flags.rounds,
                 static_cast<unsigned long long>(offloaded));
  }
  return absl::OkStatus();
}

// The bulk engines' totals into the session's report.
void CollectBulk(Session& session) {
  Report& report = session.report;
  for (auto& b : session.bulk) {
    report.offloaded += b->offloaded;
    report.onboarded += b->onboarded;
    report.offload_us.insert(report.offload_us.end(), b->offload_us.begin(), b->offload_us.end());
    report.onboard_us.insert(report.onboard_us.end(), b->onboard_us.begin(), b->onboard_us.end());
  }
}

// Starts every session, runs the rounds (alternating the order between rounds), collects.
absl::Status RunSessions(const FairnessFlags& flags, std::vector<Session*>& sessions) {
  for (Session* s : sessions) KVTIER_RETURN_IF_ERROR(StartSession(flags, *s));
  for (uint32_t round = 0; round < flags.rounds; ++round) {
    for (size_t k = 0; k < sessions.size(); ++k) {
      Session* s = sessions[round % 2 == 0 ? k : sessions.size() - 1 - k];
      KVTIER_RETURN_IF_ERROR(RunRound(flags, *s, round));
    }
  }
  for (Session* s : sessions) CollectBulk(*s);
  return absl::OkStatus();
}

void PrintTable(const Session& session, const FairnessFlags& flags) {
  const Report& r = session.report;
  std::vector<std::string> codecs;
  for (uint32_t i = 0; i < flags.bulk_engines; ++i) {
    codecs.push_back(flags.bulk_codecs[i % flags.bulk_codecs.size()]);
  }
  std::printf("%s: %s%s%s\n", session.label.c_str(), session.kvtierd.c_str(),
              session.settings.empty() ? "" : " --set ",
              absl::StrJoin(session.settings, " --set ").c_str());
  std::printf(
      "kvtierd %s, server.workers=%u, host %s, disk %s; %u bulk engines (%s) looping Offload + "
      "Onboard of %u pages of %llu KiB; probe: Lookup of %u hashes and Onboard of 1 page, %u "
      "each per phase, %u rounds of unloaded + loaded phases\n",
      r.server_version.c_str(), flags.workers, flags.host.c_str(), flags.disk.c_str(),
      flags.bulk_engines, absl::StrJoin(codecs, ", ").c_str(), flags.batch,
      static_cast<unsigned long long>(r.page_bytes / 1024), kProbePages, flags.probes,
      flags.rounds);
  std::printf("%-12s %-9s %6s %10s %10s %10s %9s %9s %9s\n", "probe", "phase", "n", "p50 ms",
              "p99 ms", "max ms", "p50 x", "p99 x", "max x");
  const auto row = [](const char* probe, const std::vector<double>& unloaded_us,
                      const std::vector<double>& loaded_us) {
    const LatencySummary base = Summarize(unloaded_us);
    const LatencySummary load = Summarize(loaded_us);
    std::printf("%-12s %-9s %6zu %10.3f %10.3f %10.3f %9s %9s %9s\n", probe, "unloaded", base.count,
                base.p50_us / 1e3, base.p99_us / 1e3, base.max_us / 1e3, "1.00x", "1.00x", "1.00x");
    std::printf("%-12s %-9s %6zu %10.3f %10.3f %10.3f %8.2fx %8.2fx %8.2fx\n", probe, "loaded",
                load.count, load.p50_us / 1e3, load.p99_us / 1e3, load.max_us / 1e3,
                load.p50_us / base.p50_us, load.p99_us / base.p99_us, load.max_us / base.max_us);
  };
  row("Lookup(64)", r.unloaded.lookup_us, r.loaded.lookup_us);
  row("Onboard(1)", r.unloaded.onboard_us, r.loaded.onboard_us);
  const LatencySummary off = Summarize(r.offload_us);
  const LatencySummary on = Summarize(r.onboard_us);
  std::printf(
      "bulk while loaded (%.1f s): %.0f pages/s offloaded, %.0f pages/s onboarded; %u-page "
      "Offload p50 %.0f ms, max %.0f ms; Onboard p50 %.0f ms, max %.0f ms\n",
      r.loaded_seconds, static_cast<double>(r.offloaded) / r.loaded_seconds,
      static_cast<double>(r.onboarded) / r.loaded_seconds, flags.batch, off.p50_us / 1e3,
      off.max_us / 1e3, on.p50_us / 1e3, on.max_us / 1e3);
}

Json SummaryJson(const std::vector<double>& us) {
  const LatencySummary l = Summarize(us);
  return Json{{"n", l.count},
              {"p50_us", l.p50_us},
              {"p99_us", l.p99_us},
              {"max_us", l.max_us},
              {"mean_us", l.mean_us}};
}

Json ToJson(const Session& session, const FairnessFlags& flags) {
  const Report& r = session.report;
  Json doc;
  doc["kvtierd"] = session.kvtierd;
  doc["settings"] = session.settings;
  doc["server_version"] = r.server_version;
  doc["workers"] = flags.workers;
  doc["bulk_engines"] = flags.bulk_engines;
  doc["bulk_codecs"] = flags.bulk_codecs;
  doc["page_bytes"] = r.page_bytes;
  doc["batch"] = flags.batch;
  doc["probes_per_phase"] = flags.probes;
  doc["rounds"] = flags.rounds;
  doc["lookup"] = {{"unloaded", SummaryJson(r.unloaded.lookup_us)},
                   {"loaded", SummaryJson(r.loaded.lookup_us)}};
  doc["onboard"] = {{"unloaded", SummaryJson(r.unloaded.onboard_us)},
                    {"loaded", SummaryJson(r.loaded.onboard_us)}};
  doc["bulk"] = {{"loaded_seconds", r.loaded_seconds},
                 {"offloaded_pages", r.offloaded},
                 {"onboarded_pages", r.onboarded},
                 {"offload", SummaryJson(r.offload_us)},
                 {"onboard", SummaryJson(r.onboard_us)}};
  return doc;
}

}  // namespace

void DeclareFairnessBenchFlags(cli::Command& command) {
  command.SetDescription(
      "Latency of a probe engine's Lookup (64 hashes) and one-page Onboard while other engines\n"
      "loop 4096-page Offload and Onboard batches, against the probe alone, in alternating\n"
      "phases.");
  struct FlagDef {
    const char* name;
    const char* value_name;
    const char* help;
  };
  static constexpr FlagDef kFlags[] = {
      {"kvtierd", "PATH", "the daemon binary (default: kvtierd in the directory of kvtier-bench)"},
      {"baseline-kvtierd", "PATH",
       "a second daemon binary measured in the same run, rounds alternating (default: none)"},
      {"set", "K=V[;K=V]",
       "more settings for --kvtierd's daemon, not the baseline's (e.g. server.chunk_pages=16)"},
      {"dir", "DIR",
       "scratch directory for the daemon's state, socket and log and the pool files; kept "
       "(default: a fresh directory under /tmp, removed at the end)"},
      {"workers", "N", "the daemon's server.workers (default 2)"},
      {"bulk-engines", "N", "engines looping Offload and Onboard batches (default 4)"},
      {"bulk-codecs", "LIST", "codecs the bulk engines take in turn (default nvfp4,raw)"},
      {"page-kib", "N", "page size in KiB, a multiple of 8 in [8, 1024] (default 32)"},
      {"batch", "N", "pages per bulk Offload and Onboard, 1 to 4096 (default 4096)"},
      {"probes", "N", "Lookups and as many Onboards of the probe per phase (default 200)"},
      {"rounds", "N", "rounds of an unloaded and a loaded phase (default 3)"},
      {"warmup-ms", "N", "load before the probe starts in a loaded phase (default 500)"},
      {"probe-gap-ms", "N", "pause between two probe calls (default 2)"},
      {"loaded-seconds", "N",
       "shortest loaded phase: the bulk engines go on after the probe's last call until then, "
       "for their throughput (default 10)"},
      {"host", "SIZE", "the daemon's host.capacity (default 2GiB)"},
      {"disk", "SIZE", "the daemon's disk.capacity (default 0: no disk tier)"},
      {"json", "", "print JSON instead of the table"},
  };
  for (const FlagDef& flag : kFlags) {
    if (*flag.value_name == '\0') {
      command.AddSwitch(flag.name, flag.help);
    } else {
      command.AddFlag(flag.name, flag.value_name, flag.help);
    }
  }
}

int RunFairnessBench(const cli::Values& values) {
  absl::StatusOr<FairnessFlags> parsed = ParseFairnessFlags(values);
  if (!parsed.ok()) return values.PrintUsageError(parsed.status().message());
  const FairnessFlags& flags = *parsed;
  std::string kvtierd = flags.kvtierd;
  if (kvtierd.empty()) {
    absl::StatusOr<std::string> found = DefaultKvtierd();
    if (!found.ok()) {
      std::fprintf(stderr, "kvtier-bench fairness: %s\n", found.status().ToString().c_str());
      return 1;
    }
    kvtierd = *std::move(found);
  }
  bool temporary = false;
  absl::StatusOr<std::string> dir =
      PrepareScratchDir(flags.dir, "kvtier-bench-fairness", &temporary);
  if (!dir.ok()) {
    std::fprintf(stderr, "kvtier-bench fairness: %s\n", dir.status().ToString().c_str());
    return 1;
  }
  Session subject, baseline;
  subject.label = "kvtierd";
  subject.kvtierd = kvtierd;
  subject.settings = flags.settings;
  std::vector<Session*> sessions = {&subject};
  if (!flags.baseline_kvtierd.empty()) {
    baseline.label = "baseline";
    baseline.kvtierd = flags.baseline_kvtierd;
    sessions.insert(sessions.begin(), &baseline);
  }
  absl::Status run = absl::OkStatus();
  for (Session* s : sessions) {
    // Each daemon's state, socket, log and pools in a subdirectory of its own.
    s->dir = sessions.size() == 1 ? *dir : absl::StrCat(*dir, "/", s->label);
    if (run.ok() && sessions.size() > 1) {
      bool ignored = false;
      absl::StatusOr<std::string> made = PrepareScratchDir(s->dir, "", &ignored);
      if (!made.ok()) run = made.status();
    }
  }
  if (run.ok()) run = RunSessions(flags, sessions);
  int exit_code = 0;
  if (!run.ok()) {
    exit_code = 1;
    std::fprintf(stderr, "kvtier-bench fairness: %s\n", run.ToString().c_str());
  }
  for (Session* s : sessions) {
    const absl::Status stopped = s->daemon.Stop();  // on errors too
    if (!stopped.ok()) {
      exit_code = 1;
      std::fprintf(stderr, "kvtier-bench fairness: %s: %s\n", s->label.c_str(),
                   stopped.ToString().c_str());
    }
    const std::string log = s->daemon.LogTail();
    if (exit_code != 0 && !log.empty()) {
      std::fprintf(stderr, "end of the %s kvtierd log:\n%s%s", s->label.c_str(), log.c_str(),
                   absl::EndsWith(log, "\n") ? "" : "\n");
    }
  }
  if (temporary) {
    if (absl::Status removed = RemoveScratchDir(*dir); !removed.ok()) {
      std::fprintf(stderr, "kvtier-bench fairness: %s\n", std::string(removed.message()).c_str());
    }
  }
  if (exit_code == 0) {
    if (flags.json) {
      Json doc = ToJson(subject, flags);
      if (sessions.size() > 1) doc = Json{{"baseline", ToJson(baseline, flags)}, {"kvtierd", doc}};
      std::printf("%s\n", doc.dump(2).c_str());
    } else {
      for (Session* s : sessions) PrintTable(*s, flags);
    }
  }
  return exit_code;
}

}  // namespace kvtier::bench
