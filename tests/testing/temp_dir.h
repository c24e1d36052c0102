// TempDir: a fresh directory under $TMPDIR (or /tmp) that is removed, with everything in it, when
// the object is destroyed. Movable, not copyable; not thread-safe to move while others use it.
#ifndef KVTIER_TESTS_TESTING_TEMP_DIR_H_
#define KVTIER_TESTS_TESTING_TEMP_DIR_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kvtier::testing {

class TempDir {
 public:
  // Creates "<$TMPDIR or /tmp>/kvtier-test-XXXXXX" with mkdtemp. Internal with the errno when that
  // fails. Blocks on the file system.
  static absl::StatusOr<TempDir> Create();

  TempDir(TempDir&& other) noexcept;
  TempDir& operator=(TempDir&& other) noexcept;
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  // Removes the directory recursively; errors are ignored.
  ~TempDir();

  // The directory's absolute path, without a trailing slash; "" after a move.
  const std::string& path() const { return path_; }
  // path() + "/" + name.
  std::string File(absl::string_view name) const;

 private:
  explicit TempDir(std::string path) : path_(std::move(path)) {}
  void Remove();

  std::string path_;
};

}  // namespace kvtier::testing

#endif  // KVTIER_TESTS_TESTING_TEMP_DIR_H_
