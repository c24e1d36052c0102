// What an operator reads from a running kvtierd: `kvtierd --version` and `kvtierctl --version`
// (version, revision and build features of this build); log.format, validated, and json (every
// stderr line a JSON object; the start-up line's fields: version, revision, configuration, socket,
// effective tier sizes); SIGHUP switching the format; /metrics' kvtier_build_info and process_*
// series with values a live process must have.
#include <ctime>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/build_info/build_info.h"
#include "nlohmann/json.hpp"
#include "tests/integration/daemon_fixture.h"

namespace kvtier::integration {
namespace {

using Json = nlohmann::json;

class ObservabilityTest : public DaemonFixture {
 protected:
  // Waits up to 20 s for the log to hold `text`.
  bool WaitForLog(const std::string& text) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < deadline) {
      if (absl::StrContains(Log(), text)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  // The log's lines (without empty ones).
  std::vector<std::string> LogLines() const {
    return absl::StrSplit(Log(), '\n', absl::SkipEmpty());
  }

  // Every line of `lines` parsed as a JSON object with the members of docs/OPERATIONS.md, Logs.
  static std::vector<Json> ParseJsonLines(const std::vector<std::string>& lines) {
    std::vector<Json> out;
    for (const std::string& line : lines) {
      Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
      EXPECT_TRUE(j.is_object()) << "not a JSON object: " << line;
      if (!j.is_object()) continue;
      for (const char* key : {"time", "level", "component", "source", "message"}) {
        EXPECT_TRUE(j.contains(key) && j[key].is_string()) << key << " missing in " << line;
      }
      EXPECT_TRUE(j.contains("fields") && j["fields"].is_object()) << line;
      out.push_back(std::move(j));
    }
    return out;
  }

  void WriteConfig(const std::string& format) {
    std::ofstream(dir_->File("kvtierd.yaml")) << "log:\n  format: " << format << "\n";
  }
};

TEST_F(ObservabilityTest, VersionPrintsRevisionAndBuildFeatures) {
  const build_info::BuildInfo& b = build_info::Get();
  const std::string first_line = absl::StrCat(" ", b.version, " (revision ", b.revision, ")\n");
  std::string out;
  ASSERT_EQ(RunCommand(KvtierdPath() + " --version", &out), 0) << out;
  EXPECT_TRUE(absl::StartsWith(out, "kvtierd" + first_line)) << out;
  EXPECT_TRUE(absl::StrContains(out, "\n  cuda: ")) << out;
  EXPECT_TRUE(absl::StrContains(out, absl::StrCat("\n  io_uring: liburing ", b.liburing_version)))
      << out;
  // Whether this kernel grants a ring: either answer, but one of them.
  EXPECT_TRUE(absl::StrContains(out, "\n  kernel: grants io_uring rings\n") ||
              absl::StrContains(out, "\n  kernel: the kernel refuses io_uring_setup: "))
      << out;
  out.clear();
  ASSERT_EQ(RunCommand(std::string(KVTIERCTL_PATH) + " --version", &out), 0) << out;
  EXPECT_TRUE(absl::StartsWith(out, "kvtierctl" + first_line)) << out;
  EXPECT_TRUE(absl::StrContains(out, "\n  io_uring: liburing ")) << out;
}

TEST_F(ObservabilityTest, LogFormatIsValidatedByKvtierdAndKvtierctl) {
  std::string out;
  EXPECT_EQ(RunKvtierd({"--check-config", "--set=log.format=xml"}, &out), 1) << out;
  EXPECT_TRUE(absl::StrContains(out, "field 'log.format': 'xml' is not text or json")) << out;
  WriteConfig("logfmt");
  out.clear();
  EXPECT_EQ(
      RunCommand(std::string(KVTIERCTL_PATH) + " config validate " + dir_->File("kvtierd.yaml"),
                 &out),
      1)
      << out;
  EXPECT_TRUE(absl::StrContains(out, "field 'log.format': 'logfmt' is not text or json")) << out;
  out.clear();
  ASSERT_EQ(RunCommand(std::string(KVTIERCTL_PATH) + " config default", &out), 0) << out;
  EXPECT_TRUE(absl::StrContains(out, "\n  format: text\n")) << out;
}

TEST_F(ObservabilityTest, JsonLogsHaveOneObjectPerLineAndAStartUpLine) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon({"--set=log.format=json"}));
  ASSERT_TRUE(WaitForLog("kvtierd ready")) << Log();
  const absl::Time started = absl::Now();
  EXPECT_EQ(StopDaemon(), 0) << Log();
  const std::vector<std::string> lines = LogLines();
  const std::vector<Json> events = ParseJsonLines(lines);
  ASSERT_EQ(events.size(), lines.size()) << Log();

