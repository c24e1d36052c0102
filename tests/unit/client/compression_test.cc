// Tests of the engine-side compression framework (kvtier/compression.h): the configuration block
// in YAML and JSON and every rejection, the method registry (built-ins, unknown names, a method
// registered by the test and driven through a chain), and the "triattention" method: its factory's
// rejections and, on a host GQA cache in one kvtier pool, the same lengths, freed pages and bytes
// as a triattention::Evictor driven directly over a copy of the cache in per-layer pools.
#include "kvtier/compression.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "codec/dtype.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvtier/layout.h"
#include "tests/testing/special_files.h"
#include "tests/testing/triattention_files.h"
#include "triattention/calibration.h"
#include "triattention/evictor.h"
#include "triattention/kv_view.h"

namespace kvtier {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// ---- Configuration ---------------------------------------------------------------------------

TEST(CompressionConfigTest, YamlAndJsonGiveTheSameConfig) {
  const std::string yaml = R"(
compression_config:
  algorithm: triattention
  budget: 1024
  beta: 64
  eviction_mode: per_head
  calibration_path: /models/qwen3-8b/calib.pt
  model_config_path: /models/qwen3-8b/config.json
  quant: nvfp4x2
  rope_precision: lossless
  daemon_socket: /tmp/kvtier.sock
  durable: true
  my_method_knob: 7
)";
  const std::string json = R"({"algorithm": "triattention", "budget": 1024, "beta": 64,
    "eviction_mode": "per_head", "calibration_path": "/models/qwen3-8b/calib.pt",
    "model_config_path": "/models/qwen3-8b/config.json", "quant": "nvfp4x2",
    "rope_precision": "lossless", "daemon_socket": "/tmp/kvtier.sock", "durable": true,
    "my_method_knob": 7})";
  absl::StatusOr<CompressionConfig> from_yaml = ParseCompressionConfig(yaml);
  ASSERT_TRUE(from_yaml.ok()) << from_yaml.status();
  absl::StatusOr<CompressionConfig> from_json = ParseCompressionConfig(json);
  ASSERT_TRUE(from_json.ok()) << from_json.status();
  for (const CompressionConfig* c : {&*from_yaml, &*from_json}) {
    EXPECT_EQ(c->algorithm, "triattention");
    EXPECT_EQ(c->budget, 1024);
    EXPECT_EQ(c->beta, 64);
    EXPECT_EQ(c->eviction_mode, "per_head");
    EXPECT_EQ(c->calibration_path, "/models/qwen3-8b/calib.pt");
    EXPECT_EQ(c->model_config_path, "/models/qwen3-8b/config.json");
    EXPECT_EQ(c->quant, "nvfp4x2");
    EXPECT_EQ(c->rope_precision, "lossless");
    EXPECT_EQ(c->daemon_socket, "/tmp/kvtier.sock");
    EXPECT_TRUE(c->durable);
    EXPECT_EQ(c->options.size(), 11u);
    EXPECT_EQ(c->options.at("my_method_knob"), "7");
    EXPECT_EQ(c->options.at("budget"), "1024");
  }
  EXPECT_EQ(from_yaml->options, from_json->options);
  // The wrapper key works in JSON too.
  absl::StatusOr<CompressionConfig> wrapped =
      ParseCompressionConfig(absl::StrCat(R"({"compression_config": )", json, "}"));
  ASSERT_TRUE(wrapped.ok()) << wrapped.status();
  EXPECT_EQ(wrapped->options, from_json->options);
}

TEST(CompressionConfigTest, DefaultsForKeysNotGiven) {
  absl::StatusOr<CompressionConfig> c =
      ParseCompressionConfig("algorithm: quantization_for_cold_page\n");
  ASSERT_TRUE(c.ok()) << c.status();
  const CompressionConfig defaults;
  EXPECT_EQ(c->algorithm, "quantization_for_cold_page");
  EXPECT_EQ(c->budget, defaults.budget);
  EXPECT_EQ(c->beta, defaults.beta);
  EXPECT_EQ(c->eviction_mode, "union");
  EXPECT_EQ(c->quant, "nvfp4");
  EXPECT_EQ(c->rope_precision, "quantized");
  EXPECT_EQ(c->daemon_socket, "");
  EXPECT_FALSE(c->durable);
  EXPECT_EQ(c->options,
            (std::map<std::string, std::string>{{"algorithm", "quantization_for_cold_page"}}));
}

