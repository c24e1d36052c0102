// ProcessStats from /proc/self, as Prometheus' client libraries compute the process_* metrics:
// utime + stime (fields 14 and 15 of stat) over the clock tick rate; vsize (23) and rss (24, in
// pages); starttime (22, ticks after boot) plus /proc/stat's btime; the entries of /proc/self/fd;
// RLIMIT_NOFILE's soft limit. /proc files report a size of 0, so they are read to their end.
#include "daemon/kvtierd/process_stats.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/file_reading.h"
#include "daemon/io/posix_file.h"

namespace kvtier::kvtierd {
namespace {

// /proc/stat grows with the number of CPUs (a few KiB on large machines); /proc/self/stat is one
// line.
constexpr uint64_t kMaxProcFileBytes = uint64_t{16} << 20;

// FailedPrecondition, as for a /proc without the fields read below: the metrics cannot be
// computed on this system.
absl::StatusOr<std::string> ReadProcFile(const char* path) {
  absl::StatusOr<std::string> text = ReadRegularFile(path, kMaxProcFileBytes, "");
  if (!text.ok()) return absl::FailedPreconditionError(text.status().message());
  return text;
}

// btime of /proc/stat: the boot time, seconds since the epoch.
absl::StatusOr<int64_t> BootTime() {
  absl::StatusOr<std::string> stat = ReadProcFile("/proc/stat");
  if (!stat.ok()) return stat.status();
  for (absl::string_view line : absl::StrSplit(*stat, '\n')) {
    int64_t btime = 0;
    if (absl::ConsumePrefix(&line, "btime ") && absl::SimpleAtoi(line, &btime)) return btime;
  }
  return absl::FailedPreconditionError("/proc/stat has no btime line");
}

}  // namespace

absl::StatusOr<ProcessStats> ParseProcStat(absl::string_view stat, int64_t ticks_per_second,
                                           int64_t page_size, int64_t boot_time_seconds) {
  // "pid (comm) state ppid ...": comm may hold anything, so count from its last ')'.
  const size_t close_paren = stat.rfind(')');
  if (close_paren == absl::string_view::npos) {
    return absl::InvalidArgumentError("a stat line without '(comm)'");
  }
  const std::vector<absl::string_view> fields =
      absl::StrSplit(stat.substr(close_paren + 1), ' ', absl::SkipEmpty());
  // fields[0] is field 3 (state): field N is fields[N - 3].
  auto field = [&](int n, uint64_t* value) {
    const size_t i = static_cast<size_t>(n - 3);
    return i < fields.size() && absl::SimpleAtoi(absl::StripAsciiWhitespace(fields[i]), value);
  };
  uint64_t utime = 0, stime = 0, starttime = 0, vsize = 0, rss = 0;
  if (!field(14, &utime) || !field(15, &stime) || !field(22, &starttime) || !field(23, &vsize) ||
      !field(24, &rss)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("a stat line with %d fields after the command name, not the 22 or more "
                        "of Linux, or a field that is not a number",
                        fields.size()));
  }
  if (ticks_per_second <= 0) ticks_per_second = 100;
  ProcessStats s;
  s.cpu_seconds = static_cast<double>(utime + stime) / static_cast<double>(ticks_per_second);
  s.virtual_bytes = vsize;
  s.resident_bytes = rss * static_cast<uint64_t>(page_size);
  s.start_time_seconds = static_cast<double>(boot_time_seconds) +
                         static_cast<double>(starttime) / static_cast<double>(ticks_per_second);
  return s;
}

absl::StatusOr<ProcessStats> ReadProcessStats() {
  absl::StatusOr<std::string> stat = ReadProcFile("/proc/self/stat");
  if (!stat.ok()) return stat.status();
  absl::StatusOr<int64_t> boot = BootTime();
  if (!boot.ok()) return boot.status();
  absl::StatusOr<ProcessStats> s =
      ParseProcStat(*stat, sysconf(_SC_CLK_TCK), sysconf(_SC_PAGESIZE), *boot);
  if (!s.ok()) {
    return absl::FailedPreconditionError(
        absl::StrFormat("/proc/self/stat: %s", s.status().message()));
  }
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrFormat("cannot open /proc/self/fd: %s", io::ErrnoText(errno)));
  }
  uint64_t entries = 0;
  while (const dirent* e = readdir(dir)) {
    if (e->d_name[0] != '.') ++entries;
  }
  closedir(dir);
  s->open_fds = entries > 0 ? entries - 1 : 0;  // less the directory's own descriptor
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0) s->max_fds = limit.rlim_cur;
  return s;
}

}  // namespace kvtier::kvtierd
