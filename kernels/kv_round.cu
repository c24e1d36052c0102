// The kernels of a batched eviction round (kv_round.h), launched in order on one stream:
//  1. RoundBandsKernel: per request and band, the mean cos / sin of the future query angles
//     (t0 + 2^d) * omega in double, as triattention::BuildRoundWeights.
//  2. Scoring, grid (1,024 tokens, layer * KV head, request). A block turns the calibration and the
//     band means into float weights for the query heads of its KV head, then either
//     ScoreKernelTensor (BF16 / FP8 keys, up to 8 heads per KV head): every warp scores 16-row
//     slabs with mma.sync on tensor cores (see the comment before MmaBf16), or ScoreKernel
//     (CUDA cores): each row of bands / 4 lanes reads one key, and a reduce-scatter across those
//     lanes leaves one head's score per lane. Scores go out with sums and sums of squares of the
//     finite ones (double, fixed order: deterministic).
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
constexpr int kTopKThreads = 256;  // one radix bin per thread
static_assert(kTopKThreads == 256, "TopKKernel gives each thread one 8-bit radix bin");
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

// ---- Tensor-core scoring (BF16 and FP8 keys, up to 8 query heads per KV head) ----
// The score of a key row for the heads of its group is a product [rows x features] by
// [features x heads] with features = the F real elements, the F imaginary elements and the F band
// magnitudes, so mma.sync m16n8k16 (BF16 in, FP32 accumulate) computes 16 rows by 8 heads at a
// time. BF16 and FP8 keys are exact in BF16; the weights and the magnitudes are split into three
// BF16 parts (hi + mid + lo, 24 significant bits), and the products of parts whose orders add up
// to at most 2 are accumulated, so the result keeps about FP32 accuracy. Within a k-step of 16
// features, lane (group g, thread t) feeds features 4t .. 4t + 3 into fragment slots 2t, 2t + 1,
// 2t + 8, 2t + 9 (any order works for a sum, as long as A and B agree), so its A fragment is one
// 8-byte load per row.

