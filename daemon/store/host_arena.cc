// The host tier's memory. A persistent arena is a file in /dev/shm (tmpfs): a 4 KiB header page
// (magic, version, capacity, incarnation, CRC) followed by the slots. The file is reserved with
// fallocate so that a full tmpfs is an error at start, not a SIGBUS later. Pinning large arenas is
// slow (the kernel faults in and locks every page), so CUDA registration runs in parallel chunks.
// Reserving, mlock and CUDA registration all go in chunks of pin_chunk_bytes (1 GiB) with a
// ProgressLog advanced after each, so that a setup of minutes prints where it is; a failed chunk
// releases what the earlier ones took (unlocks, unregisters, or empties a fresh arena's file)
// before the error is returned.
#include "daemon/store/host_arena.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "codec/crc32c.h"
#include "common/format_bytes.h"
#include "common/logging.h"
#include "common/progress.h"
#include "common/status_macros.h"
#include "daemon/io/posix_file.h"
#include "kernels/device.h"

namespace kvtier::store {
namespace {

using io::ErrnoText;

constexpr uint64_t kPageBytes = 4096;
constexpr char kArenaMagic[8] = {'K', 'V', 'T', 'H', 'O', 'S', 'T', 'A'};
constexpr uint32_t kArenaVersion = 1;

struct ArenaHeader {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;
  uint64_t capacity;
  uint64_t incarnation;
  uint32_t crc;  // CRC32C of the fields above
};

uint32_t HeaderCrc(const ArenaHeader& h) { return codec::Crc32c(&h, offsetof(ArenaHeader, crc)); }

std::string GiB(uint64_t bytes) {
  return absl::StrFormat("%.2f GiB", static_cast<double>(bytes) / (1ull << 30));
}

uint64_t NewIncarnation() {
  std::random_device rd;
  uint64_t v = 0;
  while (v == 0) v = (uint64_t{rd()} << 32) ^ rd();
  return v;
}

std::optional<uint64_t> ReadLimitFile(const std::string& path) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text) || text == "max") return std::nullopt;
  uint64_t v = 0;
  if (!absl::SimpleAtoi(text, &v)) return std::nullopt;
  return v;
}

std::string SizeAndHow(uint64_t bytes) { return absl::StrCat(bytes, " bytes (", GiB(bytes), ")"); }

// pin_chunk_bytes rounded down to whole pages, at least one page.
uint64_t ChunkBytes(const HostArenaOptions& options) {
  return std::max<uint64_t>(options.pin_chunk_bytes / kPageBytes * kPageBytes, kPageBytes);
}

absl::Status PinWithCuda(uint8_t* data, uint64_t size, const HostArenaOptions& options,
                         std::vector<uint8_t*>* pinned) {
  const uint64_t chunk = ChunkBytes(options);
  ProgressLog progress(absl::StrCat("host tier: pinning ", FormatBytes(size), " with CUDA"), size,
                       options.progress);
  std::vector<uint8_t*> starts;
  for (uint64_t off = 0; off < size; off += chunk) starts.push_back(data + off);
  absl::Mutex mu;
  absl::Status first_error;
  std::vector<uint8_t*> done;
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};  // no chunk is started after one failed
  auto worker = [&] {
    for (size_t i = next++; i < starts.size() && !failed.load(); i = next++) {
      const uint64_t off = static_cast<uint64_t>(starts[i] - data);
      const uint64_t length = std::min(chunk, size - off);
      absl::Status s = kernels::PinHostMemory(starts[i], length);
      if (s.ok()) progress.Advance(length);
      absl::MutexLock lock(&mu);
      if (s.ok()) {
        done.push_back(starts[i]);
      } else if (first_error.ok()) {
        first_error = s;
        failed.store(true);
      }
    }
  };
  std::vector<std::thread> threads;
  const uint32_t n = std::max<uint32_t>(1, std::min<uint32_t>(options.pin_threads, starts.size()));
  for (uint32_t t = 0; t < n; ++t) threads.emplace_back(worker);
  for (auto& t : threads) t.join();
  if (!first_error.ok()) {
    for (uint8_t* p : done) (void)kernels::UnpinHostMemory(p);
    return first_error;
  }
  *pinned = std::move(done);
  progress.Finish();
  return absl::OkStatus();
}

