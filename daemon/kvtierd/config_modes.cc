// ToHostPinMode and ToSyncPolicy (see config_modes.h).
#include "daemon/kvtierd/config_modes.h"

#include "daemon/store/block_store.h"

namespace kvtier::kvtierd {

// The configuration's warning and the store's must speak of the same number of chunks.
static_assert(kMinTierChunks == store::kMinTierChunks);

store::HostPinMode ToHostPinMode(HostPin pin) {
  switch (pin) {
    case HostPin::kAuto:
      return store::HostPinMode::kAuto;
    case HostPin::kCuda:
      return store::HostPinMode::kCuda;
    case HostPin::kMlock:
      return store::HostPinMode::kMlock;
    case HostPin::kNone:
      return store::HostPinMode::kNone;
  }
  return store::HostPinMode::kAuto;  // unreachable: every enumerator is handled above
}

index::SyncPolicy ToSyncPolicy(IndexSync sync) {
  switch (sync) {
    case IndexSync::kNone:
      return index::SyncPolicy::kNone;
    case IndexSync::kBatch:
      return index::SyncPolicy::kBatch;
    case IndexSync::kAlways:
      return index::SyncPolicy::kAlways;
  }
  return index::SyncPolicy::kBatch;  // unreachable: every enumerator is handled above
}

}  // namespace kvtier::kvtierd
