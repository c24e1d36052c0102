// HostPool: maps an engine's shared-memory pool after checking where it is and how big it is.
#include "daemon/dataplane/host_pool.h"

#include <fcntl.h>
#include <limits.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/errno_text.h"
#include "common/quote.h"
#include "common/status_macros.h"
#include "daemon/io/posix_file.h"

namespace kvtier::dataplane {
namespace {

// The allowed directory `dir`, or its subdirectory `subdir` opened beneath it with no symlink.
// -1 with errno on failure.
int OpenBeneath(const std::string& dir, const std::string& subdir) {
  const int root = open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (root < 0 || subdir.empty()) return root;
  struct open_how how {};
  how.flags = O_PATH | O_DIRECTORY | O_CLOEXEC;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  const int fd = static_cast<int>(syscall(SYS_openat2, root, subdir.c_str(), &how, sizeof(how)));
  const int err = errno;
  close(root);
  errno = err;
  return fd;
}

}  // namespace

absl::StatusOr<std::unique_ptr<HostPool>> HostPool::Map(
    const std::string& pool_name, const SharedMemoryFile& file, uint32_t slots, uint64_t slot_bytes,
    const std::vector<std::string>& allowed_dirs, const std::string& required_subdir,
    const std::vector<std::pair<dev_t, ino_t>>& forbidden) {
  const std::string named = Quoted(pool_name);
  std::string path;
  if (file.shm_name.has_value()) {
    const std::string& name = *file.shm_name;
    if (name.size() < 2 || name.size() > 255 || name[0] != '/' ||
        name.find('/', 1) != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "pool %s: shm_name %s must be '/' followed by 1 to 254 characters without '/'", named,
          Quoted(name)));
    }
    path = "/dev/shm" + name;
  } else if (file.path.has_value()) {
    path = *file.path;
    if (path.empty() || path[0] != '/' || path.size() > 4096) {
      return absl::InvalidArgumentError(
          absl::StrFormat("pool %s: path %s must be absolute", named, Quoted(path)));
    }
  } else {
    return absl::InvalidArgumentError(
        absl::StrFormat("pool %s: shared_memory needs a path or a shm_name", named));
  }
  const std::string shown = Quoted(path);
  if (file.offset_bytes % 4096 != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "pool %s: offset_bytes %d is not a multiple of 4096", named, file.offset_bytes));
  }
  if (slots == 0) {
    return absl::InvalidArgumentError(absl::StrFormat("pool %s: 0 slots", named));
  }
  const unsigned __int128 needed = static_cast<unsigned __int128>(slots) * slot_bytes;
  if (needed > file.size_bytes) {
    return absl::FailedPreconditionError(
        absl::StrFormat("pool %s: size_bytes %d is below %d slots of %d bytes", named,
                        file.size_bytes, slots, slot_bytes));
  }
  // Opened beneath an allowed directory with openat2: no symlink anywhere on the way and no ".."
  // out of it, so nothing can swap a path component between a check and the open. With a
  // required subdirectory (the tenant's), that directory is opened first and the rest of the path
  // resolved beneath it, so no ".." leaves it either.
  if (!required_subdir.empty() && (required_subdir == "." || required_subdir == ".." ||
                                   required_subdir.find('/') != std::string::npos)) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "pool %s: tenant %s cannot have a pool directory", named, Quoted(required_subdir)));
  }
  int fd = -1;
  bool inside = false;
  for (const std::string& configured : allowed_dirs) {
    std::string dir = configured;
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    if (!absl::StartsWith(path, dir + "/")) continue;
    std::string rel = path.substr(dir.size() + 1);
    if (!required_subdir.empty()) {
      if (!absl::StartsWith(rel, required_subdir + "/")) continue;
      rel = rel.substr(required_subdir.size() + 1);
      dir = absl::StrCat(dir, "/", required_subdir);
    }
    inside = true;
    const int dirfd = OpenBeneath(configured, required_subdir);
    if (dirfd < 0) {
      const int err = errno;
      if (err == ENOENT) {
        return absl::NotFoundError(
            absl::StrFormat("pool %s: the pool directory %s does not exist", named, dir));
      }
      return ErrnoStatus(err, absl::StrFormat("pool %s: open %s", named, dir));
    }
    struct open_how how {};
    how.flags = O_RDWR | O_CLOEXEC | O_NOCTTY | O_NONBLOCK;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
    fd = static_cast<int>(syscall(SYS_openat2, dirfd, rel.c_str(), &how, sizeof(how)));
    const int err = errno;
    close(dirfd);
    if (fd < 0) {
      if (err == ELOOP || err == EXDEV) {
        return absl::InvalidArgumentError(
            absl::StrFormat("pool %s: %s goes through a symlink or out of %s", named, shown, dir));
      }
      if (err == EISDIR) {
        return absl::InvalidArgumentError(
            absl::StrFormat("pool %s: %s is a directory, not a shared-memory file", named, shown));
      }
      return ErrnoStatus(err, absl::StrFormat("pool %s: open %s", named, shown));
    }
    break;
  }
  if (!inside) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "pool %s: %s is outside the directories the daemon maps pools from (%s)%s", named, shown,
        absl::StrJoin(allowed_dirs, ", "),
        required_subdir.empty()
            ? ""
            : absl::StrCat("; with authentication on, pools live in the tenant's subdirectory ",
                           required_subdir, "/ of one of them")));
  }
  const std::string& real = path;
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    close(fd);
    return ErrnoStatus(err, absl::StrFormat("pool %s: stat %s", named, shown));
  }
  for (const auto& [dev, ino] : forbidden) {
    if (st.st_dev == dev && st.st_ino == ino) {
      close(fd);
      return absl::PermissionDeniedError(
          absl::StrFormat("pool %s: %s is a file of the daemon itself", named, shown));
    }
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return absl::InvalidArgumentError(
        absl::StrFormat("pool %s: %s is not a regular file", named, shown));
  }
  const uint64_t end = file.offset_bytes + file.size_bytes;
  if (end < file.offset_bytes || end > static_cast<uint64_t>(st.st_size)) {
    close(fd);
    return absl::InvalidArgumentError(
        absl::StrFormat("pool %s: [%d, %d) lies beyond the end of %s (%d bytes)", named,
                        file.offset_bytes, end, shown, static_cast<uint64_t>(st.st_size)));
  }
  // Every page of the range backed before the daemon writes into it: a hole the file system
  // cannot fill (a full tmpfs) would raise SIGBUS at the first onboard.
  bool allocated = true;
  if (fallocate(fd, 0, static_cast<off_t>(file.offset_bytes),
                static_cast<off_t>(file.size_bytes)) != 0) {
    const int err = errno;
    allocated = false;
    if (err == ENOSPC || err == EDQUOT || err == ENOMEM) {
      close(fd);
      return absl::ResourceExhaustedError(absl::StrFormat(
          "pool %s: %s cannot be backed: allocating its %d bytes at offset %d failed: %s (the "
          "file system holding it is full)",
          named, shown, file.size_bytes, file.offset_bytes, io::ErrnoText(err)));
    }
    // File systems without fallocate: the pages are populated after mapping, below.
  }
  void* mapping = mmap(nullptr, file.size_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                       static_cast<off_t>(file.offset_bytes));
  const int err = errno;
  if (mapping == MAP_FAILED) {
    close(fd);
    return ErrnoStatus(err, absl::StrFormat("pool %s: mmap %s", named, shown));
  }
