// Reading the files users name (configurations, calibration files, token lists, PEM files, tool
// inputs) without blocking on what the name turns out to be: a FIFO, a socket, a character or
// block device and a directory are refused, with an error naming the path and what it is, before
// anything is read from them. RegularFile owns one open descriptor and is not thread-safe; the
// free functions are thread-safe.
#ifndef KVTIER_COMMON_FILE_READING_H_
#define KVTIER_COMMON_FILE_READING_H_

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kvtier {

// What a file of mode `st_mode` (struct stat's st_mode) is, for messages: "a regular file",
// "a directory", "a FIFO (named pipe)", "a socket", "a character device", "a block device",
// "a symbolic link", or "a file of unknown type".
const char* FileTypeName(uint32_t st_mode);

// A regular file open for reading.
class RegularFile {
 public:
  // Opens `path` (symbolic links followed) when it names a regular file. `what` names the file in
  // messages ("calibration file", "config file"): "config file /etc/kvtier is a directory, not a
  // regular file". Does not block on what `path` names: the path is stat()ed and refused unless
  // regular, then opened with O_NONBLOCK | O_NOCTTY and fstat()ed again, so that a FIFO or device
  // swapped in between is refused as well (O_NONBLOCK is cleared once the file is known to be
  // regular). NotFound when `path` does not exist (ENOENT, ENOTDIR); PermissionDenied for EACCES
  // and EPERM; InvalidArgument for an empty path or a file that is not regular; Internal for
  // other errors, with the errno text. Blocks on the file system (a stat and an open).
  static absl::StatusOr<RegularFile> Open(absl::string_view path, absl::string_view what = "file");

  RegularFile(RegularFile&& other) noexcept;
  RegularFile& operator=(RegularFile&& other) noexcept;
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;
  ~RegularFile();  // closes the descriptor unless Release()d

  // The descriptor (owned by this object), the path as given, and the size at open.
  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  uint64_t size() const { return size_; }

  // Reads from the current position to the end of the file (which may differ from size() when
  // the file changes meanwhile; files that report size 0, such as those of /proc, are read to
  // their end too). InvalidArgument when the file holds more than `max_bytes`; Internal for a
  // read error, with the path and the errno text. Blocks on the file system.
  absl::StatusOr<std::string> ReadAll(uint64_t max_bytes);

  // Gives the descriptor to the caller, who closes it; fd() is -1 afterwards.
  int Release();

 private:
  RegularFile(std::string path, std::string subject, int fd, uint64_t size)
      : path_(std::move(path)), subject_(std::move(subject)), fd_(fd), size_(size) {}

  std::string path_;
  std::string subject_;  // "<what> <path>", for messages
  int fd_ = -1;
  uint64_t size_ = 0;
};

// The whole contents of the regular file `path`: RegularFile::Open(path, what), then
// ReadAll(max_bytes), with their statuses. Blocks on the file system.
absl::StatusOr<std::string> ReadRegularFile(absl::string_view path, uint64_t max_bytes,
                                            absl::string_view what = "file");

}  // namespace kvtier

#endif  // KVTIER_COMMON_FILE_READING_H_
