// Registration helpers (kvtier/pools.h): shared-memory files mapped read-write, and device
// allocations exported through CUDA IPC with the kernels library (which answers Unimplemented in
// builds without CUDA).
#include "kvtier/pools.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "codec/page_layout.h"
#include "common/errno_text.h"
#include "kernels/device.h"

namespace kvtier {

absl::StatusOr<std::unique_ptr<SharedMemoryPool>> SharedMemoryPool::Create(const std::string& path,
                                                                           std::string name,
                                                                           uint32_t slots,
                                                                           uint64_t slot_bytes) {
  if (slots == 0 || slot_bytes == 0) {
    return absl::InvalidArgumentError(absl::StrCat("shared-memory pool '", name, "': ", slots,
                                                   " slots of ", slot_bytes, " bytes"));
  }
  const uint64_t bytes = uint64_t{slots} * slot_bytes;
  // A new file (a new inode) even where one exists: a daemon may still map the old one (an engine
  // restarted before its lease ended), and truncating that would pull its pages away.
  if (unlink(path.c_str()) != 0 && errno != ENOENT)
    return ErrnoStatus(errno, absl::StrCat("unlink '", path, "'"));
  // Owner and group may read and write (fchmod: the umask would take the group's write away), so
  // that a daemon running as another user of the file's group (a setgid pool directory's group,
  // deploy/) can map it; others get nothing.
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0660);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("open '", path, "'"));
  if (fchmod(fd, 0660) != 0) {
    const absl::Status st = ErrnoStatus(errno, absl::StrCat("fchmod '", path, "'"));
    close(fd);
    unlink(path.c_str());
    return st;
  }
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const absl::Status st = ErrnoStatus(errno, absl::StrCat("ftruncate '", path, "'"));
    close(fd);
    unlink(path.c_str());
    return st;
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int mmap_errno = errno;  // before close() may change it
  close(fd);
  if (base == MAP_FAILED) {
    unlink(path.c_str());
    return ErrnoStatus(mmap_errno, absl::StrCat("mmap '", path, "'"));
  }
  return std::unique_ptr<SharedMemoryPool>(
      new SharedMemoryPool(path, std::move(name), slots, slot_bytes, static_cast<uint8_t*>(base)));
}

SharedMemoryPool::~SharedMemoryPool() {
  munmap(base_, size_bytes());
  unlink(path_.c_str());
}

PoolRegistration SharedMemoryPool::Registration() const {
  PoolRegistration r;
  r.name = name_;
  r.slots = slots_;
  r.shared_memory.emplace();
  r.shared_memory->path = path_;
  r.shared_memory->size_bytes = size_bytes();
  return r;
}

absl::StatusOr<std::vector<std::unique_ptr<SharedMemoryPool>>> CreateSharedMemoryPools(
    const PageLayout& layout, const std::string& dir, const std::string& prefix, uint32_t slots) {
  std::vector<std::unique_ptr<SharedMemoryPool>> pools;
  for (const PoolInfo& p : layout.pools()) {
    absl::StatusOr<std::unique_ptr<SharedMemoryPool>> pool = SharedMemoryPool::Create(
        absl::StrCat(dir, "/", prefix, ".", p.name), p.name, slots, p.slot_bytes);
    if (!pool.ok()) return pool.status();
    pools.push_back(*std::move(pool));
  }
  return pools;
}

bool CudaAvailable() {
  if (!kernels::BuiltWithCuda()) return false;
  absl::StatusOr<std::vector<kernels::DeviceInfo>> devices = kernels::ListDevices();
  return devices.ok() && !devices->empty();
}

absl::StatusOr<PoolRegistration> ExportCudaPool(std::string name, uint32_t slots, int device,
                                                void* pointer, uint64_t offset_bytes,
                                                uint64_t size_bytes) {
  absl::StatusOr<std::vector<kernels::DeviceInfo>> devices = kernels::ListDevices();
  if (!devices.ok()) return devices.status();
  if (device < 0 || device >= static_cast<int>(devices->size())) {
    return absl::InvalidArgumentError(absl::StrCat("CUDA pool '", name, "': device ", device,
                                                   " does not exist (", devices->size(),
                                                   " devices)"));
  }
  // The IPC handle names the whole cudaMalloc allocation; the daemon maps its start and adds
  // base_offset_bytes, so a pointer inside an allocation (a tensor of a caching allocator) is
  // exported as its allocation plus an offset.
  absl::StatusOr<kernels::DeviceAllocation> allocation = kernels::AllocationOf(pointer);
  if (!allocation.ok()) return allocation.status();
  const uint64_t start = reinterpret_cast<uintptr_t>(pointer) -
                         reinterpret_cast<uintptr_t>(allocation->base) + offset_bytes;
  if (start > allocation->bytes || size_bytes > allocation->bytes - start) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA pool '", name, "': ", size_bytes, " bytes at offset ", start,
                     " of its allocation do not fit in it (", allocation->bytes, " bytes)"));
  }
  absl::StatusOr<std::string> handle = kernels::ExportIpcMemory(allocation->base);
  if (!handle.ok()) return handle.status();
  PoolRegistration r;
  r.name = std::move(name);
  r.slots = slots;
  r.cuda_ipc.emplace();
  r.cuda_ipc->handle = *std::move(handle);
  r.cuda_ipc->device_uuid = (*devices)[static_cast<size_t>(device)].uuid;
  r.cuda_ipc->device_ordinal = static_cast<uint32_t>(device);
  r.cuda_ipc->base_offset_bytes = start;
  r.cuda_ipc->size_bytes = size_bytes;
  return r;
}

absl::StatusOr<std::unique_ptr<DevicePool>> DevicePool::Create(int device, std::string name,
                                                               uint32_t slots,
                                                               uint64_t slot_bytes) {
  if (slots == 0 || slot_bytes == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA pool '", name, "': ", slots, " slots of ", slot_bytes, " bytes"));
  }
  const uint64_t bytes = uint64_t{slots} * slot_bytes;
  absl::StatusOr<void*> base = kernels::AllocateDeviceMemory(device, bytes);
  if (!base.ok()) return base.status();
  std::unique_ptr<DevicePool> pool(new DevicePool());
  pool->device_ = device;
  pool->slots_ = slots;
  pool->slot_bytes_ = slot_bytes;
  pool->base_ = *base;
  absl::StatusOr<PoolRegistration> reg =
      ExportCudaPool(std::move(name), slots, device, *base, 0, bytes);
  if (!reg.ok()) return reg.status();  // the destructor frees the allocation
  pool->registration_ = *std::move(reg);
  return pool;
}

DevicePool::~DevicePool() {
  if (base_ != nullptr) kernels::FreeDeviceMemory(base_);
}

}  // namespace kvtier
