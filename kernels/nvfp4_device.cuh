// Device-side NVFP4 arithmetic of codec/FORMAT.md §5, mirroring codec/dtype.h and
// codec/nvfp4_math.h operation for operation: binary32 with explicit round-to-nearest intrinsics
// (__fmul_rn, __fadd_rn, __fsub_rn: nvcc would otherwise contract a*b+c into an FMA), so the GPU
// writes the same bytes as the CPU reference.
#ifndef KVTIER_KERNELS_NVFP4_DEVICE_CUH_
#define KVTIER_KERNELS_NVFP4_DEVICE_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>

namespace kvtier::kernels::device {

enum Domain : int { kBf16 = 0, kFp16 = 1, kFp8 = 2, kBinary32 = 3 };

__device__ __forceinline__ float Bf16ToFloat(uint16_t b) {
  return __uint_as_float(uint32_t{b} << 16);
}

__device__ __forceinline__ uint16_t FloatToBf16(float f) {
  const uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  const uint32_t rounded = u + 0x7fffu + ((u >> 16) & 1u);
  if ((rounded & 0x7f800000u) == 0x7f800000u) {
    return static_cast<uint16_t>(((u >> 16) & 0x8000u) | 0x7f7fu);
  }
  return static_cast<uint16_t>(rounded >> 16);
}

__device__ __forceinline__ float Fp16ToFloat(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  float m;
  if (exp == 0) {
    m = __fmul_rn(static_cast<float>(man), 5.9604644775390625e-8f);  // * 2^-24, exact
  } else if (exp == 31) {
    m = man == 0 ? __uint_as_float(0x7f800000u) : __uint_as_float(0x7fc00000u);
  } else {
    m = __uint_as_float(((exp + 112u) << 23) | (man << 13));
  }
  return __uint_as_float(__float_as_uint(m) | sign);
}

__device__ __forceinline__ uint16_t FloatToFp16(float f) {
  const uint32_t u = __float_as_uint(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u;
  if (a >= 0x477ff000u) return sign | 0x7bffu;
  if (a < 0x38800000u) {
    const float t = __fmul_rn(__uint_as_float(a), 16777216.0f);
    return sign | static_cast<uint16_t>(rintf(t));
  }
  uint32_t result = ((((a >> 23) - 112u) << 10) | ((a >> 13) & 0x3ffu));
  const uint32_t rem = a & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (result & 1u))) ++result;
  return sign | static_cast<uint16_t>(result);
}

__device__ __forceinline__ float Fp8ToFloat(uint8_t b) {
  const uint32_t exp = (b >> 3) & 0xfu;
  const uint32_t man = b & 0x7u;
  float m;
  if (exp == 15 && man == 7) {
    m = __uint_as_float(0x7fc00000u);
  } else if (exp == 0) {
    m = __fmul_rn(static_cast<float>(man), 0.001953125f);  // * 2^-9
  } else {
    m = __uint_as_float(((exp + 120u) << 23) | (man << 20));
  }
  return (b & 0x80u) ? -m : m;
}

__device__ __forceinline__ uint8_t FloatToFp8(float f) {
  const uint32_t u = __float_as_uint(f);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7fu;
  if (a >= 0x43e00000u) return sign | 0x7eu;
  if (a < 0x3c800000u) {
    const float t = __fmul_rn(__uint_as_float(a), 512.0f);
    return sign | static_cast<uint8_t>(rintf(t));
  }
  uint32_t result = ((((a >> 23) - 120u) << 3) | ((a >> 20) & 0x7u));
  const uint32_t rem = a & 0xfffffu;
  if (rem > 0x80000u || (rem == 0x80000u && (result & 1u))) ++result;
  if (result > 0x7eu) result = 0x7eu;
  return sign | static_cast<uint8_t>(result);
}

__device__ __forceinline__ float Round(int d, float v) {
  switch (d) {
    case kBf16:
      return Bf16ToFloat(FloatToBf16(v));
    case kFp16:
      return Fp16ToFloat(FloatToFp16(v));
    case kFp8:
      return Fp8ToFloat(FloatToFp8(v));
    default:
      return v;
  }
}

__device__ __forceinline__ float ScaleValue(int code) {
  return Fp8ToFloat(static_cast<uint8_t>(code));
}

constexpr int kMaxScaleCode = 0x7e;

__device__ __forceinline__ int ChooseScaleExp(float amax) {
  if (!(amax > 0.0f) || !isfinite(amax)) return 0;
  int k = 11 - ilogbf(amax);
  if (ldexpf(amax, k) > 2784.0f) --k;
  return k < -125 ? -125 : (k > 125 ? 125 : k);
}

__device__ __forceinline__ float Boundary(int c) {  // 3 * (S(c) + S(c+1)), exact
  return __fmul_rn(3.0f, __fadd_rn(ScaleValue(c), ScaleValue(c + 1)));
}

