// GpuTier's StorageTier side: its slots and the copies in and out of them. (The fused encode out
// of the tier is the namespace's kernels::GpuBlockCodec.)
#include <utility>

#include "common/status_macros.h"
#include "daemon/store/gpu_tier.h"
#include "kernels/device.h"

namespace kvtier::store {
absl::Status GpuTier::Write(const TierSlot& slot, absl::Span<const uint8_t> src) {
  KVTIER_RETURN_IF_ERROR(CheckFile(slot));
  KVTIER_RETURN_IF_ERROR(kernels::UseDevice(device_));
  void* stream = kernels::PerThreadStream();
  KVTIER_RETURN_IF_ERROR(kernels::CopyAsync(data_ + slot.offset, src.data(), src.size(), stream));
  return kernels::SynchronizeStream(stream);
}

void GpuTier::SubmitWrite(const TierSlot& slot, absl::Span<const uint8_t> src,
                          std::function<void(absl::Status)> done) {
  done(Write(slot, src));
}

absl::Status GpuTier::Read(const TierSlot& slot, absl::Span<uint8_t> dst) const {
  KVTIER_RETURN_IF_ERROR(CheckFile(slot));
  KVTIER_RETURN_IF_ERROR(kernels::UseDevice(device_));
  void* stream = kernels::PerThreadStream();
  KVTIER_RETURN_IF_ERROR(kernels::CopyAsync(dst.data(), data_ + slot.offset, dst.size(), stream));
  return kernels::SynchronizeStream(stream);
}

}  // namespace kvtier::store
