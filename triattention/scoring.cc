// Scoring and selection of one TriAttention round on the CPU: the reference the GPU kernels are
// checked against, and the path for hosts without a device.
//  - The score is the post-RoPE form (notes 2.2): a kept key already carries its rotation, so
//    no positions are tracked and nothing is inverted; it equals the HF pre-RoPE score times the
//    attention factor a, which changes neither the ranking nor the z-scores. With mean
//    aggregation over the offsets, the offset average folds into per-band constants, so one round
//    is a dot product of each key with three weight vectors per (layer, query head).
//  - Weights are computed in double (angles (t0 + d) * omega reach 2^16 * omega and beyond) and
//    stored as float like the GPU kernels' weights; scores accumulate in double.
//  - Selection takes exactly min(budget, T) tokens with a total order (score descending, index
//    ascending), the deterministic "settle" rule of TensorRT-LLM, so every run and every backend
//    keeps the same tokens. Union is the top of the max over all rows, which equals HF's union of
//    per-row tops re-ranked by that max.
#include "triattention/scoring.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace kvtier::triattention {
namespace {

double OrderKey(double v) { return std::isnan(v) ? -std::numeric_limits<double>::infinity() : v; }

}  // namespace

absl::StatusOr<RoundWeights> BuildRoundWeights(const Calibration& calibration,
                                               int64_t round_start_t0, int num_offsets) {
  if (round_start_t0 < 0) {
    return absl::InvalidArgumentError(absl::StrCat("round_start_t0 ", round_start_t0, " < 0"));
  }
  if (num_offsets < 1 || num_offsets > 62) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_offsets ", num_offsets, " outside [1, 62]"));
  }
  const int F = calibration.bands;
  if (!calibration.omega.has_value() || !calibration.freq_scale_sq.has_value()) {
    return absl::FailedPreconditionError(
        "calibration has no omega / freq_scale_sq (fill them with FillCalibrationRope)");
  }
  if (static_cast<int>(calibration.omega->size()) != F ||
      static_cast<int>(calibration.freq_scale_sq->size()) != F) {
    return absl::FailedPreconditionError(
        absl::StrCat("calibration has ", F, " bands but omega has ", calibration.omega->size(),
                     " and freq_scale_sq ", calibration.freq_scale_sq->size()));
  }
  const size_t n = static_cast<size_t>(calibration.layers) * calibration.heads * F;
  if (calibration.q_mean_real.size() != n || calibration.q_mean_imag.size() != n ||
      calibration.q_abs_mean.size() != n) {
    return absl::FailedPreconditionError(
        absl::StrCat("calibration arrays do not hold layers * heads * bands = ", n, " values"));
  }
  // Mean cos / sin of the future query angle per band.
  std::vector<double> mean_cos(F, 0.0), mean_sin(F, 0.0);
  for (int f = 0; f < F; ++f) {
    const double omega = (*calibration.omega)[f];
    double c = 0.0, s = 0.0;
    for (int d = 0; d < num_offsets; ++d) {
      const double angle = static_cast<double>(round_start_t0 + (int64_t{1} << d)) * omega;
      c += std::cos(angle);
      s += std::sin(angle);
    }
    mean_cos[f] = c / num_offsets;
    mean_sin[f] = s / num_offsets;
  }
  RoundWeights w;
  w.layers = calibration.layers;
  w.heads = calibration.heads;
  w.bands = F;
  w.round_start = round_start_t0;
  w.w_cos.resize(n);
  w.w_sin.resize(n);
  w.w_mag.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const int f = static_cast<int>(i % F);
    const double scale = (*calibration.freq_scale_sq)[f];
    const double qr = calibration.q_mean_real[i];
    const double qi = calibration.q_mean_imag[i];
    const double concentrated = std::hypot(qr, qi);
    w.w_cos[i] = static_cast<float>(scale * (qr * mean_cos[f] - qi * mean_sin[f]));
    w.w_sin[i] = static_cast<float>(scale * (qr * mean_sin[f] + qi * mean_cos[f]));
    w.w_mag[i] = static_cast<float>(scale * (calibration.q_abs_mean[i] - concentrated));
  }
  return w;
}

