// nvfp4x2's settled codes on the device (codec/FORMAT.md §5.5): codec/nvfp4_math.h's
// TwoPassGroup ... SettledPass2 operation for operation, with the round-to-nearest intrinsics of
// nvfp4_device.cuh, so the GPU writes the CPU codec's bytes. Included by nvfp4_kernels.cu only.
#ifndef KVTIER_KERNELS_NVFP4X2_SETTLE_CUH_
#define KVTIER_KERNELS_NVFP4X2_SETTLE_CUH_

#include <cstdint>

#include "kernels/nvfp4_device.cuh"

namespace kvtier::kernels::device {

// nvfp4x2's settled codes (FORMAT.md §5.5; codec/nvfp4_math.h TwoPassGroup ... SettledPass2,
// operation for operation). One group's two passes: thresholds, scales and exponents.
struct TwoPassGroup {
  float t1[7], t2[7];
  float scale1, scale2, p1, p2, q1, q2;
  float a1, a2, buffer_a1, buffer_a2;
  int s1, s2, out;
};

__device__ __forceinline__ float SignedDecoded(float scale, float p, int code) {
  const float d = __fmul_rn(__fmul_rn(device::E2m1(code & 7), scale), p);
  return (code & 8) ? -d : d;
}

__device__ __forceinline__ bool InScaleCell(float x, float y, float q, int s, bool top,
                                            bool buffer_top) {
  const float a = __fmul_rn(fabsf(x), q);
  const float b = __fmul_rn(fabsf(y), q);
  constexpr float kTarget = 2784.0f, kHalf = 1392.0f;
  return (a > kTarget) == (b > kTarget) &&
         (s == device::kMaxScaleCode || b <= device::Boundary(s)) &&
         (!top || s == 0 || b > device::Boundary(s - 1)) &&
         (!buffer_top || (a > kHalf) == (b > kHalf));
}

__device__ __forceinline__ bool Settles(const TwoPassGroup& g, float x, float r, int c1, int c2,
                                        float* y) {
  *y = device::Round(
      g.out, __fadd_rn(SignedDecoded(g.scale1, g.p1, c1), SignedDecoded(g.scale2, g.p2, c2)));
  if (!(fabsf(*y) <= 3.40282347e38f)) return false;
  const float w1 = SignedDecoded(g.scale1, g.p1, device::EncodeValue(g.t1, *y));
  const float r2 = __fsub_rn(*y, w1);
  const float y2 = device::Round(
      g.out, __fadd_rn(w1, SignedDecoded(g.scale2, g.p2, device::EncodeValue(g.t2, r2))));
  const float ax = fabsf(x), ar = fabsf(r);
  return __float_as_uint(y2) == __float_as_uint(*y) &&
         InScaleCell(x, *y, g.q1, g.s1, ax == g.a1, ax == g.buffer_a1) &&
         InScaleCell(r, r2, g.q2, g.s2, ar == g.a2, ar == g.buffer_a2);
}

// The settling pair nearest to x over the nearest and the other neighbouring pass-1 code
// (nvfp4_math.h OtherNeighbour) and every pass-2 code; false when none settles. Out of line: the
// rare path, kept out of the unrolled group loop.
static __device__ __noinline__ bool SearchPair(const TwoPassGroup g, float x, float r, int nearest1,
                                               int* c1_out, int* c2_out, float* error) {
  const int m = nearest1 & 7;
  const float ax = fabsf(x);
  const float dm = __fmul_rn(__fmul_rn(device::E2m1(m), g.scale1), g.p1);
  int other1 = nearest1;
  if (m == 0) {
    if (ax > 0.0f) other1 = 1 | (signbit(x) ? 8 : 0);
  } else if (ax > dm) {
    if (m != 7) other1 = nearest1 + 1;
  } else if (ax < dm) {
    other1 = nearest1 - 1;
  }
  float best = __uint_as_float(0x7f800000u);
  float y;
  for (int i = 0; i < (other1 == nearest1 ? 1 : 2); ++i) {
    const int c1 = i == 0 ? nearest1 : other1;
    for (int c2 = 0; c2 < 16; ++c2) {
      if (!Settles(g, x, r, c1, c2, &y) || !(fabsf(__fsub_rn(y, x)) < best)) continue;
      best = fabsf(__fsub_rn(y, x));
      *c1_out = c1;
      *c2_out = c2;
    }
  }
  *error = best;
  return best != __uint_as_float(0x7f800000u);
}

struct SettleResult {
  int unsettled, replaced;
  float error;
};

__device__ __forceinline__ uint64_t WithNibble(uint64_t codes, int j, int c) {
  return (codes & ~(uint64_t{0xf} << (4 * j))) | (uint64_t(c) << (4 * j));
}

// SettleGroup: codes1 holds the nearest pass-1 codes on entry (16 nibbles, element j at bits 4j).
__device__ __forceinline__ SettleResult SettleGroup(const TwoPassGroup& g, const float* x,
                                                    const float* r, uint64_t* codes1,
                                                    uint64_t* codes2) {
  SettleResult result{0, 0, 0.0f};
  uint64_t c2s = 0;
  float y;
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const int nearest1 = static_cast<int>((*codes1 >> (4 * j)) & 0xf);
    const int nearest2 = device::EncodeValue(g.t2, r[j]);
    c2s |= uint64_t(nearest2) << (4 * j);
    if (!(fabsf(x[j]) <= 3.40282347e38f)) continue;
    if (Settles(g, x[j], r[j], nearest1, nearest2, &y)) {
      result.error = __fadd_rn(result.error, fabsf(__fsub_rn(y, x[j])));
      continue;
    }
    int c1, c2;
    float error;
    if (SearchPair(g, x[j], r[j], nearest1, &c1, &c2, &error)) {
      ++result.replaced;
      result.error = __fadd_rn(result.error, error);
      *codes1 = WithNibble(*codes1, j, c1);
      c2s = WithNibble(c2s, j, c2);
    } else {
      ++result.unsettled;
      y = device::Round(g.out, __fadd_rn(SignedDecoded(g.scale1, g.p1, nearest1),
                                         SignedDecoded(g.scale2, g.p2, nearest2)));
      result.error = __fadd_rn(result.error, fabsf(__fsub_rn(y, x[j])));
    }
  }
  *codes2 = c2s;
  return result;
}

