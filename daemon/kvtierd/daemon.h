// The kvtierd process: opens the event log and the store from a Config, serves the gRPC services
// on the configured Unix socket and optional TCP (TLS) listener (with server reflection) and the
// metrics endpoint, and handles signals: SIGTERM and SIGINT drain and stop (event streams end,
// in-flight requests finish within shutdown_grace_seconds, the index is flushed), SIGHUP reloads
// the settings that are safe to change while running (log.level, log.format). Under systemd it
// speaks the sd_notify protocol (READY=1 once every listener is up, RELOADING=1, STOPPING=1,
// WATCHDOG=1 while the store is healthy) and serves a socket-activated Unix socket ($LISTEN_FDS)
// instead of binding server.socket.
#ifndef KVTIER_DAEMON_KVTIERD_DAEMON_H_
#define KVTIER_DAEMON_KVTIERD_DAEMON_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "daemon/config/config.h"

namespace kvtier::kvtierd {

// What Run needs besides the config: where it came from, to reload it on SIGHUP.
struct ConfigSource {
  std::string file;
  std::vector<std::string> overrides;
};

// Blocks SIGTERM, SIGINT and SIGHUP in the calling thread (call before any thread starts, so that
// every thread inherits the mask and Run's sigwait receives them).
void BlockShutdownSignals();

// What `kvtierd --version` prints: build_info::VersionText, and whether this kernel grants an
// io_uring (io::UringAvailable). Blocks for the ring's two system calls.
std::string VersionText();

// Runs the daemon until SIGTERM or SIGINT. Returns the error that kept it from starting (the
// store's, the socket's) or from stopping cleanly. Reads and unsets the systemd environment
// (NOTIFY_SOCKET, WATCHDOG_USEC, WATCHDOG_PID, LISTEN_FDS, LISTEN_PID, LISTEN_FDNAMES).
// REQUIRES: called before any other thread starts.
absl::Status Run(const Config& config, const ConfigSource& source);

// kvtierd --repair-index: takes the state directory's lock (so no daemon may run on it), repairs
// the index at <state_dir>/index (index::RepairRocksDbBlockIndex) and returns one line saying what
// was done: repaired, or moved aside so that the next start begins with an empty index.
// FailedPrecondition while a daemon runs on the state directory; the repair's errors otherwise.
absl::StatusOr<std::string> RepairIndex(const Config& config);

}  // namespace kvtier::kvtierd

#endif  // KVTIER_DAEMON_KVTIERD_DAEMON_H_
