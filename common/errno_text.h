// ErrnoText and ErrnoStatus: the text of an errno value for status messages and the status a failed
// system call maps to, one implementation for every module. Stateless and thread-safe.
#ifndef KVTIER_COMMON_ERRNO_TEXT_H_
#define KVTIER_COMMON_ERRNO_TEXT_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace kvtier {

// "Input/output error (EIO)"; "errno 1234" for values the C library does not name.
std::string ErrnoText(int err);

// "<message>: <ErrnoText(err)>" as NOT_FOUND (ENOENT, ENOTDIR), PERMISSION_DENIED (EACCES, EPERM)
// or INTERNAL (anything else): for a system call on a path or object the caller names in message.
absl::Status ErrnoStatus(int err, absl::string_view message);

}  // namespace kvtier

#endif  // KVTIER_COMMON_ERRNO_TEXT_H_
