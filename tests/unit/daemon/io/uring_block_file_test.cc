// What only the io_uring engine does: registered (fixed) buffers and file, progress lines of the
// buffers' registration, the queue-depth bound on requests in the kernel, short transfers at the
// end of a short file, and wake-ups of an idle ring. Skips where the kernel refuses a ring.
#include "daemon/io/uring_block_file.h"

#include <fcntl.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/blocking_counter.h"
#include "gtest/gtest.h"
#include "tests/testing/aligned_buffer.h"
#include "tests/testing/log_capture.h"
#include "tests/testing/temp_dir.h"

namespace kvtier::io {
namespace {

using ::kvtier::testing::AlignedBuffer;
using ::kvtier::testing::FillPattern;
using ::kvtier::testing::FirstPatternMismatch;
using ::kvtier::testing::LogCapture;
using ::kvtier::testing::ProgressFromTheStart;
using ::kvtier::testing::TempDir;

constexpr uint32_t kBlock = 4096;

class UringBlockFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<TempDir> dir = TempDir::Create();
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_ = std::make_unique<TempDir>(std::move(dir).value());
  }

  // Opens a preallocated file with the io_uring engine; skips the test when the kernel refuses.
  std::unique_ptr<UringBlockFile> Open(BlockFileOptions options) {
    options.path = dir_->File("blocks");
    options.engine = IoEngine::kUring;
    absl::StatusOr<std::unique_ptr<BlockFile>> file = OpenBlockFile(options);
    if (absl::IsUnimplemented(file.status())) return nullptr;
    EXPECT_TRUE(file.ok()) << file.status();
    if (!file.ok()) return nullptr;
    return std::unique_ptr<UringBlockFile>(dynamic_cast<UringBlockFile*>(file->release()));
  }

  // A file of `size` bytes holding `content_bytes` of pattern 1, opened by hand (not
  // preallocated to size) so that reads can run past its end.
  std::unique_ptr<UringBlockFile> OpenShortFile(uint64_t size, uint64_t content_bytes,
                                                bool direct) {
    const std::string path = dir_->File("short");
    const int writer = open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0644);
    EXPECT_GE(writer, 0);
    std::vector<uint8_t> content(content_bytes);
    FillPattern(absl::MakeSpan(content), 1);
    EXPECT_EQ(write(writer, content.data(), content.size()), static_cast<ssize_t>(content_bytes));
    close(writer);
    const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC | (direct ? O_DIRECT : 0));
    EXPECT_GE(fd, 0);
    BlockFileOptions options;
    options.path = path;
    options.size_bytes = size;
    options.queue_depth = 4;
    absl::StatusOr<std::unique_ptr<UringBlockFile>> file = UringBlockFile::Create(fd, options);
    if (!file.ok()) {
      close(fd);
      EXPECT_TRUE(absl::IsUnimplemented(file.status())) << file.status();
      return nullptr;
    }
    return std::move(file).value();
  }

  std::unique_ptr<TempDir> dir_;
};

TEST_F(UringBlockFileTest, UsesRegisteredBuffersInsideTheRegionsOnly) {
  AlignedBuffer memory(12 * kBlock);
  BlockFileOptions options;
  options.size_bytes = 16 * kBlock;
  options.registered_buffers = {memory.span().subspan(0, 8 * kBlock)};  // the "host pool"
  std::unique_ptr<UringBlockFile> file = Open(options);
  if (file == nullptr) GTEST_SKIP() << "the kernel refuses io_uring";
  EXPECT_TRUE(file->file_registered());
  if (!file->buffers_registered()) GTEST_SKIP() << "buffer registration refused (RLIMIT_MEMLOCK?)";

  absl::Span<uint8_t> inside = memory.span().subspan(2 * kBlock, 2 * kBlock);
  FillPattern(inside, 77);
  ASSERT_TRUE(file->Write(0, inside).ok());
  std::fill(inside.begin(), inside.end(), 0);
  ASSERT_TRUE(file->Read(0, inside).ok());
  EXPECT_EQ(FirstPatternMismatch(inside, 77), -1);
  EXPECT_EQ(file->stats().fixed_buffer_ops, 2u);

  // Straddling the region's end, past it, and in unrelated memory: plain read/write, same data.
  absl::Span<uint8_t> straddling = memory.span().subspan(7 * kBlock, 2 * kBlock);
  absl::Span<uint8_t> past = memory.span().subspan(9 * kBlock, 2 * kBlock);
  AlignedBuffer unrelated(2 * kBlock);
  for (absl::Span<uint8_t> buffer : {straddling, past, unrelated.span()}) {
    ASSERT_TRUE(file->Read(0, buffer).ok());
    EXPECT_EQ(FirstPatternMismatch(buffer, 77), -1);
    ASSERT_TRUE(file->Write(4 * kBlock, buffer).ok());
  }
  const BlockFileStats stats = file->stats();
  EXPECT_EQ(stats.fixed_buffer_ops, 2u);
  EXPECT_EQ(stats.reads, 4u);
  EXPECT_EQ(stats.writes, 4u);
}

