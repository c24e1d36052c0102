// The in-memory entry of one block (BlockStore::Entry) and the LRU lists threaded through it.
// Internal to the store; guarded by the store's mutex.
#ifndef KVTIER_DAEMON_STORE_BLOCK_STORE_ENTRY_H_
#define KVTIER_DAEMON_STORE_BLOCK_STORE_ENTRY_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "daemon/index/block_record.h"
#include "daemon/store/block_store.h"
#include "daemon/store/disk_tier.h"
#include "daemon/store/entry_state.h"
#include "daemon/store/gpu_tier.h"
#include "daemon/store/intrusive_list.h"
#include "daemon/store/tier.h"
#include "kernels/gpu_block_codec.h"

namespace kvtier::store {

// One block. Its lifecycle is `state` (entry_state.h: the states, and the one table of legal
// moves between them): Reserve() creates it kWriting; Commit() publishes it (kVisible) with a
// host copy, or PutHot() with a GPU copy (a hot page that the background thread later encodes
// into a host copy, kMigrating meanwhile; an entry never has a GPU copy and another at once);
// the background thread may give it a disk copy (kMigrating while the write is in flight, a
// transition the background thread alone owns) and later free the host copy; Remove() or an
// eviction takes it out of the map (kDetached, or kDetachedMigrating until an in-flight copy
// ends), and it is released (its slots freed) once no reader pins it and no copy is in flight.
//
// The boolean fields below are not states: each is a fact about one copy or one queue that holds
// in several states at once and changes independently of the lifecycle (an entry may be silent
// and indexed and queued for write-through while kVisible, kMigrating or detached), so folding
// them into the enum would multiply its states without adding a rule.
struct BlockStore::Entry {
  BlockKey key;
  index::BlockRecord rec;        // parent, flags, codec, checksum, size, last access
  uint64_t slot_size = 0;        // size rounded up to the slot alignment
  std::optional<uint64_t> host;  // host copy: offset in the arena
  std::optional<DiskSlot> disk;  // disk copy whose index entry is written
  std::optional<uint64_t> gpu;   // GPU copy (a hot page): offset in the GPU tier
  // The layout of the GPU copy (owned by State::hot_codecs).
  const kernels::GpuBlockCodec* hot = nullptr;
  EntryState state = EntryState::kWriting;
  bool indexed = false;         // an index record exists or is queued for it
  uint64_t delete_seq = 0;      // sequence of the queued deletion of its index record
  uint64_t put_seq = 0;         // sequence of the put that recorded its disk copy
  bool verify_on_read = false;  // recovered host copy: checked on its first read
  // The host copy is on disk and was to be freed, but a reader held it: the last unpin frees it.
  bool free_host_when_unpinned = false;
  bool queued_write_through = false;    // in State::write_through
  bool silent = false;                  // reports no events (PutOptions::silent)
  bool evict_host_after_write = false;  // Evict: free the host copy once the disk copy is written
  std::optional<absl::Status> durable_result;  // outcome of a write-through (durable puts)
  uint32_t pins = 0;
  ListHook<Entry> host_lru;
  ListHook<Entry> gpu_lru;
  ListHook<Entry> disk_lru;
  ListHook<Entry> ns_lru;

  // Its copy in `tier`, as that tier's slot; nullopt when it has none there.
  std::optional<TierSlot> CopyIn(Tier tier) const {
    switch (tier) {
      case Tier::kGpu:
        if (gpu.has_value()) return TierSlot{0, *gpu};
        break;
      case Tier::kHost:
        if (host.has_value()) return TierSlot{0, *host};
        break;
      case Tier::kDisk:
        return disk;
    }
    return std::nullopt;
  }
  // Invisible to lookups until published.
  bool writing() const { return state == EntryState::kWriting; }
  // Out of the map (IsDetached).
  bool removed() const { return IsDetached(state); }
  // A copy into another tier is in flight (IsMigrating).
  bool migrating() const { return IsMigrating(state); }
  // Every change of `state` goes through here: an illegal one aborts (CheckedTransition).
  void MoveTo(EntryState to) { state = CheckedTransition(state, to); }
  // Out of the map: kDetached, or kDetachedMigrating while a copy is in flight.
  void MarkDetached() {
    MoveTo(migrating() ? EntryState::kDetachedMigrating : EntryState::kDetached);
  }
  // The background thread's copy ended: visible again, or detached when removed meanwhile.
  void EndMigration() { MoveTo(removed() ? EntryState::kDetached : EntryState::kVisible); }
};

using HostLru = IntrusiveList<BlockStore::Entry, &BlockStore::Entry::host_lru>;
using GpuLru = IntrusiveList<BlockStore::Entry, &BlockStore::Entry::gpu_lru>;
using DiskLru = IntrusiveList<BlockStore::Entry, &BlockStore::Entry::disk_lru>;
using NsLru = IntrusiveList<BlockStore::Entry, &BlockStore::Entry::ns_lru>;

}  // namespace kvtier::store

#endif  // KVTIER_DAEMON_STORE_BLOCK_STORE_ENTRY_H_