__device__ __forceinline__ int NearestScaleCodeOfSixth(float y) {
  if (!(y > 0.0f)) return 0;
  const float q = __fmul_rn(y, 1.0f / 6.0f);
  int c;
  if (q >= 448.0f) {
    c = kMaxScaleCode;
  } else if (q < 0.015625f) {
    c = static_cast<int>(__fadd_rn(__fmul_rn(q, 512.0f), 0.5f));
  } else {
    const uint32_t u = __float_as_uint(q);
    c = static_cast<int>(((((u >> 23) & 0xffu) - 120u) << 3) | ((u >> 20) & 0x7u));
    if ((u & 0xfffffu) >= 0x80000u) ++c;
  }
  if (c < kMaxScaleCode && y > Boundary(c)) ++c;
  if (c > 0 && y <= Boundary(c - 1)) --c;
  return c < kMaxScaleCode ? c : kMaxScaleCode;
}

__device__ __forceinline__ float Top(int d, int c, float p) {
  return Round(d, __fmul_rn(__fmul_rn(6.0f, ScaleValue(c)), p));
}

__device__ __forceinline__ int ChooseScaleCode(int d, float a, float q_scale, float p) {
  if (!(a > 0.0f)) return 0;
  const int c0 = NearestScaleCodeOfSixth(__fmul_rn(a, q_scale));
  if (d == kBinary32) return c0;
  if (d != kFp8) {
    const float lo = __fmul_rn(__fmul_rn(6.0f, ScaleValue(c0 - 1 > 1 ? c0 - 1 : 1)), p);
    const float hi = __fmul_rn(__fmul_rn(6.0f, ScaleValue(c0 + 1 < 0x7e ? c0 + 1 : 0x7e)), p);
    const bool exact =
        lo >= (d == kBf16 ? 0x1p-126f : 0x1p-14f) && hi <= (d == kBf16 ? 0x1.FEp127f : 65504.0f);
    if (exact) return c0;
  }
  int lo = 0, hi = kMaxScaleCode + 1;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (Top(d, mid, p) >= a) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  int best;
  if (lo > kMaxScaleCode) {
    best = kMaxScaleCode;
  } else if (lo == 0) {
    return 0;
  } else {
    best = (__fsub_rn(a, Top(d, lo - 1, p)) <= __fsub_rn(Top(d, lo, p), a)) ? lo - 1 : lo;
    if (best == lo) return lo;
  }
  const float value = Top(d, best, p);
  while (best > 0 && Top(d, best - 1, p) == value) --best;
  return best;
}

__device__ __forceinline__ float E2m1(int c) {
  switch (c) {
    case 0:
      return 0.0f;
    case 1:
      return 0.5f;
    case 2:
      return 1.0f;
    case 3:
      return 1.5f;
    case 4:
      return 2.0f;
    case 5:
      return 3.0f;
    case 6:
      return 4.0f;
    default:
      return 6.0f;
  }
}

__device__ __forceinline__ float NextDown(float positive) {
  return __uint_as_float(__float_as_uint(positive) - 1u);
}

