// CUDA runtime queries behind kernels/device.h. Returns cudaError_t values as int so the
// wrapper in device_cuda.cc needs no CUDA headers.
#include <cuda.h>
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
  std::memcpy(info->uuid, prop.uuid.bytes, sizeof(info->uuid));
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

int SetDevice(int ordinal) { return static_cast<int>(cudaSetDevice(ordinal)); }

int MallocDevice(void** ptr, uint64_t bytes) { return static_cast<int>(cudaMalloc(ptr, bytes)); }

int FreeDevice(void* ptr) { return static_cast<int>(cudaFree(ptr)); }

int CopyAsync(void* dst, const void* src, uint64_t bytes, void* stream) {
  return static_cast<int>(
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, static_cast<cudaStream_t>(stream)));
}

int SynchronizeStream(void* stream) {
  return static_cast<int>(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
}

int CreateEvent(void** event) {
  cudaEvent_t e = nullptr;
  cudaError_t err = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
  *event = e;
  return static_cast<int>(err);
}

int RecordEvent(void* event, void* stream) {
  return static_cast<int>(
      cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(stream)));
}

int WaitEvent(void* stream, void* event) {
  return static_cast<int>(
      cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), static_cast<cudaEvent_t>(event), 0));
}

int ZeroAsync(void* ptr, uint64_t bytes, void* stream) {
  return static_cast<int>(cudaMemsetAsync(ptr, 0, bytes, static_cast<cudaStream_t>(stream)));
}

int CurrentDevice(int* ordinal) { return static_cast<int>(cudaGetDevice(ordinal)); }

int InDeviceMemory(const void* ptr, int* device_memory) {
  cudaPointerAttributes attributes{};
  *device_memory = 0;
  if (cudaPointerGetAttributes(&attributes, ptr) != cudaSuccess) {
    (void)cudaGetLastError();  // not a CUDA address: host memory
    return 0;
  }
  *device_memory =
      attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged;
  return 0;
}

int SynchronizeEvent(void* event) {
  return static_cast<int>(cudaEventSynchronize(static_cast<cudaEvent_t>(event)));
}

int DestroyEvent(void* event) {
  return static_cast<int>(cudaEventDestroy(static_cast<cudaEvent_t>(event)));
}

int StreamCapturing(void* stream, int* capturing) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  cudaError_t err = cudaStreamIsCapturing(static_cast<cudaStream_t>(stream), &status);
  *capturing = status == cudaStreamCaptureStatusActive ? 1 : 0;
  return static_cast<int>(err);
}

int CreateStream(void** stream) {
  cudaStream_t s = nullptr;
  cudaError_t err = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  *stream = s;
  return static_cast<int>(err);
}

int DestroyStream(void* stream) {
  return static_cast<int>(cudaStreamDestroy(static_cast<cudaStream_t>(stream)));
}

void* PerThreadStream() { return static_cast<void*>(cudaStreamPerThread); }

int HostPointerUsable(int ordinal, int* value) {
  *value = 0;
  return static_cast<int>(
      cudaDeviceGetAttribute(value, cudaDevAttrCanUseHostPointerForRegisteredMem, ordinal));
}

int IpcExport(void* ptr, unsigned char* handle) {
  cudaIpcMemHandle_t h;
  cudaError_t err = cudaIpcGetMemHandle(&h, ptr);
  if (err == cudaSuccess) std::memcpy(handle, &h, sizeof(h));
  return static_cast<int>(err);
}

int IpcOpen(const unsigned char* handle, void** ptr) {
  cudaIpcMemHandle_t h;
  std::memcpy(&h, handle, sizeof(h));
  return static_cast<int>(cudaIpcOpenMemHandle(ptr, h, cudaIpcMemLazyEnablePeerAccess));
}

int IpcClose(void* ptr) { return static_cast<int>(cudaIpcCloseMemHandle(ptr)); }

int AllocationRange(void* ptr, uint64_t* base, uint64_t* size) {
  using GetRange = CUresult(CUDAAPI*)(CUdeviceptr*, size_t*, CUdeviceptr);
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  cudaError_t err = cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 12000,
                                                     cudaEnableDefault, &found);
  if (err != cudaSuccess) return static_cast<int>(err);
  if (fn == nullptr || found != cudaDriverEntryPointSuccess) {
    return static_cast<int>(cudaErrorNotSupported);
  }
  CUdeviceptr b = 0;
  size_t n = 0;
  const CUresult r = reinterpret_cast<GetRange>(fn)(&b, &n, reinterpret_cast<CUdeviceptr>(ptr));
  if (r != CUDA_SUCCESS) return 10000 + static_cast<int>(r);
  *base = static_cast<uint64_t>(b);
  *size = static_cast<uint64_t>(n);
  return 0;
}

static_assert(sizeof(cudaIpcMemHandle_t) == 64, "the contract's IPC handles are 64 bytes");

const char* ErrorString(int error) { return cudaGetErrorString(static_cast<cudaError_t>(error)); }

}  // namespace kvtier::kernels::internal
