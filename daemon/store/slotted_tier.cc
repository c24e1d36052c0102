#include "daemon/store/slotted_tier.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace kvtier::store {

absl::Status SlottedTier::CheckFile(const TierSlot& slot) const {
  if (slot.file == 0) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(label_, " slot in file ", slot.file));
}

std::optional<TierSlot> SlottedTier::Allocate(uint64_t bytes) {
  std::optional<uint64_t> offset = slots_.Allocate(bytes);
  if (!offset.has_value()) return std::nullopt;
  return TierSlot{0, *offset};
}

absl::Status SlottedTier::Free(const TierSlot& slot, uint64_t bytes) {
  KVTIER_RETURN_IF_ERROR(CheckFile(slot));
  return slots_.Free(slot.offset, bytes);
}

absl::Status SlottedTier::MarkAllocated(const TierSlot& slot, uint64_t bytes) {
  if (slot.file != 0) {
    return absl::FailedPreconditionError(absl::StrCat(label_, " slot in file ", slot.file));
  }
  return slots_.MarkAllocated(slot.offset, bytes);
}

}  // namespace kvtier::store
