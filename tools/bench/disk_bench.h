// `kvtier-bench disk`: throughput of the disk tier's block I/O (BlockFile) at fixed queue depths,
// next to fio on the same file with the same block size, depth and direct I/O as the baseline.
// Single entry point; not thread-safe (runs once per process). disk_bench.cc is over 800 lines
// because it holds the benchmark's one flow: flags, the file set-up, the BlockFile runs, the fio
// runs of the same shapes and the report that compares them.
#ifndef KVTIER_TOOLS_BENCH_DISK_BENCH_H_
#define KVTIER_TOOLS_BENCH_DISK_BENCH_H_

#include "common/cli/command_line.h"

namespace kvtier::bench {

// Declares the subcommand's flags and help on `command`.
void DeclareDiskBenchFlags(cli::Command& command);

// Runs the disk benchmark. `values` are its parsed flags (--help lists
// them). Prints a table, or JSON with --json, on stdout and progress on stderr. Returns 0 on
// success, 1 on an I/O error (kvtier or fio), 2 on a usage error. Blocks for the whole run.
int RunDiskBench(const cli::Values& values);

}  // namespace kvtier::bench

#endif  // KVTIER_TOOLS_BENCH_DISK_BENCH_H_
