// PeerCredentials: the process ids of the peers of kvtierd's Unix-socket connections, by the name
// gRPC gives such a connection. kvtierd accepts Unix connections itself (kvtierd's UnixListener)
// and hands each to gRPC as an fd, so gRPC names the peer "fd:N"; the accept loop records the
// connecting process's pid (SO_PEERCRED, taken at connect) under N before handing the fd over, and
// RegisterEngine reads it for EngineInfo.pid. A number is recorded again when the kernel reuses
// it for a later connection, so a live connection always finds its own peer. Thread-safe.
#ifndef KVTIER_DAEMON_SERVICE_PEER_CREDENTIALS_H_
#define KVTIER_DAEMON_SERVICE_PEER_CREDENTIALS_H_

#include <cstdint>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"

namespace kvtier::service {

class PeerCredentials {
 public:
  // Connection `fd` (accepted, not yet handed to gRPC) comes from process `pid`.
  void Accepted(int fd, int32_t pid) {
    absl::MutexLock lock(&mu_);
    pids_[fd] = pid;
  }
  // The pid of the peer gRPC names `peer`: "fd:N" of a connection Accepted recorded; 0 for any
  // other peer (TCP connections, "unix:" ones gRPC accepted itself).
  int32_t PidOf(absl::string_view peer) const {
    int fd = -1;
    if (!absl::ConsumePrefix(&peer, "fd:") || !absl::SimpleAtoi(peer, &fd)) return 0;
    absl::MutexLock lock(&mu_);
    auto it = pids_.find(fd);
    return it == pids_.end() ? 0 : it->second;
  }

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<int, int32_t> pids_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvtier::service

#endif  // KVTIER_DAEMON_SERVICE_PEER_CREDENTIALS_H_
