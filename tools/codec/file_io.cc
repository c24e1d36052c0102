// POSIX file access for `kvtier-codec`. pread keeps reads positional so a command can report the
// byte offset of whatever it failed on; outputs go through a temporary name so a failed encode or
// decode never leaves a truncated file that looks like a result.
#include "tools/codec/file_io.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/errno_text.h"
#include "common/file_reading.h"

namespace kvtier::tools {

absl::StatusOr<std::unique_ptr<InputFile>> InputFile::Open(std::string path) {
  absl::StatusOr<RegularFile> file = RegularFile::Open(path, "input file");
  if (!file.ok()) return file.status();
  const uint64_t size = file->size();
  return std::unique_ptr<InputFile>(new InputFile(std::move(path), file->Release(), size));
}

InputFile::~InputFile() { ::close(fd_); }

absl::Status InputFile::ReadAt(uint64_t offset, absl::Span<uint8_t> out) const {
  size_t done = 0;
  while (done < out.size()) {
    ssize_t n = ::pread(fd_, out.data() + done, out.size() - done, offset + done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, absl::StrCat(path_, ": read failed at offset ", offset + done));
    }
    if (n == 0) {
      return absl::DataLossError(absl::StrCat(path_, ": file ends at offset ", offset + done,
                                              ", expected ", out.size() - done, " more bytes"));
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status CheckDistinctFiles(const std::string& in, const std::string& out) {
  struct stat a, b;
  if (::stat(in.c_str(), &a) == 0 && ::stat(out.c_str(), &b) == 0 && a.st_dev == b.st_dev &&
      a.st_ino == b.st_ino) {
    return absl::InvalidArgumentError(
        absl::StrCat("--out ", out, " is the input file ", in, "; write to another file"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<OutputFile>> OutputFile::Create(std::string path) {
  // A unique temporary name beside the output: never an existing file, never another run's.
  std::string temp_path = absl::StrCat(path, ".tmp.XXXXXX");
  int fd = ::mkostemp(temp_path.data(), O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat(temp_path, ": cannot create"));
  ::fchmod(fd, 0644);
  return std::unique_ptr<OutputFile>(new OutputFile(std::move(path), std::move(temp_path), fd));
}

OutputFile::~OutputFile() {
  if (committed_) return;
  if (fd_ >= 0) ::close(fd_);
  ::unlink(temp_path_.c_str());
}

absl::Status OutputFile::Append(absl::Span<const uint8_t> data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd_, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno,
                         absl::StrCat(temp_path_, ": write failed at offset ", written_ + done));
    }
    done += static_cast<size_t>(n);
  }
  written_ += done;
  return absl::OkStatus();
}

absl::Status OutputFile::Commit() {
  int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) return ErrnoStatus(errno, absl::StrCat(temp_path_, ": close failed"));
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    return ErrnoStatus(errno, absl::StrCat(path_, ": cannot rename ", temp_path_, " to it"));
  }
  committed_ = true;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<MappedFile>> MappedFile::Open(const std::string& path) {
  absl::StatusOr<RegularFile> file = RegularFile::Open(path, "input file");
  if (!file.ok()) return file.status();
  const uint64_t size = file->size();
  if (size == 0) return std::unique_ptr<MappedFile>(new MappedFile({}));
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, file->fd(), 0);
  if (p == MAP_FAILED) return ErrnoStatus(errno, absl::StrCat(path, ": cannot map"));
  return std::unique_ptr<MappedFile>(
      new MappedFile(absl::MakeConstSpan(static_cast<const uint8_t*>(p), size)));
}

MappedFile::~MappedFile() {
  if (!data_.empty()) ::munmap(const_cast<uint8_t*>(data_.data()), data_.size());
}

absl::StatusOr<uint64_t> CountUnits(const InputFile& file, uint64_t unit_bytes,
                                    absl::string_view unit_name) {
  if (file.size() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(file.path(), ": file is empty (the ", unit_name,
                                                   " size is ", unit_bytes, " bytes)"));
  }
  if (file.size() % unit_bytes != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(file.path(), ": size ", file.size(), " bytes is not a multiple of the ",
                     unit_name, " size ", unit_bytes, " bytes (", file.size() / unit_bytes,
                     " whole, then ", file.size() % unit_bytes, " bytes)"));
  }
  return file.size() / unit_bytes;
}

}  // namespace kvtier::tools
