// `kvtier-bench route`: a routing simulation over a fleet of two real kvtierd nodes that publish
// KV events: the example engine's synthetic agentic sessions under round-robin routing and under
// prefix routing (tools/router/kv_router.py), in the same run. Single entry point; not
// thread-safe (runs once per process).
#ifndef KVTIER_TOOLS_BENCH_ROUTE_BENCH_H_
#define KVTIER_TOOLS_BENCH_ROUTE_BENCH_H_

#include "common/cli/command_line.h"

namespace kvtier::bench {

// Declares the subcommand's flags and help on `command`.
void DeclareRouteBenchFlags(cli::Command& command);

// Runs the simulation. `values` are its parsed flags (--help lists them). Starts two kvtierd
// child processes per policy and stops them (SIGTERM) before returning. Prints a table, or JSON
// with --json, on stdout and progress on stderr. Returns 0 on success, 1 on an error (a daemon,
// the router, the engine, a page mismatch or a hook error), 2 on a usage error. Blocks for the
// whole run.
int RunRouteBench(const cli::Values& values);

}  // namespace kvtier::bench

#endif  // KVTIER_TOOLS_BENCH_ROUTE_BENCH_H_
