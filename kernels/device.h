// GPU discovery for the kernels module: which CUDA devices this process can use. The public API
// has no CUDA types; builds without CUDA return Unimplemented. Thread-safe.
#ifndef KVTIER_KERNELS_DEVICE_H_
#define KVTIER_KERNELS_DEVICE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kvtier::kernels {

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int sm_major = 0;  // compute capability
  int sm_minor = 0;
  uint64_t memory_bytes = 0;
  bool can_map_host_memory = false;  // mapped pinned host memory, needed by the fused kernels
  std::string uuid;                  // 16 bytes (cudaDeviceProp.uuid)
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

// ---- Device memory and streams (the daemon's GPU tier, tests, tools) ----
// Every function is Unimplemented without CUDA. Streams are cudaStream_t values passed as void*.

// Makes `device` the calling thread's current CUDA device (cudaSetDevice). InvalidArgument for
// an ordinal that does not exist; Unavailable with the runtime's message otherwise.
absl::Status UseDevice(int device);

// `bytes` of memory on `device` (which becomes the calling thread's current device).
// ResourceExhausted when the device is out of memory, Unavailable for other CUDA errors.
absl::StatusOr<void*> AllocateDeviceMemory(int device, uint64_t bytes);

// Frees memory from AllocateDeviceMemory; logs (does not fail) on a CUDA error. nullptr is fine.
void FreeDeviceMemory(void* ptr);

// A new non-blocking stream on `device` (for work that should overlap other streams' work).
// Unavailable with the CUDA error.
absl::StatusOr<void*> CreateStream(int device);
void DestroyStream(void* stream);  // logs CUDA errors; nullptr is fine

// The calling thread's own default stream (cudaStreamPerThread) on its current device: work on
// it is ordered only with the same thread's work.
void* PerThreadStream();

// Enqueues a copy of `bytes` between any two addresses the runtime knows (device memory, pinned
// or pageable host memory) on `stream`. Internal with the CUDA error.
absl::Status CopyAsync(void* dst, const void* src, uint64_t bytes, void* stream);

// Enqueues setting `bytes` of device memory at `ptr` to zero on `stream`. Internal with the CUDA
// error.
absl::Status ZeroDeviceMemoryAsync(void* ptr, uint64_t bytes, void* stream);

// Waits for all work enqueued on `stream`. Internal with the CUDA error of any failed work.
absl::Status SynchronizeStream(void* stream);

// Events (cudaEvent_t values passed as void*), without timing: a host can wait for the work a
// stream had enqueued when the event was recorded. Unimplemented without CUDA; Unavailable or
// Internal with the CUDA error.
absl::StatusOr<void*> CreateEvent(int device);
absl::Status RecordEvent(void* event, void* stream);
absl::Status WaitEvent(void* event);  // blocks the calling thread
// Later work on `stream` waits for the event's last record (cudaStreamWaitEvent; an event never
// recorded is complete). The host does not wait.
absl::Status StreamWaitEvent(void* stream, void* event);
void DestroyEvent(void* event);  // logs CUDA errors; nullptr is fine

// Whether `stream` is being captured into a CUDA graph (work enqueued now is recorded, not run).
absl::StatusOr<bool> StreamIsCapturing(void* stream);

// Whether kernels on `device` may use the host address of memory registered with
// PinHostMemory as is (true on x86-64 Linux with unified addressing). The daemon's GPU tier
// needs it to encode straight into its host tier.
absl::StatusOr<bool> HostPointersUsableOnDevice(int device);

// ---- CUDA IPC (engine pools shared with the daemon) ----

inline constexpr size_t kIpcHandleBytes = 64;

// The IPC handle (64 bytes) of the cudaMalloc allocation that starts at `ptr`. Unimplemented
// without CUDA; InvalidArgument when `ptr` is not the start of an allocation.
absl::StatusOr<std::string> ExportIpcMemory(void* ptr);

// Maps another process's allocation into this one on `device`. InvalidArgument for a handle that
// is not 64 bytes or that CUDA rejects; Unavailable for other CUDA errors. Close with
// CloseIpcMemory.
absl::StatusOr<void*> OpenIpcMemory(int device, absl::string_view handle);
void CloseIpcMemory(void* ptr);  // logs CUDA errors

// The bytes of the device allocation that contains `ptr` from `ptr` to its end (so a range
// [ptr, ptr + n) is inside one allocation iff n <= the result). InvalidArgument when `ptr` is in
// no allocation; Unimplemented without CUDA.
absl::StatusOr<uint64_t> AllocationBytesFrom(const void* ptr);

// The device allocation that contains `ptr`: its start and size (an engine's tensor usually lies
// inside a larger cudaMalloc segment of its framework's caching allocator). Same errors as
// AllocationBytesFrom.
struct DeviceAllocation {
  void* base = nullptr;
  uint64_t bytes = 0;
};
absl::StatusOr<DeviceAllocation> AllocationOf(const void* ptr);

// The ordinal of the device with this 16-byte UUID. NotFound when this process does not see it.
absl::StatusOr<int> DeviceByUuid(absl::string_view uuid);

}  // namespace kvtier::kernels

#endif  // KVTIER_KERNELS_DEVICE_H_
