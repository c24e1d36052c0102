// BlockSealer in a build without CUDA (CMake compiles this file instead of
// block_sealer_cuda.cc): no sealer can be created.
#include "kernels/block_sealer.h"
#include "kernels/no_cuda.h"

namespace kvtier::kernels {

absl::StatusOr<std::unique_ptr<BlockSealer>> BlockSealer::Create(const codec::BlockPlan&, int,
                                                                 int) {
  return internal::BuiltWithoutCudaError();
}

BlockSealer::~BlockSealer() = default;

// Unreachable (Create never succeeds here), but the class needs the member.
uint64_t BlockSealer::ScratchBytes(int) const { return 0; }

absl::Status BlockSealer::Enqueue(uint8_t*, uint64_t, int, const int8_t*, uint32_t*, void*) const {
  return internal::BuiltWithoutCudaError();
}

}  // namespace kvtier::kernels
