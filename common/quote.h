// Quoted: how a message repeats a value that came from outside the process (an engine id, a
// request id, a pool or buffer name): escaped, and cut after kMaxQuotedBytes so that an over-long
// or binary value never comes back whole in a status message or a log line. Pure; thread-safe.
#ifndef KVTIER_COMMON_QUOTE_H_
#define KVTIER_COMMON_QUOTE_H_

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace kvtier {

// The most bytes of a value Quoted repeats.
inline constexpr size_t kMaxQuotedBytes = 64;

// `value` in single quotes with C escapes (absl::CHexEscape: quotes, backslashes and bytes outside
// printable ASCII become \', \\, \xNN): 'k.0', 'a\x00b'. A value longer than kMaxQuotedBytes keeps
// only its first kMaxQuotedBytes bytes and says how long it was: 'eeee...e'... (1048576 bytes).
std::string Quoted(absl::string_view value);

}  // namespace kvtier

#endif  // KVTIER_COMMON_QUOTE_H_
