// kvtierd's configuration: an embedded default (kvtierd --print-default-config prints it, with a
// comment on every field), overlaid by an optional YAML file and by --set flags. Every field is
// validated with a message naming it; unknown fields are rejected. Plain data once loaded.
//
// Its own library (kvtier_config) so that kvtierctl can load and check a configuration without
// linking the daemon: it knows no store, index or gRPC type. Where a field chooses one of the
// store's modes it has its own enum, which the daemon converts (daemon/kvtierd/daemon.cc). The
// namespace stays kvtierd's: this is kvtierd's configuration, whoever reads it.
#ifndef KVTIER_DAEMON_CONFIG_CONFIG_H_
#define KVTIER_DAEMON_CONFIG_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "codec/codec_spec.h"

namespace kvtier::kvtierd {

// host.pin: how the host tier's memory is pinned (store::HostPinMode's values, in its order).
enum class HostPin : uint8_t { kAuto, kCuda, kMlock, kNone };

// index.sync: when the index's writes reach the drive (index::SyncPolicy's values).
enum class IndexSync : uint8_t { kNone, kBatch, kAlways };

// Fewest chunks a tier should have before ConfigWarnings says so; store::kMinTierChunks, which
// the daemon checks it equals at compile time (the store warns again at start with the sizes it
// settled on).
inline constexpr uint64_t kMinTierChunks = 8;

struct Config {
  // server
  std::string socket;
  uint32_t workers = 0;
  // server.chunk_pages: pages an Offload or Onboard does per turn on a worker.
  uint32_t chunk_pages = 0;
  uint32_t max_request_bytes = 0;
  uint32_t max_items_per_request = 0;
  uint32_t max_engines = 0;
  uint32_t max_engines_per_tenant = 0;
  double shutdown_grace_seconds = 0;
  // server.default_deadline_seconds: the deadline of an RPC whose client set none; zero: none.
  // The service's to apply (gRPC has no server-side default deadline).
  absl::Duration default_deadline = absl::ZeroDuration();
  // state
  std::string state_dir;
  // pools
  std::vector<std::string> pool_dirs;
  // engines
  codec::CodecSpec default_codec;
  double lease_seconds = 0, min_lease_seconds = 0, max_lease_seconds = 0;
  uint32_t max_parked_requests = 0, max_parked_requests_per_tenant = 0;
  // host tier
  uint64_t host_capacity = 0;  // 0: auto
  uint64_t host_chunk = 0;
  HostPin host_pin = HostPin::kAuto;
  bool host_persistent = false;
  std::string host_shm_name;
  // gpu tier
  uint64_t gpu_capacity = 0;
  int gpu_device = 0;
  // disk tier
  std::vector<std::string> disk_dirs;  // empty: <state_dir>/disk
  uint64_t disk_capacity = 0;          // 0: auto; all directories together
  uint64_t disk_chunk = 0;
  uint32_t disk_queue_depth = 0;
  std::string disk_admission;  // "all" | "reused-or-durable"
  // cluster tier (docs/CLUSTER.md); an empty pool: none
  std::string cluster_pool, cluster_ceph_conf, cluster_mon_host, cluster_user, cluster_keyring;
  std::string cluster_key_file;   // empty: <state_dir>/hash-root.key (this node's own)
  std::string cluster_admission;  // "all" | "disk" | "durable"
  uint32_t cluster_queue_depth = 0, cluster_write_threads = 0;
  double cluster_op_timeout_seconds = 0, cluster_probe_interval_seconds = 0;
  uint32_t cluster_lookup_timeout_ms = 0, cluster_fetch_timeout_ms = 0;
  uint64_t cluster_capacity = 0;  // 0: no sweeper
  double cluster_high_watermark = 0, cluster_low_watermark = 0, cluster_sweep_interval_seconds = 0;
  // index
  IndexSync sync = IndexSync::kBatch;
  uint64_t index_min_free = 0;  // index.min_free: below it the index takes no writes
  uint64_t index_reserve = 0;   // index.reserve: preallocated, given up when the drive fills
  // metrics
  uint32_t events_retain = 0;  // events.retain: events kept for WatchEvents replay
  std::string metrics_listen;  // host:port; empty: off
  // tcp: a second gRPC listener
  std::string tcp_listen;  // host:port; empty: off
  std::string tcp_tls_cert_file, tcp_tls_key_file, tcp_tls_client_ca_file;
  // The files' contents, read when the configuration is loaded (empty where the path is).
  std::string tcp_tls_cert_pem, tcp_tls_key_pem, tcp_tls_client_ca_pem;
  bool tcp_insecure = false;  // plain text; only on a loopback host
  // log
  std::string log_level;   // "info" | "warning" | "error"
  std::string log_format;  // "text" | "json"
  // auth
  std::string auth_tokens_file;  // empty: authentication off
  std::vector<std::string> auth_admin_tenants;
  // kv_events: the vLLM KV-events publisher (docs/KV_EVENTS.md).
  struct KvEvents {
    bool enabled = false;
    std::string endpoint;         // ZeroMQ endpoint of the PUB socket
    std::string replay_endpoint;  // ROUTER socket for replay; empty: off
    std::string topic;
    std::string encoding;              // "array" | "map"
    uint32_t replay_buffer = 0;        // batches
    uint32_t send_hwm = 0;             // messages
    std::vector<std::string> tenants;  // empty: every tenant
    uint32_t block_size = 0;           // tokens per block in BlockStored; 0: unknown
    uint32_t token_table_blocks = 0;   // blocks whose token ids are kept (TokenTable)
    uint32_t batch_interval_ms = 0;    // the publisher's wait before it reads the log
  } kv_events;
};

// The embedded default configuration, as YAML with comments.
absl::string_view DefaultConfigYaml();

// Loads the default, then `file` (when not empty), then each "dotted.key=value" of `overrides`,
// and reads the tcp.tls files. Every error is reported, not only the first: unknown fields, bad
// values, malformed overrides and unreadable tcp.tls files each give one line of the
// InvalidArgument's message, which names the field (and the file and line for YAML errors; the
// path and the errno text for a tcp.tls file that cannot be read). When the only error is that
// `file` cannot be read, its code is kept: NotFound when it does not exist, InvalidArgument when
// it is not a regular file (a directory, FIFO, socket or device is refused without being read, so
// the call never waits on it). Blocks on the file system.
absl::StatusOr<Config> LoadConfig(const std::string& file,
                                  const std::vector<std::string>& overrides);

// What a valid configuration may still get wrong, one sentence each: today, explicit tier sizes
// of fewer than kMinTierChunks chunks (each chunk holds blocks of one size).
std::vector<std::string> ConfigWarnings(const Config& config);

// "64GiB", "512MiB", "4096" -> bytes. InvalidArgument naming `field` otherwise.
absl::StatusOr<uint64_t> ParseBytes(absl::string_view field, absl::string_view text);

}  // namespace kvtier::kvtierd

#endif  // KVTIER_DAEMON_CONFIG_CONFIG_H_
