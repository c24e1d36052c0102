// SharedMemoryPool::Create's failures: the status code says what went wrong (a directory that does
// not exist is NotFound, as for every other file the libraries open) and the message names the
// system call, the path and the errno.
#include "kvtier/pools.h"

#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/temp_dir.h"

namespace kvtier {
namespace {

using ::testing::HasSubstr;

TEST(SharedMemoryPoolTest, CreatesAndMapsTheFile) {
  absl::StatusOr<testing::TempDir> dir = testing::TempDir::Create();
  ASSERT_TRUE(dir.ok()) << dir.status();
  const std::string path = dir->File("pool");
  absl::StatusOr<std::unique_ptr<SharedMemoryPool>> pool =
      SharedMemoryPool::Create(path, "k0", 4, 4096);
  ASSERT_TRUE(pool.ok()) << pool.status();
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), 4u * 4096u);
  EXPECT_EQ(st.st_mode & 0777, 0660u);
  (*pool)->slot(3)[4095] = 7;  // the whole mapping is writable
}

TEST(SharedMemoryPoolTest, AMissingDirectoryIsNotFound) {
  absl::StatusOr<testing::TempDir> dir = testing::TempDir::Create();
  ASSERT_TRUE(dir.ok()) << dir.status();
  const std::string path = dir->File("no-such-dir/pool");
  absl::StatusOr<std::unique_ptr<SharedMemoryPool>> pool =
      SharedMemoryPool::Create(path, "k0", 1, 4096);
  ASSERT_FALSE(pool.ok());
  EXPECT_EQ(pool.status().code(), absl::StatusCode::kNotFound) << pool.status();
  EXPECT_EQ(pool.status().message(), "open '" + path + "': No such file or directory (ENOENT)");
}

TEST(SharedMemoryPoolTest, AnUnwritableDirectoryIsPermissionDenied) {
  if (::geteuid() == 0) GTEST_SKIP() << "root may write into any directory";
  absl::StatusOr<testing::TempDir> dir = testing::TempDir::Create();
  ASSERT_TRUE(dir.ok()) << dir.status();
  ASSERT_EQ(::chmod(dir->path().c_str(), 0500), 0);
  absl::StatusOr<std::unique_ptr<SharedMemoryPool>> pool =
      SharedMemoryPool::Create(dir->File("pool"), "k0", 1, 4096);
  ::chmod(dir->path().c_str(), 0700);
  ASSERT_FALSE(pool.ok());
  EXPECT_EQ(pool.status().code(), absl::StatusCode::kPermissionDenied) << pool.status();
  EXPECT_THAT(pool.status().message(), HasSubstr("(EACCES)"));
}

}  // namespace
}  // namespace kvtier
