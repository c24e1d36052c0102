// kvtier-daemon-crash-harness: a real kvtierd process, SIGKILLed while an engine offloads, while
// it onboards, or while it is idle, and restarted, cycle after cycle; in the middle of the run its
// state drive fills up and later gets its space back. It checks what a crash or a full drive must
// never break:
//   - every block acknowledged as durable (an Offload item that came back ITEM_CODE_OK or
//     ITEM_CODE_ALREADY_STORED with ack WRITE_ACK_DURABLE) is found by Lookup and onboarded with
//     exactly the bytes that were offloaded, after every restart and whenever the workload reads
//     it (a page's bytes are a function of its block's hash);
//   - no onboard that returns ITEM_CODE_OK writes wrong bytes (codec raw: the page must come back
//     byte for byte);
//   - every restart answers Hello within 30 s, on a full drive too, and the daemon never exits
//     on its own;
//   - while the drive is full durable offloads fail with ITEM_CODE_RESOURCE_EXHAUSTED and a
//     message, and are not acknowledged; volatile offloads and onboards go on; once space is back
//     durable offloads are acknowledged again, without a restart.
// Usage: kvtier-daemon-crash-harness [--kvtierd=PATH] [--cycles=N] [--seed=S] [--dir=D]
//                                    [--no-full-drive] [--corrupt-disk-at=CYCLE]
// One line per cycle, then a PASS or FAIL summary; exit status 0 on PASS, 1 on FAIL, 77 (ctest's
// skip) when the state drive cannot be mounted (not root) and --no-full-drive was not given.
// PATH defaults to the kvtierd of the build; D (default: a new temporary directory) holds the
// socket, the engine's pool file and the daemon's log. --corrupt-disk-at flips bytes in the disk
// tier's files after the kill of that cycle, to show that the harness catches damage (the run
// must FAIL with acknowledged blocks lost).
//
// Design:
//  - The state directory lives on a 128 MiB tmpfs (SmallFileSystem) and the disk tier under it
//    (<state_dir>/disk, the default layout), so a full drive is full for the index and the disk
//    tier's file alike and every restart on it also reopens the disk tier there. At cycle N/3 the
//    drive is filled completely while the engine works, at 2N/3 the space is given back; the
//    harness waits each time until kvtier_index_writable says the daemon noticed, and holds the
//    daemon to the rules above for the RPCs that start after that.
//  - Each cycle four client threads offload durable blocks (new hashes, ack WRITE_ACK_DURABLE),
//    offload volatile ones (256 hashes reused), onboard acknowledged and volatile blocks into
//    scratch pages and pause. The kill moment rotates with the cycle: a durable offload in flight,
//    an onboard in flight, or every thread idle; it comes 50-800 ms into the cycle (sooner for an
//    offload kill once most of the cycle's new durable ids are used), then a random 0-2 ms after
//    such an RPC was seen in flight.
//  - The data is bounded so that disk eviction can never drop an acknowledged block: see
//    kLiveDurable. Blocks that stop being counted (older acknowledged ones, offloads that were not
//    acknowledged) are removed with the admin Evict by hash while the index takes writes.
#include <signal.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "tests/crash/kvtierd_process.h"
#include "tests/integration/daemon_fixture.h"
#include "tests/testing/small_file_system.h"
#include "tests/testing/temp_dir.h"

