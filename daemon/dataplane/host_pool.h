// HostPool: an engine's host KV pool, a shared-memory file the engine created and the daemon maps
// (MAP_SHARED) at registration: `slots` pages of `slot_bytes` each, starting `offset_bytes` into
// the file. Page indices are checked by the caller against slots() before slot() is used.
// Immutable after Map(); slot() may be called from any thread.
#ifndef KVTIER_DAEMON_DATAPLANE_HOST_POOL_H_
#define KVTIER_DAEMON_DATAPLANE_HOST_POOL_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/dataplane/mapping_guard.h"

namespace kvtier::dataplane {

// Where a host pool lives (the contract's SharedMemoryFile, which proto_convert.h converts): a
// file by absolute path or a POSIX shared-memory name ("/name", in /dev/shm), one of them set,
// and the range of it that holds the pages.
struct SharedMemoryFile {
  std::optional<std::string> path;
  std::optional<std::string> shm_name;
  uint64_t offset_bytes = 0;
  uint64_t size_bytes = 0;
};

class HostPool {
 public:
  // Opens and maps the file. InvalidArgument (naming the pool and the value) for a path outside
  // `allowed_dirs` or not absolute, a bad shm name, a directory or other non-regular file, an
  // offset that is not a multiple of 4096, a size beyond the end of the file; NotFound when the
  // file does not exist; PermissionDenied when the daemon may not open it; ResourceExhausted when
  // the range cannot be backed (fallocate: its file system is full); Internal for other errors.
  // The file is opened beneath an allowed directory (and beneath `required_subdir` of it when not
  // empty: the tenant's directory with authentication on) with no symlink on the way and no ".."
  // out of either; files in `forbidden` (device, inode: the daemon's own) are refused
  // (PermissionDenied). A range that does not hold the slots is FailedPrecondition. The mapping
  // is guarded (mapping_guard.h): a page that loses its backing later fails requests with
  // CheckFaults' status, never a signal.
  static absl::StatusOr<std::unique_ptr<HostPool>> Map(
      const std::string& pool_name, const SharedMemoryFile& file, uint32_t slots,
      uint64_t slot_bytes, const std::vector<std::string>& allowed_dirs,
      const std::string& required_subdir = "",
      const std::vector<std::pair<dev_t, ino_t>>& forbidden = {});
  // FailedPrecondition when the file shrank below the mapped range since Map (touching the
  // mapping then would raise SIGBUS), or when a bus error hit the mapping (CheckFaults).
  // Checked before every batch.
  absl::Status CheckIntact() const;
  // FailedPrecondition once a page of the mapping could not be read or written (the engine
  // truncated or punched its file during a batch, or its file system could not back a page): the
  // MappingGuard replaced it by zeros, so bytes read or written since are not the file's and the
  // pool must be registered again. Cheap (an atomic load): checked after every page.
  absl::Status CheckFaults() const;
  dev_t dev() const { return dev_; }
  ino_t ino() const { return ino_; }
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
  uint64_t offset_ = 0;
  uint64_t end_ = 0;  // offset + size of the mapped range in the file
  dev_t dev_ = 0;
  ino_t ino_ = 0;
  std::unique_ptr<MappingGuard> guard_;
};

}  // namespace kvtier::dataplane

#endif  // KVTIER_DAEMON_DATAPLANE_HOST_POOL_H_
