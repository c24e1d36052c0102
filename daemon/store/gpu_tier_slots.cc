// GpuTier's StorageTier side: its slots and the copies in and out of them. (The fused encode out
// of the tier is the namespace's kernels::GpuBlockCodec.)
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "daemon/store/gpu_tier.h"
#include "kernels/device.h"

namespace kvtier::store {
namespace {

absl::Status CheckFile(const TierSlot& slot) {
  if (slot.file == 0) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("GPU slot in file ", slot.file));
}

}  // namespace

std::optional<TierSlot> GpuTier::Allocate(uint64_t bytes) {
  std::optional<uint64_t> offset = slots_.Allocate(bytes);
  if (!offset.has_value()) return std::nullopt;
  return TierSlot{0, *offset};
}

absl::Status GpuTier::Free(const TierSlot& slot, uint64_t bytes) {
  KVTIER_RETURN_IF_ERROR(CheckFile(slot));
  return slots_.Free(slot.offset, bytes);
}

absl::Status GpuTier::MarkAllocated(const TierSlot& slot, uint64_t bytes) {
  if (slot.file != 0) {
    return absl::FailedPreconditionError(absl::StrCat("GPU slot in file ", slot.file));
  }
  return slots_.MarkAllocated(slot.offset, bytes);
}

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