// mlock of [data, data + size) chunk by chunk; a failed chunk unlocks the earlier ones.
absl::Status LockWithMlock(uint8_t* data, uint64_t size, const HostArenaOptions& options) {
  const uint64_t chunk = ChunkBytes(options);
  ProgressLog progress(absl::StrCat("host tier: locking ", FormatBytes(size), " with mlock"), size,
                       options.progress);
  for (uint64_t off = 0; off < size; off += chunk) {
    const uint64_t length = std::min(chunk, size - off);
    if (mlock(data + off, length) != 0) {
      const int err = errno;
      if (off > 0) munlock(data, off);
      return absl::ResourceExhaustedError(absl::StrCat(
          "mlock of the host tier (", SizeAndHow(options.capacity_bytes), "): ", ErrnoText(err)));
    }
    progress.Advance(length);
  }
  progress.Finish();
  return absl::OkStatus();
}

// posix_fallocate of the persistent arena's file [0, total) chunk by chunk. On failure, a fresh
// arena's file is emptied again so that a failed start holds no tmpfs memory; a reused one keeps
// its contents.
absl::Status Reserve(int fd, const std::string& path, uint64_t total, bool reuse,
                     const HostArenaOptions& options) {
  const uint64_t chunk = ChunkBytes(options);
  ProgressLog progress(absl::StrCat("host tier: reserving ", FormatBytes(total), " in ", path),
                       total, options.progress);
  for (uint64_t off = 0; off < total; off += chunk) {
    const uint64_t length = std::min(chunk, total - off);
    const int err = posix_fallocate(fd, static_cast<off_t>(off), static_cast<off_t>(length));
    if (err != 0) {
      if (!reuse && ftruncate(fd, 0) != 0) {
        KVTIER_LOG(kWarning, "cannot empty ", path, " again: ", ErrnoText(errno));
      }
      if (err == ENOSPC) {
        return absl::ResourceExhaustedError(
            absl::StrCat("no room for the persistent host tier: ", path, " needs ",
                         SizeAndHow(total), " and its file system (", options.shm_dir,
                         ", tmpfs) is full; enlarge it or lower the "
                         "host capacity"));
      }
      return absl::InternalError(absl::StrCat("fallocate ", path, ": ", ErrnoText(err)));
    }
    progress.Advance(length);
  }
  progress.Finish();
  return absl::OkStatus();
}

}  // namespace

HostArena::MemoryLimit HostArena::ReadMemoryLimit() {
  MemoryLimit limit;
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  uint64_t kb = 0;
  std::string unit;
  while (meminfo >> key >> kb >> unit) {
    if (key == "MemTotal:") {
      limit.bytes = kb * 1024;
      limit.source = "MemTotal in /proc/meminfo";
      break;
    }
  }
  // cgroup v2: the process's own group, then the root of the mount; cgroup v1 last.
  std::vector<std::string> candidates;
  std::ifstream cgroup("/proc/self/cgroup");
  std::string line;
  while (std::getline(cgroup, line)) {
    if (line.rfind("0::", 0) == 0) {
      candidates.push_back(absl::StrCat("/sys/fs/cgroup", line.substr(3), "/memory.max"));
    }
  }
  candidates.push_back("/sys/fs/cgroup/memory.max");
  candidates.push_back("/sys/fs/cgroup/memory/memory.limit_in_bytes");
  for (const std::string& path : candidates) {
    std::optional<uint64_t> v = ReadLimitFile(path);
    if (v.has_value() && (limit.bytes == 0 || *v < limit.bytes)) {
      limit.bytes = *v;
      limit.source = absl::StrCat("cgroup limit ", path);
      break;
    }
  }
  return limit;
}