absl::Status CheckScoringInputs(const RoundWeights& weights, const KvCacheView& view,
                                const KvRequestView& request) {
  KVTIER_RETURN_IF_ERROR(ValidateKvCacheView(view));
  KVTIER_RETURN_IF_ERROR(ValidateKvRequest(view, request));
  if (view.memory != KvMemory::kHost) {
    return absl::FailedPreconditionError("the CPU round needs a kv view of host memory");
  }
  if (weights.bands * 2 != view.head_dim) {
    return absl::InvalidArgumentError(absl::StrCat("weights have ", weights.bands,
                                                   " bands, the kv view head_dim ", view.head_dim));
  }
  if (weights.layers < 1 || weights.layers > static_cast<int>(view.layers.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("weights have ", weights.layers, " layers, the kv view ", view.layers.size()));
  }
  if (weights.heads < 1 || weights.heads % view.num_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("weights have ", weights.heads,
                                                   " query heads, not a multiple of the kv view's ",
                                                   view.num_kv_heads, " kv heads"));
  }
  const size_t n = static_cast<size_t>(weights.layers) * weights.heads * weights.bands;
  if (weights.w_cos.size() != n || weights.w_sin.size() != n || weights.w_mag.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("weight arrays do not hold layers * heads * bands = ", n, " values"));
  }
  return absl::OkStatus();
}

void ScoreTokens(const RoundWeights& weights, const KvCacheView& view, const KvRequestView& request,
                 int layer, int query_head, absl::Span<float> out) {
  const KvStrides strides = KvStridesOf(view);
  const int group = weights.heads / view.num_kv_heads;
  const int kv_head = query_head / group;
  const int F = weights.bands;
  const size_t row = weights.Row(layer, query_head);
  const float* wc = weights.w_cos.data() + row;
  const float* ws = weights.w_sin.data() + row;
  const float* wm = weights.w_mag.data() + row;
  const int64_t begin = request.DecodeBegin();
  const int64_t end = request.DecodeEnd();
  for (int64_t t = begin; t < end; ++t) {
    const uint8_t* key = KvRowAddress(view, strides, request, layer, /*value=*/false, kv_head, t);
    double acc = 0.0;
    for (int f = 0; f < F; ++f) {
      const double kr = codec::LoadAsFloat(view.dtype, key, static_cast<size_t>(f));
      const double ki = codec::LoadAsFloat(view.dtype, key, static_cast<size_t>(f + F));
      acc += kr * wc[f] + ki * ws[f] + std::sqrt(kr * kr + ki * ki) * wm[f];
    }
    out[t - begin] = static_cast<float>(acc);
  }
}

absl::StatusOr<RoundScores> ScoreRequest(const RoundWeights& weights, const KvCacheView& view,
                                         const KvRequestView& request) {
  KVTIER_RETURN_IF_ERROR(CheckScoringInputs(weights, view, request));
  RoundScores scores;
  scores.layers = weights.layers;
  scores.heads = weights.heads;
  scores.tokens = request.DecodeTokens();
  scores.values.resize(static_cast<size_t>(scores.layers) * scores.heads * scores.tokens);
  for (int l = 0; l < scores.layers; ++l) {
    for (int h = 0; h < scores.heads; ++h) {
      ScoreTokens(weights, view, request, l, h, scores.RowOf(l, h));
    }
  }
  return scores;
}

void NormalizeRows(RoundScores* scores) {
  if (scores->tokens == 0) return;
  for (int l = 0; l < scores->layers; ++l) {
    for (int h = 0; h < scores->heads; ++h) {
      absl::Span<float> row = scores->RowOf(l, h);
      double sum = 0.0;
      int64_t finite = 0;
      for (float v : row) {
        if (std::isfinite(v)) {
          sum += v;
          ++finite;
        }
      }
      if (finite == 0) continue;
      const double mean = sum / static_cast<double>(finite);
      double sq = 0.0;
      for (float v : row) {
        if (std::isfinite(v)) sq += (v - mean) * (v - mean);
      }
      const double stddev = std::sqrt(sq / static_cast<double>(finite));
      const double denom = std::max(stddev, kScoreStdEpsilon);
      for (float& v : row) v = static_cast<float>((v - mean) / denom);
    }
  }
}

