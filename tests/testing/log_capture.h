// LogCapture: collects the lines of the process log (common/logging.h) while it lives, for tests
// that check what an operator would read. Installs itself as the log sink and restores the previous
// sink on destruction; one at a time. Thread-safe. ProgressFromTheStart: progress options for
// tests of the progress lines of a setup that ends in milliseconds.
#ifndef KVTIER_TESTS_TESTING_LOG_CAPTURE_H_
#define KVTIER_TESTS_TESTING_LOG_CAPTURE_H_

#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/logging.h"
#include "common/progress.h"

namespace kvtier::testing {

class LogCapture {
 public:
  LogCapture();
  ~LogCapture();
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  // Every line so far, formatted as the log writes it (without the newline).
  std::vector<std::string> lines() const;
  // The lines that contain `text`.
  std::vector<std::string> With(absl::string_view text) const;

 private:
  mutable absl::Mutex mu_;
  std::vector<std::string> lines_ ABSL_GUARDED_BY(mu_);
  LogSink previous_;
};

// Progress lines at every advance, from the first byte on (no quiet period, no interval).
ProgressOptions ProgressFromTheStart();

}  // namespace kvtier::testing

#endif  // KVTIER_TESTS_TESTING_LOG_CAPTURE_H_
