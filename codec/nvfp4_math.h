// The NVFP4 arithmetic of kvtier's cold blocks (FORMAT.md, "NVFP4 arithmetic"): the buffer scale
// exponent, the E4M3 group scale, and the E2M1 code of each value, all defined with IEEE binary32
// operations (round to nearest even, gradual underflow) so the GPU kernels can match it bit for
// bit. Header-only, no dependencies beyond the standard library; pure functions, thread-safe.
#ifndef KVTIER_CODEC_NVFP4_MATH_H_
#define KVTIER_CODEC_NVFP4_MATH_H_

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

#include "codec/dtype.h"

namespace kvtier::codec::nvfp4 {

// E2M1 magnitudes by code (bits 0-2 of a nibble; bit 3 is the sign).
inline constexpr float kE2M1[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
// The buffer exponent k is the largest with amax * 2^k <= kScaledMaxTarget (= 6 * 464), so the
// largest group scale rounds into [240, 448] and a decoded page gets the same k again.
inline constexpr float kScaledMaxTarget = 2784.0f;
inline constexpr int kMinScaleExp = -125;
inline constexpr int kMaxScaleExp = 125;
inline constexpr uint8_t kMaxScaleCode = 0x7e;  // 448

// Value of a non-negative E4M3 scale code (0..0x7e).
inline float ScaleValue(uint8_t code) { return Fp8E4M3ToFloat(code); }

// k for a buffer whose largest finite magnitude is `amax` (0 when amax is 0 or not finite).
inline int ChooseScaleExp(float amax) {
  if (!(amax > 0.0f) || !std::isfinite(amax)) return 0;
  int k = 11 - std::ilogb(amax);
  if (std::ldexp(amax, k) > kScaledMaxTarget) --k;
  return std::clamp(k, kMinScaleExp, kMaxScaleExp);
}

// The E4M3 code nearest to q >= 0, ties to the smaller code, saturating at 448.
inline uint8_t NearestScaleCode(float q) {
  if (!(q > 0.0f)) return 0;
  if (q >= 448.0f) return kMaxScaleCode;
  if (q < 0.015625f) {  // below 2^-6: subnormal codes 0..8 (8 is 2^-6)
    const float t = q * 512.0f;
    uint32_t n = static_cast<uint32_t>(t);
    if (t - static_cast<float>(n) > 0.5f) ++n;
    return static_cast<uint8_t>(n);
  }
  const uint32_t u = std::bit_cast<uint32_t>(q);
  uint32_t code = ((((u >> 23) & 0xffu) - 120u) << 3) | ((u >> 20) & 0x7u);
  if ((u & 0xfffffu) > 0x80000u) ++code;
  return static_cast<uint8_t>(code);
}

// The value domain a pass is quantized in: the source dtype (a decoder rounds to it), or exact
// binary32 (the two passes of nvfp4x2, whose sum is rounded once).
enum class Domain : uint8_t { kBf16, kFp16, kFp8, kBinary32 };

inline Domain DomainOf(DType dtype) {
  return dtype == DType::kBf16 ? Domain::kBf16
                               : dtype == DType::kFp16 ? Domain::kFp16 : Domain::kFp8;
}

inline float Round(Domain d, float v) {
  switch (d) {
    case Domain::kBf16:
      return Bf16ToFloat(FloatToBf16(v));
    case Domain::kFp16:
      return Fp16ToFloat(FloatToFp16(v));
    case Domain::kFp8:
      return Fp8E4M3ToFloat(FloatToFp8E4M3(v));
    case Domain::kBinary32:
      return v;
  }
  return v;
}

// Decoded magnitude of E2M1 code `c` with scale code `s` and P = 2^-k: Round((e2m1 * S) * P).
inline float DecodedMagnitude(Domain d, uint8_t c, uint8_t s, float p) {
  return Round(d, (kE2M1[c] * ScaleValue(s)) * p);
}

// The group scale code for a group whose largest finite magnitude is `a` (FORMAT.md): the code
// whose decoded top value Round((6 * S) * P) is nearest to `a`, ties to the smallest code.
// q = (a * Q) / 6 with Q = 2^k gives it directly whenever the top values next to the answer are
// exact in the domain; otherwise a search over all codes decides.
inline uint8_t ChooseScaleCode(Domain d, float a, float q_scale, float p) {
  if (!(a > 0.0f)) return 0;
  const uint8_t c0 = NearestScaleCode((a * q_scale) / 6.0f);
  if (d == Domain::kBinary32) return c0;
  auto top = [&](int c) { return Round(d, (6.0f * ScaleValue(static_cast<uint8_t>(c))) * p); };
  auto exact = [&](int c) {
    if (c < 0 || c > kMaxScaleCode) return true;
    const float v = (6.0f * ScaleValue(static_cast<uint8_t>(c))) * p;
    return Round(d, v) == v && std::isfinite(v);
  };
  if (exact(c0 - 1) && exact(c0) && exact(c0 + 1)) return c0;
  // Smallest code whose top value reaches a.
  int lo = 0, hi = kMaxScaleCode + 1;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (top(mid) >= a) {
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
    best = (a - top(lo - 1) <= top(lo) - a) ? lo - 1 : lo;
    if (best == lo) return static_cast<uint8_t>(lo);  // lo is the first code reaching a
  }
  const float value = top(best);
  while (best > 0 && top(best - 1) == value) --best;
  return static_cast<uint8_t>(best);
}

// Per-group code thresholds: code(|x|) = number of thresholds |x| exceeds (strictly).
// Midpoints between consecutive decoded magnitudes; a value on a midpoint takes the even code,
// which for odd lower codes means the threshold is the next float below the midpoint.
struct GroupThresholds {
  float decoded[8];
  float threshold[7];
};

inline void MakeThresholds(Domain d, uint8_t s, float p, GroupThresholds* t) {
  const float scale = ScaleValue(s);
  for (int c = 0; c < 8; ++c) t->decoded[c] = Round(d, (kE2M1[c] * scale) * p);
  for (int c = 0; c < 7; ++c) {
    // Exact, and cannot overflow next to the largest finite values (unlike (a + b) / 2).
    const float mid = t->decoded[c] + (t->decoded[c + 1] - t->decoded[c]) * 0.5f;
    t->threshold[c] = (c & 1) ? std::nextafter(mid, -INFINITY) : mid;
  }
}

// The 4-bit code of x: sign in bit 3 (cleared for NaN), magnitude code in bits 0-2.
inline uint8_t EncodeValue(const GroupThresholds& t, float x) {
  const float ax = std::fabs(x);
  uint8_t c = 0;
  for (int i = 0; i < 7; ++i) c += ax > t.threshold[i];
  const bool negative = std::signbit(x) && !std::isnan(x);
  return static_cast<uint8_t>(c | (negative ? 8 : 0));
}

}  // namespace kvtier::codec::nvfp4

#endif  // KVTIER_CODEC_NVFP4_MATH_H_
