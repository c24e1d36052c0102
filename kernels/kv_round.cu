// The kernels of a batched eviction round (kv_round.h). One round is six launches on one stream:
//  1. RoundBandsKernel: per request and band, the mean cos / sin of the future query angles
//     (t0 + 2^d) * omega in double, as triattention::BuildRoundWeights.
//  2. ScoreKernel: grid (8 token tiles, layer * KV head, request). A block turns the calibration
//  and
//     the band means into float weights for the query heads of its KV head (in registers), then
//     each row of LANES = bands / 4 lanes reads one key (4 real and 4 imaginary elements a lane),
//     and a reduce-scatter across those lanes leaves one head's score per lane. The tile's scores
//     go out coalesced with per-tile sum and sum of squares (double, fixed order: deterministic).
//  3. RowStatsKernel: a warp per (request, layer, query head) row: mean and max(std, 1e-6) of
//     the finite scores (NaN and infinite scores keep their value, as in NormalizeRows).
//  4. AggregateKernel: a thread per token and layer (union), KV head (per_head) or set
//     (per_layer_perhead): z-scores rounded to float as NormalizeRows does, the mode's max or
//     mean of group maxima, written as order-preserving integer keys (32-bit for the float-valued
//     modes, 64-bit for per_head's double mean; NaN and -inf lowest, -0 equal to +0), so
//     selection compares integers. Union gathers the layers with atomicMax.
//  5. TopKKernel: a block per kept set: an 8-bit radix select of the budget-th largest key, then
//     an ordered scan that takes every greater key and the first ties by index.
//  6. CompactionKernel: a block per (request, layer, KV head) moving K and V rows in chunks whose
//     reads all finish before their writes (see the comment there).
// Steps 4 and 5 are one launch each per mode (plus a clear of the union keys).
#include <cuda_runtime.h>
#include <math_constants.h>

#include <cstdint>
#include <cub/block/block_scan.cuh>

#include "kernels/kv_round_launch.h"
#include "kernels/nvfp4_device.cuh"

