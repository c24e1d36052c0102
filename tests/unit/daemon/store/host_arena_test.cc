// HostArena: anonymous and shared-memory arenas, reopening keeps contents and incarnation, and the
// limits (memory, RLIMIT_MEMLOCK) fail with errors a person can act on.
#include "daemon/store/host_arena.h"

#include <sys/resource.h>

#include <cstring>

#include "gtest/gtest.h"
#include "tests/testing/temp_dir.h"

namespace kvtier::store {
namespace {

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

}  // namespace
}  // namespace kvtier::store
