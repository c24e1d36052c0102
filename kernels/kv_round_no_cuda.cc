// kv_round_start.h in a build without CUDA: the host checks of kv_round.cc still run (they come
// first), and a round or compaction that passes them is Unimplemented.
#include "kernels/kv_round_start.h"
#include "kernels/no_cuda.h"

namespace kvtier::kernels::internal {

absl::Status StartTriRound(const TriRoundArgs&, void*) { return BuiltWithoutCudaError(); }

absl::Status StartKvCompaction(const CompactionArgs&, void*) { return BuiltWithoutCudaError(); }

}  // namespace kvtier::kernels::internal
