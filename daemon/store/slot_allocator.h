// SlotAllocator: fixed-size slots for cold blocks of several sizes inside one address range
// [0, capacity) (the host arena, or one disk file). The range is cut into chunks; a chunk serves
// one slot size while any of its slots is used and returns to the free pool when its last slot is
// freed, so a change in block sizes never strands space. Double frees and frees of unknown slots
// are reported, not ignored. Not thread-safe: the owner serializes calls.
#ifndef KVTIER_DAEMON_STORE_SLOT_ALLOCATOR_H_
#define KVTIER_DAEMON_STORE_SLOT_ALLOCATOR_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kvtier::store {

class SlotAllocator {
 public:
  // InvalidArgument unless alignment is a power of two, chunk_bytes a multiple of it and
  // capacity_bytes >= chunk_bytes. The capacity beyond the last whole chunk is not used.
  static absl::StatusOr<SlotAllocator> Create(uint64_t capacity_bytes, uint64_t chunk_bytes,
                                              uint32_t alignment);

  // A slot of `size` bytes (rounded up to the alignment), or nullopt when no chunk of that slot
  // size has room and no chunk is free. REQUIRES: 0 < size <= chunk_bytes().
  std::optional<uint64_t> Allocate(uint64_t size);

  // Returns the slot at `offset` of `size` bytes. Internal when it is not an allocated slot of
  // that size (a double free, a wrong size): the allocator is left unchanged.
  absl::Status Free(uint64_t offset, uint64_t size);

  // Marks a slot as allocated (recovery from the index). FailedPrecondition when the offset is not
  // a slot boundary for that size, the chunk already serves another size, or the slot is taken.
  absl::Status MarkAllocated(uint64_t offset, uint64_t size);

  // True when Allocate(size) would succeed.
  bool CanAllocate(uint64_t size) const;

  uint64_t capacity_bytes() const { return chunk_count_ * chunk_bytes_; }
  uint64_t chunk_bytes() const { return chunk_bytes_; }
  uint64_t used_bytes() const { return used_bytes_; }  // sum of allocated slot sizes
  uint64_t used_slots() const { return used_slots_; }
  uint64_t free_chunks() const { return free_chunks_.size(); }
  uint64_t SlotSize(uint64_t size) const {
    return (size + alignment_ - 1) / alignment_ * alignment_;
  }

 private:
  struct Chunk {
    uint64_t slot_size = 0;  // 0: free chunk
    uint32_t slots = 0;
    uint32_t used = 0;
    uint32_t search_hint = 0;         // first word that may hold a free bit
    int64_t partial_pos = -1;         // index in its class's partial list, -1 when not there
    std::vector<uint64_t> used_bits;  // bit i: slot i allocated
  };
  struct SizeClass {
    std::vector<uint32_t> partial;  // chunks of this slot size with at least one free slot
  };

  SlotAllocator(uint64_t chunk_count, uint64_t chunk_bytes, uint32_t alignment);
  void AssignChunk(uint32_t chunk, uint64_t slot_size);
  void AddPartial(uint32_t chunk);
  void RemovePartial(uint32_t chunk);
  absl::Status LocateSlot(uint64_t offset, uint64_t slot_size, uint32_t* chunk,
                          uint32_t* slot) const;

  uint64_t chunk_count_ = 0;
  uint64_t chunk_bytes_ = 0;
  uint32_t alignment_ = 0;
  std::vector<Chunk> chunks_;
  std::vector<uint32_t> free_chunks_;  // stack; lowest chunk on top
  absl::flat_hash_map<uint64_t, SizeClass> classes_;
  uint64_t used_bytes_ = 0;
  uint64_t used_slots_ = 0;
};

}  // namespace kvtier::store

#endif  // KVTIER_DAEMON_STORE_SLOT_ALLOCATOR_H_
