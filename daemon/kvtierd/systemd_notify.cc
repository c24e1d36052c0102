// sd_notify and sd_listen_fds, written out: the protocols are a datagram of text to a Unix socket
// and a few environment variables (systemd's sd_notify(3) and sd_listen_fds(3)), and kvtierd does
// not link libsystemd, so that one binary runs with and without systemd.
#include "daemon/kvtierd/systemd_notify.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"

namespace kvtier::kvtierd {
namespace {

std::string TakeEnv(const char* name) {
  const char* value = std::getenv(name);
  std::string out = value == nullptr ? "" : value;
  unsetenv(name);
  return out;
}

}  // namespace

SystemdNotifier SystemdNotifier::FromEnvironment() {
  const std::string socket = TakeEnv("NOTIFY_SOCKET");
  const std::string usec_text = TakeEnv("WATCHDOG_USEC");
  const std::string pid_text = TakeEnv("WATCHDOG_PID");
  std::optional<absl::Duration> watchdog;
  uint64_t usec = 0;
  int64_t pid = 0;
  const bool for_us = pid_text.empty() ||
                      (absl::SimpleAtoi(pid_text, &pid) && pid == static_cast<int64_t>(getpid()));
  if (for_us && absl::SimpleAtoi(usec_text, &usec) && usec > 0) {
    watchdog = absl::Microseconds(static_cast<int64_t>(usec));
  }
  return SystemdNotifier(socket, watchdog);
}

absl::Status SystemdNotifier::Notify(absl::string_view state) const {
  if (socket_.empty()) return absl::OkStatus();
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_.size() >= sizeof(addr.sun_path) || (socket_[0] != '/' && socket_[0] != '@')) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "NOTIFY_SOCKET '%s' is neither an absolute path nor an abstract name ('@...') of at most "
        "%d bytes",
        socket_, sizeof(addr.sun_path) - 1));
  }
  std::memcpy(addr.sun_path, socket_.data(), socket_.size());
  socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + socket_.size());
  if (socket_[0] == '@') {
    addr.sun_path[0] = '\0';  // abstract: the name is exactly the bytes after the '@'
  } else {
    ++len;  // the terminating NUL of a path
  }
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrFormat("sd_notify: socket: %s", std::strerror(errno)));
  }
  ssize_t sent;
  do {
    sent = sendto(fd, state.data(), state.size(), MSG_NOSIGNAL,
                  reinterpret_cast<const sockaddr*>(&addr), len);
  } while (sent < 0 && errno == EINTR);
  const int err = errno;
  close(fd);
  if (sent < 0) {
    return absl::UnavailableError(
        absl::StrFormat("sd_notify to %s: %s", socket_, std::strerror(err)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int>> ListenFds() {
  const std::string fds_text = TakeEnv("LISTEN_FDS");
  const std::string pid_text = TakeEnv("LISTEN_PID");
  TakeEnv("LISTEN_FDNAMES");
  std::vector<int> fds;
  int64_t pid = 0;
  if (fds_text.empty() || !absl::SimpleAtoi(pid_text, &pid) ||
      pid != static_cast<int64_t>(getpid())) {
    return fds;  // not socket-activated, or the variables were meant for another process
  }
  int count = 0;
  if (!absl::SimpleAtoi(fds_text, &count) || count < 0 || count > 64) {
    return absl::InvalidArgumentError(
        absl::StrFormat("LISTEN_FDS '%s' is not a count of 0 to 64 sockets", fds_text));
  }
  constexpr int kFirstFd = 3;  // SD_LISTEN_FDS_START
  for (int fd = kFirstFd; fd < kFirstFd + count; ++fd) {
    const int flags = fcntl(fd, F_GETFD);
    if (flags < 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("LISTEN_FDS=%d but fd %d is not open", count, fd));
    }
    fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
    fds.push_back(fd);
  }
  return fds;
}

}  // namespace kvtier::kvtierd