// Thresholds of codec/nvfp4_math.h MakeThresholds.
__device__ __forceinline__ void MakeThresholds(int d, int s, float p, float* threshold) {
  const float scale = ScaleValue(s);
  if (s == 0) {
#pragma unroll
    for (int c = 0; c < 7; ++c) threshold[c] = __uint_as_float(0x7f800000u);
    return;
  }
  const float lo = __fmul_rn(__fmul_rn(0.5f, scale), p);
  const float hi = __fmul_rn(__fmul_rn(6.0f, scale), p);
  bool exact = false;
  if (d == kBf16 || d == kBinary32) exact = lo >= 0x1p-126f && hi <= 0x1.FEp127f;
  if (d == kFp16) exact = lo >= 0x1p-14f && hi <= 65504.0f;
  if (exact) {
    const float mids[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
#pragma unroll
    for (int c = 0; c < 7; ++c) {
      const float mid = __fmul_rn(__fmul_rn(mids[c], scale), p);
      threshold[c] = (c & 1) ? NextDown(mid) : mid;
    }
    return;
  }
  float decoded[8];
#pragma unroll
  for (int c = 0; c < 8; ++c) decoded[c] = Round(d, __fmul_rn(__fmul_rn(E2m1(c), scale), p));
#pragma unroll
  for (int c = 0; c < 7; ++c) {
    const float mid = __fadd_rn(decoded[c], __fmul_rn(__fsub_rn(decoded[c + 1], decoded[c]), 0.5f));
    threshold[c] = (c & 1) ? (mid > 0.0f ? NextDown(mid) : -0x1p-149f) : mid;
  }
}

__device__ __forceinline__ uint8_t EncodeValue(const float* threshold, float x) {
  const uint32_t bits = __float_as_uint(x);
  const float ax = __uint_as_float(bits & 0x7fffffffu);
  uint8_t c = 0;
#pragma unroll
  for (int i = 0; i < 7; ++i) c += ax > threshold[i] ? 1 : 0;
  const bool negative = (bits >> 31) && (bits & 0x7fffffffu) <= 0x7f800000u;
  return static_cast<uint8_t>(c | (negative ? 8 : 0));
}

// True where MakeThresholds takes its exact-grid form (FORMAT.md §5.4 "exact grid") for a
// BF16 or FP16 pass: every d_m = E[m]·S·P and midpoint M[m]·S·P exact and normal.
__device__ __forceinline__ bool GridIsExact(int d, int s, float p) {
  const float scale = ScaleValue(s);
  const float lo = __fmul_rn(__fmul_rn(0.5f, scale), p);
  const float hi = __fmul_rn(__fmul_rn(6.0f, scale), p);
  return s != 0 && lo >= (d == kFp16 ? 0x1p-14f : 0x1p-126f) &&
         hi <= (d == kFp16 ? 65504.0f : 0x1.FEp127f);
}

// The E2M1 conversion of Blackwell's "a" / "f" targets: cvt.rn.satfinite.e2m1x2.f32 rounds to the
// nearest E2M1 value, ties to the even code, saturating at 6; `hi` goes to the upper nibble.
#if defined(__CUDA_ARCH_FEAT_SM100_ALL) || defined(__CUDA_ARCH_FEAT_SM103_ALL) || \
    defined(__CUDA_ARCH_FEAT_SM110_ALL) || defined(__CUDA_ARCH_FEAT_SM120_ALL) || \
    defined(__CUDA_ARCH_FEAT_SM121_ALL) || defined(__CUDA_ARCH_FAMILY_SPECIFIC__)
#define KVTIER_HW_E2M1 1
#else
#define KVTIER_HW_E2M1 0
#endif

// Magnitude codes of two non-negative, non-NaN values (lo in the low nibble): the hardware
// conversion where the target has it, else the same rounding in software (RN-even on the grid
// {0, 0.5, 1, 1.5, 2, 3, 4, 6}: a tie goes to the even code, which is the upper neighbour at
// 0.75, 1.75, 3.5 and the lower one at 0.25, 1.25, 2.5, 5).
__device__ __forceinline__ uint32_t E2m1x2(float lo, float hi) {
#if KVTIER_HW_E2M1
  uint32_t out;
  asm("{\n.reg .b8 b;\ncvt.rn.satfinite.e2m1x2.f32 b, %1, %2;\ncvt.u32.u8 %0, b;\n}"
      : "=r"(out)
      : "f"(hi), "f"(lo));
  return out & 0xffu;
#else
  auto one = [](float v) {
    return static_cast<uint32_t>((v > 0.25f) + (v >= 0.75f) + (v > 1.25f) + (v >= 1.75f) +
                                 (v > 2.5f) + (v >= 3.5f) + (v > 5.0f));
  };
  return one(lo) | (one(hi) << 4);
#endif
}

// The codes of a BF16 or FP16 group (element 2j in the low nibble of byte j; two words) whose
// scale has an exact grid (GridIsExact), by conversion instead of thresholds: y = fl(|x| / (S·P))
// correctly rounded, then E2m1x2. The same codes as EncodeValue with MakeThresholds: S·P is exact
// and a midpoint M·S·P has at most 7 significant bits, a BF16 or FP16 value at most 11, so a
// value that is not exactly on a midpoint differs from it by more than 2^-12 of it and its
// rounded quotient stays on the same side; one exactly on it gives the midpoint exactly, and the
// tie rule of the conversion is the threshold rule's. NaN encodes as +0, infinities saturate to
// code 7, negative non-NaN values (-0 too) get bit 3. Not valid for binary32 inputs (nvfp4x2).
__device__ __forceinline__ void EncodeGroupByConversion(const float* x, float scale, float p,
                                                        uint32_t* packed) {
  const float sp = __fmul_rn(scale, p);
  packed[0] = packed[1] = 0;
#pragma unroll
  for (int j = 0; j < 16; j += 2) {
    float y[2];
    uint32_t sign = 0;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint32_t bits = __float_as_uint(x[j + h]);
      const bool nan = (bits & 0x7fffffffu) > 0x7f800000u;
      y[h] = nan ? 0.0f : __fdiv_rn(__uint_as_float(bits & 0x7fffffffu), sp);
      sign |= ((bits >> 31) && !nan) ? 8u << (4 * h) : 0u;
    }
    packed[j / 8] |= (E2m1x2(y[0], y[1]) | sign) << (4 * (j % 8));
  }
}

