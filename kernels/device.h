// GPU discovery for the kernels module: which CUDA devices this process can use. The public API
// has no CUDA types; builds without CUDA return Unimplemented. Thread-safe.
#ifndef KVTIER_KERNELS_DEVICE_H_
#define KVTIER_KERNELS_DEVICE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kvtier::kernels {

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int sm_major = 0;  // compute capability
  int sm_minor = 0;
  uint64_t memory_bytes = 0;
  bool can_map_host_memory = false;  // mapped pinned host memory, needed by the fused kernels
};

// True when this build contains the CUDA kernels (KVTIER_CUDA found nvcc).
bool BuiltWithCuda();

// Lists the CUDA devices. Unimplemented when built without CUDA; Unavailable (with the CUDA
// runtime's message) when there is no usable device or driver. Blocks on the CUDA runtime.
absl::StatusOr<std::vector<DeviceInfo>> ListDevices();

}  // namespace kvtier::kernels

#endif  // KVTIER_KERNELS_DEVICE_H_
