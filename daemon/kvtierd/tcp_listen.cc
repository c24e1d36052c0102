// ListenTcp (see tcp_listen.h).
#include "daemon/kvtierd/tcp_listen.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "common/errno_text.h"
#include "daemon/config/host_port.h"

namespace kvtier::kvtierd {

absl::StatusOr<int> ListenTcp(absl::string_view field, const std::string& address) {
  std::string host;
  uint32_t port = 0;
  if (!SplitHostPort(address, &host, &port, /*allow_empty_host=*/true)) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: '%s' is not host:port", field, address));
  }
  if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* result = nullptr;
  const std::string port_text = std::to_string(port);
  if (int err =
          getaddrinfo(host.empty() ? nullptr : host.c_str(), port_text.c_str(), &hints, &result);
      err != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: cannot resolve '%s': %s", field, address, gai_strerror(err)));
  }
  int listening = -1;
  int last_errno = 0;
  for (addrinfo* ai = result; ai != nullptr && listening < 0; ai = ai->ai_next) {
    const int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      last_errno = errno;
      continue;
    }
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, 16) == 0) {
      listening = fd;
    } else {
      last_errno = errno;
      close(fd);
    }
  }
  freeaddrinfo(result);
  if (listening < 0) {
    return absl::UnavailableError(
        absl::StrFormat("%s: cannot listen on %s: %s", field, address, ErrnoText(last_errno)));
  }
  return listening;
}

}  // namespace kvtier::kvtierd