namespace kvtier::crash {
namespace {

using Clock = std::chrono::steady_clock;
using integration::Hash;
using integration::TestEngine;

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kDurableChain = 1;   // Hash(kDurableChain, id): a new id for every durable block
constexpr uint64_t kVolatileChain = 2;  // Hash(kVolatileChain, i), i < kVolatileIds, reused
constexpr uint32_t kVolatileIds = 256;
constexpr uint32_t kThreads = 4;
constexpr uint32_t kBatch = 8;                 // most items of one workload RPC
constexpr uint32_t kThreadPages = 2 * kBatch;  // per thread: sources, then scratch
constexpr uint32_t kCheckPages = 64;           // the restart check's scratch pages
constexpr uint32_t kSlots = kThreads * kThreadPages + kCheckPages;
// The data stays well below the disk tier's eviction watermark (95% of 48 MiB, about 2,700
// blocks of this layout): at most kLiveDurable acknowledged blocks are checked (older ones are
// evicted by hash and forgotten), at most kNewDurablePerCycle new durable ids are offloaded per
// cycle, and the volatile blocks reuse kVolatileIds hashes. The summary prints the disk tier's
// peak use.
constexpr size_t kLiveDurable = 512;
constexpr uint64_t kNewDurablePerCycle = 768;
constexpr uint8_t kScratchFill = 0xEE;
constexpr int kExitSkipped = 77;  // ctest's SKIP_RETURN_CODE

struct Flags {
  int cycles = 20;
  uint64_t seed = 1;
  std::string kvtierd;
  std::string dir;
  bool full_drive = true;
  int corrupt_disk_at = -1;  // the cycle whose restart finds the disk tier's files corrupted
};

// ---- Page contents: a function of the block's hash, so that every copy can be checked ----

uint64_t SplitMix(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void FillPage(uint8_t* page, uint64_t bytes, uint64_t chain, uint64_t id) {
  uint64_t x = chain * 0x100000001B3ull ^ id;
  for (uint64_t off = 0; off < bytes; off += 8) {
    const uint64_t v = SplitMix(x);
    std::memcpy(page + off, &v, std::min<uint64_t>(8, bytes - off));
  }
}

bool PageHolds(const uint8_t* page, uint64_t bytes, uint64_t chain, uint64_t id) {
  std::vector<uint8_t> expected(bytes);
  FillPage(expected.data(), bytes, chain, id);
  return std::memcmp(page, expected.data(), bytes) == 0;
}

grpc::ClientContext* WithDeadline(grpc::ClientContext* ctx) {
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  return ctx;
}

// ---- What the clients know, shared between their threads ----

// The state drive as the clients see it. The *Pending phases are the moments between changing
// the drive and the daemon saying so (kvtier_index_writable); nothing is expected of them.
enum class DrivePhase { kWritable, kFullPending, kFull, kReturnPending, kReturned };

bool DriveIsFull(DrivePhase p) {
  return p == DrivePhase::kFullPending || p == DrivePhase::kFull || p == DrivePhase::kReturnPending;
}

struct Counters {
  std::atomic<uint64_t> durable_acked{0};         // blocks acknowledged durable
  std::atomic<uint64_t> durable_refused_full{0};  // RESOURCE_EXHAUSTED while the drive was full
  std::atomic<uint64_t> durable_acked_full{0};    // acknowledged although the drive was full
  std::atomic<uint64_t> durable_acked_after{0};   // acknowledged once space was back
  std::atomic<uint64_t> durable_failed{0};        // other item failures (not acknowledged)
  std::atomic<uint64_t> volatile_stored{0};       // OK or ALREADY_STORED
  std::atomic<uint64_t> volatile_stored_full{0};  // ... while the drive was full
  std::atomic<uint64_t> volatile_failed{0};
  std::atomic<uint64_t> onboarded{0};  // OK items, bytes compared
  std::atomic<uint64_t> onboarded_full{0};
  std::atomic<uint64_t> wrong_bytes{0};
  std::atomic<uint64_t> lost{0};  // acknowledged blocks missing or damaged (workload or check)
  std::atomic<uint64_t> onboard_failed{0};  // acknowledged blocks not served for other reasons
  std::atomic<uint64_t> rpc_errors{0};  // RPCs that failed while the daemon was not being killed
  std::atomic<uint64_t> reported{0};    // findings printed
  absl::Mutex mu;
  std::string first_refusal ABSL_GUARDED_BY(mu);  // a durable item refused on the full drive
};

// Whether an onboard item code says the block is gone (a miss, or a copy that failed its checks)
// rather than that the daemon could not serve it just then.
bool SaysLost(v1::ItemCode code) {
  return code == v1::ITEM_CODE_NOT_FOUND || code == v1::ITEM_CODE_DATA_LOSS;
}

// Prints one finding (the first 20 of a run; later ones are only counted).
void Report(Counters* counters, const std::string& line) {
  if (counters->reported++ < 20) {
    std::printf("  %s\n", line.c_str());
    std::fflush(stdout);
  }
}

class Ledger {
 public:
  // New ids for a durable offload; they count as "to drop" until acknowledged.
  std::vector<uint64_t> Issue(uint32_t n, uint64_t* issued_this_cycle) {
    absl::MutexLock lock(&mu_);
    std::vector<uint64_t> ids;
    for (uint32_t i = 0; i < n && *issued_this_cycle < kNewDurablePerCycle; ++i) {
      ids.push_back(next_id_++);
      to_drop_[ids.back()] = 0;
      ++*issued_this_cycle;
    }
    return ids;
  }
  void Acknowledge(uint64_t id) {
    absl::MutexLock lock(&mu_);
    to_drop_.erase(id);
    acked_.insert(id);
  }
  // Up to `n` distinct acknowledged ids, drawn with `rng`.
  std::vector<uint64_t> Sample(uint32_t n, std::mt19937_64& rng) {
    absl::MutexLock lock(&mu_);
    std::vector<uint64_t> ids;
    if (acked_.empty()) return ids;
    std::set<uint64_t> seen;
    for (uint32_t i = 0; i < n; ++i) {
      auto it = acked_.begin();
      std::advance(it, static_cast<long>(rng() % acked_.size()));
      if (seen.insert(*it).second) ids.push_back(*it);
    }
    return ids;
  }
  // An acknowledged block was found missing: it is counted once and then dropped like the others.
  // False when it was not (or no longer) counted.
  bool Lost(uint64_t id) {
    absl::MutexLock lock(&mu_);
    if (acked_.erase(id) == 0) return false;
    to_drop_[id] = 0;
    return true;
  }
  bool IsAcknowledged(uint64_t id) {
    absl::MutexLock lock(&mu_);
    return acked_.count(id) != 0;
  }
  std::vector<uint64_t> Acknowledged() {
    absl::MutexLock lock(&mu_);
    return std::vector<uint64_t>(acked_.begin(), acked_.end());
  }
  // The oldest acknowledged ids beyond kLiveDurable stop being checked and are dropped.
  void Retire() {
    absl::MutexLock lock(&mu_);
    while (acked_.size() > kLiveDurable) {
      to_drop_[*acked_.begin()] = 0;
      acked_.erase(acked_.begin());
    }
  }
  std::vector<uint64_t> ToDrop() {
    absl::MutexLock lock(&mu_);
    std::vector<uint64_t> ids;
    for (const auto& [id, rounds] : to_drop_) ids.push_back(id);
    return ids;
  }
  // An Evict said `id` is gone (evicted now, or not found). Forgotten after two such rounds in
  // different incarnations, so that a removal a kill undid is repeated.
  void Dropped(uint64_t id) {
    absl::MutexLock lock(&mu_);
    auto it = to_drop_.find(id);
    if (it != to_drop_.end() && ++it->second >= 2) to_drop_.erase(it);
  }

 private:
  absl::Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::set<uint64_t> acked_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, int> to_drop_ ABSL_GUARDED_BY(mu_);  // id -> rounds reported gone
};

// ---- The engine: client threads against one incarnation ----

class Workload {
 public:
  Workload(KvtierdProcess* daemon, TestEngine* engine, std::string engine_id, Ledger* ledger,
           Counters* counters, std::atomic<DrivePhase>* phase, uint64_t seed)
      : daemon_(daemon),
        engine_(engine),
        engine_id_(std::move(engine_id)),
        ledger_(ledger),
        counters_(counters),
        phase_(phase),
        seed_(seed) {}
  ~Workload() { Stop(); }

  void Start() {
    for (uint32_t t = 0; t < kThreads; ++t) threads_.emplace_back([this, t] { Run(t); });
  }
  // Stops the threads (after the kill their RPCs fail at once) and joins them.
  void Stop() {
    stop_ = true;
    for (std::thread& t : threads_) t.join();
    threads_.clear();
  }
  // The kill is coming: RPC failures from now on are expected.
  void ExpectKill() { killing_ = true; }
  // Idle: the threads finish their RPC and wait for Stop().
  void Pause() { paused_ = true; }
  bool all_idle() const { return idle_threads_.load() == static_cast<int>(threads_.size()); }
  int offloads_in_flight() const { return offloads_in_flight_.load(); }
  int durable_offloads_in_flight() const { return durable_in_flight_.load(); }
  bool durable_budget_left() { return durable_issued() < kNewDurablePerCycle; }
  uint64_t durable_issued() {
    absl::MutexLock lock(&mu_);
    return issued_this_cycle_;
  }
  int onboards_in_flight() const { return onboards_in_flight_.load(); }
  int rpcs_in_flight() const { return offloads_in_flight() + onboards_in_flight(); }
  // The first RPC failure that no kill explains ("" when none).
  std::string first_error() {
    absl::MutexLock lock(&mu_);
    return first_error_;
  }

 private:
  void Run(uint32_t t) {
    std::mt19937_64 rng(seed_ * 7919 + t);
    const uint32_t src = t * kThreadPages;
    const uint32_t scratch = src + kBatch;
    while (!stop_) {
      if (paused_) {
        idle_threads_++;
        while (!stop_) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        break;
      }
      const uint32_t n = 1 + static_cast<uint32_t>(rng() % kBatch);
      const int op = static_cast<int>(rng() % 100);
      if (op < 25) {
        if (!DurableOffload(src, n)) VolatileOffload(src, n, rng);
      } else if (op < 55) {
        VolatileOffload(src, n, rng);
      } else if (op < 90) {
        OnboardSome(scratch, n, rng);
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(2 + rng() % 18));
      }
    }
  }

  void RpcFailed(const char* what, const grpc::Status& st) {
    if (killing_ || stop_) return;
    counters_->rpc_errors++;
    absl::MutexLock lock(&mu_);
    if (first_error_.empty()) {
      first_error_ = absl::StrCat(what, ": ", st.error_code(), " ", st.error_message());
    }
  }

  // Offloads up to `n` new durable blocks; false when this cycle's budget of new ids is spent.
  bool DurableOffload(uint32_t src, uint32_t n) {
    std::vector<uint64_t> ids;
    {
      absl::MutexLock lock(&mu_);
      ids = ledger_->Issue(n, &issued_this_cycle_);
    }
    if (ids.empty()) return false;
    v1::OffloadRequest req;
    req.set_engine_id(engine_id_);
    req.set_durable(true);
    req.set_ack(v1::WRITE_ACK_DURABLE);
    for (size_t i = 0; i < ids.size(); ++i) {
      const uint32_t page = src + static_cast<uint32_t>(i);
      FillPage(engine_->page(page), engine_->page_bytes(), kDurableChain, ids[i]);
      v1::OffloadItem* item = req.add_items();
      item->set_block_hash(Hash(kDurableChain, ids[i]));
      item->set_page_index(page);
    }
    const DrivePhase phase = phase_->load();
    grpc::ClientContext ctx;
    v1::OffloadResponse resp;
    durable_in_flight_++;
    offloads_in_flight_++;
    const grpc::Status st = daemon_->stub().Offload(WithDeadline(&ctx), req, &resp);
    offloads_in_flight_--;
    durable_in_flight_--;
    if (!st.ok()) {
      RpcFailed("durable Offload", st);
      return true;
    }
    for (int i = 0; i < resp.results_size() && i < static_cast<int>(ids.size()); ++i) {
      const v1::ItemCode code = resp.results(i).code();
      if (code == v1::ITEM_CODE_OK || code == v1::ITEM_CODE_ALREADY_STORED) {
        ledger_->Acknowledge(ids[i]);
        counters_->durable_acked++;
        if (phase == DrivePhase::kFull) counters_->durable_acked_full++;
        if (phase == DrivePhase::kReturned) counters_->durable_acked_after++;
      } else if (code == v1::ITEM_CODE_RESOURCE_EXHAUSTED && DriveIsFull(phase)) {
        counters_->durable_refused_full++;
        absl::MutexLock lock(&counters_->mu);
        if (counters_->first_refusal.empty()) counters_->first_refusal = resp.results(i).message();
      } else {
        counters_->durable_failed++;
      }
    }
    return true;
  }

  void VolatileOffload(uint32_t src, uint32_t n, std::mt19937_64& rng) {
    v1::OffloadRequest req;
    req.set_engine_id(engine_id_);
    const uint64_t first = rng() % kVolatileIds;
    for (uint32_t i = 0; i < n; ++i) {
      const uint64_t id = (first + i) % kVolatileIds;
      FillPage(engine_->page(src + i), engine_->page_bytes(), kVolatileChain, id);
      v1::OffloadItem* item = req.add_items();
      item->set_block_hash(Hash(kVolatileChain, id));
      item->set_page_index(src + i);
    }
    const DrivePhase phase = phase_->load();
    grpc::ClientContext ctx;
    v1::OffloadResponse resp;
    offloads_in_flight_++;
    const grpc::Status st = daemon_->stub().Offload(WithDeadline(&ctx), req, &resp);
    offloads_in_flight_--;
    if (!st.ok()) {
      RpcFailed("volatile Offload", st);
      return;
    }
    for (const v1::ItemResult& r : resp.results()) {
      if (r.code() == v1::ITEM_CODE_OK || r.code() == v1::ITEM_CODE_ALREADY_STORED) {
        counters_->volatile_stored++;
        if (phase == DrivePhase::kFull) counters_->volatile_stored_full++;
      } else {
        counters_->volatile_failed++;
      }
    }
  }

  // Onboards a mix of acknowledged durable blocks and volatile ones into scratch pages.
  void OnboardSome(uint32_t scratch, uint32_t n, std::mt19937_64& rng) {
    std::vector<std::pair<uint64_t, uint64_t>> blocks;  // (chain, id)
    for (uint64_t id : ledger_->Sample(n, rng)) blocks.emplace_back(kDurableChain, id);
    if (blocks.size() < n && rng() % 2 == 0)
      blocks.emplace_back(kVolatileChain, rng() % kVolatileIds);
    if (blocks.empty()) return;
    v1::OnboardRequest req;
    req.set_engine_id(engine_id_);
    req.set_continue_after_miss(true);
    for (size_t i = 0; i < blocks.size(); ++i) {
      const uint32_t page = scratch + static_cast<uint32_t>(i);
      std::memset(engine_->page(page), kScratchFill, engine_->page_bytes());
      v1::OnboardItem* item = req.add_items();
      item->set_block_hash(Hash(blocks[i].first, blocks[i].second));
      item->set_page_index(page);
    }
    const DrivePhase phase = phase_->load();
    grpc::ClientContext ctx;
    v1::OnboardResponse resp;
    onboards_in_flight_++;
    const grpc::Status st = daemon_->stub().Onboard(WithDeadline(&ctx), req, &resp);
    onboards_in_flight_--;
    if (!st.ok()) {
      RpcFailed("Onboard", st);
      return;
    }
    for (int i = 0; i < resp.results_size() && i < static_cast<int>(blocks.size()); ++i) {
      const auto [chain, id] = blocks[static_cast<size_t>(i)];
      const v1::ItemCode code = resp.results(i).code();
      if (code == v1::ITEM_CODE_OK) {
        counters_->onboarded++;
        if (phase == DrivePhase::kFull) counters_->onboarded_full++;
        if (!PageHolds(engine_->page(scratch + static_cast<uint32_t>(i)), engine_->page_bytes(),
                       chain, id)) {
          counters_->wrong_bytes++;
          Report(counters_,
                 absl::StrFormat("WRONG BYTES: onboard of %s block %d returned OK with other bytes",
                                 chain == kDurableChain ? "durable" : "volatile", id));
        }
      } else if (chain == kDurableChain && SaysLost(code) && ledger_->Lost(id)) {
        counters_->lost++;
        Report(counters_, absl::StrFormat("LOST: acknowledged block %d: onboard item code %d %s",
                                          id, static_cast<int>(code), resp.results(i).message()));
      } else if (chain == kDurableChain && !SaysLost(code) && ledger_->IsAcknowledged(id)) {
        counters_->onboard_failed++;
        Report(counters_, absl::StrFormat("ONBOARD FAILED: acknowledged block %d: item code %d %s",
                                          id, static_cast<int>(code), resp.results(i).message()));
      }
    }
  }

  KvtierdProcess* daemon_;
  TestEngine* engine_;
  const std::string engine_id_;
  Ledger* ledger_;
  Counters* counters_;
  std::atomic<DrivePhase>* phase_;
  const uint64_t seed_;
  std::vector<std::thread> threads_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> killing_{false};
  std::atomic<bool> paused_{false};
  std::atomic<int> idle_threads_{0};
  std::atomic<int> offloads_in_flight_{0};
  std::atomic<int> durable_in_flight_{0};
  std::atomic<int> onboards_in_flight_{0};
  absl::Mutex mu_;
  uint64_t issued_this_cycle_ ABSL_GUARDED_BY(mu_) = 0;
  std::string first_error_ ABSL_GUARDED_BY(mu_);
};

// ---- The harness ----

enum class KillMoment { kOffload, kOnboard, kIdle };
const char* KillMomentName(KillMoment m) {
  switch (m) {
    case KillMoment::kOffload:
      return "offload";
    case KillMoment::kOnboard:
      return "onboard";
    case KillMoment::kIdle:
      return "idle";
  }
  return "?";
}

class Harness {
 public:
  explicit Harness(Flags f) : f_(std::move(f)), rng_(f_.seed) {}

