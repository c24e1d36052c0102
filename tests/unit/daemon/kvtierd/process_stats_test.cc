// ProcessStats: a /proc/<pid>/stat line parsed field by field (a command name with spaces and
// parentheses included), malformed lines refused, and this test process's own statistics within
// what a running process must have; RenderMetrics then exports them, with kvtier_build_info, under
// the Prometheus client libraries' names.
#include "daemon/kvtierd/process_stats.h"

#include <fcntl.h>
#include <unistd.h>

#include <ctime>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/build_info/build_info.h"
#include "daemon/kvtierd/metrics_http.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvtier::kvtierd {
namespace {

using ::testing::HasSubstr;

// Fields 1 to 52 of a Linux stat line; utime 250, stime 50 (ticks), starttime 1000 (ticks after
// boot), vsize 123456789, rss 300 pages.
std::string StatLine(const std::string& comm) {
  std::string line = absl::StrCat("4242 (", comm, ") S 1 4242 4242 0 -1 4194560 100 0 0 0 ",
                                  "250 50 0 0 20 0 8 0 1000 123456789 300");
  for (int field = 25; field <= 52; ++field) absl::StrAppend(&line, " ", field);
  return line + "\n";
}

TEST(ParseProcStatTest, TakesCpuMemoryAndStartTime) {
  absl::StatusOr<ProcessStats> s = ParseProcStat(StatLine("kvtierd"), 100, 4096, 1700000000);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_DOUBLE_EQ(s->cpu_seconds, 3.0);
  EXPECT_EQ(s->virtual_bytes, 123456789u);
  EXPECT_EQ(s->resident_bytes, 300u * 4096);
  EXPECT_DOUBLE_EQ(s->start_time_seconds, 1700000010.0);
}

TEST(ParseProcStatTest, CommandNameMayHoldSpacesAndParentheses) {
  absl::StatusOr<ProcessStats> s = ParseProcStat(StatLine("a (b) c) d"), 100, 4096, 0);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_DOUBLE_EQ(s->cpu_seconds, 3.0);
  EXPECT_EQ(s->resident_bytes, 300u * 4096);
}

TEST(ParseProcStatTest, RefusesShortOrNonNumericLines) {
  EXPECT_TRUE(absl::IsInvalidArgument(ParseProcStat("4242 kvtierd S 1", 100, 4096, 0).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ParseProcStat("4242 (k) S 1 2 3", 100, 4096, 0).status()));
  std::string line = StatLine("k");
  line.replace(line.find(" 250 "), 5, " x50 ");
  EXPECT_TRUE(absl::IsInvalidArgument(ParseProcStat(line, 100, 4096, 0).status()));
}

TEST(ReadProcessStatsTest, ThisProcessHasPlausibleValues) {
  const int extra = open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(extra, 0);
  absl::StatusOr<ProcessStats> s = ReadProcessStats();
  ASSERT_TRUE(s.ok()) << s.status();
  absl::StatusOr<ProcessStats> fewer;
  close(extra);
  fewer = ReadProcessStats();
  ASSERT_TRUE(fewer.ok()) << fewer.status();
  EXPECT_GE(s->open_fds, 4u);  // stdin, stdout, stderr, /dev/null
  EXPECT_EQ(fewer->open_fds, s->open_fds - 1) << "the count follows the process's descriptors";
  EXPECT_GE(s->max_fds, s->open_fds);
  EXPECT_GT(s->resident_bytes, 1u << 20);
  EXPECT_GE(s->virtual_bytes, s->resident_bytes);
  EXPECT_GE(s->cpu_seconds, 0);
  const double now = static_cast<double>(time(nullptr));
  EXPECT_LE(s->start_time_seconds, now + 1);
  EXPECT_GT(s->start_time_seconds, now - 3600) << "this test started within the hour";
}

TEST(RenderMetricsTest, BuildInfoAndProcessMetrics) {
  ProcessStats p;
  p.cpu_seconds = 1.5;
  p.resident_bytes = 1 << 20;
  p.virtual_bytes = 1 << 30;
  p.open_fds = 12;
  p.max_fds = 1024;
  p.start_time_seconds = 1700000000.25;
  const std::string text = RenderMetrics(store::StoreStats(), ServiceGauges(), true, p);
  const build_info::BuildInfo& b = build_info::Get();
  EXPECT_THAT(text, HasSubstr("# TYPE kvtier_build_info gauge\n"));
  EXPECT_THAT(text, HasSubstr(absl::StrCat(
                        "kvtier_build_info{version=\"", b.version, "\",revision=\"", b.revision,
                        "\",cuda_archs=\"", b.cuda_archs.empty() ? "none" : b.cuda_archs,
                        "\",io_uring=\"liburing ", b.liburing_version, "\"} 1\n")));
  EXPECT_THAT(text, HasSubstr("# TYPE process_cpu_seconds_total counter\n"
                              "process_cpu_seconds_total 1.5\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE process_resident_memory_bytes gauge\n"
                              "process_resident_memory_bytes 1048576\n"));
  EXPECT_THAT(text, HasSubstr("process_virtual_memory_bytes 1073741824\n"));
  EXPECT_THAT(text, HasSubstr("process_open_fds 12\n"));
  EXPECT_THAT(text, HasSubstr("process_max_fds 1024\n"));
  EXPECT_THAT(text, HasSubstr("# HELP process_start_time_seconds "));
  EXPECT_THAT(text, HasSubstr("process_start_time_seconds 1700000000.25\n"));
  // Without process statistics the family is left out, not reported as zeros.
  EXPECT_THAT(RenderMetrics(store::StoreStats(), ServiceGauges(), true),
              ::testing::Not(HasSubstr("process_")));
}

}  // namespace
}  // namespace kvtier::kvtierd
