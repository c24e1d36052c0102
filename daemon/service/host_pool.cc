// HostPool: maps an engine's shared-memory pool after checking where it is and how big it is.
#include "daemon/service/host_pool.h"

#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
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
    uint64_t slot_bytes, const std::vector<std::string>& allowed_dirs,
    const std::string& required_subdir, const std::vector<std::pair<dev_t, ino_t>>& forbidden) {
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
  if (file.offset_bytes() % 4096 != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "pool '%s': offset_bytes %d is not a multiple of 4096", pool_name, file.offset_bytes()));
  }
  if (slots == 0) {
    return absl::InvalidArgumentError(absl::StrFormat("pool '%s': 0 slots", pool_name));
  }
  const unsigned __int128 needed = static_cast<unsigned __int128>(slots) * slot_bytes;
  if (needed > file.size_bytes()) {
    return absl::FailedPreconditionError(
        absl::StrFormat("pool '%s': size_bytes %d is below %d slots of %d bytes", pool_name,
                        file.size_bytes(), slots, slot_bytes));
  }
  // Opened beneath an allowed directory with openat2: no symlink anywhere on the way and no ".."
  // out of it, so nothing can swap a path component between a check and the open.
  int fd = -1;
  bool inside = false;
  for (const std::string& configured : allowed_dirs) {
    std::string dir = configured;
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    if (!absl::StartsWith(path, dir + "/")) continue;
    const std::string rel = path.substr(dir.size() + 1);
    if (!required_subdir.empty() && !absl::StartsWith(rel, required_subdir + "/")) continue;
    inside = true;
    const int dirfd = open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dirfd < 0) continue;
    struct open_how how {};
    how.flags = O_RDWR | O_CLOEXEC;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS;
    fd = static_cast<int>(syscall(SYS_openat2, dirfd, rel.c_str(), &how, sizeof(how)));
    const int err = errno;
    close(dirfd);
    if (fd < 0) {
      if (err == ELOOP || err == EXDEV) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "pool '%s': %s goes through a symlink or out of %s", pool_name, path, dir));
      }
      return ErrnoStatus(err, absl::StrFormat("pool '%s': open %s", pool_name, path));
    }
    break;
  }
  if (!inside) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "pool '%s': %s is outside the directories the daemon maps pools from (%s)%s", pool_name,
        path, absl::StrJoin(allowed_dirs, ", "),
        required_subdir.empty()
            ? ""
            : absl::StrCat("; with authentication on, pools live in the tenant's subdirectory ",
                           required_subdir, "/ of one of them")));
  }
  if (fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrFormat("pool '%s': the pool directory of %s cannot be opened", pool_name, path));
  }
  const std::string& real = path;
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    close(fd);
    return ErrnoStatus(err, absl::StrFormat("pool '%s': stat %s", pool_name, real));
  }
  for (const auto& [dev, ino] : forbidden) {
    if (st.st_dev == dev && st.st_ino == ino) {
      close(fd);
      return absl::PermissionDeniedError(
          absl::StrFormat("pool '%s': %s is a file of the daemon itself", pool_name, path));
    }
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
  if (mapping == MAP_FAILED) {
    close(fd);
    return ErrnoStatus(err, absl::StrFormat("pool '%s': mmap %s", pool_name, real));
  }
  std::unique_ptr<HostPool> pool(new HostPool());
  pool->path_ = real;
  pool->mapping_ = mapping;
  pool->mapping_bytes_ = file.size_bytes();
  pool->base_ = static_cast<uint8_t*>(mapping);
  pool->slots_ = slots;
  pool->slot_bytes_ = slot_bytes;
  pool->fd_ = fd;
  pool->end_ = end;
  return pool;
}

HostPool::~HostPool() {
  if (mapping_ != nullptr) munmap(mapping_, mapping_bytes_);
  if (fd_ >= 0) close(fd_);
}

absl::Status HostPool::CheckIntact() const {
  struct stat st;
  if (fstat(fd_, &st) != 0 || static_cast<uint64_t>(st.st_size) < end_) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "the pool file %s shrank below the registered range (%d bytes); register again", path_,
        end_));
  }
  return absl::OkStatus();
}

}  // namespace kvtier::service
