// MappingGuard: keeps a bus error in an engine's mapped pool file from killing the daemon. A
// MAP_SHARED file mapping raises SIGBUS where the file no longer has the page (the engine
// truncated it) or its file system cannot allocate one (a hole on a full tmpfs). While a range is
// registered, the process's SIGBUS handler replaces the faulting page of that range with a page of
// zeros (an anonymous mapping), counts the fault and returns, so the copy or codec that touched
// it simply continues; the caller then sees faulted() and fails its request instead of using the
// bytes. The mapping is damaged from then on (that page no longer shows the file): its pool must
// be registered again. A bus error anywhere else keeps its default action (the handler that was
// installed before, or a core dump). Thread-safe; the handler is async-signal-safe.
#ifndef KVTIER_DAEMON_DATAPLANE_MAPPING_GUARD_H_
#define KVTIER_DAEMON_DATAPLANE_MAPPING_GUARD_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"

namespace kvtier::dataplane {

class MappingGuard {
 public:
  // Guards [base, base + bytes), mapped in pages of `page_bytes` (the file system's: 4 KiB, or a
  // huge page size on hugetlbfs). Installs the SIGBUS handler on the first call.
  // ResourceExhausted when too many ranges are guarded (kMaxRanges).
  static absl::StatusOr<std::unique_ptr<MappingGuard>> Guard(void* base, size_t bytes,
                                                             size_t page_bytes);
  // Stops guarding. REQUIRES: nothing touches the range any more (it is about to be unmapped).
  ~MappingGuard();
  MappingGuard(const MappingGuard&) = delete;
  MappingGuard& operator=(const MappingGuard&) = delete;

  // Bus errors in the range so far; each replaced one page by zeros.
  uint32_t faults() const;
  // Offset in the range of the first page that faulted (valid when faults() > 0).
  uint64_t first_fault_offset() const;

  static constexpr int kMaxRanges = 16384;

 private:
  explicit MappingGuard(int slot) : slot_(slot) {}
  const int slot_;
};

}  // namespace kvtier::dataplane

#endif  // KVTIER_DAEMON_DATAPLANE_MAPPING_GUARD_H_
