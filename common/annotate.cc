// Annotate (see annotate.h). The payloads are copied because some carry meaning for the caller
// (common/cli marks usage errors with one), which a new message must not lose.
#include "common/annotate.h"

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace kvtier {

absl::Status Annotate(const absl::Status& status, absl::string_view context) {
  if (status.ok()) return status;
  absl::Status annotated(status.code(), absl::StrCat(context, ": ", status.message()));
  status.ForEachPayload([&annotated](absl::string_view type_url, const absl::Cord& payload) {
    annotated.SetPayload(type_url, payload);
  });
  return annotated;
}

}  // namespace kvtier
