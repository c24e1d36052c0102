// The StorageTier contract (daemon/store/tier.h), run against the host tier and the disk tier
// (the GPU tier's side runs in gpu_tier_test where a device exists): slots of the tier's own
// allocation, bytes through SubmitWrite/Read, capacity and usage, recovery's MarkAllocated.
#include "daemon/store/tier.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "daemon/store/disk_tier.h"
#include "daemon/store/host_arena.h"
#include "daemon/store/host_tier.h"
#include "gtest/gtest.h"
#include "tests/testing/in_memory_block_file.h"

namespace kvtier::store {
namespace {

constexpr uint64_t kChunk = 1ull << 20;

struct TierUnderTest {
  std::string name;
  std::function<std::unique_ptr<StorageTier>(HostArena& buffers)> make;
};

std::unique_ptr<HostArena> MakeArena(uint64_t bytes) {
  HostArenaOptions options;
  options.capacity_bytes = bytes;
  options.pin = HostPinMode::kNone;
  return HostArena::Create(options).value();
}

class StorageTierTest : public ::testing::TestWithParam<TierUnderTest> {
 protected:
  void SetUp() override {
    buffers_ = MakeArena(4 * kChunk);
    tier_ = GetParam().make(*buffers_);
    ASSERT_NE(tier_, nullptr);
  }

  absl::Status Write(const TierSlot& slot, absl::Span<const uint8_t> src) {
    absl::Status result = absl::UnknownError("done never ran");
    absl::Notification done;
    tier_->SubmitWrite(slot, src, [&](absl::Status st) {
      result = std::move(st);
      done.Notify();
    });
    done.WaitForNotification();
    return result;
  }

  std::unique_ptr<HostArena> buffers_;  // the registered host memory writes and reads use
  std::unique_ptr<StorageTier> tier_;
};

TEST_P(StorageTierTest, SlotsRoundTripTheirBytes) {
  const uint64_t slot_bytes = tier_->SlotSize(10000);
  ASSERT_GE(slot_bytes, 10000u);
  std::optional<TierSlot> a = tier_->Allocate(10000);
  std::optional<TierSlot> b = tier_->Allocate(10000);
  ASSERT_TRUE(a.has_value() && b.has_value());
  EXPECT_FALSE(a->file == b->file && a->offset == b->offset);
  EXPECT_EQ(tier_->used_bytes(), 2 * slot_bytes);

  uint8_t* src = buffers_->data();
  uint8_t* dst = buffers_->data() + kChunk;
  for (uint64_t i = 0; i < slot_bytes; ++i) src[i] = static_cast<uint8_t>(i * 7 + 1);
  ASSERT_TRUE(Write(*a, {src, slot_bytes}).ok());
  ASSERT_TRUE(tier_->Sync().ok());
  ASSERT_TRUE(tier_->Read(*a, {dst, slot_bytes}).ok());
  EXPECT_EQ(std::vector<uint8_t>(src, src + slot_bytes),
            std::vector<uint8_t>(dst, dst + slot_bytes));

  ASSERT_TRUE(tier_->Free(*a, 10000).ok());
  EXPECT_FALSE(tier_->Free(*a, 10000).ok()) << "a double free is reported";
  ASSERT_TRUE(tier_->Free(*b, 10000).ok());
  EXPECT_EQ(tier_->used_bytes(), 0u);
}

TEST_P(StorageTierTest, FillsToItsCapacityThenRefuses) {
  EXPECT_GT(tier_->capacity_bytes(), 0u);
  EXPECT_EQ(tier_->chunk_bytes(), kChunk);
  std::vector<TierSlot> slots;
  while (std::optional<TierSlot> slot = tier_->Allocate(kChunk)) slots.push_back(*slot);
  EXPECT_EQ(slots.size() * kChunk, tier_->capacity_bytes());
  EXPECT_EQ(tier_->used_bytes(), tier_->capacity_bytes());
  for (const TierSlot& slot : slots) EXPECT_TRUE(tier_->Free(slot, kChunk).ok());
}

TEST_P(StorageTierTest, MarkAllocatedTakesTheSlotOnce) {
  std::optional<TierSlot> slot = tier_->Allocate(4096);
  ASSERT_TRUE(slot.has_value());
  ASSERT_TRUE(tier_->Free(*slot, 4096).ok());
  ASSERT_TRUE(tier_->MarkAllocated(*slot, 4096).ok());
  EXPECT_FALSE(tier_->MarkAllocated(*slot, 4096).ok()) << "a slot taken twice is refused";
  EXPECT_FALSE(tier_->MarkAllocated(TierSlot{999, 0}, 4096).ok()) << "no such file";
  EXPECT_TRUE(tier_->Free(*slot, 4096).ok());
}

INSTANTIATE_TEST_SUITE_P(
    Tiers, StorageTierTest,
    ::testing::Values(TierUnderTest{"host",
                                    [](HostArena&) -> std::unique_ptr<StorageTier> {
                                      auto tier = HostTier::Create(MakeArena(4 * kChunk), kChunk);
                                      EXPECT_TRUE(tier.ok()) << tier.status();
                                      if (!tier.ok()) return nullptr;
                                      EXPECT_EQ((*tier)->id(), index::Tier::kHost);
                                      EXPECT_FALSE((*tier)->persistent());
                                      return std::move(*tier);
                                    }},
                      TierUnderTest{"disk",
                                    [](HostArena& buffers) -> std::unique_ptr<StorageTier> {
                                      DiskTierOptions options;
                                      options.dirs = {"memory0", "memory1"};
                                      options.capacity_bytes = 4 * kChunk;
                                      options.chunk_bytes = kChunk;
                                      options.open_file = [](const io::BlockFileOptions& o)
                                          -> absl::StatusOr<std::unique_ptr<io::BlockFile>> {
                                        auto file = kvtier::testing::InMemoryBlockFile::Create(
                                            o.size_bytes, 4096);
                                        if (!file.ok()) return file.status();
                                        return std::unique_ptr<io::BlockFile>(std::move(*file));
                                      };
                                      auto tier = DiskTier::Create(options, {buffers.span()});
                                      EXPECT_TRUE(tier.ok()) << tier.status();
                                      if (!tier.ok()) return nullptr;
                                      EXPECT_EQ((*tier)->id(), index::Tier::kDisk);
                                      EXPECT_TRUE((*tier)->persistent());
                                      return std::move(*tier);
                                    }}),
    [](const ::testing::TestParamInfo<TierUnderTest>& info) { return info.param.name; });

}  // namespace
}  // namespace kvtier::store
