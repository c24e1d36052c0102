// HostArena: the host tier's memory, one mapping sliced into slots by the store. Anonymous memory
// (optionally 2 MiB huge pages) or, when persistent, a named shared-memory file that outlives the
// daemon so that a restart keeps the host tier. Pinned with cudaHostRegister in parallel chunks
// where CUDA is present, else with mlock where RLIMIT_MEMLOCK allows it; a long setup logs its
// progress. Sized against the cgroup memory limit. Immutable after Create(); data() may be used
// from any thread.
#ifndef KVTIER_DAEMON_STORE_HOST_ARENA_H_
#define KVTIER_DAEMON_STORE_HOST_ARENA_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/progress.h"

namespace kvtier::store {

enum class HostPinMode : uint8_t {
  kAuto = 0,   // CUDA when a device is usable, else mlock when RLIMIT_MEMLOCK allows, else none
  kCuda = 1,   // cudaHostRegister (portable, mapped) or an error
  kMlock = 2,  // mlock or an error
  kNone = 3,   // pageable memory (tests, CPU-only nodes)
};

struct HostArenaOptions {
  uint64_t capacity_bytes = 0;  // usable bytes; a multiple of 4096
  HostPinMode pin = HostPinMode::kAuto;
  // Non-empty: back the arena by `<shm_dir>/<shm_name>` and keep it across restarts.
  std::string shm_name;
  std::string shm_dir = "/dev/shm";
  bool huge_pages = false;  // MAP_HUGETLB (anonymous arenas only)
  // madvise(MADV_HUGEPAGE) on an anonymous arena: fewer, longer DMA segments per block (about 3x
  // for 1.3 MB blocks on a virtio disk), but pinning may then wait on memory compaction.
  bool transparent_huge_pages = false;
  uint32_t pin_threads = 8;  // threads registering chunks in parallel
  // The unit in which the arena is reserved (fallocate of a persistent arena), locked or
  // registered, and in which progress is counted.
  uint64_t pin_chunk_bytes = 1ull << 30;
  // Progress lines of reserving and pinning (quiet for setups that end within a second or two).
  ProgressOptions progress;
  // The arena may use at most this fraction of the smaller of the cgroup memory limit and the
  // machine's memory.
  double max_memory_fraction = 0.9;
};

class HostArena {
 public:
  // Maps, pins and (for a persistent arena) reopens or initializes the arena.
  //   InvalidArgument     capacity 0 or not a multiple of 4096, bad shm name;
  //   ResourceExhausted   capacity above max_memory_fraction of the memory limit (names the limit
  //                       and where it came from), or mmap/ftruncate refused for lack of memory;
  //   FailedPrecondition  kMlock above RLIMIT_MEMLOCK (names the limit and how to raise it);
  //   Unavailable         kCuda without a usable device, or cudaHostRegister refused;
  //   Internal            any other system error, with errno's text.
  // Blocks while reserving and pinning (seconds to minutes for hundreds of GiB), logging progress
  // through options.progress when that takes long.
  static absl::StatusOr<std::unique_ptr<HostArena>> Create(const HostArenaOptions& options);
  // What Create checks before it maps anything (the first three codes above, but not whether
  // mmap, CUDA or mlock succeed), for a start-up check that must not allocate the tier. Reads
  // /proc and /sys; does not block otherwise.
  static absl::Status CheckOptions(const HostArenaOptions& options);
  ~HostArena();  // unpins and unmaps; a persistent arena's file stays

  HostArena(const HostArena&) = delete;
  HostArena& operator=(const HostArena&) = delete;

  uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  absl::Span<uint8_t> span() const { return {data_, size_}; }
  bool persistent() const { return persistent_; }
  // True when a persistent arena was reopened with the contents of an earlier incarnation.
  bool reopened() const { return reopened_; }
  // Random id of the arena's contents, kept in the shm file's header; a new one for every fresh
  // (or re-initialized) arena. The store records it in its index to tell whether host entries
  // still describe this memory.
  uint64_t incarnation() const { return incarnation_; }
  // "cuda", "mlock" or "none".
  const std::string& pin_mechanism() const { return pin_mechanism_; }
  double setup_seconds() const { return setup_seconds_; }

  // The memory limit the arena is sized against: min(cgroup memory.max, MemTotal), and a text
  // saying where it came from.
  struct MemoryLimit {
    uint64_t bytes = 0;
    std::string source;
  };
  static MemoryLimit ReadMemoryLimit();

 private:
  HostArena() = default;

  uint8_t* mapping_ = nullptr;  // the whole mapping (header page + data for shm arenas)
  uint64_t mapping_bytes_ = 0;
  uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  bool persistent_ = false;
  bool reopened_ = false;
  uint64_t incarnation_ = 0;
  std::string pin_mechanism_ = "none";
  std::vector<uint8_t*> cuda_pinned_;  // start of every registered chunk
  bool mlocked_ = false;
  double setup_seconds_ = 0;
};

}  // namespace kvtier::store

#endif  // KVTIER_DAEMON_STORE_HOST_ARENA_H_
