// Tests of the RoPE tables (triattention/rope.h) on config.json texts written inline, modelled on
// shipped models (Qwen3-8B, Llama-3.1-8B, GPT-OSS), in the transformers < 5 (rope_scaling) and >= 5
// (rope_parameters) forms. Expected frequencies are computed here independently, with the formulas
// of transformers' modeling_rope_utils.py written out plainly, and pinned by a few literal values
// computed with Python's math module. Also: the errors a user would see, the checks against a
// calibration and the fill-in of omega / freq_scale_sq.
#include "triattention/rope.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numbers>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/special_files.h"

namespace kvtier::triattention {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr double kPi = std::numbers::pi;

// |actual - expected| <= rel * |expected|.
void ExpectRelNear(double actual, double expected, double rel, const std::string& what) {
  EXPECT_LE(std::abs(actual - expected), rel * std::abs(expected))
      << what << ": " << actual << " vs " << expected;
}

RopeTables ParseOk(const std::string& json) {
  absl::StatusOr<RopeTables> tables = RopeTablesFromConfigJson(json);
  EXPECT_TRUE(tables.ok()) << tables.status();
  return tables.ok() ? *tables : RopeTables{};
}

absl::Status ParseError(const std::string& json) {
  absl::StatusOr<RopeTables> tables = RopeTablesFromConfigJson(json);
  EXPECT_FALSE(tables.ok()) << "accepted: " << json;
  return tables.status();
}

Calibration MakeCalibration(int layers, int heads, int bands) {
  Calibration c;
  c.layers = layers;
  c.heads = heads;
  c.bands = bands;
  const size_t n = static_cast<size_t>(layers) * heads * bands;
  c.q_mean_real.assign(n, 0.5f);
  c.q_mean_imag.assign(n, -0.5f);
  c.q_abs_mean.assign(n, 1.0f);
  c.present.assign(static_cast<size_t>(layers) * heads, 1);
  c.head_dim = 2 * bands;
  c.rope_style = "half";
  return c;
}

// ---- Configs, shaped like the shipped ones (only the fields that matter plus some noise).

constexpr char kQwen3_8B[] = R"({
  "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 4096,
  "head_dim": 128, "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 36,
  "max_position_embeddings": 40960, "rope_theta": 1000000, "rope_scaling": null,
  "torch_dtype": "bfloat16", "vocab_size": 151936
})";

constexpr char kLlama31_8B[] = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
  "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32,
  "max_position_embeddings": 131072, "rope_theta": 500000.0,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"}
})";

constexpr char kGptOss[] = R"({
  "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_size": 2880,
  "head_dim": 64, "num_attention_heads": 64, "num_key_value_heads": 8, "num_hidden_layers": 36,
  "max_position_embeddings": 131072, "rope_theta": 150000,
  "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0, "rope_type": "yarn",
                   "original_max_position_embeddings": 4096, "truncate": false}
})";

// ---- Independent reference formulas (transformers' modeling_rope_utils.py, in double).

double Plain(double theta, int dim, int f) { return std::pow(theta, -2.0 * f / dim); }

double Llama3Reference(int f) {
  const double theta = 500000, factor = 8, low = 1, high = 4, old_context = 8192;
  const double inv = Plain(theta, 128, f);
  const double wavelen = 2 * kPi / inv;
  if (wavelen < old_context / high) return inv;
  if (wavelen > old_context / low) return inv / factor;
  const double smooth = (old_context / wavelen - low) / (high - low);
  return (1 - smooth) * inv / factor + smooth * inv;
}

// YaRN's blend for band f of `dim` rotary dims, written as in transformers.
double YarnReference(double theta, int dim, double factor, double beta_fast, double beta_slow,
                     double original, bool truncate, int f) {
  const auto correction_dim = [&](double rotations) {
    return dim * std::log(original / (rotations * 2 * kPi)) / (2 * std::log(theta));
  };
  double low = correction_dim(beta_fast), high = correction_dim(beta_slow);
  if (truncate) low = std::floor(low), high = std::ceil(high);
  low = std::max(low, 0.0);
  high = std::min(high, dim - 1.0);
  if (low == high) high += 0.001;
  const double ramp = std::min(std::max((f - low) / (high - low), 0.0), 1.0);
  const double extrapolation_factor = 1 - ramp;
  const double pos = std::pow(theta, 2.0 * f / dim);
  return (1 / (factor * pos)) * (1 - extrapolation_factor) + (1 / pos) * extrapolation_factor;
}

// ---- Plain RoPE.

