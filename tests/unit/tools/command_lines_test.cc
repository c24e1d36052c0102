// The command lines of kvtier-bench and kvtier-example-engine as a user meets them: the real
// binaries (paths baked in at build time), run with --help, a bad flag and values after a space.
// kvtierd's, kvtierctl's and kvtier-codec's are tested with those tools
// (tests/integration/kvtierd_startup_test.cc, tests/python/test_kvtierctl.py,
// tests/unit/tools/kvtier_codec_test.cc).
#include <sys/wait.h>

#include <cstdio>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace {

using ::testing::HasSubstr;

struct Result {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

Result RunTool(const std::string& command) {
  Result result;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return result;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.output.append(buffer, n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

#ifdef KVTIER_BENCH_BINARY
TEST(KvtierBenchCommandLineTest, HelpUsageErrorsAndSpacedValues) {
  const std::string bench = KVTIER_BENCH_BINARY;
  Result help = RunTool(bench + " --help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_THAT(help.output, HasSubstr("  fairness"));
  for (const char* sub :
       {"disk", "index", "lookup", "fairness", "e2e", "kernels", "cluster", "kv-events"}) {
    Result sub_help = RunTool(bench + " " + sub + " --help");
    EXPECT_EQ(sub_help.exit_code, 0) << sub;
    EXPECT_THAT(sub_help.output, HasSubstr(std::string("usage: kvtier-bench ") + sub)) << sub;
    EXPECT_EQ(RunTool(bench + " help " + sub).output, sub_help.output) << sub;
    Result bad = RunTool(bench + " " + sub + " --frobnicate");
    EXPECT_EQ(bad.exit_code, 2) << sub;
    EXPECT_THAT(bad.output, HasSubstr(std::string("unknown flag --frobnicate for ") + sub));
  }
  // A value after a space reaches the subcommand's own check.
  Result spaced = RunTool(bench + " lookup --iterations 0");
  EXPECT_EQ(spaced.exit_code, 2);
  EXPECT_THAT(spaced.output, HasSubstr("--iterations: '0' is not in [1, 10000000]"));
  Result joined = RunTool(bench + " disk --rounds=101");
  EXPECT_EQ(joined.exit_code, 2);
  EXPECT_THAT(joined.output, HasSubstr("--rounds: '101' is not in [1, 100]"));
  Result put = RunTool(bench + " cluster --ceph-conf c --pool p --put sideways");
  EXPECT_EQ(put.exit_code, 2);
  EXPECT_THAT(put.output, HasSubstr("--put: 'sideways' is not threads, batched or both"));
  Result modes = RunTool(bench + " kv-events --modes=paced,fast");
  EXPECT_EQ(modes.exit_code, 2);
  EXPECT_THAT(modes.output, HasSubstr("--modes: 'fast' is not paced or max"));
  Result role = RunTool(bench + " kv-events --cpus=router:0");
  EXPECT_EQ(role.exit_code, 2);
  EXPECT_THAT(role.output, HasSubstr("--cpus: role 'router' is not daemon, client or subscriber"));
  Result cpu = RunTool(bench + " kv-events --cpus=daemon:0,client:1023");
  EXPECT_EQ(cpu.exit_code, 2);
  EXPECT_THAT(cpu.output, HasSubstr("--cpus: CPU 1023 is not one this process may run on"));
  Result list = RunTool(bench + " kv-events --cpus=daemon:3-1");
  EXPECT_EQ(list.exit_code, 2);
  EXPECT_THAT(list.output, HasSubstr("--cpus: '3-1' is not a CPU number or range"));
  Result no_pool = RunTool(bench + " cluster --ceph-conf c");
  EXPECT_EQ(no_pool.exit_code, 2);
  EXPECT_THAT(no_pool.output, HasSubstr("--pool"));
  EXPECT_EQ(RunTool(bench).exit_code, 2);
  EXPECT_EQ(RunTool(bench + " frobnicate").exit_code, 2);
}
#endif

TEST(KvtierExampleEngineCommandLineTest, HelpUsageErrorsAndSpacedValues) {
  const std::string engine = KVTIER_EXAMPLE_ENGINE_BINARY;
  Result help = RunTool(engine + " --help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_THAT(help.output, HasSubstr("  --requests N"));
  EXPECT_THAT(help.output, HasSubstr("Exit status: 0 when the replay ran"));
  Result bad = RunTool(engine + " --frobnicate");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.output, HasSubstr("kvtier-example-engine: unknown flag --frobnicate"));
  Result twice = RunTool(engine + " --requests 4 --requests=8");
  EXPECT_EQ(twice.exit_code, 2);
  EXPECT_THAT(twice.output, HasSubstr("--requests given more than once"));
  Result spaced = RunTool(engine + " --tokens-per-page x");
  EXPECT_EQ(spaced.exit_code, 2);
  EXPECT_THAT(spaced.output, HasSubstr("flag --tokens-per-page: 'x' is not an unsigned integer"));
  Result device = RunTool(engine + " --device gpu0");
  EXPECT_EQ(device.exit_code, 2);
  EXPECT_THAT(device.output, HasSubstr("--device: expected auto, host or a device ordinal"));
}

}  // namespace