__device__ __forceinline__ void MmaBf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                        uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats rounded to BF16 (nearest even) and packed, `lo` in the low half.
__device__ __forceinline__ uint32_t PackBf16(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
__device__ __forceinline__ float LowBf16(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float HighBf16(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

// (x0, x1) as three packed BF16 parts whose sum is each value to about 2^-24 relative.
__device__ __forceinline__ void SplitPair(float x0, float x1, uint32_t (&part)[3]) {
  part[0] = PackBf16(x0, x1);
  x0 -= LowBf16(part[0]);  // exact
  x1 -= HighBf16(part[0]);
  part[1] = PackBf16(x0, x1);
  x0 -= LowBf16(part[1]);
  x1 -= HighBf16(part[1]);
  part[2] = PackBf16(x0, x1);
}

// Four consecutive key elements as two packed BF16 pairs (exact for BF16 and FP8 E4M3).
template <int kElem>
__device__ __forceinline__ uint2 LoadBf16Quad(const uint8_t* p) {
  if constexpr (kElem == kElemFp8) {
    const uint32_t v = *reinterpret_cast<const uint32_t*>(p);
    uint32_t b[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      b[j] = __float_as_uint(device::Fp8ToFloat(static_cast<uint8_t>(v >> (8 * j)))) >> 16;
    }
    return make_uint2(b[0] | (b[1] << 16), b[2] | (b[3] << 16));
  } else {
    return *reinterpret_cast<const uint2*>(p);
  }
}

// Eight consecutive key elements as four packed BF16 pairs.
template <int kElem>
__device__ __forceinline__ uint4 LoadBf16Oct(const uint8_t* p) {
  if constexpr (kElem == kElemFp8) {
    const uint2 lo = LoadBf16Quad<kElem>(p);
    const uint2 hi = LoadBf16Quad<kElem>(p + 4);
    return make_uint4(lo.x, lo.y, hi.x, hi.y);
  } else {
    return *reinterpret_cast<const uint4*>(p);
  }
}

// The magnitudes of two bands (real and imaginary words of packed BF16 pairs), split in parts.
__device__ __forceinline__ void MagnitudeParts(uint32_t re, uint32_t im, uint32_t (&part)[3]) {
  const float r0 = LowBf16(re), r1 = HighBf16(re), i0 = LowBf16(im), i1 = HighBf16(im);
  SplitPair(ApproxSqrt(fmaf(r0, r0, i0 * i0)), ApproxSqrt(fmaf(r1, r1, i1 * i1)), part);
}

// The three float weights of query head row `i` ([L][H][F] index) and band f for a round whose
// band means are band[2f], band[2f + 1], computed in double as triattention::BuildRoundWeights.
__device__ __forceinline__ void RoundWeight(const TriCalibrationDevice& cal, const double* band,
                                            size_t i, int f, float* wc, float* ws, float* wm) {
  const double scale = cal.freq_scale_sq[f];
  const double mc = band[2 * f];
  const double ms = band[2 * f + 1];
  const double qr = cal.q_mean_real[i];
  const double qi = cal.q_mean_imag[i];
  const double qa = cal.q_abs_mean[i];
  *wc = static_cast<float>(__dmul_rn(scale, __dsub_rn(__dmul_rn(qr, mc), __dmul_rn(qi, ms))));
  *ws = static_cast<float>(__dmul_rn(scale, __dadd_rn(__dmul_rn(qr, ms), __dmul_rn(qi, mc))));
  *wm = static_cast<float>(__dmul_rn(scale, __dsub_rn(qa, hypot(qr, qi))));
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

// The CUDA-core scorer (FP16 keys, and groups of more than 8 query heads per KV head).
// Grid (8 tiles, layer * kv_heads + kv_head, request); dynamic shared memory: weights
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
        RoundWeight(p.cal, band, (static_cast<size_t>(l) * H + g * group + c0 + h) * F + f, f, &wc,
                    &ws, &wm);
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
      auto key_row = [&](int row) -> const uint8_t* {
        const unsigned rel = static_cast<unsigned>(offset + row);
        unsigned page, slot;
        if (p.page_shift >= 0) {
          page = rel >> p.page_shift;
          slot = rel & static_cast<unsigned>(P - 1);
        } else {
          page = rel / static_cast<unsigned>(P);
          slot = rel - page * static_cast<unsigned>(P);
        }
        return s_pages[page] + slot * p.kv.token_stride;
      };
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
            const uint8_t* key = key_row(row);
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

// The tensor-core scorer (BF16 and FP8 keys, groups of up to 8 query heads): grid as ScoreKernel
// (1,024 tokens, layer * kv_heads + kv_head, request); dynamic shared memory: weights [3][8][F]
// floats, then the weight fragments [3 components][F / 16 k-steps][3 parts][32 lanes]. After the
// prologue every warp works alone, with no barrier: it scores slabs of 16 rows (lane (gq, t) feeds
// rows gq and gq + 8), writes the scores straight out, and at the end the sums of the finite scores
// of each head over its slabs: kWarps partials per block.
template <int kElem, int F>
__global__ void __launch_bounds__(kScoreThreads, F <= 64 ? 4 : 2)
    ScoreKernelTensor(const ScoreParams p) {
  constexpr int S = F / 16;
  constexpr int kElemBytes = kElem == kElemFp8 ? 1 : 2;
  constexpr int kHeads = 8;
  extern __shared__ float smem[];
  float* s_w = smem;  // [component][head][band]
  uint2* s_frags = reinterpret_cast<uint2*>(smem + 3 * kHeads * F);

  const int r = blockIdx.z;
  const KvRoundRequest req = p.requests[r];
  const int64_t T = DecodeTokens(req, p.max_tokens);
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * kTilesPerBlock * kKvScoreTile;
  if (begin >= T) return;
  const int64_t end = min(T, begin + static_cast<int64_t>(kTilesPerBlock) * kKvScoreTile);
  const int G = p.kv.kv_heads;
  const int l = blockIdx.y / G;
  const int g = blockIdx.y % G;
  const int H = p.cal.query_heads;
  const int group = H / G;  // <= 8
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const double* band = p.bands + static_cast<size_t>(r) * F * 2;
  for (int idx = threadIdx.x; idx < kHeads * F; idx += kScoreThreads) {
    const int h = idx / F;
    const int f = idx % F;
    float wc = 0.0f, ws = 0.0f, wm = 0.0f;
    if (h < group) {
      RoundWeight(p.cal, band, (static_cast<size_t>(l) * H + g * group + h) * F + f, f, &wc, &ws,
                  &wm);
    }
    s_w[idx] = wc;
    s_w[kHeads * F + idx] = ws;
    s_w[2 * kHeads * F + idx] = wm;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < 3 * S * 32; e += kScoreThreads) {
    const int comp = e / (S * 32);
    const int step = (e / 32) % S;
    const int ln = e % 32;
    // Lane t's features of k-step `step`: 4 of the 8 it loads per pair of k-steps.
    const float* w =
        s_w + comp * kHeads * F + (ln >> 2) * F + (step / 2) * 32 + (ln & 3) * 8 + (step & 1) * 4;
    uint32_t lo[3], hi[3];
    SplitPair(w[0], w[1], lo);
    SplitPair(w[2], w[3], hi);
#pragma unroll
    for (int q = 0; q < 3; ++q) s_frags[((comp * S + step) * 3 + q) * 32 + ln] = {lo[q], hi[q]};
  }
  __syncthreads();

  const int gq = lane >> 2, t = lane & 3;
  const int P = p.kv.page_tokens;
  const auto* k_base =
      static_cast<const uint8_t*>(p.kv.layers[l].k) + static_cast<uint64_t>(g) * p.kv.head_stride;
  const size_t row0 = (static_cast<size_t>(r) * p.kv.num_layers + l) * H + g * group;
  double sum[2] = {0.0, 0.0}, sum_sq[2] = {0.0, 0.0}, count[2] = {0.0, 0.0};  // heads 2t, 2t + 1
  for (int64_t slab = begin + warp * 16; slab < end; slab += kWarps * 16) {
    const int64_t rows[2] = {slab + gq, slab + gq + 8};
    uint2 re[2][S], im[2][S];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const bool valid = rows[half] < end;
      const uint8_t* key = nullptr;
      if (valid) {
        const int64_t token = req.prompt_len + rows[half];
        int64_t page, slot;
        if (p.page_shift >= 0) {
          page = token >> p.page_shift;
          slot = token & (P - 1);
        } else {
          page = token / P;
          slot = token - page * P;
        }
        key = k_base + static_cast<uint64_t>(req.block_table[page]) * p.kv.page_stride +
              static_cast<uint64_t>(slot) * p.kv.token_stride;
      }
#pragma unroll
      for (int pair = 0; pair < S / 2; ++pair) {
        const int e = pair * 32 + t * 8;
        const uint4 a = valid ? LoadBf16Oct<kElem>(key + e * kElemBytes) : make_uint4(0, 0, 0, 0);
        const uint4 b =
            valid ? LoadBf16Oct<kElem>(key + (F + e) * kElemBytes) : make_uint4(0, 0, 0, 0);
        re[half][2 * pair] = make_uint2(a.x, a.y);
        re[half][2 * pair + 1] = make_uint2(a.z, a.w);
        im[half][2 * pair] = make_uint2(b.x, b.y);
        im[half][2 * pair + 1] = make_uint2(b.z, b.w);
      }
    }
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int step = 0; step < S; ++step) {
      const uint32_t a_re[4] = {re[0][step].x, re[1][step].x, re[0][step].y, re[1][step].y};
      const uint32_t a_im[4] = {im[0][step].x, im[1][step].x, im[0][step].y, im[1][step].y};
#pragma unroll
      for (int q = 0; q < 3; ++q) {
        const uint2 bc = s_frags[((0 * S + step) * 3 + q) * 32 + lane];
        MmaBf16(acc, a_re, bc.x, bc.y);
        const uint2 bs = s_frags[((1 * S + step) * 3 + q) * 32 + lane];
        MmaBf16(acc, a_im, bs.x, bs.y);
      }
      uint32_t m00[3], m10[3], m01[3], m11[3];  // [row half][word]
      MagnitudeParts(re[0][step].x, im[0][step].x, m00);
      MagnitudeParts(re[1][step].x, im[1][step].x, m10);
      MagnitudeParts(re[0][step].y, im[0][step].y, m01);
      MagnitudeParts(re[1][step].y, im[1][step].y, m11);
      uint2 bm[3];
#pragma unroll
      for (int q = 0; q < 3; ++q) bm[q] = s_frags[((2 * S + step) * 3 + q) * 32 + lane];
      // Parts (a, b) with a + b <= 2: hi*hi, hi*mid, mid*hi, hi*lo, lo*hi, mid*mid.
      constexpr int kPairs[6][2] = {{0, 0}, {0, 1}, {1, 0}, {0, 2}, {2, 0}, {1, 1}};
#pragma unroll
      for (int k = 0; k < 6; ++k) {
        const int a = kPairs[k][0];
        const uint32_t a_mag[4] = {m00[a], m10[a], m01[a], m11[a]};
        MmaBf16(acc, a_mag, bm[kPairs[k][1]].x, bm[kPairs[k][1]].y);
      }
    }
    // acc[0], acc[1]: row gq, heads 2t, 2t + 1; acc[2], acc[3]: row gq + 8.
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int head = 2 * t + hh;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const float v = acc[2 * half + hh];
        if (rows[half] < end && head < group) {
          p.scores[(row0 + head) * p.max_tokens + rows[half]] = v;
          if (isfinite(v)) {
            sum[hh] = __dadd_rn(sum[hh], v);
            sum_sq[hh] = __dadd_rn(sum_sq[hh], __dmul_rn(v, v));
            count[hh] = __dadd_rn(count[hh], 1.0);
          }
        }
      }
    }
  }
  // One partial per (block, warp, head): the warp's lanes of a head (gq = 0..7), summed in a fixed
  // order, over every slab the warp scored.
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
#pragma unroll
    for (int off = 4; off <= 16; off <<= 1) {
      sum[hh] = __dadd_rn(sum[hh], __shfl_xor_sync(0xffffffffu, sum[hh], off));
      sum_sq[hh] = __dadd_rn(sum_sq[hh], __shfl_xor_sync(0xffffffffu, sum_sq[hh], off));
      count[hh] = __dadd_rn(count[hh], __shfl_xor_sync(0xffffffffu, count[hh], off));
    }
    const int head = 2 * t + hh;
    if (gq == 0 && head < group) {
      double* out = p.partials + ((row0 + head) * p.tiles + blockIdx.x * kWarps + warp) * kPartials;
      out[0] = sum[hh];
      out[1] = sum_sq[hh];
      out[2] = count[hh];
    }
  }
}