  int Run() {
    std::unique_ptr<kvtier::testing::TempDir> temp;
    if (f_.dir.empty()) {
      temp = std::make_unique<kvtier::testing::TempDir>(kvtier::testing::TempDir::Create().value());
      f_.dir = temp->path();
    } else if (mkdir(f_.dir.c_str(), 0700) != 0 && errno != EEXIST) {
      std::printf("FAIL: cannot create %s: %s\n", f_.dir.c_str(), std::strerror(errno));
      return 1;
    }
    std::string state_dir = f_.dir + "/state";
    if (f_.full_drive && f_.cycles < 3) {
      std::printf("no full-drive phase: it needs 3 cycles or more\n");
      f_.full_drive = false;
    } else if (f_.full_drive) {
      absl::StatusOr<std::unique_ptr<kvtier::testing::SmallFileSystem>> fs =
          kvtier::testing::SmallFileSystem::Mount(128 * kMiB);
      if (!fs.ok()) {
        std::printf("SKIP: no state drive to fill (%s); --no-full-drive runs without one\n",
                    fs.status().ToString().c_str());
        return kExitSkipped;
      }
      drive_ = std::move(*fs);
      state_dir = drive_->File("state");
    } else {
      std::printf("no full-drive phase: --no-full-drive\n");
    }
    state_dir_ = state_dir;
    const int fill_cycle = f_.full_drive ? f_.cycles / 3 : -1;
    const int unfill_cycle = f_.full_drive ? 2 * f_.cycles / 3 : -1;
    std::printf("kvtierd %s; state directory %s%s; %d cycles, seed %llu\n", f_.kvtierd.c_str(),
                state_dir.c_str(), f_.full_drive ? " (a 128 MiB tmpfs)" : "", f_.cycles,
                static_cast<unsigned long long>(f_.seed));
    if (f_.full_drive) {
      std::printf("the state drive fills up in cycle %d and gets its space back in cycle %d\n",
                  fill_cycle, unfill_cycle);
    }
    std::fflush(stdout);

    engine_ = std::make_unique<TestEngine>(f_.dir + "/pool", kSlots);
    daemon_ = std::make_unique<KvtierdProcess>(f_.kvtierd, f_.dir, state_dir);
    if (const absl::Status st = StartAndRegister(); !st.ok()) {
      std::printf("FAIL: the first start: %s\n%s", std::string(st.message()).c_str(),
                  daemon_->LogTail(30).c_str());
      return 1;
    }
    bool fatal = false;
    for (int cycle = 0; cycle < f_.cycles && !fatal; ++cycle) {
      fatal = !RunCycle(cycle, cycle == fill_cycle, cycle == unfill_cycle);
    }
    daemon_->Kill();
    return Summary(fatal);
  }

