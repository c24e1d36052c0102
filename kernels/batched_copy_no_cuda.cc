// BatchedCopier in a build without CUDA (CMake compiles this file instead of
// batched_copy_cuda.cc): no copier can be created, and waiting for a stream is Unimplemented too.
#include "kernels/batched_copy.h"
#include "kernels/no_cuda.h"

namespace kvtier::kernels {

absl::StatusOr<std::unique_ptr<BatchedCopier>> BatchedCopier::Create(int) {
  return internal::BuiltWithoutCudaError();
}

// Unreachable (Create never succeeds here), but the class needs the member.
absl::Status BatchedCopier::Enqueue(absl::Span<const CopySpan>, void*) const {
  return internal::BuiltWithoutCudaError();
}

absl::Status BatchedCopier::Synchronize(void*) { return internal::BuiltWithoutCudaError(); }

}  // namespace kvtier::kernels
