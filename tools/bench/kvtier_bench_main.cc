// kvtier-bench: end-to-end benchmarks, one subcommand each. Add a subcommand with one line in
// kSubcommands (its flags' declaration and its entry point; its source in
// tools/bench/CMakeLists.txt).
//
// Usage: kvtier-bench <subcommand> [flags]   (kvtier-bench <subcommand> --help for its flags)
#include <optional>

#include "common/cli/command_line.h"
#include "tools/bench/cluster_bench.h"
#include "tools/bench/disk_bench.h"
#include "tools/bench/e2e_bench.h"
#include "tools/bench/fairness_bench.h"
#include "tools/bench/index_bench.h"
#include "tools/bench/kernels_subcommand.h"
#include "tools/bench/kv_events_bench.h"
#include "tools/bench/lookup_bench.h"
#include "tools/bench/route_bench.h"

namespace {

struct Subcommand {
  const char* name;
  const char* summary;
  void (*declare)(kvtier::cli::Command& command);
  int (*run)(const kvtier::cli::Values& values);
};

constexpr Subcommand kSubcommands[] = {
    {"disk", "block file I/O (io_uring / thread pool) against fio on the same file",
     kvtier::bench::DeclareDiskBenchFlags, kvtier::bench::RunDiskBench},
    {"index", "the store's index: recovery of N disk blocks, lookups/s, chain latency vs MultiGet",
     kvtier::bench::DeclareIndexBenchFlags, kvtier::bench::RunIndexBench},
    {"lookup", "Lookup RPC latency of a kvtierd child process over its Unix socket, vs Hello",
     kvtier::bench::DeclareLookupBenchFlags, kvtier::bench::RunLookupBench},
    {"fairness", "a small request's latency while other engines run 4096-page batches, vs unloaded",
     kvtier::bench::DeclareFairnessBenchFlags, kvtier::bench::RunFairnessBench},
    {"e2e", "GPU pages through kvtierd: offload and onboard with nvfp4 vs raw (CUDA IPC pools)",
     kvtier::bench::DeclareE2eBenchFlags, kvtier::bench::RunE2eBench},
    {"cluster", "cluster tier: RADOS object Put/Get of cold blocks vs rados bench, chain Exists",
     kvtier::bench::DeclareClusterBenchFlags, kvtier::bench::RunClusterBench},
    {"kv-events", "Offload time with kv_events on (a subscriber draining it) vs off, paced and max",
     kvtier::bench::DeclareKvEventsBenchFlags, kvtier::bench::RunKvEventsBench},
    {"kernels", "fused nvfp4 offload/onboard on the GPU vs cudaMemcpyAsync, raw copy, unfused",
     kvtier::bench::DeclareKernelsBenchFlags, kvtier::bench::RunKernelsBench},
    {"route", "two kvtierd nodes publishing KV events: prefix routing vs round-robin, same run",
     kvtier::bench::DeclareRouteBenchFlags, kvtier::bench::RunRouteBench},
};

}  // namespace

int main(int argc, char** argv) {
  kvtier::cli::CommandLine command_line("kvtier-bench");
  for (const Subcommand& s : kSubcommands) {
    s.declare(command_line.root().AddSubcommand(s.name, s.summary));
  }
  kvtier::cli::Values values;
  if (std::optional<int> exit_status = command_line.Parse(argc, argv, &values)) {
    return *exit_status;
  }
  for (const Subcommand& s : kSubcommands) {
    if (values.command() == s.name) return s.run(values);
  }
  return values.PrintUsageError("no command");
}
