// ActivatedUnixListener: serves gRPC on a listening Unix socket that kvtierd did not bind itself
// (systemd socket activation). gRPC 1.51 cannot adopt a listening socket, so a thread accepts the
// connections and hands each to the server as an insecure channel (grpc::AddInsecureChannelFromFd).
// Thread-safe; one thread.
#ifndef KVTIER_DAEMON_KVTIERD_ACTIVATED_LISTENER_H_
#define KVTIER_DAEMON_KVTIERD_ACTIVATED_LISTENER_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "grpcpp/server.h"

namespace kvtier::kvtierd {

class ActivatedUnixListener {
 public:
  // Checks that `listen_fd` is a listening AF_UNIX stream socket (FailedPrecondition naming what
  // it is otherwise: a TCP socket would bypass tcp.listen's TLS), makes it non-blocking and starts
  // accepting. Takes ownership of `listen_fd` (closed also on error); borrows `server`, which must
  // be started and outlive the listener.
  static absl::StatusOr<std::unique_ptr<ActivatedUnixListener>> Start(int listen_fd,
                                                                      grpc::Server* server);

  // Stops accepting and closes the fd. Connections already handed over stay with the server;
  // those not accepted yet wait in the socket's backlog (held by systemd) for the next start.
  ~ActivatedUnixListener();

  // The socket's path ("@name" for an abstract socket).
  const std::string& path() const { return path_; }

 private:
  ActivatedUnixListener() = default;
  void Loop();

  int listen_fd_ = -1;
  int wake_fd_[2] = {-1, -1};
  std::string path_;
  grpc::Server* server_ = nullptr;
  std::thread thread_;
};

}  // namespace kvtier::kvtierd

#endif  // KVTIER_DAEMON_KVTIERD_ACTIVATED_LISTENER_H_