TEST_F(UringBlockFileTest, RegistersEachRegionWithProgressLines) {
  utsname uts{};
  int major = 0, minor = 0;
  ASSERT_EQ(uname(&uts), 0);
  ASSERT_EQ(std::sscanf(uts.release, "%d.%d", &major, &minor), 2) << uts.release;
  if (major < 5 || (major == 5 && minor < 19)) {
    GTEST_SKIP() << "Linux " << uts.release << " has no sparse buffer tables (5.19)";
  }
  AlignedBuffer first(8 * kBlock);
  AlignedBuffer second(8 * kBlock);
  BlockFileOptions options;
  options.size_bytes = 16 * kBlock;
  options.registered_buffers = {first.span(), second.span()};
  options.progress = ProgressFromTheStart();
  LogCapture log;
  std::unique_ptr<UringBlockFile> file = Open(options);
  if (file == nullptr) GTEST_SKIP() << "the kernel refuses io_uring";
  if (!file->buffers_registered()) GTEST_SKIP() << "buffer registration refused (RLIMIT_MEMLOCK?)";
  const std::string what = "disk tier: registering 64.0 KiB of I/O buffers with io_uring for '" +
                           dir_->File("blocks") + "'";
  const std::vector<std::string> lines = log.With(what);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_NE(lines[0].find(what + ": 32.0 KiB of 64.0 KiB (50%) after "), std::string::npos)
      << lines[0];
  EXPECT_NE(lines[1].find(what + ": 64.0 KiB of 64.0 KiB (100%) after "), std::string::npos)
      << lines[1];
  EXPECT_NE(lines[2].find(what + ": done, 64.0 KiB in "), std::string::npos) << lines[2];
  // Both regions serve fixed-buffer transfers.
  FillPattern(first.span(), 3);
  ASSERT_TRUE(file->Write(0, first.span()).ok());
  ASSERT_TRUE(file->Read(0, second.span()).ok());
  EXPECT_EQ(FirstPatternMismatch(second.span(), 3), -1);
  EXPECT_EQ(file->stats().fixed_buffer_ops, 2u);
}

// A request of more pages than the device takes segments goes through plain read/write (see
// uring_block_file.cc); smaller ones in the same region use the fixed buffer.
TEST_F(UringBlockFileTest, LargeRequestsSkipFixedBuffersWhereTheDeviceWouldSplitThem) {
  constexpr uint32_t kLarge = 1331200;  // 325 pages
  AlignedBuffer memory(2 * kLarge);
  BlockFileOptions options;
  options.size_bytes = 2 * kLarge;
  options.registered_buffers = {memory.span()};
  std::unique_ptr<UringBlockFile> file = Open(options);
  if (file == nullptr) GTEST_SKIP() << "the kernel refuses io_uring";
  if (!file->buffers_registered()) GTEST_SKIP() << "buffer registration refused (RLIMIT_MEMLOCK?)";
  FillPattern(memory.span().subspan(0, kLarge), 5);
  ASSERT_TRUE(file->Write(0, memory.span().subspan(0, kLarge)).ok());
  ASSERT_TRUE(file->Read(kLarge, memory.span().subspan(kLarge, kBlock)).ok());
  ASSERT_TRUE(file->Read(0, memory.span().subspan(kLarge, kLarge)).ok());
  EXPECT_EQ(FirstPatternMismatch(memory.span().subspan(kLarge, kLarge), 5), -1);
  const uint64_t expected_fixed = file->max_fixed_buffer_bytes() >= kLarge ? 3 : 1;
  EXPECT_EQ(file->stats().fixed_buffer_ops, expected_fixed)
      << "max_fixed_buffer_bytes " << file->max_fixed_buffer_bytes();
}

TEST_F(UringBlockFileTest, NoRegisteredBuffersMeansNoFixedOps) {
  BlockFileOptions options;
  options.size_bytes = 4 * kBlock;
  std::unique_ptr<UringBlockFile> file = Open(options);
  if (file == nullptr) GTEST_SKIP() << "the kernel refuses io_uring";
  EXPECT_FALSE(file->buffers_registered());
  AlignedBuffer block(kBlock);
  ASSERT_TRUE(file->Write(0, block.span()).ok());
  EXPECT_EQ(file->stats().fixed_buffer_ops, 0u);
  EXPECT_TRUE(file->direct_io());
}

