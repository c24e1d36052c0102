// TempDir: mkdtemp on creation, std::filesystem::remove_all on destruction.
#include "tests/testing/temp_dir.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kvtier::testing {

absl::StatusOr<TempDir> TempDir::Create() {
  const char* env = std::getenv("TMPDIR");
  std::string base = env != nullptr && env[0] != '\0' ? env : "/tmp";
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  std::string pattern = absl::StrCat(base, "/kvtier-test-XXXXXX");
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  if (mkdtemp(buffer.data()) == nullptr) {
    const int err = errno;
    return absl::InternalError(
        absl::StrCat("mkdtemp(\"", pattern, "\") failed: ", std::strerror(err)));
  }
  return TempDir(std::string(buffer.data()));
}

TempDir::TempDir(TempDir&& other) noexcept : path_(std::exchange(other.path_, std::string())) {}

TempDir& TempDir::operator=(TempDir&& other) noexcept {
  if (this != &other) {
    Remove();
    path_ = std::exchange(other.path_, std::string());
  }
  return *this;
}

TempDir::~TempDir() { Remove(); }

std::string TempDir::File(absl::string_view name) const { return absl::StrCat(path_, "/", name); }

void TempDir::Remove() {
  if (path_.empty()) return;
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
  path_.clear();
}

}  // namespace kvtier::testing
