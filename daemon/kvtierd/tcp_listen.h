// TCP listen addresses of kvtierd's configuration (metrics.listen, tcp.listen): binding a
// listening socket, shared by the start-up checks and the metrics endpoint (parsing "host:port" is
// the configuration's, daemon/config/host_port.h). Stateless; thread-safe.
#ifndef KVTIER_DAEMON_KVTIERD_TCP_LISTEN_H_
#define KVTIER_DAEMON_KVTIERD_TCP_LISTEN_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kvtier::kvtierd {

// A TCP socket bound to `address` ("host:port"; port 0: any free port; ":port": every address)
// and listening, with SO_REUSEADDR; the first of the host's addresses that binds. The
// caller owns the descriptor. `field` names the configuration field in messages. InvalidArgument
// for an address that is not host:port or does not resolve; Unavailable when no address binds
// ("metrics.listen: cannot listen on 127.0.0.1:9464: Address already in use (EADDRINUSE)").
// Does not block (name resolution aside).
absl::StatusOr<int> ListenTcp(absl::string_view field, const std::string& address);

}  // namespace kvtier::kvtierd

#endif  // KVTIER_DAEMON_KVTIERD_TCP_LISTEN_H_
