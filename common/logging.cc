// The logger behind common/logging.h: a mutex-guarded sink, a severity floor, and a line format
// close to glog's so that operators' tools read it.
#include "common/logging.h"

#include <sys/time.h>

#include <cstdio>
#include <ctime>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"

namespace kvtier {
namespace {

absl::Mutex g_log_mu;
LogSink* g_sink ABSL_GUARDED_BY(g_log_mu) = nullptr;
std::atomic<int> g_min_severity{0};

const char* Basename(const char* path) {
  const char* base = path;
  for (const char* p = path; *p != '\0'; ++p) {
    if (*p == '/') base = p + 1;
  }
  return base;
}

}  // namespace

LogSink SetLogSink(LogSink sink) {
  absl::MutexLock lock(&g_log_mu);
  LogSink previous = g_sink != nullptr ? std::move(*g_sink) : LogSink();
  delete g_sink;
  g_sink = sink ? new LogSink(std::move(sink)) : nullptr;
  return previous;
}

void SetMinLogSeverity(LogSeverity severity) {
  g_min_severity.store(static_cast<int>(severity), std::memory_order_relaxed);
}

void EmitLog(LogSeverity severity, const char* file, int line, absl::string_view message) {
  if (static_cast<int>(severity) < g_min_severity.load(std::memory_order_relaxed)) return;
  timeval tv;
  gettimeofday(&tv, nullptr);
  tm local;
  localtime_r(&tv.tv_sec, &local);
  static constexpr char kLetters[] = {'I', 'W', 'E'};
  const std::string text = absl::StrFormat(
      "%c%02d%02d %02d:%02d:%02d.%06d %s:%d] %s", kLetters[static_cast<int>(severity)],
      local.tm_mon + 1, local.tm_mday, local.tm_hour, local.tm_min, local.tm_sec,
      static_cast<int>(tv.tv_usec), Basename(file), line, message);
  absl::MutexLock lock(&g_log_mu);
  if (g_sink != nullptr) {
    (*g_sink)(severity, text);
  } else {
    std::fprintf(stderr, "%s\n", text.c_str());
  }
}

}  // namespace kvtier
