// Internal: the last step of EnqueueTriRound and EnqueueKvCompaction (kv_round.cc), after their
// host checks. CMake compiles one of two definitions: kv_round_cuda.cc launches the kernels of
// kv_round.cu and turns the CUDA error into a status; kv_round_no_cuda.cc, in builds without CUDA,
// returns Unimplemented.
#ifndef KVTIER_KERNELS_KV_ROUND_START_H_
#define KVTIER_KERNELS_KV_ROUND_START_H_

#include "absl/status/status.h"
#include "kernels/kv_round_launch.h"

namespace kvtier::kernels::internal {

// Enqueues the round on `stream`; Internal with the CUDA error when the launch fails.
absl::Status StartTriRound(const TriRoundArgs& args, void* stream);

// Enqueues the compaction on `stream`; Internal with the CUDA error when the launch fails.
absl::Status StartKvCompaction(const CompactionArgs& args, void* stream);

}  // namespace kvtier::kernels::internal

#endif  // KVTIER_KERNELS_KV_ROUND_START_H_