struct BadConfig {
  const char* text;
  std::vector<std::string> message;  // substrings of the error
};

TEST(CompressionConfigTest, EveryRejectionNamesTheKeyAndTheValue) {
  const BadConfig cases[] = {
      {"", {"empty document"}},
      {"# nothing but a comment\n", {"empty document"}},
      {"budget: 10\n", {"missing 'algorithm'", "triattention", "quantization_for_cold_page"}},
      {"algorithm: ''\n", {"missing 'algorithm'"}},
      {"algorithm: triattention\nbudget: lots\n", {"budget 'lots' is not a whole number"}},
      {"algorithm: triattention\nbudget: 20.5\n", {"budget '20.5' is not a whole number"}},
      {"algorithm: triattention\nbudget: 0\n", {"budget 0 must be at least 1"}},
      {"algorithm: triattention\nbeta: -3\n", {"beta -3 must be at least 1"}},
      {"algorithm: triattention\nbeta: x\n", {"beta 'x' is not a whole number"}},
      {"algorithm: triattention\nbudget: [1, 2]\n", {"key 'budget'", "scalar", "a sequence"}},
      {"algorithm: triattention\nextra: {a: 1}\n", {"key 'extra'", "scalar", "a mapping"}},
      {"algorithm: triattention\ncalibration_path:\n", {"key 'calibration_path'", "nothing"}},
      {"algorithm: [triattention]\n", {"key 'algorithm'", "a sequence"}},
      {"algorithm: triattention\neviction_mode: per_token\n",
       {"eviction_mode", "per_token", "per_layer_perhead"}},
      {"algorithm: quantization_for_cold_page\nquant: int8\n",
       {"quant 'int8' is not one of nvfp4, nvfp4x2, raw"}},
      {"algorithm: quantization_for_cold_page\nrope_precision: fp8\n",
       {"rope_precision 'fp8' is not one of quantized, lossless"}},
      {"algorithm: quantization_for_cold_page\ndurable: maybe\n", {"durable 'maybe'"}},
      {"- algorithm\n- triattention\n", {"expected a mapping", "a sequence"}},
      {"just a string\n", {"expected a mapping", "a scalar"}},
      {"{\"algorithm\": \"triattention\", ", {"not YAML or JSON"}},
      {"compression_config:\n  algorithm: triattention\nbudget: 5\n",
       {"'compression_config' must be the only top-level key"}},
      {"compression_config:\n", {"'compression_config' is empty"}},
      {"compression_config: [1]\n", {"expected a mapping", "a sequence"}},
  };
  for (const BadConfig& c : cases) {
    SCOPED_TRACE(c.text);
    absl::StatusOr<CompressionConfig> parsed = ParseCompressionConfig(c.text);
    ASSERT_FALSE(parsed.ok());
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << parsed.status();
    for (const std::string& part : c.message) {
      EXPECT_THAT(parsed.status().message(), HasSubstr(part));
    }
  }
}