 private:
  // Starts the daemon and registers the engine (codec raw: pages come back byte for byte).
  absl::Status StartAndRegister() {
    KVTIER_RETURN_IF_ERROR(daemon_->Start());
    grpc::ClientContext ctx;
    v1::RegisterEngineResponse resp;
    const grpc::Status st =
        daemon_->stub().RegisterEngine(WithDeadline(&ctx), engine_->Request("", "raw"), &resp);
    if (!st.ok()) {
      return absl::UnavailableError(
          absl::StrCat("RegisterEngine: ", st.error_code(), " ", st.error_message()));
    }
    engine_id_ = resp.engine_id();
    namespace_id_ = resp.namespace_id();
    return absl::OkStatus();
  }

  // Waits until kvtier_index_writable reads `value`; false after 30 s.
  bool AwaitWritable(const std::string& value) {
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    while (Clock::now() < deadline) {
      if (daemon_->Metric("kvtier_index_writable") == value) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  // One cycle: workload (the drive changes in it when asked), the kill, the restart, the check.
  // False when the run cannot go on (a failed restart).
  bool RunCycle(int cycle, bool fill, bool unfill) {
    const KillMoment moment = static_cast<KillMoment>(cycle % 3);
    const int delay_ms = 50 + static_cast<int>(rng_() % 750);
    const CounterValues before = Snapshot();
    std::string drive_note;
    Workload workload(daemon_.get(), engine_.get(), engine_id_, &ledger_, &counters_, &phase_,
                      f_.seed * 1000003 + static_cast<uint64_t>(cycle));
    const auto started = Clock::now();
    workload.Start();
    if (fill || unfill) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50 + rng_() % 250));
      const auto changed = Clock::now();
      if (fill) {
        phase_ = DrivePhase::kFullPending;
        drive_->Fill(0);
      } else {
        phase_ = DrivePhase::kReturnPending;
        drive_->Unfill();
      }
      if (!AwaitWritable(fill ? "0" : "1")) {
        drive_failures_++;
        drive_note =
            absl::StrCat("; DRIVE: the daemon did not report the index ",
                         fill ? "unwritable on the full drive" : "writable again", " within 30 s");
      } else {
        drive_note =
            absl::StrFormat("; drive %s, index %s after %.2f s",
                            fill ? "filled" : "given space back", fill ? "unwritable" : "writable",
                            std::chrono::duration<double>(Clock::now() - changed).count());
      }
      phase_ = fill ? DrivePhase::kFull : DrivePhase::kReturned;
    }
    // An offload kill must find new durable ids left to offload: the wait ends early once most
    // of this cycle's are used.
    const auto until = Clock::now() + std::chrono::milliseconds(delay_ms);
    while (Clock::now() < until && (moment != KillMoment::kOffload ||
                                    workload.durable_issued() < kNewDurablePerCycle * 3 / 4)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }

