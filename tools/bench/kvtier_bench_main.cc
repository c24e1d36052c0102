// kvtier-bench: end-to-end benchmarks, one subcommand each. Add a subcommand with one line in
// kSubcommands (and its source in tools/bench/CMakeLists.txt).
//
// Usage: kvtier-bench <subcommand> [flags]   (kvtier-bench <subcommand> --help for its flags)
#include <cstdio>
#include <cstring>

#include "tools/bench/disk_bench.h"
#include "tools/bench/e2e_bench.h"
#include "tools/bench/fairness_bench.h"
#include "tools/bench/index_bench.h"
#include "tools/bench/kernels_subcommand.h"
#include "tools/bench/lookup_bench.h"

namespace {

struct Subcommand {
  const char* name;
  const char* summary;
  int (*run)(int argc, char** argv);  // argv[0] is the subcommand name
};

constexpr Subcommand kSubcommands[] = {
    {"disk", "block file I/O (io_uring / thread pool) against fio on the same file",
     kvtier::bench::RunDiskBench},
    {"index", "the store's index: recovery of N disk blocks, lookups/s, chain latency vs MultiGet",
     kvtier::bench::RunIndexBench},
    {"lookup", "Lookup RPC latency of a kvtierd child process over its Unix socket, vs Hello",
     kvtier::bench::RunLookupBench},
    {"fairness", "a small request's latency while other engines run 4096-page batches, vs unloaded",
     kvtier::bench::RunFairnessBench},
    {"e2e", "GPU pages through kvtierd: offload and onboard with nvfp4 vs raw (CUDA IPC pools)",
     kvtier::bench::RunE2eBench},
    {"kernels", "fused nvfp4 offload/onboard on the GPU vs cudaMemcpyAsync, raw copy, unfused",
     kvtier::bench::RunKernelsBench},
};

void PrintUsage(std::FILE* out) {
  std::fprintf(out, "Usage: kvtier-bench <subcommand> [flags]\n\nSubcommands:\n");
  for (const Subcommand& s : kSubcommands) std::fprintf(out, "  %-10s %s\n", s.name, s.summary);
  std::fprintf(out, "\n'kvtier-bench <subcommand> --help' lists the flags of a subcommand.\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0 ||
      std::strcmp(argv[1], "help") == 0) {
    PrintUsage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  for (const Subcommand& s : kSubcommands) {
    if (std::strcmp(argv[1], s.name) == 0) return s.run(argc - 1, argv + 1);
  }
  std::fprintf(stderr, "kvtier-bench: unknown subcommand '%s'\n\n", argv[1]);
  PrintUsage(stderr);
  return 2;
}
