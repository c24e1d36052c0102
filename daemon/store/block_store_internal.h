// Internal to the store: the shared state of BlockStore's implementation files (block_store*.cc)
// and the helpers they share; the entry of a block is in block_store_entry.h.
// Everything here is guarded by State::mu unless a comment says otherwise.
#ifndef KVTIER_DAEMON_STORE_BLOCK_STORE_INTERNAL_H_
#define KVTIER_DAEMON_STORE_BLOCK_STORE_INTERNAL_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/histogram.h"
#include "daemon/index/block_index.h"
#include "daemon/store/block_store.h"
#include "daemon/store/block_store_entry.h"
#include "daemon/store/demoter.h"
#include "daemon/store/entry_state.h"
#include "daemon/store/gpu_tier.h"
#include "daemon/store/host_tier.h"
#include "daemon/store/intrusive_list.h"
#include "daemon/store/namespace_table.h"
#include "daemon/store/slot_allocator.h"
#include "daemon/store/tier.h"
#include "kernels/gpu_block_codec.h"

namespace kvtier::store {

struct Counters {
  std::atomic<uint64_t> hits[3] = {};
  std::atomic<uint64_t> bytes_in[3] = {};
  std::atomic<uint64_t> bytes_out[3] = {};
  std::atomic<uint64_t> checksum_failures[3] = {};  // by the tier of the copy that failed
  std::atomic<uint64_t> misses{0}, puts{0}, duplicate_puts{0}, put_rejected{0};
  std::atomic<uint64_t> gpu_to_host{0}, gpu_dropped{0};
  std::atomic<uint64_t> host_to_disk{0}, host_dropped{0}, host_copy_freed{0}, disk_dropped{0};
  std::atomic<uint64_t> disk_writes{0};  // disk copies made (not evictions: see host_to_disk)
  std::atomic<uint64_t> quota_evictions{0}, removed{0}, io_errors{0};
};

struct BlockStore::State {
  std::unique_ptr<index::BlockIndex> index;
  std::unique_ptr<HostTier> host_tier;  // the host arena and its slots
  std::unique_ptr<DiskTier> disk;       // no files: no disk tier
  std::unique_ptr<GpuTier> gpu;         // null: no GPU tier
  // The stack, fastest first: the GPU tier (when there is one), the host tier, the disk tier (a
  // disk tier without files has no capacity). Code that treats every tier alike (statistics,
  // recovery's slot marking) goes through these; the movement policy names its tiers.
  std::vector<StorageTier*> tiers;
  StorageTier* tier_by_id[index::kTierCount] = {};  // by index::Tier; null: absent
  StoreEventSink* events = nullptr;

  mutable absl::Mutex mu;
  absl::CondVar work_cv;     // wakes the background thread
  absl::CondVar changed_cv;  // room freed, pins dropped, commits done, background idle

  absl::flat_hash_map<BlockKey, std::unique_ptr<Entry>> map ABSL_GUARDED_BY(mu);
  absl::flat_hash_map<Entry*, std::unique_ptr<Entry>> retired ABSL_GUARDED_BY(mu);
  HostLru host_lru ABSL_GUARDED_BY(mu);
  DiskLru disk_lru ABSL_GUARDED_BY(mu);
  GpuLru gpu_lru ABSL_GUARDED_BY(mu);
  // Hot layouts by namespace; every layout ever set stays in hot_codecs (entries point at theirs).
  absl::flat_hash_map<NamespaceId, const kernels::GpuBlockCodec*> hot ABSL_GUARDED_BY(mu);
  std::vector<std::unique_ptr<kernels::GpuBlockCodec>> hot_codecs ABSL_GUARDED_BY(mu);
  NamespaceTable namespaces ABSL_GUARDED_BY(mu);
  std::deque<Entry*> write_through ABSL_GUARDED_BY(mu);

