// ReadRegularFile and RegularFile: a regular file is read whole (also one that reports size 0, as
// /proc files do), and a FIFO, a socket, a character device and a directory are refused at once,
// with a message naming the path and what it is. A FIFO is the case that used to hang readers:
// the calls run under CallGuardingFifo, so a regression fails instead of blocking.
#include "common/file_reading.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/special_files.h"
#include "tests/testing/temp_dir.h"

namespace kvtier {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

class FileReadingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<testing::TempDir> dir = testing::TempDir::Create();
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_.emplace(std::move(*dir));
  }
  std::string File(const std::string& name) const { return dir_->File(name); }

  std::optional<testing::TempDir> dir_;
};

TEST_F(FileReadingTest, ReadsARegularFileWhole) {
  const std::string path = File("hello.txt");
  std::ofstream(path) << "hello, world\n";
  absl::StatusOr<std::string> text = ReadRegularFile(path, 1024, "greeting");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "hello, world\n");

  std::ofstream(File("empty")).flush();
  text = ReadRegularFile(File("empty"), 0);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "");

  // A file of more than one page whose size is read exactly up to the limit.
  const std::string big(10000, 'x');
  std::ofstream(File("big")) << big;
  text = ReadRegularFile(File("big"), big.size());
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, big);
}

TEST_F(FileReadingTest, AFileOverTheLimitIsRefused) {
  std::ofstream(File("big")) << std::string(100, 'x');
  const absl::Status st = ReadRegularFile(File("big"), 99, "config file").status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), AllOf(HasSubstr("config file " + File("big")), HasSubstr("100 bytes"),
                                  HasSubstr("limit is 99")));
}

TEST_F(FileReadingTest, AProcFileOfSizeZeroIsReadToItsEnd) {
  struct stat st {};
  ASSERT_EQ(stat("/proc/self/status", &st), 0);
  ASSERT_EQ(st.st_size, 0) << "the test needs a file that reports size 0";
  absl::StatusOr<std::string> text = ReadRegularFile("/proc/self/status", 1 << 20);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_THAT(*text, HasSubstr("Pid:"));
  EXPECT_EQ(ReadRegularFile("/proc/self/status", 10).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(FileReadingTest, AFifoIsRefusedWithoutBlocking) {
  const std::string fifo = File("fifo");
  ASSERT_TRUE(testing::MakeFifo(fifo));
  std::optional<absl::Status> st = testing::CallGuardingFifo(
      fifo, [&] { return ReadRegularFile(fifo, 1024, "tokens file").status(); });
  ASSERT_TRUE(st.has_value()) << "ReadRegularFile blocked on a FIFO";
  EXPECT_EQ(st->code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(st->message(), "tokens file " + fifo + " is a FIFO (named pipe), not a regular file");
  // The same for RegularFile::Open, and with a writer holding the FIFO open.
  const int writer = open(fifo.c_str(), O_RDWR | O_CLOEXEC);  // O_RDWR: does not wait for a reader
  ASSERT_GE(writer, 0);
  st = testing::CallGuardingFifo(fifo, [&] { return RegularFile::Open(fifo).status(); });
  close(writer);
  ASSERT_TRUE(st.has_value()) << "RegularFile::Open blocked on a FIFO";
  EXPECT_EQ(st->code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st->message(), HasSubstr("is a FIFO (named pipe)"));
}

TEST_F(FileReadingTest, ASocketADeviceAndADirectoryAreRefused) {
  const std::string socket_path = File("sock");
  const int fd = testing::BindUnixSocket(socket_path);
  ASSERT_GE(fd, 0);
  absl::Status st = ReadRegularFile(socket_path, 1024).status();
  close(fd);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "file " + socket_path + " is a socket, not a regular file");

  st = ReadRegularFile("/dev/null", 1024, "calibration file").status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "calibration file /dev/null is a character device, not a regular file");

  st = ReadRegularFile(dir_->path(), 1024, "config file").status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "config file " + dir_->path() + " is a directory, not a regular file");

  // A symbolic link is followed: to a regular file it reads, to a FIFO it is refused.
  std::ofstream(File("target")) << "linked";
  ASSERT_EQ(symlink(File("target").c_str(), File("link").c_str()), 0);
  absl::StatusOr<std::string> text = ReadRegularFile(File("link"), 1024);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "linked");
  ASSERT_TRUE(testing::MakeFifo(File("fifo")));
  ASSERT_EQ(symlink(File("fifo").c_str(), File("fifo-link").c_str()), 0);
  std::optional<absl::Status> guarded = testing::CallGuardingFifo(
      File("fifo"), [&] { return ReadRegularFile(File("fifo-link"), 1024).status(); });
  ASSERT_TRUE(guarded.has_value()) << "ReadRegularFile blocked on a link to a FIFO";
  EXPECT_THAT(guarded->message(), HasSubstr("is a FIFO (named pipe)"));
}

TEST_F(FileReadingTest, MissingAndUnreadableFilesHaveTheirCodes) {
  absl::Status st = ReadRegularFile(File("missing"), 1024, "config file").status();
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(st.message(), AllOf(HasSubstr("cannot open config file " + File("missing")),
                                  HasSubstr("No such file or directory")));
  st = ReadRegularFile(File("missing/below"), 1024).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound);
  st = ReadRegularFile("", 1024, "config file").status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("config file: the path is empty"));
  if (geteuid() != 0) {  // root reads files of mode 0
    std::ofstream(File("secret")) << "x";
    ASSERT_EQ(chmod(File("secret").c_str(), 0), 0);
    EXPECT_EQ(ReadRegularFile(File("secret"), 1024).status().code(),
              absl::StatusCode::kPermissionDenied);
  }
}

TEST_F(FileReadingTest, RegularFileKeepsItsDescriptorUntilReleased) {
  std::ofstream(File("data")) << "abcdef";
  absl::StatusOr<RegularFile> file = RegularFile::Open(File("data"));
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->size(), 6u);
  EXPECT_EQ(file->path(), File("data"));
  EXPECT_EQ(fcntl(file->fd(), F_GETFL) & O_NONBLOCK, 0) << "O_NONBLOCK is cleared";
  RegularFile moved = std::move(*file);
  absl::StatusOr<std::string> text = moved.ReadAll(6);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "abcdef");
  const int fd = moved.Release();
  EXPECT_EQ(moved.fd(), -1);
  EXPECT_EQ(close(fd), 0) << "the released descriptor is still open";
}

}  // namespace
}  // namespace kvtier
