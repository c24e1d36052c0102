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
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/store/slot_allocator.h"
#include "daemon/store/slotted_tier.h"

namespace kvtier::store {

class GpuTier final : public SlottedTier {
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
  // Streams of the tier's device for the background encode of its pages into the host tier (the
  // Demoter spreads a round's pages over them); kStreams of them.
  static constexpr int kStreams = 8;
  void* stream(int i) const { return streams_[i % kStreams]; }

  // StorageTier: slots are offsets in the device allocation (file 0, SlottedTier); bytes move by
  // a copy on the calling thread's stream of the tier's device (host or device memory, unified
  // addressing). Volatile: nothing in it outlives the process.
  index::Tier id() const override { return index::Tier::kGpu; }
  bool persistent() const override { return false; }
  void SubmitWrite(const TierSlot& slot, absl::Span<const uint8_t> src,
                   std::function<void(absl::Status)> done) override;
  absl::Status Read(const TierSlot& slot, absl::Span<uint8_t> dst) const override;
  // The copy SubmitWrite does, returning once it has finished (PutHot's one caller needs the
  // outcome before it publishes the entry).
  absl::Status Write(const TierSlot& slot, absl::Span<const uint8_t> src);

  static constexpr uint32_t kSlotAlignment = 256;

 private:
  GpuTier(int device, uint8_t* data, SlotAllocator slots)
      : SlottedTier(std::move(slots), "GPU"), device_(device), data_(data) {}
  int device_;
  uint8_t* data_;
  void* streams_[kStreams] = {};
};

}  // namespace kvtier::store

#endif  // KVTIER_DAEMON_STORE_GPU_TIER_H_
