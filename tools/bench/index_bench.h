// `kvtier-bench index`: the block store's index at scale: recovery of N disk blocks after a
// restart, single-core hash lookups per second, and whole-chain lookup latency, each next to the
// durable index's RocksDB MultiGet of the same keys as the baseline.
#ifndef KVTIER_TOOLS_BENCH_INDEX_BENCH_H_
#define KVTIER_TOOLS_BENCH_INDEX_BENCH_H_

namespace kvtier::bench {

// argv[0] is "index". Returns the process exit status.
int RunIndexBench(int argc, char** argv);

}  // namespace kvtier::bench

#endif  // KVTIER_TOOLS_BENCH_INDEX_BENCH_H_
