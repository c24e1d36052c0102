// The index's RocksDB file system (see space_waiting_file_system.h).
//
// The writable file is written here rather than wrapped around RocksDB's POSIX one: after a short
// write that one has moved its file offset without counting the bytes, so retrying its Append
// would write them twice. This one writes with pwrite at the size it keeps, so a retry after
// ENOSPC continues exactly where the kernel stopped. No preallocation (the index opens RocksDB
// with allow_fallocate off: a preallocation of a whole log fails outright on a nearly full drive).
#include "daemon/index/space_waiting_file_system.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/errno_text.h"
#include "rocksdb/file_system.h"
#include "rocksdb/io_status.h"

namespace kvtier::index {
namespace {

using rocksdb::IODebugContext;
using rocksdb::IOOptions;
using rocksdb::IOStatus;
using rocksdb::Slice;

bool IsNoSpace(int err) { return err == ENOSPC || err == EDQUOT; }

IOStatus ErrnoIoStatus(absl::string_view what, const std::string& path, int err) {
  const std::string context = absl::StrCat(what, " ", path);
  if (IsNoSpace(err)) return IOStatus::NoSpace(context, ErrnoText(err));
  return IOStatus::IOError(context, ErrnoText(err));
}

// Runs `op` (a syscall returning -1 with errno on failure) until it succeeds, fails with an error
// other than EINTR or space, or the drive is abandoned while it waits for space.
template <typename Op>
int RetryingCall(StateDrive* drive, absl::string_view what, const std::string& path, Op op) {
  std::optional<StateDrive::SpaceWait> wait;
  while (true) {
    const int r = op();
    if (r >= 0) return r;
    if (errno == EINTR) continue;
    if (!IsNoSpace(errno)) return -1;
    const int err = errno;
    if (!wait.has_value()) wait.emplace(drive, absl::StrCat(what, " ", path));
    if (!wait->Pause()) {
      errno = err;
      return -1;
    }
  }
}

class WaitingWritableFile final : public rocksdb::FSWritableFile {
 public:
  WaitingWritableFile(StateDrive* drive, std::string path, int fd, uint64_t size,
                      const rocksdb::FileOptions& options)
      : rocksdb::FSWritableFile(options),
        drive_(drive),
        path_(std::move(path)),
        fd_(fd),
        size_(size) {}
  ~WaitingWritableFile() override {
    if (fd_ >= 0) close(fd_);
  }

  IOStatus Append(const Slice& data, const IOOptions&, IODebugContext*) override {
    IOStatus st = WriteAt(data, size_.load());
    if (st.ok()) size_ += data.size();
    return st;
  }
  IOStatus PositionedAppend(const Slice& data, uint64_t offset, const IOOptions&,
                            IODebugContext*) override {
    IOStatus st = WriteAt(data, offset);
    if (st.ok()) size_ = std::max<uint64_t>(size_.load(), offset + data.size());
    return st;
  }
  IOStatus Truncate(uint64_t size, const IOOptions&, IODebugContext*) override {
    if (RetryingCall(drive_, "truncating", path_,
                     [&] { return ftruncate(fd_, static_cast<off_t>(size)); }) != 0) {
      return ErrnoIoStatus("truncating", path_, errno);
    }
    size_ = size;
    return IOStatus::OK();
  }
  IOStatus Close(const IOOptions&, IODebugContext*) override {
    const int fd = fd_;
    fd_ = -1;
    if (fd >= 0 && close(fd) != 0 && errno != EINTR) return ErrnoIoStatus("closing", path_, errno);
    return IOStatus::OK();
  }
  IOStatus Flush(const IOOptions&, IODebugContext*) override { return IOStatus::OK(); }
  IOStatus Sync(const IOOptions&, IODebugContext*) override {
    if (RetryingCall(drive_, "syncing", path_, [&] { return fdatasync(fd_); }) != 0) {
      return ErrnoIoStatus("syncing", path_, errno);
    }
    return IOStatus::OK();
  }
  IOStatus Fsync(const IOOptions&, IODebugContext*) override {
    if (RetryingCall(drive_, "syncing", path_, [&] { return fsync(fd_); }) != 0) {
      return ErrnoIoStatus("syncing", path_, errno);
    }
    return IOStatus::OK();
  }
  bool IsSyncThreadSafe() const override { return true; }
  uint64_t GetFileSize(const IOOptions&, IODebugContext*) override { return size_.load(); }
  IOStatus RangeSync(uint64_t offset, uint64_t nbytes, const IOOptions&, IODebugContext*) override {
    // Starts writeback early (bytes_per_sync); durability still comes from Sync.
    (void)sync_file_range(fd_, static_cast<off_t>(offset), static_cast<off_t>(nbytes),
                          SYNC_FILE_RANGE_WRITE);
    return IOStatus::OK();
  }
  IOStatus InvalidateCache(size_t offset, size_t length) override {
    (void)posix_fadvise(fd_, static_cast<off_t>(offset), static_cast<off_t>(length),
                        POSIX_FADV_DONTNEED);
    return IOStatus::OK();
  }
  IOStatus Allocate(uint64_t, uint64_t, const IOOptions&, IODebugContext*) override {
    return IOStatus::OK();
  }