// A warp per (request, layer, query head) row.
__global__ void RowStatsKernel(const KvRoundRequest* requests, int rows_per_request,
                               int64_t max_tokens, int tiles, int group_tokens,
                               int partials_per_group, bool normalize, const double* partials,
                               double* row_stats, int total_rows) {
  const int row = blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= total_rows) return;
  const int64_t T = DecodeTokens(requests[row / rows_per_request], max_tokens);
  const int used = static_cast<int>((T + group_tokens - 1) / group_tokens) * partials_per_group;
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
  row_stats[3 * static_cast<size_t>(row)] = mean;
  row_stats[3 * static_cast<size_t>(row) + 1] = divisor;
  row_stats[3 * static_cast<size_t>(row) + 2] = __drcp_rn(divisor);
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
  const double* stats = p.row_stats + 3 * row;  // mean, divisor, 1 / divisor
  const double d = __dsub_rn(static_cast<double>(v), stats[0]);
  // float(d / divisor), as NormalizeRows rounds it, without a division: d * (1 / divisor) is
  // within 2 ulps (double) of the quotient, so it rounds to the same float unless the quotient
  // lies that close to a halfway point between floats (the 29 bits below a float's mantissa near
  // 2^28), or outside the normal float range, or is not finite: then divide.
  double q = __dmul_rn(d, stats[2]);
  const uint64_t bits = static_cast<uint64_t>(__double_as_longlong(q));
  const uint32_t below = static_cast<uint32_t>(bits) & 0x1fffffffu;
  const int exponent = static_cast<int>((bits >> 52) & 0x7ff) - 1023;
  if (below - ((1u << 28) - 8u) < 16u || exponent < -125 || exponent > 126) {
    q = __ddiv_rn(d, stats[1]);
  }
  const float z = __double2float_rn(q);
  return isnan(z) ? -CUDART_INF_F : z;
}

