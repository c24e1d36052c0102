// The request limits of the kvtier.v1 contract (proto/kvtier/v1/*.proto) other than a layout's
// (codec::ValidateLayout has those) and the distinct hashes of one request (the data plane's
// DistinctHashes): lengths of ids and names, enum values, namespace selectors. The handlers of
// KvTierService and KvTierAdminService check with these before any lookup, so that a malformed
// value is INVALID_ARGUMENT, its message quoting the value cut short (common/quote.h), never a
// NOT_FOUND that repeats it. Pure functions.
#ifndef KVTIER_DAEMON_SERVICE_REQUEST_LIMITS_H_
#define KVTIER_DAEMON_SERVICE_REQUEST_LIMITS_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "kvtier/v1/cache.pb.h"
#include "kvtier/v1/namespace.pb.h"

namespace kvtier::service {

// Lengths in bytes, as the contract states them.
inline constexpr size_t kMaxEngineIdBytes = 64;     // RegisterEngineResponse.engine_id
inline constexpr size_t kMaxEngineNameBytes = 128;  // RegisterEngineRequest.engine_name
inline constexpr size_t kMaxRequestIdBytes = 128;   // ParkRequest.request_id
inline constexpr size_t kMaxTenantBytes = 128;      // Namespace.tenant
inline constexpr size_t kMaxModelBytes = 256;       // Namespace.model
inline constexpr size_t kMaxPartitionBytes = 64;    // Namespace.partition
inline constexpr size_t kMaxClientNameBytes = 256;  // HelloRequest.client_name

// InvalidArgument unless `value` has min_bytes to max_bytes bytes: "`field` is required" for an
// empty value when min_bytes > 0, else "`field` 'eee'... (1048576 bytes) is longer than 64 bytes".
absl::Status CheckLength(absl::string_view field, absl::string_view value, size_t min_bytes,
                         size_t max_bytes);

// An engine id as a request names it: 1 to kMaxEngineIdBytes bytes (the daemon issues no longer
// ones, so a longer id is malformed, not unknown). InvalidArgument otherwise.
absl::Status CheckEngineId(absl::string_view engine_id);

// A parked request's id: 1 to kMaxRequestIdBytes bytes. InvalidArgument naming `field` otherwise.
absl::Status CheckRequestId(absl::string_view field, absl::string_view request_id);

// The Priority and WriteAck of a writing request (Offload, Park): values of their enums.
// InvalidArgument for a value outside them.
absl::Status CheckWriteOptions(v1::Priority priority, v1::WriteAck ack);

// A NamespaceSelector as a request gives it (the `namespaces` field, set or not). OK when no
// member is set (the method decides what that means: every namespace the caller may see, or
// INVALID_ARGUMENT where one is required) and when exactly one valid member is;
// InvalidArgument for all = false (nothing selected) and for a match field longer than the
// Namespace field it matches (tenant 128, model 256, partition 64 bytes).
absl::Status CheckSelector(const v1::NamespaceSelector& selector);

}  // namespace kvtier::service

#endif  // KVTIER_DAEMON_SERVICE_REQUEST_LIMITS_H_