namespace kvtier::kernels::internal {
namespace {

constexpr int kScoreThreads = 256;
constexpr int kWarps = kScoreThreads / 32;
constexpr int kMaxHeadChunk = 8;
// Key rows a lane loads before scoring them, and the CTAs per SM the register budget aims at:
// up to four query heads per KV head three CTAs (24 warps) with two rows in flight per lane, more
// heads (twice the weight registers) two CTAs with four rows.
template <int kHeads>
constexpr int kScoreUnroll = kHeads <= 4 ? 2 : 4;
template <int kHeads>
constexpr int kScoreMinBlocks = kHeads <= 4 ? 3 : 2;
constexpr int kTilesPerBlock = 8;  // score tiles per CTA, so that its weights serve 1,024 tokens
constexpr int kTopKThreads = 512;
constexpr int kAggregateThreads = 256;
constexpr int kCompactThreads = 256;
constexpr int kVectorsPerThread = 8;  // compaction: 16-byte vectors held per thread per chunk
constexpr int kMoveList = 1024;       // compaction: moves gathered before they run
constexpr double kStdEpsilon = 1e-6;  // triattention::kScoreStdEpsilon
constexpr int kPartials = 3;          // per tile: sum, sum of squares, count of finite scores

enum ElementKind : int { kElemBf16 = 0, kElemFp16 = 1, kElemFp8 = 2 };

__device__ __forceinline__ int64_t DecodeTokens(const KvRoundRequest& r, int64_t cap) {
  int64_t t = r.length - r.protected_tail - r.prompt_len;
  if (t < 0) t = 0;
  return t < cap ? t : cap;
}

__device__ __forceinline__ uint8_t* RowAddress(const PagedKvDevice& kv, const KvPoolPair& pools,
                                               const int32_t* block_table, bool value, int head,
                                               int64_t token) {
  const int64_t page = block_table[token / kv.page_tokens];
  const int64_t slot = token % kv.page_tokens;
  uint8_t* base = static_cast<uint8_t*>(value && !kv.combined ? pools.v : pools.k);
  uint64_t offset = static_cast<uint64_t>(page) * kv.page_stride +
                    static_cast<uint64_t>(head) * kv.head_stride +
                    static_cast<uint64_t>(slot) * kv.token_stride;
  if (value) offset += kv.v_offset;
  return base + offset;
}

// The 4 real and 4 imaginary elements one lane scores of a key, as loaded (8 or 4 bytes each),
// converted exactly as codec::LoadAsFloat does.
template <int kElem>
struct RawHalves;

template <>
struct RawHalves<kElemFp8> {
  uint32_t re, im;
  __device__ __forceinline__ void Load(const uint8_t* r, const uint8_t* i) {
    re = *reinterpret_cast<const uint32_t*>(r);
    im = *reinterpret_cast<const uint32_t*>(i);
  }
  __device__ __forceinline__ void Zero() { re = im = 0; }
  __device__ __forceinline__ void Convert(float kr[4], float ki[4]) const {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      kr[j] = device::Fp8ToFloat(static_cast<uint8_t>(re >> (8 * j)));
      ki[j] = device::Fp8ToFloat(static_cast<uint8_t>(im >> (8 * j)));
    }
  }
};

template <int kElem>
struct RawHalves {
  uint2 re, im;
  __device__ __forceinline__ void Load(const uint8_t* r, const uint8_t* i) {
    re = *reinterpret_cast<const uint2*>(r);
    im = *reinterpret_cast<const uint2*>(i);
  }
  __device__ __forceinline__ void Zero() { re = im = make_uint2(0, 0); }
  static __device__ __forceinline__ float One(uint32_t word, int half) {
    const uint16_t h = static_cast<uint16_t>(word >> (16 * half));
    return kElem == kElemBf16 ? device::Bf16ToFloat(h) : device::Fp16ToFloat(h);
  }
  __device__ __forceinline__ void Convert(float kr[4], float ki[4]) const {
    kr[0] = One(re.x, 0);
    kr[1] = One(re.x, 1);
    kr[2] = One(re.y, 0);
    kr[3] = One(re.y, 1);
    ki[0] = One(im.x, 0);
    ki[1] = One(im.x, 1);
    ki[2] = One(im.y, 0);
    ki[3] = One(im.y, 1);
  }
};

// sqrt.approx.f32: one MUFU operation, relative error about 2^-23 (an IEEE sqrtf is about ten
// instructions); NaN and infinity pass through as in sqrtf.
__device__ __forceinline__ float ApproxSqrt(float x) {
  float y;
  asm("sqrt.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Sums v[0, N) over the kLanes lanes of a segment (aligned, power of two) so that afterwards the
// lanes with (lane % kLanes) % (kLanes / N) == 0 hold the complete sum of value
// (lane % kLanes) / (kLanes / N) in v[0]: recursive halving, N - 1 + log2(kLanes / N) shuffles
// instead of N * log2(kLanes). REQUIRES: N <= kLanes, both powers of two, all lanes converged.
template <int N, int kLanes>
__device__ __forceinline__ float ReduceScatter(float (&v)[N], int lane) {
  int n = N;
#pragma unroll
  for (int off = kLanes / 2; off >= 1; off >>= 1) {
    if (n > 1) {
      const int half = n / 2;
      const bool upper = (lane & off) != 0;
#pragma unroll
      for (int j = 0; j < (N > 1 ? N / 2 : 1); ++j) {
        if (j < half) {
          const float send = upper ? v[j] : v[j + half];
          const float keep = upper ? v[j + half] : v[j];
          v[j] = keep + __shfl_xor_sync(0xffffffffu, send, off);
        }
      }
      n = half;
    } else {
      v[0] += __shfl_xor_sync(0xffffffffu, v[0], off);
    }
  }
  return v[0];
}

__global__ void RoundBandsKernel(const KvRoundRequest* requests, const double* omega, int bands,
                                 int num_offsets, double* out) {
  const int r = blockIdx.x;
  const int64_t t0 = requests[r].round_start;
  for (int f = threadIdx.x; f < bands; f += blockDim.x) {
    const double w = omega[f];
    double c = 0.0, s = 0.0;
    for (int d = 0; d < num_offsets; ++d) {
      const double angle = __dmul_rn(static_cast<double>(t0 + (int64_t{1} << d)), w);
      double sn, cs;
      sincos(angle, &sn, &cs);
      c = __dadd_rn(c, cs);
      s = __dadd_rn(s, sn);
    }
    out[(static_cast<size_t>(r) * bands + f) * 2] = __ddiv_rn(c, static_cast<double>(num_offsets));
    out[(static_cast<size_t>(r) * bands + f) * 2 + 1] =
        __ddiv_rn(s, static_cast<double>(num_offsets));
  }
}

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

// Pages one score tile can touch: 128 tokens starting anywhere in a page of at least 16.
constexpr int kTilePages = kKvScoreTile / 16 + 1;

// Grid (tile, layer * kv_heads + kv_head, request); dynamic shared memory: weights
// [3][kHeads][bands] floats, then tile scores [kHeads][kKvScoreTile].
template <int kElem, int kLanes, int kHeads>
__global__ void __launch_bounds__(kScoreThreads, kScoreMinBlocks<kHeads>)
    ScoreKernel(const ScoreParams p) {
  constexpr int F = kLanes * 4;
  constexpr int kRowsPerWarp = 32 / kLanes;
  constexpr int kElemBytes = kElem == kElemFp8 ? 1 : 2;
  extern __shared__ float smem[];
  float* s_cos = smem;
  float* s_sin = smem + kHeads * F;
  float* s_mag = smem + 2 * kHeads * F;
  float* s_scores = smem + 3 * kHeads * F;

  const int r = blockIdx.z;
  const KvRoundRequest req = p.requests[r];
  const int64_t T = DecodeTokens(req, p.max_tokens);
  const int first_tile = blockIdx.x * kTilesPerBlock;
  if (static_cast<int64_t>(first_tile) * kKvScoreTile >= T) return;
  const int tile_end =
      min(first_tile + kTilesPerBlock, static_cast<int>((T + kKvScoreTile - 1) / kKvScoreTile));
  const int G = p.kv.kv_heads;
  const int l = blockIdx.y / G;
  const int g = blockIdx.y % G;
  const int H = p.cal.query_heads;
  const int group = H / G;
  const int P = p.kv.page_tokens;
  __shared__ const uint8_t* s_pages[kTilePages];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int sub = lane % kLanes;
  const int row_in_warp = lane / kLanes;
  const int f0 = sub * 4;
  const KvPoolPair pools = p.kv.layers[l];
  const double* band = p.bands + static_cast<size_t>(r) * F * 2;

  for (int c0 = 0; c0 < group; c0 += kHeads) {
    const int nh = group - c0 < kHeads ? group - c0 : kHeads;
    __syncthreads();  // the previous chunk is done with shared memory
    for (int idx = threadIdx.x; idx < kHeads * F; idx += kScoreThreads) {
      const int h = idx / F;
      const int f = idx % F;
      float wc = 0.0f, ws = 0.0f, wm = 0.0f;
      if (h < nh) {
        const size_t i = (static_cast<size_t>(l) * H + g * group + c0 + h) * F + f;
        const double scale = p.cal.freq_scale_sq[f];
        const double mc = band[2 * f];
        const double ms = band[2 * f + 1];
        const double qr = p.cal.q_mean_real[i];
        const double qi = p.cal.q_mean_imag[i];
        const double qa = p.cal.q_abs_mean[i];
        wc = static_cast<float>(__dmul_rn(scale, __dsub_rn(__dmul_rn(qr, mc), __dmul_rn(qi, ms))));
        ws = static_cast<float>(__dmul_rn(scale, __dadd_rn(__dmul_rn(qr, ms), __dmul_rn(qi, mc))));
        wm = static_cast<float>(__dmul_rn(scale, __dsub_rn(qa, hypot(qr, qi))));
      }
      s_cos[idx] = wc;
      s_sin[idx] = ws;
      s_mag[idx] = wm;
    }
    __syncthreads();
    float wc[kHeads][4], ws[kHeads][4], wm[kHeads][4];
#pragma unroll
    for (int h = 0; h < kHeads; ++h) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        wc[h][j] = s_cos[h * F + f0 + j];
        ws[h][j] = s_sin[h * F + f0 + j];
        wm[h][j] = s_mag[h * F + f0 + j];
      }
    }
    constexpr int kOwnerStride = kLanes / kHeads;
    const bool owner = sub % kOwnerStride == 0;
    const int owned_head = sub / kOwnerStride;
    for (int tile = first_tile; tile < tile_end; ++tile) {
      const int64_t tile_begin = static_cast<int64_t>(tile) * kKvScoreTile;
      const int tile_tokens =
          static_cast<int>(T - tile_begin < kKvScoreTile ? T - tile_begin : kKvScoreTile);
      // The K plane of (page, head g) for every page the tile touches: rows then need no division
      // and no block-table read.
      const int64_t first_token = req.prompt_len + tile_begin;
      const int64_t first_page = first_token / P;
      const int offset = static_cast<int>(first_token - first_page * P);
      if (threadIdx.x < kTilePages) {
        const int64_t k = first_page + threadIdx.x;
        if (k * P < first_token + tile_tokens) {
          s_pages[threadIdx.x] = static_cast<const uint8_t*>(pools.k) +
                                 static_cast<uint64_t>(req.block_table[k]) * p.kv.page_stride +
                                 static_cast<uint64_t>(g) * p.kv.head_stride;
        }
      }
      __syncthreads();
      // kUnroll rows per lane are loaded before any is scored, to keep enough reads in flight.
      constexpr int kStep = kWarps * kRowsPerWarp;
      // The loop bound is uniform across the warp (the shuffles need every lane).
      for (int base = warp * kRowsPerWarp; base < tile_tokens;
           base += kStep * kScoreUnroll<kHeads>) {
        RawHalves<kElem> raw[kScoreUnroll<kHeads>];
#pragma unroll
        for (int u = 0; u < kScoreUnroll<kHeads>; ++u) {
          const int row = base + row_in_warp + u * kStep;
          if (row < tile_tokens) {
            const unsigned rel = static_cast<unsigned>(offset + row);
            unsigned page, slot;
            if (p.page_shift >= 0) {
              page = rel >> p.page_shift;
              slot = rel & static_cast<unsigned>(P - 1);
            } else {
              page = rel / static_cast<unsigned>(P);
              slot = rel - page * static_cast<unsigned>(P);
            }
            const uint8_t* key = s_pages[page] + slot * p.kv.token_stride;
            raw[u].Load(key + f0 * kElemBytes, key + (F + f0) * kElemBytes);
          } else {
            raw[u].Zero();
          }
        }
#pragma unroll
        for (int u = 0; u < kScoreUnroll<kHeads>; ++u) {
          const int row = base + row_in_warp + u * kStep;
          float kr[4], ki[4];
          raw[u].Convert(kr, ki);
          float mag[4];
#pragma unroll
          for (int j = 0; j < 4; ++j) mag[j] = ApproxSqrt(fmaf(kr[j], kr[j], ki[j] * ki[j]));
          float acc[kHeads];
#pragma unroll
          for (int h = 0; h < kHeads; ++h) {
            float a = 0.0f;
#pragma unroll
            for (int j = 0; j < 4; ++j) {
              a = fmaf(kr[j], wc[h][j], a);
              a = fmaf(ki[j], ws[h][j], a);
              a = fmaf(mag[j], wm[h][j], a);
            }
            acc[h] = a;
          }
          const float score = ReduceScatter<kHeads, kLanes>(acc, lane);
          if (row < tile_tokens && owner && owned_head < nh) {
            s_scores[owned_head * kKvScoreTile + row] = score;
          }
        }
      }
      __syncthreads();
      const size_t row0 = static_cast<size_t>(r) * p.kv.num_layers * H +
                          static_cast<size_t>(l) * H + g * group + c0;
      for (int idx = threadIdx.x; idx < nh * kKvScoreTile; idx += kScoreThreads) {
        const int h = idx / kKvScoreTile;
        const int i = idx % kKvScoreTile;
        if (i < tile_tokens) {
          p.scores[(row0 + h) * p.max_tokens + tile_begin + i] = s_scores[idx];
        }
      }
      // Tile statistics over the finite scores (NormalizeRows' rule), in a fixed order.
      for (int h = warp; h < nh; h += kWarps) {
        double s = 0.0, s2 = 0.0, n = 0.0;
        for (int i = lane; i < tile_tokens; i += 32) {
          const double v = s_scores[h * kKvScoreTile + i];
          if (isfinite(v)) {
            s = __dadd_rn(s, v);
            s2 = __dadd_rn(s2, __dmul_rn(v, v));
            n = __dadd_rn(n, 1.0);
          }
        }
#pragma unroll
        for (int off = 16; off >= 1; off >>= 1) {
          s = __dadd_rn(s, __shfl_xor_sync(0xffffffffu, s, off));
          s2 = __dadd_rn(s2, __shfl_xor_sync(0xffffffffu, s2, off));
          n = __dadd_rn(n, __shfl_xor_sync(0xffffffffu, n, off));
        }
        if (lane == 0) {
          double* out = p.partials + ((row0 + h) * p.tiles + tile) * kPartials;
          out[0] = s;
          out[1] = s2;
          out[2] = n;
        }
      }
      __syncthreads();  // the next tile reuses the scores in shared memory
    }
  }
}

// A warp per (request, layer, query head) row.
__global__ void RowStatsKernel(const KvRoundRequest* requests, int rows_per_request,
                               int64_t max_tokens, int tiles, bool normalize,
                               const double* partials, double* row_stats, int total_rows) {
  const int row = blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= total_rows) return;
  const int64_t T = DecodeTokens(requests[row / rows_per_request], max_tokens);
  const int used = static_cast<int>((T + kKvScoreTile - 1) / kKvScoreTile);
  double s = 0.0, s2 = 0.0, n = 0.0;
  for (int t = lane; t < used; t += 32) {
    const double* part = partials + (static_cast<size_t>(row) * tiles + t) * kPartials;
    s = __dadd_rn(s, part[0]);
    s2 = __dadd_rn(s2, part[1]);
    n = __dadd_rn(n, part[2]);
  }
#pragma unroll
  for (int off = 16; off >= 1; off >>= 1) {
    s = __dadd_rn(s, __shfl_xor_sync(0xffffffffu, s, off));
    s2 = __dadd_rn(s2, __shfl_xor_sync(0xffffffffu, s2, off));
    n = __dadd_rn(n, __shfl_xor_sync(0xffffffffu, n, off));
  }
  if (lane != 0) return;
  double mean = 0.0, divisor = 1.0;
  if (normalize && T > 0 && n > 0.0) {
    mean = __ddiv_rn(s, n);
    double var = __dsub_rn(__ddiv_rn(s2, n), __dmul_rn(mean, mean));
    if (!(var > 0.0)) var = 0.0;
    const double sd = sqrt(var);
    divisor = sd > kStdEpsilon ? sd : kStdEpsilon;
  }
  row_stats[2 * static_cast<size_t>(row)] = mean;
  row_stats[2 * static_cast<size_t>(row) + 1] = divisor;
}

