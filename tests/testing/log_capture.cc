// LogCapture (see log_capture.h).
#include "tests/testing/log_capture.h"

#include <utility>

namespace kvtier::testing {

LogCapture::LogCapture() {
  previous_ = SetLogSink([this](LogSeverity, absl::string_view line) {
    absl::MutexLock lock(&mu_);
    lines_.emplace_back(line);
  });
}

LogCapture::~LogCapture() { SetLogSink(std::move(previous_)); }

std::vector<std::string> LogCapture::lines() const {
  absl::MutexLock lock(&mu_);
  return lines_;
}

std::vector<std::string> LogCapture::With(absl::string_view text) const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> out;
  for (const std::string& line : lines_) {
    if (absl::string_view(line).find(text) != absl::string_view::npos) out.push_back(line);
  }
  return out;
}

ProgressOptions ProgressFromTheStart() {
  ProgressOptions progress;
  progress.quiet_for = ProgressOptions::Clock::duration::zero();
  progress.interval = ProgressOptions::Clock::duration::zero();
  return progress;
}

}  // namespace kvtier::testing