TEST(RopeTablesTest, Qwen3DefaultLadder) {
  const RopeTables t = ParseOk(kQwen3_8B);
  EXPECT_EQ(t.rope_type, "default");
  EXPECT_EQ(t.head_dim, 128);
  EXPECT_EQ(t.rotary_dim, 128);
  EXPECT_EQ(t.num_layers, 36);
  EXPECT_EQ(t.num_attention_heads, 32);
  EXPECT_EQ(t.num_kv_heads, 8);
  EXPECT_EQ(t.attention_factor, 1.0);
  ASSERT_EQ(t.inv_freq.size(), 64u);
  for (int f = 0; f < 64; ++f) {
    ExpectRelNear(t.inv_freq[f], std::pow(1e6, -2.0 * f / 128), 1e-12, absl::StrCat("f=", f));
  }
}

TEST(RopeTablesTest, HeadDimDefaultsAndThetaDefault) {
  // Qwen3-0.6B: head_dim 128 although hidden_size / heads = 64; the explicit one wins.
  const RopeTables explicit_dim = ParseOk(R"({"hidden_size": 1024, "head_dim": 128,
      "num_attention_heads": 16, "num_key_value_heads": 8, "num_hidden_layers": 28,
      "rope_theta": 1000000})");
  EXPECT_EQ(explicit_dim.head_dim, 128);
  EXPECT_EQ(explicit_dim.inv_freq.size(), 64u);
  // No head_dim (or null): hidden_size // num_attention_heads. No num_key_value_heads: MHA.
  // No rope_theta: 10000.
  for (const char* head_dim : {"", R"("head_dim": null,)"}) {
    const RopeTables t = ParseOk(absl::StrCat(R"({"hidden_size": 4100, )", head_dim,
                                              R"("num_attention_heads": 32,
                                                 "num_hidden_layers": 2})"));
    EXPECT_EQ(t.head_dim, 128);  // 4100 // 32
    EXPECT_EQ(t.num_kv_heads, 32);
    ASSERT_EQ(t.inv_freq.size(), 64u);
    ExpectRelNear(t.inv_freq[1], std::pow(10000.0, -2.0 / 128), 1e-12, "theta default");
    ExpectRelNear(t.inv_freq[63], std::pow(10000.0, -126.0 / 128), 1e-12, "theta default");
  }
}

// ---- Scaled RoPE.

TEST(RopeTablesTest, Llama31Llama3Scaling) {
  const RopeTables t = ParseOk(kLlama31_8B);
  const RopeTables unscaled = ParseOk(R"({"hidden_size": 4096, "num_attention_heads": 32,
      "num_hidden_layers": 32, "rope_theta": 500000.0})");
  ASSERT_EQ(unscaled.inv_freq.size(), 64u);
  EXPECT_EQ(t.rope_type, "llama3");
  EXPECT_EQ(t.head_dim, 128);
  EXPECT_EQ(t.attention_factor, 1.0);
  ASSERT_EQ(t.inv_freq.size(), 64u);
  for (int f = 0; f < 64; ++f) {
    ExpectRelNear(t.inv_freq[f], Llama3Reference(f), 1e-12, absl::StrCat("f=", f));
  }
  // Pinned with Python: 20 high, 30 medium, 40 low frequency.
  ExpectRelNear(t.inv_freq[20], 0.016560440080994446, 1e-12, "f=20");
  ExpectRelNear(t.inv_freq[30], 0.0013718935677611381, 1e-12, "f=30");
  ExpectRelNear(t.inv_freq[40], 3.428102195952591e-05, 1e-12, "f=40");

  // Three regions: wavelength below 8192/4 unchanged, above 8192/1 divided by 8, smooth between.
  int high = 0, low = 0, medium = 0;
  double previous_ratio = 1.0;
  for (int f = 0; f < 64; ++f) {
    const double plain = Plain(500000, 128, f);
    const double wavelen = 2 * kPi / plain;
    const double ratio = t.inv_freq[f] / plain;
    if (wavelen < 2048) {
      ++high;
      EXPECT_EQ(t.inv_freq[f], unscaled.inv_freq[f]) << f;
    } else if (wavelen > 8192) {
      ++low;
      EXPECT_EQ(t.inv_freq[f], unscaled.inv_freq[f] / 8) << f;
    } else {
      ++medium;
      EXPECT_GT(ratio, 1.0 / 8) << f;
      EXPECT_LT(ratio, 1.0) << f;
    }
    EXPECT_LE(ratio, previous_ratio + 1e-15) << "ratio not monotone at f=" << f;
    previous_ratio = ratio;
  }
  EXPECT_EQ(high, 29);
  EXPECT_EQ(medium, 6);
  EXPECT_EQ(low, 29);
}

