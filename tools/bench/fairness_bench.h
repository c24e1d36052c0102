// `kvtier-bench fairness`: how long a small request of one engine (Lookup of 64 hashes, Onboard of
// one page) takes while other engines keep kvtierd's workers busy with 4096-page Offload and
// Onboard batches, against the same probe with no bulk load, in alternating phases of one run;
// optionally for a baseline daemon binary too, in the same run.
// Single entry point; not thread-safe (runs once per process).
#ifndef KVTIER_TOOLS_BENCH_FAIRNESS_BENCH_H_
#define KVTIER_TOOLS_BENCH_FAIRNESS_BENCH_H_

#include "common/cli/command_line.h"

namespace kvtier::bench {

// Declares the subcommand's flags and help on `command`.
void DeclareFairnessBenchFlags(cli::Command& command);

// Runs the fairness benchmark. `values` are its parsed flags (--help lists them). Starts kvtierd
// (and, with --baseline-kvtierd, a second daemon measured the same way in alternating rounds) as a
// child process and stops it (SIGTERM) before returning. Prints a table, or JSON with --json, on
// stdout and progress on stderr. Returns 0 on success, 1 on an error (the daemon, an RPC, or a
// probe that missed its pinned blocks), 2 on a usage error. Blocks for the whole run.
int RunFairnessBench(const cli::Values& values);

}  // namespace kvtier::bench

#endif  // KVTIER_TOOLS_BENCH_FAIRNESS_BENCH_H_