    // The kill: at the moment an RPC of the chosen kind is in flight (after a random few
    // microseconds more), or once every client is idle.
    SampleDiskUse();
    bool caught = false;
    bool durable = false;  // an offload kill aims at a durable offload
    if (moment == KillMoment::kIdle) {
      workload.Pause();
      const auto deadline = Clock::now() + std::chrono::seconds(30);
      while (!workload.all_idle() && Clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(rng_() % 200));
      caught = workload.all_idle() && workload.rpcs_in_flight() == 0;
    } else {
      // An offload moment is a durable offload while this cycle has new durable ids left.
      durable = moment == KillMoment::kOffload && workload.durable_budget_left();
      auto in_flight = [&] {
        if (moment == KillMoment::kOnboard) return workload.onboards_in_flight();
        return durable ? workload.durable_offloads_in_flight() : workload.offloads_in_flight();
      };
      const auto deadline = Clock::now() + std::chrono::seconds(5);
      while (!caught && Clock::now() < deadline) {
        if (in_flight() == 0) {
          std::this_thread::sleep_for(std::chrono::microseconds(50));
          continue;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(rng_() % 2000));
        caught = in_flight() > 0;
      }
    }
    workload.ExpectKill();
    int status = 0;
    if (!daemon_->Alive(&status)) {
      unexpected_exits_++;
      std::printf("cycle %3d: DAEMON EXITED on its own (%s) before the kill:\n%s", cycle,
                  KvtierdProcess::DescribeStatus(status).c_str(), daemon_->LogTail(30).c_str());
    }
    const pid_t killed = daemon_->pid();
    daemon_->Kill();
    const int killed_after_ms = static_cast<int>(
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started).count());
    workload.Stop();
    kills_[static_cast<int>(moment)]++;
    if (caught) caught_[static_cast<int>(moment)]++;
    if (caught && durable) durable_offload_kills_++;
    const std::string kind =
        moment != KillMoment::kOffload ? "" : (durable ? "durable, " : "volatile, ");
    if (cycle == f_.corrupt_disk_at) {
      const int flipped = integration::CorruptDiskFiles(state_dir_ + "/disk");
      std::printf("cycle %3d: --corrupt-disk-at: %d bytes of the disk tier's files flipped\n",
                  cycle, flipped);
    }
    const std::string rpc_error = workload.first_error();

