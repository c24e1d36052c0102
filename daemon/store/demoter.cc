// Demoter: the store's background thread (demoter.h).
#include "daemon/store/demoter.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/time/clock.h"
#include "codec/cold_block.h"
#include "common/logging.h"
#include "common/parallel_for.h"
#include "daemon/store/block_store_internal.h"
#include "kernels/device.h"

namespace kvtier::store {
namespace {

using internal::Entry;
using internal::State;

// Blocks a round frees, drops or evicts under one hold of the store's lock (host copies freed
// behind disk copies, host blocks dropped, disk blocks evicted), and the pause that lets the
// threads waiting for the lock in before the next round goes on. A round that takes a tier from
// its high to its low watermark in one hold may drop thousands of blocks, while every Lookup,
// Reserve, Commit and Acquire waits (docs/PERFORMANCE.md, "Daemon: fairness between engines").
constexpr size_t kMaxReleasesPerRound = 256;
constexpr absl::Duration kReleasePause = absl::Microseconds(50);

// Drops least recently used disk blocks until the disk's live bytes are at most `target`, at
// most kMaxReleasesPerRound of them (`*bounded`, when given, tells whether it dropped that many).
// Returns the bytes dropped. REQUIRES: s.mu held.
uint64_t EvictDisk(State& s, uint64_t target, bool persistent_host, bool* bounded = nullptr) {
  uint64_t dropped = 0;
  size_t released = 0;
  Entry* e = s.disk_lru.back();
  while (e != nullptr && s.disk->used_bytes() - s.quarantined(Tier::kDisk) > target &&
         released < kMaxReleasesPerRound) {
    Entry* prev = DiskLru::Prev(e);
    if (e->pins == 0 && !e->migrating()) {
      dropped += e->slot_size;
      internal::DropDiskCopy(s, e, persistent_host);
      ++s.counters.disk_dropped;
      ++released;
    }
    e = prev;
  }
  if (bounded != nullptr) *bounded = released == kMaxReleasesPerRound;
  return dropped;
}

// Encodes least recently used GPU-tier pages into fresh host slots until the tier's used bytes
// are at most `target` (at most `batch` pages per call). Returns false when it moved nothing.
// Sets s.host_wanted_by_gpu when the host tier had no room. REQUIRES: s.mu held; releases it
// while the kernels run.
bool DemoteGpu(State& s, uint64_t target, uint32_t batch, bool persistent_host)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) {
  struct GpuMove {
    Entry* entry;
    uint64_t host;
    absl::Status result;
  };
  std::vector<GpuMove> moves;
  uint64_t leaving = 0;
  s.host_wanted_by_gpu = 0;
  Entry* e = s.gpu_lru.back();
  while (e != nullptr && s.gpu_used - leaving > target && moves.size() < batch) {
    Entry* prev = GpuLru::Prev(e);
    if (e->pins == 0 && !e->migrating() && !e->host.has_value()) {
      std::optional<uint64_t> slot = s.host_tier->slots().Allocate(e->rec.size);
      if (!slot.has_value()) {
        s.host_wanted_by_gpu = uint64_t{batch - moves.size()} * e->slot_size;
        s.work_cv.Signal();
        break;
      }
      s.host_used = s.host_tier->used_bytes();
      e->MoveTo(EntryState::kMigrating);
      ++s.migrating;
      leaving += e->hot->page_bytes();
      moves.push_back(GpuMove{e, *slot, absl::OkStatus()});
    }
    e = prev;
  }
  if (moves.empty()) return false;
  s.mu.Unlock();
  // One launch per page (a round's pages may have different layouts), page i on the tier's
  // stream i % kStreams; then a thread per stream waits for it and seals its pages (CRC32C on
  // the host) while the other streams still encode.
  const absl::Status ready = kernels::UseDevice(s.gpu->device());
  for (size_t i = 0; i < moves.size(); ++i) {
    GpuMove& m = moves[i];
    m.result = ready;
    if (m.result.ok()) {
      m.result =
          m.entry->hot->EnqueueEncode(s.gpu->data() + *m.entry->gpu, s.host_tier->data() + m.host,
                                      s.gpu->stream(static_cast<int>(i)));
    }
  }
  const size_t streams = std::min<size_t>(GpuTier::kStreams, moves.size());
  ParallelFor(streams, streams, [&](size_t k) {
    absl::Status done = kernels::UseDevice(s.gpu->device());  // a new thread: no context yet
    if (done.ok()) done = kernels::SynchronizeStream(s.gpu->stream(static_cast<int>(k)));
    for (size_t i = k; i < moves.size(); i += GpuTier::kStreams) {
      GpuMove& m = moves[i];
      if (m.result.ok()) m.result = done;
      if (m.result.ok()) m.entry->hot->Seal(s.host_tier->data() + m.host);
    }
  });
  s.mu.Lock();
  size_t failed = 0;
  for (GpuMove& m : moves) {
    Entry* e = m.entry;
    e->EndMigration();
    --s.migrating;
    if (!m.result.ok() || e->removed()) {
      absl::Status freed = s.host_tier->slots().Free(m.host, e->rec.size);
      if (!freed.ok()) KVTIER_LOG(kError, "host tier: ", freed.message());
      s.host_used = s.host_tier->used_bytes();
      if (!m.result.ok()) {
        ++s.counters.gpu_dropped;
        if (failed++ == 0) {
          KVTIER_LOG(kError, "store: encoding a GPU-tier page into the host tier failed: ",
                     m.result.message());
        }
        if (!e->removed() && e->pins == 0) internal::Detach(s, e, RemovedBy::kEvicted);
      }
      internal::MaybeRelease(s, e);
      continue;
    }
    const absl::Span<const uint8_t> block(s.host_tier->data() + m.host, e->rec.size);
    e->host = m.host;
    e->rec.checksum = codec::StoredHeaderChecksum(block);
    s.gpu_lru.Remove(e);
    if (e->pins == 0) internal::FreeGpuCopy(s, e);  // else the last reader's unpin frees it
    s.host_lru.PushFront(e);
    ++s.counters.gpu_to_host;
    s.counters.bytes_in[static_cast<int>(Tier::kHost)] += e->rec.size;
    if (persistent_host) {
      internal::QueuePut(s, *e);
      e->indexed = true;
    }
  }
  s.changed_cv.SignalAll();
  return true;
}

}  // namespace

