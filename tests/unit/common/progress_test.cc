// ProgressLog driven by a fake clock: silent for a quick operation, a line per interval for a slow
// one with the sizes, percentage, elapsed time and rate, a last line when it ends or stops, and
// the process log as the default sink. FormatBytes' units.
#include "common/progress.h"

#include <chrono>
#include <string>
#include <vector>

#include "common/format_bytes.h"
#include "common/logging.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvtier {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using Clock = ProgressOptions::Clock;

constexpr uint64_t kGiB = 1ull << 30;

class ProgressLogTest : public ::testing::Test {
 protected:
  ProgressOptions Options() {
    ProgressOptions o;  // the defaults: quiet for 1.5 s, a line at most every 2 s
    o.now = [this] { return now_; };
    o.sink = [this](absl::string_view line) { lines_.emplace_back(line); };
    return o;
  }
  void Wait(std::chrono::milliseconds d) { now_ += d; }

  Clock::time_point now_ = Clock::time_point() + std::chrono::hours(1);
  std::vector<std::string> lines_;
};

TEST_F(ProgressLogTest, AQuickOperationLogsNothing) {
  {
    ProgressLog progress("host tier: locking 4.0 GiB with mlock", 4 * kGiB, Options());
    for (int i = 0; i < 4; ++i) {
      Wait(std::chrono::milliseconds(350));
      progress.Advance(kGiB);
    }
    progress.Finish();
    EXPECT_FALSE(progress.logged());
  }
  EXPECT_THAT(lines_, IsEmpty());
}

TEST_F(ProgressLogTest, ASlowOperationLogsAboutEveryIntervalThenDone) {
  {
    ProgressLog progress("host tier: locking 10.0 GiB with mlock", 10 * kGiB, Options());
    for (int i = 0; i < 10; ++i) {
      Wait(std::chrono::milliseconds(1000));
      progress.Advance(kGiB);
    }
    progress.Finish();
    progress.Finish();  // once only
  }
  // Quiet until 1.5 s; then at 2 s, 4 s, 6 s, 8 s, 10 s; then the last line.
  EXPECT_THAT(lines_,
              ElementsAre("host tier: locking 10.0 GiB with mlock: 2.0 GiB of 10.0 GiB (20%) "
                          "after 2.0 s, 1.0 GiB/s",
                          "host tier: locking 10.0 GiB with mlock: 4.0 GiB of 10.0 GiB (40%) "
                          "after 4.0 s, 1.0 GiB/s",
                          "host tier: locking 10.0 GiB with mlock: 6.0 GiB of 10.0 GiB (60%) "
                          "after 6.0 s, 1.0 GiB/s",
                          "host tier: locking 10.0 GiB with mlock: 8.0 GiB of 10.0 GiB (80%) "
                          "after 8.0 s, 1.0 GiB/s",
                          "host tier: locking 10.0 GiB with mlock: 10.0 GiB of 10.0 GiB (100%) "
                          "after 10.0 s, 1.0 GiB/s",
                          "host tier: locking 10.0 GiB with mlock: done, 10.0 GiB in 10.0 s "
                          "(1.0 GiB/s)"));
}

TEST_F(ProgressLogTest, TheFirstLineComesAtTheFirstAdvancePastTheQuietPeriod) {
  ProgressLog progress("disk tier: preallocating 3.0 GiB for '/nvme/kvtier-blocks.dat'", 3 * kGiB,
                       Options());
  Wait(std::chrono::milliseconds(1400));
  progress.Advance(kGiB);
  EXPECT_THAT(lines_, IsEmpty());
  Wait(std::chrono::milliseconds(200));  // 1.6 s
  progress.Advance(kGiB / 2);
  ASSERT_EQ(lines_.size(), 1u);
  EXPECT_EQ(lines_[0],
            "disk tier: preallocating 3.0 GiB for '/nvme/kvtier-blocks.dat': 1.5 GiB of 3.0 GiB "
            "(50%) after 1.6 s, 960.0 MiB/s");
  Wait(std::chrono::milliseconds(1900));  // 1.9 s after that line: too soon for the next
  progress.Advance(kGiB / 4);
  EXPECT_EQ(lines_.size(), 1u);
  Wait(std::chrono::milliseconds(100));
  progress.Advance(kGiB / 4);
  ASSERT_EQ(lines_.size(), 2u);
  EXPECT_THAT(lines_[1], HasSubstr(": 2.0 GiB of 3.0 GiB (67%) after 3.6 s"));
}