TEST(RopeTablesTest, GptOssYarn) {
  const RopeTables t = ParseOk(kGptOss);
  EXPECT_EQ(t.rope_type, "yarn");
  EXPECT_EQ(t.head_dim, 64);
  EXPECT_EQ(t.num_attention_heads, 64);
  EXPECT_EQ(t.num_kv_heads, 8);
  ExpectRelNear(t.attention_factor, 0.1 * std::log(32.0) + 1, 1e-15, "attention_factor");
  ASSERT_EQ(t.inv_freq.size(), 32u);
  for (int f = 0; f < 32; ++f) {
    ExpectRelNear(t.inv_freq[f], YarnReference(150000, 64, 32, 32, 1, 4096, false, f), 1e-12,
                  absl::StrCat("f=", f));
  }
  // Pinned with Python (ramp from dim 8.0928 to 17.398, not truncated).
  const std::vector<std::pair<int, double>> pinned = {{0, 1.0},
                                                      {5, 0.15532298948448497},
                                                      {8, 0.050813274815461475},
                                                      {9, 0.03170569618466377},
                                                      {12, 0.006794959489732219},
                                                      {17, 0.00012931870124506317},
                                                      {18, 3.8308812373753384e-05},
                                                      {31, 3.0235114281192144e-07}};
  for (const auto& [f, value] : pinned) {
    ExpectRelNear(t.inv_freq[f], value, 1e-12, absl::StrCat("pinned f=", f));
  }
  // Outside the ramp: extrapolated (unchanged) below, interpolated (divided by 32) above.
  EXPECT_DOUBLE_EQ(t.inv_freq[3], Plain(150000, 64, 3));
  EXPECT_DOUBLE_EQ(t.inv_freq[25], Plain(150000, 64, 25) / 32);

  // The default truncate = true rounds the ramp to dims 8..18 and changes the blended bands.
  const std::string truncated_json =
      absl::StrReplaceAll(kGptOss, {{R"("truncate": false)", R"("truncate": true)"}});
  const std::string defaulted_json = absl::StrReplaceAll(kGptOss, {{R"(, "truncate": false)", ""}});
  ASSERT_NE(truncated_json, kGptOss);
  ASSERT_NE(defaulted_json, kGptOss);
  const RopeTables truncated = ParseOk(truncated_json);
  const RopeTables defaulted = ParseOk(defaulted_json);
  for (int f = 0; f < 32; ++f) {
    const double expected = YarnReference(150000, 64, 32, 32, 1, 4096, true, f);
    ExpectRelNear(truncated.inv_freq[f], expected, 1e-12, absl::StrCat("truncated f=", f));
    EXPECT_EQ(defaulted.inv_freq[f], truncated.inv_freq[f]) << f;
  }
  // Truncated ramp over dims 8..18: band 12 has ramp 0.4, so 0.6 of the unscaled frequency.
  const double pos12 = std::pow(150000.0, 24.0 / 64);
  ExpectRelNear(truncated.inv_freq[12], 0.4 / (32 * pos12) + 0.6 / pos12, 1e-12, "truncated f=12");
  EXPECT_NE(truncated.inv_freq[12], t.inv_freq[12]);
}

TEST(RopeTablesTest, YarnAttentionFactorFromMscale) {
  // DeepSeek-V3 style: attention factor = get_mscale(40, 0.707) / get_mscale(40, 1.0).
  const RopeTables t = ParseOk(R"({"hidden_size": 7168, "head_dim": 64,
      "num_attention_heads": 128, "num_hidden_layers": 61, "max_position_embeddings": 163840,
      "rope_theta": 10000, "rope_scaling": {"type": "yarn", "factor": 40, "beta_fast": 32,
      "beta_slow": 1, "mscale": 0.707, "mscale_all_dim": 1.0,
      "original_max_position_embeddings": 4096}})");
  ExpectRelNear(t.attention_factor,
                (0.1 * 0.707 * std::log(40.0) + 1) / (0.1 * 1.0 * std::log(40.0) + 1), 1e-15,
                "mscale ratio");
  // No original_max_position_embeddings: max_position_embeddings stands in.
  const RopeTables fallback = ParseOk(R"({"hidden_size": 512, "num_attention_heads": 8,
      "num_hidden_layers": 2, "max_position_embeddings": 4096, "rope_theta": 10000,
      "rope_scaling": {"rope_type": "yarn", "factor": 4}})");
  for (int f = 0; f < 32; ++f) {
    ExpectRelNear(fallback.inv_freq[f], YarnReference(10000, 64, 4, 32, 1, 4096, true, f), 1e-12,
                  absl::StrCat("fallback f=", f));
  }
  ExpectRelNear(fallback.attention_factor, 0.1 * std::log(4.0) + 1, 1e-15, "fallback factor");
}

