// HostArena: anonymous and shared-memory arenas, reopening keeps contents and incarnation, the
// limits (memory, RLIMIT_MEMLOCK) fail with errors a person can act on, reserving and locking log
// their progress, and a full tmpfs keeps none of a fresh arena's memory.
#include "daemon/store/host_arena.h"

#include <sys/resource.h>
#include <sys/stat.h>

#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/log_capture.h"
#include "tests/testing/small_file_system.h"
#include "tests/testing/temp_dir.h"

namespace kvtier::store {
namespace {

using ::kvtier::testing::LogCapture;
using ::kvtier::testing::ProgressFromTheStart;

TEST(HostArenaTest, AnonymousArenaIsWritable) {
  HostArenaOptions o;
  o.capacity_bytes = 8 << 20;
  o.pin = HostPinMode::kNone;
  auto arena = HostArena::Create(o).value();
  ASSERT_EQ(arena->size(), 8u << 20);
  std::memset(arena->data(), 0xAB, arena->size());
  EXPECT_EQ(arena->data()[arena->size() - 1], 0xAB);
  EXPECT_FALSE(arena->persistent());
  EXPECT_EQ(arena->pin_mechanism(), "none");
}

TEST(HostArenaTest, PersistentArenaKeepsContentsAcrossReopen) {
  auto dir = kvtier::testing::TempDir::Create().value();
  HostArenaOptions o;
  o.capacity_bytes = 4 << 20;
  o.pin = HostPinMode::kNone;
  o.shm_dir = dir.path();
  o.shm_name = "arena";
  uint64_t incarnation = 0;
  {
    auto arena = HostArena::Create(o).value();
    EXPECT_TRUE(arena->persistent());
    EXPECT_FALSE(arena->reopened());
    incarnation = arena->incarnation();
    std::memcpy(arena->data() + 12345, "kvtier", 6);
  }
  {
    auto arena = HostArena::Create(o).value();
    EXPECT_TRUE(arena->reopened());
    EXPECT_EQ(arena->incarnation(), incarnation);
    EXPECT_EQ(std::memcmp(arena->data() + 12345, "kvtier", 6), 0);
  }
  o.capacity_bytes = 8 << 20;  // another size: a fresh arena
  auto arena = HostArena::Create(o).value();
  EXPECT_FALSE(arena->reopened());
  EXPECT_NE(arena->incarnation(), incarnation);
}

TEST(HostArenaTest, BadOptionsAndLimits) {
  HostArenaOptions o;
  o.pin = HostPinMode::kNone;
  o.capacity_bytes = 1000;
  EXPECT_EQ(HostArena::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.capacity_bytes = 4 << 20;
  o.shm_name = "../escape";
  EXPECT_EQ(HostArena::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.shm_name.clear();
  const HostArena::MemoryLimit limit = HostArena::ReadMemoryLimit();
  ASSERT_GT(limit.bytes, 0u);
  o.capacity_bytes = (limit.bytes + (1 << 20)) / 4096 * 4096;
  absl::Status st = HostArena::Create(o).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(st.message().find("memory limit"), std::string::npos) << st;
}

TEST(HostArenaTest, MlockAboveTheLimitSaysHowToRaiseIt) {
  rlimit memlock{};
  ASSERT_EQ(getrlimit(RLIMIT_MEMLOCK, &memlock), 0);
  if (memlock.rlim_cur == RLIM_INFINITY || memlock.rlim_cur > (64ull << 20)) {
    GTEST_SKIP() << "RLIMIT_MEMLOCK is large here; nothing to exceed cheaply";
  }
  HostArenaOptions o;
  o.capacity_bytes = (memlock.rlim_cur + (1 << 20)) / 4096 * 4096 + 4096;
  o.pin = HostPinMode::kMlock;
  absl::Status st = HostArena::Create(o).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("RLIMIT_MEMLOCK"), std::string::npos) << st;
}

TEST(HostArenaTest, ReservingAPersistentArenaLogsProgress) {
  auto dir = kvtier::testing::TempDir::Create().value();
  HostArenaOptions o;
  o.capacity_bytes = 4 << 20;
  o.pin = HostPinMode::kNone;
  o.shm_dir = dir.path();
  o.shm_name = "arena";
  o.pin_chunk_bytes = 1 << 20;
  o.progress = ProgressFromTheStart();
  LogCapture log;
  ASSERT_TRUE(HostArena::Create(o).ok());
  // The header page and the slots: 4 MiB + 4 KiB, in five chunks.
  const std::string what = "host tier: reserving 4.0 MiB in " + dir.File("arena");
  const std::vector<std::string> lines = log.With(what);
  ASSERT_EQ(lines.size(), 6u);
  EXPECT_NE(lines[0].find(what + ": 1.0 MiB of 4.0 MiB (25%) after "), std::string::npos)
      << lines[0];
  EXPECT_NE(lines[4].find(what + ": 4.0 MiB of 4.0 MiB (100%) after "), std::string::npos)
      << lines[4];
  EXPECT_NE(lines[5].find(what + ": done, 4.0 MiB in "), std::string::npos) << lines[5];
}

TEST(HostArenaTest, LockingWithMlockLogsProgress) {
  constexpr uint64_t kCapacity = 4 << 20;
  rlimit memlock{};
  ASSERT_EQ(getrlimit(RLIMIT_MEMLOCK, &memlock), 0);
  if (memlock.rlim_cur != RLIM_INFINITY && memlock.rlim_cur < kCapacity) {
    GTEST_SKIP() << "RLIMIT_MEMLOCK is " << memlock.rlim_cur << " bytes, below the test's tier";
  }
  HostArenaOptions o;
  o.capacity_bytes = kCapacity;
  o.pin = HostPinMode::kMlock;
  o.pin_chunk_bytes = 1 << 20;
  o.progress = ProgressFromTheStart();
  LogCapture log;
  absl::StatusOr<std::unique_ptr<HostArena>> arena = HostArena::Create(o);
  ASSERT_TRUE(arena.ok()) << arena.status();
  EXPECT_EQ((*arena)->pin_mechanism(), "mlock");
  const std::string what = "host tier: locking 4.0 MiB with mlock";
  const std::vector<std::string> lines = log.With(what);
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_NE(lines[1].find(what + ": 2.0 MiB of 4.0 MiB (50%) after "), std::string::npos)
      << lines[1];
  EXPECT_NE(lines[4].find(what + ": done, 4.0 MiB in "), std::string::npos) << lines[4];
}

TEST(HostArenaTest, AFullTmpfsKeepsNoneOfAFreshArena) {
  absl::StatusOr<std::unique_ptr<kvtier::testing::SmallFileSystem>> fs =
      kvtier::testing::SmallFileSystem::Mount(4ull << 20);
  if (!fs.ok()) GTEST_SKIP() << fs.status();
  const uint64_t free_before = (*fs)->FreeBytes();
  HostArenaOptions o;
  o.capacity_bytes = 16 << 20;
  o.pin = HostPinMode::kNone;
  o.shm_dir = (*fs)->path();
  o.shm_name = "arena";
  o.pin_chunk_bytes = 1 << 20;
  o.progress = ProgressFromTheStart();
  LogCapture log;
  const absl::Status st = HostArena::Create(o).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
  EXPECT_NE(st.message().find("no room for the persistent host tier"), std::string::npos) << st;
  EXPECT_EQ(
      log.With("host tier: reserving 16.0 MiB in " + (*fs)->File("arena") + ": stopped at ").size(),
      1u);
  // The chunks reserved before the one that failed are given back.
  EXPECT_EQ((*fs)->FreeBytes(), free_before);
}

}  // namespace
}  // namespace kvtier::store
