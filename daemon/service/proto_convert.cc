// Conversions between kvtier/v1 messages and the daemon's types.
#include "daemon/service/proto_convert.h"

#include <cstring>
#include <vector>

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

v1::ItemCode ItemCodeToProto(dataplane::ItemCode code) {
  switch (code) {
    case dataplane::ItemCode::kOk:
      return v1::ITEM_CODE_OK;
    case dataplane::ItemCode::kAlreadyStored:
      return v1::ITEM_CODE_ALREADY_STORED;
    case dataplane::ItemCode::kNotFound:
      return v1::ITEM_CODE_NOT_FOUND;
    case dataplane::ItemCode::kInvalidArgument:
      return v1::ITEM_CODE_INVALID_ARGUMENT;
    case dataplane::ItemCode::kResourceExhausted:
      return v1::ITEM_CODE_RESOURCE_EXHAUSTED;
    case dataplane::ItemCode::kNotAdmitted:
      return v1::ITEM_CODE_NOT_ADMITTED;
    case dataplane::ItemCode::kDataLoss:
      return v1::ITEM_CODE_DATA_LOSS;
    case dataplane::ItemCode::kUnavailable:
      return v1::ITEM_CODE_UNAVAILABLE;
    case dataplane::ItemCode::kSkipped:
      return v1::ITEM_CODE_SKIPPED;
    case dataplane::ItemCode::kAborted:
      return v1::ITEM_CODE_ABORTED;
    case dataplane::ItemCode::kFailedPrecondition:
      return v1::ITEM_CODE_FAILED_PRECONDITION;
    case dataplane::ItemCode::kInternal:
      return v1::ITEM_CODE_INTERNAL;
  }
  return v1::ITEM_CODE_INTERNAL;
}

void ItemResultToProto(const dataplane::ItemResult& result, v1::ItemResult* out) {
  out->set_code(ItemCodeToProto(result.code));
  if (!result.message.empty()) out->set_message(result.message);
  if (result.tier.has_value()) out->set_tier(TierToProto(*result.tier));
}

void SetItemResult(const absl::Status& status, v1::ItemResult* out) {
  dataplane::ItemResult result;
  result.Set(status);
  ItemResultToProto(result, out);
}

dataplane::SharedMemoryFile SharedMemoryFileFromProto(const v1::SharedMemoryFile& file) {
  dataplane::SharedMemoryFile out;
  if (file.has_path()) out.path = file.path();
  if (file.has_shm_name()) out.shm_name = file.shm_name();
  out.offset_bytes = file.offset_bytes();
  out.size_bytes = file.size_bytes();
  return out;
}

dataplane::CudaIpcMemory CudaIpcMemoryFromProto(const v1::CudaIpcMemory& memory) {
  dataplane::CudaIpcMemory out;
  out.handle = memory.handle();
  out.device_uuid = memory.device_uuid();
  out.device_ordinal = memory.device_ordinal();
  out.base_offset_bytes = memory.base_offset_bytes();
  out.size_bytes = memory.size_bytes();
  return out;
}

namespace {

template <typename Request>
std::vector<dataplane::PageItem> PageItemsFromProto(const Request& req) {
  std::vector<dataplane::PageItem> items;
  items.reserve(req.items_size());
  for (const auto& item : req.items()) {
    items.push_back(dataplane::PageItem{HashFromProto(item.block_hash()), item.page_index()});
  }
  return items;
}

}  // namespace

dataplane::OffloadBatch OffloadBatchFromProto(const v1::OffloadRequest& req) {
  dataplane::OffloadBatch batch;
  batch.items = PageItemsFromProto(req);
  // WRITE_ACK_DURABLE implies durable (cache.proto).
  batch.durable = req.durable();
  batch.wait_durable = req.ack() == v1::WRITE_ACK_DURABLE;
  return batch;
}

dataplane::OnboardBatch OnboardBatchFromProto(const v1::OnboardRequest& req) {
  dataplane::OnboardBatch batch;
  batch.items = PageItemsFromProto(req);
  batch.continue_after_miss = req.continue_after_miss();
  return batch;
}

void OffloadResultToProto(const dataplane::OffloadResult& result, v1::OffloadResponse* out) {
  for (const dataplane::ItemResult& r : result.results) ItemResultToProto(r, out->add_results());
  out->set_stored_pages(result.stored_pages);
  out->set_hot_bytes_read(result.hot_bytes_read);
  out->set_cold_bytes_written(result.cold_bytes_written);
}

void OnboardResultToProto(const dataplane::OnboardResult& result, v1::OnboardResponse* out) {
  for (const dataplane::ItemResult& r : result.results) ItemResultToProto(r, out->add_results());
  out->set_onboarded_pages(result.onboarded_pages);
  out->set_cold_bytes_read(result.cold_bytes_read);
  out->set_hot_bytes_written(result.hot_bytes_written);
}

}  // namespace kvtier::service
