// The store when the drive holding its index fills up, or the index directory goes away: durable
// puts fail at once with the reason, volatile puts go on (the host tier drops blocks instead of
// writing them to disk), blocks already on disk stay readable, nothing acknowledged as durable is
// lost, and everything resumes by itself when space returns; a store opened on a full drive
// serves its disk blocks. The full drive is a small tmpfs holding only the index (root only; the
// tests that need it skip elsewhere).
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>

#include "daemon/store/block_store.h"
#include "gtest/gtest.h"
#include "tests/testing/small_file_system.h"
#include "tests/unit/daemon/store/store_fixture.h"

namespace kvtier::store {
namespace {

constexpr uint64_t kMiB = 1 << 20;

class BlockStoreFullDriveTest : public StoreFixture {
 protected:
  void SetUp() override {
    StoreFixture::SetUp();
    absl::StatusOr<std::unique_ptr<kvtier::testing::SmallFileSystem>> fs =
        kvtier::testing::SmallFileSystem::Mount(48 * kMiB);
    if (!fs.ok()) GTEST_SKIP() << fs.status();
    fs_ = *std::move(fs);
    options_.index_path = fs_->File("index");
    options_.index_min_free_bytes = 8 * kMiB;
    options_.index_reserve_bytes = kMiB;
  }

  // Stats() until the index's writability is `writable`, for at most 10 s.
  static bool AwaitWritable(BlockStore& store, bool writable) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      if (store.Stats().index_health.writable() == writable) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  static PutOptions Durable() {
    PutOptions o;
    o.durable = true;
    o.wait_durable = true;
    return o;
  }

  std::unique_ptr<kvtier::testing::SmallFileSystem> fs_;
};

TEST_F(BlockStoreFullDriveTest, DurablePutsFailAtOnceAndVolatileOnesGoOnUntilSpaceReturns) {
  std::unique_ptr<BlockStore> store = Open().value();
  for (uint64_t id = 0; id < 8; ++id) ASSERT_TRUE(store->Put(Key(id), Block(id), Durable()).ok());
  fs_->Fill(2 * kMiB);
  ASSERT_TRUE(AwaitWritable(*store, false));
  const StoreStats stats = store->Stats();
  EXPECT_EQ(stats.index_health.drive, index::DriveState::kShort);
  absl::Status refused = store->Put(Key(100), Block(100), Durable());
  EXPECT_TRUE(absl::IsResourceExhausted(refused)) << refused;
  EXPECT_NE(refused.message().find(fs_->File("index")), absl::string_view::npos) << refused;
  // Far more volatile blocks than the host tier holds: it makes room by dropping.
  for (uint64_t id = 1000; id < 1800; ++id) {
    ASSERT_TRUE(store->Put(Key(id), Block(id)).ok()) << id;
  }
  for (uint64_t id = 0; id < 8; ++id) EXPECT_TRUE(ExpectBlock(*store, id).has_value()) << id;
  fs_->Unfill();
  ASSERT_TRUE(AwaitWritable(*store, true));
  EXPECT_TRUE(store->Put(Key(101), Block(101), Durable()).ok());
  ASSERT_TRUE(store->Flush().ok());
  store.reset();
  store = Open().value();
  for (uint64_t id : {0, 1, 2, 3, 4, 5, 6, 7, 101}) {
    EXPECT_EQ(ExpectBlock(*store, id), Tier::kDisk) << id;
  }
}

TEST_F(BlockStoreFullDriveTest, OpensOnAFullDriveServesItsDiskBlocksAndResumes) {
  {
    std::unique_ptr<BlockStore> store = Open().value();
    for (uint64_t id = 0; id < 8; ++id) {
      ASSERT_TRUE(store->Put(Key(id), Block(id), Durable()).ok());
    }
  }
  fs_->Fill(0);
  absl::StatusOr<std::unique_ptr<BlockStore>> opened = Open();
  ASSERT_TRUE(opened.ok()) << opened.status();
  std::unique_ptr<BlockStore> store = *std::move(opened);
  EXPECT_TRUE(store->Stats().index_health.read_only);
  for (uint64_t id = 0; id < 8; ++id) EXPECT_EQ(ExpectBlock(*store, id), Tier::kDisk) << id;
  EXPECT_TRUE(absl::IsResourceExhausted(store->Put(Key(50), Block(50), Durable())));
  EXPECT_TRUE(store->Put(Key(51), Block(51)).ok());
  fs_->Unfill();
  ASSERT_TRUE(AwaitWritable(*store, true));
  EXPECT_TRUE(store->Put(Key(52), Block(52), Durable()).ok());
  store.reset();
  store = Open().value();
  for (uint64_t id : {0, 1, 2, 3, 4, 5, 6, 7, 52}) EXPECT_TRUE(ExpectBlock(*store, id)) << id;
}

TEST_F(StoreFixture, DurablePutsFailOnceTheIndexDirectoryIsRemoved) {
  std::unique_ptr<BlockStore> store = Open().value();
  PutOptions durable;
  durable.durable = true;
  durable.wait_durable = true;
  ASSERT_TRUE(store->Put(Key(1), Block(1), durable).ok());
  std::filesystem::remove_all(options_.index_path);
  absl::Status st = store->Put(Key(2), Block(2), durable);
  EXPECT_TRUE(absl::IsFailedPrecondition(st)) << st;
  EXPECT_NE(st.message().find("was removed"), absl::string_view::npos) << st;
  EXPECT_TRUE(store->Put(Key(3), Block(3)).ok());
  EXPECT_EQ(store->Stats().index_health.drive, index::DriveState::kLost);
}

TEST_F(StoreFixture, AStoreWhoseIndexDoesNotOpenFailsCleanly) {
  // The index path is a file: Open fails with the path in the message, and the half-built store
  // is destroyed without touching the index it never had (it used to sync a null index).
  ASSERT_TRUE(std::filesystem::create_directories(dir_->File("state")));
  options_.index_path = dir_->File("state/index");
  { std::ofstream(options_.index_path) << "not a directory"; }
  absl::StatusOr<std::unique_ptr<BlockStore>> store = Open();
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find(options_.index_path), absl::string_view::npos)
      << store.status();
}

}  // namespace
}  // namespace kvtier::store
