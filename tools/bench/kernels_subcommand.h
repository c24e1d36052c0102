// `kvtier-bench kernels`: fused NVFP4 offload and onboard of whole batches of pages on the GPU,
// next to baselines measured in the same run (cudaMemcpyAsync of the same hot bytes, the batched
// raw copy kernel, the unfused encode-then-copy path). Single entry point; not thread-safe.
#ifndef KVTIER_TOOLS_BENCH_KERNELS_SUBCOMMAND_H_
#define KVTIER_TOOLS_BENCH_KERNELS_SUBCOMMAND_H_

#include "common/cli/command_line.h"

namespace kvtier::bench {

// Declares the subcommand's flags and help on `command`.
void DeclareKernelsBenchFlags(cli::Command& command);

// Runs the kernels benchmark with its parsed flags (--help lists them). Prints a table, or JSON
// with --json, on stdout. Returns 0 on success and when there is nothing to measure (a build
// without CUDA, no usable GPU: it says so on stderr), 1 on a CUDA error, 2 on a usage error. Blocks
// for the whole run.
int RunKernelsBench(const cli::Values& values);

}  // namespace kvtier::bench

#endif  // KVTIER_TOOLS_BENCH_KERNELS_SUBCOMMAND_H_
