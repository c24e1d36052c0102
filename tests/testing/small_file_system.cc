// SmallFileSystem (see small_file_system.h).
#include "tests/testing/small_file_system.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kvtier::testing {

absl::StatusOr<std::unique_ptr<SmallFileSystem>> SmallFileSystem::Mount(uint64_t bytes) {
  const char* base = getenv("TMPDIR");
  std::string pattern =
      std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/kvtier-smallfs-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) {
    return absl::UnavailableError(absl::StrCat("mkdtemp: ", std::strerror(errno)));
  }
  const std::string options = absl::StrCat("size=", bytes, ",mode=0755");
  if (mount("tmpfs", pattern.c_str(), "tmpfs", 0, options.c_str()) != 0) {
    const int err = errno;
    rmdir(pattern.c_str());
    return absl::UnavailableError(
        absl::StrCat("cannot mount a tmpfs (needs root): ", std::strerror(err)));
  }
  return std::unique_ptr<SmallFileSystem>(new SmallFileSystem(pattern));
}

SmallFileSystem::~SmallFileSystem() {
  umount2(path_.c_str(), MNT_DETACH);
  rmdir(path_.c_str());
}

void SmallFileSystem::Fill(uint64_t leave_bytes) {
  const std::string filler = File(".filler");
  const int fd = open(filler.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) return;
  std::vector<char> chunk(64 << 10, 'f');
  while (FreeBytes() > leave_bytes) {
    const uint64_t want = FreeBytes() - leave_bytes;
    const size_t n = static_cast<size_t>(std::min<uint64_t>(chunk.size(), want));
    if (write(fd, chunk.data(), n) <= 0) break;
  }
  close(fd);
}

void SmallFileSystem::Unfill() { unlink(File(".filler").c_str()); }

uint64_t SmallFileSystem::FreeBytes() const {
  struct statvfs vfs;
  if (statvfs(path_.c_str(), &vfs) != 0) return 0;
  return uint64_t{vfs.f_bavail} * vfs.f_frsize;
}

}  // namespace kvtier::testing