TEST_F(UringBlockFileTest, RespectsQueueDepth) {
  for (uint32_t depth : {1u, 4u}) {
    SCOPED_TRACE(depth);
    BlockFileOptions options;
    options.size_bytes = 256 * kBlock;
    options.queue_depth = depth;
    std::unique_ptr<UringBlockFile> file = Open(options);
    if (file == nullptr) GTEST_SKIP() << "the kernel refuses io_uring";
    constexpr int kRequests = 200;
    std::vector<AlignedBuffer> buffers;
    for (int i = 0; i < kRequests; ++i) buffers.emplace_back(kBlock);
    absl::BlockingCounter remaining(kRequests);
    std::atomic<int> failures{0};
    for (int i = 0; i < kRequests; ++i) {
      file->Submit(IoRequest{IoKind::kWrite, uint64_t(i) * kBlock, buffers[i].data(), kBlock},
                   [&](absl::Status status) {
                     if (!status.ok()) failures.fetch_add(1);
                     remaining.DecrementCount();
                   });
    }
    remaining.Wait();
    EXPECT_EQ(failures.load(), 0);
    const BlockFileStats stats = file->stats();
    EXPECT_GE(stats.max_in_flight, 1u);
    EXPECT_LE(stats.max_in_flight, depth);
    EXPECT_EQ(stats.writes, uint64_t{kRequests});
  }
}

// Buffered I/O: the kernel returns the bytes up to the end of file (a short transfer), the engine
// asks for the rest, gets 0 bytes, and reports an unexpected end of file.
TEST_F(UringBlockFileTest, BufferedReadPastEndOfFileIsDataLoss) {
  std::unique_ptr<UringBlockFile> file = OpenShortFile(2 * kBlock, 6000, /*direct=*/false);
  if (file == nullptr) GTEST_SKIP() << "the kernel refuses io_uring";
  EXPECT_FALSE(file->direct_io());
  AlignedBuffer buffer(2 * kBlock);
  const absl::Status status = file->Read(0, buffer.span());
  EXPECT_TRUE(absl::IsDataLoss(status)) << status;
  EXPECT_NE(status.message().find("unexpected end of file"), absl::string_view::npos) << status;
  EXPECT_NE(status.message().find("after 6000 bytes"), absl::string_view::npos) << status;
  EXPECT_EQ(FirstPatternMismatch(buffer.span().subspan(0, 6000), 1), -1);
  const BlockFileStats stats = file->stats();
  EXPECT_EQ(stats.short_transfers, 1u);
  EXPECT_EQ(stats.read_errors, 1u);
  EXPECT_EQ(stats.in_flight, 0u);

  // The first block lies wholly inside the file and still reads.
  ASSERT_TRUE(file->Read(0, buffer.span().subspan(0, kBlock)).ok());
}

// With O_DIRECT the end of file stops a read off a 512-byte boundary: reported as end of file
// instead of resubmitting a misaligned rest (which the kernel would refuse with EINVAL).
TEST_F(UringBlockFileTest, DirectReadPastEndOfFileIsDataLoss) {
  for (uint64_t content : {uint64_t{6000}, uint64_t{6144}}) {
    SCOPED_TRACE(content);
    std::unique_ptr<UringBlockFile> file = OpenShortFile(2 * kBlock, content, /*direct=*/true);
    if (file == nullptr) GTEST_SKIP() << "the kernel refuses io_uring";
    if (!file->direct_io()) GTEST_SKIP() << "no O_DIRECT here";
    AlignedBuffer buffer(2 * kBlock);
    const absl::Status status = file->Read(0, buffer.span());
    EXPECT_TRUE(absl::IsDataLoss(status)) << status;
    EXPECT_NE(status.message().find("unexpected end of file"), absl::string_view::npos);
    EXPECT_GE(file->stats().short_transfers, 1u);
  }
}

// Many requests, each submitted after the ring went idle: a lost wake-up would hang here.
TEST_F(UringBlockFileTest, WakesUpForEachRequestAfterIdling) {
  BlockFileOptions options;
  options.size_bytes = 8 * kBlock;
  std::unique_ptr<UringBlockFile> file = Open(options);
  if (file == nullptr) GTEST_SKIP() << "the kernel refuses io_uring";
  AlignedBuffer block(kBlock);
  for (int i = 0; i < 500; ++i) {
    FillPattern(block.span(), i);
    ASSERT_TRUE(file->Write(uint64_t(i % 8) * kBlock, block.span()).ok());
    if (i % 50 == 0) usleep(2000);
  }
  ASSERT_TRUE(file->Read(uint64_t(499 % 8) * kBlock, block.span()).ok());
  EXPECT_EQ(FirstPatternMismatch(block.span(), 499), -1);
}

}  // namespace
}  // namespace kvtier::io