TEST_F(ProgressLogTest, AnOperationThatStopsSaysWhere) {
  {
    ProgressLog progress("host tier: pinning 8.0 GiB with CUDA", 8 * kGiB, Options());
    Wait(std::chrono::seconds(3));
    progress.Advance(3 * kGiB);
    Wait(std::chrono::seconds(1));
    // No Finish(): the caller returns the error that stopped it.
  }
  ASSERT_EQ(lines_.size(), 2u);
  EXPECT_EQ(lines_[1],
            "host tier: pinning 8.0 GiB with CUDA: stopped at 3.0 GiB of 8.0 GiB (38%) "
            "after 4.0 s");
}

TEST_F(ProgressLogTest, AQuickOperationThatStopsLogsNothing) {
  { ProgressLog progress("host tier: pinning 8.0 GiB with CUDA", 8 * kGiB, Options()); }
  EXPECT_THAT(lines_, IsEmpty());
}

TEST_F(ProgressLogTest, ZeroQuietPeriodAndIntervalLogEveryAdvance) {
  ProgressOptions o = Options();
  o.quiet_for = Clock::duration::zero();
  o.interval = Clock::duration::zero();
  ProgressLog progress("disk tier: preallocating 2.0 MiB", 2 << 20, o);
  progress.Advance(1 << 20);  // no time has passed: no rate
  progress.Advance(1 << 20);
  progress.Finish();
  EXPECT_THAT(lines_, ElementsAre("disk tier: preallocating 2.0 MiB: 1.0 MiB of 2.0 MiB (50%) "
                                  "after 0.0 s",
                                  "disk tier: preallocating 2.0 MiB: 2.0 MiB of 2.0 MiB (100%) "
                                  "after 0.0 s",
                                  "disk tier: preallocating 2.0 MiB: done, 2.0 MiB in 0.0 s"));
}

TEST_F(ProgressLogTest, TheDefaultSinkIsTheProcessLogAtInfo) {
  std::vector<std::pair<LogSeverity, std::string>> logged;
  const LogSink previous = SetLogSink([&logged](LogSeverity severity, absl::string_view line) {
    logged.emplace_back(severity, std::string(line));
  });
  ProgressOptions o;
  o.quiet_for = Clock::duration::zero();
  {
    ProgressLog progress("host tier: reserving 4.0 KiB", 4096, o);
    progress.Advance(4096);
    progress.Finish();
  }
  SetLogSink(previous);
  ASSERT_EQ(logged.size(), 2u);
  EXPECT_EQ(logged[0].first, LogSeverity::kInfo);
  EXPECT_THAT(logged[0].second,
              HasSubstr("] host tier: reserving 4.0 KiB: 4.0 KiB of 4.0 KiB (100%)"));
  EXPECT_THAT(logged[1].second, HasSubstr("] host tier: reserving 4.0 KiB: done, 4.0 KiB in "));
}

TEST(FormatBytesTest, BinaryUnitsWithOneDecimal) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(1023), "1023 B");
  EXPECT_EQ(FormatBytes(1024), "1.0 KiB");
  EXPECT_EQ(FormatBytes(1536), "1.5 KiB");
  EXPECT_EQ(FormatBytes(4ull << 20), "4.0 MiB");
  EXPECT_EQ(FormatBytes(256 * kGiB), "256.0 GiB");
  EXPECT_EQ(FormatBytes(3ull << 40), "3.0 TiB");
  EXPECT_EQ(FormatBytes(5ull << 50), "5.0 PiB");
  EXPECT_EQ(FormatBytes(2048ull << 50), "2048.0 PiB");
}

}  // namespace
}  // namespace kvtier