struct Demoter::Move {
  Entry* entry = nullptr;
  DiskSlot slot;
  bool victim = false;         // leaves the host tier once on disk
  bool write_through = false;  // a durable put waits for it
  absl::Status result;
};

Demoter::Policy Demoter::Policy::From(const BlockStoreOptions& options) {
  Policy p;
  p.sync = options.sync;
  p.group_commit_interval_ms = options.group_commit_interval_ms;
  p.demotion_batch = options.demotion_batch;
  p.max_block_bytes = options.max_block_bytes;
  p.admission = options.admission;
  p.gpu = options.gpu.watermarks;
  p.host = options.host_watermarks;
  p.disk = options.disk_watermarks;
  return p;
}

Demoter::Demoter(State& state, const Policy& policy)
    : s_(state),
      policy_(policy),
      persistent_host_(state.host_tier->persistent()),
      host_capacity_(static_cast<double>(state.host_tier->arena().size())),
      disk_capacity_(static_cast<double>(state.disk->capacity_bytes())),
      gpu_capacity_(state.gpu ? static_cast<double>(state.gpu->capacity_bytes()) : 0.0) {}

Demoter::~Demoter() { Join(); }

void Demoter::Start() {
  thread_ = std::thread([this] { Run(); });
}

void Demoter::Join() {
  if (thread_.joinable()) thread_.join();
}

void Demoter::Run() {
  State& s = s_;
  absl::MutexLock lock(&s.mu);
  while (Round()) {
  }
  s.idle = true;
  s.changed_cv.SignalAll();
}

Demoter::Pressure Demoter::Measure() {
  State& s = s_;
  Pressure p;
  // While the index takes no writes (a full drive), nothing is committed and nothing new goes
  // to disk: durable puts are refused, host blocks leave by being dropped, and the queued index
  // changes wait for the drive to have room again.
  internal::RefreshIndexHealth(s);
  p.index_writable = s.index_writable;
  if (s.gpu_evict_target.has_value() && s.gpu_used <= *s.gpu_evict_target) {
    s.gpu_evict_target.reset();  // Evict's request is met
  }
  p.has_disk = s.disk->file_count() > 0;
  p.disk_writes = p.has_disk && p.index_writable;
  const uint64_t disk_live = s.disk->used_bytes() - s.quarantined(Tier::kDisk);
  p.gpu = s.gpu != nullptr && !s.gpu_lru.empty() &&
          (static_cast<double>(s.gpu_used) > policy_.gpu.high * gpu_capacity_ ||
           s.gpu_room_waiters > 0 || s.demote_all || s.demote_gpu_all ||
           (s.gpu_evict_target.has_value() && s.gpu_used > *s.gpu_evict_target));
  if (!p.gpu) s.host_wanted_by_gpu = 0;
  p.host = static_cast<double>(s.host_used) > policy_.host.high * host_capacity_ ||
           s.room_waiters > 0 || s.host_wanted_by_gpu > 0 || s.demote_all || host_unfinished_;
  p.disk = p.has_disk && (static_cast<double>(disk_live) > policy_.disk.high * disk_capacity_ ||
                          disk_unfinished_);
  p.pending = !s.pending.empty() || !s.unsaved_namespaces.empty() || !s.unsaved_meta.empty();
  return p;
}