// Encode by paired compares (FORMAT.md §5.4, the exact-grid thresholds compared in the element
// format). Where the grid of scale code s is exact and its smallest midpoint 0.25·S·P is normal
// in the format, every midpoint M·S·P (at most 7 significant bits) is a normal BF16 and FP16
// value. For x of that format, "x > NextDown(M·S·P)" (an odd threshold of MakeThresholds) is
// "x >= M·S·P", and "x > M·S·P" (an even one) stays as it is, so the threshold compares can run
// on two elements at once in the element format (set.ge/gt on bf16x2/f16x2: one instruction each
// on sm_90), three of them per element as a binary search over the seven ascending thresholds.
__device__ __forceinline__ bool HalfCompareOk(int d, int s, float p) {
  if (d != kBf16 && d != kFp16) return false;
  if (!GridIsExact(d, s, p)) return false;
  const float lowest = __fmul_rn(__fmul_rn(0.25f, ScaleValue(s)), p);
  return lowest >= (d == kFp16 ? 0x1p-14f : 0x1p-126f);
}

// The seven midpoints M·S·P of an exact grid in the element format, each in both halves of a
// word (HalfCompareOk must hold: the conversions are exact).
__device__ __forceinline__ void MakeHalfThresholds(int d, int s, float p, uint32_t* threshold) {
  const float mids[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  const float scale = ScaleValue(s);
#pragma unroll
  for (int c = 0; c < 7; ++c) {
    const float mid = __fmul_rn(__fmul_rn(mids[c], scale), p);
    const uint32_t bits =
        d == kBf16 ? __float_as_uint(mid) >> 16 : uint32_t{__half_as_ushort(__float2half_rn(mid))};
    threshold[c] = bits | (bits << 16);
  }
}

// 0xffff in each half of the result where a's half compares >= (kGe) or > (!kGe) to b's half
// (false for NaN), reading both as BF16 (kBf16) or FP16 pairs.
template <bool kGe>
__device__ __forceinline__ uint32_t CompareHalves(bool bf16, uint32_t a, uint32_t b) {
  if (bf16) {
    __nv_bfloat162 x, y;
    memcpy(&x, &a, 4);
    memcpy(&y, &b, 4);
    return kGe ? __hge2_mask(x, y) : __hgt2_mask(x, y);
  }
  __half2 x, y;
  memcpy(&x, &a, 4);
  memcpy(&y, &b, 4);
  return kGe ? __hge2_mask(x, y) : __hgt2_mask(x, y);
}

// The codes of a BF16 or FP16 group (its 32 bytes as 8 words, element 2j in the low half of word
// j) for a scale code with HalfCompareOk, from its MakeHalfThresholds: the same codes as
// EncodeValue with MakeThresholds (NaN: +0; infinities: 7; negative non-NaN values, -0 too: bit 3).
__device__ __forceinline__ void EncodeGroupByHalfCompare(const uint32_t* words, bool bf16,
                                                         const uint32_t* t, uint32_t* packed) {
  uint32_t bytes[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const uint32_t magnitude = words[j] & 0x7fff7fffu;
    // code >= 4 iff x > thresholds[3], then >= 2 (+4) iff x > thresholds[1] (thresholds[5]),
    // then +1 iff x > thresholds[0|2|4|6]; the odd ones compare >=, the even ones >.
    const uint32_t m1 = CompareHalves<true>(bf16, magnitude, t[3]);
    const uint32_t m2 = CompareHalves<true>(bf16, magnitude, (m1 & t[5]) | (~m1 & t[1]));
    const uint32_t low = (m2 & t[2]) | (~m2 & t[0]);
    const uint32_t high = (m2 & t[6]) | (~m2 & t[4]);
    const uint32_t m3 = CompareHalves<false>(bf16, magnitude, (m1 & high) | (~m1 & low));
    const uint32_t not_nan = CompareHalves<true>(bf16, magnitude, magnitude);
    const uint32_t code = (m1 & 0x00040004u) | (m2 & 0x00020002u) | (m3 & 0x00010001u) |
                          ((words[j] >> 12) & not_nan & 0x00080008u);
    bytes[j] = code | (code >> 12);  // byte 0: the low element's code, then the high one's
  }
  packed[0] = __byte_perm(__byte_perm(bytes[0], bytes[1], 0x0040),
                          __byte_perm(bytes[2], bytes[3], 0x0040), 0x5410);
  packed[1] = __byte_perm(__byte_perm(bytes[4], bytes[5], 0x0040),
                          __byte_perm(bytes[6], bytes[7], 0x0040), 0x5410);
}

}  // namespace kvtier::kernels::device

#endif  // KVTIER_KERNELS_NVFP4_DEVICE_CUH_
