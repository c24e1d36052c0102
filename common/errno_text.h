// ErrnoText: the text of an errno value for status messages, one implementation for every module.
// Stateless and thread-safe.
#ifndef KVTIER_COMMON_ERRNO_TEXT_H_
#define KVTIER_COMMON_ERRNO_TEXT_H_

#include <string>

namespace kvtier {

// "Input/output error (EIO)"; "errno 1234" for values the C library does not name.
std::string ErrnoText(int err);

}  // namespace kvtier

#endif  // KVTIER_COMMON_ERRNO_TEXT_H_
