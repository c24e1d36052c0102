// SlotAllocator against a reference model: random allocations and frees of several sizes never
// overlap, stay inside the capacity, return whole chunks when empty, and recovery marks conflict.
#include "daemon/store/slot_allocator.h"

#include <map>
#include <random>

#include "gtest/gtest.h"

namespace kvtier::store {
namespace {

TEST(SlotAllocatorTest, CreateChecksItsArguments) {
  EXPECT_FALSE(SlotAllocator::Create(1 << 20, 1 << 16, 3000).ok());
  EXPECT_FALSE(SlotAllocator::Create(1 << 20, 1000, 4096).ok());
  EXPECT_FALSE(SlotAllocator::Create(1 << 10, 1 << 16, 4096).ok());
  EXPECT_TRUE(SlotAllocator::Create(1 << 20, 1 << 16, 4096).ok());
}

TEST(SlotAllocatorTest, FillsAChunkThenTheNextAndReturnsThemWhenEmpty) {
  SlotAllocator a = SlotAllocator::Create(4 << 20, 1 << 20, 4096).value();
  EXPECT_EQ(a.capacity_bytes(), 4u << 20);
  std::vector<uint64_t> offsets;
  // 3 slots of 300 KiB fit in a 1 MiB chunk.
  for (int i = 0; i < 12; ++i) {
    std::optional<uint64_t> o = a.Allocate(300 << 10);
    ASSERT_TRUE(o.has_value()) << i;
    offsets.push_back(*o);
  }
  EXPECT_FALSE(a.Allocate(300 << 10).has_value()) << "4 chunks x 3 slots";
  EXPECT_FALSE(a.CanAllocate(4096)) << "no chunk is free for another size";
  EXPECT_EQ(a.free_chunks(), 0u);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(a.Free(offsets[i], 300 << 10).ok());
  EXPECT_EQ(a.free_chunks(), 1u) << "an empty chunk goes back to the pool";
  EXPECT_TRUE(a.Allocate(4096).has_value()) << "and may serve another size";
}

TEST(SlotAllocatorTest, DoubleFreeAndWrongSizeAreReported) {
  SlotAllocator a = SlotAllocator::Create(1 << 20, 1 << 20, 4096).value();
  const uint64_t o = a.Allocate(8192).value();
  const uint64_t o2 = a.Allocate(8192).value();
  EXPECT_EQ(a.Free(o, 4096).code(), absl::StatusCode::kInternal);
  ASSERT_TRUE(a.Free(o, 8192).ok());
  EXPECT_EQ(a.Free(o, 8192).code(), absl::StatusCode::kInternal);
  EXPECT_EQ(a.Free(o2 + 4096, 8192).code(), absl::StatusCode::kInternal);
  EXPECT_EQ(a.used_bytes(), 8192u);
}

TEST(SlotAllocatorTest, MarkAllocatedRebuildsAndDetectsConflicts) {
  SlotAllocator a = SlotAllocator::Create(4 << 20, 1 << 20, 4096).value();
  ASSERT_TRUE(a.MarkAllocated(3 * (1 << 20) + 2 * 40960, 40960).ok());
  EXPECT_EQ(a.MarkAllocated(3 * (1 << 20) + 2 * 40960, 40960).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(a.MarkAllocated(3 * (1 << 20), 8192).code(), absl::StatusCode::kFailedPrecondition)
      << "the chunk serves 40 KiB slots";
  EXPECT_EQ(a.MarkAllocated(3 * (1 << 20) + 100, 40960).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(a.MarkAllocated(9u << 20, 40960).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(a.free_chunks(), 3u);
  // Allocation continues around the recovered slot.
  for (int i = 0; i < 25; ++i) {
    const uint64_t o = a.Allocate(40960).value();
    EXPECT_NE(o, 3u * (1 << 20) + 2 * 40960);
  }
}

TEST(SlotAllocatorTest, RandomWorkloadMatchesAModel) {
  SlotAllocator a = SlotAllocator::Create(64 << 20, 2 << 20, 4096).value();
  std::mt19937_64 rng(42);
  const uint64_t sizes[] = {4096, 40960, 100000, 1331200};
  std::map<uint64_t, uint64_t> live;  // offset -> slot size
  uint64_t used = 0;
  for (int step = 0; step < 20000; ++step) {
    if (live.empty() || rng() % 3 != 0) {
      const uint64_t size = sizes[rng() % 4];
      std::optional<uint64_t> o = a.Allocate(size);
      if (!o.has_value()) continue;
      const uint64_t slot = a.SlotSize(size);
      ASSERT_LE(*o + slot, a.capacity_bytes());
      // No overlap with the neighbours.
      auto next = live.lower_bound(*o);
      if (next != live.end()) {
        ASSERT_LE(*o + slot, next->first);
      }
      if (next != live.begin()) {
        auto prev = std::prev(next);
        ASSERT_LE(prev->first + prev->second, *o);
      }
      live[*o] = slot;
      used += slot;
    } else {
      auto it = live.begin();
      std::advance(it, static_cast<long>(rng() % live.size()));
      ASSERT_TRUE(a.Free(it->first, it->second).ok());
      used -= it->second;
      live.erase(it);
    }
    ASSERT_EQ(a.used_bytes(), used);
    ASSERT_EQ(a.used_slots(), live.size());
  }
  for (auto& [o, s] : live) ASSERT_TRUE(a.Free(o, s).ok());
  EXPECT_EQ(a.free_chunks(), 32u);
}

}  // namespace
}  // namespace kvtier::store
