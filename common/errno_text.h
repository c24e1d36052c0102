// ErrnoText: an errno value as text for status messages ("No space left on device (ENOSPC)").
// Stateless and thread-safe.
#ifndef KVTIER_COMMON_ERRNO_TEXT_H_
#define KVTIER_COMMON_ERRNO_TEXT_H_

#include <string>

namespace kvtier {

// The C library's description and name of `err`; "errno 1234" for values it does not name.
std::string ErrnoText(int err);

}  // namespace kvtier

#endif  // KVTIER_COMMON_ERRNO_TEXT_H_
