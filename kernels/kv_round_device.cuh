// Internal to the eviction round's two .cu files (kv_round.cu, kv_round_score.cu): the scoring
// geometry and partial-sum layout both sides rely on, DecodeTokens, ScoreParams, and the scoring
// launches LaunchTriRound calls. Without separable compilation a kernel is launched only from the
// file that defines it, hence these plain functions. Device-side: include only from .cu files.
#ifndef KVTIER_KERNELS_KV_ROUND_DEVICE_CUH_
#define KVTIER_KERNELS_KV_ROUND_DEVICE_CUH_

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/kv_round.h"

namespace kvtier::kernels::internal {

inline constexpr int kScoreThreads = 256;
inline constexpr int kWarps = kScoreThreads / 32;
// Score tiles per CTA, so that its weights serve 1,024 tokens.
inline constexpr int kTilesPerBlock = 8;
// Per tile: sum, sum of squares, count of finite scores.
inline constexpr int kPartials = 3;

__device__ __forceinline__ int64_t DecodeTokens(const KvRoundRequest& r, int64_t cap) {
  int64_t t = r.length - r.protected_tail - r.prompt_len;
  if (t < 0) t = 0;
  return t < cap ? t : cap;
}

// The arguments of both scoring kernels (kv_round_score.cu), built by LaunchTriRound.
struct ScoreParams {
  PagedKvDevice kv;
  TriCalibrationDevice cal;
  const KvRoundRequest* requests;
  const double* bands;
  float* scores;
  double* partials;
  int64_t max_tokens;
  int tiles;
  int page_shift;  // log2(page_tokens) when it is a power of two, else -1
};

// Launches RoundBandsKernel for requests[0, num_requests) on `stream`: out[r][f][2] = the mean
// cos and sin over the round's future offsets of band f (omega[0, bands)). Returns a cudaError_t
// value (0 on success).
int LaunchRoundBands(const KvRoundRequest* requests, const double* omega, int bands,
                     int num_offsets, double* out, unsigned num_requests, cudaStream_t stream);

// Launches the scorer for `dtype` keys of `head_dim` and `group` query heads per KV head on
// `grid` (1,024-token blocks, layer * kv_heads + kv_head, request): the tensor-core kernel for
// BF16 and FP8 keys of groups up to 8, the CUDA-core kernel otherwise. Returns a cudaError_t
// value: 0 on success, cudaErrorInvalidValue for a dtype or head_dim it has no kernel for.
int LaunchRoundScores(const ScoreParams& p, KvElement dtype, int group, int head_dim,
                      const dim3& grid, cudaStream_t stream);

}  // namespace kvtier::kernels::internal

#endif  // KVTIER_KERNELS_KV_ROUND_DEVICE_CUH_
