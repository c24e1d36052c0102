// Internal: the CUDA side of device discovery, with plain types only (no Abseil in .cu files).
#ifndef KVTIER_KERNELS_DEVICE_QUERY_H_
#define KVTIER_KERNELS_DEVICE_QUERY_H_

#include <cstdint>

namespace kvtier::kernels::internal {

struct RawDeviceInfo {
  char name[256];
  int sm_major;
  int sm_minor;
  uint64_t memory_bytes;
  int can_map_host_memory;
};

// Returns a cudaError_t value (0 on success) and the device count.
int QueryDeviceCount(int* count);
// Returns a cudaError_t value; fills `info` for device `ordinal`.
int QueryDevice(int ordinal, RawDeviceInfo* info);
// cudaHostRegister(ptr, bytes, portable | mapped); returns a cudaError_t value.
int RegisterHost(void* ptr, uint64_t bytes);
// cudaHostUnregister(ptr); returns a cudaError_t value.
int UnregisterHost(void* ptr);
// The CUDA runtime's description of an error code.
const char* ErrorString(int error);

}  // namespace kvtier::kernels::internal

#endif  // KVTIER_KERNELS_DEVICE_QUERY_H_
