// The logger behind common/logging.h: a mutex-guarded sink, a severity floor, a format switch,
// and the two line formats. Text stays close to glog's so that operators' tools read it; JSON
// lines are what log collectors (Loki, Elasticsearch, Cloud Logging) parse without a pattern.
//
// Component and fields: a call site names neither in KVTIER_LOG, so the component is the module
// the source file lives in (its directory: "store", "index", "kvtierd", "service"), which is
// what an operator filters by, and fields are only what a call passes with KVTIER_LOG_FIELDS
// (the start-up line, engine registrations, ...); every other event has its whole text in
// "message" and empty "fields". The JSON encoder is nlohmann's: its escaping of control
// characters and its replacement of invalid UTF-8 (a path or engine name can hold any byte) are
// what the JSON grammar needs, and are not repeated here.
#include "common/logging.h"

#include <cstdio>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "nlohmann/json.hpp"

namespace kvtier {
namespace {

absl::Mutex g_log_mu;
LogSink* g_sink ABSL_GUARDED_BY(g_log_mu) = nullptr;
std::atomic<int> g_min_severity{0};
std::atomic<int> g_format{0};

absl::string_view Basename(absl::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == absl::string_view::npos ? path : path.substr(slash + 1);
}

// "store" for ".../daemon/store/block_store.cc"; "kvtier" for a file given without a directory.
absl::string_view DirectoryName(absl::string_view path) {
  const size_t slash = path.rfind('/');
  if (slash == absl::string_view::npos || slash == 0) return "kvtier";
  const absl::string_view dir = path.substr(0, slash);
  return Basename(dir);
}

// A text value as it follows "key=": bare when it is a plain word, else quoted and C-escaped.
std::string TextValue(const LogField& f) {
  const absl::string_view v = f.text();
  bool bare = !v.empty();
  for (const char c : v) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u >= 0x7f || c == '"' || c == '\'' || c == '=' || c == '\\') bare = false;
  }
  if (bare || f.kind() != LogField::Kind::kString) return std::string(v);
  return absl::StrCat("\"", absl::CHexEscape(v), "\"");
}

std::string FormatText(const LogEvent& e) {
  static constexpr char kLetters[] = {'I', 'W', 'E'};
  std::string out;
  out.push_back(kLetters[static_cast<int>(e.severity)]);
  absl::StrAppend(&out, absl::FormatTime("%m%d %H:%M:%E6S", e.time, absl::LocalTimeZone()), " ",
                  Basename(e.file), ":", e.line, "] ", e.message);
  for (const LogField& f : e.fields) absl::StrAppend(&out, " ", f.key(), "=", TextValue(f));
  return out;
}

std::string FormatJson(const LogEvent& e) {
  using Json = nlohmann::ordered_json;
  Json fields = Json::object();
  for (const LogField& f : e.fields) {
    Json& value = fields[std::string(f.key())];
    switch (f.kind()) {
      case LogField::Kind::kString:
        value = std::string(f.text());
        break;
      case LogField::Kind::kSigned: {
        int64_t v = 0;  // the decimal text of an integer type: always parses
        value = absl::SimpleAtoi(f.text(), &v) ? Json(v) : Json(std::string(f.text()));
        break;
      }
      case LogField::Kind::kUnsigned: {
        uint64_t v = 0;
        value = absl::SimpleAtoi(f.text(), &v) ? Json(v) : Json(std::string(f.text()));
        break;
      }
      case LogField::Kind::kBool:
        value = f.text() == "true";
        break;
    }
  }
  Json line = Json::object();
  line["time"] = absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", e.time, absl::UTCTimeZone());
  line["level"] = std::string(LogSeverityName(e.severity));
  line["component"] = std::string(e.component.empty() ? DirectoryName(e.file) : e.component);
  line["source"] = absl::StrCat(Basename(e.file), ":", e.line);
  line["message"] = std::string(e.message);
  line["fields"] = std::move(fields);
  return line.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace

absl::string_view LogSeverityName(LogSeverity severity) {
  switch (severity) {
    case LogSeverity::kInfo:
      return "info";
    case LogSeverity::kWarning:
      return "warning";
    case LogSeverity::kError:
      return "error";
  }
  return "info";
}

std::string FormatLogEvent(const LogEvent& event, LogFormat format) {
  return format == LogFormat::kJson ? FormatJson(event) : FormatText(event);
}

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

void SetLogFormat(LogFormat format) {
  g_format.store(static_cast<int>(format), std::memory_order_relaxed);
}

void EmitLog(LogSeverity severity, const char* file, int line, absl::string_view message,
             std::initializer_list<LogField> fields, absl::string_view component) {
  if (static_cast<int>(severity) < g_min_severity.load(std::memory_order_relaxed)) return;
  LogEvent event;
  event.severity = severity;
  event.time = absl::Now();
  event.component = component;
  event.file = file;
  event.line = line;
  event.message = message;
  event.fields = absl::MakeConstSpan(fields.begin(), fields.size());
  const std::string text =
      FormatLogEvent(event, static_cast<LogFormat>(g_format.load(std::memory_order_relaxed)));
  absl::MutexLock lock(&g_log_mu);
  if (g_sink != nullptr) {
    (*g_sink)(severity, text);
  } else {
    std::fprintf(stderr, "%s\n", text.c_str());
  }
}

}  // namespace kvtier
