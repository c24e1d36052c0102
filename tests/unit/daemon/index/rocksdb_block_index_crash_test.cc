// Crash tests of RocksDbBlockIndex: a child process (this binary, re-executed) writes records and
// acknowledges each one on a pipe once it is durable under its sync policy; the parent SIGKILLs it
// at a random moment, reopens the index and checks that every acknowledged record is there and
// that nothing stored is undecodable. Also: another process holding the index makes Open fail
// with Unavailable. The child is exec'd, never just forked, so that it starts without the parent's
// RocksDB threads. This file has its own main() for the child modes.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <unordered_set>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "daemon/index/block_index.h"
#include "daemon/index/block_record.h"
#include "gtest/gtest.h"
#include "tests/unit/daemon/index/index_test_util.h"

namespace kvtier::index {
namespace {

using ::kvtier::index::testing::KeyFor;
using ::kvtier::index::testing::RecordFor;
using ::kvtier::index::testing::TempDir;

constexpr char kWriterMode[] = "--crash-writer";
constexpr char kHolderMode[] = "--lock-holder";
// A child stops writing after this many records per cycle (and waits to be killed), which bounds
// the disk a fast policy uses.
constexpr uint64_t kMaxRecordsPerCycle = 100000;
constexpr uint64_t kIdsPerCycle = 1000000000;
// How long a child may take to open the index and acknowledge its first write.
constexpr int kStartTimeoutS = 120;

[[noreturn]] void ChildFail(const std::string& what) {
  std::fprintf(stderr, "crash test child: %s\n", what.c_str());
  std::fflush(stderr);
  _exit(2);
}

void WriteAll(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) ChildFail(absl::StrCat("pipe write: ", std::strerror(errno)));
    p += n;
    size -= static_cast<size_t>(n);
  }
}

// Child: writes batches of 1..32 records with ids from `first_id` on and acknowledges their ids
// (8 bytes each, one pipe write of at most 512 bytes, so atomic) once durable: after Write() for
// kAlways and kNone (which survives a process crash), after Sync() for kBatch.
[[noreturn]] void RunWriter(const std::string& path, SyncPolicy policy, int fd, uint64_t first_id) {
  RocksDbIndexOptions options;
  options.path = path;
  options.sync_policy = policy;
  options.block_cache_bytes = 8 << 20;
  absl::StatusOr<std::unique_ptr<BlockIndex>> index = OpenRocksDbBlockIndex(options);
  if (!index.ok()) ChildFail(index.status().ToString());
  std::mt19937_64 rng(first_id);
  std::vector<uint64_t> pending;
  uint64_t id = first_id;
  while (id < first_id + kMaxRecordsPerCycle) {
    IndexBatch batch;
    const uint64_t count = 1 + rng() % 32;
    for (uint64_t i = 0; i < count; ++i, ++id) {
      batch.puts.push_back({KeyFor(id), RecordFor(id)});
      pending.push_back(id);
    }
    absl::Status status = (*index)->Write(batch);
    if (!status.ok()) ChildFail(status.ToString());
    if (policy == SyncPolicy::kBatch) {
      if (pending.size() < 32) continue;
      status = (*index)->Sync();
      if (!status.ok()) ChildFail(status.ToString());
    }
    WriteAll(fd, pending.data(), pending.size() * sizeof(uint64_t));
    pending.clear();
  }
  while (true) pause();
}

// Child: opens the index, writes one byte, then waits to be killed.
[[noreturn]] void RunHolder(const std::string& path, int fd) {
  RocksDbIndexOptions options;
  options.path = path;
  absl::StatusOr<std::unique_ptr<BlockIndex>> index = OpenRocksDbBlockIndex(options);
  if (!index.ok()) ChildFail(index.status().ToString());
  WriteAll(fd, "R", 1);
  while (true) pause();
}

// A child process with a pipe from it.
struct Child {
  pid_t pid = -1;
  int read_fd = -1;
};

