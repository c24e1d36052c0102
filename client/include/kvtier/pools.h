// Registration helpers: the memory an engine shares with kvtierd for its KV pools. A host pool is a
// shared-memory file (under the daemon's pools.allowed_dirs, /dev/shm by default) mapped by both
// processes; a GPU pool is a cudaMalloc allocation exported as a CUDA IPC handle. PoolRegistration
// describes either to RegisterEngine. SharedMemoryPool and DevicePool own their memory; they are
// thread-compatible (the bytes are the engine's to synchronise with its own work).
#ifndef KVTIER_CLIENT_INCLUDE_KVTIER_POOLS_H_
#define KVTIER_CLIENT_INCLUDE_KVTIER_POOLS_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kvtier/layout.h"

namespace kvtier {

// One pool of an engine, as RegisterEngine sends it (kvtier.v1.PoolRegistration). Exactly one of
// shared_memory and cuda_ipc is set.
struct PoolRegistration {
  std::string name;  // a pool name of the layout
  uint32_t slots = 0;
  struct SharedMemory {
    std::string path;      // a file path, or
    std::string shm_name;  // a POSIX shared-memory name ("/name", under /dev/shm)
    uint64_t offset_bytes = 0;
    uint64_t size_bytes = 0;  // 0: slots x slot_bytes
  };
  struct CudaIpc {
    std::string handle;       // 64 bytes of cudaIpcMemHandle_t
    std::string device_uuid;  // 16 bytes
    uint32_t device_ordinal = 0;
    uint64_t base_offset_bytes = 0;  // pool start within the exported allocation
    uint64_t size_bytes = 0;
  };
  std::optional<SharedMemory> shared_memory;
  std::optional<CudaIpc> cuda_ipc;
};

// A host pool in a shared-memory file: created at construction (a file already at the path is
// unlinked first, so a daemon still mapping it keeps its pages), mapped read-write,
// unmapped and removed at destruction.
class SharedMemoryPool {
 public:
  // Creates `path` (mode 0660: the owner and the file's group, e.g. a setgid pool directory's
  // group that the daemon's user belongs to) holding slots x slot_bytes zero bytes and maps it.
  // InvalidArgument for zero slots or slot_bytes; for a failed system call, a message naming the
  // call, the path and the errno ("open '/dev/shm/p': No such file or directory (ENOENT)") as
  // NotFound (ENOENT, ENOTDIR: no such directory), PermissionDenied (EACCES, EPERM) or Internal.
  static absl::StatusOr<std::unique_ptr<SharedMemoryPool>> Create(const std::string& path,
                                                                  std::string name, uint32_t slots,
                                                                  uint64_t slot_bytes);
  ~SharedMemoryPool();
  SharedMemoryPool(const SharedMemoryPool&) = delete;
  SharedMemoryPool& operator=(const SharedMemoryPool&) = delete;

  uint8_t* data() const { return base_; }
  uint8_t* slot(uint32_t index) const { return base_ + index * slot_bytes_; }
  uint64_t size_bytes() const { return uint64_t{slots_} * slot_bytes_; }
  uint64_t slot_bytes() const { return slot_bytes_; }
  uint32_t slots() const { return slots_; }
  const std::string& path() const { return path_; }
  PoolRegistration Registration() const;

 private:
  SharedMemoryPool(std::string path, std::string name, uint32_t slots, uint64_t slot_bytes,
                   uint8_t* base)
      : path_(std::move(path)),
        name_(std::move(name)),
        slots_(slots),
        slot_bytes_(slot_bytes),
        base_(base) {}
  std::string path_;
  std::string name_;
  uint32_t slots_;
  uint64_t slot_bytes_;
  uint8_t* base_;
};

// One SharedMemoryPool per pool of `layout`, each "<dir>/<prefix>.<pool name>" with `slots` slots.
absl::StatusOr<std::vector<std::unique_ptr<SharedMemoryPool>>> CreateSharedMemoryPools(
    const PageLayout& layout, const std::string& dir, const std::string& prefix, uint32_t slots);

// A GPU pool: slots x slot_bytes of device memory on `device`, exported through CUDA IPC.
class DevicePool {
 public:
  // Unimplemented in builds without CUDA; Unavailable when the device does not exist or the
  // allocation fails (the message has CUDA's text).
  static absl::StatusOr<std::unique_ptr<DevicePool>> Create(int device, std::string name,
                                                            uint32_t slots, uint64_t slot_bytes);
  ~DevicePool();
  DevicePool(const DevicePool&) = delete;
  DevicePool& operator=(const DevicePool&) = delete;

  void* data() const { return base_; }  // device pointer
  void* slot(uint32_t index) const { return static_cast<uint8_t*>(base_) + index * slot_bytes_; }
  uint64_t size_bytes() const { return uint64_t{slots_} * slot_bytes_; }
  uint64_t slot_bytes() const { return slot_bytes_; }
  uint32_t slots() const { return slots_; }
  int device() const { return device_; }
  const PoolRegistration& Registration() const { return registration_; }

 private:
  DevicePool() = default;
  int device_ = 0;
  uint32_t slots_ = 0;
  uint64_t slot_bytes_ = 0;
  void* base_ = nullptr;
  PoolRegistration registration_;
};

// Describes `size_bytes` of device memory on `device` starting `offset_bytes` after `pointer`
// as pool `name` of `slots` slots. `pointer` may lie anywhere inside a cudaMalloc allocation (a
// tensor of a framework's caching allocator): the registration names the whole allocation and
// the pool's offset in it. Unimplemented without CUDA; InvalidArgument when the pointer is in no
// device allocation or the pool does not fit in the allocation.
absl::StatusOr<PoolRegistration> ExportCudaPool(std::string name, uint32_t slots, int device,
                                                void* pointer, uint64_t offset_bytes,
                                                uint64_t size_bytes);

// True when this libkvtier was built with CUDA and sees at least one device.
bool CudaAvailable();

}  // namespace kvtier

#endif  // KVTIER_CLIENT_INCLUDE_KVTIER_POOLS_H_
