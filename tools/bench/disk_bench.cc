// `kvtier-bench disk`: for each operation (writes first, so that reads read written data), block
// size and queue depth, kvtier keeps exactly `depth` requests in flight through BlockFile for
// --seconds (each completion submits the next request from its callback, at a random
// block-aligned slot), then fio runs as a subprocess on the same file with the same block size,
// iodepth, O_DIRECT, random block-aligned offsets and one job. The figure of merit is the ratio
// kvtier/fio of bytes per second. The two alternate which runs first (--rounds=N repeats both and
// keeps the median run), so that neither always inherits the other's device state. The file is
// first written end to end (as a cache file is in steady state): reading never-written
// (unwritten-extent) blocks costs the device nothing, and the first write to an unwritten extent
// costs a conversion (and, from io_uring, a punt to a kernel worker) that later writes do not,
// which would penalize whichever tool writes a block first. The table also shows how many
// physically contiguous runs each kvtier request buffer has: on a virtio disk every run is one
// descriptor, and freshly faulted 4 KiB pages come out contiguous in some processes and scattered
// in others (fio's too), which moves large-block throughput more than either engine does.
//
// Run: build/bin/kvtier-bench disk --file-bytes=1GiB --seconds=1 --depths=1,8,64
#include "tools/bench/disk_bench.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
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
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/mutex.h"
#include "common/file_reading.h"
#include "common/histogram.h"
#include "daemon/io/block_file.h"

extern char** environ;

namespace kvtier::bench {
namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr uint32_t kAlignment = 4096;

struct DiskBenchFlags {
  std::string dir;
  uint64_t file_bytes = uint64_t{4} << 30;
  std::vector<uint32_t> block_sizes = {1331200, 40960};
  std::vector<uint32_t> depths = {1, 2, 4, 8, 16, 32, 64};
  double seconds = 3;
  uint32_t rounds = 1;
  io::IoEngine engine = io::IoEngine::kAuto;
  std::vector<io::IoKind> ops = {io::IoKind::kWrite, io::IoKind::kRead};
  std::string fio = "fio";
  bool run_fio = true;
  bool json = false;
  bool keep_file = false;
  bool register_buffers = true;
  bool fill = true;
  bool huge_pages = false;
};

// "4GiB", "512M", "1331200".
absl::StatusOr<uint64_t> ParseBytes(absl::string_view text) {
  static constexpr struct {
    const char* suffix;
    uint64_t factor;
  } kSuffixes[] = {{"KiB", 1ull << 10}, {"MiB", 1ull << 20}, {"GiB", 1ull << 30},
                   {"TiB", 1ull << 40}, {"K", 1ull << 10},   {"M", 1ull << 20},
                   {"G", 1ull << 30},   {"T", 1ull << 40}};
  uint64_t factor = 1;
  for (const auto& s : kSuffixes) {
    if (absl::EndsWith(text, s.suffix)) {
      text.remove_suffix(std::strlen(s.suffix));
      factor = s.factor;
      break;
    }
  }
  uint64_t value;
  if (!absl::SimpleAtoi(text, &value) || value == 0 || value > UINT64_MAX / factor) {
    return cli::UsageError(absl::StrCat("'", text, "' is not a byte count"));
  }
  return value * factor;
}

absl::StatusOr<std::vector<uint32_t>> ParseUintList(absl::string_view flag,
                                                    absl::string_view text) {
  std::vector<uint32_t> values;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    uint32_t value;
    if (!absl::SimpleAtoi(part, &value) || value == 0) {
      return cli::UsageError(absl::StrCat("--", flag, ": '", part, "' is not a positive integer"));
    }
    values.push_back(value);
  }
  return values;
}

