// OpenBlockFile (option validation, creation, preallocation and its progress lines, a drive too
// small for the file, engine choice), the errno-to-status mapping, request validation, and the
// blocking helpers.
#include "daemon/io/block_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "gtest/gtest.h"
#include "tests/testing/aligned_buffer.h"
#include "tests/testing/log_capture.h"
#include "tests/testing/small_file_system.h"
#include "tests/testing/temp_dir.h"

namespace kvtier::io {
namespace {

using ::kvtier::testing::AlignedBuffer;
using ::kvtier::testing::FillPattern;
using ::kvtier::testing::FirstPatternMismatch;
using ::kvtier::testing::LogCapture;
using ::kvtier::testing::ProgressFromTheStart;
using ::kvtier::testing::SmallFileSystem;
using ::kvtier::testing::TempDir;

class OpenBlockFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<TempDir> dir = TempDir::Create();
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_ = std::make_unique<TempDir>(std::move(dir).value());
  }

  BlockFileOptions Options(uint64_t size) const {
    BlockFileOptions options;
    options.path = dir_->File("blocks");
    options.size_bytes = size;
    options.engine = IoEngine::kThreadPool;
    return options;
  }

  std::unique_ptr<TempDir> dir_;
};

TEST_F(OpenBlockFileTest, RejectsBadOptionsNamingFieldAndValue) {
  struct Case {
    void (*mutate)(BlockFileOptions&);
    const char* message;
  };
  const Case cases[] = {
      {[](BlockFileOptions& o) { o.alignment = 1000; }, "alignment 1000"},
      {[](BlockFileOptions& o) { o.alignment = 256; }, "alignment 256"},
      {[](BlockFileOptions& o) { o.size_bytes = 0; }, "size_bytes 0"},
      {[](BlockFileOptions& o) { o.size_bytes = 4097; }, "size_bytes 4097"},
      {[](BlockFileOptions& o) { o.queue_depth = 0; }, "queue_depth 0"},
      {[](BlockFileOptions& o) { o.queue_depth = 4097; }, "queue_depth 4097"},
      {[](BlockFileOptions& o) { o.threads = 0; }, "threads 0"},
      {[](BlockFileOptions& o) { o.threads = 257; }, "threads 257"},
      {[](BlockFileOptions& o) { o.path.clear(); }, "path is empty"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.message);
    BlockFileOptions options = Options(1 << 20);
    c.mutate(options);
    const absl::StatusOr<std::unique_ptr<BlockFile>> file = OpenBlockFile(options);
    EXPECT_TRUE(absl::IsInvalidArgument(file.status())) << file.status();
    EXPECT_NE(file.status().message().find(c.message), absl::string_view::npos) << file.status();
    struct stat st;
    EXPECT_NE(stat(dir_->File("blocks").c_str(), &st), 0) << "no file is created";
  }
  BlockFileOptions edge = Options(512);
  edge.alignment = 512;
  edge.queue_depth = 4096;
  edge.threads = 256;
  EXPECT_TRUE(ValidateBlockFileOptions(edge).ok());
}

TEST_F(OpenBlockFileTest, CreatesAndPreallocates) {
  constexpr uint64_t kSize = 64ull << 20;
  absl::StatusOr<std::unique_ptr<BlockFile>> file = OpenBlockFile(Options(kSize));
  ASSERT_TRUE(file.ok()) << file.status();
  struct stat st;
  ASSERT_EQ(stat(dir_->File("blocks").c_str(), &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), kSize);
  EXPECT_GE(static_cast<uint64_t>(st.st_blocks) * 512, kSize) << "blocks are allocated";
  EXPECT_EQ((*file)->size_bytes(), kSize);
}

TEST_F(OpenBlockFileTest, PreallocationLogsProgressNamingTheFileAndSizes) {
  BlockFileOptions options = Options(4ull << 20);
  options.preallocate_chunk_bytes = 1 << 20;
  options.progress = ProgressFromTheStart();
  LogCapture log;
  absl::StatusOr<std::unique_ptr<BlockFile>> file = OpenBlockFile(options);
  ASSERT_TRUE(file.ok()) << file.status();
  const std::string what = "disk tier: preallocating 4.0 MiB for '" + options.path + "'";
  const std::vector<std::string> lines = log.With(what);
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_NE(lines[0].find(what + ": 1.0 MiB of 4.0 MiB (25%) after "), std::string::npos)
      << lines[0];
  EXPECT_NE(lines[3].find(what + ": 4.0 MiB of 4.0 MiB (100%) after "), std::string::npos)
      << lines[3];
  EXPECT_NE(lines[4].find(what + ": done, 4.0 MiB in "), std::string::npos) << lines[4];
  struct stat st;
  ASSERT_EQ(stat(options.path.c_str(), &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), 4u << 20);
  EXPECT_GE(static_cast<uint64_t>(st.st_blocks) * 512, 4u << 20);
}

