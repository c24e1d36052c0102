// Plain value types shared by the public headers of libkvtier: tiers, per-item result codes,
// priorities and write acknowledgements, mirroring kvtier.v1 (proto/kvtier/v1/). Header-only
// declarations; the names are defined in libkvtier. Thread-safe (values).
#ifndef KVTIER_CLIENT_INCLUDE_KVTIER_TYPES_H_
#define KVTIER_CLIENT_INCLUDE_KVTIER_TYPES_H_

#include <string>
#include <string_view>

namespace kvtier {

// A storage tier of the daemon, fastest first.
enum class Tier : int { kUnspecified = 0, kGpu = 1, kHost = 2, kDisk = 3, kCluster = 4 };

// "gpu", "host", "disk", "cluster" or "unspecified".
std::string_view TierName(Tier tier);

// The outcome of one item of a batched call (kvtier.v1.ItemCode).
enum class ItemCode : int {
  kOk = 0,
  kAlreadyStored = 1,
  kNotFound = 2,
  kInvalidArgument = 3,
  kResourceExhausted = 4,
  kNotAdmitted = 5,
  kDataLoss = 6,
  kUnavailable = 7,
  kSkipped = 8,
  kAborted = 9,
  kFailedPrecondition = 10,
  kInternal = 11,
};

// "ok", "already_stored", "not_found", ... (lower-case, as kvtierctl prints them).
std::string_view ItemCodeName(ItemCode code);

// One item's result: its code, the server's message for failures, and the tier involved.
struct ItemResult {
  ItemCode code = ItemCode::kOk;
  std::string message;
  Tier tier = Tier::kUnspecified;
  bool ok() const { return code == ItemCode::kOk; }
};

// Eviction priority of stored blocks (kvtier.v1.Priority); kDefault lets the server choose
// (normal for Offload, high for Park).
enum class Priority : int { kDefault = 0, kLow = 1, kNormal = 2, kHigh = 3 };

// When a writing call (Offload, Park) returns (kvtier.v1.WriteAck); kDefault is kPagesRead.
enum class WriteAck : int { kDefault = 0, kPagesRead = 1, kStored = 2, kDurable = 3 };

// Element type of a layout buffer.
enum class DType : int { kBf16 = 1, kFp16 = 2, kFp8E4M3 = 3, kFp32 = 4, kBytes = 5 };

// "bf16", "fp16", "fp8_e4m3", "fp32", "bytes".
std::string_view DTypeName(DType dtype);

}  // namespace kvtier

#endif  // KVTIER_CLIENT_INCLUDE_KVTIER_TYPES_H_
