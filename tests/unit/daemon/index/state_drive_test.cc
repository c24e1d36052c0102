// Tests of StateDrive on a real directory, with the free space supplied by the test: the
// thresholds and their margin, the reserve file, waits for space, and a directory that is removed,
// replaced or made read-only (the last on a tmpfs of its own, root only).
#include "daemon/index/state_drive.h"

#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "gtest/gtest.h"
#include "tests/testing/small_file_system.h"
#include "tests/unit/daemon/index/index_test_util.h"

namespace kvtier::index {
namespace {

using ::kvtier::index::testing::TempDir;

constexpr uint64_t kMiB = 1 << 20;

struct Drive {
  std::atomic<uint64_t> free{1000 * kMiB};
  std::unique_ptr<StateDrive> drive;
};

std::unique_ptr<Drive> OpenDrive(const std::string& dir, uint64_t min_free, uint64_t reserve) {
  auto d = std::make_unique<Drive>();
  StateDriveOptions options;
  options.dir = dir;
  options.min_free_bytes = min_free;
  options.reserve_bytes = reserve;
  options.refresh_interval = absl::ZeroDuration();
  options.free_bytes = [raw = d.get()] { return raw->free.load(); };
  absl::StatusOr<std::unique_ptr<StateDrive>> drive = StateDrive::Open(options);
  EXPECT_TRUE(drive.ok()) << drive.status();
  if (drive.ok()) d->drive = *std::move(drive);
  return d;
}

uint64_t SizeOf(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

TEST(StateDriveTest, ShortBelowMinFreeAndWritableAgainAboveTheMargin) {
  TempDir dir;
  auto d = OpenDrive(dir.path(), 100 * kMiB, 0);
  ASSERT_NE(d->drive, nullptr);
  EXPECT_EQ(d->drive->Check().state, DriveState::kWritable);
  d->free = 99 * kMiB;
  DriveCondition c = d->drive->Check();
  EXPECT_EQ(c.state, DriveState::kShort);
  EXPECT_TRUE(absl::IsResourceExhausted(c.ToStatus()));
  EXPECT_NE(c.reason.find(dir.path()), std::string::npos) << c.reason;
  EXPECT_NE(c.reason.find("index.min_free"), std::string::npos) << c.reason;
  d->free = 101 * kMiB;  // above min_free, but inside the margin (an eighth of min_free)
  EXPECT_EQ(d->drive->Check().state, DriveState::kShort);
  d->free = 113 * kMiB;
  EXPECT_EQ(d->drive->Check().state, DriveState::kWritable);
  EXPECT_TRUE(d->drive->Check().reason.empty());
}

TEST(StateDriveTest, KeepsAReserveGivesItUpForAWaitAndTakesItBack) {
  TempDir dir;
  const std::string reserve = dir.path() + "/kvtier-space-reserve";
  auto d = OpenDrive(dir.path(), 10 * kMiB, 2 * kMiB);
  ASSERT_NE(d->drive, nullptr);
  EXPECT_EQ(SizeOf(reserve), 2 * kMiB);
  {
    StateDrive::SpaceWait wait(d->drive.get(), "writing a test file");
    EXPECT_TRUE(d->drive->stalled());
    EXPECT_FALSE(std::filesystem::exists(reserve));  // given up for the waiting write
    DriveCondition c = d->drive->Check();
    EXPECT_EQ(c.state, DriveState::kShort);
    EXPECT_TRUE(c.stalled);
    EXPECT_TRUE(wait.Pause(absl::Milliseconds(1)));
  }
  EXPECT_FALSE(d->drive->stalled());
  // Short until there is room for min_free, the margin and the reserve again.
  d->free = 12 * kMiB;
  EXPECT_EQ(d->drive->Check().state, DriveState::kShort);
  d->free = 14 * kMiB;
  EXPECT_EQ(d->drive->Check().state, DriveState::kWritable);
  EXPECT_EQ(SizeOf(reserve), 2 * kMiB);
}

TEST(StateDriveTest, AbandonEndsWaits) {
  TempDir dir;
  auto d = OpenDrive(dir.path(), 10 * kMiB, 0);
  ASSERT_NE(d->drive, nullptr);
  StateDrive::SpaceWait wait(d->drive.get(), "writing");
  d->drive->Abandon();
  EXPECT_FALSE(wait.Pause(absl::Milliseconds(1)));
}

TEST(StateDriveTest, RemovedDirectoryIsLostForGood) {
  TempDir dir;
  const std::string index = dir.Sub("index");
  ASSERT_TRUE(std::filesystem::create_directory(index));
  auto d = OpenDrive(index, 10 * kMiB, kMiB);
  ASSERT_NE(d->drive, nullptr);
  std::filesystem::remove_all(index);
  DriveCondition c = d->drive->Check();
  EXPECT_EQ(c.state, DriveState::kLost);
  EXPECT_TRUE(absl::IsFailedPrecondition(c.ToStatus()));
  EXPECT_NE(c.reason.find("was removed"), std::string::npos) << c.reason;
  ASSERT_TRUE(std::filesystem::create_directory(index));  // a new, empty directory: still lost
  EXPECT_EQ(d->drive->Check().state, DriveState::kLost);
}

TEST(StateDriveTest, ReplacedDirectoryIsLost) {
  TempDir dir;
  const std::string index = dir.Sub("index");
  ASSERT_TRUE(std::filesystem::create_directory(index));
  auto d = OpenDrive(index, 10 * kMiB, 0);
  ASSERT_NE(d->drive, nullptr);
  std::filesystem::rename(index, dir.Sub("moved"));
  ASSERT_TRUE(std::filesystem::create_directory(index));
  DriveCondition c = d->drive->Check();
  EXPECT_EQ(c.state, DriveState::kLost);
  EXPECT_NE(c.reason.find("replaced"), std::string::npos) << c.reason;
}

TEST(StateDriveTest, ReadOnlyFileSystemIsLostUntilWritable) {
  absl::StatusOr<std::unique_ptr<kvtier::testing::SmallFileSystem>> fs =
      kvtier::testing::SmallFileSystem::Mount(8 * kMiB);
  if (!fs.ok()) GTEST_SKIP() << fs.status();
  auto d = OpenDrive((*fs)->path(), kMiB, 0);
  ASSERT_NE(d->drive, nullptr);
  ASSERT_EQ(mount(nullptr, (*fs)->path().c_str(), nullptr, MS_REMOUNT | MS_RDONLY, nullptr), 0)
      << std::strerror(errno);
  DriveCondition c = d->drive->Check();
  EXPECT_EQ(c.state, DriveState::kLost);
  EXPECT_NE(c.reason.find("cannot be written"), std::string::npos) << c.reason;
  ASSERT_EQ(mount(nullptr, (*fs)->path().c_str(), nullptr, MS_REMOUNT, nullptr), 0);
  EXPECT_EQ(d->drive->Check().state, DriveState::kWritable);
}

}  // namespace
}  // namespace kvtier::index
