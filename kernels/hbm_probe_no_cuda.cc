// The HBM read probe in a build without CUDA (CMake compiles this file instead of
// hbm_probe_cuda.cc): there is no device memory to read.
#include "kernels/hbm_probe.h"
#include "kernels/no_cuda.h"

namespace kvtier::kernels {

absl::Status EnqueueReadProbe(const void*, uint64_t, uint64_t*, void*) {
  return internal::BuiltWithoutCudaError();
}

}  // namespace kvtier::kernels