TEST_F(OpenBlockFileTest, ADriveTooSmallIsResourceExhaustedAndGivesItsSpaceBack) {
  absl::StatusOr<std::unique_ptr<SmallFileSystem>> fs = SmallFileSystem::Mount(4ull << 20);
  if (!fs.ok()) GTEST_SKIP() << fs.status();
  const uint64_t free_before = (*fs)->FreeBytes();
  BlockFileOptions options = Options(16ull << 20);
  options.path = (*fs)->File("blocks");
  options.preallocate_chunk_bytes = 1 << 20;
  options.progress = ProgressFromTheStart();
  {
    LogCapture log;
    const absl::Status status = OpenBlockFile(options).status();
    EXPECT_TRUE(absl::IsResourceExhausted(status)) << status;
    EXPECT_NE(status.message().find("cannot preallocate 16777216 bytes for '" + options.path + "'"),
              absl::string_view::npos)
        << status;
    struct stat st;
    EXPECT_NE(stat(options.path.c_str(), &st), 0) << "the file this call created is removed";
    const std::vector<std::string> stopped = log.With(": stopped at ");
    ASSERT_EQ(stopped.size(), 1u);
    EXPECT_NE(stopped[0].find("disk tier: preallocating 16.0 MiB for '" + options.path +
                              "': stopped at "),
              std::string::npos)
        << stopped[0];
  }
  EXPECT_EQ((*fs)->FreeBytes(), free_before);

  // An older, smaller file keeps its size and contents.
  std::vector<uint8_t> content(1 << 20);
  FillPattern(absl::MakeSpan(content), 5);
  const int fd = open(options.path.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, content.data(), content.size()), static_cast<ssize_t>(content.size()));
  close(fd);
  const uint64_t free_with_file = (*fs)->FreeBytes();
  EXPECT_TRUE(absl::IsResourceExhausted(OpenBlockFile(options).status()));
  struct stat st;
  ASSERT_EQ(stat(options.path.c_str(), &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), content.size());
  EXPECT_EQ((*fs)->FreeBytes(), free_with_file);
  options.size_bytes = content.size();
  absl::StatusOr<std::unique_ptr<BlockFile>> file = OpenBlockFile(options);
  ASSERT_TRUE(file.ok()) << file.status();
  AlignedBuffer block(content.size());
  ASSERT_TRUE((*file)->Read(0, block.span()).ok());
  EXPECT_EQ(FirstPatternMismatch(block.span(), 5), -1);
}

TEST_F(OpenBlockFileTest, FillsHolesOfASparseFile) {
  constexpr uint64_t kSize = 16ull << 20;
  const std::string path = dir_->File("blocks");
  const int fd = open(path.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, kSize), 0);
  close(fd);
  absl::StatusOr<std::unique_ptr<BlockFile>> file = OpenBlockFile(Options(kSize));
  ASSERT_TRUE(file.ok()) << file.status();
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_GE(static_cast<uint64_t>(st.st_blocks) * 512, kSize);
}

TEST_F(OpenBlockFileTest, DoesNotShrinkALargerFile) {
  const std::string path = dir_->File("blocks");
  constexpr uint64_t kExisting = 3 << 20;
  std::vector<uint8_t> content(kExisting);
  FillPattern(absl::MakeSpan(content), 3);
  const int fd = open(path.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, content.data(), content.size()), static_cast<ssize_t>(kExisting));
  close(fd);

  absl::StatusOr<std::unique_ptr<BlockFile>> file = OpenBlockFile(Options(1 << 20));
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->size_bytes(), 1u << 20);
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), kExisting);
  // The existing bytes are untouched, and the usable range ends at size_bytes.
  AlignedBuffer block(4096);
  ASSERT_TRUE((*file)->Read(4096, block.span()).ok());
  EXPECT_TRUE(std::equal(block.data(), block.data() + 4096, content.data() + 4096));
  EXPECT_TRUE(absl::IsInvalidArgument((*file)->Read(1 << 20, block.span())));
}

TEST_F(OpenBlockFileTest, RejectsADirectory) {
  BlockFileOptions options = Options(1 << 20);
  options.path = dir_->path();
  EXPECT_TRUE(absl::IsInvalidArgument(OpenBlockFile(options).status()));
}