absl::StatusOr<DiskBenchFlags> ParseFlags(const cli::Values& values) {
  DiskBenchFlags flags;
  const char* tmpdir = std::getenv("TMPDIR");
  flags.dir = tmpdir != nullptr && tmpdir[0] != '\0' ? tmpdir : "/var/tmp";
  for (const auto& [name, given] : values.flags()) {
    std::optional<std::string> value = given;
    if (name == "no-fio" || name == "json" || name == "keep-file" ||
        name == "no-registered-buffers" || name == "no-fill" || name == "huge-pages") {
      if (name == "no-fio") flags.run_fio = false;
      if (name == "json") flags.json = true;
      if (name == "keep-file") flags.keep_file = true;
      if (name == "no-registered-buffers") flags.register_buffers = false;
      if (name == "no-fill") flags.fill = false;
      if (name == "huge-pages") flags.huge_pages = true;
      continue;
    }
    if (name == "dir") {
      flags.dir = *value;
    } else if (name == "file-bytes") {
      absl::StatusOr<uint64_t> bytes = ParseBytes(*value);
      if (!bytes.ok()) return bytes.status();
      flags.file_bytes = *bytes;
    } else if (name == "block-sizes" || name == "depths") {
      absl::StatusOr<std::vector<uint32_t>> list = ParseUintList(name, *value);
      if (!list.ok()) return list.status();
      (name == "depths" ? flags.depths : flags.block_sizes) = *std::move(list);
    } else if (name == "seconds") {
      if (!absl::SimpleAtod(*value, &flags.seconds) || !(flags.seconds > 0)) {
        return cli::UsageError(absl::StrCat("--seconds: '", *value, "' is not a positive number"));
      }
    } else if (name == "rounds") {
      if (!absl::SimpleAtoi(*value, &flags.rounds) || flags.rounds == 0 || flags.rounds > 100) {
        return cli::UsageError(absl::StrCat("--rounds: '", *value, "' is not in [1, 100]"));
      }
    } else if (name == "engine") {
      if (*value == "auto") {
        flags.engine = io::IoEngine::kAuto;
      } else if (*value == "uring") {
        flags.engine = io::IoEngine::kUring;
      } else if (*value == "threads") {
        flags.engine = io::IoEngine::kThreadPool;
      } else {
        return cli::UsageError(
            absl::StrCat("--engine: '", *value, "' is not auto, uring or threads"));
      }
    } else if (name == "ops") {
      flags.ops.clear();
      bool seen[2] = {false, false};
      for (absl::string_view op : absl::StrSplit(*value, ',')) {
        if (op != "write" && op != "read") {
          return cli::UsageError(absl::StrCat("--ops: '", op, "' is not write or read"));
        }
        seen[op == "read"] = true;
      }
      if (seen[0]) flags.ops.push_back(io::IoKind::kWrite);  // writes first, always
      if (seen[1]) flags.ops.push_back(io::IoKind::kRead);
    } else {
      flags.fio = *value;
    }
  }
  for (uint32_t block : flags.block_sizes) {
    if (block % kAlignment != 0) {
      return cli::UsageError(
          absl::StrCat("block size ", block, " is not a multiple of ", kAlignment));
    }
    if (flags.file_bytes / block < 2) {
      return cli::UsageError(
          absl::StrCat("--file-bytes ", flags.file_bytes, " holds fewer than 2 blocks of ", block));
    }
  }
  for (uint32_t depth : flags.depths) {
    if (depth > 4096) return cli::UsageError(absl::StrCat("depth ", depth, " is above 4096"));
  }
  flags.file_bytes -= flags.file_bytes % kAlignment;
  return flags;
}

const char* OpName(io::IoKind kind) { return kind == io::IoKind::kRead ? "read" : "write"; }

