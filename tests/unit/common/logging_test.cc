// The logger's two line formats (FormatLogEvent) and the process-wide switches (sink, severity
// floor, format): text lines keep their glog-like shape with fields appended; JSON lines parse as
// JSON (nlohmann, an independent parser) with every string escaped, whatever bytes it holds.
#include "common/logging.h"

#include <string>
#include <vector>

#include "absl/time/civil_time.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace kvtier {
namespace {

using Json = nlohmann::json;

// 2025-01-02 03:04:05.123456 UTC.
absl::Time TestTime() {
  return absl::FromCivil(absl::CivilSecond(2025, 1, 2, 3, 4, 5), absl::UTCTimeZone()) +
         absl::Microseconds(123456);
}

LogEvent Event(absl::string_view message, absl::Span<const LogField> fields = {}) {
  LogEvent e;
  e.severity = LogSeverity::kWarning;
  e.time = TestTime();
  e.file = "/src/kvtier/daemon/store/block_store.cc";
  e.line = 42;
  e.message = message;
  e.fields = fields;
  return e;
}

TEST(LogFormatTest, JsonLineHasEveryMemberInOrder) {
  const std::vector<LogField> fields = {LogField("engine", "e-1"), LogField("pages", 4096u),
                                        LogField("delta", -3), LogField("durable", true)};
  const std::string line = FormatLogEvent(Event("stored", fields), LogFormat::kJson);
  EXPECT_EQ(line, R"({"time":"2025-01-02T03:04:05.123456Z","level":"warning","component":"store",)"
                  R"("source":"block_store.cc:42","message":"stored",)"
                  R"("fields":{"engine":"e-1","pages":4096,"delta":-3,"durable":true}})");
  EXPECT_EQ(line.find('\n'), std::string::npos);
  const Json j = Json::parse(line);
  EXPECT_EQ(j["fields"]["pages"].get<uint64_t>(), 4096u);
  EXPECT_TRUE(j["fields"]["durable"].get<bool>());
}

TEST(LogFormatTest, JsonWithoutFieldsHasAnEmptyObject) {
  const Json j = Json::parse(FormatLogEvent(Event("plain"), LogFormat::kJson));
  EXPECT_TRUE(j["fields"].is_object());
  EXPECT_TRUE(j["fields"].empty());
}

TEST(LogFormatTest, JsonEscapesQuotesBackslashesNewlinesAndControlCharacters) {
  const std::string nasty =
      std::string("say \"hi\"\\path\nline2\ttab\r\x01\x1f\x7f nul:") + std::string(1, '\0') + "!";
  const std::vector<LogField> fields = {LogField(nasty, nasty)};
  const std::string line = FormatLogEvent(Event(nasty, fields), LogFormat::kJson);
  // One line, no raw control character, and the parser gives the exact bytes back.
  EXPECT_EQ(line.find('\n'), std::string::npos) << line;
  for (const char c : line) EXPECT_GE(static_cast<unsigned char>(c), 0x20) << line;
  EXPECT_NE(line.find(R"(say \"hi\"\\path\nline2\ttab\r\u0001\u001f)"), std::string::npos) << line;
  EXPECT_NE(line.find(R"(nul:\u0000!)"), std::string::npos) << line;
  const Json j = Json::parse(line);
  EXPECT_EQ(j["message"].get<std::string>(), nasty);
  EXPECT_EQ(j["fields"][nasty].get<std::string>(), nasty);
}

TEST(LogFormatTest, JsonReplacesInvalidUtf8AndKeepsValidUtf8) {
  const std::string line =
      FormatLogEvent(Event(std::string("bad \xff\xfe byte, caf\xc3\xa9")), LogFormat::kJson);
  const Json j = Json::parse(line);  // throws on invalid UTF-8 in the line
  EXPECT_EQ(j["message"].get<std::string>(), "bad \xef\xbf\xbd\xef\xbf\xbd byte, caf\xc3\xa9");
}

TEST(LogFormatTest, ComponentIsTheSourceDirectoryUnlessGiven) {
  LogEvent e = Event("m");
  e.file = "daemon/kvtierd/daemon.cc";
  EXPECT_EQ(Json::parse(FormatLogEvent(e, LogFormat::kJson))["component"], "kvtierd");
  e.file = "main.cc";
  EXPECT_EQ(Json::parse(FormatLogEvent(e, LogFormat::kJson))["component"], "kvtier");
  e.file = "src/core/lib/surface/server.cc";
  e.component = "grpc";
  const Json j = Json::parse(FormatLogEvent(e, LogFormat::kJson));
  EXPECT_EQ(j["component"], "grpc");
  EXPECT_EQ(j["source"], "server.cc:42");
}

TEST(LogFormatTest, JsonLevelNames) {
  LogEvent e = Event("m");
  for (const auto& [severity, name] :
       {std::pair{LogSeverity::kInfo, "info"}, std::pair{LogSeverity::kWarning, "warning"},
        std::pair{LogSeverity::kError, "error"}}) {
    e.severity = severity;
    EXPECT_EQ(Json::parse(FormatLogEvent(e, LogFormat::kJson))["level"], name);
    EXPECT_EQ(LogSeverityName(severity), name);
  }
}

TEST(LogFormatTest, TextLineKeepsItsShapeAndAppendsFields) {
  const std::vector<LogField> fields = {
      LogField("version", "0.1.0"), LogField("config", "built-in defaults"), LogField("empty", ""),
      LogField("bytes", uint64_t{1} << 30), LogField("quote", "a\"b\nc")};
  const std::string line = FormatLogEvent(Event("kvtierd ready", fields), LogFormat::kText);
  // "W0102 hh:mm:05.123456 block_store.cc:42] ..." in the local time zone.
  const std::string local = absl::FormatTime("%m%d %H:%M:%E6S", TestTime(), absl::LocalTimeZone());
  EXPECT_EQ(line, "W" + local +
                      " block_store.cc:42] kvtierd ready version=0.1.0 "
                      "config=\"built-in defaults\" empty=\"\" bytes=1073741824 "
                      "quote=\"a\\\"b\\nc\"");
}

TEST(LogFormatTest, TextWithoutFieldsIsTheGlogLine) {
  const std::string line = FormatLogEvent(Event("io_uring refused"), LogFormat::kText);
  EXPECT_EQ(line, "W" + absl::FormatTime("%m%d %H:%M:%E6S", TestTime(), absl::LocalTimeZone()) +
                      " block_store.cc:42] io_uring refused");
}

// The process-wide logger: a sink sees what the format switch and the severity floor let through.
class LoggerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetLogSink([this](LogSeverity, absl::string_view line) { lines_.emplace_back(line); });
  }
  void TearDown() override {
    SetLogSink({});
    SetLogFormat(LogFormat::kText);
    SetMinLogSeverity(LogSeverity::kInfo);
  }
  std::vector<std::string> lines_;
};

