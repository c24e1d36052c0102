// ErrnoText (see errno_text.h): glibc's name and description of the value.
#include "common/errno_text.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace kvtier {

std::string ErrnoText(int err) {
  const char* name = strerrorname_np(err);
  const char* description = strerrordesc_np(err);
  if (name == nullptr || description == nullptr) return absl::StrCat("errno ", err);
  return absl::StrCat(description, " (", name, ")");
}

}  // namespace kvtier