// Order-preserving integer keys: NaN counts as -inf, -0 equals +0, larger values give larger keys.
__device__ __forceinline__ uint64_t OrderedKey(double v) {
  if (isnan(v)) v = -CUDART_INF;
  if (v == 0.0) v = 0.0;
  const uint64_t bits = static_cast<uint64_t>(__double_as_longlong(v));
  return (bits >> 63) ? ~bits : bits | (uint64_t{1} << 63);
}
__device__ __forceinline__ uint32_t OrderedKey(float v) {
  if (isnan(v)) v = -CUDART_INF_F;
  if (v == 0.0f) v = 0.0f;
  const uint32_t bits = __float_as_uint(v);
  return (bits >> 31) ? ~bits : bits | 0x80000000u;
}

struct AggregateParams {
  const KvRoundRequest* requests;
  const float* scores;
  const double* row_stats;
  void* keys;  // uint32 keys [R][sets][T] (union, per_layer_perhead) or uint64 (per_head)
  int64_t max_tokens;
  int layers;
  int heads;
  int kv_heads;
  int sets;
  bool normalize;
};

// z of one score as NormalizeRows stores it (rounded to float), NaN as -inf.
__device__ __forceinline__ float ZScore(const AggregateParams& p, size_t row, int64_t i) {
  const float v = p.scores[row * p.max_tokens + i];
  if (!p.normalize) return isnan(v) ? -CUDART_INF_F : v;
  const float z = __double2float_rn(
      __ddiv_rn(__dsub_rn(static_cast<double>(v), p.row_stats[2 * row]), p.row_stats[2 * row + 1]));
  return isnan(z) ? -CUDART_INF_F : z;
}

