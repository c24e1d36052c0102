// The index on a full or vanishing drive: RocksDB (Debian's build aborts the process after a
// failed write) must never meet a full drive. Writes are refused below min_free and resume when
// space returns; a write that meets ENOSPC anyway waits for space (or for the reserve) instead of
// failing; an index on a full drive opens read-only and is reopened for writing once there is
// room; a removed directory fails Sync and Write. The full drives are small tmpfs mounts (root
// only; the tests skip elsewhere).
#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "daemon/index/block_index.h"
#include "gtest/gtest.h"
#include "tests/testing/small_file_system.h"
#include "tests/unit/daemon/index/index_test_util.h"

namespace kvtier::index {
namespace {

using ::kvtier::index::testing::KeyFor;
using ::kvtier::index::testing::RecordFor;
using ::kvtier::testing::SmallFileSystem;

constexpr uint64_t kMiB = 1 << 20;

IndexBatch PutsOf(uint64_t first, uint64_t count) {
  IndexBatch batch;
  for (uint64_t id = first; id < first + count; ++id)
    batch.puts.push_back({KeyFor(id), RecordFor(id)});
  return batch;
}

std::unique_ptr<BlockIndex> Open(const std::string& path, uint64_t min_free, uint64_t reserve) {
  RocksDbIndexOptions options;
  options.path = path;
  options.block_cache_bytes = 1 << 20;
  options.min_free_bytes = min_free;
  options.reserve_bytes = reserve;
  absl::StatusOr<std::unique_ptr<BlockIndex>> index = OpenRocksDbBlockIndex(options);
  EXPECT_TRUE(index.ok()) << index.status();
  return index.ok() ? *std::move(index) : nullptr;
}

uint64_t Count(BlockIndex& index) {
  uint64_t n = 0;
  EXPECT_TRUE(index
                  .ForEachBlock([&](const BlockKey&, const BlockRecord&) {
                    ++n;
                    return true;
                  })
                  .ok());
  return n;
}

// Health() until `done` holds, for at most 10 s.
template <typename Done>
bool Await(BlockIndex& index, Done done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    if (done(index.Health())) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

std::unique_ptr<SmallFileSystem> MountOrSkip(uint64_t bytes, std::string* why) {
  absl::StatusOr<std::unique_ptr<SmallFileSystem>> fs = SmallFileSystem::Mount(bytes);
  if (!fs.ok()) {
    *why = std::string(fs.status().message());
    return nullptr;
  }
  return *std::move(fs);
}

TEST(RocksDbBlockIndexFullDriveTest, RefusesWritesBelowMinFreeAndResumesWhenSpaceReturns) {
  std::string why;
  std::unique_ptr<SmallFileSystem> fs = MountOrSkip(48 * kMiB, &why);
  if (fs == nullptr) GTEST_SKIP() << why;
  std::unique_ptr<BlockIndex> index = Open(fs->File("index"), 8 * kMiB, kMiB);
  ASSERT_NE(index, nullptr);
  ASSERT_TRUE(index->Write(PutsOf(0, 100)).ok());
  ASSERT_TRUE(index->Sync().ok());
  fs->Fill(4 * kMiB);
  ASSERT_TRUE(Await(*index, [](const IndexHealth& h) { return !h.writable(); }));
  const IndexHealth health = index->Health();
  EXPECT_EQ(health.drive, DriveState::kShort);
  EXPECT_NE(health.reason.find(fs->File("index")), std::string::npos) << health.reason;
  absl::Status refused = index->Write(PutsOf(100, 100));
  EXPECT_TRUE(absl::IsResourceExhausted(refused)) << refused;
  EXPECT_GE(index->stats().refused_writes, 1u);
  fs->Unfill();
  ASSERT_TRUE(Await(*index, [](const IndexHealth& h) { return h.writable(); }));
  EXPECT_TRUE(index->Write(PutsOf(100, 100)).ok());
  EXPECT_TRUE(index->Sync().ok());
  EXPECT_EQ(Count(*index), 200u);
}

TEST(RocksDbBlockIndexFullDriveTest, AWriteThatMeetsAFullDriveWaitsForSpaceInsteadOfFailing) {
  std::string why;
  std::unique_ptr<SmallFileSystem> fs = MountOrSkip(48 * kMiB, &why);
  if (fs == nullptr) GTEST_SKIP() << why;
  // min_free 0 and no reserve: nothing keeps the write from reaching the full drive.
  std::unique_ptr<BlockIndex> index = Open(fs->File("index"), 0, 0);
  ASSERT_NE(index, nullptr);
  ASSERT_TRUE(index->Write(PutsOf(0, 10)).ok());
  fs->Fill(0);
  std::atomic<bool> returned{false};
  absl::Status written;
  std::thread writer([&] {
    written = index->Write(PutsOf(10, 40000));  // ~4 MiB of log: cannot fit
    if (written.ok()) written = index->Sync();
    returned = true;
  });
  ASSERT_TRUE(Await(*index, [](const IndexHealth& h) { return h.stalled; }));
  EXPECT_FALSE(returned.load());
  EXPECT_FALSE(index->Health().writable());
  fs->Unfill();
  writer.join();
  EXPECT_TRUE(written.ok()) << written;
  EXPECT_EQ(Count(*index), 40010u);
  index.reset();
  index = Open(fs->File("index"), 0, 0);
  ASSERT_NE(index, nullptr);
  EXPECT_EQ(Count(*index), 40010u);
}

TEST(RocksDbBlockIndexFullDriveTest, TheReserveLetsAWriteUnderWayFinish) {
  std::string why;
  std::unique_ptr<SmallFileSystem> fs = MountOrSkip(48 * kMiB, &why);
  if (fs == nullptr) GTEST_SKIP() << why;
  std::unique_ptr<BlockIndex> index = Open(fs->File("index"), 0, 8 * kMiB);
  ASSERT_NE(index, nullptr);
  ASSERT_TRUE(index->Write(PutsOf(0, 10)).ok());
  fs->Fill(0);
  EXPECT_TRUE(index->Write(PutsOf(10, 20000)).ok());  // the reserve is given up for it
  EXPECT_TRUE(index->Sync().ok());
  EXPECT_FALSE(index->Health().writable());  // until there is room for the reserve again
  fs->Unfill();
  ASSERT_TRUE(Await(*index, [](const IndexHealth& h) { return h.writable(); }));
  EXPECT_TRUE(std::filesystem::exists(fs->File("index/kvtier-space-reserve")));
  EXPECT_EQ(Count(*index), 20010u);
}

TEST(RocksDbBlockIndexFullDriveTest, OpensReadOnlyOnAFullDriveAndReopensForWriting) {
  std::string why;
  std::unique_ptr<SmallFileSystem> fs = MountOrSkip(48 * kMiB, &why);
  if (fs == nullptr) GTEST_SKIP() << why;
  {
    std::unique_ptr<BlockIndex> index = Open(fs->File("index"), 4 * kMiB, 0);
    ASSERT_NE(index, nullptr);
    ASSERT_TRUE(index->Write(PutsOf(0, 500)).ok());
  }
  fs->Fill(0);
  std::unique_ptr<BlockIndex> index = Open(fs->File("index"), 4 * kMiB, 0);
  ASSERT_NE(index, nullptr);
  IndexHealth health = index->Health();
  EXPECT_TRUE(health.read_only);
  EXPECT_FALSE(health.writable());
  EXPECT_EQ(Count(*index), 500u);  // reads work
  absl::Status refused = index->Write(PutsOf(500, 1));
  EXPECT_TRUE(absl::IsResourceExhausted(refused)) << refused;
  fs->Unfill();
  ASSERT_TRUE(Await(*index, [](const IndexHealth& h) { return h.writable(); }));
  EXPECT_FALSE(index->Health().read_only);
  EXPECT_TRUE(index->Write(PutsOf(500, 1)).ok());
  EXPECT_TRUE(index->Sync().ok());
  EXPECT_EQ(Count(*index), 501u);
}

TEST(RocksDbBlockIndexFullDriveTest, ARemovedDirectoryFailsSyncAndWrites) {
  testing::TempDir dir;
  std::unique_ptr<BlockIndex> index = Open(dir.Sub("index"), kMiB, 0);
  ASSERT_NE(index, nullptr);
  ASSERT_TRUE(index->Write(PutsOf(0, 10)).ok());
  ASSERT_TRUE(index->Sync().ok());
  std::filesystem::remove_all(dir.Sub("index"));
  absl::Status synced = index->Sync();
  EXPECT_TRUE(absl::IsFailedPrecondition(synced)) << synced;
  EXPECT_NE(synced.message().find("was removed"), absl::string_view::npos) << synced;
  absl::Status written = index->Write(PutsOf(10, 1));
  EXPECT_TRUE(absl::IsFailedPrecondition(written)) << written;
  EXPECT_EQ(index->Health().drive, DriveState::kLost);
}

}  // namespace
}  // namespace kvtier::index
