// Device discovery: wraps the CUDA runtime queries of device_query.cu into absl::Status, or
// reports Unimplemented in builds without CUDA (KVTIER_WITH_CUDA undefined).
#include "kernels/device.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

#if KVTIER_WITH_CUDA
#include "kernels/device_query.h"
#endif

namespace kvtier::kernels {

bool BuiltWithCuda() { return KVTIER_WITH_CUDA != 0; }

absl::StatusOr<std::vector<DeviceInfo>> ListDevices() {
#if KVTIER_WITH_CUDA
  int count = 0;
  if (int err = internal::QueryDeviceCount(&count); err != 0) {
    return absl::UnavailableError(
        absl::StrCat("no usable CUDA device: ", internal::ErrorString(err), " (error ", err, ")"));
  }
  std::vector<DeviceInfo> devices;
  for (int i = 0; i < count; ++i) {
    internal::RawDeviceInfo raw;
    if (int err = internal::QueryDevice(i, &raw); err != 0) {
      return absl::UnavailableError(
          absl::StrCat("CUDA device ", i, ": ", internal::ErrorString(err), " (error ", err, ")"));
    }
    devices.push_back(DeviceInfo{i, raw.name, raw.sm_major, raw.sm_minor, raw.memory_bytes,
                                 raw.can_map_host_memory != 0});
  }
  return devices;
#else
  return absl::UnimplementedError("kvtier was built without CUDA (KVTIER_CUDA=OFF or no nvcc)");
#endif
}

absl::Status PinHostMemory(void* ptr, uint64_t bytes) {
#if KVTIER_WITH_CUDA
  if (int err = internal::RegisterHost(ptr, bytes); err != 0) {
    return absl::UnavailableError(
        absl::StrFormat("cudaHostRegister of %d bytes at %p failed: %s (error %d)", bytes, ptr,
                        internal::ErrorString(err), err));
  }
  return absl::OkStatus();
#else
  (void)ptr;
  (void)bytes;
  return absl::UnimplementedError("kvtier was built without CUDA (KVTIER_CUDA=OFF or no nvcc)");
#endif
}

absl::Status UnpinHostMemory(void* ptr) {
#if KVTIER_WITH_CUDA
  if (int err = internal::UnregisterHost(ptr); err != 0) {
    return absl::InternalError(absl::StrFormat("cudaHostUnregister at %p failed: %s (error %d)",
                                               ptr, internal::ErrorString(err), err));
  }
  return absl::OkStatus();
#else
  (void)ptr;
  return absl::UnimplementedError("kvtier was built without CUDA (KVTIER_CUDA=OFF or no nvcc)");
#endif
}

}  // namespace kvtier::kernels