    // The restart.
    if (const absl::Status st = StartAndRegister(); !st.ok()) {
      failed_restarts_++;
      std::printf("cycle %3d: FAILED RESTART: %s\n%s", cycle, std::string(st.message()).c_str(),
                  daemon_->LogTail(30).c_str());
      return false;
    }
    restarts_++;
    if (DriveIsFull(phase_.load())) restarts_full_++;
    longest_restart_ = std::max(longest_restart_, daemon_->start_seconds());

    // The check: every acknowledged durable block.
    const uint64_t lost_before = counters_.lost.load();
    const uint64_t wrong_before = counters_.wrong_bytes.load();
    const std::vector<uint64_t> acked = ledger_.Acknowledged();
    CheckAcknowledged(cycle, acked);
    checked_ += acked.size();
    SampleDiskUse();

    // Bounded data: retire the oldest acknowledged blocks and drop what is not counted, while
    // the index takes writes (a removal on a full drive would not be durable).
    ledger_.Retire();
    if (!DriveIsFull(phase_.load())) DropUncounted();

    const CounterValues after = Snapshot();
    std::printf(
        "cycle %3d: kill during %-7s (%s%s, pid %d) after %3d ms; restart %.2f s; %zu acknowledged "
        "checked: %llu lost, %llu wrong; this cycle: %llu durable acked, %llu refused (full), "
        "%llu volatile stored, %llu onboarded; disk %.0f%%%s%s\n",
        cycle, KillMomentName(moment), kind.c_str(), caught ? "caught" : "NOT CAUGHT",
        static_cast<int>(killed), killed_after_ms, daemon_->start_seconds(), acked.size(),
        static_cast<unsigned long long>(counters_.lost.load() - lost_before),
        static_cast<unsigned long long>(counters_.wrong_bytes.load() - wrong_before),
        static_cast<unsigned long long>(after.durable_acked - before.durable_acked),
        static_cast<unsigned long long>(after.durable_refused_full - before.durable_refused_full),
        static_cast<unsigned long long>(after.volatile_stored - before.volatile_stored),
        static_cast<unsigned long long>(after.onboarded - before.onboarded), 100 * last_disk_use_,
        drive_note.c_str(), DriveIsFull(phase_.load()) ? "; drive full" : "");
    if (!rpc_error.empty())
      std::printf("  (an RPC failed before the kill: %s)\n", rpc_error.c_str());
    std::fflush(stdout);
    return true;
  }

  // Lookup must hit every acknowledged block and Onboard must return exactly its bytes.
  void CheckAcknowledged(int cycle, const std::vector<uint64_t>& ids) {
    const uint32_t first_page = kThreads * kThreadPages;
    for (size_t begin = 0; begin < ids.size(); begin += kCheckPages) {
      const size_t n = std::min<size_t>(kCheckPages, ids.size() - begin);
      std::vector<bool> missed(n, false);          // Lookup answered without a hit
      std::vector<std::string> lookup_failure(n);  // "" when Lookup hit the block
      for (size_t i = 0; i < n; ++i) {
        v1::LookupRequest req;
        req.set_engine_id(engine_id_);
        req.add_block_hashes(Hash(kDurableChain, ids[begin + i]));
        grpc::ClientContext ctx;
        v1::LookupResponse resp;
        const grpc::Status st = daemon_->stub().Lookup(WithDeadline(&ctx), req, &resp);
        if (!st.ok()) {
          lookup_failure[i] = absl::StrCat("Lookup failed: ", st.error_message(), "; ");
        } else if (resp.hit_pages() != 1) {
          missed[i] = true;
          lookup_failure[i] = "Lookup misses it; ";
        }
      }
      v1::OnboardRequest req;
      req.set_engine_id(engine_id_);
      req.set_continue_after_miss(true);
      for (size_t i = 0; i < n; ++i) {
        const uint32_t page = first_page + static_cast<uint32_t>(i);
        std::memset(engine_->page(page), kScratchFill, engine_->page_bytes());
        v1::OnboardItem* item = req.add_items();
        item->set_block_hash(Hash(kDurableChain, ids[begin + i]));
        item->set_page_index(page);
      }
      grpc::ClientContext ctx;
      v1::OnboardResponse resp;
      const grpc::Status st = daemon_->stub().Onboard(WithDeadline(&ctx), req, &resp);
      for (size_t i = 0; i < n; ++i) {
        const uint64_t id = ids[begin + i];
        const int item = static_cast<int>(i);
        const v1::ItemResult* r =
            st.ok() && item < resp.results_size() ? &resp.results(item) : nullptr;
        if (r != nullptr && r->code() == v1::ITEM_CODE_OK && lookup_failure[i].empty()) {
          if (!PageHolds(engine_->page(first_page + static_cast<uint32_t>(i)),
                         engine_->page_bytes(), kDurableChain, id)) {
            counters_.wrong_bytes++;
            Report(&counters_, absl::StrFormat("WRONG BYTES after the restart of cycle %d: "
                                               "acknowledged block %d",
                                               cycle, id));
          }
          continue;
        }
        const std::string onboard =
            r != nullptr
                ? absl::StrCat("Onboard item code ", static_cast<int>(r->code()), " ", r->message())
                : absl::StrCat("Onboard failed: ", st.ok() ? "no result" : st.error_message());
        const bool lost = missed[i] || (r != nullptr && SaysLost(r->code()));
        if (lost && ledger_.Lost(id)) {
          counters_.lost++;
          Report(&counters_,
                 absl::StrFormat("LOST after the restart of cycle %d: acknowledged block %d (%s%s)",
                                 cycle, id, lookup_failure[i], onboard));
        } else if (!lost) {
          counters_.onboard_failed++;
          Report(&counters_, absl::StrFormat("CHECK FAILED after the restart of cycle %d: "
                                             "acknowledged block %d (%s%s)",
                                             cycle, id, lookup_failure[i], onboard));
        }
      }
    }
  }