// Buffers for every request that can be in flight, registered with the ring: anonymous memory, in
// 4 KiB pages like fio's (the baseline), or in transparent huge pages with --huge-pages (a request
// then reaches the device as a few large segments instead of one per page).
class BufferPool {
 public:
  BufferPool(uint32_t lanes, uint32_t lane_bytes, bool huge_pages) : lane_bytes_(lane_bytes) {
    constexpr size_t kHugePage = size_t{2} << 20;
    const size_t bytes = size_t{lanes} * lane_bytes;
    mapped_bytes_ = (bytes + kHugePage - 1) / kHugePage * kHugePage;
    void* p =
        mmap(nullptr, mapped_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) std::abort();
    // Advisory either way: the kernel may refuse huge pages, or use them under THP=always.
    madvise(p, mapped_bytes_, huge_pages ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    data_ = static_cast<uint8_t*>(p);
    uint64_t state = 0x2545f4914f6cdd1dULL;
    for (size_t i = 0; i + 8 <= bytes; i += 8) {  // incompressible, not zeros
      state ^= state << 13;
      state ^= state >> 7;
      state ^= state << 17;
      std::memcpy(data_ + i, &state, 8);
    }
    span_ = absl::Span<uint8_t>(data_, bytes);
  }
  ~BufferPool() { munmap(data_, mapped_bytes_); }
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  uint8_t* lane(uint32_t i) { return data_ + size_t{i} * lane_bytes_; }
  absl::Span<uint8_t> span() { return span_; }

  // The mean number of physically contiguous runs in the first `block` bytes of the first `lanes`
  // lanes: the scatter-gather segments a device sees per request at best. nullopt when the page
  // frame numbers cannot be read (/proc/self/pagemap shows them to root only).
  std::optional<double> RunsPerBlock(uint32_t block, uint32_t lanes) const {
    const int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return std::nullopt;
    const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    uint64_t runs = 0;
    bool known = true;
    for (uint32_t l = 0; l < lanes && known; ++l) {
      const uintptr_t first = reinterpret_cast<uintptr_t>(data_ + size_t{l} * lane_bytes_) / page;
      const size_t count = (block + page - 1) / page;
      std::vector<uint64_t> entries(count);
      const ssize_t want = static_cast<ssize_t>(count * sizeof(uint64_t));
      if (pread(fd, entries.data(), want, static_cast<off_t>(first * sizeof(uint64_t))) != want) {
        known = false;
        break;
      }
      uint64_t previous = 0;
      for (size_t i = 0; i < count; ++i) {
        const uint64_t pfn = entries[i] & ((uint64_t{1} << 55) - 1);
        if (pfn == 0) known = false;
        if (i == 0 || pfn != previous + 1) ++runs;
        previous = pfn;
      }
    }
    close(fd);
    if (!known || lanes == 0) return std::nullopt;
    return static_cast<double>(runs) / lanes;
  }

 private:
  const uint32_t lane_bytes_;
  size_t mapped_bytes_;
  uint8_t* data_;
  absl::Span<uint8_t> span_;
};

struct PointResult {
  double bytes_per_s = 0;
  double iops = 0;
  uint64_t p50_us = 0;  // histogram bucket bounds
  uint64_t p99_us = 0;
};

// Requests of one measured point: each lane resubmits from its completion callback until stopped.
class ClosedLoop {
 public:
  ClosedLoop(io::BlockFile& file, io::IoKind kind, uint32_t block, uint32_t depth, BufferPool& pool,
             bool sequential)
      : file_(file),
        kind_(kind),
        block_(block),
        slots_(file.size_bytes() / block),
        sequential_(sequential),
        lanes_(depth),
        done_(static_cast<int>(depth)) {
    for (uint32_t i = 0; i < depth; ++i) {
      lanes_[i].buffer = pool.lane(i);
      lanes_[i].rng = 0x9e3779b97f4a7c15ULL * (i + 1) ^ (uint64_t{block} << 20);
    }
  }

