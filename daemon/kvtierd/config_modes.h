// The configuration's modes (daemon/config/config.h keeps its own enums so that it needs neither
// the store nor the index) as the store's and the index's types. Stateless; thread-safe.
#ifndef KVTIER_DAEMON_KVTIERD_CONFIG_MODES_H_
#define KVTIER_DAEMON_KVTIERD_CONFIG_MODES_H_

#include "daemon/config/config.h"
#include "daemon/index/block_index.h"
#include "daemon/store/host_arena.h"

namespace kvtier::kvtierd {

store::HostPinMode ToHostPinMode(HostPin pin);
index::SyncPolicy ToSyncPolicy(IndexSync sync);

}  // namespace kvtier::kvtierd

#endif  // KVTIER_DAEMON_KVTIERD_CONFIG_MODES_H_
