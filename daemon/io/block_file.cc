// BlockFile's blocking helpers, request and option validation, the errno-to-status mapping, and
// OpenBlockFile: create and preallocate the file, then pick the engine.
//
// Design notes:
// - O_DIRECT is always asked for when options.direct_io is set; only EINVAL (a file system without
//   direct I/O, e.g. tmpfs on old kernels) falls back to buffered I/O, logged once per process.
// - fallocate(mode 0) runs over [0, size_bytes) on every open: it extends a short file, fills holes
//   of a sparse one so that later writes cannot fail with ENOSPC, and never shrinks a longer file.
//   A file this call created is removed again when preallocation or the engine fails; an older
//   file that preallocation had begun to extend is cut back to its former size.
// - It runs in chunks of preallocate_chunk_bytes (1 GiB) with a ProgressLog advanced after each:
//   a large file on a slow drive takes long enough that a start must say where it is.
// - kAuto tries io_uring first; a refusal is logged once and the thread pool takes over.
#include "daemon/io/block_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/memory/memory.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/notification.h"
#include "common/format_bytes.h"
#include "common/logging.h"
#include "common/progress.h"
#include "daemon/io/posix_file.h"
#include "daemon/io/thread_pool_block_file.h"
#include "daemon/io/uring_block_file.h"