__device__ __forceinline__ float GroupMax(const AggregateParams& p, size_t rows, int l, int g,
                                          int64_t i) {
  const int group = p.heads / p.kv_heads;
  float m = -CUDART_INF_F;
  for (int h = g * group; h < (g + 1) * group; ++h) {
    m = fmaxf(m, ZScore(p, rows + static_cast<size_t>(l) * p.heads + h, i));
  }
  return m;
}

// Grid (token block, y, request), a thread per token; y is the layer (union: the token's max over
// all rows gathers with atomicMax, which is order-free), the KV head (per_head: the mean over the
// layers, summed in layer order in double as SelectKeptTokens does) or the (layer, KV head) set.
template <int kMode>
__global__ void __launch_bounds__(kAggregateThreads) AggregateKernel(const AggregateParams p) {
  const int r = blockIdx.z;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kAggregateThreads + threadIdx.x;
  const int64_t T = DecodeTokens(p.requests[r], p.max_tokens);
  if (i >= T) return;
  const size_t rows = static_cast<size_t>(r) * p.layers * p.heads;
  if constexpr (kMode == static_cast<int>(KvEvictionMode::kUnion)) {
    const int l = blockIdx.y;
    float m = -CUDART_INF_F;
    for (int g = 0; g < p.kv_heads; ++g) m = fmaxf(m, GroupMax(p, rows, l, g, i));
    atomicMax(static_cast<uint32_t*>(p.keys) + static_cast<size_t>(r) * p.max_tokens + i,
              OrderedKey(m));
  } else if constexpr (kMode == static_cast<int>(KvEvictionMode::kPerHead)) {
    const int g = blockIdx.y;
    double sum = 0.0;
    for (int l = 0; l < p.layers; ++l) {
      sum = __dadd_rn(sum, static_cast<double>(GroupMax(p, rows, l, g, i)));
    }
    static_cast<uint64_t*>(p.keys)[(static_cast<size_t>(r) * p.sets + g) * p.max_tokens + i] =
        OrderedKey(__ddiv_rn(sum, static_cast<double>(p.layers)));
  } else {
    const int set = blockIdx.y;
    static_cast<uint32_t*>(p.keys)[(static_cast<size_t>(r) * p.sets + set) * p.max_tokens + i] =
        OrderedKey(GroupMax(p, rows, set / p.kv_heads, set % p.kv_heads, i));
  }
}