TEST_F(LoggerTest, FormatSwitchAppliesToTheNextLine) {
  KVTIER_LOG(kInfo, "text ", 1);
  SetLogFormat(LogFormat::kJson);
  KVTIER_LOG(kInfo, "json ", 2);
  KVTIER_LOG_FIELDS(kError, "with fields", LogField("n", 7), LogField("who", "me"));
  ASSERT_EQ(lines_.size(), 3u);
  EXPECT_EQ(lines_[0][0], 'I');
  EXPECT_NE(lines_[0].find("logging_test.cc:"), std::string::npos) << lines_[0];
  EXPECT_NE(lines_[0].find("] text 1"), std::string::npos) << lines_[0];
  const Json second = Json::parse(lines_[1]);
  EXPECT_EQ(second["message"], "json 2");
  EXPECT_EQ(second["level"], "info");
  EXPECT_EQ(second["component"], "common");  // tests/unit/common/logging_test.cc
  const Json third = Json::parse(lines_[2]);
  EXPECT_EQ(third["level"], "error");
  EXPECT_EQ(third["fields"]["n"], 7);
  EXPECT_EQ(third["fields"]["who"], "me");
  // Now, in UTC: the line's time is within a minute of the test's.
  absl::Time logged;
  std::string error;
  ASSERT_TRUE(
      absl::ParseTime(absl::RFC3339_full, third["time"].get<std::string>(), &logged, &error))
      << error;
  EXPECT_LT(absl::AbsDuration(absl::Now() - logged), absl::Minutes(1));
}

TEST_F(LoggerTest, SeverityFloorDropsLowerLines) {
  SetMinLogSeverity(LogSeverity::kWarning);
  KVTIER_LOG(kInfo, "dropped");
  KVTIER_LOG(kWarning, "kept");
  ASSERT_EQ(lines_.size(), 1u);
  EXPECT_NE(lines_[0].find("kept"), std::string::npos);
}

}  // namespace
}  // namespace kvtier
