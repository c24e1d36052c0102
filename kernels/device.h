// GPU discovery for the kernels module: which CUDA devices this process can use. The public API
// has no CUDA types; builds without CUDA return Unimplemented. Thread-safe.
#ifndef KVTIER_KERNELS_DEVICE_H_
#define KVTIER_KERNELS_DEVICE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
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

// Pins [ptr, ptr + bytes) for DMA and maps it into every device's address space
// (cudaHostRegister, portable and mapped), so that kernels may store into it. The range must stay
// mapped until UnpinHostMemory(ptr). Unimplemented without CUDA; Unavailable with the CUDA
// runtime's message otherwise (no device, out of pinnable memory). Blocks: it may take long for
// large ranges, so callers register big arenas in chunks from several threads.
absl::Status PinHostMemory(void* ptr, uint64_t bytes);

// Undoes PinHostMemory for the range that starts at `ptr`. Unimplemented without CUDA.
absl::Status UnpinHostMemory(void* ptr);

}  // namespace kvtier::kernels

#endif  // KVTIER_KERNELS_DEVICE_H_
