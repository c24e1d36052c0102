// "host:port" as kvtierd's configuration writes listen addresses (metrics.listen, tcp.listen):
// parsing only, so that the configuration's validation needs no sockets. Stateless; thread-safe.
#ifndef KVTIER_DAEMON_CONFIG_HOST_PORT_H_
#define KVTIER_DAEMON_CONFIG_HOST_PORT_H_

#include <cstdint>
#include <string>

namespace kvtier::kvtierd {

// Splits "host:port" or "[v6 address]:port" (the host keeps its brackets), and ":port" (an empty
// host) when `allow_empty_host`. False when `text` is none of these, or the port is not 0 to 65535.
bool SplitHostPort(const std::string& text, std::string* host, uint32_t* port,
                   bool allow_empty_host = false);

}  // namespace kvtier::kvtierd

#endif  // KVTIER_DAEMON_CONFIG_HOST_PORT_H_
