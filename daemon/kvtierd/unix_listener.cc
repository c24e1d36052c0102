// Why an accept loop: grpc 1.51's ServerBuilder only binds addresses itself; the one way to give
// it a socket from outside is an already-connected fd (grpc_server_add_channel_from_fd), which
// gets the same chttp2 transport, channel arguments (message size limits) and shutdown (GOAWAY
// from Server::Shutdown) as a connection its own listener accepts. Owning the accept also gives
// kvtierd the connecting process (SO_PEERCRED), which gRPC does not expose: EngineInfo.pid. The
// peer address reads "fd:N" for these connections instead of "unix:PATH"; authentication is by
// token metadata, not by the connection. Only Unix sockets are accepted: the channel is insecure,
// as gRPC's own Unix listener is.
#include "daemon/kvtierd/unix_listener.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
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

absl::StatusOr<int> UnixListener::Bind(const std::string& path) {
  sockaddr_un addr{};
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "server.socket %s: a Unix socket path has 1 to %d bytes", path, sizeof(addr.sun_path) - 1));
  }
  // Bound and listening under a temporary name first, then renamed into place: a client that
  // sees the path can connect (a socket file that exists but does not listen yet would refuse it,
  // and libkvtier fails at once on a refused connection). Where the temporary name does not fit
  // sun_path, the socket is bound at `path` itself.
  std::string bound = absl::StrFormat("%s.%d.tmp", path, getpid());
  if (bound.size() >= sizeof(addr.sun_path)) bound = path;
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, bound.data(), bound.size());
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrFormat("cannot listen on unix:%s: socket: %s", path, std::strerror(errno)));
  }
  unlink(bound.c_str());  // a temporary name left by a kvtierd killed here with the same pid
  const char* step = "bind";
  bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  if (ok) {
    step = "chmod";  // group access for engines in the daemon's group, before anyone can connect
    ok = chmod(bound.c_str(), 0660) == 0;
  }
  if (ok) {
    step = "listen";
    ok = listen(fd, SOMAXCONN) == 0;
  }
  if (ok && bound != path) {
    step = "rename";
    ok = rename(bound.c_str(), path.c_str()) == 0;
  }
  if (!ok) {
    const int err = errno;
    close(fd);
    if (std::strcmp(step, "bind") != 0) unlink(bound.c_str());
    return absl::UnavailableError(
        absl::StrFormat("cannot listen on unix:%s: %s: %s", path, step, std::strerror(err)));
  }
  return fd;
}

absl::StatusOr<std::unique_ptr<UnixListener>> UnixListener::Start(int listen_fd,
                                                                  grpc::Server* server,
                                                                  service::PeerCredentials* peers,
                                                                  const std::string& path) {
  std::unique_ptr<UnixListener> l(new UnixListener());
  l->listen_fd_ = listen_fd;  // closed by the destructor from here on
  l->server_ = server;
  l->peers_ = peers;
  const int domain = SocketOption(listen_fd, SO_DOMAIN);
  const int type = SocketOption(listen_fd, SO_TYPE);
  const int listening = SocketOption(listen_fd, SO_ACCEPTCONN);
  if (domain != AF_UNIX || type != SOCK_STREAM || listening != 1) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "fd %d is not a listening Unix stream socket (domain %d, type %d, "
        "listening %d); kvtierd takes only ListenStream=/path sockets (TCP: tcp.listen)",
        listen_fd, domain, type, listening));
  }
  sockaddr_un addr{};
  socklen_t len = sizeof(addr);
  if (!path.empty()) {
    l->path_ = path;
  } else if (getsockname(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0 &&
             len > offsetof(sockaddr_un, sun_path)) {
    const size_t n = len - offsetof(sockaddr_un, sun_path);
    if (addr.sun_path[0] == '\0') {
      l->path_.assign(1, '@');  // an abstract socket
      l->path_.append(addr.sun_path + 1, n - 1);
    } else {
      l->path_ = std::string(addr.sun_path, strnlen(addr.sun_path, n));
    }
  }
  const int flags = fcntl(listen_fd, F_GETFL);
  if (flags < 0 || fcntl(listen_fd, F_SETFL, flags | O_NONBLOCK) != 0 ||
      pipe2(l->wake_fd_, O_CLOEXEC) != 0) {
    return absl::FailedPreconditionError(
        absl::StrFormat("unix listener: fd %d: %s", listen_fd, std::strerror(errno)));
  }
  l->thread_ = std::thread([raw = l.get()] { raw->Loop(); });
  return l;
}

UnixListener::~UnixListener() {
  if (thread_.joinable()) {
    const char byte = 0;
    (void)!write(wake_fd_[1], &byte, 1);
    thread_.join();
  }
  for (int fd : {listen_fd_, wake_fd_[0], wake_fd_[1]}) {
    if (fd >= 0) close(fd);
  }
}

void UnixListener::Loop() {
  pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_[0], POLLIN, 0}};
  while (true) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      KVTIER_LOG(kError, "unix listener: poll: ", std::strerror(errno), "; not accepting");
      return;
    }
    if (fds[1].revents != 0) return;
    if (fds[0].revents & (POLLERR | POLLHUP | POLLNVAL)) {  // no spinning on a broken socket
      KVTIER_LOG(kError, "unix listener on ", path_, ": the listening socket reports an error");
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    // Non-blocking and close-on-exec, as gRPC's own listener makes its connections.
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      const int err = errno;
      if (err == EAGAIN || err == EINTR || err == ECONNABORTED) continue;
      if (err == EBADF || err == EINVAL || err == ENOTSOCK) {  // the socket itself is gone
        KVTIER_LOG(kError, "accept on ", path_, ": ", std::strerror(err), "; not accepting");
        return;
      }
      // Out of descriptors or memory, or a refusal by the kernel or a security module: the next
      // connection may succeed. Back off and keep serving.
      KVTIER_LOG(kWarning, "accept on ", path_, ": ", std::strerror(err));
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    if (peers_ != nullptr) {  // before gRPC has the fd: once it does, the number may be reused
      ucred cred{};
      socklen_t cred_len = sizeof(cred);
      const bool known = getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cred_len) == 0;
      peers_->Accepted(fd, known ? static_cast<int32_t>(cred.pid) : 0);
    }
    grpc::AddInsecureChannelFromFd(server_, fd);  // takes the fd
  }
}

}  // namespace kvtier::kvtierd
