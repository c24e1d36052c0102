// kvtierd's configuration: an embedded default (kvtierd --print-default-config prints it, with a
// comment on every field), overlaid by an optional YAML file and by --set flags. Every field is
// validated with a message naming it; unknown fields are rejected. Plain data once loaded.
#ifndef KVTIER_DAEMON_KVTIERD_CONFIG_H_
#define KVTIER_DAEMON_KVTIERD_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "codec/codec_spec.h"
#include "daemon/index/block_index.h"
#include "daemon/store/host_arena.h"

namespace kvtier::kvtierd {

struct Config {
  // server
  std::string socket;
  uint32_t workers = 0;
  uint32_t max_request_bytes = 0;
  uint32_t max_items_per_request = 0;
  uint32_t max_engines = 0;
  double shutdown_grace_seconds = 0;
  // state
  std::string state_dir;
  // pools
  std::vector<std::string> pool_dirs;
  // engines
  codec::CodecSpec default_codec;
  double lease_seconds = 0, min_lease_seconds = 0, max_lease_seconds = 0;
  // host tier
  uint64_t host_capacity = 0;  // 0: auto
  uint64_t host_chunk = 0;
  store::HostPinMode host_pin = store::HostPinMode::kAuto;
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
  // index
  index::SyncPolicy sync = index::SyncPolicy::kBatch;
  // metrics
  std::string metrics_listen;  // host:port; empty: off
  // log
  std::string log_level;
  // auth
  std::string auth_tokens_file;  // empty: authentication off
  std::vector<std::string> auth_admin_tenants;
};

// The embedded default configuration, as YAML with comments.
absl::string_view DefaultConfigYaml();

// Loads the default, then `file` (when not empty), then each "dotted.key=value" of `overrides`.
// InvalidArgument names the field (and the file and line for YAML errors); NotFound when `file`
// does not exist.
absl::StatusOr<Config> LoadConfig(const std::string& file,
                                  const std::vector<std::string>& overrides);

// "64GiB", "512MiB", "4096" -> bytes. InvalidArgument naming `field` otherwise.
absl::StatusOr<uint64_t> ParseBytes(absl::string_view field, absl::string_view text);

}  // namespace kvtier::kvtierd

#endif  // KVTIER_DAEMON_KVTIERD_CONFIG_H_
