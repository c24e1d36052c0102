// The device API in a build without CUDA (CMake compiles this file instead of device_cuda.cc):
// there is no device, so every call that needs one is Unimplemented and the calls that cannot fail
// do nothing.
#include "kernels/device.h"
#include "kernels/no_cuda.h"

namespace kvtier::kernels {

bool BuiltWithCuda() { return false; }

absl::StatusOr<std::vector<DeviceInfo>> ListDevices() { return internal::BuiltWithoutCudaError(); }

absl::Status PinHostMemory(void*, uint64_t) { return internal::BuiltWithoutCudaError(); }

absl::Status UnpinHostMemory(void*) { return internal::BuiltWithoutCudaError(); }

absl::Status UseDevice(int) { return internal::BuiltWithoutCudaError(); }

absl::StatusOr<void*> AllocateDeviceMemory(int, uint64_t) {
  return internal::BuiltWithoutCudaError();
}

void FreeDeviceMemory(void*) {}

absl::StatusOr<void*> CreateStream(int) { return internal::BuiltWithoutCudaError(); }

void DestroyStream(void*) {}

void* PerThreadStream() { return nullptr; }

absl::Status CopyAsync(void*, const void*, uint64_t, void*) {
  return internal::BuiltWithoutCudaError();
}

absl::Status SynchronizeStream(void*) { return internal::BuiltWithoutCudaError(); }

absl::StatusOr<void*> CreateEvent(int) { return internal::BuiltWithoutCudaError(); }

absl::Status RecordEvent(void*, void*) { return internal::BuiltWithoutCudaError(); }

absl::Status WaitEvent(void*) { return internal::BuiltWithoutCudaError(); }

absl::Status StreamWaitEvent(void*, void*) { return internal::BuiltWithoutCudaError(); }

absl::Status ZeroDeviceMemoryAsync(void*, uint64_t, void*) {
  return internal::BuiltWithoutCudaError();
}

void DestroyEvent(void*) {}

absl::StatusOr<bool> StreamIsCapturing(void*) { return internal::BuiltWithoutCudaError(); }

absl::StatusOr<bool> HostPointersUsableOnDevice(int) { return internal::BuiltWithoutCudaError(); }

absl::StatusOr<std::string> ExportIpcMemory(void*) { return internal::BuiltWithoutCudaError(); }

absl::StatusOr<void*> OpenIpcMemory(int, absl::string_view) {
  return internal::BuiltWithoutCudaError();
}

void CloseIpcMemory(void*) {}

absl::StatusOr<uint64_t> AllocationBytesFrom(const void*) {
  return internal::BuiltWithoutCudaError();
}

absl::StatusOr<DeviceAllocation> AllocationOf(const void*) {
  return internal::BuiltWithoutCudaError();
}

// ListDevices fails, so no UUID is found: the same answer a CUDA build gives through it.
absl::StatusOr<int> DeviceByUuid(absl::string_view) { return internal::BuiltWithoutCudaError(); }

}  // namespace kvtier::kernels
