// Small POSIX helpers shared by the BlockFile engines: errno text for status messages, the
// statuses of an early end of file and of a write that made no progress, fdatasync with EINTR
// handling. Stateless; every function is thread-safe.
#ifndef KVTIER_DAEMON_IO_POSIX_FILE_H_
#define KVTIER_DAEMON_IO_POSIX_FILE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/errno_text.h"

namespace kvtier::io {

// "Input/output error (EIO)"; "errno 1234" for values the C library does not name.
using ::kvtier::ErrnoText;

// DataLoss "unexpected end of file": a read of `length` bytes at `offset` of `path` stopped after
// `transferred` bytes.
absl::Status UnexpectedEndOfFile(absl::string_view path, uint64_t offset, uint32_t length,
                                 uint64_t transferred);

// Internal: a write of `length` bytes at `offset` of `path` returned 0 after `transferred` bytes.
absl::Status WriteMadeNoProgress(absl::string_view path, uint64_t offset, uint32_t length,
                                 uint64_t transferred);

// fdatasync(fd), retried on EINTR. ResourceExhausted for ENOSPC / EDQUOT, Internal with the errno
// and `path` otherwise. Blocks until the device acknowledges.
absl::Status DataSyncFile(int fd, absl::string_view path);

// The most bytes one request to the block device holding `fd` carries when every page of its
// buffer is a separate segment: the device's queue/max_segments times the page size (from sysfs).
// 0 when there is no such limit or it is unknown (tmpfs, overlay, unreadable sysfs).
uint64_t MaxPageSegmentBytes(int fd);

// True when `fd` was opened with O_DIRECT.
bool IsDirectIo(int fd);

// After a short transfer with direct I/O, a resubmission whose position is not a multiple of the
// logical block size (512) would fail with EINVAL; a read that stops there has met the end of file.
inline bool IsDirectIoEndOfFile(bool direct_io, uint64_t position) {
  return direct_io && position % 512 != 0;
}

}  // namespace kvtier::io

#endif  // KVTIER_DAEMON_IO_POSIX_FILE_H_
