// The systemd service protocols, without libsystemd: SystemdNotifier sends sd_notify datagrams
// (READY=1, STOPPING=1, WATCHDOG=1, ...) to $NOTIFY_SOCKET, and ListenFds() takes the sockets
// passed by socket activation ($LISTEN_FDS, $LISTEN_PID). Both read the environment once, at
// start-up; a notifier without a socket does nothing. A SystemdNotifier is thread-safe.
#ifndef KVTIER_DAEMON_KVTIERD_SYSTEMD_NOTIFY_H_
#define KVTIER_DAEMON_KVTIERD_SYSTEMD_NOTIFY_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace kvtier::kvtierd {

class SystemdNotifier {
 public:
  // The notifier of this process: $NOTIFY_SOCKET (a path, or "@name" for the abstract namespace)
  // and the watchdog interval of $WATCHDOG_USEC, which applies when $WATCHDOG_PID is unset or is
  // this process. Unsets the three variables, so that children do not inherit them.
  // REQUIRES: no other thread reads or writes the environment (call before threads start).
  static SystemdNotifier FromEnvironment();

  SystemdNotifier() = default;  // disabled: Notify does nothing
  SystemdNotifier(std::string socket, std::optional<absl::Duration> watchdog)
      : socket_(std::move(socket)), watchdog_(watchdog) {}

  bool enabled() const { return !socket_.empty(); }
  const std::string& socket() const { return socket_; }
  // How often systemd expects WATCHDOG=1 at the latest; nullopt when there is no watchdog.
  std::optional<absl::Duration> watchdog() const { return watchdog_; }

  // Sends `state`, newline-separated assignments ("READY=1\nSTATUS=serving"), in one datagram.
  // OK without doing anything when disabled; InvalidArgument for a socket path that does not fit
  // a sockaddr_un; Unavailable (naming the socket and errno) when the send fails. Does not block
  // beyond the datagram send.
  absl::Status Notify(absl::string_view state) const;

 private:
  std::string socket_;
  std::optional<absl::Duration> watchdog_;
};

// The listening sockets passed by socket activation: fds 3, 4, ... as many as $LISTEN_FDS says,
// when $LISTEN_PID is this process (an empty list when the variables are unset or meant for
// another process). Marks the fds close-on-exec and unsets LISTEN_FDS, LISTEN_PID and
// LISTEN_FDNAMES. InvalidArgument for a malformed $LISTEN_FDS or one above 64.
// REQUIRES: as FromEnvironment.
absl::StatusOr<std::vector<int>> ListenFds();

}  // namespace kvtier::kvtierd

#endif  // KVTIER_DAEMON_KVTIERD_SYSTEMD_NOTIFY_H_