__device__ __forceinline__ void SetPass2Scale(TwoPassGroup* g, int s) {
  g->s2 = s;
  g->scale2 = device::ScaleValue(s);
  device::MakeThresholds(device::kBinary32, s, g->p2, g->t2);
}

// SettledPass2: returns pass 2's scale code; codes1 (nearest pass-1 codes on entry) and codes2
// receive both planes' codes.
static __device__ int SettledPass2(TwoPassGroup g, const float* x, const float* r, uint64_t* codes1,
                                   uint64_t* codes2) {
  const int standard = g.s2;
  const uint64_t nearest1 = *codes1;
  SetPass2Scale(&g, standard);
  const SettleResult first = SettleGroup(g, x, r, codes1, codes2);
  if (first.unsettled == 0 && first.replaced == 0) return standard;
  int best = first.unsettled == 0 ? standard : -1;
  float best_error = first.error;
  uint64_t best1 = *codes1, best2 = *codes2;
  for (int attempt = 0; attempt < 2; ++attempt) {
    const int s = attempt == 0 ? standard - 1 : standard + 1;
    if (s < 0 || s > device::kMaxScaleCode) continue;
    SetPass2Scale(&g, s);
    uint64_t c1 = nearest1, c2;
    const SettleResult other = SettleGroup(g, x, r, &c1, &c2);
    if (other.unsettled != 0 || (best >= 0 && !(other.error < best_error))) continue;
    best = s;
    best_error = other.error;
    best1 = c1;
    best2 = c2;
  }
  *codes1 = best1;
  *codes2 = best2;
  return best < 0 ? standard : best;
}

}  // namespace kvtier::kernels::device

#endif  // KVTIER_KERNELS_NVFP4X2_SETTLE_CUH_
