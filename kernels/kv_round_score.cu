// The scoring side of the eviction round (kv_round.cu launches the rest): RoundBandsKernel, the
// band means of a round's future query angles, and the two scorers of step 2 in kv_round.cu's
// overview, ScoreKernelTensor (BF16 / FP8 keys on tensor cores) and ScoreKernel (CUDA cores),
// with the launches LaunchTriRound calls through kv_round_device.cuh.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/kv_round_device.cuh"
#include "kernels/nvfp4_device.cuh"

namespace kvtier::kernels::internal {
namespace {

constexpr int kMaxHeadChunk = 8;
// Key rows a lane loads before scoring them, and the CTAs per SM the register budget aims at:
// up to four query heads per KV head three CTAs (24 warps) with two rows in flight per lane, more
// heads (twice the weight registers) two CTAs with four rows.
template <int kHeads>
constexpr int kScoreUnroll = kHeads <= 4 ? 2 : 4;
template <int kHeads>
constexpr int kScoreMinBlocks = kHeads <= 4 ? 3 : 2;

enum ElementKind : int { kElemBf16 = 0, kElemFp16 = 1, kElemFp8 = 2 };

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

int LaunchRoundBands(const KvRoundRequest* requests, const double* omega, int bands,
                     int num_offsets, double* out, unsigned num_requests, cudaStream_t stream) {
  RoundBandsKernel<<<num_requests, 64, 0, stream>>>(requests, omega, bands, num_offsets, out);
  return static_cast<int>(cudaGetLastError());
}

int LaunchRoundScores(const ScoreParams& p, KvElement dtype, int group, int head_dim,
                      const dim3& grid, cudaStream_t stream) {
  switch (dtype) {
    case KvElement::kBf16:
      return LaunchScoreLanes<kElemBf16>(p, group, head_dim, grid, stream);
    case KvElement::kFp16:
      return LaunchScoreLanes<kElemFp16>(p, group, head_dim, grid, stream);
    case KvElement::kFp8E4M3:
      return LaunchScoreLanes<kElemFp8>(p, group, head_dim, grid, stream);
    default:
      return static_cast<int>(cudaErrorInvalidValue);
  }
}

}  // namespace kvtier::kernels::internal
