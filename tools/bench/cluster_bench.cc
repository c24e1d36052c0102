// `kvtier-bench cluster`. For each object size and queue depth ("point") two sides run on the
// same pool, one after the other:
//   rados: `rados bench SECONDS write -b SIZE -t DEPTH --no-cleanup --max-objects N`, then
//          `rados bench SECONDS rand -t DEPTH` over what it wrote, then `rados cleanup`.
//   kvtier: valid raw-codec cold blocks of exactly SIZE bytes stored through
//          RadosObjectStore::Put (exclusive create + write_full + its xattr, one op) from DEPTH
//          threads (--put=threads), or PutMany of DEPTH blocks at a time from one thread
//          (--put=batched), for SECONDS or N objects, then for SECONDS read back, blocks chosen
//          at random, with GetWindowed keeping DEPTH reads in flight (every block verified:
//          identity, header and payload checksum), then removed.
// Writes stop at SECONDS or at N = --max-phase-bytes / SIZE objects, whichever comes first, so
// that a memstore OSD (which holds about twice what is stored in RAM) stays small; every phase
// deletes its objects before the next one starts, so neither side reads the other's objects or
// inherits a fuller OSD. A point runs --rounds rounds, the side that goes first alternating from
// round to round (and from point to point), and each side's median round is reported: on a
// shared machine one disturbed round moves a mean but not a median. `rados bench` prints
// "Bandwidth (MB/sec)" computed in MiB (2^20 bytes); this benchmark reports MiB/s for both.
// The blocks' content repeats (a few distinct blocks under distinct keys): the client's CPU goes
// to librados and verification, as with rados bench, which also writes one buffer throughout.
//
// Lookup: --lookup-chain small blocks (4 KiB) are stored, then Exists of the whole chain (one
// batched call) is timed --lookup-reps times, next to a local-only baseline: the same keys looked
// up in an absl::flat_hash_map (what a chain costs when the local index has it).
//
// Run: eval "$(scripts/ceph-throwaway.sh)"
//      build/bin/kvtier-bench cluster --ceph-conf "$CEPH_CONF" --keyring "$CEPH_KEYRING"
//          --pool "$CEPH_POOL"
#include "tools/bench/cluster_bench.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
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
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "codec/codec.h"
#include "codec/page_layout.h"
#include "daemon/cluster/rados_object_store.h"
#include "tools/bench/bench_common.h"

extern char** environ;

namespace kvtier::bench {
namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;
using cluster::BlockKey;
using cluster::RadosObjectStore;

constexpr char kRadosNamespace[] = "kvtier-bench";
constexpr uint32_t kDistinctBlocks = 8;
constexpr uint32_t kLookupBlockBytes = 4096;
constexpr double kMiB = 1024.0 * 1024.0;

struct Flags {
  std::string ceph_conf;
  std::string keyring;
  std::string user = "admin";
  std::string pool;
  std::string rados = "rados";
  std::vector<uint32_t> sizes = {1331200, 40960};
  std::vector<uint32_t> depths = {1, 4, 16, 64};
  uint32_t seconds = 3;
  uint32_t rounds = 3;  // per point; the report shows each side's median
  uint64_t max_phase_bytes = uint64_t{128} << 20;
  uint32_t lookup_chain = 4096;
  uint32_t lookup_reps = 50;
  bool put_threads = true;  // --put threads|batched|both
  bool put_batched = false;
  bool json = false;
};

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// ---------------------------------------------------------------------------------------------
// Blocks and keys.

// A valid raw-codec cold block of exactly `bytes` bytes (one lossless buffer of 16-byte rows,
// alignment 16) whose payload is noise seeded by `seed`. InvalidArgument when `bytes` is not a
// multiple of 16 above the header.
absl::StatusOr<std::vector<uint8_t>> MakeBlock(uint32_t bytes, uint64_t seed) {
  const size_t header = codec::ColdBlockHeaderBytes(1);
  if (bytes % 16 != 0 || bytes <= header + 16) {
    return absl::InvalidArgumentError(
        absl::StrCat("object size ", bytes, " is not a multiple of 16 above ", header + 16));
  }
  const uint32_t payload = bytes - static_cast<uint32_t>(header);
  codec::PageLayout layout;
  layout.tokens_per_page = 1;
  layout.pools.push_back({"pool", payload});
  codec::BufferSpec b;
  b.name = "state";
  b.role = codec::BufferRole::kLossless;
  b.dtype = codec::DType::kBytes;
  b.heads = payload / 16;
  b.tokens = 1;
  b.head_dim = 16;
  layout.buffers.push_back(b);
  codec::CodecSpec spec;
  spec.codec = codec::CodecId::kRaw;
  spec.alignment_bytes = 16;
  absl::StatusOr<std::unique_ptr<codec::Codec>> c = codec::Codec::Create(layout, spec);
  if (!c.ok()) return c.status();
  if ((*c)->block_bytes() != bytes) {
    return absl::InternalError(absl::StrCat("a raw block of ", payload, " payload bytes is ",
                                            (*c)->block_bytes(), " bytes, not ", bytes));
  }
  std::vector<uint8_t> page(payload);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (uint8_t& v : page) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    v = static_cast<uint8_t>(x >> 24);
  }
  std::vector<uint8_t> block(bytes);
  absl::Status st = (*c)->Encode(codec::FlatPageView(layout, page), absl::MakeSpan(block));
  if (!st.ok()) return st;
  return block;
}

