// CPU lists and sched_setaffinity for kvtier-bench (see cpu_affinity.h). A child spawned by a
// pinned thread inherits that thread's mask at clone, so a scope around posix_spawn pins the
// child's every thread without racing against the ones it starts.
#include "tools/bench/cpu_affinity.h"

#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace kvtier::bench {
namespace {

absl::Status SetAffinity(const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int cpu : cpus) {
    if (cpu < 0 || cpu >= CPU_SETSIZE) {
      return absl::InvalidArgumentError(absl::StrCat("CPU ", cpu, " is out of range"));
    }
    CPU_SET(cpu, &set);
  }
  if (sched_setaffinity(0, sizeof(set), &set) != 0) {
    const int err = errno;
    return absl::InvalidArgumentError(
        absl::StrCat("sched_setaffinity to CPUs ", FormatCpuList(cpus), ": ", std::strerror(err)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<int>> ParseCpuList(absl::string_view text) {
  std::vector<int> cpus;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    std::vector<absl::string_view> range = absl::StrSplit(part, absl::MaxSplits('-', 1));
    int first = 0, last = 0;
    const bool ok = absl::SimpleAtoi(range[0], &first) &&
                    (range.size() == 1 ? (last = first, true) : absl::SimpleAtoi(range[1], &last));
    if (!ok || first < 0 || last < first || last >= CPU_SETSIZE) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", part, "' is not a CPU number or range (e.g. 0-3) below ", CPU_SETSIZE));
    }
    for (int cpu = first; cpu <= last; ++cpu) cpus.push_back(cpu);
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

std::string FormatCpuList(const std::vector<int>& cpus) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    parts.push_back(j == i ? absl::StrCat(cpus[i]) : absl::StrCat(cpus[i], "-", cpus[j]));
    i = j + 1;
  }
  return absl::StrJoin(parts, ",");
}

absl::StatusOr<std::vector<int>> AllowedCpus(pid_t tid) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(tid, sizeof(set), &set) != 0) {
    const int err = errno;
    return absl::InternalError(absl::StrCat("sched_getaffinity(", tid, "): ", std::strerror(err)));
  }
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

ScopedThreadAffinity::ScopedThreadAffinity(const std::vector<int>& cpus) {
  if (cpus.empty()) return;
  absl::StatusOr<std::vector<int>> previous = AllowedCpus(0);
  if (!previous.ok()) {
    status_ = previous.status();
    return;
  }
  status_ = SetAffinity(cpus);
  if (status_.ok()) previous_ = *std::move(previous);
}

ScopedThreadAffinity::~ScopedThreadAffinity() {
  if (!previous_.empty()) (void)SetAffinity(previous_);
}

absl::Status PinCallingThread(const std::vector<int>& cpus) { return SetAffinity(cpus); }

}  // namespace kvtier::bench
