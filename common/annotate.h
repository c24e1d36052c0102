// Annotate: context put in front of a status's message as it travels up, keeping its code, so that
// "index 7 out of range" reaches the user as "calibration file 'c.pt': index 7 out of range".
// Stateless and thread-safe.
#ifndef KVTIER_COMMON_ANNOTATE_H_
#define KVTIER_COMMON_ANNOTATE_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace kvtier {

// "<context>: <status.message()>" with status's code and payloads; an OK status is returned as it
// is. Callers that want the code's name in the text as well (a tool that prints only messages)
// make it part of the context.
absl::Status Annotate(const absl::Status& status, absl::string_view context);

}  // namespace kvtier

#endif  // KVTIER_COMMON_ANNOTATE_H_
