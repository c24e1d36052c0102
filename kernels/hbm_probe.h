// A read-only sweep of device memory, the baseline that GPU round benchmarks divide by: the time
// to stream `bytes` from HBM with 16-byte loads, nothing written but one word. No CUDA types.
#ifndef KVTIER_KERNELS_HBM_PROBE_H_
#define KVTIER_KERNELS_HBM_PROBE_H_

#include <cstdint>

#include "absl/status/status.h"

namespace kvtier::kernels {

// Enqueues on `stream` a kernel that reads [data, data + bytes) (16-byte aligned, bytes a
// multiple of 16) and writes one 8-byte XOR of it to `sink` (device memory). InvalidArgument for
// misaligned arguments; Internal with the CUDA error; Unimplemented without CUDA.
absl::Status EnqueueReadProbe(const void* data, uint64_t bytes, uint64_t* sink, void* stream);

}  // namespace kvtier::kernels

#endif  // KVTIER_KERNELS_HBM_PROBE_H_
