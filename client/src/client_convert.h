// Conversions between the kvtier.v1 messages and the public types of kvtier/client.h (ServerInfo,
// Engine, Stats, Event, ItemResult), the RegisterEngine request builder and the protobuf
// time/duration helpers. Internal to libkvtier: client.cc is the only user. Pure functions;
// thread-safe.
#ifndef KVTIER_CLIENT_SRC_CLIENT_CONVERT_H_
#define KVTIER_CLIENT_SRC_CLIENT_CONVERT_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "google/protobuf/duration.pb.h"
#include "google/protobuf/repeated_ptr_field.h"
#include "google/protobuf/timestamp.pb.h"
#include "kvtier/client.h"
#include "kvtier/v1/common.pb.h"
#include "kvtier/v1/events.pb.h"
#include "kvtier/v1/session.pb.h"
#include "kvtier/v1/stats.pb.h"

namespace kvtier::client_internal {

absl::Time TimeFromProto(const google::protobuf::Timestamp& t);
absl::Duration DurationFromProto(const google::protobuf::Duration& d);
// REQUIRES: `d` is finite (the callers send only positive durations).
void DurationToProto(absl::Duration d, google::protobuf::Duration* out);

// The wire values of kvtier.v1.Tier and kvtier::Tier are equal; an unknown value is passed on.
Tier TierFromProto(int tier);

ItemResult ItemFromProto(const v1::ItemResult& item);
// Appends one ItemResult per message to `out`.
void AppendItems(const google::protobuf::RepeatedPtrField<v1::ItemResult>& items,
                 std::vector<ItemResult>* out);

// "raw", "nvfp4", "nvfp4x2", or "codec-N" for a value this library does not know.
std::string CodecName(v1::Codec codec);

ServerInfo ServerInfoFromProto(const v1::HelloResponse& resp);
// The engine's codec is the CodecSpec's string form, or CodecName when the spec does not parse.
Engine EngineFromProto(const v1::RegisterEngineResponse& resp);
TierStats TierStatsFromProto(const v1::TierStats& t);
Stats StatsFromProto(const v1::StatsResponse& resp);

// Fills `out` from `e`; false for an event of a kind this library does not know (a newer server),
// in which case `out` is partly filled and should be dropped.
bool EventFromProto(const v1::Event& e, Event* out);

// InvalidArgument naming the field for a missing model, layout or pools, or a pool with both or
// neither of shared_memory and cuda_ipc set.
absl::Status ValidateEngineOptions(const EngineOptions& options);

// Builds the RegisterEngine request; a pool's unset size defaults to slot_bytes * slots from the
// layout. InvalidArgument for an EngineOptions.codec that does not parse.
// REQUIRES: ValidateEngineOptions(options) is OK.
absl::StatusOr<v1::RegisterEngineRequest> RegisterRequest(const EngineOptions& options);

}  // namespace kvtier::client_internal

#endif  // KVTIER_CLIENT_SRC_CLIENT_CONVERT_H_
