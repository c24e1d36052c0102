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
#include "daemon/store/tier.h"

namespace kvtier::store {

class HostTier final : public StorageTier {
 public:
  static constexpr uint32_t kSlotAlignment = 4096;

  // Slots of chunk_bytes over the whole arena. InvalidArgument as SlotAllocator::Create.
  static absl::StatusOr<std::unique_ptr<HostTier>> Create(std::unique_ptr<HostArena> arena,
                                                          uint64_t chunk_bytes);

  HostArena& arena() const { return *arena_; }
  uint8_t* data() const { return arena_->data(); }
  SlotAllocator& slots() { return slots_; }
  const SlotAllocator& slots() const { return slots_; }

  // StorageTier: slots are offsets in the arena (file 0); bytes move by memcpy.
  index::Tier id() const override { return index::Tier::kHost; }
  bool persistent() const override { return arena_->persistent(); }
  uint64_t SlotSize(uint64_t bytes) const override { return slots_.SlotSize(bytes); }
  std::optional<TierSlot> Allocate(uint64_t bytes) override;
  absl::Status Free(const TierSlot& slot, uint64_t bytes) override;
  absl::Status MarkAllocated(const TierSlot& slot, uint64_t bytes) override;
  void SubmitWrite(const TierSlot& slot, absl::Span<const uint8_t> src,
                   std::function<void(absl::Status)> done) override;
  absl::Status Read(const TierSlot& slot, absl::Span<uint8_t> dst) const override;
  absl::Status Sync() override { return absl::OkStatus(); }
  uint64_t capacity_bytes() const override { return slots_.capacity_bytes(); }
  uint64_t used_bytes() const override { return slots_.used_bytes(); }
  uint64_t chunk_bytes() const override { return slots_.chunk_bytes(); }

 private:
  HostTier(std::unique_ptr<HostArena> arena, SlotAllocator slots)
      : arena_(std::move(arena)), slots_(std::move(slots)) {}
  // Internal unless `slot` (file 0) and `bytes` lie inside the arena.
  absl::Status CheckRange(const TierSlot& slot, uint64_t bytes) const;

  std::unique_ptr<HostArena> arena_;
  SlotAllocator slots_;
};

}  // namespace kvtier::store

#endif  // KVTIER_DAEMON_STORE_HOST_TIER_H_