 private:
  IOStatus WriteAt(const Slice& data, uint64_t offset) {
    const char* p = data.data();
    size_t left = data.size();
    std::optional<StateDrive::SpaceWait> wait;
    while (left > 0) {
      const ssize_t n = pwrite(fd_, p, left, static_cast<off_t>(offset));
      if (n > 0) {
        p += n;
        left -= static_cast<size_t>(n);
        offset += static_cast<uint64_t>(n);
        continue;
      }
      const int err = n < 0 ? errno : ENOSPC;  // a write of 0 bytes: no room for more
      if (err == EINTR) continue;
      if (!IsNoSpace(err)) return ErrnoIoStatus("writing", path_, err);
      if (!wait.has_value()) wait.emplace(drive_, absl::StrCat("writing ", path_));
      if (!wait->Pause()) return ErrnoIoStatus("writing", path_, err);
    }
    return IOStatus::OK();
  }

  StateDrive* const drive_;
  const std::string path_;
  int fd_;
  std::atomic<uint64_t> size_;  // read by GetFileSize while Sync may run on another thread
};

class SpaceWaitingFileSystem final : public rocksdb::FileSystemWrapper {
 public:
  explicit SpaceWaitingFileSystem(StateDrive* drive)
      : rocksdb::FileSystemWrapper(rocksdb::FileSystem::Default()), drive_(drive) {}

  static const char* kClassName() { return "KvtierSpaceWaitingFileSystem"; }
  const char* Name() const override { return kClassName(); }

  IOStatus NewWritableFile(const std::string& path, const rocksdb::FileOptions& options,
                           std::unique_ptr<rocksdb::FSWritableFile>* result,
                           IODebugContext* dbg) override {
    if (options.use_direct_writes) return target()->NewWritableFile(path, options, result, dbg);
    return Open(path, options, O_TRUNC, result);
  }
  IOStatus ReopenWritableFile(const std::string& path, const rocksdb::FileOptions& options,
                              std::unique_ptr<rocksdb::FSWritableFile>* result,
                              IODebugContext* dbg) override {
    if (options.use_direct_writes) {
      return target()->ReopenWritableFile(path, options, result, dbg);
    }
    return Open(path, options, 0, result);
  }

 private:
  IOStatus Open(const std::string& path, const rocksdb::FileOptions& options, int extra_flags,
                std::unique_ptr<rocksdb::FSWritableFile>* result) {
    const int fd = RetryingCall(drive_, "creating", path, [&] {
      return open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | extra_flags, 0600);
    });
    if (fd < 0) return ErrnoIoStatus("opening", path, errno);
    struct stat st;
    if (fstat(fd, &st) != 0) {
      const int err = errno;
      close(fd);
      return ErrnoIoStatus("stat of", path, err);
    }
    result->reset(
        new WaitingWritableFile(drive_, path, fd, static_cast<uint64_t>(st.st_size), options));
    return IOStatus::OK();
  }

  StateDrive* const drive_;
};

}  // namespace

std::shared_ptr<rocksdb::FileSystem> NewSpaceWaitingFileSystem(StateDrive* drive) {
  return std::make_shared<SpaceWaitingFileSystem>(drive);
}

}  // namespace kvtier::index
