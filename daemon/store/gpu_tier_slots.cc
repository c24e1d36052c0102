// GpuTier's StorageTier side: its slots and the copies in and out of them. (The fused encode out
// of the tier is the namespace's kernels::GpuBlockCodec.)
#include <utility>

#include "common/status_macros.h"
#include "daemon/store/gpu_tier.h"
#include "kernels/device.h"

namespace kvtier::store {
void GpuTier::SubmitWrite(const TierSlot& slot, absl::Span<const uint8_t> src,
                          std::function<void(absl::Status)> done) {
  absl::Status st = CheckFile(slot);
  if (st.ok()) st = kernels::UseDevice(device_);
  void* stream = kernels::PerThreadStream();
  if (st.ok()) st = kernels::CopyAsync(data_ + slot.offset, src.data(), src.size(), stream);
  if (st.ok()) st = kernels::SynchronizeStream(stream);
  done(std::move(st));
}

absl::Status GpuTier::Read(const TierSlot& slot, absl::Span<uint8_t> dst) const {
  KVTIER_RETURN_IF_ERROR(CheckFile(slot));
  KVTIER_RETURN_IF_ERROR(kernels::UseDevice(device_));
  void* stream = kernels::PerThreadStream();
  KVTIER_RETURN_IF_ERROR(kernels::CopyAsync(dst.data(), data_ + slot.offset, dst.size(), stream));
  return kernels::SynchronizeStream(stream);
}

}  // namespace kvtier::store
