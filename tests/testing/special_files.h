// Files that are not regular, for tests of code that reads user-named files: a FIFO (mkfifo) and
// a Unix socket bound to a path, plus CallGuardingFifo, which runs a call that is given a FIFO on a
// thread of its own and, should the call block on it (opening a FIFO for reading waits for a
// writer), unblocks it by opening the FIFO for writing once `timeout` has passed, so that a
// regression fails the test instead of hanging it. Header-only; thread-compatible.
#ifndef KVTIER_TESTS_TESTING_SPECIAL_FILES_H_
#define KVTIER_TESTS_TESTING_SPECIAL_FILES_H_

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <future>
#include <optional>
#include <string>
#include <utility>

namespace kvtier::testing {

// Creates a FIFO at `path` (mode 0600). False when mkfifo fails.
inline bool MakeFifo(const std::string& path) { return ::mkfifo(path.c_str(), 0600) == 0; }

// A Unix stream socket bound to `path` (which then exists as a socket file); the caller closes
// the descriptor. -1 on failure.
inline int BindUnixSocket(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Runs `call()` and returns its result, or nullopt when it did not return within `timeout`; then
// the FIFO at `fifo` is opened for writing and closed, which ends a blocked open or read of it,
// and the call's thread is joined before returning (its result is discarded).
template <typename F>
auto CallGuardingFifo(const std::string& fifo, F call,
                      std::chrono::milliseconds timeout = std::chrono::seconds(10))
    -> std::optional<decltype(call())> {
  std::future<decltype(call())> result = std::async(std::launch::async, std::move(call));
  if (result.wait_for(timeout) == std::future_status::ready) return result.get();
  while (result.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready) {
    const int writer = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (writer >= 0) ::close(writer);
  }
  static_cast<void>(result.get());  // the blocked call's late result is of no use
  return std::nullopt;
}

}  // namespace kvtier::testing

#endif  // KVTIER_TESTS_TESTING_SPECIAL_FILES_H_