  // Runs until `deadline` (or, sequentially, until every slot was visited once); blocks until the
  // last request completed. Returns the first error, if any.
  absl::Status Run(Clock::time_point deadline) {
    for (Lane& lane : lanes_) Issue(lane);
    while (!stop_.load(std::memory_order_relaxed) && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    stop_.store(true, std::memory_order_relaxed);
    done_.Wait();
    absl::MutexLock lock(&mu_);
    return first_error_;
  }

  uint64_t completed() const { return completed_.load(std::memory_order_relaxed); }

 private:
  struct Lane {
    uint8_t* buffer = nullptr;
    uint64_t rng = 0;
  };

  uint64_t NextSlot(Lane& lane) {
    if (sequential_) return next_sequential_.fetch_add(1, std::memory_order_relaxed);
    lane.rng ^= lane.rng << 13;
    lane.rng ^= lane.rng >> 7;
    lane.rng ^= lane.rng << 17;
    return lane.rng % slots_;
  }

  void Issue(Lane& lane) {
    const uint64_t slot = NextSlot(lane);
    if (slot >= slots_) {  // sequential pass finished
      stop_.store(true, std::memory_order_relaxed);
      done_.DecrementCount();
      return;
    }
    file_.Submit(io::IoRequest{kind_, slot * block_, lane.buffer, block_},
                 [this, &lane](absl::Status status) { OnDone(lane, std::move(status)); });
  }

  void OnDone(Lane& lane, absl::Status status) {
    if (!status.ok()) {
      {
        absl::MutexLock lock(&mu_);
        if (first_error_.ok()) first_error_ = std::move(status);
      }
      stop_.store(true, std::memory_order_relaxed);
    } else {
      completed_.fetch_add(1, std::memory_order_relaxed);
    }
    if (stop_.load(std::memory_order_relaxed)) {
      done_.DecrementCount();
      return;
    }
    Issue(lane);
  }

  io::BlockFile& file_;
  const io::IoKind kind_;
  const uint32_t block_;
  const uint64_t slots_;
  const bool sequential_;
  std::vector<Lane> lanes_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> completed_{0};
  std::atomic<uint64_t> next_sequential_{0};
  absl::BlockingCounter done_;
  absl::Mutex mu_;
  absl::Status first_error_ ABSL_GUARDED_BY(mu_);
};

LatencyHistogram::Snapshot Delta(const LatencyHistogram::Snapshot& after,
                                 const LatencyHistogram::Snapshot& before) {
  LatencyHistogram::Snapshot d;
  for (size_t i = 0; i < LatencyHistogram::kBuckets; ++i)
    d.counts[i] = after.counts[i] - before.counts[i];
  d.count = after.count - before.count;
  d.sum_us = after.sum_us - before.sum_us;
  return d;
}

absl::StatusOr<PointResult> RunKvtierPoint(io::BlockFile& file, io::IoKind kind, uint32_t block,
                                           uint32_t depth, double seconds, BufferPool& pool) {
  const io::BlockFileStats before = file.stats();
  ClosedLoop loop(file, kind, block, depth, pool, /*sequential=*/false);
  const Clock::time_point start = Clock::now();
  const absl::Status status = loop.Run(
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds)));
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  if (!status.ok()) return status;
  const io::BlockFileStats after = file.stats();
  const LatencyHistogram::Snapshot latency = kind == io::IoKind::kRead
                                                 ? Delta(after.read_latency, before.read_latency)
                                                 : Delta(after.write_latency, before.write_latency);
  PointResult r;
  r.iops = static_cast<double>(loop.completed()) / elapsed;
  r.bytes_per_s = r.iops * block;
  r.p50_us = latency.QuantileUpperBoundUs(0.5);
  r.p99_us = latency.QuantileUpperBoundUs(0.99);
  return r;
}

// Writes every slot once, sequentially, so that reads hit written blocks.
absl::Status FillFile(io::BlockFile& file, uint32_t block, uint32_t depth, BufferPool& pool,
                      bool quiet) {
  const Clock::time_point start = Clock::now();
  ClosedLoop loop(file, io::IoKind::kWrite, block, depth, pool, /*sequential=*/true);
  absl::Status status = loop.Run(Clock::time_point::max());
  if (!status.ok()) return status;
  if (absl::Status synced = file.Sync(); !synced.ok()) return synced;
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  if (!quiet) {
    std::fprintf(stderr, "filled %.2f GiB in %.1f s (%.2f GB/s)\n",
                 static_cast<double>(file.size_bytes()) / (1 << 30), elapsed,
                 static_cast<double>(loop.completed()) * block / elapsed / 1e9);
  }
  return absl::OkStatus();
}

struct FioResult {
  double bytes_per_s = 0;
  double iops = 0;
};

// fio's JSON report and its stderr are a few KiB; the limit only guards against a runaway file.
constexpr uint64_t kMaxFioOutputBytes = uint64_t{64} << 20;

// Runs fio (or any program) with `args`, stdout to /dev/null and stderr to `stderr_path`.
// Returns its exit status, or an error when it cannot be started.
absl::StatusOr<int> Spawn(const std::string& program, const std::vector<std::string>& args,
                          const std::string& stderr_path) {
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(program.c_str()));
  for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, stderr_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  pid_t pid;
  const int rc = posix_spawnp(&pid, program.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    return absl::NotFoundError(absl::StrCat("cannot run '", program, "': ", std::strerror(rc)));
  }
  int wstatus;
  while (waitpid(pid, &wstatus, 0) < 0) {
    if (errno != EINTR) return absl::InternalError(absl::StrCat("waitpid: ", std::strerror(errno)));
  }
  return WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
}

// fio on the benchmark file, trying io_uring, then libaio, then psync.
class FioBaseline {
 public:
  FioBaseline(std::string program, std::string file, uint64_t file_bytes, std::string dir)
      : program_(std::move(program)),
        file_(std::move(file)),
        file_bytes_(file_bytes),
        json_path_(dir + "/kvtier-bench-fio.json"),
        stderr_path_(dir + "/kvtier-bench-fio.err") {}
  ~FioBaseline() {
    unlink(json_path_.c_str());
    unlink(stderr_path_.c_str());
  }

