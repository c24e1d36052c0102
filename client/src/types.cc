// Names of the public enums (kvtier/types.h).
#include "kvtier/types.h"

#include "codec/dtype.h"

namespace kvtier {

std::string_view TierName(Tier tier) {
  switch (tier) {
    case Tier::kGpu:
      return "gpu";
    case Tier::kHost:
      return "host";
    case Tier::kDisk:
      return "disk";
    case Tier::kCluster:
      return "cluster";
    case Tier::kUnspecified:
      break;
  }
  return "unspecified";
}

std::string_view ItemCodeName(ItemCode code) {
  switch (code) {
    case ItemCode::kOk:
      return "ok";
    case ItemCode::kAlreadyStored:
      return "already_stored";
    case ItemCode::kNotFound:
      return "not_found";
    case ItemCode::kInvalidArgument:
      return "invalid_argument";
    case ItemCode::kResourceExhausted:
      return "resource_exhausted";
    case ItemCode::kNotAdmitted:
      return "not_admitted";
    case ItemCode::kDataLoss:
      return "data_loss";
    case ItemCode::kUnavailable:
      return "unavailable";
    case ItemCode::kSkipped:
      return "skipped";
    case ItemCode::kAborted:
      return "aborted";
    case ItemCode::kFailedPrecondition:
      return "failed_precondition";
    case ItemCode::kInternal:
      return "internal";
  }
  return "unknown";
}

std::string_view DTypeName(DType dtype) {
  const absl::string_view name = codec::DTypeName(static_cast<codec::DType>(dtype));
  return std::string_view(name.data(), name.size());
}

}  // namespace kvtier
