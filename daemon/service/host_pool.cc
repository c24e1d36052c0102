// HostPool: maps an engine's shared-memory pool after checking where it is and how big it is.
#include "daemon/service/host_pool.h"

#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "daemon/io/posix_file.h"

namespace kvtier::service {
namespace {

absl::Status ErrnoStatus(int err, const std::string& what) {
  const std::string text = absl::StrCat(what, ": ", io::ErrnoText(err));
  switch (err) {
    case ENOENT:
      return absl::NotFoundError(text);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(text);
    default:
      return absl::InternalError(text);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<HostPool>> HostPool::Map(
    const std::string& pool_name, const v1::SharedMemoryFile& file, uint32_t slots,
    uint64_t slot_bytes, const std::vector<std::string>& allowed_dirs) {
  std::string path;
  if (file.has_shm_name()) {
    const std::string& name = file.shm_name();
    if (name.size() < 2 || name.size() > 255 || name[0] != '/' ||
        name.find('/', 1) != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "pool '%s': shm_name '%s' must be '/' followed by 1 to 254 characters without '/'",
          pool_name, name));
    }
    path = "/dev/shm" + name;
  } else if (file.has_path()) {
    path = file.path();
    if (path.empty() || path[0] != '/' || path.size() > 4096) {
      return absl::InvalidArgumentError(
          absl::StrFormat("pool '%s': path '%s' must be absolute", pool_name, path));
    }
  } else {
    return absl::InvalidArgumentError(
        absl::StrFormat("pool '%s': shared_memory needs a path or a shm_name", pool_name));
  }
  char resolved[PATH_MAX];
  if (realpath(path.c_str(), resolved) == nullptr) {
    return ErrnoStatus(errno, absl::StrFormat("pool '%s': %s", pool_name, path));
  }
  const std::string real = resolved;
  bool allowed = false;
  for (const std::string& dir : allowed_dirs) {
    char dir_resolved[PATH_MAX];
    if (realpath(dir.c_str(), dir_resolved) == nullptr) continue;
    const std::string prefix = absl::StrCat(dir_resolved, "/");
    allowed = allowed || absl::StartsWith(real, prefix);
  }
  if (!allowed) {
    return absl::InvalidArgumentError(
        absl::StrFormat("pool '%s': %s is outside the directories the daemon maps pools from (%s)",
                        pool_name, real, absl::StrJoin(allowed_dirs, ", ")));
  }
  if (file.offset_bytes() % 4096 != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "pool '%s': offset_bytes %d is not a multiple of 4096", pool_name, file.offset_bytes()));
  }
  if (slots == 0) {
    return absl::InvalidArgumentError(absl::StrFormat("pool '%s': 0 slots", pool_name));
  }
  const unsigned __int128 needed = static_cast<unsigned __int128>(slots) * slot_bytes;
  if (needed > file.size_bytes()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("pool '%s': size_bytes %d is below %d slots of %d bytes", pool_name,
                        file.size_bytes(), slots, slot_bytes));
  }
  const int fd = open(real.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return ErrnoStatus(errno, absl::StrFormat("pool '%s': open %s", pool_name, real));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    close(fd);
    return ErrnoStatus(err, absl::StrFormat("pool '%s': stat %s", pool_name, real));
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return absl::InvalidArgumentError(
        absl::StrFormat("pool '%s': %s is not a regular file", pool_name, real));
  }
  const uint64_t end = file.offset_bytes() + file.size_bytes();
  if (end < file.offset_bytes() || end > static_cast<uint64_t>(st.st_size)) {
    close(fd);
    return absl::InvalidArgumentError(
        absl::StrFormat("pool '%s': [%d, %d) lies beyond the end of %s (%d bytes)", pool_name,
                        file.offset_bytes(), end, real, static_cast<uint64_t>(st.st_size)));
  }
  void* mapping = mmap(nullptr, file.size_bytes(), PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                       static_cast<off_t>(file.offset_bytes()));
  const int err = errno;
  close(fd);
  if (mapping == MAP_FAILED) {
    return ErrnoStatus(err, absl::StrFormat("pool '%s': mmap %s", pool_name, real));
  }
  std::unique_ptr<HostPool> pool(new HostPool());
  pool->path_ = real;
  pool->mapping_ = mapping;
  pool->mapping_bytes_ = file.size_bytes();
  pool->base_ = static_cast<uint8_t*>(mapping);
  pool->slots_ = slots;
  pool->slot_bytes_ = slot_bytes;
  return pool;
}

HostPool::~HostPool() {
  if (mapping_ != nullptr) munmap(mapping_, mapping_bytes_);
}

}  // namespace kvtier::service