TEST(CompressionConfigTest, LoadNamesThePath) {
  const std::string dir = ::testing::TempDir();
  const std::string good = dir + "/compression_test_good.yaml";
  const std::string bad = dir + "/compression_test_bad.json";
  std::ofstream(good) << "compression_config:\n  algorithm: triattention\n  budget: 99\n";
  std::ofstream(bad) << "{\"algorithm\": \"triattention\", \"beta\": 0}";
  absl::StatusOr<CompressionConfig> loaded = LoadCompressionConfig(good);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->budget, 99);

  loaded = LoadCompressionConfig(bad);
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(loaded.status().message(), AllOf(HasSubstr(bad), HasSubstr("beta 0")));

  const std::string missing = dir + "/compression_test_no_such_file.yaml";
  loaded = LoadCompressionConfig(missing);
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(loaded.status().message(), HasSubstr(missing));
  std::remove(good.c_str());
  std::remove(bad.c_str());

  // A FIFO is refused at once (the loader used to wait in open() for a writer), a directory too.
  const std::string fifo = dir + "/compression_test.fifo";
  std::remove(fifo.c_str());
  ASSERT_TRUE(kvtier::testing::MakeFifo(fifo));
  std::optional<absl::Status> st =
      kvtier::testing::CallGuardingFifo(fifo, [&] { return LoadCompressionConfig(fifo).status(); });
  std::remove(fifo.c_str());
  ASSERT_TRUE(st.has_value()) << "LoadCompressionConfig blocked on a FIFO";
  EXPECT_EQ(st->code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(st->message(),
            "compression config " + fifo + " is a FIFO (named pipe), not a regular file");
  loaded = LoadCompressionConfig(dir);
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(loaded.status().message(), HasSubstr("is a directory, not a regular file"));
}

// ---- Registry and chain ----------------------------------------------------------------------

