// SmallFileSystem: a tmpfs of a few MiB mounted on a fresh temporary directory, for tests of full
// drives (the index's state drive, pool files that cannot be backed). Fill() takes its free space
// with a filler file, Unfill() gives it back. Needs root (mount); Mount() says why when refused,
// and tests skip then. Unmounted (lazily) and removed on destruction. Not thread-safe.
#ifndef KVTIER_TESTS_TESTING_SMALL_FILE_SYSTEM_H_
#define KVTIER_TESTS_TESTING_SMALL_FILE_SYSTEM_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace kvtier::testing {

class SmallFileSystem {
 public:
  // Mounts a tmpfs of `bytes` (rounded up to pages). Unavailable (with the reason) when this
  // process may not mount.
  static absl::StatusOr<std::unique_ptr<SmallFileSystem>> Mount(uint64_t bytes);
  ~SmallFileSystem();
  SmallFileSystem(const SmallFileSystem&) = delete;
  SmallFileSystem& operator=(const SmallFileSystem&) = delete;

  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

  // Grows the filler file until at most `leave_bytes` are free (0: until the file system is full).
  void Fill(uint64_t leave_bytes = 0);
  // Removes the filler file.
  void Unfill();
  // Free bytes now (statvfs f_bavail).
  uint64_t FreeBytes() const;

 private:
  explicit SmallFileSystem(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

}  // namespace kvtier::testing

#endif  // KVTIER_TESTS_TESTING_SMALL_FILE_SYSTEM_H_
