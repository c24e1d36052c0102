// The example engine (tools/engine) against a real kvtierd: the synthetic agentic workload and a
// small Mooncake-format trace under raw and nvfp4, every onboarded and resumed page checked, and a
// third compression method, registered by this test only, that counts the hooks the engine calls
// (the engine and the library are not touched to add it).
#include <atomic>
#include <fstream>
#include <random>

#include "absl/strings/str_cat.h"
#include "kvtier/compression.h"
#include "tests/integration/daemon_fixture.h"
#include "tests/testing/triattention_files.h"
#include "tools/engine/replay.h"
#include "tools/engine/trace.h"

namespace kvtier::integration {
namespace {

using engine::EngineRunOptions;
using engine::EngineRunResult;

class ExampleEngineTest : public DaemonFixture {
 protected:
  EngineRunOptions Options(const std::string& codec, std::vector<engine::Session> sessions) {
    EngineRunOptions o;
    o.socket = Socket();
    o.sessions = std::move(sessions);
    o.layout = PageLayout::Gqa({2, 1, 64, 64, DType::kBf16, 0, 0}).value();
    o.pool_dir = dir_->path();
    o.model = "example-" + codec;
    o.quiet = true;
    CompressionConfig c;
    c.algorithm = "quantization_for_cold_page";
    c.quant = codec;
    o.configs.push_back(c);
    return o;
  }
  static std::vector<engine::Session> Synthetic(uint32_t sessions) {
    engine::SyntheticOptions s;
    s.sessions = sessions;
    s.system_prompts = 2;
    s.system_prompt_tokens = 512;
    s.first_message_tokens = 128;
    s.min_tool_result_tokens = 20;
    s.max_tool_result_tokens = 200;
    s.min_output_tokens = 5;
    s.max_output_tokens = 40;
    s.max_turns = 4;
    return engine::SyntheticAgenticTrace(s);
  }
};

TEST_F(ExampleEngineTest, SyntheticAgenticSessionsRawAndNvfp4) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  for (const std::string codec : {"raw", "nvfp4"}) {
    absl::StatusOr<EngineRunResult> r = engine::RunEngine(Options(codec, Synthetic(12)));
    ASSERT_TRUE(r.ok()) << r.status() << "\n" << Log();
    EXPECT_EQ(r->report.sessions, 12u) << codec;
    EXPECT_EQ(r->report.hook_errors, 0u) << r->report.first_error;
    EXPECT_EQ(r->mismatches(), 0u) << codec;
    // Sessions share two system prompts of 8 pages: all but the first of each hit them.
    EXPECT_GE(r->report.cached_tokens, 10u * 512) << codec;
    EXPECT_GT(r->report.pages_checked, 0u);
    EXPECT_GT(r->report.resumes, 0u);
    EXPECT_GT(r->report.resumed_pages_checked, 0u);
    EXPECT_EQ(r->report.recomputed_tokens, 0u);
    EXPECT_GT(r->hits_by_tier[Tier::kHost] + r->hits_by_tier[Tier::kDisk], 0u);
    if (codec == "nvfp4") {
      // 32 KiB pages: 9 KiB of NVFP4 data and scales, padded to 12 KiB by the 4 KiB alignment.
      EXPECT_LT(r->cold_bytes_offloaded, r->hot_bytes_offloaded / 2);
    } else {
      EXPECT_GE(r->cold_bytes_offloaded, r->hot_bytes_offloaded);
    }
  }
}

TEST_F(ExampleEngineTest, MooncakeTraceFile) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  // Three requests: the second extends the first's two blocks, the third shares only block 0.
  const std::string trace = dir_->File("trace.jsonl");
  std::ofstream(trace)
      << R"({"timestamp": 0, "input_length": 1100, "output_length": 3, "hash_ids": [0, 1, 2]})"
      << "\n"
      << R"({"timestamp": 5, "input_length": 1600, "output_length": 2, "hash_ids": [0, 1, 2, 3]})"
      << "\n"
      << R"({"timestamp": 9, "input_length": 700, "output_length": 1, "hash_ids": [0, 4]})"
      << "\n";
  absl::StatusOr<std::vector<engine::Session>> sessions = engine::LoadMooncakeTrace(trace, 0);
  ASSERT_TRUE(sessions.ok()) << sessions.status();
  ASSERT_EQ(sessions->size(), 3u);
  EngineRunOptions o = Options("raw", *sessions);
  o.layout = PageLayout::Gqa({2, 1, 64, 512, DType::kBf16, 0, 0}).value();
  absl::StatusOr<EngineRunResult> r = engine::RunEngine(o);
  ASSERT_TRUE(r.ok()) << r.status();
  // Request 2 reuses blocks 0 and 1 (1,024 tokens; block 2 was partial in request 1), request 3
  // reuses block 0 (512).
  EXPECT_EQ(r->report.cached_tokens, 1024u + 512u);
  EXPECT_EQ(r->mismatches(), 0u);
  EXPECT_EQ(r->report.pages_checked, 3u);

