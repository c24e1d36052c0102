// Chunked slab allocation with one bitmap per chunk. A chunk is assigned to a slot size on first
// use and released when empty; allocation takes a partial chunk of the right size (the most
// recently partial one, which keeps hot chunks dense) or a free chunk, then the first clear bit
// from a per-chunk hint. Every operation is O(slots per chunk / 64) at worst.
#include "daemon/store/slot_allocator.h"

#include <algorithm>
#include <bit>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace kvtier::store {

absl::StatusOr<SlotAllocator> SlotAllocator::Create(uint64_t capacity_bytes, uint64_t chunk_bytes,
                                                    uint32_t alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("slot alignment %d is not a power of two", alignment));
  }
  if (chunk_bytes == 0 || chunk_bytes % alignment != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "chunk size %d is not a positive multiple of the alignment %d", chunk_bytes, alignment));
  }
  if (capacity_bytes < chunk_bytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "capacity %d bytes is smaller than one chunk (%d bytes)", capacity_bytes, chunk_bytes));
  }
  if (capacity_bytes / chunk_bytes > UINT32_MAX) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "capacity %d bytes is too many chunks of %d bytes", capacity_bytes, chunk_bytes));
  }
  return SlotAllocator(capacity_bytes / chunk_bytes, chunk_bytes, alignment);
}

SlotAllocator::SlotAllocator(uint64_t chunk_count, uint64_t chunk_bytes, uint32_t alignment)
    : chunk_count_(chunk_count), chunk_bytes_(chunk_bytes), alignment_(alignment) {
  chunks_.resize(chunk_count_);
  free_chunks_.reserve(chunk_count_);
  for (uint64_t i = chunk_count_; i > 0; --i) free_chunks_.push_back(static_cast<uint32_t>(i - 1));
}

void SlotAllocator::AssignChunk(uint32_t index, uint64_t slot_size) {
  Chunk& c = chunks_[index];
  c.slot_size = slot_size;
  c.slots = static_cast<uint32_t>(chunk_bytes_ / slot_size);
  c.used = 0;
  c.search_hint = 0;
  c.used_bits.assign((c.slots + 63) / 64, 0);
  AddPartial(index);
}

void SlotAllocator::AddPartial(uint32_t index) {
  Chunk& c = chunks_[index];
  auto& partial = classes_[c.slot_size].partial;
  c.partial_pos = static_cast<int64_t>(partial.size());
  partial.push_back(index);
}

void SlotAllocator::RemovePartial(uint32_t index) {
  Chunk& c = chunks_[index];
  auto& partial = classes_[c.slot_size].partial;
  const uint32_t last = partial.back();
  partial[static_cast<size_t>(c.partial_pos)] = last;
  chunks_[last].partial_pos = c.partial_pos;
  partial.pop_back();
  c.partial_pos = -1;
}

bool SlotAllocator::CanAllocate(uint64_t size) const {
  if (!free_chunks_.empty()) return size > 0 && SlotSize(size) <= chunk_bytes_;
  auto it = classes_.find(SlotSize(size));
  return it != classes_.end() && !it->second.partial.empty();
}

std::optional<uint64_t> SlotAllocator::Allocate(uint64_t size) {
  const uint64_t slot_size = SlotSize(size);
  if (size == 0 || slot_size > chunk_bytes_) return std::nullopt;
  uint32_t index;
  auto it = classes_.find(slot_size);
  if (it != classes_.end() && !it->second.partial.empty()) {
    index = it->second.partial.back();
  } else {
    if (free_chunks_.empty()) return std::nullopt;
    index = free_chunks_.back();
    free_chunks_.pop_back();
    AssignChunk(index, slot_size);
  }
  Chunk& c = chunks_[index];
  for (uint32_t w = c.search_hint; w < c.used_bits.size(); ++w) {
    const uint64_t free_bits = ~c.used_bits[w];
    if (free_bits == 0) continue;
    const uint32_t slot = w * 64 + static_cast<uint32_t>(std::countr_zero(free_bits));
    if (slot >= c.slots) break;
    c.used_bits[w] |= uint64_t{1} << (slot % 64);
    c.search_hint = w;
    if (++c.used == c.slots) RemovePartial(index);
    used_bytes_ += slot_size;
    ++used_slots_;
    return uint64_t{index} * chunk_bytes_ + uint64_t{slot} * slot_size;
  }
  // Unreachable while the partial list is accurate; keep the allocator consistent regardless.
  RemovePartial(index);
  return std::nullopt;
}