// Union keys start at the lowest key (0) before AggregateKernel<union> gathers into them.
__global__ void ClearKeysKernel(uint32_t* keys, uint64_t count) {
  for (uint64_t i = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < count;
       i += uint64_t{gridDim.x} * blockDim.x) {
    keys[i] = 0;
  }
}

struct TopKParams {
  const KvRoundRequest* requests;
  const void* keys;
  int32_t* kept;
  int32_t* kept_count;
  int64_t max_tokens;
  int64_t budget;
  int sets;
};

// Grid (set, request). Keeps min(budget, T) tokens: all keys above the budget-th largest key K*,
// then keys equal to K* by ascending index; writes them ascending as physical indices.
template <typename Key>
__global__ void __launch_bounds__(kTopKThreads) TopKKernel(const TopKParams p) {
  using Scan = cub::BlockScan<int, kTopKThreads>;
  __shared__ typename Scan::TempStorage scan_storage;
  __shared__ unsigned hist[256];
  __shared__ unsigned suffix[256];
  __shared__ Key s_prefix;
  __shared__ int64_t s_remaining;
  __shared__ int s_digit;
  __shared__ unsigned s_above;

  const int s = blockIdx.x;
  const int r = blockIdx.y;
  const KvRoundRequest req = p.requests[r];
  const int64_t T = DecodeTokens(req, p.max_tokens);
  const int64_t keep = p.budget < T ? p.budget : T;
  if (s == 0 && threadIdx.x == 0) p.kept_count[r] = static_cast<int32_t>(keep);
  int32_t* out = p.kept + (static_cast<size_t>(r) * p.sets + s) * p.budget;
  const Key* keys =
      static_cast<const Key*>(p.keys) + (static_cast<size_t>(r) * p.sets + s) * p.max_tokens;
  if (keep == T) {
    for (int64_t i = threadIdx.x; i < T; i += kTopKThreads) {
      out[i] = static_cast<int32_t>(req.prompt_len + i);
    }
    return;
  }
  if (keep == 0) return;
  if (threadIdx.x == 0) {
    s_prefix = 0;
    s_remaining = keep;
  }
  Key mask = 0;
  for (int shift = static_cast<int>(sizeof(Key)) * 8 - 8; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += kTopKThreads) hist[b] = 0;
    __syncthreads();
    const Key prefix = s_prefix;
    for (int64_t i = threadIdx.x; i < T; i += kTopKThreads) {
      const Key k = keys[i];
      if ((k & mask) == prefix) atomicAdd(&hist[(k >> shift) & 0xffu], 1u);
    }
    __syncthreads();
    // Suffix sums: suffix[b] = keys of this prefix with digit >= b.
    if (threadIdx.x < 256) suffix[threadIdx.x] = hist[threadIdx.x];
    __syncthreads();
    for (int d = 1; d < 256; d <<= 1) {
      unsigned add = 0;
      if (threadIdx.x < 256 && threadIdx.x + d < 256) add = suffix[threadIdx.x + d];
      __syncthreads();
      if (threadIdx.x < 256) suffix[threadIdx.x] += add;
      __syncthreads();
    }
    const int64_t remaining = s_remaining;
    if (threadIdx.x < 256) {
      const unsigned above = threadIdx.x < 255 ? suffix[threadIdx.x + 1] : 0u;
      if (suffix[threadIdx.x] >= remaining && above < remaining) {
        s_digit = threadIdx.x;
        s_above = above;
      }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      s_prefix |= static_cast<Key>(s_digit) << shift;
      s_remaining -= s_above;
    }
    mask |= static_cast<Key>(0xff) << shift;
    __syncthreads();
  }
  const Key threshold = s_prefix;
  const int64_t ties = s_remaining;  // keys equal to the threshold to take, lowest index first
  int64_t tie_base = 0, out_base = 0;
  for (int64_t base = 0; base < T; base += kTopKThreads) {
    const int64_t i = base + threadIdx.x;
    const Key k = i < T ? keys[i] : 0;
    const int equal = (i < T && k == threshold) ? 1 : 0;
    const int greater = (i < T && k > threshold) ? 1 : 0;
    int equal_before, equal_total;
    Scan(scan_storage).ExclusiveSum(equal, equal_before, equal_total);
    __syncthreads();
    const int take = greater || (equal && tie_base + equal_before < ties);
    int position, taken;
    Scan(scan_storage).ExclusiveSum(take, position, taken);
    __syncthreads();
    if (take) out[out_base + position] = static_cast<int32_t>(req.prompt_len + i);
    tie_base += equal_total;
    out_base += taken;
  }
}