  std::ofstream(dir_->File("bad.jsonl"))
      << R"({"timestamp": 0, "input_length": 9000, "output_length": 3, "hash_ids": [0]})"
      << "\n";
  absl::StatusOr<std::vector<engine::Session>> bad =
      engine::LoadMooncakeTrace(dir_->File("bad.jsonl"), 0);
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status())) << bad.status();
  EXPECT_NE(bad.status().message().find("line 1"), std::string::npos) << bad.status();
}

// A third method, known only to this test.
std::atomic<int> g_starts{0}, g_context_ends{0}, g_steps{0}, g_pauses{0}, g_resumes{0},
    g_finishes{0};

class HookCounter : public CompressionManager {
 public:
  std::string_view name() const override { return "count_hooks"; }
  absl::Status OnRequestStart(RequestState&) override { return Count(g_starts); }
  absl::Status OnContextEnd(RequestState&) override { return Count(g_context_ends); }
  absl::Status OnGenerationStepEnd(std::span<RequestState* const>) override {
    return Count(g_steps);
  }
  absl::Status OnToolCallPause(RequestState&) override { return Count(g_pauses); }
  absl::Status OnToolCallResume(RequestState&) override { return Count(g_resumes); }
  absl::Status OnRequestFinish(RequestState&) override { return Count(g_finishes); }

 private:
  static absl::Status Count(std::atomic<int>& c) {
    ++c;
    return absl::OkStatus();
  }
};

TEST_F(ExampleEngineTest, AThirdMethodPlugsInThroughTheRegistry) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  ASSERT_TRUE(
      RegisterCompressionMethod("count_hooks", [](const CompressionConfig&, const EngineContext&) {
        return absl::StatusOr<std::unique_ptr<CompressionManager>>(std::make_unique<HookCounter>());
      }).ok());
  const std::vector<engine::Session> sessions = Synthetic(5);
  int turns = 0, generated = 0;
  for (const engine::Session& s : sessions) {
    turns += static_cast<int>(s.turns.size());
    for (const engine::Turn& t : s.turns) generated += static_cast<int>(t.output_tokens);
  }
  EngineRunOptions o = Options("nvfp4", sessions);
  CompressionConfig counter;
  counter.algorithm = "count_hooks";
  o.configs.push_back(counter);
  absl::StatusOr<EngineRunResult> r = engine::RunEngine(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->methods, (std::vector<std::string>{"quantization_for_cold_page", "count_hooks"}));
  EXPECT_EQ(r->mismatches(), 0u);
  EXPECT_EQ(g_starts, 5);
  EXPECT_EQ(g_context_ends, 5);
  EXPECT_EQ(g_finishes, 5);
  EXPECT_EQ(g_pauses, turns - 5);
  EXPECT_EQ(g_resumes, turns - 5);
  // One step per generated token and one per tool result appended after a resume.
  EXPECT_EQ(g_steps, generated + (turns - 5));
}

// TriAttention and cold-page offload together, from configuration blocks: a calibration file and a
// config.json of the engine's model, the CPU reference (host pool), a small budget so that rounds
// run; resumed pages still match their snapshots, and only exact pages reach the cache.
TEST_F(ExampleEngineTest, TriAttentionAndColdPagesThroughTheHooks) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  const testing::TriAttentionModel model{2, 2, 1, 64, 10000.0};
  std::mt19937_64 rng(11);
  testing::WriteSafetensorsCalibration(testing::MakeCalibration(model, rng),
                                       dir_->File("calibration.safetensors"));
  testing::WriteModelConfigJson(model, dir_->File("config.json"));
  absl::StatusOr<CompressionConfig> tri = ParseCompressionConfig(
      absl::StrCat("algorithm: triattention\nbudget: 32\nbeta: 16\neviction_mode: per_head\n",
                   "calibration_path: ", dir_->File("calibration.safetensors"), "\n",
                   "model_config_path: ", dir_->File("config.json"), "\n"));
  ASSERT_TRUE(tri.ok()) << tri.status();
  EngineRunOptions o = Options("nvfp4", Synthetic(6));
  o.configs.insert(o.configs.begin(), *tri);
  absl::StatusOr<EngineRunResult> r = engine::RunEngine(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->methods, (std::vector<std::string>{"triattention", "quantization_for_cold_page"}));
  EXPECT_EQ(r->report.hook_errors, 0u) << r->report.first_error;
  EXPECT_GT(r->report.evicted_tokens, 0u);
  EXPECT_EQ(r->mismatches(), 0u);
  EXPECT_GT(r->report.resumed_pages_checked, 0u);
  EXPECT_GT(r->report.cached_tokens, 0u);

  // A calibration of another model is refused before anything runs, naming both sides.
  testing::WriteModelConfigJson(model, dir_->File("config3.json"), 3);
  tri->model_config_path = dir_->File("config3.json");
  o.configs[0] = *tri;
  r = engine::RunEngine(o);
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("triattention"), std::string::npos) << r.status();
}

TEST_F(ExampleEngineTest, UnknownMethodIsRejectedBeforeTheReplay) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  EngineRunOptions o = Options("raw", Synthetic(1));
  o.configs[0].algorithm = "zip";
  absl::StatusOr<EngineRunResult> r = engine::RunEngine(o);
  EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
  EXPECT_NE(r.status().message().find("quantization_for_cold_page"), std::string::npos)
      << r.status();
}

}  // namespace
}  // namespace kvtier::integration
