// DevicePool: CUDA IPC pools.
#include "daemon/dataplane/gpu_pages.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/annotate.h"
#include "kernels/device.h"

namespace kvtier::dataplane {

absl::StatusOr<std::unique_ptr<DevicePool>> DevicePool::Open(const std::string& pool_name,
                                                             const CudaIpcMemory& memory,
                                                             uint32_t slots, uint64_t slot_bytes) {
  if (!kernels::BuiltWithCuda()) {
    return absl::UnimplementedError(absl::StrFormat(
        "pool '%s': this kvtierd was built without CUDA and cannot map CUDA IPC pools", pool_name));
  }
  if (memory.handle.size() != kernels::kIpcHandleBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "pool '%s': cuda_ipc.handle has %d bytes, not 64", pool_name, memory.handle.size()));
  }
  if (memory.device_uuid.size() != 16) {
    return absl::InvalidArgumentError(
        absl::StrFormat("pool '%s': cuda_ipc.device_uuid has %d bytes, not 16", pool_name,
                        memory.device_uuid.size()));
  }
  if (slots == 0)
    return absl::InvalidArgumentError(absl::StrFormat("pool '%s': 0 slots", pool_name));
  if (static_cast<unsigned __int128>(slots) * slot_bytes > memory.size_bytes) {
    return absl::FailedPreconditionError(
        absl::StrFormat("pool '%s': size_bytes %d is below %d slots of %d bytes", pool_name,
                        memory.size_bytes, slots, slot_bytes));
  }
  absl::StatusOr<int> device = kernels::DeviceByUuid(memory.device_uuid);
  if (!device.ok()) {
    return absl::FailedPreconditionError(absl::StrFormat("pool '%s' (engine device %d): %s",
                                                         pool_name, memory.device_ordinal,
                                                         device.status().message()));
  }
  absl::StatusOr<void*> mapping = kernels::OpenIpcMemory(*device, memory.handle);
  if (!mapping.ok()) {
    return Annotate(mapping.status(), absl::StrCat("pool '", pool_name, "'"));
  }
  // The pool must lie inside the allocation the handle names: otherwise Offload would read and
  // Onboard write whatever else this process has mapped on the device.
  absl::StatusOr<uint64_t> available = kernels::AllocationBytesFrom(*mapping);
  if (!available.ok() || memory.base_offset_bytes > *available ||
      memory.size_bytes > *available - memory.base_offset_bytes) {
    kernels::CloseIpcMemory(*mapping);
    return absl::InvalidArgumentError(absl::StrFormat(
        "pool '%s': base_offset_bytes %d + size_bytes %d exceed the shared allocation (%s)",
        pool_name, memory.base_offset_bytes, memory.size_bytes,
        available.ok() ? absl::StrCat(*available, " bytes") : available.status().message()));
  }
  std::unique_ptr<DevicePool> pool(new DevicePool());
  pool->mapping_ = *mapping;
  pool->base_ = static_cast<uint8_t*>(*mapping) + memory.base_offset_bytes;
  pool->device_ = *device;
  pool->slots_ = slots;
  pool->slot_bytes_ = slot_bytes;
  return pool;
}

DevicePool::~DevicePool() { kernels::CloseIpcMemory(mapping_); }

}  // namespace kvtier::dataplane