namespace kvtier::io {
namespace {

constexpr uint32_t kMinAlignment = 512;
constexpr uint32_t kMaxQueueDepth = 4096;
constexpr uint32_t kMaxThreads = 256;

const char* KindName(IoKind kind) { return kind == IoKind::kRead ? "read" : "write"; }

absl::Status OpenError(int err, absl::string_view path) {
  const std::string message = absl::StrCat("cannot open '", path, "': ", ErrnoText(err));
  switch (err) {
    case EACCES:
    case EPERM:
    case EROFS:
      return absl::PermissionDeniedError(message);
    case ENOSPC:
    case EDQUOT:
      return absl::ResourceExhaustedError(message);
    default:
      return absl::InternalError(message);
  }
}

// Allocates [offset, offset + length), retrying EINTR. 0 or the errno.
int FallocateRange(int fd, uint64_t offset, uint64_t length) {
  int rc;
  do {
    rc = fallocate(fd, 0, static_cast<off_t>(offset), static_cast<off_t>(length));
  } while (rc != 0 && errno == EINTR);
  return rc == 0 ? 0 : errno;
}

// Extends the file to `size_bytes` with allocated blocks, chunk by chunk. Never shrinks it.
absl::Status Preallocate(int fd, const BlockFileOptions& options) {
  const uint64_t chunk = std::max<uint64_t>(
      options.preallocate_chunk_bytes / options.alignment * options.alignment, options.alignment);
  ProgressLog progress(absl::StrCat("disk tier: preallocating ", FormatBytes(options.size_bytes),
                                    " for '", options.path, "'"),
                       options.size_bytes, options.progress);
  int err = 0;
  for (uint64_t off = 0; off < options.size_bytes && err == 0; off += chunk) {
    const uint64_t length = std::min(chunk, options.size_bytes - off);
    err = FallocateRange(fd, off, length);
    if (err == 0) progress.Advance(length);
  }
  if (err == 0) {
    progress.Finish();
    return absl::OkStatus();
  }
  const std::string message = absl::StrFormat("cannot preallocate %u bytes for '%s': %s",
                                              options.size_bytes, options.path, ErrnoText(err));
  if (err == ENOSPC || err == EDQUOT) return absl::ResourceExhaustedError(message);
  if (err != EOPNOTSUPP) return absl::InternalError(message);
  // A file system without fallocate: extend the size only; writes may then meet ENOSPC.
  KVTIER_LOG_FIRST(kWarning, message, "; extending with ftruncate instead");
  struct stat st;
  if (fstat(fd, &st) != 0) {
    return absl::InternalError(
        absl::StrCat("cannot stat '", options.path, "': ", ErrnoText(errno)));
  }
  if (static_cast<uint64_t>(st.st_size) >= options.size_bytes) return absl::OkStatus();
  if (ftruncate(fd, static_cast<off_t>(options.size_bytes)) != 0) {
    const int truncate_err = errno;
    const std::string truncate_message =
        absl::StrFormat("cannot extend '%s' to %u bytes: %s", options.path, options.size_bytes,
                        ErrnoText(truncate_err));
    if (truncate_err == ENOSPC || truncate_err == EDQUOT || truncate_err == EFBIG) {
      return absl::ResourceExhaustedError(truncate_message);
    }
    return absl::InternalError(truncate_message);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<BlockFile>> StartEngine(int fd, const BlockFileOptions& options) {
  if (options.engine != IoEngine::kThreadPool) {
    absl::StatusOr<std::unique_ptr<UringBlockFile>> uring = UringBlockFile::Create(fd, options);
    if (uring.ok()) return std::unique_ptr<BlockFile>(std::move(uring).value());
    if (options.engine == IoEngine::kUring) return std::move(uring).status();
    KVTIER_LOG_FIRST(kWarning, "io_uring is unavailable (", uring.status().message(),
                     "); block files use the thread-pool engine");
  }
  absl::StatusOr<std::unique_ptr<ThreadPoolBlockFile>> pool =
      ThreadPoolBlockFile::Create(fd, options);
  if (!pool.ok()) return std::move(pool).status();
  return std::unique_ptr<BlockFile>(std::move(pool).value());
}

}  // namespace

absl::Status BlockFile::Read(uint64_t offset, absl::Span<uint8_t> dst) {
  if (dst.size() > UINT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrFormat("read of %u bytes at offset %u of '%s' exceeds one request (4 GiB)",
                        dst.size(), offset, path()));
  }
  absl::Notification done;
  absl::Status result;
  Submit(IoRequest{IoKind::kRead, offset, dst.data(), static_cast<uint32_t>(dst.size())},
         [&](absl::Status status) {
           result = std::move(status);
           done.Notify();
         });
  done.WaitForNotification();
  return result;
}

absl::Status BlockFile::Write(uint64_t offset, absl::Span<const uint8_t> src) {
  if (src.size() > UINT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrFormat("write of %u bytes at offset %u of '%s' exceeds one request (4 GiB)",
                        src.size(), offset, path()));
  }
  absl::Notification done;
  absl::Status result;
  // The engines never write through the buffer of a write request.
  Submit(IoRequest{IoKind::kWrite, offset, const_cast<uint8_t*>(src.data()),
                   static_cast<uint32_t>(src.size())},
         [&](absl::Status status) {
           result = std::move(status);
           done.Notify();
         });
  done.WaitForNotification();
  return result;
}

std::vector<absl::Status> BlockFile::RunBatch(absl::Span<const IoRequest> requests) {
  std::vector<absl::Status> statuses(requests.size());
  if (requests.empty()) return statuses;
  absl::BlockingCounter remaining(static_cast<int>(requests.size()));
  for (size_t i = 0; i < requests.size(); ++i) {
    Submit(requests[i], [&statuses, &remaining, i](absl::Status status) {
      statuses[i] = std::move(status);
      remaining.DecrementCount();
    });
  }
  remaining.Wait();
  return statuses;
}

absl::Status IoErrorToStatus(int err, IoKind kind, absl::string_view path, uint64_t offset,
                             uint32_t length) {
  const std::string message = absl::StrFormat("%s of %u bytes at offset %u of '%s' failed: %s",
                                              KindName(kind), length, offset, path, ErrnoText(err));
  switch (err) {
    case EIO:
      return kind == IoKind::kRead ? absl::DataLossError(message) : absl::InternalError(message);
    case ENOSPC:
    case EDQUOT:
      return kind == IoKind::kWrite ? absl::ResourceExhaustedError(message)
                                    : absl::InternalError(message);
    case EINTR:
    case EAGAIN:
    case ECANCELED:
      return absl::UnavailableError(message);
    default:
      return absl::InternalError(message);
  }
}

absl::Status ValidateIoRequest(const IoRequest& request, uint64_t size_bytes, uint32_t alignment,
                               absl::string_view path) {
  const char* kind = KindName(request.kind);
  if (request.length == 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s at offset %u of '%s' has length 0", kind, request.offset, path));
  }
  if (request.buffer == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s of %u bytes at offset %u of '%s' has a null buffer", kind,
                        request.length, request.offset, path));
  }
  if (request.offset % alignment != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s offset %u of '%s' is not a multiple of the alignment %u", kind,
                        request.offset, path, alignment));
  }
  if (request.length % alignment != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s length %u at offset %u of '%s' is not a multiple of the alignment %u",
                        kind, request.length, request.offset, path, alignment));
  }
  if (reinterpret_cast<uintptr_t>(request.buffer) % alignment != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s buffer address %p for offset %u of '%s' is not aligned to %u bytes",
                        kind, request.buffer, request.offset, path, alignment));
  }
  if (request.offset > size_bytes || request.length > size_bytes - request.offset) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s of %u bytes at offset %u ends past the end of '%s' (%u bytes)", kind,
                        request.length, request.offset, path, size_bytes));
  }
  return absl::OkStatus();
}

