// What kvtierd checks before it opens the store, shared by `kvtierd --check-config` and the start
// itself (Run calls CheckStartable first), so that the check finds what would keep a start from
// succeeding and a start with a bad port, certificate or directory fails in milliseconds rather
// than after index recovery and pinning: the listen addresses (bound, then released), the TLS
// certificate chain and key (parsed, and checked to be a pair), the client CA bundle, the tokens
// file, the directories kvtierd creates or writes, the Unix socket's path, the host tier's size
// against the memory limit, the disk tier's size against its chunks, and the GPU tier's needs.
// Also the tier sizes StoreOptions uses. Stateless; thread-safe.
#ifndef KVTIER_DAEMON_KVTIERD_STARTUP_CHECKS_H_
#define KVTIER_DAEMON_KVTIERD_STARTUP_CHECKS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/config/config.h"

namespace kvtier::kvtierd {

struct StartupCheckOptions {
  // The Unix socket comes from systemd (LISTEN_FDS): server.socket is neither bound nor checked.
  bool socket_activated = false;
};

// Checks everything a start of kvtierd with `config` needs that can be checked without opening
// the index, allocating the host tier or binding for good. Changes nothing: directories are not
// created (their nearest existing ancestor must let kvtierd create them), a stale socket file is
// not removed, ports are bound and closed at once. OK, or FailedPrecondition whose message lists
// every problem found, one per line, each naming the field and the value
// ("metrics.listen: cannot listen on 127.0.0.1:9464: Address already in use (EADDRINUSE)").
// Blocks on the file system and on name resolution; initialises CUDA when a GPU tier is set.
absl::Status CheckStartable(const Config& config, const StartupCheckOptions& options = {});

// Checks a PEM certificate chain, its private key and (when not empty) a CA bundle as TLS needs
// them: each parses, the bundles hold at least one certificate, and the key is the first
// certificate's. The `*_file` arguments name the files in messages. OK, or InvalidArgument with
// one line per problem. Does not block.
absl::Status CheckTlsFiles(const std::string& cert_pem, const std::string& cert_file,
                           const std::string& key_pem, const std::string& key_file,
                           const std::string& ca_pem, const std::string& ca_file);

// The host tier's size: host.capacity, or (auto) a quarter of the memory limit at most 64 GiB,
// rounded down to whole host.chunks. `note`, when not null, receives a line saying how auto
// sized it (empty otherwise). InvalidArgument when that is less than one chunk or more than the
// memory limit (cgroup memory.max or MemTotal). Reads /proc and /sys.
absl::StatusOr<uint64_t> HostTierBytes(const Config& config, std::string* note = nullptr);

// The disk tier's directories: disk.dirs, or <state_dir>/disk. Empty when the disk tier is off
// (disk.capacity 0).
std::vector<std::string> DiskTierDirs(const Config& config);

// The disk tier's size, all directories together: disk.capacity, or (auto) a quarter of the free
// space of the file system of the first directory (or of its nearest existing ancestor), counting
// the space the tier's own files already take there as free (so that restarts agree), at most
// 256 GiB, rounded down to whole disk.chunks per directory. 0 when the tier is off. `note` as for
// HostTierBytes. InvalidArgument when that is less than one chunk per directory;
// FailedPrecondition when the file system cannot be asked. Blocks on the file system.
absl::StatusOr<uint64_t> DiskTierBytes(const Config& config, std::string* note = nullptr);

// Removes a socket file at `path` that no process listens on (left by a killed daemon).
// FailedPrecondition when `path` is not a socket, another process answers on it, or it cannot be
// removed. Blocks on a connect to it.
absl::Status ClearStaleSocket(const std::string& path);

}  // namespace kvtier::kvtierd

#endif  // KVTIER_DAEMON_KVTIERD_STARTUP_CHECKS_H_