std::vector<int64_t> StableTopK(absl::Span<const double> values, int64_t count) {
  std::vector<int64_t> order(values.size());
  std::iota(order.begin(), order.end(), int64_t{0});
  auto before = [&](int64_t a, int64_t b) {
    const double va = OrderKey(values[a]);
    const double vb = OrderKey(values[b]);
    if (va != vb) return va > vb;
    return a < b;
  };
  std::partial_sort(order.begin(), order.begin() + count, order.end(), before);
  order.resize(count);
  std::sort(order.begin(), order.end());
  return order;
}

absl::StatusOr<KeptTokens> SelectKeptTokens(const RoundScores& scores, EvictionMode mode,
                                            int kv_heads, int64_t budget, int64_t prompt_len) {
  if (budget < 0) return absl::InvalidArgumentError(absl::StrCat("budget ", budget, " < 0"));
  if (kv_heads < 1 || scores.heads < 1 || scores.heads % kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("scores have ", scores.heads,
                                                   " query heads, not a positive multiple of ",
                                                   kv_heads, " kv heads"));
  }
  if (scores.layers < 1 || scores.tokens < 0 ||
      scores.values.size() != static_cast<size_t>(scores.layers) * scores.heads * scores.tokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("scores hold ", scores.values.size(), " values, not layers ", scores.layers,
                     " * heads ", scores.heads, " * tokens ", scores.tokens));
  }
  if (mode != EvictionMode::kUnion && mode != EvictionMode::kPerHead &&
      mode != EvictionMode::kPerLayerPerHead) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown eviction mode ", static_cast<int>(mode)));
  }
  const int64_t T = scores.tokens;
  const int group = scores.heads / kv_heads;
  const int64_t keep = std::min(budget, T);
  KeptTokens kept;
  kept.mode = mode;
  kept.layers = scores.layers;
  kept.kv_heads = kv_heads;
  kept.kept = keep;
  auto emit = [&](absl::Span<const double> agg) {
    std::vector<int64_t> set = StableTopK(agg, keep);
    for (int64_t& i : set) i += prompt_len;
    kept.sets.push_back(std::move(set));
  };
  // Max over the query heads of one KV head's group in one layer, NaN treated as -inf.
  auto group_max = [&](int l, int g, std::vector<double>* out) {
    out->assign(T, -std::numeric_limits<double>::infinity());
    for (int h = g * group; h < (g + 1) * group; ++h) {
      absl::Span<const float> row = scores.RowOf(l, h);
      for (int64_t t = 0; t < T; ++t) (*out)[t] = std::max((*out)[t], OrderKey(row[t]));
    }
  };
  std::vector<double> agg, tmp;
  switch (mode) {
    case EvictionMode::kUnion:
      agg.assign(T, -std::numeric_limits<double>::infinity());
      for (int l = 0; l < scores.layers; ++l) {
        for (int g = 0; g < kv_heads; ++g) {
          group_max(l, g, &tmp);
          for (int64_t t = 0; t < T; ++t) agg[t] = std::max(agg[t], tmp[t]);
        }
      }
      emit(agg);
      break;
    case EvictionMode::kPerHead:
      for (int g = 0; g < kv_heads; ++g) {
        agg.assign(T, 0.0);
        for (int l = 0; l < scores.layers; ++l) {
          group_max(l, g, &tmp);
          for (int64_t t = 0; t < T; ++t) agg[t] += tmp[t];
        }
        for (double& v : agg) v /= scores.layers;
        emit(agg);
      }
      break;
    case EvictionMode::kPerLayerPerHead:
      for (int l = 0; l < scores.layers; ++l) {
        for (int g = 0; g < kv_heads; ++g) {
          group_max(l, g, &agg);
          emit(agg);
        }
      }
      break;
  }
  return kept;
}

}  // namespace kvtier::triattention
