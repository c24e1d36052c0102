// POSIX helpers of the BlockFile engines (see posix_file.h).
#include "daemon/io/posix_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kvtier::io {

absl::Status UnexpectedEndOfFile(absl::string_view path, uint64_t offset, uint32_t length,
                                 uint64_t transferred) {
  return absl::DataLossError(
      absl::StrFormat("unexpected end of file: read of %u bytes at offset %u of '%s' stopped after "
                      "%u bytes",
                      length, offset, path, transferred));
}

absl::Status WriteMadeNoProgress(absl::string_view path, uint64_t offset, uint32_t length,
                                 uint64_t transferred) {
  return absl::InternalError(
      absl::StrFormat("write of %u bytes at offset %u of '%s' made no progress after %u bytes",
                      length, offset, path, transferred));
}

absl::Status DataSyncFile(int fd, absl::string_view path) {
  int rc;
  do {
    rc = fdatasync(fd);
  } while (rc != 0 && errno == EINTR);
  if (rc == 0) return absl::OkStatus();
  const int err = errno;
  const std::string message = absl::StrCat("fdatasync of '", path, "' failed: ", ErrnoText(err));
  if (err == ENOSPC || err == EDQUOT) return absl::ResourceExhaustedError(message);
  return absl::InternalError(message);
}

uint64_t MaxPageSegmentBytes(int fd) {
  struct stat st;
  if (fstat(fd, &st) != 0 || major(st.st_dev) == 0) return 0;  // not on a block device
  const std::string device =
      absl::StrCat("/sys/dev/block/", major(st.st_dev), ":", minor(st.st_dev));
  // A whole disk has its own queue; a partition shares its parent's.
  for (const char* queue : {"/queue/max_segments", "/../queue/max_segments"}) {
    std::ifstream in(device + queue);
    uint64_t segments = 0;
    if (in >> segments && segments > 0) {
      return segments * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    }
  }
  return 0;
}

bool IsDirectIo(int fd) {
  const int flags = fcntl(fd, F_GETFL);
  return flags >= 0 && (flags & O_DIRECT) != 0;
}

}  // namespace kvtier::io