  // Index writes, in the order the in-memory state changed; applied by the background thread
  // alone. Sequence numbers count queued operations.
  // nullopt: a deletion. CommitPending keeps the last change of each key.
  std::vector<std::pair<BlockKey, std::optional<index::BlockRecord>>> pending ABSL_GUARDED_BY(mu);
  uint64_t queued_seq ABSL_GUARDED_BY(mu) = 0;
  uint64_t committed_seq ABSL_GUARDED_BY(mu) = 0;
  absl::Status last_commit_error ABSL_GUARDED_BY(mu);
  uint64_t commit_failures ABSL_GUARDED_BY(mu) = 0;
  uint64_t failed_commits_in_a_row ABSL_GUARDED_BY(mu) = 0;  // logged on the first only
  // Namespace records (id -> encoded record) to write once the index takes writes again.
  absl::flat_hash_map<NamespaceId, std::string> unsaved_namespaces ABSL_GUARDED_BY(mu);
  // Meta entries for the same (the persistent host tier's incarnation at recovery).
  std::vector<std::pair<std::string, std::string>> unsaved_meta ABSL_GUARDED_BY(mu);
  // The index's health as the background thread last read it (at most every 100 ms), so that
  // the data path does not ask the index under the store's lock.
  bool index_writable ABSL_GUARDED_BY(mu) = true;
  absl::Status index_status ABSL_GUARDED_BY(mu);  // IndexHealth::ToStatus(): why not, when not
  absl::Time index_checked ABSL_GUARDED_BY(mu) = absl::InfinitePast();
  // Freed slots of persistent tiers (the disk tier, a persistent host tier) that an index record
  // may still name: reusable once the deletion queued with `seq` is committed, or a restart could
  // find the record pointing at another block's bytes (Quarantine, ReleaseQuarantine).
  struct Quarantined {
    StorageTier* tier;
    TierSlot slot;
    uint64_t size;  // the size it was allocated for
    uint64_t seq;
  };
  std::deque<Quarantined> quarantine ABSL_GUARDED_BY(mu);
  // Their slot bytes, by index::Tier (the disk's are subtracted from its used bytes to get the
  // live bytes its watermarks compare).
  uint64_t quarantined_bytes[index::kTierCount] ABSL_GUARDED_BY(mu) = {};
  uint64_t quarantined(Tier tier) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return quarantined_bytes[static_cast<int>(tier)];
  }
  uint64_t host_used ABSL_GUARDED_BY(mu) = 0;  // mirrors host_tier->used_bytes()
  uint32_t room_waiters ABSL_GUARDED_BY(mu) = 0;
  uint64_t gpu_used ABSL_GUARDED_BY(mu) = 0;  // mirrors gpu->slots().used_bytes()
  uint32_t gpu_room_waiters ABSL_GUARDED_BY(mu) = 0;
  uint64_t host_wanted_by_gpu ABSL_GUARDED_BY(mu) = 0;  // host bytes GPU demotion waits for
  // Evict asked the GPU tier to shrink to this many used bytes (least recently used first).
  std::optional<uint64_t> gpu_evict_target ABSL_GUARDED_BY(mu);
  uint32_t commit_waiters ABSL_GUARDED_BY(mu) = 0;  // Flush() callers: commit without delay
  uint32_t migrating ABSL_GUARDED_BY(mu) = 0;
  uint64_t pinned ABSL_GUARDED_BY(mu) = 0;
  bool demote_all ABSL_GUARDED_BY(mu) = false;
  bool demote_gpu_all ABSL_GUARDED_BY(mu) = false;  // FlushToDisk: every GPU page to the host
  bool stop ABSL_GUARDED_BY(mu) = false;
  bool idle ABSL_GUARDED_BY(mu) = false;  // the background thread found nothing to do

  Counters counters;
  LatencyHistogram read_latency;
  LatencyHistogram put_latency;
  std::unique_ptr<Demoter> demoter;  // the background thread; null until Open starts it
};