TEST(RopeTablesTest, ExplicitAttentionFactorGivesFreqScaleSq) {
  const RopeTables t = ParseOk(R"({"hidden_size": 4096, "num_attention_heads": 32,
      "num_hidden_layers": 4, "max_position_embeddings": 131072, "rope_theta": 1000000,
      "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "attention_factor": 1.25,
                       "original_max_position_embeddings": 32768}})");
  EXPECT_EQ(t.attention_factor, 1.25);
  Calibration c = MakeCalibration(4, 32, 64);
  ASSERT_TRUE(CheckCalibrationAgainstRope(c, t).ok()) << CheckCalibrationAgainstRope(c, t);
  FillCalibrationRope(t, &c);
  ASSERT_TRUE(c.freq_scale_sq.has_value());
  ASSERT_EQ(c.freq_scale_sq->size(), 64u);
  for (float v : *c.freq_scale_sq) EXPECT_EQ(v, 1.5625f);
  ASSERT_TRUE(c.omega.has_value());
  ASSERT_EQ(c.omega->size(), 64u);
  bool differs_from_plain = false;
  for (int f = 0; f < 64; ++f) {
    EXPECT_EQ((*c.omega)[f], static_cast<float>(t.inv_freq[f])) << f;
    if (std::abs((*c.omega)[f] - Plain(1e6, 128, f)) > 1e-3 * Plain(1e6, 128, f)) {
      differs_from_plain = true;
    }
  }
  EXPECT_TRUE(differs_from_plain);
  // What it filled now passes the file-value checks.
  EXPECT_TRUE(CheckCalibrationAgainstRope(c, t).ok());
}

TEST(RopeTablesTest, LinearAndDynamic) {
  const RopeTables linear = ParseOk(R"({"hidden_size": 4096, "num_attention_heads": 32,
      "num_hidden_layers": 2, "rope_theta": 10000,
      "rope_scaling": {"rope_type": "linear", "factor": 4}})");
  EXPECT_EQ(linear.rope_type, "linear");
  EXPECT_EQ(linear.attention_factor, 1.0);
  ASSERT_EQ(linear.inv_freq.size(), 64u);
  for (int f = 0; f < 64; ++f) {
    ExpectRelNear(linear.inv_freq[f], Plain(10000, 128, f) / 4, 1e-12, absl::StrCat("f=", f));
  }
  // Dynamic NTK at initialisation (seq_len = max_position_embeddings) is the plain ladder.
  const RopeTables dynamic = ParseOk(R"({"hidden_size": 4096, "num_attention_heads": 32,
      "num_hidden_layers": 2, "rope_theta": 10000, "max_position_embeddings": 4096,
      "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}})");
  EXPECT_EQ(dynamic.rope_type, "dynamic");
  EXPECT_EQ(dynamic.attention_factor, 1.0);
  for (int f = 0; f < 64; ++f) {
    ExpectRelNear(dynamic.inv_freq[f], Plain(10000, 128, f), 1e-12, absl::StrCat("f=", f));
  }
}

TEST(RopeTablesTest, LegacyTypeKey) {
  const RopeTables t = ParseOk(R"({"hidden_size": 4096, "num_attention_heads": 32,
      "num_hidden_layers": 2, "rope_scaling": {"type": "linear", "factor": 2.0}})");
  EXPECT_EQ(t.rope_type, "linear");
  ExpectRelNear(t.inv_freq[10], Plain(10000, 128, 10) / 2, 1e-12, "legacy linear");
  // rope_type wins over type, as in transformers.
  const RopeTables both = ParseOk(R"({"hidden_size": 4096, "num_attention_heads": 32,
      "num_hidden_layers": 2, "rope_scaling": {"rope_type": "default", "type": "linear",
      "factor": 2.0}})");
  EXPECT_EQ(both.rope_type, "default");
}

