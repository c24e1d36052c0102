// Conversions between kvtier/v1 messages and the daemon's types.
#include "daemon/service/proto_convert.h"

#include <cstring>

#include "absl/strings/str_format.h"

namespace kvtier::service {

v1::Tier TierToProto(index::Tier tier) {
  switch (tier) {
    case index::Tier::kGpu:
      return v1::TIER_GPU;
    case index::Tier::kHost:
      return v1::TIER_HOST;
    case index::Tier::kDisk:
      return v1::TIER_DISK;
  }
  return v1::TIER_UNSPECIFIED;
}

absl::StatusOr<index::BlockHash> HashFromProto(absl::string_view bytes) {
  index::BlockHash hash{};
  if (bytes.empty() || bytes.size() > hash.size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("block hash of %d bytes (must be 1 to 32)", bytes.size()));
  }
  std::memcpy(hash.data(), bytes.data(), bytes.size());
  return hash;
}

void SetDuration(absl::Duration d, google::protobuf::Duration* out) {
  const int64_t ns = absl::ToInt64Nanoseconds(d);
  out->set_seconds(ns / 1000000000);
  out->set_nanos(static_cast<int32_t>(ns % 1000000000));
}

void SetTime(absl::Time t, google::protobuf::Timestamp* out) {
  const int64_t ns = absl::ToUnixNanos(t);
  out->set_seconds(ns / 1000000000);
  out->set_nanos(static_cast<int32_t>(ns % 1000000000));
}

absl::Duration DurationFromProto(const google::protobuf::Duration& d) {
  return absl::Seconds(d.seconds()) + absl::Nanoseconds(d.nanos());
}

v1::ItemCode ItemCodeFor(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return v1::ITEM_CODE_OK;
    case absl::StatusCode::kAlreadyExists:
      return v1::ITEM_CODE_ALREADY_STORED;
    case absl::StatusCode::kNotFound:
      return v1::ITEM_CODE_NOT_FOUND;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return v1::ITEM_CODE_INVALID_ARGUMENT;
    case absl::StatusCode::kResourceExhausted:
      return v1::ITEM_CODE_RESOURCE_EXHAUSTED;
    case absl::StatusCode::kDataLoss:
      return v1::ITEM_CODE_DATA_LOSS;
    case absl::StatusCode::kUnavailable:
      return v1::ITEM_CODE_UNAVAILABLE;
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kCancelled:
    case absl::StatusCode::kAborted:
      return v1::ITEM_CODE_ABORTED;
    case absl::StatusCode::kFailedPrecondition:
      return v1::ITEM_CODE_FAILED_PRECONDITION;
    default:
      return v1::ITEM_CODE_INTERNAL;
  }
}

void SetItemResult(const absl::Status& status, v1::ItemResult* out) {
  out->set_code(ItemCodeFor(status));
  if (!status.ok() && !absl::IsAlreadyExists(status)) {
    std::string message(status.message().substr(0, 1024));
    out->set_message(std::move(message));
  }
}

uint32_t LeadingOk(const v1::OnboardResponse& resp) {
  uint32_t n = 0;
  while (static_cast<int>(n) < resp.results_size() && resp.results(n).code() == v1::ITEM_CODE_OK) {
    ++n;
  }
  return n;
}

}  // namespace kvtier::service
