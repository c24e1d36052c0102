// `kvtier-bench cluster`: the cluster tier's object store (RadosObjectStore) against `rados bench`
// on the same Ceph pool, with the same object size and concurrency, in the same run: write and
// read throughput of cold blocks, and the latency of an Exists of a whole chain next to a local
// hash-map lookup of the same keys. Single entry point; not thread-safe (runs once per process).
#ifndef KVTIER_TOOLS_BENCH_CLUSTER_BENCH_H_
#define KVTIER_TOOLS_BENCH_CLUSTER_BENCH_H_

#include "common/cli/command_line.h"

namespace kvtier::bench {

// Declares the subcommand's flags and help on `command`.
void DeclareClusterBenchFlags(cli::Command& command);

// Runs the cluster benchmark with its parsed flags against a running cluster (for example one
// from scripts/ceph-throwaway.sh). Prints a table, or JSON with --json, on stdout and progress on
// stderr. Returns 0 on success, 1 when the cluster, `rados` or a block read back fails, 2 on a
// usage error. Blocks for the whole run.
int RunClusterBench(const cli::Values& values);

}  // namespace kvtier::bench

#endif  // KVTIER_TOOLS_BENCH_CLUSTER_BENCH_H_
