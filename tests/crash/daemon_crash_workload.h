// The engine side of the daemon crash harness (daemon_crash_harness.cc): what a block's page holds
// (a function of its hash), the Ledger of durable blocks (issued, acknowledged, to drop), the
// Counters of what the clients saw, and the Workload: client threads that offload and onboard
// against one kvtierd incarnation until it is killed. Ledger and Counters are thread-safe; a
// Workload is driven by one thread (the harness's) while its own threads run.
#ifndef KVTIER_TESTS_CRASH_DAEMON_CRASH_WORKLOAD_H_
#define KVTIER_TESTS_CRASH_DAEMON_CRASH_WORKLOAD_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "kvtier/v1/service.grpc.pb.h"
#include "tests/crash/kvtierd_process.h"
#include "tests/integration/daemon_fixture.h"

namespace kvtier::crash {

constexpr uint64_t kDurableChain = 1;   // Hash(kDurableChain, id): a new id for every durable block
constexpr uint64_t kVolatileChain = 2;  // Hash(kVolatileChain, i), i < kVolatileIds, reused
constexpr uint32_t kVolatileIds = 256;
constexpr uint32_t kThreads = 4;
constexpr uint32_t kBatch = 8;                 // most items of one workload RPC
constexpr uint32_t kThreadPages = 2 * kBatch;  // per thread: sources, then scratch
constexpr uint32_t kCheckPages = 64;           // the restart check's scratch pages
constexpr uint32_t kSlots = kThreads * kThreadPages + kCheckPages;
// The data stays well below the disk tier's eviction watermark (95% of 64 MiB, about 3,100
// blocks of 20 KiB: a 16 KiB page and its headers): at most kLiveDurable acknowledged blocks are
// checked (older ones are evicted by hash and forgotten after each restart), at most
// kNewDurablePerCycle new durable ids are offloaded per cycle, and the volatile blocks reuse
// kVolatileIds hashes: about 1,550 blocks, and 2,300 in the cycle that gives the full drive its
// space back (nothing is evicted by hash while the drive is full). The harness fails a run whose
// disk tier goes above kDiskUseLimit, where eviction could explain a lost block.
constexpr size_t kLiveDurable = 512;
constexpr uint64_t kNewDurablePerCycle = 768;
constexpr double kDiskUseLimit = 0.85;
constexpr uint8_t kScratchFill = 0xEE;  // what a destination page holds before an onboard

// Writes the `bytes` bytes of block `id` of `chain` (a pseudo-random stream seeded by both).
void FillPage(uint8_t* page, uint64_t bytes, uint64_t chain, uint64_t id);
// Whether `page` holds exactly what FillPage writes for block `id` of `chain`.
bool PageHolds(const uint8_t* page, uint64_t bytes, uint64_t chain, uint64_t id);
// Gives a call a 20-second deadline; returns `ctx`.
grpc::ClientContext* WithDeadline(grpc::ClientContext* ctx);

// The state drive as the clients see it. The *Pending phases are the moments between changing
// the drive and the daemon saying so (kvtier_index_writable); nothing is expected of them.
enum class DrivePhase { kWritable, kFullPending, kFull, kReturnPending, kReturned };
bool DriveIsFull(DrivePhase p);

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
  std::atomic<uint64_t> rpc_errors{0};      // RPCs that failed while no kill was coming
  std::atomic<uint64_t> reported{0};        // findings printed
  absl::Mutex mu;
  std::string first_refusal ABSL_GUARDED_BY(mu);  // a durable item refused on the full drive
};

// Whether an onboard item code says the block is gone (a miss, or a copy that failed its checks)
// rather than that the daemon could not serve it just then.
bool SaysLost(v1::ItemCode code);

// Prints one finding (the first 20 of a run; later ones are only counted).
void Report(Counters* counters, const std::string& line);