TEST(CompressionRegistryTest, BuiltInsAreRegisteredAndUnknownNamesAreListed) {
  const std::vector<std::string> names = CompressionMethodNames();
  EXPECT_THAT(names, ::testing::IsSupersetOf({"quantization_for_cold_page", "triattention"}));
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));

  CompressionConfig config;
  config.algorithm = "h2o";
  absl::StatusOr<std::unique_ptr<CompressionManager>> method =
      CreateCompressionMethod(config, EngineContext{});
  EXPECT_EQ(method.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(method.status().message(),
              AllOf(HasSubstr("'h2o'"), HasSubstr("quantization_for_cold_page, triattention")));

  EXPECT_EQ(RegisterCompressionMethod(
                "triattention",
                [](const CompressionConfig&, const EngineContext&)
                    -> absl::StatusOr<std::unique_ptr<CompressionManager>> { return nullptr; })
                .code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(RegisterCompressionMethod("", nullptr).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RegisterCompressionMethod("no_factory", nullptr).code(),
            absl::StatusCode::kInvalidArgument);
}

// A method of the test's own: counts its hook calls (exposed as Counters()) and fails the hook
// named by its "fail_at" option.
class CountingMethod : public CompressionManager {
 public:
  CountingMethod(std::string tag, std::string fail_at)
      : tag_(std::move(tag)), fail_at_(std::move(fail_at)) {}
  std::string_view name() const override { return tag_; }

  absl::Status OnRequestStart(RequestState& r) override {
    r.cached_tokens += 16;
    return Count("start");
  }
  absl::Status OnPrefillChunkEnd(RequestState&, int64_t) override { return Count("chunk"); }
  absl::Status OnContextEnd(RequestState&) override { return Count("context"); }
  absl::Status OnGenerationStepBegin(std::span<RequestState* const> requests) override {
    return Count("step_begin", requests.size());
  }
  absl::Status OnGenerationStepEnd(std::span<RequestState* const> requests) override {
    for (RequestState* r : requests) r->num_tokens -= 1;  // each method sees the previous one's
    return Count("step_end", requests.size());
  }
  absl::Status OnToolCallPause(RequestState&) override { return Count("pause"); }
  absl::Status OnToolCallResume(RequestState&) override { return Count("resume"); }
  absl::Status OnRequestFinish(RequestState&) override { return Count("finish"); }
  std::map<std::string, uint64_t> Counters() const override { return counts_; }

 private:
  absl::Status Count(const std::string& hook, uint64_t n = 1) {
    counts_[absl::StrCat("counting_", hook)] += n;
    if (hook == fail_at_) return absl::InternalError(absl::StrCat(tag_, " fails at ", hook));
    return absl::OkStatus();
  }
  std::string tag_;
  std::string fail_at_;
  std::map<std::string, uint64_t> counts_;
};

absl::StatusOr<std::unique_ptr<CompressionManager>> MakeCountingMethod(
    const CompressionConfig& config, const EngineContext& engine) {
  if (engine.model.empty()) return absl::InvalidArgumentError("counting: no model");
  auto fail_at = config.options.find("fail_at");
  return std::make_unique<CountingMethod>(config.options.at("tag"),
                                          fail_at == config.options.end() ? "" : fail_at->second);
}

std::unique_ptr<CompressionManager> BuildCounting(const std::string& yaml) {
  absl::StatusOr<CompressionConfig> config = ParseCompressionConfig(yaml);
  EXPECT_TRUE(config.ok()) << config.status();
  EngineContext engine;
  engine.model = "test-model";
  absl::StatusOr<std::unique_ptr<CompressionManager>> method =
      CreateCompressionMethod(*config, engine);
  EXPECT_TRUE(method.ok()) << method.status();
  return method.ok() ? std::move(*method) : nullptr;
}

TEST(CompressionRegistryTest, AMethodRegisteredByTheTestRunsThroughAChain) {
  ASSERT_TRUE(RegisterCompressionMethod("counting_test_method", MakeCountingMethod).ok());
  EXPECT_THAT(CompressionMethodNames(), ::testing::Contains("counting_test_method"));
  // The factory's own errors come back unchanged.
  CompressionConfig config;
  config.algorithm = "counting_test_method";
  EXPECT_THAT(CreateCompressionMethod(config, EngineContext{}).status().message(),
              HasSubstr("counting: no model"));

  std::vector<std::unique_ptr<CompressionManager>> methods;
  methods.push_back(BuildCounting("algorithm: counting_test_method\ntag: first\n"));
  methods.push_back(BuildCounting("{algorithm: counting_test_method, tag: second}"));
  ASSERT_NE(methods[0], nullptr);
  ASSERT_NE(methods[1], nullptr);
  std::unique_ptr<CompressionManager> chain = ChainCompressionMethods(std::move(methods));
  EXPECT_EQ(chain->name(), "first+second");

  RequestState a, b;
  a.id = 1;
  b.id = 2;
  a.num_tokens = b.num_tokens = 100;
  RequestState* both[] = {&a, &b};
  ASSERT_TRUE(chain->OnRequestStart(a).ok());
  EXPECT_EQ(a.cached_tokens, 32);  // both methods ran
  ASSERT_TRUE(chain->OnPrefillChunkEnd(a, 64).ok());
  ASSERT_TRUE(chain->OnContextEnd(a).ok());
  for (int step = 0; step < 3; ++step) {
    ASSERT_TRUE(chain->OnGenerationStepBegin(both).ok());
    ASSERT_TRUE(chain->OnGenerationStepEnd(both).ok());
  }
  EXPECT_EQ(a.num_tokens, 94);
  ASSERT_TRUE(chain->OnToolCallPause(b).ok());
  ASSERT_TRUE(chain->OnToolCallResume(b).ok());
  ASSERT_TRUE(chain->OnRequestFinish(a).ok());
  ASSERT_TRUE(chain->OnRequestFinish(b).ok());
  // Counters are summed over the two methods.
  EXPECT_EQ(chain->Counters(), (std::map<std::string, uint64_t>{{"counting_start", 2},
                                                                {"counting_chunk", 2},
                                                                {"counting_context", 2},
                                                                {"counting_step_begin", 12},
                                                                {"counting_step_end", 12},
                                                                {"counting_pause", 2},
                                                                {"counting_resume", 2},
                                                                {"counting_finish", 4}}));
}

TEST(CompressionRegistryTest, AChainStopsAtTheFirstErrorButFinishesEveryMethod) {
  std::vector<std::unique_ptr<CompressionManager>> methods;
  methods.push_back(
      BuildCounting("algorithm: counting_test_method\ntag: failing\nfail_at: context\n"));
  methods.push_back(BuildCounting("algorithm: counting_test_method\ntag: after\n"));
  methods.push_back(BuildCounting("algorithm: counting_test_method\ntag: last\nfail_at: finish\n"));
  ASSERT_NE(methods[0], nullptr);
  const CompressionManager* after = methods[1].get();
  std::unique_ptr<CompressionManager> chain = ChainCompressionMethods(std::move(methods));
  RequestState r;
  absl::Status status = chain->OnContextEnd(r);
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(status.message(), HasSubstr("failing fails at context"));
  EXPECT_FALSE(after->Counters().contains("counting_context"));
  // OnRequestFinish reaches every method; the error of the last one is returned.
  status = chain->OnRequestFinish(r);
  EXPECT_THAT(status.message(), HasSubstr("last fails at finish"));
  EXPECT_EQ(after->Counters().at("counting_finish"), 1u);
}

// ---- TriAttention ----------------------------------------------------------------------------

constexpr int kLayers = 2;
constexpr int kKvHeads = 2;
constexpr int kQueryHeads = 4;
constexpr int kHeadDim = 64;
constexpr int kPage = 16;
constexpr uint32_t kSlots = 64;
constexpr double kTheta = 10000.0;

PageLayout TestLayout() {
  GqaLayoutOptions o;
  o.num_layers = kLayers;
  o.kv_heads = kKvHeads;
  o.head_dim = kHeadDim;
  o.tokens_per_page = kPage;
  o.dtype = DType::kBf16;
  return PageLayout::Gqa(o).value();
}

constexpr testing::TriAttentionModel kModel{kLayers, kQueryHeads, kKvHeads, kHeadDim, kTheta};

class TriAttentionMethodTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string dir = ::testing::TempDir();
    calibration_path_ = dir + "/compression_test_calibration.safetensors";
    model_config_path_ = dir + "/compression_test_config.json";
    other_config_path_ = dir + "/compression_test_config3.json";
    std::mt19937_64 rng(5);
    testing::WriteSafetensorsCalibration(testing::MakeCalibration(kModel, rng), calibration_path_);
    testing::WriteModelConfigJson(kModel, model_config_path_);
    testing::WriteModelConfigJson(kModel, other_config_path_, 3);
  }
  void TearDown() override {
    std::remove(calibration_path_.c_str());
    std::remove(model_config_path_.c_str());
    std::remove(other_config_path_.c_str());
  }

  CompressionConfig Config() const {
    CompressionConfig c;
    c.algorithm = "triattention";
    c.budget = 32;
    c.beta = 16;
    c.calibration_path = calibration_path_;
    c.model_config_path = model_config_path_;
    return c;
  }

  // An engine over one host pool of kSlots pages of `layout`.
  EngineContext Engine(const PageLayout& layout, std::vector<uint8_t>& pool) const {
    EngineContext e;
    e.model = "test-model";
    e.layout = layout;
    pool.assign(kSlots * layout.pools()[0].slot_bytes, 0);
    e.pool_bases = {pool.data()};
    e.slots = kSlots;
    return e;
  }

  std::string calibration_path_, model_config_path_, other_config_path_;
};

