// SlottedTier: the slot half of a StorageTier whose bytes are one memory allocation (the GPU tier,
// the host tier) cut into slots by a SlotAllocator: slots are offsets in it (file 0). The tiers
// differ in how bytes move (SubmitWrite, Read) and what they are backed by; this is what they
// share, so that both answer the slot calls alike.
#ifndef KVTIER_DAEMON_STORE_SLOTTED_TIER_H_
#define KVTIER_DAEMON_STORE_SLOTTED_TIER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "daemon/store/slot_allocator.h"
#include "daemon/store/tier.h"

namespace kvtier::store {

class SlottedTier : public StorageTier {
 public:
  // Not thread-safe: the store serializes calls under its mutex.
  SlotAllocator& slots() { return slots_; }
  const SlotAllocator& slots() const { return slots_; }

  uint64_t SlotSize(uint64_t bytes) const override { return slots_.SlotSize(bytes); }
  std::optional<TierSlot> Allocate(uint64_t bytes) override;
  // Internal for a slot outside file 0; MarkAllocated: FailedPrecondition.
  absl::Status Free(const TierSlot& slot, uint64_t bytes) override;
  absl::Status MarkAllocated(const TierSlot& slot, uint64_t bytes) override;
  absl::Status Sync() override { return absl::OkStatus(); }  // memory: nothing to make durable
  uint64_t capacity_bytes() const override { return slots_.capacity_bytes(); }
  uint64_t used_bytes() const override { return slots_.used_bytes(); }
  uint64_t chunk_bytes() const override { return slots_.chunk_bytes(); }

 protected:
  // `label` names the tier in error messages ("GPU", "host").
  SlottedTier(SlotAllocator slots, absl::string_view label)
      : slots_(std::move(slots)), label_(label) {}
  // Internal unless `slot` is in file 0.
  absl::Status CheckFile(const TierSlot& slot) const;

  SlotAllocator slots_;

 private:
  std::string label_;
};

}  // namespace kvtier::store

#endif  // KVTIER_DAEMON_STORE_SLOTTED_TIER_H_