  // NotFound when fio cannot be run at all.
  absl::Status Check() {
    absl::StatusOr<int> rc = Spawn(program_, {"--version"}, stderr_path_);
    if (!rc.ok()) return rc.status();
    if (*rc != 0) return absl::NotFoundError(absl::StrCat("'", program_, " --version' failed"));
    return absl::OkStatus();
  }

  const std::string& engine() const { return engines_[engine_index_]; }

  absl::StatusOr<FioResult> Run(io::IoKind kind, uint32_t block, uint32_t depth, double seconds) {
    absl::Status last;
    for (; engine_index_ < engines_.size(); ++engine_index_) {
      absl::StatusOr<FioResult> result = RunWith(engine(), kind, block, depth, seconds);
      if (result.ok()) return result;
      last = result.status();
      std::fprintf(stderr, "fio with --ioengine=%s failed (%s)%s\n", engine().c_str(),
                   std::string(last.message()).c_str(),
                   engine_index_ + 1 < engines_.size() ? "; trying the next engine" : "");
    }
    engine_index_ = engines_.size() - 1;
    return last;
  }

 private:
  absl::StatusOr<FioResult> RunWith(const std::string& engine, io::IoKind kind, uint32_t block,
                                    uint32_t depth, double seconds) {
    const std::string rw = kind == io::IoKind::kRead ? "randread" : "randwrite";
    const std::vector<std::string> args = {
        "--name=kvtier-disk",
        absl::StrCat("--filename=", file_),
        absl::StrCat("--rw=", rw),
        absl::StrCat("--bs=", block),
        absl::StrCat("--blockalign=", block),
        "--direct=1",
        absl::StrCat("--ioengine=", engine),
        absl::StrCat("--iodepth=", depth),
        "--numjobs=1",
        "--time_based=1",
        absl::StrFormat("--runtime=%dms", static_cast<int>(seconds * 1000)),
        absl::StrCat("--size=", file_bytes_),
        "--fallocate=none",
        "--randrepeat=0",
        "--norandommap=1",
        "--output-format=json",
        absl::StrCat("--output=", json_path_),
    };
    absl::StatusOr<int> rc = Spawn(program_, args, stderr_path_);
    if (!rc.ok()) return rc.status();
    if (*rc != 0) {
      absl::StatusOr<std::string> err =
          ReadRegularFile(stderr_path_, kMaxFioOutputBytes, "fio's stderr");
      return absl::InternalError(
          absl::StrCat("exit status ", *rc, ": ",
                       absl::StripAsciiWhitespace(err.ok() ? *err : err.status().message())));
    }
    absl::StatusOr<std::string> output =
        ReadRegularFile(json_path_, kMaxFioOutputBytes, "fio's JSON output");
    if (!output.ok()) return output.status();
    const std::string& text = *output;
    const size_t brace = text.find('{');  // fio may print notes before the JSON
    if (brace == std::string::npos) return absl::InternalError("fio printed no JSON");
    const Json doc = Json::parse(text.begin() + brace, text.end(), nullptr, false);
    if (doc.is_discarded() || !doc.contains("jobs") || doc["jobs"].empty()) {
      return absl::InternalError("fio's JSON has no jobs");
    }
    const Json& job = doc["jobs"][0];
    if (job.value("error", 0) != 0) {
      return absl::InternalError(absl::StrCat("fio job error ", job.value("error", 0)));
    }
    const Json& side = job[kind == io::IoKind::kRead ? "read" : "write"];
    FioResult r;
    r.bytes_per_s = side.value("bw_bytes", 0.0);
    r.iops = side.value("iops", 0.0);
    if (r.bytes_per_s <= 0) return absl::InternalError("fio reported no bandwidth");
    return r;
  }

  const std::string program_;
  const std::string file_;
  const uint64_t file_bytes_;
  const std::string json_path_;
  const std::string stderr_path_;
  const std::vector<std::string> engines_ = {"io_uring", "libaio", "psync"};
  size_t engine_index_ = 0;
};

struct Point {
  io::IoKind kind;
  uint32_t block;
  uint32_t depth;
  PointResult kvtier;
  std::optional<FioResult> fio;
};

