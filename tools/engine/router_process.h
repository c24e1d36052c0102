// RouterProcess: a KV-aware router as a child process (tools/router/kv_router.py or any program
// that speaks its protocol), asked one line at a time over a pipe: "route <hex64> ..." with a
// prompt's full-page hashes answers "<node> <matched pages>". The engine's routing policy
// (replay.cc) owns one. Not thread-safe: one thread asks; every call blocks until the router
// answers.
#ifndef KVTIER_TOOLS_ENGINE_ROUTER_PROCESS_H_
#define KVTIER_TOOLS_ENGINE_ROUTER_PROCESS_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "absl/status/statusor.h"

namespace kvtier::engine {

struct RouteAnswer {
  size_t node = 0;
  uint64_t matched_pages = 0;  // the consecutive prefix of the hashes the node holds
};

class RouterProcess {
 public:
  // Runs `command` with /bin/sh -c, its stdin and stdout piped to this process (stderr
  // inherited). Internal when the pipes or the process cannot be made.
  static absl::StatusOr<std::unique_ptr<RouterProcess>> Start(const std::string& command);

  // Sends "quit", closes the pipes and reaps the child (SIGKILL after 5 s).
  ~RouterProcess();
  RouterProcess(const RouterProcess&) = delete;
  RouterProcess& operator=(const RouterProcess&) = delete;

  // The router's choice for a prompt whose full pages hash (64-bit, as KV events carry them) to
  // `hashes`, in order. Unavailable when the router exited or closed its output; Internal when
  // its answer is not "<node> <pages>", or names a node not below `nodes`.
  absl::StatusOr<RouteAnswer> Route(std::span<const uint64_t> hashes, size_t nodes);

  // One request line, one answer line (e.g. "stats"). Unavailable as Route.
  absl::StatusOr<std::string> Ask(const std::string& line);

 private:
  RouterProcess(pid_t pid, int to_child, int from_child)
      : pid_(pid), to_child_(to_child), from_child_(from_child) {}
  absl::StatusOr<std::string> ReadLine();

  pid_t pid_;
  int to_child_;
  int from_child_;
  std::string buffered_;  // read past the last line
};

}  // namespace kvtier::engine

#endif  // KVTIER_TOOLS_ENGINE_ROUTER_PROCESS_H_
