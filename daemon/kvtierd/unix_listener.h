// UnixListener: serves gRPC on a listening Unix socket, one kvtierd bound itself (Bind) or one
// systemd passed (socket activation). gRPC 1.51 cannot adopt a listening socket, so a thread
// accepts the connections and hands each to the server as an insecure channel
// (grpc::AddInsecureChannelFromFd), first recording the peer's pid (SO_PEERCRED) for
// EngineInfo.pid. Thread-safe; one thread.
#ifndef KVTIER_DAEMON_KVTIERD_UNIX_LISTENER_H_
#define KVTIER_DAEMON_KVTIERD_UNIX_LISTENER_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "daemon/service/peer_credentials.h"
#include "grpcpp/server.h"

namespace kvtier::kvtierd {

class UnixListener {
 public:
  // A listening Unix stream socket at `path` (which must not exist: kvtierd clears a stale one
  // first), mode 0660 and listening before the path appears (it is bound under a temporary name
  // beside `path` and renamed), so whoever sees the path can connect; the fd, close-on-exec.
  // Unavailable naming the path and the error otherwise.
  static absl::StatusOr<int> Bind(const std::string& path);

  // Checks that `listen_fd` is a listening AF_UNIX stream socket (FailedPrecondition naming what
  // it is otherwise: a TCP socket would bypass tcp.listen's TLS), makes it non-blocking and starts
  // accepting. Takes ownership of `listen_fd` (closed also on error); borrows `server`, which must
  // be started and outlive the listener, and `peers` (may be null), which must outlive it too.
  // `path` names the socket in path() and logs; empty: the name the socket is bound to.
  static absl::StatusOr<std::unique_ptr<UnixListener>> Start(int listen_fd, grpc::Server* server,
                                                             service::PeerCredentials* peers,
                                                             const std::string& path = "");

  // Stops accepting and closes the fd. Connections already handed over stay with the server;
  // those not accepted yet are refused (a socket kvtierd bound) or wait in the socket's backlog
  // (one systemd holds) for the next start.
  ~UnixListener();

  // The socket's path ("@name" for an abstract socket).
  const std::string& path() const { return path_; }

 private:
  UnixListener() = default;
  void Loop();

  int listen_fd_ = -1;
  int wake_fd_[2] = {-1, -1};
  std::string path_;
  grpc::Server* server_ = nullptr;
  service::PeerCredentials* peers_ = nullptr;
  std::thread thread_;
};

}  // namespace kvtier::kvtierd

#endif  // KVTIER_DAEMON_KVTIERD_UNIX_LISTENER_H_
