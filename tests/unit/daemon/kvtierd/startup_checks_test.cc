// kvtierd's tier sizing on a real file system: disk.capacity auto must not shrink on a restart
// because the tier's own preallocated file took the space it was computed from.
#include "daemon/kvtierd/startup_checks.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "daemon/config/config.h"
#include "daemon/store/disk_tier.h"
#include "gtest/gtest.h"
#include "tests/testing/temp_dir.h"

namespace kvtier::kvtierd {
namespace {

constexpr int64_t kTmpfsMagic = 0x01021994;

TEST(DiskTierBytesTest, AutoSizeCountsTheTiersOwnFileAsFree) {
  absl::StatusOr<testing::TempDir> made = testing::TempDir::Create();
  ASSERT_TRUE(made.ok()) << made.status();
  const testing::TempDir& dir = *made;
  struct statfs fs {};
  ASSERT_EQ(statfs(dir.path().c_str(), &fs), 0);
  if (fs.f_type == kTmpfsMagic) GTEST_SKIP() << dir.path() << " is tmpfs: the test would fill RAM";
  absl::StatusOr<Config> config =
      LoadConfig("", {"state_dir=" + dir.path(), "disk.capacity=auto", "disk.chunk=64MiB"});
  ASSERT_TRUE(config.ok()) << config.status();
  absl::StatusOr<uint64_t> first = DiskTierBytes(*config);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_GT(*first, 0u);

  // What the disk tier allocates at its first start.
  const std::string disk_dir = DiskTierDirs(*config)[0];
  ASSERT_EQ(mkdir(disk_dir.c_str(), 0700), 0);
  const std::string file = absl::StrCat(disk_dir, "/", store::DiskTierOptions{}.file_name);
  const int fd = open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(fallocate(fd, 0, 0, static_cast<off_t>(*first)), 0);
  close(fd);

  std::string note;
  absl::StatusOr<uint64_t> second = DiskTierBytes(*config, &note);
  unlink(file.c_str());
  ASSERT_TRUE(second.ok()) << second.status();
  // Other processes write to the same drive meanwhile: allow a few chunks either way, far less
  // than the quarter the old sizing lost.
  const uint64_t slack = 4 * config->disk_chunk;
  EXPECT_GE(*second + slack, *first) << note;
  EXPECT_LE(*second, *first + slack) << note;
  EXPECT_NE(note.find("own files"), std::string::npos) << note;
}

}  // namespace
}  // namespace kvtier::kvtierd