// Starts this binary as `args` with the write end of a new pipe as the last argument. Between
// fork and exec only async-signal-safe calls.
Child Spawn(std::vector<std::string> args) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    ADD_FAILURE() << "pipe2: " << std::strerror(errno);
    return {};
  }
  args.insert(args.begin(), "/proc/self/exe");
  args.push_back(absl::StrCat(fds[1]));
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    if (fcntl(fds[1], F_SETFD, 0) != 0) _exit(126);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(fds[1]);
  if (pid < 0) {
    ADD_FAILURE() << "fork: " << std::strerror(errno);
    close(fds[0]);
    return {};
  }
  return {pid, fds[0]};
}

// Reads what is available from `fd` into `bytes` within `timeout_ms`. False at end of file.
bool ReadSome(int fd, int timeout_ms, std::string* bytes) {
  pollfd p{fd, POLLIN, 0};
  int ready = poll(&p, 1, timeout_ms);
  if (ready < 0 && errno != EINTR) {
    ADD_FAILURE() << "poll: " << std::strerror(errno);
    return false;
  }
  if (ready <= 0) return true;
  char buffer[4096];
  ssize_t n = read(fd, buffer, sizeof(buffer));
  if (n < 0 && errno == EINTR) return true;
  if (n <= 0) return false;
  bytes->append(buffer, static_cast<size_t>(n));
  return true;
}

std::string DescribeExit(int wait_status) {
  if (WIFEXITED(wait_status)) return absl::StrCat("exited with status ", WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) return absl::StrCat("killed by signal ", WTERMSIG(wait_status));
  return "stopped";
}

void KillAndReap(Child& child, std::string* bytes, int* wait_status) {
  kill(child.pid, SIGKILL);
  while (ReadSome(child.read_fd, 1000, bytes)) {
  }
  close(child.read_fd);
  while (waitpid(child.pid, wait_status, 0) < 0 && errno == EINTR) {
  }
}

// Reopens the index and checks it: every stored entry decodes and is the record of its id, and
// every id in `acknowledged` is stored.
void VerifyIndex(const std::string& path, const std::unordered_set<uint64_t>& acknowledged,
                 int cycle) {
  RocksDbIndexOptions options;
  options.path = path;
  absl::StatusOr<std::unique_ptr<BlockIndex>> index = OpenRocksDbBlockIndex(options);
  ASSERT_TRUE(index.ok()) << "cycle " << cycle << ": " << index.status();
  std::unordered_set<uint64_t> stored;
  size_t mismatches = 0;
  absl::Status status = (*index)->ForEachBlock([&](const BlockKey& key, const BlockRecord& record) {
    const uint64_t id = record.offset;
    if (!(key == KeyFor(id) && record == RecordFor(id))) ++mismatches;
    stored.insert(id);
    return true;
  });
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(mismatches, 0u) << "cycle " << cycle;
  EXPECT_EQ((*index)->stats().decode_errors, 0u) << "cycle " << cycle;
  size_t lost = 0;
  for (uint64_t id : acknowledged) lost += stored.count(id) == 0 ? 1 : 0;
  EXPECT_EQ(lost, 0u) << "cycle " << cycle << ": " << lost << " of " << acknowledged.size()
                      << " acknowledged records are missing (" << stored.size() << " stored)";
  // MultiGet agrees with the scan.
  std::vector<BlockKey> keys;
  for (uint64_t id : acknowledged) keys.push_back(KeyFor(id));
  absl::StatusOr<std::vector<std::optional<BlockRecord>>> got = (*index)->MultiGet(keys);
  ASSERT_TRUE(got.ok()) << got.status();
  size_t missing = 0;
  for (const std::optional<BlockRecord>& record : *got) missing += record.has_value() ? 0 : 1;
  EXPECT_EQ(missing, 0u) << "cycle " << cycle;
}