bool Demoter::Round() {
  State& s = s_;
  const Pressure p = Measure();
  if (p.pending && oldest_pending_ == absl::InfiniteFuture()) oldest_pending_ = absl::Now();
  const bool commit_due =
      p.pending && p.index_writable &&
      (policy_.sync != index::SyncPolicy::kBatch || s.commit_waiters > 0 || s.stop ||
       absl::Now() - oldest_pending_ >= absl::Milliseconds(policy_.group_commit_interval_ms));

  // (1) the index.
  if (commit_due) {
    const uint64_t failures = s.commit_failures;
    internal::CommitPending(s, policy_.sync);
    oldest_pending_ = absl::InfiniteFuture();
    if (s.commit_failures != failures && !s.stop) {
      s.work_cv.WaitWithTimeout(&s.mu, absl::Milliseconds(100));  // back off, then retry
    }
    if (s.commit_failures != failures && s.stop) return false;  // give up at shutdown
    return true;
  }
  const bool work = p.gpu || (p.host && !s.host_lru.empty()) || p.disk ||
                    (!s.write_through.empty() && p.disk_writes);
  if (!work || s.stop) {
    if (s.stop && (!p.pending || !p.index_writable)) return false;
    s.demote_all = false;
    s.demote_gpu_all = false;
    if (!p.pending) {
      s.idle = true;
      s.changed_cv.SignalAll();
    }
    s.work_cv.WaitWithTimeout(&s.mu, p.pending && p.index_writable
                                         ? absl::Milliseconds(policy_.group_commit_interval_ms)
                                         : absl::Milliseconds(100));
    return true;
  }

  // (4) first, so that demotions below find room: disk above its high watermark.
  disk_unfinished_ = false;
  if (p.disk) {
    EvictDisk(s, static_cast<uint64_t>(policy_.disk.low * disk_capacity_), persistent_host_,
              &disk_unfinished_);
  }

  // (5) before (3): GPU pages go to the host tier, whose own pressure is handled next round.
  if (p.gpu && DemoteGpuPages()) return true;

  // (2) and (3).
  bool disk_full = false;
  uint64_t evicted = 0;
  std::vector<Move> moves = ChooseWrites(p, disk_full, evicted);
  if (disk_full && evicted == 0 && s.quarantined(Tier::kDisk) == 0) {
    s.demote_all = false;  // nothing can make room: DemoteAll moves what fits
  }
  if (moves.empty() && (host_unfinished_ || disk_unfinished_)) {
    s.changed_cv.SignalAll();                         // callers waiting for room try again
    s.work_cv.WaitWithTimeout(&s.mu, kReleasePause);  // the lock's waiters go first
    return true;
  }
  if (moves.empty()) {
    // Read again: this round's evictions may have queued deletions.
    if (p.index_writable &&
        (!s.pending.empty() || !s.unsaved_namespaces.empty() || !s.unsaved_meta.empty())) {
      internal::CommitPending(s, policy_.sync);
      oldest_pending_ = absl::InfiniteFuture();
    } else {
      // Everything movable is pinned or in motion: report no progress (once) and wait for a
      // change rather than spin.
      if (!s.idle) {
        s.idle = true;
        s.changed_cv.SignalAll();
      }
      s.work_cv.WaitWithTimeout(&s.mu, absl::Milliseconds(10));
    }
    return true;
  }

  WriteBack(moves);
  return true;
}

