// The example engine's core: a KV pool, a workload replayed in arrival order, and the compression
// framework's hooks (kvtier/compression.h) as the only way the engine uses kvtier. Split from the
// command line (example_engine_main.cc) so tests can run it with methods of their own. Blocks for
// the whole replay; not thread-safe.
#ifndef KVTIER_TOOLS_ENGINE_REPLAY_H_
#define KVTIER_TOOLS_ENGINE_REPLAY_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kvtier/client.h"
#include "kvtier/compression.h"
#include "kvtier/layout.h"
#include "tools/engine/routing.h"
#include "tools/engine/trace.h"

namespace kvtier::engine {

// What the replay counts.
struct Report {
  uint64_t sessions = 0, turns = 0;
  uint64_t prompt_tokens = 0;   // tokens of first-turn prompts (prefix-cacheable)
  uint64_t cached_tokens = 0;   // of those, restored by OnRequestStart
  uint64_t prefill_tokens = 0;  // tokens computed (prompt misses and tool results)
  uint64_t generated_tokens = 0;
  uint64_t pages_checked = 0, page_mismatches = 0;
  uint64_t resumes = 0, resumed_pages_checked = 0, resume_mismatches = 0, recomputed_tokens = 0;
  uint64_t evicted_tokens = 0;  // removed by a decode-time method (TriAttention)
  uint64_t hook_errors = 0;
  std::string first_error;
  std::vector<uint64_t> sessions_per_node;  // sessions whose first turn went to each node
  uint64_t routed_pages = 0;  // prefix routing: pages the router said the chosen node held
};

struct EngineRunOptions {
  std::string socket;  // kvtierd, for the daemon's counters (methods get theirs from configs)
  // A fleet instead: each node has its pool and methods there (each quantization_for_cold_page
  // config pointed at that daemon); counters are summed. Empty: socket.
  std::vector<std::string> sockets;
  // Which node serves a session (all its turns): round-robin (session i on node i mod N), or
  // prefix: the router started with `router_command` (tools/router/kv_router.py, subscribed to
  // the nodes' KV events, node i its i-th) names the node whose cache holds the longest prefix of
  // the session's prompt. Prefix routing needs a quantization_for_cold_page config (its keys).
  RoutePolicy route = RoutePolicy::kRoundRobin;
  std::string router_command;
  std::vector<Session> sessions;
  std::optional<PageLayout> layout;  // required
  int device = -1;  // KV pool in GPU memory on this device; < 0: a shared-memory file
  std::string pool_dir = "/dev/shm";
  std::string model;
  // The methods, chained in this order. A quantization_for_cold_page config without a
  // daemon_socket gets `socket`.
  std::vector<CompressionConfig> configs;
  bool quiet = false;
};

struct EngineRunResult {
  Report report;
  std::vector<std::string> methods;  // names, in order
  std::string codec;                 // the cold-page method's codec ("raw" without one)
  uint32_t slots = 0;
  uint64_t page_bytes = 0;
  bool device_pool = false;
  // Daemon counters over the run (differences of Stats).
  std::map<Tier, uint64_t> hits_by_tier;
  uint64_t hot_bytes_offloaded = 0, cold_bytes_offloaded = 0;
  uint64_t hot_bytes_onboarded = 0, cold_bytes_onboarded = 0;
  std::string router_stats;  // prefix routing: the router's answer to "stats" after the replay
  uint64_t mismatches() const { return report.page_mismatches + report.resume_mismatches; }
};

// Creates the pool and the methods, replays the sessions, and returns what happened. Errors: those
// of the pool, the configs (CreateCompressionMethod), the daemon's Stats, a KV pool too small
// for a session, and with prefix routing InvalidArgument without a router command or a
// cold-page config, and the router's (routing.h); hook errors are counted in the report, not
// returned.
absl::StatusOr<EngineRunResult> RunEngine(const EngineRunOptions& options);

}  // namespace kvtier::engine

#endif  // KVTIER_TOOLS_ENGINE_REPLAY_H_
