// HostPool: an engine's host KV pool, a shared-memory file the engine created and the daemon maps
// (MAP_SHARED) at registration: `slots` pages of `slot_bytes` each, starting `offset_bytes` into
// the file. Page indices are checked by the caller against slots() before slot() is used.
// Immutable after Map(); slot() may be called from any thread.
#ifndef KVTIER_DAEMON_SERVICE_HOST_POOL_H_
#define KVTIER_DAEMON_SERVICE_HOST_POOL_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "kvtier/v1/pool.pb.h"

namespace kvtier::service {

class HostPool {
 public:
  // Opens and maps the file. InvalidArgument (naming the pool and the value) for a path outside
  // `allowed_dirs` or not absolute, a bad shm name, an offset that is not a multiple of 4096, a
  // size below slots * slot_bytes or beyond the end of the file; NotFound when the file does not
  // exist; PermissionDenied when the daemon may not open it; Internal for other errors.
  // The file is opened beneath an allowed directory (and inside `required_subdir` of it when not
  // empty: the tenant's directory with authentication on) with no symlink on the way; files in
  // `forbidden` (device, inode: the daemon's own) are refused (PermissionDenied). A range that
  // does not hold the slots is FailedPrecondition.
  static absl::StatusOr<std::unique_ptr<HostPool>> Map(
      const std::string& pool_name, const v1::SharedMemoryFile& file, uint32_t slots,
      uint64_t slot_bytes, const std::vector<std::string>& allowed_dirs,
      const std::string& required_subdir = "",
      const std::vector<std::pair<dev_t, ino_t>>& forbidden = {});
  // FailedPrecondition when the file shrank below the mapped range since Map (touching the
  // mapping then would raise SIGBUS). Checked before every batch; an engine that shrinks its file
  // during a batch can still crash the daemon, so engines must not truncate registered pools.
  absl::Status CheckIntact() const;
  ~HostPool();
  HostPool(const HostPool&) = delete;
  HostPool& operator=(const HostPool&) = delete;

  uint32_t slots() const { return slots_; }
  uint64_t slot_bytes() const { return slot_bytes_; }
  const std::string& path() const { return path_; }
  // REQUIRES: index < slots().
  uint8_t* slot(uint32_t index) const { return base_ + uint64_t{index} * slot_bytes_; }

 private:
  HostPool() = default;
  std::string path_;
  void* mapping_ = nullptr;
  uint64_t mapping_bytes_ = 0;
  uint8_t* base_ = nullptr;
  uint32_t slots_ = 0;
  uint64_t slot_bytes_ = 0;
  int fd_ = -1;
  uint64_t end_ = 0;  // offset + size of the mapped range in the file
};

}  // namespace kvtier::service

#endif  // KVTIER_DAEMON_SERVICE_HOST_POOL_H_
