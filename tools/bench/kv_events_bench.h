// `kvtier-bench kv-events`: what publishing KV events (docs/KV_EVENTS.md) adds to an Offload RPC:
// two real kvtierd processes that differ only in kv_events.enabled, one with a real subscriber
// draining its PUB socket, offloaded into in alternating runs, paced and as fast as possible.
// Single entry point; not thread-safe (runs once per process).
#ifndef KVTIER_TOOLS_BENCH_KV_EVENTS_BENCH_H_
#define KVTIER_TOOLS_BENCH_KV_EVENTS_BENCH_H_

#include "common/cli/command_line.h"

namespace kvtier::bench {

// Declares the subcommand's flags and help on `command`.
void DeclareKvEventsBenchFlags(cli::Command& command);

// Runs the benchmark. `values` are its parsed flags (--help lists them). Starts both kvtierd
// processes and the subscriber (`kvtierctl watch --format=vllm`) as child processes and stops them
// before returning. Prints a table, or JSON with --json, on stdout and progress on stderr. Returns
// 0 on success, 1 on an error (a daemon, the subscriber, an RPC, an item that was not stored, or a
// subscriber that received nothing), 2 on a usage error. Blocks for the whole run.
int RunKvEventsBench(const cli::Values& values);

}  // namespace kvtier::bench

#endif  // KVTIER_TOOLS_BENCH_KV_EVENTS_BENCH_H_