TEST(RopeTablesTest, PartialRotaryFactor) {
  const RopeTables t = ParseOk(R"({"hidden_size": 4096, "num_attention_heads": 32,
      "num_key_value_heads": 2, "num_hidden_layers": 2, "rope_theta": 10000,
      "partial_rotary_factor": 0.5})");
  EXPECT_EQ(t.head_dim, 128);
  EXPECT_EQ(t.rotary_dim, 64);
  ASSERT_EQ(t.inv_freq.size(), 32u);
  for (int f = 0; f < 32; ++f) {
    ExpectRelNear(t.inv_freq[f], Plain(10000, 64, f), 1e-12, absl::StrCat("f=", f));
  }
  // transformers >= 5 keeps it in rope_parameters.
  const RopeTables v5 = ParseOk(R"({"hidden_size": 4096, "num_attention_heads": 32,
      "num_hidden_layers": 2, "rope_parameters": {"rope_type": "default", "rope_theta": 10000,
      "partial_rotary_factor": 0.5}})");
  EXPECT_EQ(v5.rotary_dim, 64);
  EXPECT_EQ(v5.inv_freq, t.inv_freq);

  // A calibration over the rotated dims (32 bands) fits; one over the whole head (64) does not.
  EXPECT_TRUE(CheckCalibrationAgainstRope(MakeCalibration(2, 32, 32), t).ok());
  const absl::Status whole = CheckCalibrationAgainstRope(MakeCalibration(2, 32, 64), t);
  EXPECT_EQ(whole.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(whole.message(),
              AllOf(HasSubstr("calibration has 64 bands"), HasSubstr("head_dim 128"),
                    HasSubstr("first 64 dims"), HasSubstr("32 bands")));
  Calibration rotated = MakeCalibration(2, 32, 32);
  FillCalibrationRope(t, &rotated);
  ASSERT_TRUE(rotated.omega.has_value());
  EXPECT_EQ(rotated.omega->size(), 32u);
  EXPECT_EQ((*rotated.omega)[31], static_cast<float>(Plain(10000, 64, 31)));
}

TEST(RopeTablesTest, TextConfigNesting) {
  // Mistral-Small-3.1 style: the vision tower has its own values; text_config's win, including
  // head_dim 128 (not hidden_size / heads = 160).
  const RopeTables t = ParseOk(R"({"architectures": ["Mistral3ForConditionalGeneration"],
      "model_type": "mistral3",
      "vision_config": {"hidden_size": 1024, "head_dim": 64, "num_attention_heads": 16,
                        "rope_theta": 10000.0, "model_type": "pixtral"},
      "text_config": {"head_dim": 128, "hidden_size": 5120, "num_attention_heads": 32,
                      "num_hidden_layers": 40, "num_key_value_heads": 8, "model_type": "mistral",
                      "rope_theta": 1000000000.0,
                      "rope_scaling": {"rope_type": "linear", "factor": 2.0}}})");
  EXPECT_EQ(t.head_dim, 128);
  EXPECT_EQ(t.num_attention_heads, 32);
  EXPECT_EQ(t.num_kv_heads, 8);
  EXPECT_EQ(t.num_layers, 40);
  EXPECT_EQ(t.rope_type, "linear");
  ExpectRelNear(t.inv_freq[7], Plain(1e9, 128, 7) / 2, 1e-12, "text_config theta");

  // Qwen2.5-VL style: the text model's fields also at the top level, text_config leaving out what
  // equals its class defaults. Absent fields come from the top level.
  const RopeTables qwen_vl = ParseOk(R"({"model_type": "qwen2_5_vl", "hidden_size": 3584,
      "num_attention_heads": 28, "num_key_value_heads": 4, "num_hidden_layers": 28,
      "rope_theta": 1000000.0,
      "text_config": {"model_type": "qwen2_5_vl_text", "hidden_size": 3584,
                      "num_hidden_layers": 28}})");
  EXPECT_EQ(qwen_vl.head_dim, 128);
  EXPECT_EQ(qwen_vl.num_attention_heads, 28);
  EXPECT_EQ(qwen_vl.num_kv_heads, 4);
  ExpectRelNear(qwen_vl.inv_freq[1], Plain(1e6, 128, 1), 1e-12, "top-level theta");

  // A nested config without rope_theta anywhere: its class default is unknown, so no 10000.
  const absl::Status no_theta = ParseError(R"({"text_config": {"hidden_size": 4096,
      "num_attention_heads": 32, "num_hidden_layers": 32}})");
  EXPECT_THAT(no_theta.message(), HasSubstr("'text_config.rope_theta'"));
  // Errors name the nested field.
  const absl::Status missing = ParseError(R"({"model_type": "llava",
      "text_config": {"hidden_size": 2560, "num_hidden_layers": 34, "rope_theta": 10000}})");
  EXPECT_THAT(missing.message(), HasSubstr("'text_config.num_attention_heads'"));
}