bool Demoter::DemoteGpuPages() {
  State& s = s_;
  uint64_t target =
      s.demote_all || s.demote_gpu_all ? 0 : static_cast<uint64_t>(policy_.gpu.low * gpu_capacity_);
  if (s.gpu_room_waiters > 0 && s.gpu_used <= target) {
    target = s.gpu_used - std::min(s.gpu_used, s.gpu->chunk_bytes());
  }
  if (s.gpu_evict_target.has_value()) target = std::min(target, *s.gpu_evict_target);
  if (DemoteGpu(s, target, policy_.demotion_batch, persistent_host_)) return true;
  s.gpu_evict_target.reset();                               // nothing left to move
  if (s.host_wanted_by_gpu == 0) s.demote_gpu_all = false;  // (not: waiting for host room)
  return false;
}

std::vector<Demoter::Move> Demoter::ChooseWrites(const Pressure& p, bool& disk_full,
                                                 uint64_t& evicted) {
  State& s = s_;
  std::vector<Move> moves;
  auto allocate = [&](Entry* e) -> std::optional<DiskSlot> {
    std::optional<DiskSlot> slot = s.disk->Allocate(e->rec.size);
    if (!slot.has_value() && !disk_full) {
      // Make room for this and the next blocks; the slots come back after the next commit.
      evicted =
          EvictDisk(s,
                    std::min<uint64_t>(
                        static_cast<uint64_t>(policy_.disk.low * disk_capacity_),
                        s.disk->used_bytes() - s.quarantined(Tier::kDisk) -
                            std::min<uint64_t>(s.disk->used_bytes() - s.quarantined(Tier::kDisk),
                                               uint64_t{policy_.demotion_batch} * e->slot_size)),
                    persistent_host_);
      disk_full = true;
    }
    return slot;
  };
  while (p.disk_writes && !s.write_through.empty() && moves.size() < policy_.demotion_batch) {
    Entry* e = s.write_through.front();
    if (e->removed() || e->migrating() || e->disk.has_value() || !e->host.has_value()) {
      s.write_through.pop_front();
      e->queued_write_through = false;
      if (!e->durable_result.has_value()) e->durable_result = absl::OkStatus();
      s.changed_cv.SignalAll();
      continue;
    }
    std::optional<DiskSlot> slot = allocate(e);
    if (!slot.has_value()) {
      if (evicted == 0 && s.quarantined(Tier::kDisk) == 0 && moves.empty()) {
        // Nothing can make room (every disk block pinned or in motion, none of it this round's
        // writes, which can be evicted once done): fail the durable put.
        s.write_through.pop_front();
        e->queued_write_through = false;
        e->durable_result = absl::ResourceExhaustedError(absl::StrFormat(
            "disk tier full: no room for a %d-byte durable block (%d of %d bytes used)",
            e->rec.size, s.disk->used_bytes(), s.disk->capacity_bytes()));
        s.changed_cv.SignalAll();
        continue;
      }
      break;  // retry after the commit that frees quarantined slots
    }
    s.write_through.pop_front();
    e->queued_write_through = false;
    e->MoveTo(EntryState::kMigrating);
    ++s.migrating;
    moves.push_back(Move{e, *slot, false, true, absl::OkStatus()});
  }
  host_unfinished_ = false;
  if (p.host && !disk_full) {
    const uint64_t low = static_cast<uint64_t>(policy_.host.low * host_capacity_);
    uint64_t target = s.demote_all ? 0 : low;
    if ((s.room_waiters > 0 || s.host_wanted_by_gpu > 0) && s.host_used <= target) {
      const uint64_t wanted = std::max(policy_.max_block_bytes, s.host_wanted_by_gpu);
      target = s.host_used > wanted ? s.host_used - wanted : 0;
    }
    uint64_t leaving = 0;
    bool moved_any = false;
    size_t released = 0;  // host copies freed and blocks dropped
    Entry* e = s.host_lru.back();
    while (e != nullptr && s.host_used - leaving > target &&
           moves.size() < policy_.demotion_batch) {
      if (released == kMaxReleasesPerRound) {
        host_unfinished_ = true;
        break;
      }
      Entry* prev = HostLru::Prev(e);
      if (e->pins == 0 && !e->migrating()) {
        const bool admitted =
            policy_.admission == DiskAdmission::kAll ||
            (e->rec.flags & (index::kBlockFlagReused | index::kBlockFlagDurable)) != 0;
        if (e->disk.has_value()) {
          if (e->put_seq <= s.committed_seq) {  // its disk record is committed
            internal::FreeHostCopy(s, e);
            ++s.counters.host_copy_freed;
            moved_any = true;
            ++released;
          }
        } else if (p.disk_writes && admitted) {
          std::optional<DiskSlot> slot = allocate(e);
          if (!slot.has_value()) break;
          e->MoveTo(EntryState::kMigrating);
          ++s.migrating;
          leaving += e->slot_size;
          moves.push_back(Move{e, *slot, true, false, absl::OkStatus()});
          moved_any = true;
        } else if (!s.demote_all) {
          internal::Detach(s, e, RemovedBy::kEvicted);
          ++s.counters.host_dropped;
          moved_any = true;
          ++released;
        }
      }
      e = prev;
    }
    if (s.demote_all && !moved_any && moves.empty() && !disk_full) s.demote_all = false;
  }
  return moves;
}