TEST_F(TriAttentionMethodTest, FactoryRejectsWhatCannotWork) {
  std::vector<uint8_t> pool;
  MlaLayoutOptions mla;
  mla.num_layers = 2;
  mla.tokens_per_page = kPage;
  const PageLayout mla_layout = PageLayout::Mla(mla).value();
  absl::StatusOr<std::unique_ptr<CompressionManager>> m =
      CreateCompressionMethod(Config(), Engine(mla_layout, pool));
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(m.status().message(), HasSubstr("TriAttention does not apply to MLA layouts"));

  HybridLayoutOptions hybrid;
  hybrid.num_layers = 2;
  hybrid.attention_layers = {0};
  hybrid.kv_heads = kKvHeads;
  hybrid.head_dim = kHeadDim;
  hybrid.tokens_per_page = kPage;
  hybrid.state_bytes = 256;
  m = CreateCompressionMethod(Config(), Engine(PageLayout::Hybrid(hybrid).value(), pool));
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(m.status().message(), AllOf(HasSubstr("'lossless'"), HasSubstr("GQA")));

  EngineContext no_layout;
  m = CreateCompressionMethod(Config(), no_layout);
  EXPECT_THAT(m.status().message(), HasSubstr("no layout"));

  EngineContext no_pools = Engine(TestLayout(), pool);
  no_pools.pool_bases.clear();
  m = CreateCompressionMethod(Config(), no_pools);
  EXPECT_THAT(m.status().message(), HasSubstr("0 pool bases for the layout's 1 pools"));

  CompressionConfig config = Config();
  config.calibration_path.clear();
  m = CreateCompressionMethod(config, Engine(TestLayout(), pool));
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(m.status().message(), HasSubstr("calibration_path is required"));

  config = Config();
  config.model_config_path.clear();
  m = CreateCompressionMethod(config, Engine(TestLayout(), pool));
  EXPECT_THAT(m.status().message(), HasSubstr("model_config_path is required"));

  // A calibration of 2 layers against a model of 3: the Evictor's error, naming the file.
  config = Config();
  config.model_config_path = other_config_path_;
  m = CreateCompressionMethod(config, Engine(TestLayout(), pool));
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(m.status().message(), HasSubstr(other_config_path_));

  config = Config();
  config.calibration_path += ".missing";
  m = CreateCompressionMethod(config, Engine(TestLayout(), pool));
  EXPECT_EQ(m.status().code(), absl::StatusCode::kNotFound);

  config = Config();
  config.options["normalize_scores"] = "sometimes";
  m = CreateCompressionMethod(config, Engine(TestLayout(), pool));
  EXPECT_THAT(m.status().message(), HasSubstr("normalize_scores 'sometimes'"));

  m = CreateCompressionMethod(Config(), Engine(TestLayout(), pool));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->name(), "triattention");
}