TEST(RopeTablesTest, ModelsWithoutOneSharedRopeAreRefused) {
  const absl::Status gemma3 = ParseError(R"({"model_type": "gemma3",
      "text_config": {"model_type": "gemma3_text", "hidden_size": 2560, "head_dim": 256,
                      "num_attention_heads": 8, "num_hidden_layers": 34, "rope_theta": 1000000,
                      "rope_scaling": {"rope_type": "linear", "factor": 8.0}}})");
  EXPECT_THAT(gemma3.message(), AllOf(HasSubstr("'text_config.model_type'"),
                                      HasSubstr("\"gemma3_text\""), HasSubstr("not supported")));
  const absl::Status local_base = ParseError(R"({"hidden_size": 2304, "head_dim": 256,
      "num_attention_heads": 8, "num_hidden_layers": 26, "rope_theta": 1000000,
      "rope_local_base_freq": 10000})");
  EXPECT_THAT(local_base.message(), AllOf(HasSubstr("'rope_local_base_freq'"), HasSubstr("10000")));
}

TEST(RopeTablesTest, RopeParametersForm) {
  // transformers >= 5 folds rope_theta into rope_parameters; same tables as the rope_scaling form.
  const RopeTables v5 = ParseOk(R"({"hidden_size": 2880, "head_dim": 64,
      "num_attention_heads": 64, "num_key_value_heads": 8, "num_hidden_layers": 36,
      "max_position_embeddings": 131072,
      "rope_parameters": {"rope_type": "yarn", "rope_theta": 150000, "beta_fast": 32.0,
                          "beta_slow": 1.0, "factor": 32.0,
                          "original_max_position_embeddings": 4096, "truncate": false}})");
  const RopeTables v4 = ParseOk(kGptOss);
  EXPECT_EQ(v5.rope_type, "yarn");
  EXPECT_EQ(v5.inv_freq, v4.inv_freq);
  EXPECT_EQ(v5.attention_factor, v4.attention_factor);
  // The dict's rope_theta wins over a top-level one.
  const RopeTables plain = ParseOk(R"({"hidden_size": 4096, "num_attention_heads": 32,
      "num_hidden_layers": 36, "rope_theta": 10000,
      "rope_parameters": {"rope_type": "default", "rope_theta": 1000000}})");
  ExpectRelNear(plain.inv_freq[1], Plain(1e6, 128, 1), 1e-12, "rope_parameters theta");
  // A null factor (transformers >= 5) means max_position_embeddings / original.
  const RopeTables implicit = ParseOk(R"({"hidden_size": 2880, "head_dim": 64,
      "num_attention_heads": 64, "num_hidden_layers": 36, "max_position_embeddings": 131072,
      "rope_parameters": {"rope_type": "yarn", "rope_theta": 150000, "factor": null,
                          "original_max_position_embeddings": 4096, "truncate": false}})");
  EXPECT_EQ(implicit.inv_freq, v4.inv_freq);
  EXPECT_EQ(implicit.attention_factor, v4.attention_factor);
}

// ---- Errors: each names the field (and the value).