  // Evicts (drop) the blocks the ledger no longer counts: retired ones and durable offloads that
  // were never acknowledged.
  void DropUncounted() {
    const std::vector<uint64_t> ids = ledger_.ToDrop();
    for (size_t begin = 0; begin < ids.size(); begin += 4096) {
      const size_t n = std::min<size_t>(4096, ids.size() - begin);
      v1::EvictRequest req;
      req.mutable_namespaces()->set_namespace_id(namespace_id_);
      req.set_drop(true);
      for (size_t i = 0; i < n; ++i) {
        req.mutable_hashes()->add_hashes(Hash(kDurableChain, ids[begin + i]));
      }
      grpc::ClientContext ctx;
      v1::EvictResponse resp;
      const grpc::Status st = daemon_->admin().Evict(WithDeadline(&ctx), req, &resp);
      if (!st.ok()) {
        std::printf("  (Evict of %zu uncounted blocks failed: %s)\n", n,
                    st.error_message().c_str());
        return;
      }
      for (int i = 0; i < resp.results_size() && i < static_cast<int>(n); ++i) {
        const v1::ItemCode code = resp.results(i).code();
        if (code == v1::ITEM_CODE_OK || code == v1::ITEM_CODE_NOT_FOUND) {
          ledger_.Dropped(ids[begin + static_cast<size_t>(i)]);
        }
      }
    }
  }

  // The disk tier's use (Stats), for the peak in the summary.
  void SampleDiskUse() {
    grpc::ClientContext ctx;
    v1::StatsRequest req;
    v1::StatsResponse resp;
    if (!daemon_->stub().Stats(WithDeadline(&ctx), req, &resp).ok()) return;
    for (const v1::TierStats& t : resp.tiers()) {
      if (t.tier() != v1::TIER_DISK || t.capacity_bytes() == 0) continue;
      last_disk_use_ =
          static_cast<double>(t.used_bytes()) / static_cast<double>(t.capacity_bytes());
      peak_disk_use_ = std::max(peak_disk_use_, last_disk_use_);
      peak_disk_blocks_ = std::max<uint64_t>(peak_disk_blocks_, t.blocks());
    }
  }

  struct CounterValues {
    uint64_t durable_acked, durable_refused_full, volatile_stored, onboarded;
  };
  CounterValues Snapshot() const {
    return {counters_.durable_acked.load(), counters_.durable_refused_full.load(),
            counters_.volatile_stored.load(), counters_.onboarded.load()};
  }

