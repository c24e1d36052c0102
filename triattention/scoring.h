// The CPU reference of one TriAttention scoring and selection round: per-round weight vectors
// built from a Calibration (the post-RoPE form with the mean over future offsets folded in),
// the score of every decode token of a request read through a KvCacheView, z-normalisation per
// (layer, query head) row, and the deterministic top-`budget` selection of the three eviction
// modes (union, per_head, per_layer_perhead). Pure functions on values; thread-safe; they read
// the KV cache and never write it.
#ifndef KVTIER_TRIATTENTION_SCORING_H_
#define KVTIER_TRIATTENTION_SCORING_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "triattention/calibration.h"
#include "triattention/kv_view.h"

namespace kvtier::triattention {

// Future offsets of the HF reference and TensorRT-LLM: {1, 2, 4, ..., 65536}.
inline constexpr int kDefaultNumOffsets = 17;
// Floor of the standard deviation in z-normalisation.
inline constexpr double kScoreStdEpsilon = 1e-6;

// Per (layer, query head) weights of one round starting at logical position t0, arrays
// [L][H][F] row-major like the Calibration's. With k_r = k[f], k_i = k[f + F] of a post-RoPE key,
//   score = sum_f k_r W_cos[f] + k_i W_sin[f] + |k_f| W_mag[f]
// equals the mean over the offsets d of the trigonometric series plus the norm term.
struct RoundWeights {
  int layers = 0;
  int heads = 0;  // query heads
  int bands = 0;  // F
  int64_t round_start = 0;
  std::vector<float> w_cos;
  std::vector<float> w_sin;
  std::vector<float> w_mag;

  size_t Row(int layer, int head) const {
    return (static_cast<size_t>(layer) * heads + head) * bands;
  }
};

// Builds the weights (computed in double, stored as float) for the round at logical position
// `round_start_t0` (tokens generated so far including evicted ones) over the offsets 2^0 ..
// 2^(num_offsets - 1). InvalidArgument for round_start_t0 < 0 or num_offsets outside [1, 62];
// FailedPrecondition when the calibration lacks omega or freq_scale_sq (FillCalibrationRope adds
// them) or their length is not its band count. `calibration` is borrowed for the call.
absl::StatusOr<RoundWeights> BuildRoundWeights(const Calibration& calibration,
                                               int64_t round_start_t0,
                                               int num_offsets = kDefaultNumOffsets);

// Checks that weights fit a view and request: same band count as head_dim / 2, at least as many
// view layers as weight layers, query heads a positive multiple of num_kv_heads, host memory.
// InvalidArgument (FailedPrecondition for device memory) naming both sides otherwise; also the
// errors of ValidateKvCacheView and ValidateKvRequest.
absl::Status CheckScoringInputs(const RoundWeights& weights, const KvCacheView& view,
                                const KvRequestView& request);

// Scores the decode tokens [prompt_len, length - protected_tail) of `request` for layer `layer`
// and query head `query_head` (its KV head is query_head / (heads / num_kv_heads)) into
// out[0 .. DecodeTokens()), accumulating in double. The arguments are borrowed for the call.
// REQUIRES: CheckScoringInputs(weights, view, request).ok(), layer < weights.layers, query_head <
// weights.heads, out.size() >= request.DecodeTokens().
void ScoreTokens(const RoundWeights& weights, const KvCacheView& view, const KvRequestView& request,
                 int layer, int query_head, absl::Span<float> out);

// Raw or normalised scores of one request: [L][H][T] row-major, T = decode tokens.
struct RoundScores {
  int layers = 0;
  int heads = 0;  // query heads
  int64_t tokens = 0;
  std::vector<float> values;

  absl::Span<float> RowOf(int layer, int head) {
    return absl::MakeSpan(values).subspan((static_cast<size_t>(layer) * heads + head) * tokens,
                                          tokens);
  }
  absl::Span<const float> RowOf(int layer, int head) const {
    return absl::MakeConstSpan(values).subspan((static_cast<size_t>(layer) * heads + head) * tokens,
                                               tokens);
  }
};

// Scores every (layer, query head) row of a request. Errors of CheckScoringInputs.
absl::StatusOr<RoundScores> ScoreRequest(const RoundWeights& weights, const KvCacheView& view,
                                         const KvRequestView& request);

// z-normalises each row in place: (s - mean) / max(std, kScoreStdEpsilon), population std, the
// statistics computed in double over the row's finite scores. A key with a NaN or infinite
// element (an FP8 E4M3 NaN byte, a BF16 / FP16 infinity) scores NaN or +-inf: such scores stay
// out of the statistics, so one bad key cannot change the ranking of the others, and keep their
// value (selection counts NaN as minus infinity). A row without a finite score is left as is.
void NormalizeRows(RoundScores* scores);

enum class EvictionMode : uint8_t {
  kUnion = 1,            // one token set for every layer and KV head: top of max over all rows
  kPerHead = 2,          // one set per KV head shared by the layers: mean over layers of group max
  kPerLayerPerHead = 3,  // one set per (layer, KV head): group max
};

// Kept decode tokens of one round, as physical token indices (prompt_len <= i < length -
// protected_tail), ascending, exactly `kept` of them in every set. `sets` holds 1 set (kUnion),
// kv_heads sets (kPerHead) or layers * kv_heads sets (kPerLayerPerHead, index l * kv_heads + g).
struct KeptTokens {
  EvictionMode mode = EvictionMode::kUnion;
  int layers = 0;
  int kv_heads = 0;
  int64_t kept = 0;
  std::vector<std::vector<int64_t>> sets;

  // The set that layer `layer`, KV head `kv_head` keeps.
  const std::vector<int64_t>& For(int layer, int kv_head) const {
    switch (mode) {
      case EvictionMode::kUnion:
        return sets[0];
      case EvictionMode::kPerHead:
        return sets[kv_head];
      default:
        return sets[static_cast<size_t>(layer) * kv_heads + kv_head];
    }
  }
};

// Selects min(budget, T) decode tokens per set from (normalised) scores: the highest aggregate
// first, ties to the lowest token index, NaN counted as minus infinity; each set sorted ascending
// and offset by `prompt_len` into physical indices. InvalidArgument for budget < 0, kv_heads < 1,
// heads not a multiple of kv_heads, an unknown mode, or values.size() != layers * heads * tokens.
absl::StatusOr<KeptTokens> SelectKeptTokens(const RoundScores& scores, EvictionMode mode,
                                            int kv_heads, int64_t budget, int64_t prompt_len);

// The first `count` indices of `values` ordered by value descending, ties to the lower index, NaN
// last; returned ascending. REQUIRES: 0 <= count <= values.size().
std::vector<int64_t> StableTopK(absl::Span<const double> values, int64_t count);

}  // namespace kvtier::triattention

#endif  // KVTIER_TRIATTENTION_SCORING_H_
