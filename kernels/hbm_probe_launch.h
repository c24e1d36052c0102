// Internal: the CUDA side of hbm_probe.h with plain types only.
#ifndef KVTIER_KERNELS_HBM_PROBE_LAUNCH_H_
#define KVTIER_KERNELS_HBM_PROBE_LAUNCH_H_

#include <cstdint>

namespace kvtier::kernels::internal {

// Launches the read sweep on `stream`. Returns a cudaError_t value (0 on success).
int LaunchReadProbe(const void* data, uint64_t bytes, uint64_t* sink, void* stream);

}  // namespace kvtier::kernels::internal

#endif  // KVTIER_KERNELS_HBM_PROBE_LAUNCH_H_
