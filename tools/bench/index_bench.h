// `kvtier-bench index`: the block store's index at scale: recovery of N disk blocks after a
// restart, single-core hash lookups per second, and whole-chain lookup latency, each next to the
// durable index's RocksDB MultiGet of the same keys as the baseline.
#ifndef KVTIER_TOOLS_BENCH_INDEX_BENCH_H_
#define KVTIER_TOOLS_BENCH_INDEX_BENCH_H_

#include "common/cli/command_line.h"

namespace kvtier::bench {

// Declares the subcommand's flags and help on `command`.
void DeclareIndexBenchFlags(cli::Command& command);

// Runs the index benchmark with its parsed flags. Returns the process exit status (2 on a usage
// error).
int RunIndexBench(const cli::Values& values);

}  // namespace kvtier::bench

#endif  // KVTIER_TOOLS_BENCH_INDEX_BENCH_H_
