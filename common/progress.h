// ProgressLog: progress lines for one long start-up operation (reserving, locking or pinning the
// host tier, preallocating a disk file) so that an operator can tell a slow start from a hang. The
// operation advances it by the bytes it has done of a known total; an operation that ends within
// ProgressOptions::quiet_for logs nothing, a longer one logs a line about every `interval` and a
// last one when it ends. Thread-safe: workers of one operation may advance it concurrently.
#ifndef KVTIER_COMMON_PROGRESS_H_
#define KVTIER_COMMON_PROGRESS_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace kvtier {

struct ProgressOptions {
  using Clock = std::chrono::steady_clock;
  // No line before the operation has run this long.
  Clock::duration quiet_for = std::chrono::milliseconds(1500);
  // At most one line per interval after that (the last line excepted).
  Clock::duration interval = std::chrono::seconds(2);
  // Empty: Clock::now. Tests drive a fake clock.
  std::function<Clock::time_point()> now;
  // Receives each line; empty: an info line of the process log (common/logging.h).
  std::function<void(absl::string_view line)> sink;
};

class ProgressLog {
 public:
  // Starts the clock of an operation on `total_bytes`. `what` names it, tier and object included
  // ("host tier: locking 256.0 GiB with mlock"); every line starts with it. `options` is copied.
  ProgressLog(std::string what, uint64_t total_bytes, const ProgressOptions& options = {});
  // An operation that logged and was not finished logs where it stopped (the caller reports why).
  ~ProgressLog();

  ProgressLog(const ProgressLog&) = delete;
  ProgressLog& operator=(const ProgressLog&) = delete;

  // Counts `bytes` more done and logs "<what>: <done> of <total> (<percent>) after <seconds>,
  // <rate>" when the operation has run quiet_for and the last line is an interval old. Does not
  // block beyond the sink.
  void Advance(uint64_t bytes);
  // The operation succeeded: logs "<what>: done, <total> in <seconds> (<rate>)" if it logged any
  // line before. Later calls (and the destructor) log nothing.
  void Finish();

  // True once a line was logged.
  bool logged() const;

 private:
  ProgressOptions::Clock::time_point Now() const;
  void Emit(const std::string& line) const;

  const std::string what_;
  const uint64_t total_bytes_;
  const ProgressOptions options_;
  const ProgressOptions::Clock::time_point start_;
  mutable absl::Mutex mu_;
  uint64_t done_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool logged_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  ProgressOptions::Clock::time_point last_line_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvtier

#endif  // KVTIER_COMMON_PROGRESS_H_
