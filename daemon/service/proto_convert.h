// Conversions between the public contract (kvtier/v1 messages) and the daemon's own types:
// layouts, codec specs, tiers, block hashes, item statuses (gRPC's own status: grpc_status.h).
// Pure functions; thread-safe.
#ifndef KVTIER_DAEMON_SERVICE_PROTO_CONVERT_H_
#define KVTIER_DAEMON_SERVICE_PROTO_CONVERT_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "codec/codec_spec.h"
#include "codec/page_layout.h"
#include "daemon/dataplane/data_plane.h"
#include "daemon/dataplane/gpu_pages.h"
#include "daemon/dataplane/host_pool.h"
#include "daemon/index/block_record.h"
#include "google/protobuf/duration.pb.h"
#include "google/protobuf/timestamp.pb.h"
#include "kvtier/v1/cache.pb.h"
#include "kvtier/v1/common.pb.h"
#include "kvtier/v1/layout.pb.h"
#include "kvtier/v1/pool.pb.h"
#include "proto/codec_convert.h"

// To be removed: kvtier_service*.cc still take ToGrpc and FinishWith from here. Once they include
// grpc_status.h themselves (after their restructuring), this header needs no grpc++ at all.
#include "daemon/service/grpc_status.h"  // IWYU pragma: export

namespace kvtier::service {

// Layouts and codec specs (proto/codec_convert.h).
using proto::CodecFromProto;
using proto::CodecToProto;
using proto::LayoutFromProto;
using proto::LayoutToProto;

v1::Tier TierToProto(index::Tier tier);

// A block hash of 1 to 32 bytes; shorter hashes are zero-padded to 32 (engines that bring their
// own keys must keep them unambiguous under that padding). InvalidArgument otherwise.
absl::StatusOr<index::BlockHash> HashFromProto(absl::string_view bytes);

void SetDuration(absl::Duration d, google::protobuf::Duration* out);
void SetTime(absl::Time t, google::protobuf::Timestamp* out);
absl::Duration DurationFromProto(const google::protobuf::Duration& d);
v1::ItemCode ItemCodeToProto(dataplane::ItemCode code);
void ItemResultToProto(const dataplane::ItemResult& result, v1::ItemResult* out);
// The closest item code of a store status and, unless it is OK or AlreadyExists, its message
// (ItemResult::Set).
void SetItemResult(const absl::Status& status, v1::ItemResult* out);

// The pools' locations, for dataplane::HostPool::Map and DevicePool::Open.
dataplane::SharedMemoryFile SharedMemoryFileFromProto(const v1::SharedMemoryFile& file);
dataplane::CudaIpcMemory CudaIpcMemoryFromProto(const v1::CudaIpcMemory& memory);

// The data plane's batches of an Offload or Onboard request (hashes parsed; one that does not
// parse fails its item), and their results as the responses carry them.
dataplane::OffloadBatch OffloadBatchFromProto(const v1::OffloadRequest& req);
dataplane::OnboardBatch OnboardBatchFromProto(const v1::OnboardRequest& req);
void OffloadResultToProto(const dataplane::OffloadResult& result, v1::OffloadResponse* out);
void OnboardResultToProto(const dataplane::OnboardResult& result, v1::OnboardResponse* out);

}  // namespace kvtier::service

#endif  // KVTIER_DAEMON_SERVICE_PROTO_CONVERT_H_