  // Prints the summary: the verdict line, the details, and one line per problem; returns the
  // exit status (0 only without problems).
  int Summary(bool fatal) {
    using ull = unsigned long long;
    const Counters& c = counters_;
    std::vector<std::string> problems;
    auto expect = [&](bool ok, const std::string& problem) {
      if (!ok) problems.push_back(problem);
    };
    expect(c.lost == 0, absl::StrCat(c.lost.load(), " acknowledged blocks lost"));
    expect(c.wrong_bytes == 0, absl::StrCat(c.wrong_bytes.load(), " onboards with wrong bytes"));
    expect(failed_restarts_ == 0, absl::StrCat(failed_restarts_, " failed restarts"));
    expect(!fatal || failed_restarts_ > 0, "the run stopped early");
    expect(unexpected_exits_ == 0,
           absl::StrCat(unexpected_exits_, " daemon exits before a kill (see above)"));
    expect(c.onboard_failed == 0,
           absl::StrCat(c.onboard_failed.load(), " onboards of acknowledged blocks failed"));
    expect(c.durable_failed == 0,
           absl::StrCat(c.durable_failed.load(), " durable items failed on a writable drive"));
    expect(c.rpc_errors == 0, absl::StrCat(c.rpc_errors.load(), " RPCs failed before a kill"));
    for (int m = 0; m < 3 && f_.cycles >= 3; ++m) {
      expect(caught_[m] > 0, absl::StrCat("no kill caught the moment \"",
                                          KillMomentName(static_cast<KillMoment>(m)), "\""));
    }
    expect(f_.cycles < 3 || durable_offload_kills_ > 0, "no kill during a durable offload");
    std::string first_refusal;
    {
      absl::MutexLock lock(&counters_.mu);
      first_refusal = counters_.first_refusal;
    }
    if (f_.full_drive) {
      expect(drive_failures_ == 0, "the daemon did not report a change of the drive");
      expect(c.durable_refused_full > 0, "no durable offload was refused while the drive was full");
      expect(!first_refusal.empty(), "a durable offload was refused without a message");
      expect(c.durable_acked_full == 0,
             absl::StrCat(c.durable_acked_full.load(),
                          " durable blocks acknowledged while the drive was full"));
      expect(c.volatile_stored_full > 0, "no volatile offload was stored while the drive was full");
      expect(c.onboarded_full > 0, "no onboard succeeded while the drive was full");
      expect(c.durable_acked_after > 0, "no durable offload was acknowledged after space returned");
      expect(restarts_full_ > 0, "no restart on the full drive");
    }
    std::printf(
        "%s: %d cycles, %llu durable blocks acknowledged, %llu lost, %llu wrong bytes, %d failed "
        "restarts, %llu durable blocks refused while the drive was full\n",
        problems.empty() ? "PASS" : "FAIL", kills_[0] + kills_[1] + kills_[2],
        static_cast<ull>(c.durable_acked.load()), static_cast<ull>(c.lost.load()),
        static_cast<ull>(c.wrong_bytes.load()), failed_restarts_,
        static_cast<ull>(c.durable_refused_full.load()));
    std::printf(
        "  kills: %d during an offload (%d caught in a durable one), %d during an onboard (%d "
        "caught), %d idle (%d caught)\n",
        kills_[0], durable_offload_kills_, kills_[1], caught_[1], kills_[2], caught_[2]);
    std::printf(
        "  restarts: %d, %d failed, longest %.2f s; %llu acknowledged blocks looked up and "
        "onboarded after them\n",
        restarts_, failed_restarts_, longest_restart_, static_cast<ull>(checked_));
    std::printf(
        "  workload: %llu volatile blocks stored, %llu onboards compared byte for byte, %llu "
        "onboards of acknowledged blocks failed, %llu durable and %llu volatile items failed, %llu "
        "RPCs failed before a kill; disk tier peak %.0f%% (%llu blocks)\n",
        static_cast<ull>(c.volatile_stored.load()), static_cast<ull>(c.onboarded.load()),
        static_cast<ull>(c.onboard_failed.load()), static_cast<ull>(c.durable_failed.load()),
        static_cast<ull>(c.volatile_failed.load()), static_cast<ull>(c.rpc_errors.load()),
        100 * peak_disk_use_, static_cast<ull>(peak_disk_blocks_));
    if (f_.full_drive) {
      std::printf(
          "  full drive: %llu durable blocks refused (%llu acknowledged), e.g. \"%s\"; %llu "
          "volatile blocks stored, %llu onboarded, %d restarts on it; %llu durable blocks "
          "acknowledged after space returned\n",
          static_cast<ull>(c.durable_refused_full.load()),
          static_cast<ull>(c.durable_acked_full.load()), first_refusal.c_str(),
          static_cast<ull>(c.volatile_stored_full.load()),
          static_cast<ull>(c.onboarded_full.load()), restarts_full_,
          static_cast<ull>(c.durable_acked_after.load()));
    } else {
      std::printf("  no full-drive phase\n");
    }
    for (const std::string& p : problems) std::printf("  - %s\n", p.c_str());
    return problems.empty() ? 0 : 1;
  }

  Flags f_;
  std::mt19937_64 rng_;
  std::unique_ptr<kvtier::testing::SmallFileSystem> drive_;
  std::unique_ptr<TestEngine> engine_;
  std::unique_ptr<KvtierdProcess> daemon_;
  std::string engine_id_;
  uint64_t namespace_id_ = 0;
  Ledger ledger_;
  Counters counters_;
  std::atomic<DrivePhase> phase_{DrivePhase::kWritable};
  std::string state_dir_;
  int kills_[3] = {0, 0, 0};
  int caught_[3] = {0, 0, 0};  // kills at the moment wanted (an RPC of the kind in flight, idle)
  int durable_offload_kills_ = 0;
  int restarts_ = 0;
  int restarts_full_ = 0;
  int failed_restarts_ = 0;
  int unexpected_exits_ = 0;
  int drive_failures_ = 0;
  double longest_restart_ = 0;
  double peak_disk_use_ = 0;
  double last_disk_use_ = 0;
  uint64_t peak_disk_blocks_ = 0;
  uint64_t checked_ = 0;
};

}  // namespace
}  // namespace kvtier::crash

int main(int argc, char** argv) {
  kvtier::crash::Flags f;
  f.kvtierd = kvtier::integration::KvtierdPath();
  bool usage = false;
  for (int i = 1; i < argc && !usage; ++i) {
    const absl::string_view arg = argv[i];
    auto value = [&](absl::string_view name, absl::string_view* v) {
      if (!absl::StartsWith(arg, name)) return false;
      *v = arg.substr(name.size());
      return true;
    };
    absl::string_view v;
    if (absl::StartsWith(arg, "--gtest_")) {
      continue;  // runners that pass gtest flags to every test binary
    } else if (arg == "--no-full-drive") {
      f.full_drive = false;
    } else if (value("--cycles=", &v)) {
      usage = !absl::SimpleAtoi(v, &f.cycles) || f.cycles < 1;
    } else if (value("--seed=", &v)) {
      usage = !absl::SimpleAtoi(v, &f.seed);
    } else if (value("--corrupt-disk-at=", &v)) {
      usage = !absl::SimpleAtoi(v, &f.corrupt_disk_at) || f.corrupt_disk_at < 0;
    } else if (value("--dir=", &v)) {
      f.dir = std::string(v);
    } else if (value("--kvtierd=", &v)) {
      f.kvtierd = std::string(v);
    } else {
      usage = true;
    }
    if (usage) std::fprintf(stderr, "bad argument: %s\n", argv[i]);
  }
  if (usage || f.kvtierd.empty()) {
    std::fprintf(stderr,
                 "usage: %s [--kvtierd=PATH] [--cycles=N] [--seed=S] [--dir=D] [--no-full-drive] "
                 "[--corrupt-disk-at=CYCLE]\n",
                 argv[0]);
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);  // an HTTP request to a daemon that was just killed
  return kvtier::crash::Harness(std::move(f)).Run();
}