struct CompactParams {
  PagedKvDevice kv;
  const KvRoundRequest* requests;
  const int32_t* kept;
  const int32_t* kept_count;
  int64_t kept_stride;
  int sets;
  KvCompactionOrder order;
};

struct Move {
  int32_t src;
  int32_t dst;
};

// Copies the K and V rows of moves[0, n): every thread loads its vectors, the block syncs, then
// every thread stores them. Reads of the whole chunk finish before any write, so a chunk may
// write rows that other moves of the same chunk read.
__device__ void MoveChunk(const PagedKvDevice& kv, const KvPoolPair& pools,
                          const int32_t* block_table, int head, const Move* moves, int n) {
  const int vectors_per_plane = static_cast<int>(kv.row_bytes / 16);
  const int total = n * 2 * vectors_per_plane;
  uint4 v[kVectorsPerThread];
#pragma unroll
  for (int k = 0; k < kVectorsPerThread; ++k) {
    const int idx = threadIdx.x + k * kCompactThreads;
    if (idx < total) {
      const int m = idx / (2 * vectors_per_plane);
      const int rem = idx % (2 * vectors_per_plane);
      const uint8_t* row =
          RowAddress(kv, pools, block_table, rem >= vectors_per_plane, head, moves[m].src);
      v[k] = reinterpret_cast<const uint4*>(row)[rem % vectors_per_plane];
    }
  }
  __syncthreads();
#pragma unroll
  for (int k = 0; k < kVectorsPerThread; ++k) {
    const int idx = threadIdx.x + k * kCompactThreads;
    if (idx < total) {
      const int m = idx / (2 * vectors_per_plane);
      const int rem = idx % (2 * vectors_per_plane);
      uint8_t* row =
          RowAddress(kv, pools, block_table, rem >= vectors_per_plane, head, moves[m].dst);
      reinterpret_cast<uint4*>(row)[rem % vectors_per_plane] = v[k];
    }
  }
  __syncthreads();
}