namespace internal {

using Entry = BlockStore::Entry;
using State = BlockStore::State;

// Writes the queued index changes (State::pending, and the namespace records and meta entries
// that waited for the index) as one batch, synced under kBatch; on failure puts them back in
// front of what was queued meanwhile. Called by the Demoter alone. REQUIRES: s.mu held; releases
// it during the write.
void CommitPending(State& s, index::SyncPolicy policy) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
// Why a durable write cannot be made now (the index's refusal). REQUIRES: s.mu held.
absl::Status IndexRefusal(const State& s);
// Reads the index's health into s.index_writable / s.index_status when the last reading is older
// than 100 ms (or `force`), releasing s.mu meanwhile. True when writability changed.
// REQUIRES: s.mu held.
bool RefreshIndexHealth(State& s, bool force = false) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
// Queues an index change; returns its sequence number. REQUIRES: s.mu held.
uint64_t QueuePut(State& s, const Entry& e);
uint64_t QueueDelete(State& s, const BlockKey& key);
// The record an entry's index entry should hold: its disk copy, else (persistent host) its host
// copy. REQUIRES: e.disk or e.host.
index::BlockRecord RecordFor(const State& s, const Entry& e);
// Takes `e` out of the map and the LRU lists, queues the deletion of its index entry, and
// releases it when nothing holds it; reports the removal (unless `why` is kSilent or the entry
// was never visible). REQUIRES: s.mu held, e in the map.
void Detach(State& s, Entry* e, RemovedBy why);
// The fastest tier holding a visible entry (what lookups report): the first of the stack's order
// (gpu, host, disk) in which it has a copy.
inline Tier FastestTier(const Entry& e) {
  for (Tier tier : {Tier::kGpu, Tier::kHost}) {
    if (e.CopyIn(tier).has_value()) return tier;
  }
  return Tier::kDisk;
}
// The bytes of the entry's copy in `tier` as the statistics count them: a GPU copy's hot page,
// else the tier's slot for the cold block. REQUIRES: e.CopyIn(tier), the tier present.
inline uint64_t CopyBytes(const State& s, const Entry& e, Tier tier) {
  if (tier == Tier::kGpu) return e.hot->page_bytes();
  return s.tier_by_id[static_cast<int>(tier)]->SlotSize(e.rec.size);
}
// Reports a block that became visible. REQUIRES: s.mu held.
void EmitStored(State& s, const Entry& e, StoredBy by, bool durable, absl::string_view origin);
// A new kWriting entry for `key` in the map, its slot bytes counted in its namespace's usage (the
// reserve half of Reserve and PutHot; the caller sets the copy it reserved). REQUIRES: s.mu held,
// key not in the map.
Entry* InsertWriting(State& s, const BlockKey& key, uint64_t size, uint64_t slot_size);
// Makes a written entry visible: the one publish path of Commit and PutHot. Applies the put's
// options (access time, parent, silent), puts the entry at the front of `tier`'s LRU list (kHost
// or kGpu, the tier its only copy is in) and of its namespace's, reports it (kStored), and counts
// the put and its `bytes_in`. Index and write-through work stays with the caller.
// REQUIRES: s.mu held, e->writing().
void Publish(State& s, Entry* e, const PutOptions& options, uint64_t now_ms, Tier tier,
             uint64_t bytes_in, bool durable);
// Records the microseconds since `start`.
void RecordLatency(LatencyHistogram& histogram, std::chrono::steady_clock::time_point start);
// Frees the slots of a detached entry once no reader pins it and no write is in flight.
void MaybeRelease(State& s, Entry* e);
// Frees the host copy of an entry that keeps its disk copy (or is detached).
void FreeHostCopy(State& s, Entry* e);
// Drops a reader's pin; the last one frees a copy that was waiting for it (a host copy already
// on disk, a GPU copy already encoded into the host tier) and releases a detached entry.
// REQUIRES: s.mu held, e->pins > 0.
void DropPin(State& s, Entry* e);
// Frees the GPU copy of an entry that now has a host copy (or is detached).
void FreeGpuCopy(State& s, Entry* e);
// A slot of `size` bytes from `tier`, waiting up to wait_ms for the background thread to make
// room (counted in `waiters`); nullopt when none came, the store stops, or `e` (when given) is
// removed meanwhile. REQUIRES: s.mu held.
std::optional<TierSlot> AllocateWaiting(State& s, StorageTier& tier, uint64_t size,
                                        uint32_t wait_ms, uint32_t& waiters, const Entry* e);
// Drops the disk copy of `e`; the block leaves the cache unless it has a host copy.
// REQUIRES: s.mu held, e->disk, e->pins == 0, !e->migrating.
void DropDiskCopy(State& s, Entry* e, bool persistent_host);
// Puts a freed slot of a persistent tier in quarantine until the index deletion `seq` commits.
// REQUIRES: s.mu held.
void Quarantine(State& s, StorageTier& tier, const TierSlot& slot, uint64_t size, uint64_t seq);
// Returns the quarantined slots whose deletion is committed to their tiers.
void ReleaseQuarantine(State& s);
uint64_t NowMs(const BlockStoreOptions& options);
// The codec of namespace `ns`'s hot pages (SetHotLayout); FailedPrecondition when it has none.
// REQUIRES: s.mu held.
absl::StatusOr<const kernels::GpuBlockCodec*> HotCodecOf(const State& s, NamespaceId ns)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
// Counts a touching read of namespace `ns` (a namespace the store has never seen is not created).
void CountNamespaceRead(State& s, NamespaceId ns, bool hit, uint64_t now_ms)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);

}  // namespace internal

// Namespace records in the index: 8-byte little-endian quota, then the caller's record.
std::string EncodeNamespaceRecord(absl::string_view record, uint64_t quota);
bool DecodeNamespaceRecord(absl::string_view bytes, std::string* record, uint64_t* quota);

}  // namespace kvtier::store

#endif  // KVTIER_DAEMON_STORE_BLOCK_STORE_INTERNAL_H_
