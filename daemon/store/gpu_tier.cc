// GpuTier: device memory for hot pages.
#include "daemon/store/gpu_tier.h"

#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "kernels/device.h"

namespace kvtier::store {

absl::StatusOr<std::unique_ptr<GpuTier>> GpuTier::Create(int device, uint64_t capacity_bytes,
                                                         uint64_t chunk_bytes) {
  if (!kernels::BuiltWithCuda()) {
    return absl::UnimplementedError(
        "a GPU tier was asked for, but kvtier was built without CUDA (KVTIER_CUDA=OFF or no nvcc)");
  }
  KVTIER_ASSIGN_OR_RETURN(std::vector<kernels::DeviceInfo> devices, kernels::ListDevices());
  if (device < 0 || static_cast<size_t>(device) >= devices.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "GPU tier: no CUDA device %d (this process sees %d)", device, devices.size()));
  }
  KVTIER_ASSIGN_OR_RETURN(bool host_pointers, kernels::HostPointersUsableOnDevice(device));
  if (!host_pointers) {
    return absl::UnavailableError(absl::StrFormat(
        "GPU tier: device %d (%s) cannot use registered host memory at its host address, which "
        "the fused encode into the host tier needs",
        device, devices[device].name));
  }
  KVTIER_ASSIGN_OR_RETURN(SlotAllocator slots,
                          SlotAllocator::Create(capacity_bytes, chunk_bytes, kSlotAlignment));
  KVTIER_ASSIGN_OR_RETURN(void* memory,
                          kernels::AllocateDeviceMemory(device, slots.capacity_bytes()));
  std::unique_ptr<GpuTier> tier(
      new GpuTier(device, static_cast<uint8_t*>(memory), std::move(slots)));
  for (void*& stream : tier->streams_) {
    KVTIER_ASSIGN_OR_RETURN(stream, kernels::CreateStream(device));  // the destructor frees all
  }
  return tier;
}

GpuTier::~GpuTier() {
  for (void* stream : streams_) kernels::DestroyStream(stream);
  kernels::FreeDeviceMemory(data_);
}

}  // namespace kvtier::store
