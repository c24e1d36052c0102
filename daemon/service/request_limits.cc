// The contract's request limits as checks (request_limits.h).
#include "daemon/service/request_limits.h"

#include "absl/strings/str_cat.h"
#include "common/quote.h"

namespace kvtier::service {

absl::Status CheckLength(absl::string_view field, absl::string_view value, size_t min_bytes,
                         size_t max_bytes) {
  if (value.empty() && min_bytes > 0) {
    return absl::InvalidArgumentError(absl::StrCat(field, " is required"));
  }
  if (value.size() < min_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " ", Quoted(value), " is shorter than ", min_bytes, " bytes"));
  }
  if (value.size() > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " ", Quoted(value), " is longer than ", max_bytes, " bytes"));
  }
  return absl::OkStatus();
}

absl::Status CheckEngineId(absl::string_view engine_id) {
  return CheckLength("engine_id", engine_id, 1, kMaxEngineIdBytes);
}

absl::Status CheckRequestId(absl::string_view field, absl::string_view request_id) {
  return CheckLength(field, request_id, 1, kMaxRequestIdBytes);
}

absl::Status CheckWriteOptions(v1::Priority priority, v1::WriteAck ack) {
  if (!v1::Priority_IsValid(priority)) {
    return absl::InvalidArgumentError(absl::StrCat("priority ", priority, " is not a Priority"));
  }
  if (!v1::WriteAck_IsValid(ack)) {
    return absl::InvalidArgumentError(absl::StrCat("ack ", ack, " is not a WriteAck"));
  }
  return absl::OkStatus();
}

absl::Status CheckSelector(const v1::NamespaceSelector& selector) {
  switch (selector.selector_case()) {
    case v1::NamespaceSelector::kAll:
      if (!selector.all()) {
        return absl::InvalidArgumentError(
            "namespaces.all = false selects nothing: set it to true, or set namespace_id or match");
      }
      return absl::OkStatus();
    case v1::NamespaceSelector::kMatch: {
      const v1::NamespaceMatch& m = selector.match();
      for (absl::Status st :
           {CheckLength("namespaces.match.tenant", m.tenant(), 0, kMaxTenantBytes),
            CheckLength("namespaces.match.model", m.model(), 0, kMaxModelBytes),
            CheckLength("namespaces.match.partition", m.partition(), 0, kMaxPartitionBytes)}) {
        if (!st.ok()) return st;
      }
      return absl::OkStatus();
    }
    default:
      return absl::OkStatus();
  }
}

}  // namespace kvtier::service