// The run with the median throughput (the lower middle one for an even count).
template <typename Result>
Result MedianRun(std::vector<Result> runs) {
  std::sort(runs.begin(), runs.end(),
            [](const Result& a, const Result& b) { return a.bytes_per_s < b.bytes_per_s; });
  return runs[(runs.size() - 1) / 2];
}

// Measures one point: flags.rounds runs of kvtier and of fio, alternating which goes first from
// run to run and from point to point (`index`), so that neither always inherits the other's
// device state (write-back, a neighbour's load on a shared disk). A kvtier error is returned; a
// fio error leaves point->fio empty and sets *fio_failed.
absl::Status MeasurePoint(io::BlockFile& file, std::optional<FioBaseline>& fio,
                          const DiskBenchFlags& flags, BufferPool& pool, size_t index, Point* point,
                          bool* fio_failed) {
  std::vector<PointResult> kvtier_runs;
  std::vector<FioResult> fio_runs;
  for (uint32_t round = 0; round < flags.rounds; ++round) {
    const bool fio_first = (index + round) % 2 == 1;
    for (int turn = 0; turn < 2; ++turn) {
      if ((turn == 0) != fio_first) {
        absl::StatusOr<PointResult> kvtier =
            RunKvtierPoint(file, point->kind, point->block, point->depth, flags.seconds, pool);
        if (!kvtier.ok()) return kvtier.status();
        kvtier_runs.push_back(*kvtier);
        if (flags.rounds > 1 && !flags.json) {
          std::fprintf(stderr, "  round %u: kvtier %.3f GB/s\n", round, kvtier->bytes_per_s / 1e9);
        }
      } else if (fio.has_value() && !*fio_failed) {
        absl::StatusOr<FioResult> baseline =
            fio->Run(point->kind, point->block, point->depth, flags.seconds);
        if (!baseline.ok()) {
          std::fprintf(stderr, "kvtier-bench disk: fio %s %u x%u: %s\n", OpName(point->kind),
                       point->block, point->depth, baseline.status().ToString().c_str());
          *fio_failed = true;
          continue;
        }
        fio_runs.push_back(*baseline);
        if (flags.rounds > 1 && !flags.json) {
          std::fprintf(stderr, "  round %u: fio    %.3f GB/s\n", round,
                       baseline->bytes_per_s / 1e9);
        }
      }
    }
  }
  point->kvtier = MedianRun(std::move(kvtier_runs));
  if (!*fio_failed && !fio_runs.empty()) point->fio = MedianRun(std::move(fio_runs));
  return absl::OkStatus();
}

// "1331200 B -> 21.5, 40960 B -> 1.6" for the table, or "unknown".
std::string FormatRuns(const std::vector<std::pair<uint32_t, std::optional<double>>>& runs) {
  std::vector<std::string> parts;
  for (const auto& [block, mean] : runs) {
    if (!mean.has_value()) return "unknown (needs root)";
    parts.push_back(absl::StrFormat("%u B -> %.1f", block, *mean));
  }
  return absl::StrJoin(parts, ", ");
}

void PrintTable(const std::vector<Point>& points, const std::string& mechanism,
                const std::string& fio_engine, bool huge_pages,
                const std::vector<std::pair<uint32_t, std::optional<double>>>& runs) {
  std::printf("kvtier engine: %s; fio engine: %s\n", mechanism.c_str(), fio_engine.c_str());
  std::printf("kvtier buffers: %s; physically contiguous runs per block: %s\n",
              huge_pages ? "huge pages asked for" : "4 KiB pages", FormatRuns(runs).c_str());
  std::printf("%-5s %9s %5s %11s %11s %8s %8s %9s %11s %8s\n", "op", "block", "depth",
              "kvtier GB/s", "kvtier IOPS", "p50 us<=", "p99 us<=", "fio GB/s", "fio IOPS",
              "kv/fio");
  for (const Point& p : points) {
    std::string fio_gbs = "-";
    std::string fio_iops = "-";
    std::string ratio = "-";
    if (p.fio.has_value()) {
      fio_gbs = absl::StrFormat("%.3f", p.fio->bytes_per_s / 1e9);
      fio_iops = absl::StrFormat("%.0f", p.fio->iops);
      ratio = absl::StrFormat("%.2fx", p.kvtier.bytes_per_s / p.fio->bytes_per_s);
    }
    std::printf("%-5s %9u %5u %11.3f %11.0f %8llu %8llu %9s %11s %8s\n", OpName(p.kind), p.block,
                p.depth, p.kvtier.bytes_per_s / 1e9, p.kvtier.iops,
                static_cast<unsigned long long>(p.kvtier.p50_us),
                static_cast<unsigned long long>(p.kvtier.p99_us), fio_gbs.c_str(), fio_iops.c_str(),
                ratio.c_str());
  }
}