absl::Status ValidateBlockFileOptions(const BlockFileOptions& options) {
  if (options.path.empty()) return absl::InvalidArgumentError("block file path is empty");
  const uint32_t a = options.alignment;
  if (a < kMinAlignment || (a & (a - 1)) != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "alignment %u of '%s' is not a power of two >= %u", a, options.path, kMinAlignment));
  }
  if (options.size_bytes == 0 || options.size_bytes % a != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("size_bytes %u of '%s' is not a positive multiple of the alignment %u",
                        options.size_bytes, options.path, a));
  }
  if (options.queue_depth < 1 || options.queue_depth > kMaxQueueDepth) {
    return absl::InvalidArgumentError(absl::StrFormat("queue_depth %u of '%s' is outside [1, %u]",
                                                      options.queue_depth, options.path,
                                                      kMaxQueueDepth));
  }
  if (options.threads < 1 || options.threads > kMaxThreads) {
    return absl::InvalidArgumentError(absl::StrFormat("threads %u of '%s' is outside [1, %u]",
                                                      options.threads, options.path, kMaxThreads));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<BlockFile>> OpenBlockFile(const BlockFileOptions& options) {
  if (absl::Status valid = ValidateBlockFileOptions(options); !valid.ok()) return valid;
  struct stat before;
  const bool existed = stat(options.path.c_str(), &before) == 0;
  if (existed && !S_ISREG(before.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", options.path, "' exists and is not a regular file"));
  }

  constexpr int kFlags = O_CREAT | O_RDWR | O_CLOEXEC;
  int fd = -1;
  if (options.direct_io) {
    fd = open(options.path.c_str(), kFlags | O_DIRECT, 0600);
    if (fd < 0 && errno == EINVAL) {
      KVTIER_LOG_FIRST(kWarning, "O_DIRECT refused for '", options.path, "' (", ErrnoText(EINVAL),
                       "); block files on this file system use buffered I/O");
    }
  }
  if (fd < 0 && (!options.direct_io || errno == EINVAL)) {
    fd = open(options.path.c_str(), kFlags, 0600);
  }
  if (fd < 0) return OpenError(errno, options.path);
  // Cold blocks are the daemon's alone, whatever the umask or the mode of an older file.
  if (fchmod(fd, 0600) != 0) {
    KVTIER_LOG_FIRST(kWarning, "cannot make '", options.path, "' mode 0600: ", ErrnoText(errno));
  }

  absl::Status prealloc = Preallocate(fd, options);
  if (!prealloc.ok()) {
    struct stat now;
    if (existed && fstat(fd, &now) == 0 && now.st_size > before.st_size &&
        ftruncate(fd, before.st_size) != 0) {
      KVTIER_LOG(kWarning, "cannot cut '", options.path, "' back to ", before.st_size,
                 " bytes: ", ErrnoText(errno));
    }
    close(fd);
    if (!existed) unlink(options.path.c_str());
    return prealloc;
  }
  absl::StatusOr<std::unique_ptr<BlockFile>> file = StartEngine(fd, options);
  if (!file.ok()) {
    close(fd);
    if (!existed) unlink(options.path.c_str());
  }
  return file;
}

}  // namespace kvtier::io
