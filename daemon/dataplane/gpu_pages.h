// The GPU side of the data plane: engine pools in GPU memory shared through CUDA IPC
// (DevicePool). kernels::GpuBlockCodec moves whole pages between such a pool and cold blocks in
// the daemon's CUDA-pinned host tier.
#ifndef KVTIER_DAEMON_DATAPLANE_GPU_PAGES_H_
#define KVTIER_DAEMON_DATAPLANE_GPU_PAGES_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kvtier::dataplane {

// An engine's GPU allocation shared through CUDA IPC (the contract's CudaIpcMemory, which
// proto_convert.h converts): the 64-byte handle, the device's 16-byte UUID and the engine's
// ordinal for messages, and the range of the allocation that holds the pages.
struct CudaIpcMemory {
  std::string handle;
  std::string device_uuid;
  uint32_t device_ordinal = 0;
  uint64_t base_offset_bytes = 0;
  uint64_t size_bytes = 0;
};

class DevicePool {
 public:
  // Opens the engine's allocation on the device with the pool's UUID. InvalidArgument (naming the
  // pool) for a handle or UUID of the wrong size, a size below slots * slot_bytes, or a handle CUDA
  // rejects; FailedPrecondition when this process does not see the device; Unimplemented without
  // CUDA.
  static absl::StatusOr<std::unique_ptr<DevicePool>> Open(const std::string& pool_name,
                                                          const CudaIpcMemory& memory,
                                                          uint32_t slots, uint64_t slot_bytes);
  ~DevicePool();
  DevicePool(const DevicePool&) = delete;
  DevicePool& operator=(const DevicePool&) = delete;

  int device() const { return device_; }
  uint32_t slots() const { return slots_; }
  // REQUIRES: index < slots().
  uint8_t* slot(uint32_t index) const { return base_ + uint64_t{index} * slot_bytes_; }

 private:
  DevicePool() = default;
  void* mapping_ = nullptr;
  uint8_t* base_ = nullptr;
  int device_ = 0;
  uint32_t slots_ = 0;
  uint64_t slot_bytes_ = 0;
};

}  // namespace kvtier::dataplane

#endif  // KVTIER_DAEMON_DATAPLANE_GPU_PAGES_H_