void Demoter::WriteBack(std::vector<Move>& moves) {
  State& s = s_;
  s.mu.Unlock();
  {
    absl::BlockingCounter outstanding(static_cast<int>(moves.size()));
    for (Move& m : moves) {
      const absl::Span<const uint8_t> src(s.host_tier->data() + *m.entry->host,
                                          s.disk->SlotSize(m.entry->rec.size));
      s.disk->SubmitWrite(m.slot, src, [&m, &outstanding](absl::Status st) {
        m.result = std::move(st);
        outstanding.DecrementCount();
      });
    }
    outstanding.Wait();
  }
  // Data before index: the block must be on stable storage before an entry points at it.
  bool any_ok = false;
  for (const Move& m : moves) any_ok |= m.result.ok();
  if (any_ok && policy_.sync != index::SyncPolicy::kNone) {
    absl::Status synced = s.disk->Sync();
    if (!synced.ok()) {
      for (Move& m : moves) {
        if (m.result.ok()) m.result = synced;
      }
    }
  }
  s.mu.Lock();
  size_t failed = 0;
  for (Move& m : moves) {
    Entry* e = m.entry;
    if (!m.result.ok()) {
      ++s.counters.io_errors;
      if (failed++ == 0) {  // one line per round: a failing disk must not flood the log
        KVTIER_LOG(kWarning, "store: disk write of a ", e->rec.size, "-byte block to file ",
                   m.slot.file, " at offset ", m.slot.offset, " failed: ", m.result.message());
      }
      absl::Status freed = s.disk->Free(m.slot, e->rec.size);
      if (!freed.ok()) KVTIER_LOG(kError, "disk tier: ", freed.message());
      e->EndMigration();
      --s.migrating;
      if (m.write_through) e->durable_result = m.result;
      e->evict_host_after_write = false;  // Evict's demotion failed: the block stays on host
      if (!m.write_through && !e->removed() && e->pins == 0) {
        // The host needs the room; a cache may drop a block.
        internal::Detach(s, e, RemovedBy::kEvicted);
        ++s.counters.host_dropped;
      } else {
        internal::MaybeRelease(s, e);
      }
      continue;
    }
    if (e->removed()) {
      absl::Status freed = s.disk->Free(m.slot, e->rec.size);
      if (!freed.ok()) KVTIER_LOG(kError, "disk tier: ", freed.message());
      e->EndMigration();
      --s.migrating;
      if (m.write_through) e->durable_result = absl::OkStatus();  // written; removed since
      m.entry = nullptr;
      internal::MaybeRelease(s, e);
      continue;
    }
    e->disk = m.slot;
    e->put_seq = internal::QueuePut(s, *e);
    e->indexed = true;
  }
  if (failed > 1) {
    KVTIER_LOG(kWarning, "store: ", failed, " of ", moves.size(), " disk writes failed this round");
  }
  internal::CommitPending(s, policy_.sync);
  oldest_pending_ = absl::InfiniteFuture();
  const absl::Status committed = s.last_commit_error;
  for (Move& m : moves) {
    Entry* e = m.entry;
    if (e == nullptr || !m.result.ok()) continue;
    e->EndMigration();
    --s.migrating;
    if (m.write_through) e->durable_result = committed;
    if (e->removed()) {
      internal::MaybeRelease(s, e);
      continue;
    }
    s.disk_lru.PushFront(e);
    s.counters.bytes_in[static_cast<int>(Tier::kDisk)] += e->rec.size;
    ++s.counters.disk_writes;
    if ((m.victim || e->evict_host_after_write) && committed.ok()) {
      e->evict_host_after_write = false;
      ++s.counters.host_to_disk;
      if (e->pins == 0) {
        internal::FreeHostCopy(s, e);
      } else {
        e->free_host_when_unpinned = true;
      }
    }
  }
  s.changed_cv.SignalAll();
}

}  // namespace kvtier::store