TEST_F(OpenBlockFileTest, MissingDirectoryIsAnError) {
  BlockFileOptions options = Options(1 << 20);
  options.path = dir_->File("no/such/dir/blocks");
  const absl::Status status = OpenBlockFile(options).status();
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("ENOENT"), absl::string_view::npos) << status;
}

TEST_F(OpenBlockFileTest, PicksTheEngineAskedFor) {
  BlockFileOptions options = Options(1 << 20);
  absl::StatusOr<std::unique_ptr<BlockFile>> pool = OpenBlockFile(options);
  ASSERT_TRUE(pool.ok()) << pool.status();
  EXPECT_EQ((*pool)->mechanism(), "thread-pool");
  pool->reset();

  options.engine = IoEngine::kUring;
  absl::StatusOr<std::unique_ptr<BlockFile>> uring = OpenBlockFile(options);
  if (uring.ok()) {
    EXPECT_EQ((*uring)->mechanism(), "io_uring");
  } else {
    EXPECT_TRUE(absl::IsUnimplemented(uring.status())) << uring.status();
  }
  const bool have_uring = uring.ok();
  uring->reset();

  options.engine = IoEngine::kAuto;
  absl::StatusOr<std::unique_ptr<BlockFile>> automatic = OpenBlockFile(options);
  ASSERT_TRUE(automatic.ok()) << automatic.status();
  EXPECT_EQ((*automatic)->mechanism(), have_uring ? "io_uring" : "thread-pool");
}

TEST_F(OpenBlockFileTest, BlockingHelpersRoundTrip) {
  absl::StatusOr<std::unique_ptr<BlockFile>> file = OpenBlockFile(Options(1 << 20));
  ASSERT_TRUE(file.ok()) << file.status();
  AlignedBuffer out(40960);
  AlignedBuffer in(40960);
  FillPattern(out.span(), 21);
  ASSERT_TRUE((*file)->Write(81920, out.span()).ok());
  ASSERT_TRUE((*file)->Read(81920, in.span()).ok());
  EXPECT_EQ(FirstPatternMismatch(in.span(), 21), -1);
  EXPECT_TRUE(absl::IsInvalidArgument((*file)->Read(81920 + 512, in.span())));
}

TEST(IoErrorToStatusTest, MapsErrnoToTheDocumentedCodes) {
  struct Case {
    int err;
    IoKind kind;
    absl::StatusCode code;
  };
  const Case cases[] = {
      {EIO, IoKind::kRead, absl::StatusCode::kDataLoss},
      {EIO, IoKind::kWrite, absl::StatusCode::kInternal},
      {ENOSPC, IoKind::kWrite, absl::StatusCode::kResourceExhausted},
      {EDQUOT, IoKind::kWrite, absl::StatusCode::kResourceExhausted},
      {ENOSPC, IoKind::kRead, absl::StatusCode::kInternal},
      {EINTR, IoKind::kRead, absl::StatusCode::kUnavailable},
      {EAGAIN, IoKind::kWrite, absl::StatusCode::kUnavailable},
      {EBADF, IoKind::kRead, absl::StatusCode::kInternal},
      {EINVAL, IoKind::kWrite, absl::StatusCode::kInternal},
  };
  for (const Case& c : cases) {
    const absl::Status status = IoErrorToStatus(c.err, c.kind, "/d/blocks", 8192, 4096);
    EXPECT_EQ(status.code(), c.code) << status;
  }
  const absl::Status status = IoErrorToStatus(EIO, IoKind::kRead, "/d/blocks", 8192, 4096);
  EXPECT_EQ(status.message(),
            "read of 4096 bytes at offset 8192 of '/d/blocks' failed: Input/output error (EIO)");
}

TEST(ValidateIoRequestTest, AcceptsAlignedRequestsInsideTheFile) {
  AlignedBuffer buffer(8192);
  EXPECT_TRUE(
      ValidateIoRequest(IoRequest{IoKind::kRead, 0, buffer.data(), 8192}, 8192, 4096, "f").ok());
  EXPECT_TRUE(
      ValidateIoRequest(IoRequest{IoKind::kWrite, 4096, buffer.data(), 4096}, 8192, 4096, "f")
          .ok());
  EXPECT_TRUE(absl::IsInvalidArgument(
      ValidateIoRequest(IoRequest{IoKind::kWrite, 4096, buffer.data(), 8192}, 8192, 4096, "f")));
}

}  // namespace
}  // namespace kvtier::io