// The key of block `id`: distinct ids give distinct keys.
BlockKey KeyOf(uint64_t id) {
  BlockKey key;
  key.ns = 1;
  const std::string h = SyntheticBlockHash(id);
  std::memcpy(key.hash.data(), h.data(), key.hash.size());
  return key;
}

// ---------------------------------------------------------------------------------------------
// The rados side.

// Runs `argv` with stdout and stderr into one pipe; returns the output, or Internal with it when
// the program fails or cannot be started.
absl::StatusOr<std::string> RunCapture(const std::vector<std::string>& args) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  pid_t pid;
  const int rc = posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    return absl::NotFoundError(absl::StrCat("cannot run '", args[0], "': ", std::strerror(rc)));
  }
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t n = read(fds[0], buf, sizeof(buf));
    if (n > 0) {
      out.append(buf, static_cast<size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  close(fds[0]);
  int wstatus = 0;
  while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
    return absl::InternalError(absl::StrFormat("`%s` failed (wait status %d): %s",
                                               absl::StrJoin(args, " "), wstatus, out));
  }
  return out;
}

struct Throughput {
  uint64_t ops = 0;
  double seconds = 0;
  double mib_per_s = 0;
  double ops_per_s = 0;
};

// The "Bandwidth (MB/sec):" and "Average IOPS:" lines of `rados bench` (the former in MiB/s).
absl::StatusOr<Throughput> ParseRadosBench(const std::string& out) {
  Throughput t;
  bool bandwidth = false, iops = false;
  for (absl::string_view line : absl::StrSplit(out, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    const auto value = [&](absl::string_view prefix, double* v) {
      if (!absl::StartsWith(line, prefix)) return false;
      return absl::SimpleAtod(absl::StripAsciiWhitespace(line.substr(prefix.size())), v);
    };
    double v;
    if (value("Bandwidth (MB/sec):", &v)) {
      t.mib_per_s = v;
      bandwidth = true;
    } else if (value("Average IOPS:", &v)) {
      t.ops_per_s = v;
      iops = true;
    } else if (value("Total time run:", &v)) {
      t.seconds = v;
    } else if (value("Total writes made:", &v) || value("Total reads made:", &v)) {
      t.ops = static_cast<uint64_t>(v);
    }
  }
  if (!bandwidth || !iops) {
    return absl::InternalError(absl::StrCat("no bandwidth or IOPS in rados bench output: ", out));
  }
  return t;
}

class RadosCli {
 public:
  explicit RadosCli(const Flags& f) : f_(f) {}

  // rados -c CONF [-k KEYRING] --id USER -p POOL ARGS...
  absl::StatusOr<std::string> Run(const std::vector<std::string>& args) const {
    std::vector<std::string> argv = {f_.rados, "-c", f_.ceph_conf};
    if (!f_.keyring.empty()) argv.insert(argv.end(), {"-k", f_.keyring});
    argv.insert(argv.end(), {"--id", f_.user, "-p", f_.pool});
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCapture(argv);
  }

 private:
  const Flags& f_;
};

struct SideResult {
  Throughput write, read;
  Throughput write_batched;  // kvtier only: PutMany in batches of DEPTH from one thread
};

absl::StatusOr<SideResult> RunRadosSide(const RadosCli& rados, const Flags& f, uint32_t size,
                                        uint32_t depth, uint64_t max_objects) {
  const std::string run_name = absl::StrCat("kvtier-bench-", size, "-", depth);
  SideResult r;
  absl::StatusOr<std::string> out =
      rados.Run({"bench", absl::StrCat(f.seconds), "write", "-b", absl::StrCat(size), "-t",
                 absl::StrCat(depth), "--no-cleanup", "--max-objects", absl::StrCat(max_objects),
                 "--run-name", run_name});
  absl::Status st = out.status();
  if (st.ok()) {
    absl::StatusOr<Throughput> t = ParseRadosBench(*out);
    st = t.status();
    if (st.ok()) r.write = *t;
  }
  if (st.ok()) {
    out = rados.Run({"bench", absl::StrCat(f.seconds), "rand", "-t", absl::StrCat(depth),
                     "--run-name", run_name});
    st = out.status();
    if (st.ok()) {
      absl::StatusOr<Throughput> t = ParseRadosBench(*out);
      st = t.status();
      if (st.ok()) r.read = *t;
    }
  }
  // Always clean up, even after a failure, so the OSD does not fill.
  absl::StatusOr<std::string> cleaned = rados.Run({"cleanup", "--run-name", run_name});
  if (!st.ok()) return st;
  if (!cleaned.ok()) return cleaned.status();
  return r;
}

// ---------------------------------------------------------------------------------------------
// The kvtier side.

// Runs `fn(i)` for i in [0, n) from `threads` threads; the first error wins and stops the others.
template <typename Fn>
absl::Status ParallelFor(uint64_t n, uint32_t threads, Fn fn) {
  std::atomic<uint64_t> next{0};
  std::atomic<bool> failed{false};
  absl::Mutex mu;
  absl::Status first;
  std::vector<std::thread> pool;
  for (uint32_t t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (uint64_t i; !failed.load() && (i = next.fetch_add(1)) < n;) {
        absl::Status st = fn(i);
        if (!st.ok()) {
          absl::MutexLock l(&mu);
          if (first.ok()) first = st;
          failed = true;
        }
      }
    });
  }
  for (std::thread& t : pool) t.join();
  return first;
}