#ifdef MADV_POPULATE_WRITE
  if (!allocated && madvise(mapping, file.size_bytes, MADV_POPULATE_WRITE) != 0 &&
      (errno == EFAULT || errno == ENOMEM || errno == EHWPOISON)) {
    const int populate_err = errno;
    munmap(mapping, file.size_bytes);
    close(fd);
    return absl::ResourceExhaustedError(
        absl::StrFormat("pool %s: %s cannot be backed: populating its %d bytes failed: %s", named,
                        shown, file.size_bytes, io::ErrnoText(populate_err)));
  }
#endif
  struct statfs fs;
  const size_t page_bytes = fstatfs(fd, &fs) == 0 && fs.f_type == HUGETLBFS_MAGIC
                                ? static_cast<size_t>(fs.f_bsize)
                                : static_cast<size_t>(4096);
  absl::StatusOr<std::unique_ptr<MappingGuard>> guard =
      MappingGuard::Guard(mapping, file.size_bytes, page_bytes);
  if (!guard.ok()) {
    munmap(mapping, file.size_bytes);
    close(fd);
    return guard.status();
  }
  std::unique_ptr<HostPool> pool(new HostPool());
  pool->path_ = real;
  pool->mapping_ = mapping;
  pool->mapping_bytes_ = file.size_bytes;
  pool->base_ = static_cast<uint8_t*>(mapping);
  pool->slots_ = slots;
  pool->slot_bytes_ = slot_bytes;
  pool->fd_ = fd;
  pool->end_ = end;
  pool->dev_ = st.st_dev;
  pool->ino_ = st.st_ino;
  pool->offset_ = file.offset_bytes;
  pool->guard_ = std::move(*guard);
  return pool;
}

HostPool::~HostPool() {
  guard_.reset();  // nothing touches the mapping any more
  if (mapping_ != nullptr) munmap(mapping_, mapping_bytes_);
  if (fd_ >= 0) close(fd_);
}

absl::Status HostPool::CheckFaults() const {
  if (guard_ == nullptr || guard_->faults() == 0) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrFormat(
      "the pool file %s lost memory under the daemon (the page at offset %d could not be read or "
      "written: the file was truncated or punched, or its file system is full); the request's "
      "pages were not used; register the pool again",
      path_, offset_ + guard_->first_fault_offset()));
}

absl::Status HostPool::CheckIntact() const {
  KVTIER_RETURN_IF_ERROR(CheckFaults());
  struct stat st;
  if (fstat(fd_, &st) != 0 || static_cast<uint64_t>(st.st_size) < end_) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "the pool file %s shrank below the registered range (%d bytes); register again", path_,
        end_));
  }
  return absl::OkStatus();
}

}  // namespace kvtier::dataplane