// Index of the first element of a[0, n) that is >= x (a ascending).
__device__ __forceinline__ int LowerBound(const int32_t* a, int n, int64_t x) {
  int lo = 0, hi = n;
  while (lo < hi) {
    const int mid = (lo + hi) >> 1;
    if (a[mid] < x) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// Grid (layer * kv_heads + kv_head, request); dynamic shared memory: a bitmap of the kept range.
// Every move goes into one list in execution order (block scans place them; no atomics), and the
// list runs in chunks whose reads all finish before their writes (MoveChunk). Order-preserving
// moves and tail moves have src >= dst and ascending sources, so a later chunk never reads a row
// an earlier chunk wrote (move i reads src_i >= prompt + i, past every earlier destination). Hole
// filling reads only rows at or past prompt + kept and writes only rows before it: the bitmap
// marks the kept slots inside the range, a block scan numbers the free ones, and free slot j takes
// the j-th kept token past the range. The tail comes last in the list: its destinations may be
// the sources of hole-filling moves, which then run before it or in the same chunk (reads first).
__global__ void __launch_bounds__(kCompactThreads) CompactionKernel(const CompactParams p) {
  using Scan = cub::BlockScan<int, kCompactThreads>;
  __shared__ typename Scan::TempStorage scan_storage;
  __shared__ Move moves[kMoveList];
  __shared__ int s_count;
  __shared__ int s_inside;
  extern __shared__ uint32_t occupied[];  // bit q: slot prompt + q holds a kept token
  const int G = p.kv.kv_heads;
  const int l = blockIdx.x / G;
  const int g = blockIdx.x % G;
  const int r = blockIdx.y;
  const KvRoundRequest req = p.requests[r];
  const int64_t T = DecodeTokens(req, INT64_MAX);
  int64_t keep = p.kept_count[r];
  if (keep > T) keep = T;
  if (keep < 0) keep = 0;
  const int set = p.sets == 1 ? 0 : (p.sets == G ? g : static_cast<int>(blockIdx.x));
  const int32_t* kept = p.kept + (static_cast<size_t>(r) * p.sets + set) * p.kept_stride;
  const KvPoolPair pools = p.kv.layers[l];
  const int64_t prompt = req.prompt_len;
  const int vectors_per_move = static_cast<int>(2 * (p.kv.row_bytes / 16));
  int chunk = kCompactThreads * kVectorsPerThread / vectors_per_move;
  if (chunk > kCompactThreads) chunk = kCompactThreads;
  if (chunk < 1) chunk = 1;

  // Runs moves[0, s_count) in chunks of `chunk` and empties the list.
  auto flush = [&]() {
    __syncthreads();
    const int n = s_count;
    for (int first = 0; first < n; first += chunk) {
      MoveChunk(p.kv, pools, req.block_table, g, moves + first,
                n - first < chunk ? n - first : chunk);
    }
    __syncthreads();
    if (threadIdx.x == 0) s_count = 0;
    __syncthreads();
  };
  // Appends this thread's move (when `has`) in thread order; flushes first when the list could
  // overflow.
  auto append = [&](bool has, Move move) {
    if (s_count + kCompactThreads > kMoveList) flush();
    int index, total;
    Scan(scan_storage).ExclusiveSum(has ? 1 : 0, index, total);
    const int at = s_count;
    if (has) moves[at + index] = move;
    __syncthreads();
    if (threadIdx.x == 0) s_count = at + total;
    __syncthreads();
  };
  if (threadIdx.x == 0) {
    s_count = 0;
    s_inside = LowerBound(kept, static_cast<int>(keep), prompt + keep);
  }
  __syncthreads();
  const int inside = s_inside;  // kept tokens already inside [prompt, prompt + keep)
  if (p.order == KvCompactionOrder::kPreserveOrder) {
    for (int64_t c = 0; c < keep; c += kCompactThreads) {
      const int64_t i = c + threadIdx.x;
      const bool has = i < keep && kept[i] != prompt + i;
      append(has, {has ? kept[i] : 0, static_cast<int32_t>(prompt + i)});
    }
  } else if (inside < keep) {
    const int words = static_cast<int>((keep + 31) / 32);
    for (int w = threadIdx.x; w < words; w += kCompactThreads) occupied[w] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < inside; i += kCompactThreads) {
      const int64_t q = kept[i] - prompt;
      atomicOr(&occupied[q >> 5], 1u << (q & 31));
    }
    __syncthreads();
    int64_t holes_before = 0;
    for (int64_t c = 0; c < keep; c += kCompactThreads) {
      const int64_t q = c + threadIdx.x;
      const int hole = (q < keep && !((occupied[q >> 5] >> (q & 31)) & 1u)) ? 1 : 0;
      int index, total;
      Scan(scan_storage).ExclusiveSum(hole, index, total);
      __syncthreads();
      const int32_t src = hole ? kept[inside + holes_before + index] : 0;
      append(hole != 0, {src, static_cast<int32_t>(prompt + q)});
      holes_before += total;
    }
  }
  const int64_t tail = req.protected_tail;
  if (keep < T) {
    for (int64_t c = 0; c < tail; c += kCompactThreads) {
      const int64_t j = c + threadIdx.x;
      append(j < tail,
             {static_cast<int32_t>(prompt + T + j), static_cast<int32_t>(prompt + keep + j)});
    }
  }
  flush();
}

template <int kElem, int kLanes, int kHeads>
int LaunchScore(const ScoreParams& p, const dim3& grid, cudaStream_t stream) {
  const size_t smem = sizeof(float) * (3 * kHeads * kLanes * 4 + kHeads * kKvScoreTile);
  ScoreKernel<kElem, kLanes, kHeads><<<grid, kScoreThreads, smem, stream>>>(p);
  return static_cast<int>(cudaGetLastError());
}

template <int kElem, int kLanes>
int LaunchScoreHeads(const ScoreParams& p, int group, const dim3& grid, cudaStream_t stream) {
  if (group <= 1) return LaunchScore<kElem, kLanes, 1>(p, grid, stream);
  if (group <= 2) return LaunchScore<kElem, kLanes, 2>(p, grid, stream);
  if (group <= 4) return LaunchScore<kElem, kLanes, 4>(p, grid, stream);
  return LaunchScore<kElem, kLanes, kMaxHeadChunk>(p, grid, stream);
}

template <int kElem>
int LaunchScoreLanes(const ScoreParams& p, int group, int head_dim, const dim3& grid,
                     cudaStream_t stream) {
  switch (head_dim) {
    case 64:
      return LaunchScoreHeads<kElem, 8>(p, group, grid, stream);
    case 128:
      return LaunchScoreHeads<kElem, 16>(p, group, grid, stream);
    case 256:
      return LaunchScoreHeads<kElem, 32>(p, group, grid, stream);
    default:
      return static_cast<int>(cudaErrorInvalidValue);
  }
}

}  // namespace

