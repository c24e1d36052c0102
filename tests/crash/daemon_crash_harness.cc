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
//  - The engine's side (the threads, the ledger of durable blocks, the page contents) is in
//    daemon_crash_workload.{h,cc}; the data is bounded so that disk eviction can never drop an
//    acknowledged block: see kLiveDurable there. Blocks that stop being counted (older acknowledged
//    ones, offloads that were not acknowledged) are removed with the admin Evict by hash while the
//    index takes writes.
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "tests/crash/daemon_crash_workload.h"
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
constexpr int kExitSkipped = 77;  // ctest's SKIP_RETURN_CODE

struct Flags {
  int cycles = 20;
  uint64_t seed = 1;
  std::string kvtierd;
  std::string dir;
  bool full_drive = true;
  int corrupt_disk_at = -1;  // the cycle whose restart finds the disk tier's files corrupted
};

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
    expect(peak_disk_use_ <= kDiskUseLimit,
           absl::StrFormat("the disk tier reached %.0f%% of its capacity: eviction may have "
                           "dropped acknowledged blocks (the harness's bounds are wrong)",
                           100 * peak_disk_use_));
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
