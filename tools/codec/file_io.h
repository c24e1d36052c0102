// Files of pages and blocks for `kvtier-codec`: positional reads from an input file and an output
// file that appears under its name only when complete (written to "<path>.tmp", renamed on Commit).
// Every error names the path and, for reads, the offset. Objects are not thread-safe.
#ifndef KVTIER_TOOLS_CODEC_FILE_IO_H_
#define KVTIER_TOOLS_CODEC_FILE_IO_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace kvtier::tools {

class InputFile {
 public:
  // Opens `path` for reading. NotFound / PermissionDenied / Internal name the path and the errno;
  // InvalidArgument when it is not a regular file (a FIFO, socket, device or directory is refused
  // without being read, see common/file_reading.h).
  static absl::StatusOr<std::unique_ptr<InputFile>> Open(std::string path);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  const std::string& path() const { return path_; }
  uint64_t size() const { return size_; }

  // Reads exactly out.size() bytes at `offset`. DataLoss when the file ends first (it was changed
  // while being read), Internal for an I/O error. Blocks on the file system.
  absl::Status ReadAt(uint64_t offset, absl::Span<uint8_t> out) const;

 private:
  InputFile(std::string path, int fd, uint64_t size)
      : path_(std::move(path)), fd_(fd), size_(size) {}
  std::string path_;
  int fd_;
  uint64_t size_;
};

// InvalidArgument when `out` names the same file as `in` (writing it would destroy the input).
absl::Status CheckDistinctFiles(const std::string& in, const std::string& out);

class OutputFile {
 public:
  // Creates a new "<path>.tmp.XXXXXX". The destructor removes it unless Commit succeeded.
  static absl::StatusOr<std::unique_ptr<OutputFile>> Create(std::string path);
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  // Appends all of `data`; Internal names the path and errno on failure.
  absl::Status Append(absl::Span<const uint8_t> data);
  // Closes the file and renames it to `path`.
  absl::Status Commit();

 private:
  OutputFile(std::string path, std::string temp_path, int fd)
      : path_(std::move(path)), temp_path_(std::move(temp_path)), fd_(fd) {}
  std::string path_;
  std::string temp_path_;
  int fd_;
  uint64_t written_ = 0;
  bool committed_ = false;
};

// A read-only memory map of a whole file, for looking at a block header before the block size is
// known (see ProbeFirstBlockHeader). Pages are read only when touched.
class MappedFile {
 public:
  // Maps `path` (a regular file, as InputFile::Open requires); errors name the path and errno. An
  // empty file maps to an empty span.
  static absl::StatusOr<std::unique_ptr<MappedFile>> Open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  absl::Span<const uint8_t> data() const { return data_; }

 private:
  explicit MappedFile(absl::Span<const uint8_t> data) : data_(data) {}
  absl::Span<const uint8_t> data_;
};

// Number of `unit_bytes`-sized items (pages or blocks) in `file`. InvalidArgument names the file,
// its size and the unit when the file is empty or its size is not a multiple of the unit, e.g.
// "pages.bin: size 4718591 bytes is not a multiple of the page size 4718592 bytes".
absl::StatusOr<uint64_t> CountUnits(const InputFile& file, uint64_t unit_bytes,
                                    absl::string_view unit_name);

}  // namespace kvtier::tools

#endif  // KVTIER_TOOLS_CODEC_FILE_IO_H_