  const build_info::BuildInfo& b = build_info::Get();
  int ready_lines = 0;
  for (const Json& e : events) {
    const std::string message = e["message"];
    absl::Time time;
    std::string error;
    EXPECT_TRUE(absl::EndsWith(e["time"].get<std::string>(), "Z")) << e.dump();
    EXPECT_TRUE(absl::ParseTime(absl::RFC3339_full, e["time"].get<std::string>(), &time, &error))
        << error << ": " << e.dump();
    EXPECT_LT(absl::AbsDuration(time - started), absl::Minutes(2)) << e.dump();
    if (!absl::StartsWith(message, "kvtierd ready: ")) continue;
    ++ready_lines;
    EXPECT_EQ(e["level"], "info");
    EXPECT_EQ(e["component"], "kvtierd");
    EXPECT_TRUE(absl::StartsWith(e["source"].get<std::string>(), "daemon.cc:")) << e.dump();
    const Json& f = e["fields"];
    EXPECT_EQ(f.at("version"), std::string(b.version)) << e.dump();
    EXPECT_EQ(f.at("revision"), std::string(b.revision)) << e.dump();
    EXPECT_EQ(f.at("config"), "built-in defaults") << e.dump();
    EXPECT_EQ(f.at("socket"), Socket()) << e.dump();
    EXPECT_EQ(f.at("metrics"), "127.0.0.1:" + std::to_string(metrics_port_)) << e.dump();
    // Args(): host 64 MiB and disk 64 MiB in 4 MiB chunks, no GPU tier; JSON numbers.
    EXPECT_EQ(f.at("host_capacity_bytes"), 64u << 20) << e.dump();
    EXPECT_EQ(f.at("disk_capacity_bytes"), 64u << 20) << e.dump();
    EXPECT_EQ(f.at("gpu_capacity_bytes"), 0) << e.dump();
    EXPECT_GT(f.at("pid").get<int64_t>(), 0) << e.dump();
  }
  EXPECT_EQ(ready_lines, 1) << Log();
  EXPECT_EQ(events.back()["message"], "kvtierd stopped cleanly") << Log();
}

TEST_F(ObservabilityTest, TextStartUpLineNamesTheConfigFileAndSighupSwitchesToJson) {
  WriteConfig("text");
  ASSERT_NO_FATAL_FAILURE(StartDaemon({"--config=" + dir_->File("kvtierd.yaml")}));
  ASSERT_TRUE(WaitForLog("kvtierd ready")) << Log();
  std::string ready;
  for (const std::string& line : LogLines()) {
    if (absl::StrContains(line, "] kvtierd ready: ")) ready = line;
  }
  const build_info::BuildInfo& b = build_info::Get();
  EXPECT_EQ(ready[0], 'I') << ready;
  EXPECT_TRUE(absl::StrContains(
      ready, absl::StrCat(" version=", b.version, " revision=", b.revision,
                          " config=", dir_->File("kvtierd.yaml"), " socket=", Socket())))
      << ready;
  EXPECT_TRUE(absl::StrContains(ready, " host_capacity_bytes=67108864 disk_capacity_bytes="))
      << ready;

  // SIGHUP with the file now saying json: the reload line and every later one are JSON.
  const size_t before = LogLines().size();
  WriteConfig("json");
  SignalDaemon(SIGHUP);
  ASSERT_TRUE(WaitForLog("SIGHUP: reloaded")) << Log();
  EXPECT_EQ(StopDaemon(), 0) << Log();
  const std::vector<std::string> lines = LogLines();
  ASSERT_GT(lines.size(), before);
  const std::vector<Json> after =
      ParseJsonLines(std::vector<std::string>(lines.begin() + before, lines.end()));
  ASSERT_EQ(after.size(), lines.size() - before) << Log();
  EXPECT_TRUE(absl::StartsWith(after.front()["message"].get<std::string>(),
                               "SIGHUP: reloaded log.level (info) and log.format (json)"))
      << Log();
  EXPECT_EQ(after.front()["level"], "warning");
  EXPECT_EQ(after.back()["message"], "kvtierd stopped cleanly");
}

TEST_F(ObservabilityTest, MetricsExportBuildInfoAndProcessMetrics) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  int code = 0;
  const std::string text = HttpGet(metrics_port_, "/metrics", &code);
  ASSERT_EQ(code, 200) << text;
  const build_info::BuildInfo& b = build_info::Get();
  EXPECT_TRUE(absl::StrContains(
      text, absl::StrCat("kvtier_build_info{version=\"", b.version, "\",revision=\"", b.revision,
                         "\",cuda_archs=\"", b.cuda_archs.empty() ? "none" : b.cuda_archs,
                         "\",io_uring=\"liburing ", b.liburing_version, "\"} 1\n")))
      << text;
  std::map<std::string, double> values;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::StartsWith(line, "process_")) continue;
    const std::vector<absl::string_view> parts = absl::StrSplit(line, ' ');
    ASSERT_EQ(parts.size(), 2u) << line;
    double v = 0;
    ASSERT_TRUE(absl::SimpleAtod(parts[1], &v)) << line;
    values[std::string(parts[0])] = v;
  }
  for (const char* name : {"process_cpu_seconds_total", "process_resident_memory_bytes",
                           "process_virtual_memory_bytes", "process_open_fds", "process_max_fds",
                           "process_start_time_seconds"}) {
    EXPECT_TRUE(values.contains(name)) << name << " missing:\n" << text;
    EXPECT_TRUE(absl::StrContains(text, absl::StrCat("# HELP ", name, " "))) << name;
    EXPECT_TRUE(absl::StrContains(text, absl::StrCat("# TYPE ", name, " "))) << name;
  }
  // A daemon with a socket, an index, a disk tier and a listener has descriptors open; it
  // started just now; the host tier (64 MiB, touched at start) is resident.
  EXPECT_GT(values["process_open_fds"], 5);
  EXPECT_GE(values["process_max_fds"], values["process_open_fds"]);
  const double now = static_cast<double>(time(nullptr));
  EXPECT_LE(values["process_start_time_seconds"], now + 1);
  EXPECT_GT(values["process_start_time_seconds"], now - 3600);
  EXPECT_GT(values["process_resident_memory_bytes"], 16 << 20);
  EXPECT_GE(values["process_virtual_memory_bytes"], values["process_resident_memory_bytes"]);
  EXPECT_GT(values["process_cpu_seconds_total"], 0);
  EXPECT_EQ(StopDaemon(), 0) << Log();
}

}  // namespace
}  // namespace kvtier::integration