int LaunchKvCompaction(const CompactionArgs& args, void* stream) {
  if (args.num_requests <= 0) return 0;
  CompactParams p{args.kv,          args.requests, args.kept, args.kept_count,
                  args.kept_stride, args.sets,     args.order};
  const dim3 grid(static_cast<unsigned>(args.kv.num_layers * args.kv.kv_heads),
                  static_cast<unsigned>(args.num_requests));
  const size_t bitmap = static_cast<size_t>((args.kept_stride + 31) / 32) * sizeof(uint32_t);
  CompactionKernel<<<grid, kCompactThreads, bitmap, static_cast<cudaStream_t>(stream)>>>(p);
  return static_cast<int>(cudaGetLastError());
}

int LaunchTriRound(const TriRoundArgs& a, void* stream_ptr) {
  if (a.num_requests <= 0) return 0;
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  const int F = a.kv.head_dim / 2;
  const int H = a.calibration.query_heads;
  const int L = a.kv.num_layers;
  const int G = a.kv.kv_heads;
  const int64_t cap = a.shape.max_decode_tokens;
  const int tiles = static_cast<int>((cap + kKvScoreTile - 1) / kKvScoreTile);
  const unsigned R = static_cast<unsigned>(a.num_requests);

  RoundBandsKernel<<<R, 64, 0, stream>>>(a.requests, a.calibration.omega, F, a.shape.num_offsets,
                                         a.workspace.bands);
  if (int err = static_cast<int>(cudaGetLastError()); err != 0) return err;

  int page_shift = -1;
  for (int b = 0; b < 16; ++b) {
    if ((1 << b) == a.kv.page_tokens) page_shift = b;
  }
  const ScoreParams sp{
      a.kv, a.calibration, a.requests, a.workspace.bands, a.workspace.scores, a.workspace.partials,
      cap,  tiles,         page_shift};
  const dim3 score_grid(static_cast<unsigned>((tiles + kTilesPerBlock - 1) / kTilesPerBlock),
                        static_cast<unsigned>(L * G), R);
  int err = 0;
  switch (a.kv.dtype) {
    case KvElement::kBf16:
      err = LaunchScoreLanes<kElemBf16>(sp, H / G, a.kv.head_dim, score_grid, stream);
      break;
    case KvElement::kFp16:
      err = LaunchScoreLanes<kElemFp16>(sp, H / G, a.kv.head_dim, score_grid, stream);
      break;
    case KvElement::kFp8E4M3:
      err = LaunchScoreLanes<kElemFp8>(sp, H / G, a.kv.head_dim, score_grid, stream);
      break;
    default:
      return static_cast<int>(cudaErrorInvalidValue);
  }
  if (err != 0) return err;

  const int rows = static_cast<int>(R) * L * H;
  RowStatsKernel<<<(rows + kWarps - 1) / kWarps, kScoreThreads, 0, stream>>>(
      a.requests, L * H, cap, tiles, a.shape.normalize, a.workspace.partials, a.workspace.row_stats,
      rows);
  if (err = static_cast<int>(cudaGetLastError()); err != 0) return err;

  const AggregateParams ap{
      a.requests, a.workspace.scores, a.workspace.row_stats, a.workspace.keys, cap, L, H, G,
      a.sets,     a.shape.normalize};
  const unsigned token_blocks =
      static_cast<unsigned>((cap + kAggregateThreads - 1) / kAggregateThreads);
  const TopKParams tp{
      a.requests, a.workspace.keys, a.workspace.kept, a.workspace.kept_count, cap, a.shape.budget,
      a.sets};
  const dim3 topk_grid(static_cast<unsigned>(a.sets), R);
  switch (a.shape.mode) {
    case KvEvictionMode::kUnion:
      ClearKeysKernel<<<R * 4, 256, 0, stream>>>(reinterpret_cast<uint32_t*>(a.workspace.keys),
                                                 static_cast<uint64_t>(R) * cap);
      AggregateKernel<1><<<dim3(token_blocks, L, R), kAggregateThreads, 0, stream>>>(ap);
      TopKKernel<uint32_t><<<topk_grid, kTopKThreads, 0, stream>>>(tp);
      break;
    case KvEvictionMode::kPerHead:
      AggregateKernel<2><<<dim3(token_blocks, G, R), kAggregateThreads, 0, stream>>>(ap);
      TopKKernel<uint64_t><<<topk_grid, kTopKThreads, 0, stream>>>(tp);
      break;
    case KvEvictionMode::kPerLayerPerHead:
      AggregateKernel<3><<<dim3(token_blocks, L * G, R), kAggregateThreads, 0, stream>>>(ap);
      TopKKernel<uint32_t><<<topk_grid, kTopKThreads, 0, stream>>>(tp);
      break;
  }
  if (err = static_cast<int>(cudaGetLastError()); err != 0) return err;

  CompactionArgs ca;
  ca.kv = a.kv;
  ca.requests = a.requests;
  ca.num_requests = a.num_requests;
  ca.sets = a.sets;
  ca.kept = a.workspace.kept;
  ca.kept_count = a.workspace.kept_count;
  ca.kept_stride = a.shape.budget;
  ca.order = a.shape.order;
  return LaunchKvCompaction(ca, stream);
}

}  // namespace kvtier::kernels::internal
