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
  unsigned char uuid[16];
};

// Returns a cudaError_t value (0 on success) and the device count.
int QueryDeviceCount(int* count);
// Returns a cudaError_t value; fills `info` for device `ordinal`.
int QueryDevice(int ordinal, RawDeviceInfo* info);
// cudaHostRegister(ptr, bytes, portable | mapped); returns a cudaError_t value.
int RegisterHost(void* ptr, uint64_t bytes);
// cudaHostUnregister(ptr); returns a cudaError_t value.
int UnregisterHost(void* ptr);
// cudaSetDevice for the calling thread.
int SetDevice(int ordinal);
// cudaMalloc on the current device.
int MallocDevice(void** ptr, uint64_t bytes);
// cudaFree.
int FreeDevice(void* ptr);
// cudaMemcpyAsync(cudaMemcpyDefault) on `stream` (a cudaStream_t).
int CopyAsync(void* dst, const void* src, uint64_t bytes, void* stream);
// cudaStreamSynchronize.
int SynchronizeStream(void* stream);
// cudaStreamCreateWithFlags(non-blocking) on the current device.
int CreateStream(void** stream);
// cudaStreamDestroy.
int DestroyStream(void* stream);
// cudaEventCreateWithFlags(disable timing) on the current device.
int CreateEvent(void** event);
// cudaEventRecord(event, stream).
int RecordEvent(void* event, void* stream);
// cudaStreamWaitEvent(stream, event): later work on `stream` waits for the event's last record.
int WaitEvent(void* stream, void* event);
// cudaMemsetAsync(ptr, 0, bytes, stream).
int ZeroAsync(void* ptr, uint64_t bytes, void* stream);
// cudaGetDevice.
int CurrentDevice(int* ordinal);
// *device_memory = 1 when `ptr` is device (or managed) memory, 0 for host memory of any kind.
int InDeviceMemory(const void* ptr, int* device_memory);
// cudaEventSynchronize.
int SynchronizeEvent(void* event);
// cudaEventDestroy.
int DestroyEvent(void* event);
// cudaStreamIsCapturing: *capturing = 1 while `stream` is being captured into a graph.
int StreamCapturing(void* stream, int* capturing);
// cudaStreamPerThread as a void*.
void* PerThreadStream();
// cudaDevAttrCanUseHostPointerForRegisteredMem of device `ordinal` into *value.
int HostPointerUsable(int ordinal, int* value);
// cudaIpcGetMemHandle(ptr) into 64 bytes at `handle`.
int IpcExport(void* ptr, unsigned char* handle);
// cudaIpcOpenMemHandle(64 bytes at `handle`, lazy peer access) on the current device.
int IpcOpen(const unsigned char* handle, void** ptr);
// cudaIpcCloseMemHandle.
int IpcClose(void* ptr);
// cuMemGetAddressRange through the runtime's driver entry point (no libcuda link): the base and
// size of the allocation that contains `ptr`. Returns a cudaError_t value, or 10000 + the CUresult
// when the driver call fails.
int AllocationRange(void* ptr, uint64_t* base, uint64_t* size);
// The CUDA runtime's description of an error code.
const char* ErrorString(int error);

}  // namespace kvtier::kernels::internal

#endif  // KVTIER_KERNELS_DEVICE_QUERY_H_
