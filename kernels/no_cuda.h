// Internal: the one error every kernels function returns in a build without CUDA (the *_no_cuda.cc
// sources, which CMake compiles instead of the CUDA ones), so that callers see one message.
#ifndef KVTIER_KERNELS_NO_CUDA_H_
#define KVTIER_KERNELS_NO_CUDA_H_

#include "absl/status/status.h"

namespace kvtier::kernels::internal {

inline absl::Status BuiltWithoutCudaError() {
  return absl::UnimplementedError("kvtier was built without CUDA (KVTIER_CUDA=OFF or no nvcc)");
}

}  // namespace kvtier::kernels::internal

#endif  // KVTIER_KERNELS_NO_CUDA_H_