Json ToJson(const std::vector<Point>& points, const DiskBenchFlags& flags, const std::string& path,
            const std::string& mechanism, const std::string& fio_engine,
            const io::BlockFileStats& stats,
            const std::vector<std::pair<uint32_t, std::optional<double>>>& runs) {
  Json doc;
  doc["huge_pages"] = flags.huge_pages;
  Json runs_json = Json::object();
  for (const auto& [block, mean] : runs) {
    runs_json[std::to_string(block)] = mean.has_value() ? Json(*mean) : Json(nullptr);
  }
  doc["buffer_runs_per_block"] = std::move(runs_json);
  doc["file"] = path;
  doc["file_bytes"] = flags.file_bytes;
  doc["seconds_per_run"] = flags.seconds;
  doc["rounds"] = flags.rounds;
  doc["engine"] = mechanism;
  doc["fio_engine"] = flags.run_fio ? Json(fio_engine) : Json(nullptr);
  doc["retries"] = stats.retries;
  doc["short_transfers"] = stats.short_transfers;
  doc["fixed_buffer_ops"] = stats.fixed_buffer_ops;
  Json list = Json::array();
  for (const Point& p : points) {
    Json j;
    j["op"] = OpName(p.kind);
    j["block_bytes"] = p.block;
    j["depth"] = p.depth;
    j["kvtier_bytes_per_s"] = p.kvtier.bytes_per_s;
    j["kvtier_iops"] = p.kvtier.iops;
    j["kvtier_p50_us_le"] = p.kvtier.p50_us;
    j["kvtier_p99_us_le"] = p.kvtier.p99_us;
    if (p.fio.has_value()) {
      j["fio_bytes_per_s"] = p.fio->bytes_per_s;
      j["fio_iops"] = p.fio->iops;
      j["ratio"] = p.kvtier.bytes_per_s / p.fio->bytes_per_s;
    } else {
      j["fio_bytes_per_s"] = nullptr;
      j["fio_iops"] = nullptr;
      j["ratio"] = nullptr;
    }
    list.push_back(std::move(j));
  }
  doc["points"] = std::move(list);
  return doc;
}

}  // namespace

void DeclareDiskBenchFlags(cli::Command& command) {
  command.SetDescription(
      "Random block I/O through kvtier's BlockFile at fixed queue depths, next to fio on the same "
      "file.");
  command.AddFlag("dir", "DIR", "where the test file goes (default $TMPDIR, else /var/tmp)");
  command.AddFlag("file-bytes", "N", "file size; suffixes K, M, G, KiB, MiB, GiB (default 4GiB)");
  command.AddFlag("block-sizes", "A,B,...",
                  "block sizes in bytes, multiples of 4096 (default 1331200,40960)");
  command.AddFlag("depths", "A,B,...", "requests kept in flight (default 1,2,4,8,16,32,64)");
  command.AddFlag("seconds", "S", "duration of each point (default 3)");
  command.AddFlag("rounds", "N",
                  "runs of kvtier and of fio per point, alternating which goes first;\n"
                  "the median run is reported (default 1)");
  command.AddFlag("engine", "E", "auto | uring | threads (default auto)");
  command.AddFlag("ops", "write,read",
                  "operations, in this order (writes first; default write,read)");
  command.AddFlag("fio", "PATH", "the fio binary (default \"fio\" on PATH)");
  command.AddSwitch("no-fio", "skip the fio baseline");
  command.AddSwitch("json", "print JSON instead of the table");
  command.AddSwitch("keep-file", "keep the test file afterwards");
  command.AddSwitch("no-registered-buffers", "do not register the request buffers with io_uring");
  command.AddSwitch("huge-pages", "back the request buffers with transparent huge pages");
  command.AddSwitch("no-fill",
                    "skip writing the whole file before measuring (a file kept from an\n"
                    "earlier run with --keep-file is already written)");
}