absl::Status HostArena::CheckOptions(const HostArenaOptions& options) {
  if (options.capacity_bytes == 0 || options.capacity_bytes % kPageBytes != 0) {
    return absl::InvalidArgumentError(absl::StrCat("host capacity ", options.capacity_bytes,
                                                   " bytes must be a positive multiple of 4096"));
  }
  const MemoryLimit limit = ReadMemoryLimit();
  if (limit.bytes > 0 && static_cast<double>(options.capacity_bytes) >
                             options.max_memory_fraction * static_cast<double>(limit.bytes)) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "host tier of %s exceeds %.0f%% of the memory limit, %s from the %s; lower the host "
        "capacity or raise the limit",
        SizeAndHow(options.capacity_bytes), options.max_memory_fraction * 100,
        SizeAndHow(limit.bytes), limit.source));
  }
  if (!options.shm_name.empty() && (options.shm_name.find('/') != std::string::npos ||
                                    options.shm_name == "." || options.shm_name == "..")) {
    return absl::InvalidArgumentError(
        absl::StrCat("host shm name '", options.shm_name, "' must be a plain file name"));
  }
  if (options.pin == HostPinMode::kMlock) {
    rlimit memlock{};
    getrlimit(RLIMIT_MEMLOCK, &memlock);
    if (memlock.rlim_cur != RLIM_INFINITY && memlock.rlim_cur < options.capacity_bytes) {
      return absl::FailedPreconditionError(absl::StrCat(
          "host tier of ", SizeAndHow(options.capacity_bytes),
          " cannot be locked: RLIMIT_MEMLOCK is ", memlock.rlim_cur,
          " bytes; raise it (LimitMEMLOCK=infinity in the systemd unit, ulimit -l unlimited, or "
          "IPC_LOCK for a container) or use pin mode 'none'"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<HostArena>> HostArena::Create(const HostArenaOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  KVTIER_RETURN_IF_ERROR(CheckOptions(options));

  std::unique_ptr<HostArena> arena(new HostArena());
  arena->size_ = options.capacity_bytes;
  if (!options.shm_name.empty()) {
    const std::string path = absl::StrCat(options.shm_dir, "/", options.shm_name);
    // No symlink, and only a file of the daemon's own user: /dev/shm is writable by everyone.
    const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
      const int err = errno;
      return absl::FailedPreconditionError(absl::StrCat("open ", path, ": ", ErrnoText(err),
                                                        err == ELOOP ? " (it is a symlink)" : ""));
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid()) {
      close(fd);
      return absl::FailedPreconditionError(absl::StrCat(
          "the persistent host tier file ", path,
          " is not a regular file owned by the daemon's user; remove it or choose another "
          "host.shm_name"));
    }
    if ((st.st_mode & 077) != 0 && fchmod(fd, 0600) != 0) {
      KVTIER_LOG(kWarning, "cannot make ", path, " mode 0600: ", ErrnoText(errno));
    }
    const uint64_t total = kPageBytes + options.capacity_bytes;
    ArenaHeader header{};
    bool reuse = false;
    if (fstat(fd, &st) == 0 && static_cast<uint64_t>(st.st_size) == total &&
        pread(fd, &header, sizeof(header), 0) == static_cast<ssize_t>(sizeof(header))) {
      reuse = std::memcmp(header.magic, kArenaMagic, sizeof(kArenaMagic)) == 0 &&
              header.version == kArenaVersion && header.header_bytes == kPageBytes &&
              header.capacity == options.capacity_bytes && header.crc == HeaderCrc(header) &&
              header.incarnation != 0;
    }
    if (!reuse) {
      if (ftruncate(fd, 0) != 0 || ftruncate(fd, static_cast<off_t>(total)) != 0) {
        const int err = errno;
        close(fd);
        return absl::InternalError(absl::StrCat("ftruncate ", path, ": ", ErrnoText(err)));
      }
    }
    // Reserve every page now: a full tmpfs must fail here, not with SIGBUS on first touch.
    if (absl::Status reserved = Reserve(fd, path, total, reuse, options); !reserved.ok()) {
      close(fd);
      return reserved;
    }
    void* p = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    const int map_err = errno;
    close(fd);
    if (p == MAP_FAILED) {
      return absl::InternalError(absl::StrCat("mmap ", path, ": ", ErrnoText(map_err)));
    }
    arena->mapping_ = static_cast<uint8_t*>(p);
    arena->mapping_bytes_ = total;
    arena->data_ = arena->mapping_ + kPageBytes;
    arena->persistent_ = true;
    arena->reopened_ = reuse;
    if (reuse) {
      arena->incarnation_ = header.incarnation;
    } else {
      ArenaHeader fresh{};
      std::memcpy(fresh.magic, kArenaMagic, sizeof(kArenaMagic));
      fresh.version = kArenaVersion;
      fresh.header_bytes = kPageBytes;
      fresh.capacity = options.capacity_bytes;
      fresh.incarnation = NewIncarnation();
      fresh.crc = HeaderCrc(fresh);
      std::memcpy(arena->mapping_, &fresh, sizeof(fresh));
      arena->incarnation_ = fresh.incarnation;
    }
  } else {
    int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
    if (options.huge_pages) flags |= MAP_HUGETLB;
    void* p = mmap(nullptr, options.capacity_bytes, PROT_READ | PROT_WRITE, flags, -1, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      if (err == ENOMEM && options.huge_pages) {
        return absl::ResourceExhaustedError(
            absl::StrCat("no huge pages for a host tier of ", SizeAndHow(options.capacity_bytes),
                         ": reserve them (vm.nr_hugepages) or turn huge pages off"));
      }
      return absl::InternalError(
          absl::StrCat("mmap of ", SizeAndHow(options.capacity_bytes), ": ", ErrnoText(err)));
    }
    arena->mapping_ = static_cast<uint8_t*>(p);
    arena->mapping_bytes_ = options.capacity_bytes;
    arena->data_ = arena->mapping_;
    if (options.transparent_huge_pages && !options.huge_pages &&
        madvise(p, options.capacity_bytes, MADV_HUGEPAGE) != 0) {
      KVTIER_LOG_FIRST(kWarning, "host tier: madvise(MADV_HUGEPAGE) refused: ", ErrnoText(errno),
                       "; using 4 KiB pages");
    }
    arena->incarnation_ = NewIncarnation();
  }

  HostPinMode mode = options.pin;
  rlimit memlock{};
  getrlimit(RLIMIT_MEMLOCK, &memlock);
  const bool mlock_fits =
      memlock.rlim_cur == RLIM_INFINITY || memlock.rlim_cur >= options.capacity_bytes;
  if (mode == HostPinMode::kAuto) {
    absl::StatusOr<std::vector<kernels::DeviceInfo>> devices = kernels::ListDevices();
    if (devices.ok() && !devices->empty()) {
      mode = HostPinMode::kCuda;
    } else if (mlock_fits) {
      mode = HostPinMode::kMlock;
    } else {
      mode = HostPinMode::kNone;
      KVTIER_LOG_FIRST(kWarning, "host tier is not pinned: no CUDA device (",
                       devices.ok() ? "none found" : devices.status().message(),
                       ") and RLIMIT_MEMLOCK is ", memlock.rlim_cur, " bytes, below the ",
                       options.capacity_bytes, "-byte tier");
    }
  }
  if (mode == HostPinMode::kCuda) {
    KVTIER_RETURN_IF_ERROR(PinWithCuda(arena->data_, arena->size_, options, &arena->cuda_pinned_));
    arena->pin_mechanism_ = "cuda";
  } else if (mode == HostPinMode::kMlock) {
    if (!mlock_fits) {
      return absl::FailedPreconditionError(absl::StrCat(
          "host tier of ", SizeAndHow(options.capacity_bytes),
          " cannot be locked: RLIMIT_MEMLOCK is ", memlock.rlim_cur,
          " bytes; raise it (LimitMEMLOCK=infinity in the systemd unit, ulimit -l unlimited, or "
          "IPC_LOCK for a container) or use pin mode 'none'"));
    }
    KVTIER_RETURN_IF_ERROR(LockWithMlock(arena->data_, arena->size_, options));
    arena->mlocked_ = true;
    arena->pin_mechanism_ = "mlock";
  }
  arena->setup_seconds_ =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return arena;
}

HostArena::~HostArena() {
  for (uint8_t* p : cuda_pinned_) (void)kernels::UnpinHostMemory(p);
  if (mlocked_) munlock(data_, size_);
  if (mapping_ != nullptr) munmap(mapping_, mapping_bytes_);
}

}  // namespace kvtier::store