absl::Status SlotAllocator::LocateSlot(uint64_t offset, uint64_t slot_size, uint32_t* chunk,
                                       uint32_t* slot) const {
  const uint64_t index = offset / chunk_bytes_;
  if (index >= chunk_count_) {
    return absl::FailedPreconditionError(absl::StrFormat("slot offset %d is beyond the capacity %d",
                                                         offset, chunk_count_ * chunk_bytes_));
  }
  const uint64_t within = offset % chunk_bytes_;
  const Chunk& c = chunks_[index];
  if (c.slot_size != 0 && c.slot_size != slot_size) {
    return absl::FailedPreconditionError(
        absl::StrFormat("slot at offset %d has size %d but its chunk serves slots of %d bytes",
                        offset, slot_size, c.slot_size));
  }
  if (within % slot_size != 0 || within / slot_size >= chunk_bytes_ / slot_size) {
    return absl::FailedPreconditionError(
        absl::StrFormat("offset %d is not a slot boundary for %d-byte slots", offset, slot_size));
  }
  *chunk = static_cast<uint32_t>(index);
  *slot = static_cast<uint32_t>(within / slot_size);
  return absl::OkStatus();
}

absl::Status SlotAllocator::Free(uint64_t offset, uint64_t size) {
  const uint64_t slot_size = SlotSize(size);
  uint32_t index = 0, slot = 0;
  absl::Status located = LocateSlot(offset, slot_size, &index, &slot);
  if (!located.ok()) return absl::InternalError(absl::StrCat("free: ", located.message()));
  Chunk& c = chunks_[index];
  const uint64_t bit = uint64_t{1} << (slot % 64);
  if (c.slot_size == 0 || (c.used_bits[slot / 64] & bit) == 0) {
    return absl::InternalError(absl::StrFormat(
        "free of slot at offset %d (%d bytes), which is not allocated", offset, slot_size));
  }
  c.used_bits[slot / 64] &= ~bit;
  if (slot / 64 < c.search_hint) c.search_hint = slot / 64;
  used_bytes_ -= slot_size;
  --used_slots_;
  if (c.used-- == c.slots) AddPartial(index);
  if (c.used == 0) {
    RemovePartial(index);
    c.slot_size = 0;
    c.used_bits.clear();
    c.used_bits.shrink_to_fit();
    free_chunks_.push_back(index);
  }
  return absl::OkStatus();
}

absl::Status SlotAllocator::MarkAllocated(uint64_t offset, uint64_t size) {
  const uint64_t slot_size = SlotSize(size);
  if (size == 0 || slot_size > chunk_bytes_) {
    return absl::FailedPreconditionError(
        absl::StrFormat("slot size %d does not fit a %d-byte chunk", size, chunk_bytes_));
  }
  uint32_t index = 0, slot = 0;
  KVTIER_RETURN_IF_ERROR(LocateSlot(offset, slot_size, &index, &slot));
  Chunk& c = chunks_[index];
  if (c.slot_size == 0) {
    free_chunks_.erase(std::find(free_chunks_.begin(), free_chunks_.end(), index));
    AssignChunk(index, slot_size);
  }
  const uint64_t bit = uint64_t{1} << (slot % 64);
  if ((c.used_bits[slot / 64] & bit) != 0) {
    return absl::FailedPreconditionError(
        absl::StrFormat("slot at offset %d (%d bytes) is already allocated", offset, slot_size));
  }
  c.used_bits[slot / 64] |= bit;
  used_bytes_ += slot_size;
  ++used_slots_;
  if (++c.used == c.slots) RemovePartial(index);
  return absl::OkStatus();
}

}  // namespace kvtier::store
