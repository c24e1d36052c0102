// Internal: the CUDA side of the batched copy, with plain types only (no Abseil in .cu files).
#ifndef KVTIER_KERNELS_BATCHED_COPY_LAUNCH_H_
#define KVTIER_KERNELS_BATCHED_COPY_LAUNCH_H_

#include <cstdint>

#include "kernels/batched_copy.h"

namespace kvtier::kernels::internal {

// Launches one kernel copying spans[0, count) (count <= BatchedCopier::kSpansPerLaunch) on
// `stream` for the current device. Returns a cudaError_t value (0 on success).
int LaunchBatchedCopy(const CopySpan* spans, int count, void* stream);

}  // namespace kvtier::kernels::internal

#endif  // KVTIER_KERNELS_BATCHED_COPY_LAUNCH_H_
