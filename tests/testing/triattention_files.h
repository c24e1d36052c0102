// Files a TriAttention method reads, written by tests: a synthetic calibration (random query
// statistics, RoPE frequencies of a given theta) in safetensors form, and a model's config.json.
// Header-only (callers link kvtier_triattention anyway); thread-compatible.
#ifndef KVTIER_TESTS_TESTING_TRIATTENTION_FILES_H_
#define KVTIER_TESTS_TESTING_TRIATTENTION_FILES_H_

#include <cmath>
#include <fstream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/coding.h"
#include "triattention/calibration.h"

namespace kvtier::testing {

struct TriAttentionModel {
  int layers = 2;
  int query_heads = 4;
  int kv_heads = 2;
  int head_dim = 64;
  double rope_theta = 10000.0;
};

// A calibration of `model` with N(0, 1) mean query angles, RoPE tables filled in.
inline triattention::Calibration MakeCalibration(const TriAttentionModel& model,
                                                 std::mt19937_64& rng) {
  triattention::Calibration c;
  c.layers = model.layers;
  c.heads = model.query_heads;
  c.bands = model.head_dim / 2;
  c.head_dim = model.head_dim;
  c.rope_style = "half";
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int i = 0; i < model.layers * c.heads * c.bands; ++i) {
    c.q_mean_real.push_back(normal(rng));
    c.q_mean_imag.push_back(normal(rng));
    c.q_abs_mean.push_back(std::hypot(c.q_mean_real.back(), c.q_mean_imag.back()) + 0.5f);
  }
  c.present.assign(static_cast<size_t>(model.layers) * c.heads, 1);
  c.omega.emplace();
  for (int f = 0; f < c.bands; ++f) {
    c.omega->push_back(static_cast<float>(std::pow(model.rope_theta, -2.0 * f / model.head_dim)));
  }
  c.freq_scale_sq.emplace(c.bands, 1.0f);
  return c;
}

// Writes `c` as a safetensors calibration file (the flat form's tensors).
inline void WriteSafetensorsCalibration(const triattention::Calibration& c,
                                        const std::string& path) {
  const std::pair<const char*, const std::vector<float>*> tensors[] = {
      {"E_q_real", &c.q_mean_real},
      {"E_q_imag", &c.q_mean_imag},
      {"E_q_norm", &c.q_abs_mean},
      {"omega", &*c.omega},
      {"freq_scale_sq", &*c.freq_scale_sq}};
  std::string header = "{";
  uint64_t at = 0;
  for (const auto& [name, values] : tensors) {
    const uint64_t bytes = values->size() * sizeof(float);
    const std::string shape = values->size() == static_cast<size_t>(c.bands)
                                  ? absl::StrCat("[", c.bands, "]")
                                  : absl::StrCat("[", c.layers, ",", c.heads, ",", c.bands, "]");
    absl::StrAppend(&header, at == 0 ? "" : ",", "\"", name,
                    "\":{\"dtype\":\"F32\",\"shape\":", shape, ",\"data_offsets\":[", at, ",",
                    at + bytes, "]}");
    at += bytes;
  }
  header += "}";
  std::ofstream out(path, std::ios::binary);
  std::string length;
  PutFixed64(&length, header.size());
  out << length << header;
  for (const auto& [name, values] : tensors) {
    out.write(reinterpret_cast<const char*>(values->data()),
              static_cast<std::streamsize>(values->size() * sizeof(float)));
  }
}

// A Llama-style config.json of `model` with `layers` layers (the model's own by default).
inline void WriteModelConfigJson(const TriAttentionModel& model, const std::string& path,
                                 int layers = 0) {
  std::ofstream(path) << "{\"model_type\": \"llama\", \"num_hidden_layers\": "
                      << (layers > 0 ? layers : model.layers)
                      << ", \"num_attention_heads\": " << model.query_heads
                      << ", \"num_key_value_heads\": " << model.kv_heads
                      << ", \"hidden_size\": " << model.query_heads * model.head_dim
                      << ", \"head_dim\": " << model.head_dim
                      << ", \"rope_theta\": " << model.rope_theta
                      << ", \"max_position_embeddings\": 65536}";
}

}  // namespace kvtier::testing

#endif  // KVTIER_TESTS_TESTING_TRIATTENTION_FILES_H_