// The engine's side of one request, for the method and for the direct Evictor.
struct SimRequest {
  RequestState state;
  int64_t length = 0;  // the direct Evictor's physical length
};

TEST_F(TriAttentionMethodTest, SameOutcomesAndBytesAsAnEvictorDrivenDirectly) {
  const PageLayout layout = TestLayout();
  std::vector<uint8_t> pool;
  EngineContext engine = Engine(layout, pool);
  const uint64_t slot_bytes = layout.pools()[0].slot_bytes;
  std::mt19937_64 rng(9);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (size_t e = 0; e < pool.size() / 2; ++e) {
    codec::StoreFromFloat(codec::DType::kBf16, normal(rng), pool.data(), e);
  }
  // The same cache as per-layer K and V pools of bare planes, for the direct Evictor.
  const uint64_t plane = uint64_t{kKvHeads} * kPage * kHeadDim * 2;
  std::map<std::string, BufferInfo> buffers;
  for (const BufferInfo& b : layout.buffers()) buffers[b.name] = b;
  std::vector<std::vector<uint8_t>> k(kLayers), v(kLayers);
  auto copy_out = [&](std::vector<uint8_t>& dst, const BufferInfo& b) {
    dst.resize(kSlots * plane);
    for (uint32_t s = 0; s < kSlots; ++s) {
      std::memcpy(dst.data() + s * plane, pool.data() + s * slot_bytes + b.offset_bytes, plane);
    }
  };
  triattention::KvCacheView direct_view;
  for (int l = 0; l < kLayers; ++l) {
    ASSERT_EQ(buffers.at(absl::StrCat("k.", l)).data_bytes, plane);
    copy_out(k[l], buffers.at(absl::StrCat("k.", l)));
    copy_out(v[l], buffers.at(absl::StrCat("v.", l)));
    direct_view.layers.push_back({k[l].data(), v[l].data()});
  }
  direct_view.num_pages = kSlots;
  direct_view.page_tokens = kPage;
  direct_view.num_kv_heads = kKvHeads;
  direct_view.head_dim = kHeadDim;
  direct_view.dtype = codec::DType::kBf16;

  const CompressionConfig config = Config();
  absl::StatusOr<std::unique_ptr<CompressionManager>> method =
      CreateCompressionMethod(config, engine);
  ASSERT_TRUE(method.ok()) << method.status();
  triattention::EvictorConfig evictor_config;
  evictor_config.budget = config.budget;
  evictor_config.beta = config.beta;
  absl::StatusOr<std::unique_ptr<triattention::Evictor>> evictor =
      triattention::Evictor::CreateFromFiles(evictor_config, calibration_path_, model_config_path_,
                                             direct_view);
  ASSERT_TRUE(evictor.ok()) << evictor.status();

  // Two requests on disjoint pages (8 each, more than they ever hold) and a third the method
  // never saw at context end: it is left alone.
  std::vector<int32_t> all(kSlots);
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng);
  SimRequest requests[3];
  const int64_t prompts[3] = {20, 37, 16};
  const int64_t tails[3] = {0, 2, 0};
  for (int i = 0; i < 3; ++i) {
    RequestState& s = requests[i].state;
    s.id = 100 + i;
    s.prompt_len = prompts[i];
    s.protected_tail = tails[i];
    s.block_table.assign(all.begin() + 8 * i, all.begin() + 8 * (i + 1));
    s.num_tokens = requests[i].length = prompts[i] + tails[i];
    if (i < 2) {
      ASSERT_TRUE((*method)->OnContextEnd(s).ok());
      ASSERT_TRUE((*evictor)->AddRequest(s.id, s.prompt_len).ok());
    }
  }
  EXPECT_EQ((*method)->OnContextEnd(requests[0].state).code(), absl::StatusCode::kAlreadyExists);

  int rounds = 0;
  for (int step = 0; step < 90; ++step) {
    const int64_t n = step % 7 == 3 ? 2 : 1;  // a speculative step now and then
    std::vector<triattention::StepRequest> direct_steps;
    std::vector<RequestState*> states;
    for (int i = 0; i < 3; ++i) {
      SimRequest& r = requests[i];
      r.state.num_tokens += n;
      r.state.new_tokens = n;
      r.length += n;
      states.push_back(&r.state);
      if (i < 2) {
        direct_steps.push_back({r.state.id, n,
                                triattention::KvRequestView{r.state.block_table, r.length,
                                                            r.state.prompt_len, tails[i]}});
      }
    }
    ASSERT_TRUE((*method)->OnGenerationStepEnd(states).ok()) << "step " << step;
    absl::StatusOr<std::vector<triattention::StepOutcome>> direct =
        (*evictor)->OnGenerationStepEnd(direct_steps);
    ASSERT_TRUE(direct.ok()) << direct.status();
    for (int i = 0; i < 2; ++i) {
      SCOPED_TRACE(absl::StrCat("step ", step, " request ", i));
      const triattention::StepOutcome& o = (*direct)[i];
      requests[i].length = o.new_length;
      EXPECT_EQ(requests[i].state.num_tokens, o.new_length);
      EXPECT_EQ(requests[i].state.freed_pages, o.freed_pages);
      if (o.evicted) {
        ++rounds;
        EXPECT_TRUE(requests[i].state.compacted);
      }
    }
    EXPECT_EQ(requests[2].state.num_tokens, requests[2].length);
    EXPECT_FALSE(requests[2].state.compacted);
  }
  EXPECT_GE(rounds, 6);  // both requests went through several rounds

  // The pool holds what the direct Evictor's planes hold, page for page.
  for (uint32_t s = 0; s < kSlots; ++s) {
    for (int l = 0; l < kLayers; ++l) {
      SCOPED_TRACE(absl::StrCat("slot ", s, " layer ", l));
      const uint8_t* page = pool.data() + s * slot_bytes;
      EXPECT_EQ(std::memcmp(page + buffers.at(absl::StrCat("k.", l)).offset_bytes,
                            k[l].data() + s * plane, plane),
                0);
      EXPECT_EQ(std::memcmp(page + buffers.at(absl::StrCat("v.", l)).offset_bytes,
                            v[l].data() + s * plane, plane),
                0);
    }
  }
  const std::map<std::string, uint64_t> counters = (*method)->Counters();
  EXPECT_EQ(counters.at("triattention_rounds"), static_cast<uint64_t>(rounds));
  EXPECT_EQ(counters.at("triattention_requests"), 2u);
  EXPECT_GT(counters.at("triattention_evicted_tokens"), 0u);

  for (int i = 0; i < 3; ++i) EXPECT_TRUE((*method)->OnRequestFinish(requests[i].state).ok());
  EXPECT_EQ((*method)->Counters().at("triattention_requests"), 0u);
}

}  // namespace
}  // namespace kvtier