cluster::BlockAttrs Attrs() {
  cluster::BlockAttrs a;
  a.codec = static_cast<uint32_t>(codec::CodecId::kRaw);
  a.writer_node = "kvtier-bench";
  a.created_unix_micros = absl::ToUnixMicros(absl::Now());
  return a;
}

// Stores blocks base+0, base+1, ... from `depth` threads until `seconds` pass or `max_objects`
// are stored; *stored is how many were.
absl::StatusOr<Throughput> KvtierWrite(RadosObjectStore& store,
                                       const std::vector<std::vector<uint8_t>>& blocks,
                                       uint64_t base, uint32_t depth, double seconds,
                                       uint64_t max_objects, uint64_t* stored) {
  const cluster::BlockAttrs attrs = Attrs();
  const Clock::time_point start = Clock::now();
  const Clock::time_point end =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  std::atomic<uint64_t> next{0}, done{0};
  std::atomic<bool> failed{false};
  absl::Mutex mu;
  absl::Status first;
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < depth; ++t) {
    threads.emplace_back([&] {
      while (!failed.load() && Clock::now() < end) {
        const uint64_t i = next.fetch_add(1);
        if (i >= max_objects) break;
        absl::Status st =
            store.Put(kRadosNamespace, KeyOf(base + i), blocks[i % blocks.size()], attrs);
        if (!st.ok()) {
          absl::MutexLock l(&mu);
          if (first.ok()) first = st;
          failed = true;
          break;
        }
        done.fetch_add(1);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  Throughput r;
  r.seconds = Since(start);
  r.ops = done.load();
  // Every id below next was claimed; those that failed are removed (NotFound ignored) too.
  *stored = std::min<uint64_t>(next.load(), max_objects);
  if (!first.ok()) return first;
  r.ops_per_s = static_cast<double>(r.ops) / r.seconds;
  r.mib_per_s = r.ops_per_s * static_cast<double>(blocks[0].size()) / kMiB;
  return r;
}

// Stores blocks base+0, base+1, ... with PutMany from this thread, `depth` per call, until
// `seconds` pass or `max_objects` are stored; *stored is how many were submitted.
absl::StatusOr<Throughput> KvtierWriteBatched(RadosObjectStore& store,
                                              const std::vector<std::vector<uint8_t>>& blocks,
                                              uint64_t base, uint32_t depth, double seconds,
                                              uint64_t max_objects, uint64_t* stored) {
  const cluster::BlockAttrs attrs = Attrs();
  const Clock::time_point start = Clock::now();
  Throughput r;
  std::vector<cluster::PutRequest> batch;
  uint64_t i = 0;
  while (i < max_objects && Since(start) < seconds) {
    batch.clear();
    for (; batch.size() < depth && i < max_objects; ++i) {
      batch.push_back(cluster::PutRequest{KeyOf(base + i), blocks[i % blocks.size()], attrs});
    }
    *stored = i;
    for (const absl::Status& st : store.PutMany(kRadosNamespace, batch)) {
      if (!st.ok()) return st;
    }
    r.ops += batch.size();
  }
  r.seconds = Since(start);
  r.ops_per_s = static_cast<double>(r.ops) / r.seconds;
  r.mib_per_s = r.ops_per_s * static_cast<double>(blocks[0].size()) / kMiB;
  return r;
}

// Reads blocks chosen at random from base+0 .. base+count-1 for `seconds` (as rados bench rand
// does) through GetWindowed, keeping `depth` reads in flight (as rados bench keeps `-t` ops in
// flight), over chunks of kReadChunk keys drawn in advance; a read that answers after the time is
// up still counts, as with rados bench. DataLoss when a block does not come back whole.
absl::StatusOr<Throughput> KvtierRead(RadosObjectStore& store, uint32_t size, uint64_t base,
                                      uint64_t count, uint32_t depth, double seconds) {
  if (count == 0) return absl::InternalError("nothing was stored to read");
  constexpr size_t kReadChunk = 65536;
  std::vector<BlockKey> stored;
  for (uint64_t i = 0; i < count; ++i) stored.push_back(KeyOf(base + i));
  std::mt19937_64 random(base);
  std::vector<uint64_t> ids(kReadChunk);
  std::vector<BlockKey> keys(kReadChunk);
  const auto draw = [&] {
    for (size_t j = 0; j < kReadChunk; ++j) {
      ids[j] = random() % count;
      keys[j] = stored[ids[j]];
    }
  };
  draw();
  const Clock::time_point start = Clock::now();
  Throughput r;
  absl::Status lost;
  while (lost.ok() && Since(start) < seconds) {
    const absl::Status st = store.GetWindowed(
        kRadosNamespace, keys, depth, absl::Now() + absl::Seconds(60),
        [&](size_t k, std::optional<cluster::ObjectBytes> bytes) {
          if (!bytes.has_value() || bytes->size() != size) {
            if (lost.ok()) {
              lost = absl::DataLossError(absl::StrCat(
                  "block ", ids[k], " of ", count, " did not read back (missing or unverified)"));
            }
            return false;
          }
          ++r.ops;
          return Since(start) < seconds;
        },
        size);
    if (!st.ok()) return st;
    if (lost.ok() && Since(start) < seconds) draw();
  }
  r.seconds = Since(start);
  if (!lost.ok()) return lost;
  r.ops_per_s = static_cast<double>(r.ops) / r.seconds;
  r.mib_per_s = r.ops_per_s * size / kMiB;
  return r;
}

absl::Status KvtierRemove(RadosObjectStore& store, uint64_t base, uint64_t count) {
  return ParallelFor(count, 16, [&](uint64_t i) {
    absl::Status st = store.Remove(kRadosNamespace, KeyOf(base + i));
    return absl::IsNotFound(st) ? absl::OkStatus() : st;
  });
}

absl::StatusOr<SideResult> RunKvtierSide(RadosObjectStore& store, const Flags& f, uint32_t size,
                                         uint32_t depth, uint64_t max_objects, uint64_t base) {
  std::vector<std::vector<uint8_t>> blocks;
  for (uint32_t i = 0; i < kDistinctBlocks; ++i) {
    absl::StatusOr<std::vector<uint8_t>> b = MakeBlock(size, base + i);
    if (!b.ok()) return b.status();
    blocks.push_back(*std::move(b));
  }
  SideResult r;
  uint64_t stored = 0;
  absl::Status st;
  if (f.put_threads) {
    absl::StatusOr<Throughput> w =
        KvtierWrite(store, blocks, base, depth, f.seconds, max_objects, &stored);
    st = w.status();
    if (st.ok()) r.write = *w;
    // With both writers, the batched one stores the same keys again; the read reads its blocks.
    if (st.ok() && f.put_batched) {
      st = KvtierRemove(store, base, stored);
      stored = 0;
    }
  }
  if (st.ok() && f.put_batched) {
    absl::StatusOr<Throughput> w =
        KvtierWriteBatched(store, blocks, base, depth, f.seconds, max_objects, &stored);
    st = w.status();
    if (st.ok()) r.write_batched = *w;
  }
  if (st.ok()) {
    absl::StatusOr<Throughput> rd = KvtierRead(store, size, base, stored, depth, f.seconds);
    st = rd.status();
    if (st.ok()) r.read = *rd;
  }
  absl::Status removed = KvtierRemove(store, base, stored);
  if (!st.ok()) return st;
  if (!removed.ok()) return removed;
  return r;
}

// ---------------------------------------------------------------------------------------------
// Lookup.

struct LookupResult {
  LatencySummary exists, local;
};

absl::StatusOr<LookupResult> RunLookup(RadosObjectStore& store, const Flags& f, uint64_t base) {
  absl::StatusOr<std::vector<uint8_t>> block = MakeBlock(kLookupBlockBytes, base);
  if (!block.ok()) return block.status();
  const cluster::BlockAttrs attrs = Attrs();
  std::vector<BlockKey> keys;
  for (uint64_t i = 0; i < f.lookup_chain; ++i) keys.push_back(KeyOf(base + i));
  absl::Status st = ParallelFor(keys.size(), 16, [&](uint64_t i) {
    return store.Put(kRadosNamespace, keys[i], *block, attrs);
  });
  LookupResult r;
  std::vector<double> exists_us, local_us;
  for (uint32_t rep = 0; st.ok() && rep < f.lookup_reps; ++rep) {
    const Clock::time_point t0 = Clock::now();
    absl::StatusOr<std::vector<bool>> hits =
        store.Exists(kRadosNamespace, keys, absl::Now() + absl::Seconds(30));
    exists_us.push_back(Since(t0) * 1e6);
    if (!hits.ok()) {
      st = hits.status();
    } else if (std::count(hits->begin(), hits->end(), true) != static_cast<long>(keys.size())) {
      st = absl::DataLossError("Exists missed blocks of the chain that were stored");
    }
  }
  // Local-only baseline: the chain's keys in a hash map keyed by the block hash.
  absl::flat_hash_map<std::string, uint32_t> local;
  for (size_t i = 0; i < keys.size(); ++i) {
    local.emplace(std::string(keys[i].hash.begin(), keys[i].hash.end()), i);
  }
  uint64_t found = 0;
  for (uint32_t rep = 0; rep < f.lookup_reps; ++rep) {
    const Clock::time_point t0 = Clock::now();
    for (const BlockKey& k : keys) {
      found += local.count(
          absl::string_view(reinterpret_cast<const char*>(k.hash.data()), k.hash.size()));
    }
    local_us.push_back(Since(t0) * 1e6);
  }
  if (st.ok() && found != uint64_t{f.lookup_reps} * keys.size()) {
    st = absl::InternalError("local baseline missed keys");
  }
  absl::Status removed = KvtierRemove(store, base, keys.size());
  if (!st.ok()) return st;
  if (!removed.ok()) return removed;
  r.exists = Summarize(exists_us);
  r.local = Summarize(local_us);
  return r;
}

// ---------------------------------------------------------------------------------------------
// Flags and report.

absl::StatusOr<Flags> ParseFlags(const cli::Values& values) {
  Flags f;
  f.json = values.Has("json");
  absl::StatusOr<std::string> s = values.RequiredString("ceph-conf");
  if (!s.ok()) return s.status();
  f.ceph_conf = *s;
  s = values.RequiredString("pool");
  if (!s.ok()) return s.status();
  f.pool = *s;
  f.keyring = values.Get("keyring").value_or("");
  f.user = values.Get("user").value_or(f.user);
  f.rados = values.Get("rados").value_or(f.rados);
  if (std::optional<std::string> put = values.Get("put")) {
    if (*put != "threads" && *put != "batched" && *put != "both") {
      return cli::UsageError(absl::StrCat("--put: '", *put, "' is not threads, batched or both"));
    }
    f.put_threads = *put != "batched";
    f.put_batched = *put != "threads";
  }
  for (const auto& [name, out] :
       {std::pair<const char*, std::vector<uint32_t>*>{"sizes", &f.sizes}, {"depths", &f.depths}}) {
    absl::StatusOr<std::optional<std::vector<uint32_t>>> v = values.OptionalUint32List(name);
    if (!v.ok()) return v.status();
    if (v->has_value()) *out = **v;
    if (out->empty() || std::count(out->begin(), out->end(), 0u) > 0) {
      return cli::UsageError(absl::StrCat("--", name, " needs positive values"));
    }
  }
  for (const auto& [name, out] : {std::pair<const char*, uint32_t*>{"seconds", &f.seconds},
                                  {"rounds", &f.rounds},
                                  {"lookup-chain", &f.lookup_chain},
                                  {"lookup-reps", &f.lookup_reps}}) {
    absl::StatusOr<std::optional<uint32_t>> v = values.OptionalUint32(name);
    if (!v.ok()) return v.status();
    if (v->has_value()) *out = **v;
  }
  absl::StatusOr<std::optional<uint64_t>> m = values.OptionalUint64("max-phase-bytes");
  if (!m.ok()) return m.status();
  if (m->has_value()) f.max_phase_bytes = **m;
  if (f.seconds == 0) return cli::UsageError("--seconds must be positive");
  if (f.rounds == 0) return cli::UsageError("--rounds must be positive");
  for (uint32_t size : f.sizes) {
    if (size % 16 != 0 || size < 256 || size > (4u << 20)) {
      return cli::UsageError(
          absl::StrCat("--sizes: ", size, " is not a multiple of 16 in [256, 4194304]"));
    }
    if (f.max_phase_bytes / size < 1) {
      return cli::UsageError(absl::StrCat("--max-phase-bytes is below one object of ", size));
    }
  }
  return f;
}

struct Point {
  uint32_t size = 0, depth = 0;
  bool kvtier_first = false;  // in the first round; the order alternates from round to round
  std::vector<SideResult> rados_rounds, kvtier_rounds;
  SideResult rados, kvtier;  // per phase, the round with the median MiB/s
};

// Per phase (write, batched write, read), the round whose MiB/s is the median (the lower middle
// one for an even count): on a shared machine one slow round moves a mean, not a median.
SideResult Median(const std::vector<SideResult>& rounds) {
  SideResult m;
  for (Throughput SideResult::*phase :
       {&SideResult::write, &SideResult::write_batched, &SideResult::read}) {
    std::vector<Throughput> v;
    for (const SideResult& r : rounds) v.push_back(r.*phase);
    if (v.empty()) continue;
    std::sort(v.begin(), v.end(),
              [](const Throughput& a, const Throughput& b) { return a.mib_per_s < b.mib_per_s; });
    m.*phase = v[(v.size() - 1) / 2];
  }
  return m;
}

double Ratio(double a, double b) { return b > 0 ? a / b : 0; }

Json ThroughputJson(const Throughput& t) {
  return {{"ops", t.ops},
          {"seconds", t.seconds},
          {"mib_per_s", t.mib_per_s},
          {"ops_per_s", t.ops_per_s}};
}

constexpr double kTarget = 0.9;

void PrintReport(const Flags& f, const std::vector<Point>& points,
                 const std::optional<LookupResult>& lookup) {
  if (f.json) {
    Json j;
    j["pool"] = f.pool;
    j["seconds"] = f.seconds;
    j["rounds"] = f.rounds;
    j["max_phase_bytes"] = f.max_phase_bytes;
    for (const Point& p : points) {
      Json point = {
          {"size", p.size},
          {"depth", p.depth},
          {"kvtier_first", p.kvtier_first},
          {"rounds", p.rados_rounds.size()},
          {"rados_write", ThroughputJson(p.rados.write)},
          {"rados_read", ThroughputJson(p.rados.read)},
          {"kvtier_read", ThroughputJson(p.kvtier.read)},
          {"read_ratio", Ratio(p.kvtier.read.mib_per_s, p.rados.read.mib_per_s)},
      };
      if (f.put_threads) {
        point["kvtier_write_threads"] = ThroughputJson(p.kvtier.write);
        point["write_threads_ratio"] = Ratio(p.kvtier.write.mib_per_s, p.rados.write.mib_per_s);
      }
      if (f.put_batched) {
        point["kvtier_write_batched"] = ThroughputJson(p.kvtier.write_batched);
        point["write_batched_ratio"] =
            Ratio(p.kvtier.write_batched.mib_per_s, p.rados.write.mib_per_s);
      }
      for (size_t r = 0; r < p.rados_rounds.size() && r < p.kvtier_rounds.size(); ++r) {
        point["round_ratios"].push_back(
            {{"write_threads",
              Ratio(p.kvtier_rounds[r].write.mib_per_s, p.rados_rounds[r].write.mib_per_s)},
             {"write_batched",
              Ratio(p.kvtier_rounds[r].write_batched.mib_per_s, p.rados_rounds[r].write.mib_per_s)},
             {"read", Ratio(p.kvtier_rounds[r].read.mib_per_s, p.rados_rounds[r].read.mib_per_s)}});
      }
      j["points"].push_back(point);
    }
    if (lookup.has_value()) {
      j["lookup"] = {{"chain", f.lookup_chain},
                     {"reps", f.lookup_reps},
                     {"exists_p50_us", lookup->exists.p50_us},
                     {"exists_p99_us", lookup->exists.p99_us},
                     {"local_p50_us", lookup->local.p50_us},
                     {"local_p99_us", lookup->local.p99_us}};
    }
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf(
      "pool %s, %u s per phase (at most %.0f MiB stored per phase), %u round(s) per point, each "
      "side's median round; MiB/s, ops/s, ratio = kvtier/rados\n",
      f.pool.c_str(), f.seconds, static_cast<double>(f.max_phase_bytes) / kMiB, f.rounds);
  std::printf("%8s %5s | %-14s | %-20s | %-20s | %-14s | %-20s\n", "size", "depth", "rados write",
              "Put, DEPTH threads", "PutMany of DEPTH", "rados rand read", "Get, DEPTH in flight");
  std::vector<std::string> short_of_target;
  const auto cell = [](const Throughput& t) {
    return absl::StrFormat("%7.1f %6.0f", t.mib_per_s, t.ops_per_s);
  };
  const auto rated = [&](const Throughput& t, const Throughput& base, bool on) {
    if (!on) return std::string(20, ' ');
    return absl::StrFormat("%s %5.2f", cell(t), Ratio(t.mib_per_s, base.mib_per_s));
  };
  for (const Point& p : points) {
    std::printf("%8u %5u | %s | %s | %s | %s | %s%s\n", p.size, p.depth,
                cell(p.rados.write).c_str(),
                rated(p.kvtier.write, p.rados.write, f.put_threads).c_str(),
                rated(p.kvtier.write_batched, p.rados.write, f.put_batched).c_str(),
                cell(p.rados.read).c_str(), rated(p.kvtier.read, p.rados.read, true).c_str(),
                p.kvtier_first ? "  (kvtier first)" : "");
    const auto check = [&](const Throughput& t, const Throughput& base, const char* what) {
      if (Ratio(t.mib_per_s, base.mib_per_s) < kTarget) {
        short_of_target.push_back(absl::StrCat(p.size, "/", p.depth, " ", what));
      }
    };
    if (f.put_threads) check(p.kvtier.write, p.rados.write, "Put");
    if (f.put_batched) check(p.kvtier.write_batched, p.rados.write, "PutMany");
    check(p.kvtier.read, p.rados.read, "Get");
  }
  if (!short_of_target.empty()) {
    std::printf("below %.1fx of rados bench (size/depth): %s\n", kTarget,
                absl::StrJoin(short_of_target, ", ").c_str());
  }
  if (lookup.has_value()) {
    std::printf(
        "lookup of a %u-block chain, all present (%u reps): cluster Exists p50 %.0f us, p99 %.0f "
        "us; local hash map p50 %.1f us, p99 %.1f us\n",
        f.lookup_chain, f.lookup_reps, lookup->exists.p50_us, lookup->exists.p99_us,
        lookup->local.p50_us, lookup->local.p99_us);
  }
}

}  // namespace

void DeclareClusterBenchFlags(cli::Command& command) {
  command
      .SetDescription(
          "The cluster tier's RADOS objects (RadosObjectStore Put/Get of verified cold blocks)\n"
          "against `rados bench` on the same pool, same object size and concurrency, in one run;\n"
          "then Exists of a whole chain next to a local hash-map lookup.")
      .AddFlag("ceph-conf", "PATH", "ceph.conf of the cluster (required)")
      .AddFlag("keyring", "PATH", "the client's keyring (default: the conf's)")
      .AddFlag("user", "ID", "cephx client id, client.ID (default admin)")
      .AddFlag("pool", "NAME", "the pool (required; the benchmark deletes what it writes)")
      .AddFlag("sizes", "B,B", "object sizes in bytes (default 1331200,40960)")
      .AddFlag("depths", "N,N", "queue depths (default 1,4,16,64)")
      .AddFlag("seconds", "N", "seconds per write and per read phase (default 3)")
      .AddFlag("rounds", "N",
               "rounds per point, the side that goes first alternating; each side's median round\n"
               "is reported (default 3)")
      .AddFlag("max-phase-bytes", "B",
               "at most this many bytes stored per phase (default 134217728: a memstore OSD\n"
               "holds about twice what is stored in RAM)")
      .AddFlag("lookup-chain", "N", "blocks in the lookup chain; 0 skips the lookup (default 4096)")
      .AddFlag("lookup-reps", "N", "timed lookups of the chain (default 50)")
      .AddFlag("put", "HOW",
               "kvtier's writer: 'threads' (Put from DEPTH threads), 'batched' (PutMany of DEPTH\n"
               "blocks at a time from one thread) or 'both' (the read follows 'batched'; writes a\n"
               "third more); default threads")
      .AddFlag("rados", "PATH", "the rados CLI (default rados)")
      .AddSwitch("json", "print JSON instead of the table");
}

int RunClusterBench(const cli::Values& values) {
  absl::StatusOr<Flags> parsed = ParseFlags(values);
  if (!parsed.ok()) return values.PrintUsageError(parsed.status().message());
  const Flags& f = *parsed;
  cluster::ClusterOptions o;
  o.conf_path = f.ceph_conf;
  o.keyring = f.keyring;
  o.client_id = f.user;
  o.pool = f.pool;
  o.osd_op_timeout = absl::Seconds(30);
  o.mon_op_timeout = absl::Seconds(30);
  absl::StatusOr<std::unique_ptr<RadosObjectStore>> store = RadosObjectStore::Connect(o);
  if (!store.ok()) {
    std::fprintf(stderr, "kvtier-bench cluster: %s\n", store.status().ToString().c_str());
    return 1;
  }
  const RadosCli rados(f);
  std::vector<Point> points;
  // Distinct key ranges per point, so that leftovers of a failed point cannot collide.
  uint64_t base = static_cast<uint64_t>(absl::ToUnixSeconds(absl::Now())) << 32;
  for (uint32_t size : f.sizes) {
    for (uint32_t depth : f.depths) {
      Point p;
      p.size = size;
      p.depth = depth;
      p.kvtier_first = points.size() % 2 == 1;
      const uint64_t max_objects = std::max<uint64_t>(1, f.max_phase_bytes / size);
      for (uint32_t round = 0; round < f.rounds; ++round) {
        const bool kvtier_first = p.kvtier_first != (round % 2 == 1);
        std::fprintf(stderr, "size %u depth %u round %u: %s first\n", size, depth, round + 1,
                     kvtier_first ? "kvtier" : "rados");
        for (int side = 0; side < 2; ++side) {
          const bool kvtier = (side == 0) == kvtier_first;
          absl::StatusOr<SideResult> r =
              kvtier ? RunKvtierSide(**store, f, size, depth, max_objects, base)
                     : RunRadosSide(rados, f, size, depth, max_objects);
          if (!r.ok()) {
            std::fprintf(stderr, "kvtier-bench cluster: %s side, size %u depth %u: %s\n",
                         kvtier ? "kvtier" : "rados", size, depth, r.status().ToString().c_str());
            return 1;
          }
          (kvtier ? p.kvtier_rounds : p.rados_rounds).push_back(*r);
        }
        base += uint64_t{1} << 24;
      }
      p.rados = Median(p.rados_rounds);
      p.kvtier = Median(p.kvtier_rounds);
      points.push_back(p);
    }
  }
  std::optional<LookupResult> lookup;
  if (f.lookup_chain > 0) {
    std::fprintf(stderr, "lookup: %u-block chain\n", f.lookup_chain);
    absl::StatusOr<LookupResult> l = RunLookup(**store, f, base);
    if (!l.ok()) {
      std::fprintf(stderr, "kvtier-bench cluster: lookup: %s\n", l.status().ToString().c_str());
      return 1;
    }
    lookup = *l;
  }
  PrintReport(f, points, lookup);
  return 0;
}

}  // namespace kvtier::bench
