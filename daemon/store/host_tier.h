// HostTier: the host tier as a StorageTier, the host arena (HostArena: the memory, its pinning
// and persistence) cut into slots by a SlotAllocator. The store also uses the arena's bytes in
// place (reservations, pinned reads, the source of disk writes): data() and slots() are for that.
// Not thread-safe for allocation (the store serializes it); data() may be used from any thread.
#ifndef KVTIER_DAEMON_STORE_HOST_TIER_H_
#define KVTIER_DAEMON_STORE_HOST_TIER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include "absl/status/statusor.h"
#include "daemon/store/host_arena.h"
#include "daemon/store/slot_allocator.h"
#include "daemon/store/slotted_tier.h"

namespace kvtier::store {

class HostTier final : public SlottedTier {
 public:
  static constexpr uint32_t kSlotAlignment = 4096;

  // Slots of chunk_bytes over the whole arena. InvalidArgument as SlotAllocator::Create.
  static absl::StatusOr<std::unique_ptr<HostTier>> Create(std::unique_ptr<HostArena> arena,
                                                          uint64_t chunk_bytes);

  HostArena& arena() const { return *arena_; }
  uint8_t* data() const { return arena_->data(); }

  // StorageTier: slots are offsets in the arena (file 0, SlottedTier); bytes move by memcpy.
  index::Tier id() const override { return index::Tier::kHost; }
  bool persistent() const override { return arena_->persistent(); }
  void SubmitWrite(const TierSlot& slot, absl::Span<const uint8_t> src,
                   std::function<void(absl::Status)> done) override;
  absl::Status Read(const TierSlot& slot, absl::Span<uint8_t> dst) const override;

 private:
  HostTier(std::unique_ptr<HostArena> arena, SlotAllocator slots)
      : SlottedTier(std::move(slots), "host"), arena_(std::move(arena)) {}
  // Internal unless `slot` (file 0) and `bytes` lie inside the arena.
  absl::Status CheckRange(const TierSlot& slot, uint64_t bytes) const;

  std::unique_ptr<HostArena> arena_;
};

}  // namespace kvtier::store

#endif  // KVTIER_DAEMON_STORE_HOST_TIER_H_
