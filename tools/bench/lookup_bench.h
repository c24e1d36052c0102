// `kvtier-bench lookup`: latency of the Lookup RPC of a real kvtierd process over its Unix socket,
// for chains of a few lengths that are all hits, next to the latency of a Hello RPC on the same
// channel (the transport round trip) as the baseline. Single entry point; not thread-safe (runs
// once per process).
#ifndef KVTIER_TOOLS_BENCH_LOOKUP_BENCH_H_
#define KVTIER_TOOLS_BENCH_LOOKUP_BENCH_H_

#include "common/cli/command_line.h"

namespace kvtier::bench {

// Declares the subcommand's flags and help on `command`.
void DeclareLookupBenchFlags(cli::Command& command);

// Runs the lookup benchmark. `values` are its parsed flags (--help
// lists them). Starts kvtierd as a child process and stops it (SIGTERM) before returning. Prints a
// table, or JSON with --json, on stdout and progress on stderr. Returns 0 on success, 1 on an
// error (the daemon, an RPC, or a lookup that did not hit the whole chain), 2 on a usage error.
// Blocks for the whole run.
int RunLookupBench(const cli::Values& values);

}  // namespace kvtier::bench

#endif  // KVTIER_TOOLS_BENCH_LOOKUP_BENCH_H_
