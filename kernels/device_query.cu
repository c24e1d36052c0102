// CUDA runtime queries behind kernels/device.h. Returns cudaError_t values as int so the
// wrapper in device.cc needs no CUDA headers.
#include <cuda_runtime.h>

#include <cstring>

#include "kernels/device_query.h"

namespace kvtier::kernels::internal {

int QueryDeviceCount(int* count) { return static_cast<int>(cudaGetDeviceCount(count)); }

int QueryDevice(int ordinal, RawDeviceInfo* info) {
  cudaDeviceProp prop;
  cudaError_t err = cudaGetDeviceProperties(&prop, ordinal);
  if (err != cudaSuccess) return static_cast<int>(err);
  std::memset(info, 0, sizeof(*info));
  std::strncpy(info->name, prop.name, sizeof(info->name) - 1);
  info->sm_major = prop.major;
  info->sm_minor = prop.minor;
  info->memory_bytes = prop.totalGlobalMem;
  int map = 0;
  err = cudaDeviceGetAttribute(&map, cudaDevAttrCanMapHostMemory, ordinal);
  info->can_map_host_memory = err == cudaSuccess && map != 0;
  return static_cast<int>(err);
}

int RegisterHost(void* ptr, uint64_t bytes) {
  return static_cast<int>(
      cudaHostRegister(ptr, bytes, cudaHostRegisterPortable | cudaHostRegisterMapped));
}

int UnregisterHost(void* ptr) { return static_cast<int>(cudaHostUnregister(ptr)); }

const char* ErrorString(int error) { return cudaGetErrorString(static_cast<cudaError_t>(error)); }

}  // namespace kvtier::kernels::internal