__device__ __forceinline__ float GroupMax(const AggregateParams& p, size_t rows, int l, int g,
                                          int64_t i) {
  const int group = p.heads / p.kv_heads;
  float m = -CUDART_INF_F;
#pragma unroll 4
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
#pragma unroll 2
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
  int32_t* holes;
  int32_t* hole_count;
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
  __shared__ unsigned warp_totals[kTopKThreads / 32];
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
  int32_t* holes = p.holes + (static_cast<size_t>(r) * p.sets + s) * p.budget;
  int32_t* hole_count = p.hole_count + static_cast<size_t>(r) * p.sets + s;
  const Key* keys =
      static_cast<const Key*>(p.keys) + (static_cast<size_t>(r) * p.sets + s) * p.max_tokens;
  if (keep == T || keep == 0) {
    for (int64_t i = threadIdx.x; i < keep; i += kTopKThreads) {
      out[i] = static_cast<int32_t>(req.prompt_len + i);
    }
    if (threadIdx.x == 0) *hole_count = 0;
    return;
  }
  if (threadIdx.x == 0) {
    s_prefix = 0;
    s_remaining = keep;
  }
  Key mask = 0;
  for (int shift = static_cast<int>(sizeof(Key)) * 8 - 8; shift >= 0; shift -= 8) {
    hist[threadIdx.x] = 0;
    __syncthreads();
    const Key prefix = s_prefix;
    for (int64_t i = threadIdx.x; i < T; i += kTopKThreads) {
      const Key k = keys[i];
      if ((k & mask) == prefix) atomicAdd(&hist[(k >> shift) & 0xffu], 1u);
    }
    __syncthreads();
    // Suffix sums: suffix[b] = keys of this prefix with digit >= b. Thread b owns bin b: a
    // suffix scan within each warp (shuffles), then the totals of the warps above it.
    {
      const unsigned lane = threadIdx.x & 31;
      unsigned v = hist[threadIdx.x];
#pragma unroll
      for (int d = 1; d < 32; d <<= 1) {
        const unsigned up = __shfl_down_sync(0xffffffffu, v, d);
        if (lane + d < 32) v += up;
      }
      if (lane == 0) warp_totals[threadIdx.x >> 5] = v;
      __syncthreads();
      for (int w = (threadIdx.x >> 5) + 1; w < kTopKThreads / 32; ++w) v += warp_totals[w];
      suffix[threadIdx.x] = v;
      __syncthreads();
    }
    const int64_t remaining = s_remaining;
    {
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
  // The kept set in ascending order, and the slots below `keep` that lose their token (the holes
  // fill-hole compaction fills with the kept tokens past `keep`).
  int64_t tie_base = 0, out_base = 0, hole_base = 0;
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
    if (base < keep) {  // block-uniform
      const int hole = (i < keep && !take) ? 1 : 0;
      int hole_index, hole_total;
      Scan(scan_storage).ExclusiveSum(hole, hole_index, hole_total);
      __syncthreads();
      if (hole) holes[hole_base + hole_index] = static_cast<int32_t>(req.prompt_len + i);
      hole_base += hole_total;
    }
  }
  if (threadIdx.x == 0) *hole_count = static_cast<int32_t>(hole_base);
}

struct CompactParams {
  PagedKvDevice kv;
  const KvRoundRequest* requests;
  const int32_t* kept;
  const int32_t* kept_count;
  int64_t kept_stride;
  int sets;
  KvCompactionOrder order;
  int page_shift;        // log2(page_tokens) when it is a power of two, else -1
  const int32_t* holes;  // null: the kernel finds the holes
  const int32_t* hole_count;
};

// One row move: byte offsets of the source and destination K rows from the layer's K pool base;
// the V rows sit at the same offsets in the V pool (or v_offset further in a combined pool).
struct Move {
  uint64_t src;
  uint64_t dst;
};

__device__ __forceinline__ uint64_t RowOffset(const PagedKvDevice& kv, int page_shift,
                                              const int32_t* block_table, int head, int64_t token) {
  // Token indices are below 2^31 (ValidateTriRound): 32-bit arithmetic, a shift when it can.
  const uint32_t t = static_cast<uint32_t>(token);
  const uint32_t P = static_cast<uint32_t>(kv.page_tokens);
  const uint32_t index = page_shift >= 0 ? t >> page_shift : t / P;
  const uint32_t slot = t - index * P;
  const int64_t page = block_table[index];
  return static_cast<uint64_t>(page) * kv.page_stride +
         static_cast<uint64_t>(head) * kv.head_stride +
         static_cast<uint64_t>(slot) * kv.token_stride;
}

// Copies the K and V rows of moves[0, n): every thread loads its vectors, the block syncs, then
// every thread stores them. Reads of the whole chunk finish before any write, so a chunk may
// write rows that other moves of the same chunk read.
__device__ __noinline__ void MoveChunk(const PagedKvDevice& kv, const KvPoolPair& pools,
                                       const Move* moves, int n) {
  // row_bytes / 16 is a power of two (head_dim 64 / 128 / 256, 1 or 2 bytes per element).
  const int plane_shift = __ffs(static_cast<int>(kv.row_bytes / 16)) - 1;
  const int plane_mask = (1 << plane_shift) - 1;
  const int total = n << (plane_shift + 1);
  auto* k_base = static_cast<uint8_t*>(pools.k);
  auto* v_base = kv.combined ? k_base + kv.v_offset : static_cast<uint8_t*>(pools.v);
  uint4 v[kVectorsPerThread];
#pragma unroll
  for (int k = 0; k < kVectorsPerThread; ++k) {
    const int idx = threadIdx.x + k * kCompactThreads;
    if (idx < total) {
      const int m = idx >> (plane_shift + 1);
      const uint8_t* base = (idx >> plane_shift) & 1 ? v_base : k_base;
      v[k] = reinterpret_cast<const uint4*>(base + moves[m].src)[idx & plane_mask];
    }
  }
  __syncthreads();
#pragma unroll
  for (int k = 0; k < kVectorsPerThread; ++k) {
    const int idx = threadIdx.x + k * kCompactThreads;
    if (idx < total) {
      const int m = idx >> (plane_shift + 1);
      uint8_t* base = (idx >> plane_shift) & 1 ? v_base : k_base;
      reinterpret_cast<uint4*>(base + moves[m].dst)[idx & plane_mask] = v[k];
    }
  }
  __syncthreads();
}

// Grid (layer * kv_heads + kv_head, request); dynamic shared memory: a bitmap of the kept range.
// Every move goes into one list in execution order (block scans place them), and the list runs in
// chunks whose reads all finish before their writes (MoveChunk). Order-preserving moves and tail
// moves have src >= dst and ascending sources, so a later chunk never reads a row an earlier chunk
// wrote (move i reads src_i >= prompt + i, past every earlier destination). Hole filling reads
// only rows at or past prompt + kept and writes only rows before it: the bitmap marks the kept
// slots inside the range, a block scan numbers the free ones, and free slot j takes the j-th kept
// token past the range. The tail comes last in the list: its destinations may be the sources of
// hole-filling moves, which then run before it or in the same chunk (reads first).
__global__ void __launch_bounds__(kCompactThreads) CompactionKernel(const CompactParams p) {
  using Scan = cub::BlockScan<int, kCompactThreads>;
  __shared__ typename Scan::TempStorage scan_storage;
  __shared__ Move moves[kMoveList];
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

  int count = 0;  // moves in the list; the same value in every thread
  auto flush = [&]() {
    __syncthreads();
    for (int first = 0; first < count; first += chunk) {
      MoveChunk(p.kv, pools, moves + first, count - first < chunk ? count - first : chunk);
    }
    count = 0;
  };
  // Appends one candidate move per thread (`has`), in thread order.
  auto append = [&](bool has, int64_t src, int64_t dst) {
    if (count + kCompactThreads > kMoveList) flush();
    int index, total;
    Scan(scan_storage).ExclusiveSum(has ? 1 : 0, index, total);
    if (has) {
      moves[count + index] = {RowOffset(p.kv, p.page_shift, req.block_table, g, src),
                              RowOffset(p.kv, p.page_shift, req.block_table, g, dst)};
    }
    count += total;
    __syncthreads();  // scan_storage is reused
  };
  if (p.order == KvCompactionOrder::kFillHoles && p.holes != nullptr) {
    // The selection listed the holes: the j-th hole takes kept[keep - holes + j].
    const size_t at = static_cast<size_t>(r) * p.sets + set;
    const int n = keep < T ? p.hole_count[at] : 0;
    const int32_t* holes = p.holes + at * p.kept_stride;
    const int64_t inside = keep - n;
    for (int c = 0; c < n; c += kCompactThreads) {
      if (count + kCompactThreads > kMoveList) flush();
      const int j = c + static_cast<int>(threadIdx.x);
      if (j < n) {
        moves[count + threadIdx.x] = {
            RowOffset(p.kv, p.page_shift, req.block_table, g, kept[inside + j]),
            RowOffset(p.kv, p.page_shift, req.block_table, g, holes[j])};
      }
      count += n - c < kCompactThreads ? n - c : kCompactThreads;
      __syncthreads();
    }
    const int64_t tail = req.protected_tail;
    if (keep < T) {
      for (int64_t c = 0; c < tail; c += kCompactThreads) {
        const int64_t j = c + threadIdx.x;
        append(j < tail, prompt + T + j, prompt + keep + j);
      }
    }
    flush();
    return;
  }
  const int words = static_cast<int>((keep + 31) / 32);
  for (int w = threadIdx.x; w < words; w += kCompactThreads) occupied[w] = 0;
  __syncthreads();
  // The kept tokens inside the range are a prefix of the ascending set: count and mark them.
  int inside = 0;
  for (int64_t c = 0; c < keep; c += kCompactThreads) {
    const int64_t i = c + threadIdx.x;
    const int64_t q = i < keep ? kept[i] - prompt : keep;
    if (q < keep) atomicOr(&occupied[q >> 5], 1u << (q & 31));
    inside += __syncthreads_count(q < keep);
  }
  if (p.order == KvCompactionOrder::kPreserveOrder) {
    for (int64_t c = 0; c < keep; c += kCompactThreads) {
      const int64_t i = c + threadIdx.x;
      const bool has = i < keep && kept[i] != prompt + i;
      append(has, has ? kept[i] : 0, prompt + i);
    }
  } else if (inside < keep) {
    int64_t holes_before = 0;
    for (int64_t c = 0; c < keep; c += kCompactThreads) {
      const int64_t q = c + threadIdx.x;
      const bool hole = q < keep && !((occupied[q >> 5] >> (q & 31)) & 1u);
      if (count + kCompactThreads > kMoveList) flush();
      int index, total;
      Scan(scan_storage).ExclusiveSum(hole ? 1 : 0, index, total);
      if (hole) {
        moves[count + index] = {
            RowOffset(p.kv, p.page_shift, req.block_table, g, kept[inside + holes_before + index]),
            RowOffset(p.kv, p.page_shift, req.block_table, g, prompt + q)};
      }
      count += total;
      holes_before += total;
      __syncthreads();
    }
  }
  const int64_t tail = req.protected_tail;
  if (keep < T) {
    for (int64_t c = 0; c < tail; c += kCompactThreads) {
      const int64_t j = c + threadIdx.x;
      append(j < tail, prompt + T + j, prompt + keep + j);
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
  // Tensor cores for BF16 and FP8 keys of groups up to 8 (one 8-wide N tile); CUDA cores else.
  if constexpr (kElem != kElemFp16) {
    if (group <= 8) {
      constexpr int F = kLanes * 4;
      const size_t smem = sizeof(float) * 3 * 8 * F + sizeof(uint2) * 3 * (F / 16) * 3 * 32;
      ScoreKernelTensor<kElem, F><<<grid, kScoreThreads, smem, stream>>>(p);
      return static_cast<int>(cudaGetLastError());
    }
  }
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

// log2(page_tokens) when it is a power of two, else -1.
int PageShift(int page_tokens) {
  for (int b = 0; b < 16; ++b) {
    if ((1 << b) == page_tokens) return b;
  }
  return -1;
}

int LaunchKvCompaction(const CompactionArgs& args, void* stream) {
  if (args.num_requests <= 0) return 0;
  CompactParams p{args.kv,          args.requests,  args.kept,  args.kept_count,
                  args.kept_stride, args.sets,      args.order, PageShift(args.kv.page_tokens),
                  args.holes,       args.hole_count};
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
  const bool tensor = a.kv.dtype != KvElement::kFp16 && H / G <= 8;
  // Partials: one per 128-token tile (CUDA cores) or kWarps per 1,024-token block (tensor cores).
  const int score_tiles = static_cast<int>((cap + kKvScoreTile - 1) / kKvScoreTile);
  const int blocks = (score_tiles + kTilesPerBlock - 1) / kTilesPerBlock;
  const int group_tokens = tensor ? kTilesPerBlock * kKvScoreTile : kKvScoreTile;
  const int partials_per_group = tensor ? kWarps : 1;
  const int tiles = tensor ? blocks * kWarps : score_tiles;
  const unsigned R = static_cast<unsigned>(a.num_requests);

  RoundBandsKernel<<<R, 64, 0, stream>>>(a.requests, a.calibration.omega, F, a.shape.num_offsets,
                                         a.workspace.bands);
  if (int err = static_cast<int>(cudaGetLastError()); err != 0) return err;

  const int page_shift = PageShift(a.kv.page_tokens);
  const ScoreParams sp{
      a.kv, a.calibration, a.requests, a.workspace.bands, a.workspace.scores, a.workspace.partials,
      cap,  tiles,         page_shift};
  const dim3 score_grid(static_cast<unsigned>(blocks), static_cast<unsigned>(L * G), R);
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
      a.requests, L * H, cap, tiles, group_tokens, partials_per_group, a.shape.normalize,
      a.workspace.partials, a.workspace.row_stats, rows);
  if (err = static_cast<int>(cudaGetLastError()); err != 0) return err;

  const AggregateParams ap{
      a.requests, a.workspace.scores, a.workspace.row_stats, a.workspace.keys, cap, L, H, G,
      a.sets,     a.shape.normalize};
  const unsigned token_blocks =
      static_cast<unsigned>((cap + kAggregateThreads - 1) / kAggregateThreads);
  const TopKParams tp{a.requests,
                      a.workspace.keys,
                      a.workspace.kept,
                      a.workspace.kept_count,
                      a.workspace.holes,
                      a.workspace.hole_count,
                      cap,
                      a.shape.budget,
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
  ca.holes = a.workspace.holes;
  ca.hole_count = a.workspace.hole_count;
  return LaunchKvCompaction(ca, stream);
}

}  // namespace kvtier::kernels::internal