TEST(RopeTablesTest, Errors) {
  struct Case {
    const char* name;
    std::string json;
    std::vector<std::string> expect;
  };
  const std::string geometry = R"("hidden_size": 4096, "num_attention_heads": 32,
      "num_hidden_layers": 2)";
  const std::vector<Case> cases = {
      {"longrope",
       absl::StrCat("{", geometry, R"(, "rope_scaling": {"rope_type": "longrope",
           "short_factor": [1.0], "long_factor": [2.0]}})"),
       {"'rope_scaling.rope_type'", "\"longrope\"", "not supported"}},
      {"mrope legacy type",
       absl::StrCat("{", geometry, R"(, "rope_scaling": {"type": "mrope",
           "mrope_section": [16, 24, 24]}})"),
       {"'rope_scaling.type'", "\"mrope\""}},
      {"theta zero",
       absl::StrCat("{", geometry, R"(, "rope_theta": 0})"),
       {"'rope_theta'", "is 0", "> 0"}},
      {"theta zero in rope_parameters",
       absl::StrCat("{", geometry, R"(, "rope_parameters": {"rope_theta": 0.0}})"),
       {"'rope_parameters.rope_theta'"}},
      {"head_dim odd",
       absl::StrCat("{", geometry, R"(, "head_dim": 127})"),
       {"'head_dim'", "127", "even"}},
      {"head_dim too large",
       absl::StrCat("{", geometry, R"(, "head_dim": 2048})"),
       {"'head_dim'", "2048"}},
      {"missing num_attention_heads",
       R"({"hidden_size": 4096, "num_hidden_layers": 2})",
       {"'num_attention_heads'"}},
      {"missing num_hidden_layers",
       R"({"hidden_size": 4096, "num_attention_heads": 32})",
       {"'num_hidden_layers'"}},
      {"heads not an integer",
       R"({"hidden_size": 4096, "num_attention_heads": 32.5, "num_hidden_layers": 2})",
       {"'num_attention_heads'", "32.5", "integer"}},
      {"non-numeric factor",
       absl::StrCat("{", geometry, R"(, "rope_scaling": {"rope_type": "linear", "factor": "8"}})"),
       {"'rope_scaling.factor'", "\"8\"", "number"}},
      {"missing factor",
       absl::StrCat("{", geometry, R"(, "rope_scaling": {"rope_type": "dynamic"}})"),
       {"'rope_scaling.factor'", "dynamic"}},
      {"factor below 1",
       absl::StrCat("{", geometry, R"(, "rope_scaling": {"rope_type": "linear", "factor": 0.5}})"),
       {"'rope_scaling.factor'", "0.5", ">= 1"}},
      {"llama3 without low_freq_factor",
       absl::StrCat("{", geometry, R"(, "rope_scaling": {"rope_type": "llama3", "factor": 8,
           "high_freq_factor": 4, "original_max_position_embeddings": 8192}})"),
       {"'rope_scaling.low_freq_factor'", "llama3"}},
      {"llama3 high <= low",
       absl::StrCat("{", geometry, R"(, "rope_scaling": {"rope_type": "llama3", "factor": 8,
           "low_freq_factor": 4, "high_freq_factor": 4, "original_max_position_embeddings": 8192}})"),
       {"'rope_scaling.high_freq_factor'"}},
      {"yarn without any context length",
       absl::StrCat("{", geometry, R"(, "rope_scaling": {"rope_type": "yarn", "factor": 4}})"),
       {"'rope_scaling.original_max_position_embeddings'", "max_position_embeddings"}},
      {"yarn truncate not a bool",
       absl::StrCat("{", geometry, R"(, "rope_scaling": {"rope_type": "yarn", "factor": 4,
           "original_max_position_embeddings": 4096, "truncate": "no"}})"),
       {"'rope_scaling.truncate'", "\"no\""}},
      {"partial_rotary_factor above 1",
       absl::StrCat("{", geometry, R"(, "partial_rotary_factor": 1.5})"),
       {"'partial_rotary_factor'", "1.5"}},
      {"odd rotary_dim",
       R"({"head_dim": 6, "num_attention_heads": 2, "num_hidden_layers": 1,
           "partial_rotary_factor": 0.5})",
       {"partial_rotary_factor", "rotary_dim 3"}},
      {"kv heads do not divide",
       absl::StrCat("{", geometry, R"(, "num_key_value_heads": 5})"),
       {"'num_key_value_heads'", "5", "32"}},
      {"per-layer-type rope_parameters",
       absl::StrCat("{", geometry, R"(, "rope_parameters": {
           "full_attention": {"rope_type": "default", "rope_theta": 1000000},
           "sliding_attention": {"rope_type": "default", "rope_theta": 10000}}})"),
       {"'rope_parameters.full_attention'", "per-layer-type"}},
      {"text_config not an object", R"({"text_config": 3})", {"'text_config'"}},
      {"not an object", R"([1, 2])", {"expected a JSON object"}},
      {"not JSON", R"({"hidden_size": 4096,)", {"not valid JSON"}},
      // Found by kvtier-rope-config-fuzz: the JSON parser throws out_of_range, not parse_error.
      {"number overflow", R"({"rope_theta": 1e99999})", {"not valid JSON", "overflow"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const absl::Status status = ParseError(c.json);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    for (const std::string& part : c.expect) EXPECT_THAT(status.message(), HasSubstr(part));
  }
}

// ---- Calibration checks.

TEST(CheckCalibrationAgainstRopeTest, GeometryMismatchesNameBothSides) {
  const RopeTables qwen = ParseOk(kQwen3_8B);
  EXPECT_TRUE(CheckCalibrationAgainstRope(MakeCalibration(36, 32, 64), qwen).ok());

  const RopeTables wide = ParseOk(R"({"hidden_size": 4096, "head_dim": 256,
      "num_attention_heads": 32, "num_hidden_layers": 36})");
  const absl::Status bands = CheckCalibrationAgainstRope(MakeCalibration(36, 32, 64), wide);
  EXPECT_EQ(bands.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bands.message(), HasSubstr("calibration has 64 bands, config.json's head_dim 256 "
                                         "gives 128"));
  const absl::Status layers = CheckCalibrationAgainstRope(MakeCalibration(28, 32, 64), qwen);
  EXPECT_THAT(layers.message(), HasSubstr("calibration has 28 layers, config.json's "
                                          "num_hidden_layers 36"));
  const absl::Status heads = CheckCalibrationAgainstRope(MakeCalibration(36, 28, 64), qwen);
  EXPECT_THAT(heads.message(), HasSubstr("calibration has 28 query heads, config.json's "
                                         "num_attention_heads 32"));
}

