// CPU affinity for kvtier-bench's child processes and its own threads: Linux CPU lists ("0-3,6")
// parsed and printed, the CPUs a process may run on, and a scope that pins the calling thread, so
// that a process it spawns meanwhile (posix_spawn) starts on those CPUs with every thread it
// creates. Plain functions; ScopedThreadAffinity acts on the calling thread only.
#ifndef KVTIER_TOOLS_BENCH_CPU_AFFINITY_H_
#define KVTIER_TOOLS_BENCH_CPU_AFFINITY_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kvtier::bench {

// The CPUs of a Linux CPU list: numbers and ranges ("0-3", "0-3,6"), ascending without
// duplicates. InvalidArgument naming the part that is not a CPU number or range.
absl::StatusOr<std::vector<int>> ParseCpuList(absl::string_view text);

// `cpus` (ascending) as a CPU list, with ranges: {0, 1, 2, 5} -> "0-2,5".
std::string FormatCpuList(const std::vector<int>& cpus);

// The CPUs the thread `tid` may run on (0: the calling thread; a process id: its main thread).
// Internal with errno's text when the kernel refuses.
absl::StatusOr<std::vector<int>> AllowedCpus(pid_t tid);

// Pins the calling thread to `cpus` until destroyed, then restores its previous CPUs. With empty
// `cpus` it does nothing. status() is the kernel's answer (InvalidArgument for a CPU this process
// may not use).
class ScopedThreadAffinity {
 public:
  explicit ScopedThreadAffinity(const std::vector<int>& cpus);
  ~ScopedThreadAffinity();
  ScopedThreadAffinity(const ScopedThreadAffinity&) = delete;
  ScopedThreadAffinity& operator=(const ScopedThreadAffinity&) = delete;
  const absl::Status& status() const { return status_; }

 private:
  std::vector<int> previous_;  // empty: nothing to restore
  absl::Status status_;
};

// Pins the calling thread to `cpus` for good (threads it creates later inherit them).
absl::Status PinCallingThread(const std::vector<int>& cpus);

}  // namespace kvtier::bench

#endif  // KVTIER_TOOLS_BENCH_CPU_AFFINITY_H_
