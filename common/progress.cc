// ProgressLog (see progress.h).
//
// Design notes:
// - Start-up work runs for seconds to minutes on real nodes (mlock or cudaHostRegister of a
//   256 GiB host tier, fallocate of a large disk file) and printed nothing while it ran; callers
//   now split such calls into chunks (about 1 GiB) and advance a ProgressLog between them.
// - A quiet period keeps the log of a small or fast start unchanged: nothing is logged before
//   quiet_for has passed, and a final line only follows lines already logged.
// - The clock and the sink are injectable so that tests drive them without sleeping.
#include "common/progress.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/format_bytes.h"
#include "common/logging.h"

namespace kvtier {
namespace {

double Seconds(ProgressOptions::Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

std::string Rate(uint64_t bytes, double seconds) {
  if (seconds <= 0) return "";
  return absl::StrCat(FormatBytes(static_cast<uint64_t>(static_cast<double>(bytes) / seconds)),
                      "/s");
}

double Percent(uint64_t part, uint64_t whole) {
  return whole == 0 ? 100.0 : 100.0 * static_cast<double>(part) / static_cast<double>(whole);
}

}  // namespace

ProgressLog::ProgressLog(std::string what, uint64_t total_bytes, const ProgressOptions& options)
    : what_(std::move(what)), total_bytes_(total_bytes), options_(options), start_(Now()) {}

ProgressLog::~ProgressLog() {
  absl::MutexLock lock(&mu_);
  if (!logged_ || finished_) return;
  Emit(absl::StrFormat("%s: stopped at %s of %s (%.0f%%) after %.1f s", what_,
                       FormatBytes(done_bytes_), FormatBytes(total_bytes_),
                       Percent(done_bytes_, total_bytes_), Seconds(Now() - start_)));
}

void ProgressLog::Advance(uint64_t bytes) {
  const ProgressOptions::Clock::time_point now = Now();
  absl::MutexLock lock(&mu_);
  done_bytes_ += bytes;
  if (finished_ || now - start_ < options_.quiet_for) return;
  if (logged_ && now - last_line_ < options_.interval) return;
  const double seconds = Seconds(now - start_);
  const std::string rate = Rate(done_bytes_, seconds);
  Emit(absl::StrFormat("%s: %s of %s (%.0f%%) after %.1f s%s%s", what_, FormatBytes(done_bytes_),
                       FormatBytes(total_bytes_), Percent(done_bytes_, total_bytes_), seconds,
                       rate.empty() ? "" : ", ", rate));
  logged_ = true;
  last_line_ = now;
}

void ProgressLog::Finish() {
  const ProgressOptions::Clock::time_point now = Now();
  absl::MutexLock lock(&mu_);
  if (finished_) return;
  finished_ = true;
  if (!logged_) return;
  const double seconds = Seconds(now - start_);
  const std::string rate = Rate(total_bytes_, seconds);
  Emit(absl::StrFormat("%s: done, %s in %.1f s%s%s%s", what_, FormatBytes(total_bytes_), seconds,
                       rate.empty() ? "" : " (", rate, rate.empty() ? "" : ")"));
}

bool ProgressLog::logged() const {
  absl::MutexLock lock(&mu_);
  return logged_;
}

ProgressOptions::Clock::time_point ProgressLog::Now() const {
  return options_.now ? options_.now() : ProgressOptions::Clock::now();
}

void ProgressLog::Emit(const std::string& line) const {
  if (options_.sink) {
    options_.sink(line);
  } else {
    KVTIER_LOG(kInfo, line);
  }
}

}  // namespace kvtier