int RunDiskBench(const cli::Values& values) {
  absl::StatusOr<DiskBenchFlags> parsed = ParseFlags(values);
  if (!parsed.ok()) return values.PrintUsageError(parsed.status().message());
  const DiskBenchFlags& flags = *parsed;
  uint32_t max_depth = 1;
  uint32_t max_block = kAlignment;
  for (uint32_t d : flags.depths) max_depth = std::max(max_depth, d);
  for (uint32_t b : flags.block_sizes) max_block = std::max(max_block, b);
  // The fill pass writes the whole file in the largest power-of-two block (<= 1 MiB) dividing it.
  constexpr uint32_t kFillDepth = 16;
  uint32_t fill_block = 1 << 20;
  while (flags.file_bytes % fill_block != 0) fill_block /= 2;

  std::optional<FioBaseline> fio;
  const std::string path = absl::StrCat(flags.dir, "/kvtier-bench-disk.dat");
  if (flags.run_fio) {
    fio.emplace(flags.fio, path, flags.file_bytes, flags.dir);
    if (absl::Status found = fio->Check(); !found.ok()) {
      std::fprintf(stderr, "kvtier-bench disk: %s (pass --fio=PATH, or --no-fio)\n",
                   std::string(found.message()).c_str());
      return 1;
    }
  }

  BufferPool pool(std::max(max_depth, kFillDepth), std::max(max_block, fill_block),
                  flags.huge_pages);
  io::BlockFileOptions options;
  options.path = path;
  options.size_bytes = flags.file_bytes;
  options.engine = flags.engine;
  options.queue_depth = std::max(max_depth, kFillDepth);
  options.threads = std::min<uint32_t>(256, std::max(max_depth, kFillDepth));
  if (flags.register_buffers) options.registered_buffers = {pool.span()};
  absl::StatusOr<std::unique_ptr<io::BlockFile>> opened = io::OpenBlockFile(options);
  if (!opened.ok()) {
    std::fprintf(stderr, "kvtier-bench disk: %s\n", opened.status().ToString().c_str());
    return 1;
  }
  io::BlockFile& file = **opened;
  if (!flags.json) {
    std::fprintf(stderr, "file %s, %.2f GiB, engine %s\n", path.c_str(),
                 static_cast<double>(flags.file_bytes) / (1 << 30), file.mechanism().c_str());
  }

  if (flags.fill) {
    if (absl::Status filled = FillFile(file, fill_block, kFillDepth, pool, flags.json);
        !filled.ok()) {
      std::fprintf(stderr, "kvtier-bench disk: filling the file: %s\n", filled.ToString().c_str());
      opened->reset();
      if (!flags.keep_file) unlink(path.c_str());
      return 1;
    }
  }
  int exit_code = 0;
  std::vector<Point> points;
  for (io::IoKind kind : flags.ops) {
    for (uint32_t block : flags.block_sizes) {
      for (uint32_t depth : flags.depths) {
        Point point{kind, block, depth, {}, std::nullopt};
        bool fio_failed = false;
        if (absl::Status measured =
                MeasurePoint(file, fio, flags, pool, points.size(), &point, &fio_failed);
            !measured.ok()) {
          std::fprintf(stderr, "kvtier-bench disk: %s %u x%u: %s\n", OpName(kind), block, depth,
                       measured.ToString().c_str());
          exit_code = 1;
          continue;
        }
        if (fio_failed) exit_code = 1;
        if (!flags.json) {
          std::fprintf(
              stderr, "%s %u x%u: kvtier %.3f GB/s%s\n", OpName(kind), block, depth,
              point.kvtier.bytes_per_s / 1e9,
              point.fio.has_value()
                  ? absl::StrFormat(", fio %.3f GB/s", point.fio->bytes_per_s / 1e9).c_str()
                  : "");
        }
        points.push_back(point);
      }
    }
  }
  const std::string mechanism = file.mechanism();
  const io::BlockFileStats stats = file.stats();
  std::vector<std::pair<uint32_t, std::optional<double>>> runs;
  for (uint32_t block : flags.block_sizes) {
    runs.emplace_back(block, pool.RunsPerBlock(block, max_depth));
  }
  opened->reset();
  if (!flags.keep_file) unlink(path.c_str());
  const std::string fio_engine = fio.has_value() ? fio->engine() : "none";
  if (flags.json) {
    std::printf("%s\n",
                ToJson(points, flags, path, mechanism, fio_engine, stats, runs).dump(2).c_str());
  } else {
    PrintTable(points, mechanism, fio_engine, flags.huge_pages, runs);
  }
  return exit_code;
}

}  // namespace kvtier::bench
