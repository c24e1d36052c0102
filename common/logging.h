// A small process-wide logger: one line per event, "I1130 12:00:00.123456 file.cc:42] message",
// written to stderr or to a sink installed by the process (the daemon, a test). Thread-safe.
// KVTIER_LOG(kWarning, "io_uring refused: ", reason) concatenates its arguments with absl::StrCat;
// KVTIER_LOG_FIRST(kWarning, ...) logs only the first time that statement runs.
#ifndef KVTIER_COMMON_LOGGING_H_
#define KVTIER_COMMON_LOGGING_H_

#include <atomic>
#include <functional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace kvtier {

enum class LogSeverity { kInfo = 0, kWarning = 1, kError = 2 };

// Receives every formatted line (without the trailing newline).
using LogSink = std::function<void(LogSeverity, absl::string_view line)>;

// Replaces the sink; an empty function restores stderr. Returns the previous sink.
LogSink SetLogSink(LogSink sink);

// Lines below `severity` are dropped (default kInfo).
void SetMinLogSeverity(LogSeverity severity);

// Formats and emits one line. Prefer the macros.
void EmitLog(LogSeverity severity, const char* file, int line, absl::string_view message);

}  // namespace kvtier

#define KVTIER_LOG(severity, ...)                                        \
  ::kvtier::EmitLog(::kvtier::LogSeverity::severity, __FILE__, __LINE__, \
                    ::absl::StrCat(__VA_ARGS__))

#define KVTIER_LOG_FIRST(severity, ...)                                         \
  do {                                                                          \
    static ::std::atomic<bool> kvtier_logged_once_{false};                      \
    if (!kvtier_logged_once_.exchange(true)) KVTIER_LOG(severity, __VA_ARGS__); \
  } while (0)

#endif  // KVTIER_COMMON_LOGGING_H_
