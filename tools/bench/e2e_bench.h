// `kvtier-bench e2e`: GPU pages end to end through a real kvtierd process: Offload from an
// engine's device pool (shared through CUDA IPC) into the daemon's CUDA-pinned host tier and
// Onboard back into the pool, with codec nvfp4 next to codec raw in the same run, and next to a
// plain cudaMemcpy of the same bytes and an empty Offload RPC as baselines. Needs a CUDA device.
// Single entry point; not thread-safe (runs once per process).
#ifndef KVTIER_TOOLS_BENCH_E2E_BENCH_H_
#define KVTIER_TOOLS_BENCH_E2E_BENCH_H_

#include "common/cli/command_line.h"

namespace kvtier::bench {

// Declares the subcommand's flags and help on `command`.
void DeclareE2eBenchFlags(cli::Command& command);

// Runs the end-to-end benchmark. `values` are its parsed flags (--help
// lists them). Starts kvtierd as a child process and stops it (SIGTERM) before returning. Prints a
// table, or JSON with --json, on stdout and progress on stderr. Returns 0 on success, 1 on an
// error (no CUDA device, the daemon, an RPC, an item that did not succeed, onboarded pages that
// fail their check), 2 on a usage error. Blocks for the whole run.
int RunE2eBench(const cli::Values& values);

}  // namespace kvtier::bench

#endif  // KVTIER_TOOLS_BENCH_E2E_BENCH_H_
