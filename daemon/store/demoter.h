// Demoter: the store's background thread, the movement policy of the tier stack. Each round it
// (1) applies queued index changes (internal::CommitPending), grouping them under the kBatch
// policy, (2) writes durable puts through to disk (the write-through queue), (3) demotes host
// blocks by LRU when the host tier is above its high watermark (or a caller waits for room), down
// to the low watermark: written to disk when the disk admits them, else dropped, (4) drops disk
// blocks by LRU above the disk's high watermark, and (5) encodes GPU-tier pages by LRU into host
// slots with the fused kernel above the GPU tier's high watermark (asking step 3 for host room
// when there is none). It is the only writer of the index and the only owner of the kMigrating
// transition.
//
// A demoted block is written to a fresh disk slot, the disk file is synced, then its index entry
// is written and committed; only then does the host copy go. Freed disk slots wait in quarantine
// until the deletion of their index entry is committed, so the index never points durably at a
// slot holding another block.
//
// Its interface to the store is the store's State (block_store_internal.h) under State::mu, the
// one lock of the store, and the Policy below (the options it reads, nothing else of
// BlockStoreOptions): callers ask for work through State's fields (room_waiters, demote_all,
// write_through, gpu_evict_target, ...) and State::work_cv, and learn of progress through
// State::changed_cv and State::idle. The BlockStore owns it and stops it before it destroys State.
#ifndef KVTIER_DAEMON_STORE_DEMOTER_H_
#define KVTIER_DAEMON_STORE_DEMOTER_H_

#include <cstdint>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "daemon/index/block_index.h"
#include "daemon/store/block_store.h"

namespace kvtier::store {

class Demoter {
 public:
  // What the demoter reads of BlockStoreOptions.
  struct Policy {
    index::SyncPolicy sync = index::SyncPolicy::kBatch;
    uint32_t group_commit_interval_ms = 2;
    uint32_t demotion_batch = 64;
    uint64_t max_block_bytes = 64ull << 20;
    DiskAdmission admission = DiskAdmission::kAll;
    Watermarks gpu;
    Watermarks host;
    Watermarks disk;
    static Policy From(const BlockStoreOptions& options);
  };

  // Runs over `state` (its tiers, index and lists set up, recovery done), which must outlive it.
  Demoter(BlockStore::State& state, const Policy& policy);
  Demoter(const Demoter&) = delete;
  Demoter& operator=(const Demoter&) = delete;
  // Joins the thread. REQUIRES: State::stop set and State::work_cv signalled, or never started.
  ~Demoter();

  // Starts the thread. It runs until State::stop is set, then finishes its round, commits what is
  // queued (unless the index takes no writes, or a commit fails at shutdown) and exits.
  void Start();
  // Waits for the thread to exit. REQUIRES: State::stop set (State::mu not held).
  void Join();

 private:
  struct Move;
  // What this round finds to do; read under the lock at the start of each round.
  struct Pressure {
    bool index_writable = true;
    bool has_disk = false;
    bool disk_writes = false;  // new disk copies can be indexed
    bool gpu = false;
    bool host = false;
    bool disk = false;
    bool pending = false;  // index changes or unsaved records queued
  };

  void Run();
  // One round; false when the thread should exit. REQUIRES: s_.mu held (released during I/O).
  bool Round();
  Pressure Measure();
  // (5): GPU pages to the host tier. True when it moved some (the round ends there).
  bool DemoteGpuPages();
  // (2) and (3): chooses the blocks to write to disk, frees host copies already on disk, drops
  // host blocks the disk does not take. Sets `disk_full` when the disk had no slot for one, and
  // `evicted` to the disk bytes dropped to make room.
  std::vector<Move> ChooseWrites(const Pressure& p, bool& disk_full, uint64_t& evicted);
  // Writes `moves` from their host slots outside the lock, syncs the disk, indexes and commits
  // the copies, then frees the host copies of victims.
  void WriteBack(std::vector<Move>& moves);

  BlockStore::State& s_;
  const Policy policy_;
  const bool persistent_host_;
  const double host_capacity_;
  const double disk_capacity_;
  const double gpu_capacity_;
  absl::Time oldest_pending_ = absl::InfiniteFuture();
  // Set when a round stopped at kMaxReleasesPerRound on its way down to a tier's low watermark:
  // the next rounds go on down to it although the tier is below its high watermark by then.
  bool host_unfinished_ = false;
  bool disk_unfinished_ = false;
  std::thread thread_;
};

}  // namespace kvtier::store

#endif  // KVTIER_DAEMON_STORE_DEMOTER_H_