// The durable blocks: ids issued to offloads, the acknowledged ones (checked after every
// restart), and the ones to remove from the daemon (never acknowledged, retired or lost).
class Ledger {
 public:
  // Up to `n` new ids for a durable offload, while *issued_this_cycle is below
  // kNewDurablePerCycle (it counts them); they are "to drop" until acknowledged.
  std::vector<uint64_t> Issue(uint32_t n, uint64_t* issued_this_cycle);
  void Acknowledge(uint64_t id);
  // Up to `n` distinct acknowledged ids, drawn with `rng`.
  std::vector<uint64_t> Sample(uint32_t n, std::mt19937_64& rng);
  // An acknowledged block was found missing: it is counted once and then dropped like the others.
  // False when it was not (or no longer) counted.
  bool Lost(uint64_t id);
  bool IsAcknowledged(uint64_t id);
  std::vector<uint64_t> Acknowledged();
  // The oldest acknowledged ids beyond kLiveDurable stop being checked and are dropped.
  void Retire();
  std::vector<uint64_t> ToDrop();
  // An Evict said `id` is gone (evicted now, or not found). Forgotten after two such rounds in
  // different incarnations, so that a removal a kill undid is repeated.
  void Dropped(uint64_t id);

 private:
  absl::Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::set<uint64_t> acked_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, int> to_drop_ ABSL_GUARDED_BY(mu_);  // id -> rounds reported gone
};

// kThreads client threads against one incarnation of the daemon: each offloads new durable
// blocks (ack WRITE_ACK_DURABLE; 25% of its steps), offloads volatile ones (30%), onboards
// acknowledged and volatile blocks and compares the bytes (35%), or pauses (10%). Every pointer
// is borrowed for the Workload's life. Lock order: Workload::mu_ before the Ledger's.
class Workload {
 public:
  Workload(KvtierdProcess* daemon, integration::TestEngine* engine, std::string engine_id,
           Ledger* ledger, Counters* counters, std::atomic<DrivePhase>* phase, uint64_t seed);
  ~Workload() { Stop(); }

  void Start();
  // Stops the threads (after the kill their RPCs fail at once) and joins them. Blocks.
  void Stop();
  // The kill is coming: RPC failures from now on are expected.
  void ExpectKill() { killing_ = true; }
  // Idle: the threads finish their RPC and wait for Stop().
  void Pause() { paused_ = true; }
  bool all_idle() const { return idle_threads_.load() == static_cast<int>(threads_.size()); }
  int offloads_in_flight() const { return offloads_in_flight_.load(); }
  int durable_offloads_in_flight() const { return durable_in_flight_.load(); }
  int onboards_in_flight() const { return onboards_in_flight_.load(); }
  int rpcs_in_flight() const { return offloads_in_flight() + onboards_in_flight(); }
  // New durable ids issued to this Workload's offloads.
  uint64_t durable_issued();
  bool durable_budget_left() { return durable_issued() < kNewDurablePerCycle; }
  // The first RPC failure that no kill explains ("" when none).
  std::string first_error();

 private:
  void Run(uint32_t t);
  void RpcFailed(const char* what, const grpc::Status& st);
  // Offloads up to `n` new durable blocks from pages src...; false when this cycle's budget of
  // new ids is spent. Backs off 10-30 ms when all of them are refused, as an engine would, so
  // that a full drive does not use up the cycle's ids before space returns.
  bool DurableOffload(uint32_t src, uint32_t n, std::mt19937_64& rng);
  void VolatileOffload(uint32_t src, uint32_t n, std::mt19937_64& rng);
  // Onboards a mix of acknowledged durable blocks and volatile ones into pages scratch...
  void OnboardSome(uint32_t scratch, uint32_t n, std::mt19937_64& rng);

  KvtierdProcess* const daemon_;
  integration::TestEngine* const engine_;
  const std::string engine_id_;
  Ledger* const ledger_;
  Counters* const counters_;
  std::atomic<DrivePhase>* const phase_;
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

}  // namespace kvtier::crash

#endif  // KVTIER_TESTS_CRASH_DAEMON_CRASH_WORKLOAD_H_
