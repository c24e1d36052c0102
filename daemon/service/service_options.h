// ServiceOptions: the settings of the engine service and of the state it shares with the admin
// service (ServiceState), from kvtierd's configuration (daemon/kvtierd/daemon.cc). Plain data.
#ifndef KVTIER_DAEMON_SERVICE_SERVICE_OPTIONS_H_
#define KVTIER_DAEMON_SERVICE_SERVICE_OPTIONS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "codec/codec_spec.h"
#include "daemon/service/auth.h"
#include "daemon/service/event_log.h"
#include "daemon/service/peer_credentials.h"
#include "daemon/service/token_table.h"
#include "daemon/store/shared_tier.h"

namespace kvtier::service {

struct ServiceOptions {
  std::vector<std::string> pool_dirs = {"/dev/shm"};  // where host pools may live
  codec::CodecSpec default_codec;                     // nvfp4
  uint32_t max_items_per_request = 4096;
  uint32_t max_request_bytes = 4u << 20;
  uint32_t max_engines = 1024;
  // One tenant's share of the engine slots and of the parked-request slots, so that no tenant
  // can take them all (RESOURCE_EXHAUSTED naming the limit).
  uint32_t max_engines_per_tenant = 256;
  uint32_t max_parked_requests = 65536;
  uint32_t max_parked_requests_per_tenant = 16384;
  absl::Duration min_lease = absl::Seconds(1);
  absl::Duration max_lease = absl::Minutes(10);
  absl::Duration default_lease = absl::Seconds(30);
  absl::Duration default_park_ttl = absl::Minutes(10);
  absl::Duration max_park_ttl = absl::Hours(1);
  uint32_t max_park_user_data_bytes = 4096;
  absl::Duration default_pin_ttl = absl::Seconds(30);
  absl::Duration max_pin_ttl = absl::Minutes(10);
  absl::Duration lease_check_interval = absl::Milliseconds(200);
  uint32_t worker_threads = 4;
  // Items an Offload or Onboard does per turn on a worker (FairScheduler); after each chunk the
  // request waits for the other engines' turns. Zero is taken as one.
  uint32_t chunk_pages = 64;
  // A unary call whose client set no deadline gets this one (zero: none): work still queued for
  // a worker when it passes fails with DEADLINE_EXCEEDED instead of running. Streams are exempt.
  absl::Duration default_deadline = absl::Seconds(60);
  std::string node_name;
  std::string version = "0.1.0";
  // Tenant tokens; null: authentication off (one tenant per request's `tenant` field, "default"
  // when empty).
  std::shared_ptr<const TokenAuth> auth;
  // Pids of the Unix-socket peers (kvtierd's accept loop fills it); null: EngineInfo.pid is 0.
  std::shared_ptr<const PeerCredentials> peers;
  // The daemon's key (kvtierd keeps it in <state_dir>/hash-root.key): namespace ids are keyed
  // with it, and with authentication on it is mixed into every tenant's hash root, so that
  // neither can be computed outside the daemon.
  std::string hash_root_key;
  // Files engines may not register as pools (the daemon's persistent host arena).
  std::vector<std::string> forbidden_pool_files;
  // The event log the store feeds, for WatchEvents; borrowed, must outlive the service. Its
  // incarnation is the service's. Null: WatchEvents fails with FAILED_PRECONDITION and the
  // incarnation is drawn at random.
  EventLog* events = nullptr;
  // The fleet's shared tier (the cluster tier), asked by Lookup for the missing tail of a chain
  // and by Onboard for blocks the node lacks; borrowed, must outlive the service. Null: none.
  store::SharedTier* shared_tier = nullptr;
  // Where Offload records its items' token ids and its engine's tokens_per_page for the KV-events
  // publisher; borrowed, must outlive the service. Null (kv_events off): token ids are checked and
  // dropped.
  TokenTable* tokens = nullptr;
};

}  // namespace kvtier::service

#endif  // KVTIER_DAEMON_SERVICE_SERVICE_OPTIONS_H_
