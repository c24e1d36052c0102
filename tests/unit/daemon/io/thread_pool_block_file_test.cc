// What only the thread-pool engine does: at most `threads` requests run at once, and pread's
// short transfers at the end of a short file are finished and reported as an unexpected end of
// file.
#include "daemon/io/thread_pool_block_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/blocking_counter.h"
#include "gtest/gtest.h"
#include "tests/testing/aligned_buffer.h"
#include "tests/testing/temp_dir.h"

namespace kvtier::io {
namespace {

using ::kvtier::testing::AlignedBuffer;
using ::kvtier::testing::FillPattern;
using ::kvtier::testing::FirstPatternMismatch;
using ::kvtier::testing::TempDir;

constexpr uint32_t kBlock = 4096;

TEST(ThreadPoolBlockFileTest, RunsAtMostThreadsRequestsAtOnce) {
  absl::StatusOr<TempDir> dir = TempDir::Create();
  ASSERT_TRUE(dir.ok()) << dir.status();
  BlockFileOptions options;
  options.path = dir->File("blocks");
  options.size_bytes = 128 * kBlock;
  options.engine = IoEngine::kThreadPool;
  options.threads = 3;
  absl::StatusOr<std::unique_ptr<BlockFile>> file = OpenBlockFile(options);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->mechanism(), "thread-pool");
  constexpr int kRequests = 128;
  std::vector<AlignedBuffer> buffers;
  for (int i = 0; i < kRequests; ++i) buffers.emplace_back(kBlock);
  absl::BlockingCounter remaining(kRequests);
  std::atomic<int> failures{0};
  for (int i = 0; i < kRequests; ++i) {
    (*file)->Submit(IoRequest{IoKind::kWrite, uint64_t(i) * kBlock, buffers[i].data(), kBlock},
                    [&](absl::Status status) {
                      if (!status.ok()) failures.fetch_add(1);
                      remaining.DecrementCount();
                    });
  }
  remaining.Wait();
  EXPECT_EQ(failures.load(), 0);
  const BlockFileStats stats = (*file)->stats();
  EXPECT_GE(stats.max_in_flight, 1u);
  EXPECT_LE(stats.max_in_flight, 3u);
  EXPECT_EQ(stats.writes, uint64_t{kRequests});
}

TEST(ThreadPoolBlockFileTest, ReadPastEndOfShortFileIsDataLoss) {
  absl::StatusOr<TempDir> dir = TempDir::Create();
  ASSERT_TRUE(dir.ok()) << dir.status();
  for (bool direct : {false, true}) {
    SCOPED_TRACE(direct ? "O_DIRECT" : "buffered");
    const std::string path = dir->File(direct ? "short-direct" : "short");
    const int writer = open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0644);
    ASSERT_GE(writer, 0);
    std::vector<uint8_t> content(6000);
    FillPattern(absl::MakeSpan(content), 1);
    ASSERT_EQ(write(writer, content.data(), content.size()), 6000);
    close(writer);
    const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC | (direct ? O_DIRECT : 0));
    ASSERT_GE(fd, 0);
    BlockFileOptions options;
    options.path = path;
    options.size_bytes = 2 * kBlock;
    options.threads = 1;
    absl::StatusOr<std::unique_ptr<ThreadPoolBlockFile>> file =
        ThreadPoolBlockFile::Create(fd, options);
    ASSERT_TRUE(file.ok()) << file.status();
    AlignedBuffer buffer(2 * kBlock);
    const absl::Status status = (*file)->Read(0, buffer.span());
    EXPECT_TRUE(absl::IsDataLoss(status)) << status;
    EXPECT_NE(status.message().find("unexpected end of file"), absl::string_view::npos) << status;
    EXPECT_EQ(FirstPatternMismatch(buffer.span().subspan(0, 6000), 1), -1);
    EXPECT_EQ((*file)->stats().short_transfers, 1u);
    ASSERT_TRUE((*file)->Read(0, buffer.span().subspan(0, kBlock)).ok());
  }
}

}  // namespace
}  // namespace kvtier::io
