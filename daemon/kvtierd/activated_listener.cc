// Why an accept loop: grpc 1.51's ServerBuilder only binds addresses itself; the one way to give
// it a socket from outside is an already-connected fd (grpc_server_add_channel_from_fd), which
// gets the same chttp2 transport, channel arguments (message size limits) and shutdown (GOAWAY
// from Server::Shutdown) as a connection its own listener accepts. Nothing in kvtierd depends on
// the peer address, which reads "fd:N" for these connections instead of "unix:PATH";
// authentication is by token metadata, not by the connection. Only Unix sockets are accepted:
// the channel is insecure, as the Unix listener is.
#include "daemon/kvtierd/activated_listener.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <thread>

#include "absl/strings/str_format.h"
#include "common/logging.h"
#include "grpcpp/server_posix.h"

namespace kvtier::kvtierd {
namespace {

int SocketOption(int fd, int option) {
  int value = -1;
  socklen_t len = sizeof(value);
  if (getsockopt(fd, SOL_SOCKET, option, &value, &len) != 0) return -1;
  return value;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ActivatedUnixListener>> ActivatedUnixListener::Start(
    int listen_fd, grpc::Server* server) {
  std::unique_ptr<ActivatedUnixListener> l(new ActivatedUnixListener());
  l->listen_fd_ = listen_fd;  // closed by the destructor from here on
  l->server_ = server;
  const int domain = SocketOption(listen_fd, SO_DOMAIN);
  const int type = SocketOption(listen_fd, SO_TYPE);
  const int listening = SocketOption(listen_fd, SO_ACCEPTCONN);
  if (domain != AF_UNIX || type != SOCK_STREAM || listening != 1) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "socket activation: fd %d is not a listening Unix stream socket (domain %d, type %d, "
        "listening %d); kvtierd takes only ListenStream=/path sockets (TCP: tcp.listen)",
        listen_fd, domain, type, listening));
  }
  sockaddr_un addr{};
  socklen_t len = sizeof(addr);
  if (getsockname(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0 &&
      len > offsetof(sockaddr_un, sun_path)) {
    const size_t n = len - offsetof(sockaddr_un, sun_path);
    if (addr.sun_path[0] == '\0') {
      l->path_ = "@" + std::string(addr.sun_path + 1, n - 1);
    } else {
      l->path_ = std::string(addr.sun_path, strnlen(addr.sun_path, n));
    }
  }
  const int flags = fcntl(listen_fd, F_GETFL);
  if (flags < 0 || fcntl(listen_fd, F_SETFL, flags | O_NONBLOCK) != 0 ||
      pipe2(l->wake_fd_, O_CLOEXEC) != 0) {
    return absl::FailedPreconditionError(
        absl::StrFormat("socket activation: fd %d: %s", listen_fd, std::strerror(errno)));
  }
  l->thread_ = std::thread([raw = l.get()] { raw->Loop(); });
  return l;
}

ActivatedUnixListener::~ActivatedUnixListener() {
  if (thread_.joinable()) {
    const char byte = 0;
    (void)!write(wake_fd_[1], &byte, 1);
    thread_.join();
  }
  for (int fd : {listen_fd_, wake_fd_[0], wake_fd_[1]}) {
    if (fd >= 0) close(fd);
  }
}

void ActivatedUnixListener::Loop() {
  pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_[0], POLLIN, 0}};
  while (true) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      KVTIER_LOG(kError, "socket activation: poll: ", std::strerror(errno), "; not accepting");
      return;
    }
    if (fds[1].revents != 0) return;
    // Non-blocking and close-on-exec, as gRPC's own listener makes its connections.
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED) continue;
      KVTIER_LOG(kWarning, "socket activation: accept on ", path_, ": ", std::strerror(errno));
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));  // let connections close
        continue;
      }
      return;
    }
    grpc::AddInsecureChannelFromFd(server_, fd);  // takes the fd
  }
}

}  // namespace kvtier::kvtierd
