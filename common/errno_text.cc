// ErrnoText (see errno_text.h): glibc's name and description of the value.
#include "common/errno_text.h"

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace kvtier {

std::string ErrnoText(int err) {
  const char* name = strerrorname_np(err);
  const char* description = strerrordesc_np(err);
  if (name == nullptr || description == nullptr) return absl::StrCat("errno ", err);
  return absl::StrCat(description, " (", name, ")");
}

absl::Status ErrnoStatus(int err, absl::string_view message) {
  const std::string text = absl::StrCat(message, ": ", ErrnoText(err));
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(text);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(text);
    default:
      return absl::InternalError(text);
  }
}

}  // namespace kvtier
