// `kvtier-bench kernels`: fused NVFP4 offload and onboard of whole batches of pages on the GPU,
// next to baselines measured in the same run (cudaMemcpyAsync of the same hot bytes, the batched
// raw copy kernel, the unfused encode-then-copy path). Single entry point; not thread-safe.
#ifndef KVTIER_TOOLS_BENCH_KERNELS_SUBCOMMAND_H_
#define KVTIER_TOOLS_BENCH_KERNELS_SUBCOMMAND_H_

namespace kvtier::bench {

// Runs the kernels benchmark. `argv[0]` is the subcommand name ("kernels"); flags follow (--help
// lists them). Prints a table, or JSON with --json, on stdout. Returns 0 on success and when there
// is nothing to measure (a build without CUDA, no usable GPU: it says so on stderr), 1 on a CUDA
// error, 2 on a usage error. Blocks for the whole run.
int RunKernelsBench(int argc, char** argv);

}  // namespace kvtier::bench

#endif  // KVTIER_TOOLS_BENCH_KERNELS_SUBCOMMAND_H_
