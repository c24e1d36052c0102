// GpuTier: daemon-owned device memory holding hot pages (the engine's own format, flat), sliced
// into slots by a SlotAllocator. A namespace's kernels::GpuBlockCodec (BlockStore::SetHotLayout)
// turns a GPU slot into a cold block in the host tier. The tier is volatile: nothing in it is
// indexed durably. Only builds with CUDA have one. See docs/ARCHITECTURE.md, "GPU tier".
#ifndef KVTIER_DAEMON_STORE_GPU_TIER_H_
#define KVTIER_DAEMON_STORE_GPU_TIER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/store/slot_allocator.h"
#include "daemon/store/tier.h"

namespace kvtier::store {

class GpuTier final : public StorageTier {
 public:
  // `capacity_bytes` of device memory on `device`, cut into chunks of `chunk_bytes`.
  //   Unimplemented      built without CUDA;
  //   Unavailable        no usable device, or the device cannot use registered host pointers;
  //   InvalidArgument    no such device, capacity below one chunk;
  //   ResourceExhausted  the device has not that much free memory.
  static absl::StatusOr<std::unique_ptr<GpuTier>> Create(int device, uint64_t capacity_bytes,
                                                         uint64_t chunk_bytes);
  ~GpuTier() override;
  GpuTier(const GpuTier&) = delete;
  GpuTier& operator=(const GpuTier&) = delete;

  int device() const { return device_; }
  uint8_t* data() const { return data_; }
  // Not thread-safe: the store serializes calls under its mutex.
  SlotAllocator& slots() { return slots_; }
  const SlotAllocator& slots() const { return slots_; }

  // StorageTier: slots are offsets in the device allocation (file 0); bytes move by a copy on
  // the calling thread's stream of the tier's device (host or device memory, unified addressing).
  // Volatile: nothing in it outlives the process.
  index::Tier id() const override { return index::Tier::kGpu; }
  bool persistent() const override { return false; }
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

  static constexpr uint32_t kSlotAlignment = 256;

 private:
  GpuTier(int device, uint8_t* data, SlotAllocator slots)
      : device_(device), data_(data), slots_(std::move(slots)) {}
  int device_;
  uint8_t* data_;
  SlotAllocator slots_;
};

}  // namespace kvtier::store

#endif  // KVTIER_DAEMON_STORE_GPU_TIER_H_
