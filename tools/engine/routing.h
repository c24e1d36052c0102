// Prefix routing for the example engine's fleet: PrefixRouter hashes a prompt's full pages the way
// the cold-page method keys them (BlockHasher over the fleet's hash root), reduces each key to the
// 64-bit hash that kvtierd's KV events carry (docs/KV_EVENTS.md, "Hashes"), and asks a router
// child process (RouterProcess) which node holds the longest prefix. NamespaceHashRoot reads that
// root on a node. Not thread-safe: the engine's one thread asks.
#ifndef KVTIER_TOOLS_ENGINE_ROUTING_H_
#define KVTIER_TOOLS_ENGINE_ROUTING_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "kvtier/block_hasher.h"
#include "kvtier/client.h"
#include "kvtier/compression.h"
#include "kvtier/layout.h"
#include "tools/engine/router_process.h"

namespace kvtier::engine {

// How the engine spreads sessions over its nodes. A session's first turn is routed; its later
// turns (tool-call resumes of state parked on a node) stay on that node.
enum class RoutePolicy {
  kRoundRobin,  // session i to node i mod N
  kPrefix,      // to the node a router names from the nodes' KV events
};

// The 64-bit hash a KV event carries for block key `key`: bytes 0-7 big-endian for a key whose
// bytes 8 and up are zero (an engine's own short key), else the last 8 bytes big-endian.
uint64_t KvEventBlockHash(std::string_view key);

// The hash root (BlockHasher's) of the namespace the cold-page method `cold_page` registers for
// `model` and `layout` on the daemon behind `client`: read by registering a short-lived engine
// with the same tenant, partition and codec over a one-page host pool in `pool_dir`, then
// unregistering it. The pool's, RegisterEngine's and Unregister's errors. `client` is borrowed
// for the call.
absl::StatusOr<std::string> NamespaceHashRoot(Client& client, const CompressionConfig& cold_page,
                                              const std::string& model, const PageLayout& layout,
                                              const std::string& pool_dir);

class PrefixRouter {
 public:
  // Starts the router `command` (RouterProcess::Start) for a fleet of `nodes`.
  static absl::StatusOr<std::unique_ptr<PrefixRouter>> Create(const std::string& command,
                                                              BlockHasher hasher, size_t nodes);

  // The node for a prompt of `tokens`: the pages the cold-page method would look up (the full
  // pages before the last token), hashed and asked of the router. RouterProcess's errors.
  absl::StatusOr<RouteAnswer> Choose(std::span<const uint32_t> tokens);

  RouterProcess& process() { return *process_; }

 private:
  PrefixRouter(std::unique_ptr<RouterProcess> process, BlockHasher hasher, size_t nodes)
      : process_(std::move(process)), hasher_(std::move(hasher)), nodes_(nodes) {}
  std::unique_ptr<RouterProcess> process_;
  BlockHasher hasher_;
  size_t nodes_;
};

}  // namespace kvtier::engine

#endif  // KVTIER_TOOLS_ENGINE_ROUTING_H_
