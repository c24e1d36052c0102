// A small process-wide logger: one line per event, written to stderr or to a sink installed by
// the process (the daemon, a test), as text ("I1130 12:00:00.123456 file.cc:42] message k=v") or
// as JSON lines ({"time":...,"level":...,"component":...,"message":...,"fields":{...}}; see
// docs/OPERATIONS.md, "Logs"). Thread-safe.
// KVTIER_LOG(kWarning, "io_uring refused: ", reason) concatenates its arguments with absl::StrCat;
// KVTIER_LOG_FIRST(kWarning, ...) logs only the first time that statement runs;
// KVTIER_LOG_FIELDS(kInfo, "engine registered", LogField("engine", id), LogField("pages", n))
// adds named values beside the message.
#ifndef KVTIER_COMMON_LOGGING_H_
#define KVTIER_COMMON_LOGGING_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace kvtier {

enum class LogSeverity { kInfo = 0, kWarning = 1, kError = 2 };

// kText: glog-like lines in local time; kJson: one JSON object per line (time in UTC).
enum class LogFormat { kText = 0, kJson = 1 };

// "info", "warning", "error": the level's name in JSON lines and in the log.level setting.
absl::string_view LogSeverityName(LogSeverity severity);

// A named value an event carries beside its message: a string, an integer or a boolean. JSON
// lines keep integers and booleans as JSON numbers and booleans; text lines append " key=value"
// (the value in double quotes, C-escaped, when it is empty or holds a space, quote, '=' or a byte
// outside printable ASCII). The key should be a lower_snake_case word. Borrows nothing: the
// value is copied.
class LogField {
 public:
  LogField(absl::string_view key, absl::string_view value) : key_(key), text_(value) {}
  LogField(absl::string_view key, const char* value) : key_(key), text_(value) {}
  LogField(absl::string_view key, const std::string& value) : key_(key), text_(value) {}
  LogField(absl::string_view key, bool value)
      : key_(key), text_(value ? "true" : "false"), kind_(Kind::kBool) {}
  template <typename T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool> &&
                                             !std::is_same_v<T, char>,
                                         int> = 0>
  LogField(absl::string_view key, T value)
      : key_(key),
        text_(absl::StrCat(value)),
        kind_(std::is_signed_v<T> ? Kind::kSigned : Kind::kUnsigned) {}

  enum class Kind { kString, kSigned, kUnsigned, kBool };
  absl::string_view key() const { return key_; }
  // The value as text: the string itself, the decimal integer, "true" / "false".
  absl::string_view text() const { return text_; }
  Kind kind() const { return kind_; }

 private:
  std::string key_;
  std::string text_;
  Kind kind_ = Kind::kString;
};

// One event as the logger formats it. Borrows every view for the call it is passed to.
struct LogEvent {
  LogSeverity severity = LogSeverity::kInfo;
  absl::Time time;
  // The module that logged: empty means the directory holding `file` ("store" for
  // daemon/store/block_store.cc).
  absl::string_view component;
  absl::string_view file;  // the call site, as __FILE__ gives it; its base name is printed
  int line = 0;
  absl::string_view message;
  absl::Span<const LogField> fields;
};

// The line `event` gives in `format`, without the trailing newline. Text: the glog-like line in
// the local time zone, then the fields. JSON: {"time","level","component","source","message",
// "fields"}, in that order; time in RFC 3339, UTC, with microseconds
// ("2025-01-02T03:04:05.123456Z"); strings escaped as JSON requires (quotes, backslashes, control
// characters as \n or \u00XX; invalid UTF-8 replaced by U+FFFD). Pure; thread-safe.
std::string FormatLogEvent(const LogEvent& event, LogFormat format);

// Receives every formatted line (without the trailing newline).
using LogSink = std::function<void(LogSeverity, absl::string_view line)>;

// Replaces the sink; an empty function restores stderr. Returns the previous sink.
LogSink SetLogSink(LogSink sink);

// Lines below `severity` are dropped (default kInfo).
void SetMinLogSeverity(LogSeverity severity);

// The format of the lines that follow (default kText).
void SetLogFormat(LogFormat format);

// Formats and emits one event, timed now. Prefer the macros. `component` empty: the directory of
// `file`.
void EmitLog(LogSeverity severity, const char* file, int line, absl::string_view message,
             std::initializer_list<LogField> fields = {}, absl::string_view component = {});

}  // namespace kvtier

#define KVTIER_LOG(severity, ...)                                        \
  ::kvtier::EmitLog(::kvtier::LogSeverity::severity, __FILE__, __LINE__, \
                    ::absl::StrCat(__VA_ARGS__))

#define KVTIER_LOG_FIRST(severity, ...)                                         \
  do {                                                                          \
    static ::std::atomic<bool> kvtier_logged_once_{false};                      \
    if (!kvtier_logged_once_.exchange(true)) KVTIER_LOG(severity, __VA_ARGS__); \
  } while (0)

// KVTIER_LOG_FIELDS(kInfo, message, ::kvtier::LogField(...), ...): one message (a string) and
// its fields.
#define KVTIER_LOG_FIELDS(severity, message, ...) \
  ::kvtier::EmitLog(::kvtier::LogSeverity::severity, __FILE__, __LINE__, (message), {__VA_ARGS__})

#endif  // KVTIER_COMMON_LOGGING_H_
