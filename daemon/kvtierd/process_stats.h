// ProcessStats: what the standard Prometheus process_* metrics report about kvtierd, read from
// /proc/self (CPU time, memory, start time from stat; descriptors from fd/; the limit from
// getrlimit). ParseProcStat is the pure part, for tests. Thread-safe.
#ifndef KVTIER_DAEMON_KVTIERD_PROCESS_STATS_H_
#define KVTIER_DAEMON_KVTIERD_PROCESS_STATS_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kvtier::kvtierd {

struct ProcessStats {
  double cpu_seconds = 0;         // user + system CPU time
  uint64_t resident_bytes = 0;    // resident set size
  uint64_t virtual_bytes = 0;     // virtual memory size
  double start_time_seconds = 0;  // since the Unix epoch
  uint64_t open_fds = 0;          // entries of /proc/self/fd
  uint64_t max_fds = 0;           // RLIMIT_NOFILE's soft limit
};

// The fields of a /proc/<pid>/stat line that ProcessStats takes (cpu_seconds, virtual_bytes,
// resident_bytes, start_time_seconds), with the kernel's clock ticks per second, page size and
// boot time (btime of /proc/stat, seconds since the epoch). InvalidArgument when the line has
// too few fields or a field is not a number (a command name holding spaces or parentheses is
// fine: the fields are counted from its closing parenthesis).
absl::StatusOr<ProcessStats> ParseProcStat(absl::string_view stat, int64_t ticks_per_second,
                                           int64_t page_size, int64_t boot_time_seconds);

// This process's statistics. FailedPrecondition (naming the file) when /proc cannot be read.
// Blocks on /proc (microseconds).
absl::StatusOr<ProcessStats> ReadProcessStats();

}  // namespace kvtier::kvtierd

#endif  // KVTIER_DAEMON_KVTIERD_PROCESS_STATS_H_
