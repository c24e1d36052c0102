// RegularFile and ReadRegularFile (see file_reading.h). Opening a FIFO for reading blocks until a
// writer comes, opening a terminal can make it the controlling one, opening some devices has side
// effects, and reading /dev/zero never ends: so the name is stat()ed first and anything but a
// regular file is refused without being opened. The open itself uses O_NONBLOCK | O_NOCTTY and is
// followed by an fstat() of the descriptor, so that a file swapped in after the stat() cannot
// block the caller either; O_NONBLOCK has no effect on a regular file's reads, but it is cleared
// anyway so that the descriptor behaves as callers expect.
#include "common/file_reading.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/errno_text.h"

namespace kvtier {
namespace {

absl::Status NotRegular(absl::string_view subject, uint32_t mode) {
  return absl::InvalidArgumentError(
      absl::StrCat(subject, " is ", FileTypeName(mode), ", not a regular file"));
}

}  // namespace

const char* FileTypeName(uint32_t st_mode) {
  switch (st_mode & S_IFMT) {
    case S_IFREG:
      return "a regular file";
    case S_IFDIR:
      return "a directory";
    case S_IFIFO:
      return "a FIFO (named pipe)";
    case S_IFSOCK:
      return "a socket";
    case S_IFCHR:
      return "a character device";
    case S_IFBLK:
      return "a block device";
    case S_IFLNK:
      return "a symbolic link";
    default:
      return "a file of unknown type";
  }
}

absl::StatusOr<RegularFile> RegularFile::Open(absl::string_view path, absl::string_view what) {
  std::string subject = what.empty() ? std::string(path) : absl::StrCat(what, " ", path);
  if (path.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what.empty() ? "file" : what, ": the path is empty"));
  }
  const std::string name(path);
  struct stat st {};
  if (::stat(name.c_str(), &st) != 0) {
    return ErrnoStatus(errno, absl::StrCat("cannot open ", subject));
  }
  if (!S_ISREG(st.st_mode)) return NotRegular(subject, st.st_mode);
  int fd = -1;
  do {
    fd = ::open(name.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("cannot open ", subject));
  RegularFile file(name, std::move(subject), fd, 0);  // closes fd on every return below
  if (::fstat(fd, &st) != 0) return ErrnoStatus(errno, absl::StrCat("cannot stat ", file.subject_));
  if (!S_ISREG(st.st_mode)) return NotRegular(file.subject_, st.st_mode);
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    return ErrnoStatus(errno, absl::StrCat("cannot set the flags of ", file.subject_));
  }
  file.size_ = static_cast<uint64_t>(st.st_size);
  return file;
}

RegularFile::RegularFile(RegularFile&& other) noexcept
    : path_(std::move(other.path_)),
      subject_(std::move(other.subject_)),
      fd_(std::exchange(other.fd_, -1)),
      size_(other.size_) {}

RegularFile& RegularFile::operator=(RegularFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    subject_ = std::move(other.subject_);
    fd_ = std::exchange(other.fd_, -1);
    size_ = other.size_;
  }
  return *this;
}

RegularFile::~RegularFile() {
  if (fd_ >= 0) ::close(fd_);
}

int RegularFile::Release() { return std::exchange(fd_, -1); }

absl::StatusOr<std::string> RegularFile::ReadAll(uint64_t max_bytes) {
  if (size_ > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(subject_, " has ", size_, " bytes; the limit is ", max_bytes));
  }
  // Room for one byte more than the limit tells a file over it; one read past the size at open
  // finds the end (or a file that grew); /proc files report size 0 and are read in pages.
  const uint64_t cap = std::min<uint64_t>(max_bytes, uint64_t{1} << 60) + 1;
  std::string out;
  out.resize(static_cast<size_t>(std::min<uint64_t>(size_ > 0 ? size_ + 1 : 4096, cap)));
  size_t done = 0;
  while (true) {
    if (done == out.size()) {
      if (done >= cap) break;
      out.resize(static_cast<size_t>(std::min<uint64_t>(uint64_t{out.size()} * 2, cap)));
    }
    const ssize_t n = ::read(fd_, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(errno, absl::StrCat("cannot read ", subject_));
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  if (done > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(subject_, " has more than ", max_bytes, " bytes, the limit"));
  }
  out.resize(done);
  return out;
}

absl::StatusOr<std::string> ReadRegularFile(absl::string_view path, uint64_t max_bytes,
                                            absl::string_view what) {
  absl::StatusOr<RegularFile> file = RegularFile::Open(path, what);
  if (!file.ok()) return file.status();
  return file->ReadAll(max_bytes);
}

}  // namespace kvtier