void RunCrashCycles(SyncPolicy policy, int cycles) {
  TempDir dir;
  const std::string path = dir.Sub("index");
  std::unordered_set<uint64_t> acknowledged;
  std::mt19937 rng(1234 + static_cast<int>(policy));
  for (int cycle = 0; cycle < cycles; ++cycle) {
    Child child = Spawn({kWriterMode, path, absl::StrCat(static_cast<int>(policy)),
                         absl::StrCat(cycle * kIdsPerCycle)});
    ASSERT_GE(child.pid, 0);
    // Wait for the first acknowledgement (the child is writing), then let it run for a random
    // 0-300 ms before the kill: early kills hit the first writes, late ones a long WAL. The wait
    // is bounded only so that a hung child cannot hang the test.
    std::string bytes;
    bool open = true;
    for (int waited_s = 0; open && bytes.size() < sizeof(uint64_t) && waited_s < kStartTimeoutS;
         ++waited_s) {
      open = ReadSome(child.read_fd, 1000, &bytes);
    }
    const int delay_ms = static_cast<int>(rng() % 301);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(delay_ms);
    while (open && std::chrono::steady_clock::now() < deadline) {
      open = ReadSome(child.read_fd, 5, &bytes);
    }
    int wait_status = 0;
    KillAndReap(child, &bytes, &wait_status);
    ASSERT_TRUE(WIFSIGNALED(wait_status) && WTERMSIG(wait_status) == SIGKILL)
        << "cycle " << cycle << ": the writer " << DescribeExit(wait_status);
    const size_t count = bytes.size() / sizeof(uint64_t);
    ASSERT_GT(count, 0u) << "cycle " << cycle << ": nothing acknowledged";
    for (size_t i = 0; i < count; ++i) {
      uint64_t id;
      std::memcpy(&id, bytes.data() + i * sizeof(id), sizeof(id));
      acknowledged.insert(id);
    }
    VerifyIndex(path, acknowledged, cycle);
    if (::testing::Test::HasFatalFailure()) return;
    std::printf("cycle %d: killed after %d ms, %zu records acknowledged (%zu in all)\n", cycle,
                delay_ms, count, acknowledged.size());
  }
}

TEST(RocksDbBlockIndexCrashTest, AlwaysPolicyKeepsEveryAcknowledgedWrite) {
  RunCrashCycles(SyncPolicy::kAlways, 10);
}

TEST(RocksDbBlockIndexCrashTest, BatchPolicyKeepsEverySyncedWrite) {
  RunCrashCycles(SyncPolicy::kBatch, 10);
}

// kNone promises survival of a process crash (not of a machine crash): the WAL is in the OS.
TEST(RocksDbBlockIndexCrashTest, NonePolicySurvivesProcessCrash) {
  RunCrashCycles(SyncPolicy::kNone, 5);
}

TEST(RocksDbBlockIndexCrashTest, IndexHeldByAnotherProcessIsUnavailable) {
  TempDir dir;
  Child child = Spawn({kHolderMode, dir.path()});
  ASSERT_GE(child.pid, 0);
  std::string bytes;
  bool open = true;
  for (int waited_s = 0; open && bytes.empty() && waited_s < kStartTimeoutS; ++waited_s) {
    open = ReadSome(child.read_fd, 1000, &bytes);
  }
  if (bytes != "R") {
    int wait_status = 0;
    KillAndReap(child, &bytes, &wait_status);
    FAIL() << "the holder did not open the index; it " << DescribeExit(wait_status);
  }

  RocksDbIndexOptions options;
  options.path = dir.path();
  absl::Status status = OpenRocksDbBlockIndex(options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_NE(status.message().find(absl::StrCat("another kvtierd holds the index at ", dir.path())),
            std::string::npos)
      << status;

  int wait_status = 0;
  KillAndReap(child, &bytes, &wait_status);
  // The lock dies with its process.
  EXPECT_TRUE(OpenRocksDbBlockIndex(options).ok());
}

}  // namespace
}  // namespace kvtier::index

int main(int argc, char** argv) {
  using kvtier::index::SyncPolicy;
  if (argc == 6 && std::strcmp(argv[1], kvtier::index::kWriterMode) == 0) {
    int policy = 0;
    int fd = 0;
    uint64_t first_id = 0;
    if (!absl::SimpleAtoi(argv[3], &policy) || !absl::SimpleAtoi(argv[4], &first_id) ||
        !absl::SimpleAtoi(argv[5], &fd)) {
      kvtier::index::ChildFail("bad arguments");
    }
    kvtier::index::RunWriter(argv[2], static_cast<SyncPolicy>(policy), fd, first_id);
  }
  if (argc == 4 && std::strcmp(argv[1], kvtier::index::kHolderMode) == 0) {
    int fd = 0;
    if (!absl::SimpleAtoi(argv[3], &fd)) kvtier::index::ChildFail("bad arguments");
    kvtier::index::RunHolder(argv[2], fd);
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
