#include "daemon/store/host_tier.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace kvtier::store {

absl::StatusOr<std::unique_ptr<HostTier>> HostTier::Create(std::unique_ptr<HostArena> arena,
                                                           uint64_t chunk_bytes) {
  KVTIER_ASSIGN_OR_RETURN(SlotAllocator slots,
                          SlotAllocator::Create(arena->size(), chunk_bytes, kSlotAlignment));
  return std::unique_ptr<HostTier>(new HostTier(std::move(arena), std::move(slots)));
}

absl::Status HostTier::CheckRange(const TierSlot& slot, uint64_t bytes) const {
  if (slot.file != 0 || slot.offset > arena_->size() || bytes > arena_->size() - slot.offset) {
    return absl::InternalError(absl::StrCat("host slot ", slot.file, ":", slot.offset, " of ",
                                            bytes, " bytes is outside the ", arena_->size(),
                                            "-byte arena"));
  }
  return absl::OkStatus();
}

void HostTier::SubmitWrite(const TierSlot& slot, absl::Span<const uint8_t> src,
                           std::function<void(absl::Status)> done) {
  absl::Status st = CheckRange(slot, src.size());
  if (st.ok()) std::memmove(arena_->data() + slot.offset, src.data(), src.size());
  done(std::move(st));
}

absl::Status HostTier::Read(const TierSlot& slot, absl::Span<uint8_t> dst) const {
  KVTIER_RETURN_IF_ERROR(CheckRange(slot, dst.size()));
  std::memmove(dst.data(), arena_->data() + slot.offset, dst.size());
  return absl::OkStatus();
}

}  // namespace kvtier::store
