// StorageTier: what the block store asks of one tier of its stack (GPU tier, host tier, disk
// tier): slots of its own allocation, the bytes of a slot, and its capacity. The store's policy
// (which tier a block goes to, when it moves down, what the index records) stays in BlockStore;
// a tier knows nothing of blocks, keys or the index. The interface is named StorageTier because
// `Tier` is already the tier's id (index::Tier, re-exported as store::Tier).
//
// GpuTier, HostTier and DiskTier have more public methods than the house limit (~15): this
// interface's 13 plus the few accessors the store uses outside it (the memory tiers' data() and
// slots(), GpuTier::device(), HostTier::arena(), DiskTier's files and CanAllocate).
#ifndef KVTIER_DAEMON_STORE_TIER_H_
#define KVTIER_DAEMON_STORE_TIER_H_

#include <cstdint>
#include <functional>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "daemon/index/block_record.h"

namespace kvtier::store {

// A slot in a tier: the tier's file (one per disk directory; always 0 in the memory tiers) and
// the byte offset in it, as index::BlockRecord records them (device, offset).
struct TierSlot {
  uint16_t file = 0;
  uint64_t offset = 0;
};

class StorageTier {
 public:
  virtual ~StorageTier() = default;

  virtual index::Tier id() const = 0;
  absl::string_view name() const { return index::TierName(id()); }  // "gpu", "host", "disk"
  // Whether its contents can outlive the process (the disk tier; the host tier when backed by a
  // shared-memory file). The store indexes copies only in such tiers.
  virtual bool persistent() const = 0;

  // ---- Slots. Not thread-safe: the store serializes these under its mutex. ----

  // The bytes a slot for `bytes` takes (rounded up to the tier's alignment).
  virtual uint64_t SlotSize(uint64_t bytes) const = 0;
  // A free slot for `bytes`, or nullopt when the tier has no room for it now.
  virtual std::optional<TierSlot> Allocate(uint64_t bytes) = 0;
  // Internal when `slot` is not an allocated slot for `bytes` (the tier is left unchanged).
  virtual absl::Status Free(const TierSlot& slot, uint64_t bytes) = 0;
  // Recovery: marks a slot the index names as allocated. FailedPrecondition when it is outside
  // the tier or overlaps one already taken.
  virtual absl::Status MarkAllocated(const TierSlot& slot, uint64_t bytes) = 0;

  // ---- Bytes. Thread-safe for distinct slots. ----

  // Queues a copy of `src` into `slot`; `done` runs once with the outcome, on this thread or
  // another. `src` is host memory (the host arena, which the disk tier's files have registered;
  // the GPU tier also takes device memory) and covers SlotSize of the block for the disk tier,
  // whose direct I/O moves whole slots.
  virtual void SubmitWrite(const TierSlot& slot, absl::Span<const uint8_t> src,
                           std::function<void(absl::Status)> done) = 0;
  // Copies `slot` into `dst` (the same kinds of memory and sizes as SubmitWrite). Blocks.
  virtual absl::Status Read(const TierSlot& slot, absl::Span<uint8_t> dst) const = 0;
  // Makes every write whose `done` has run durable (disk: fdatasync; memory tiers: nothing).
  virtual absl::Status Sync() = 0;

  // ---- Capacity. ----
  virtual uint64_t capacity_bytes() const = 0;  // bytes its slots may use
  virtual uint64_t used_bytes() const = 0;      // slot bytes allocated
  virtual uint64_t chunk_bytes() const = 0;     // the allocation unit: a slot fits in one
};

}  // namespace kvtier::store

#endif  // KVTIER_DAEMON_STORE_TIER_H_