TEST(CheckCalibrationAgainstRopeTest, FileTablesMustAgreeWithConfig) {
  const RopeTables qwen = ParseOk(kQwen3_8B);
  Calibration c = MakeCalibration(36, 32, 64);
  // A flat file made for a rope_theta 10000 model.
  c.omega.emplace(64);
  for (int f = 0; f < 64; ++f) (*c.omega)[f] = static_cast<float>(Plain(10000, 128, f));
  c.freq_scale_sq.emplace(64, 1.0f);
  const absl::Status omega = CheckCalibrationAgainstRope(c, qwen);
  EXPECT_EQ(omega.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(omega.message(), AllOf(HasSubstr("calibration's omega[1]"), HasSubstr("default")));

  // float32 rounding of the right tables passes; a wrong attention scaling does not.
  for (int f = 0; f < 64; ++f) (*c.omega)[f] = static_cast<float>(qwen.inv_freq[f]);
  EXPECT_TRUE(CheckCalibrationAgainstRope(c, qwen).ok());
  (*c.freq_scale_sq)[5] = 1.5625f;
  const absl::Status scale = CheckCalibrationAgainstRope(c, qwen);
  EXPECT_THAT(scale.message(),
              AllOf(HasSubstr("freq_scale_sq[5] is 1.5625"), HasSubstr("gives 1")));

  // FillCalibrationRope leaves what the file carried alone.
  FillCalibrationRope(qwen, &c);
  EXPECT_EQ((*c.freq_scale_sq)[5], 1.5625f);
}

TEST(CheckCalibrationAgainstRopeTest, FillLeavesAMismatchedCalibrationUnchanged) {
  const RopeTables qwen = ParseOk(kQwen3_8B);
  Calibration c = MakeCalibration(36, 32, 128);  // more bands than the config has
  FillCalibrationRope(qwen, &c);
  EXPECT_FALSE(c.omega.has_value());
  EXPECT_FALSE(c.freq_scale_sq.has_value());
}

// ---- Files.

TEST(LoadRopeTablesTest, ReadsFileOrModelDirectory) {
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / "rope_test_model";
  std::filesystem::create_directories(dir);
  {
    std::ofstream out(dir / "config.json");
    out << kLlama31_8B;
  }
  for (const std::string& path : {(dir / "config.json").string(), dir.string()}) {
    absl::StatusOr<RopeTables> t = LoadRopeTables(path);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->rope_type, "llama3");
    ExpectRelNear(t->inv_freq[30], Llama3Reference(30), 1e-12, path);
  }

  const std::string missing = (dir / "nope.json").string();
  const absl::Status not_found = LoadRopeTables(missing).status();
  EXPECT_EQ(not_found.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(not_found.message(), HasSubstr(missing));

  {
    std::ofstream out(dir / "bad.json");
    out << R"({"hidden_size": 4096, "num_hidden_layers": 2})";
  }
  const absl::Status bad = LoadRopeTables((dir / "bad.json").string()).status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.message(), AllOf(HasSubstr("bad.json"), HasSubstr("'num_attention_heads'")));
  std::filesystem::remove_all(dir);
}

// A config.json that is a FIFO (also inside a model directory) is refused at once: the loader used
// to open it for reading and wait there for a writer.
TEST(LoadRopeTablesTest, RefusesAFifoWithoutBlocking) {
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / "rope_test_fifo";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string fifo = (dir / "config.json").string();
  ASSERT_TRUE(kvtier::testing::MakeFifo(fifo));
  for (const std::string& path : {fifo, dir.string()}) {
    std::optional<absl::Status> st =
        kvtier::testing::CallGuardingFifo(fifo, [&] { return LoadRopeTables(path).status(); });
    ASSERT_TRUE(st.has_value()) << "LoadRopeTables(" << path << ") blocked on a FIFO";
    EXPECT_EQ(st->code(), absl::StatusCode::kInvalidArgument) << *st;
    EXPECT_EQ(st->message(),
              "model config " + fifo + " is a FIFO (named pipe), not a regular file");
  }
  const absl::Status device = LoadRopeTables("/dev/null").status();
  EXPECT_EQ(device.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(device.message(), HasSubstr("is a character device"));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kvtier::triattention
