// A fixture for store tests: a temporary directory with an index, two disk directories and
// (optionally) a shared-memory host arena, small tiers, and helpers to store test blocks.
#ifndef KVTIER_TESTS_UNIT_DAEMON_STORE_STORE_FIXTURE_H_
#define KVTIER_TESTS_UNIT_DAEMON_STORE_STORE_FIXTURE_H_

#include <sys/stat.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/store/block_store.h"
#include "gtest/gtest.h"
#include "tests/testing/cold_blocks.h"
#include "tests/testing/temp_dir.h"

namespace kvtier::store {

class StoreFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::make_unique<kvtier::testing::TempDir>(kvtier::testing::TempDir::Create().value());
    for (const char* sub : {"disk0", "disk1"}) {
      ASSERT_EQ(mkdir(dir_->File(sub).c_str(), 0700), 0);
    }
    options_.host.capacity_bytes = 16ull << 20;
    options_.host.pin = HostPinMode::kNone;
    options_.host_chunk_bytes = 1ull << 20;
    options_.max_block_bytes = 1ull << 20;
    options_.disk.dirs = {dir_->File("disk0"), dir_->File("disk1")};
    options_.disk.capacity_bytes = 32ull << 20;
    options_.disk.chunk_bytes = 1ull << 20;
    options_.index_path = dir_->File("index");
    options_.sync = index::SyncPolicy::kBatch;
    options_.put_wait_ms = 5000;
  }

  void UsePersistentHost() {
    options_.host.shm_dir = dir_->path();
    options_.host.shm_name = "host-arena";
  }

  absl::StatusOr<std::unique_ptr<BlockStore>> Open() { return BlockStore::Open(options_); }

  static BlockKey Key(uint64_t id, NamespaceId ns = 1) {
    return BlockKey{ns, kvtier::testing::TestHash(id)};
  }
  static std::vector<uint8_t> Block(uint64_t id, uint32_t payload = 40000) {
    return kvtier::testing::MakeTestBlock(id, payload);
  }

  // Reads the block of `id` and checks its bytes; returns where it came from, or nullopt on miss.
  static std::optional<Tier> ExpectBlock(BlockStore& store, uint64_t id, uint32_t payload = 40000,
                                         NamespaceId ns = 1) {
    absl::StatusOr<std::optional<PinnedBlock>> pinned = store.Acquire(Key(id, ns));
    EXPECT_TRUE(pinned.ok()) << pinned.status();
    if (!pinned.ok() || !pinned->has_value()) return std::nullopt;
    const std::vector<uint8_t> expected = Block(id, payload);
    const absl::Span<const uint8_t> got = (*pinned)->bytes();
    EXPECT_EQ(got.size(), expected.size());
    EXPECT_TRUE(std::equal(got.begin(), got.end(), expected.begin(), expected.end()))
        << "block " << id << " has wrong bytes";
    return (*pinned)->served_from();
  }

  std::unique_ptr<kvtier::testing::TempDir> dir_;
  BlockStoreOptions options_;
};

}  // namespace kvtier::store

#endif  // KVTIER_TESTS_UNIT_DAEMON_STORE_STORE_FIXTURE_H_
