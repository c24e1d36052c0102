// Conversions between the public contract (kvtier/v1 messages) and the daemon's own types:
// layouts, codec specs, tiers, block hashes, statuses. Pure functions; thread-safe.
#ifndef KVTIER_DAEMON_SERVICE_PROTO_CONVERT_H_
#define KVTIER_DAEMON_SERVICE_PROTO_CONVERT_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "codec/codec_spec.h"
#include "codec/page_layout.h"
#include "daemon/index/block_record.h"
#include "google/protobuf/duration.pb.h"
#include "google/protobuf/timestamp.pb.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/server_callback.h"
#include "grpcpp/support/status.h"
#include "kvtier/v1/common.pb.h"
#include "kvtier/v1/layout.pb.h"

namespace kvtier::service {

// A validated layout. InvalidArgument names the buffer and field; FailedPrecondition when the
// message's fingerprint is set and differs from the one the server computes.
absl::StatusOr<codec::PageLayout> LayoutFromProto(const v1::PageLayout& layout);
void LayoutToProto(const codec::PageLayout& layout, v1::PageLayout* out);

// An unset codec (CODEC_UNSPECIFIED) takes `fallback`'s codec; unset rope and alignment take
// their defaults. InvalidArgument for an unknown enum value or a bad alignment.
absl::StatusOr<codec::CodecSpec> CodecFromProto(const v1::CodecSpec& spec,
                                                const codec::CodecSpec& fallback);
void CodecToProto(const codec::CodecSpec& spec, v1::CodecSpec* out);

v1::Tier TierToProto(index::Tier tier);

// A block hash of 1 to 32 bytes; shorter hashes are zero-padded to 32 (engines that bring their
// own keys must keep them unambiguous under that padding). InvalidArgument otherwise.
absl::StatusOr<index::BlockHash> HashFromProto(absl::string_view bytes);

// The status as a gRPC status (same code and message).
grpc::Status ToGrpc(const absl::Status& status);
// Finishes a unary callback RPC at once with `status`; returns its reactor.
grpc::ServerUnaryReactor* FinishWith(grpc::CallbackServerContext* ctx, const absl::Status& status);

void SetDuration(absl::Duration d, google::protobuf::Duration* out);
void SetTime(absl::Time t, google::protobuf::Timestamp* out);
absl::Duration DurationFromProto(const google::protobuf::Duration& d);
// The closest item code of a store status.
v1::ItemCode ItemCodeFor(const absl::Status& status);
void SetItemResult(const absl::Status& status, v1::ItemResult* out);

}  // namespace kvtier::service

#endif  // KVTIER_DAEMON_SERVICE_PROTO_CONVERT_H_
