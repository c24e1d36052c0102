// The NVFP4 arithmetic of kvtier's cold blocks (FORMAT.md, "NVFP4 arithmetic"): the buffer scale
// exponent, the E4M3 group scale, and the E2M1 code of each value, all defined with IEEE binary32
// operations (round to nearest even, gradual underflow) so the GPU kernels can match it bit for
// bit. Header-only, no dependencies beyond the standard library; pure functions, thread-safe.
#ifndef KVTIER_CODEC_NVFP4_MATH_H_
#define KVTIER_CODEC_NVFP4_MATH_H_

#include <algorithm>
#include <bit>
#include <cfloat>
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

namespace internal {
struct ScaleTable {
  float value[128];
  constexpr ScaleTable() : value() {
    for (int c = 0; c < 128; ++c) value[c] = codec::internal::Fp8E4M3Value(static_cast<uint8_t>(c));
  }
};
inline constexpr ScaleTable kScaleTable;
}  // namespace internal

// Value of a non-negative E4M3 scale code (0..0x7e).
inline float ScaleValue(uint8_t code) { return internal::kScaleTable.value[code & 0x7f]; }

// k for a buffer whose largest finite magnitude is `amax` (0 when amax is 0 or not finite).
inline int ChooseScaleExp(float amax) {
  if (!(amax > 0.0f) || !std::isfinite(amax)) return 0;
  int k = 11 - std::ilogb(amax);
  if (std::ldexp(amax, k) > kScaledMaxTarget) --k;
  return std::clamp(k, kMinScaleExp, kMaxScaleExp);
}

namespace internal {
// kBoundary[c] = 6 * (S(c) + S(c+1)) / 2 for c in [0, 0x7d]: the value of y = a * 2^k above
// which code c+1 is nearer than code c (exact in binary32: at most 7 significant bits).
struct BoundaryTable {
  float boundary[kMaxScaleCode];
  constexpr BoundaryTable() : boundary() {
    for (int c = 0; c < kMaxScaleCode; ++c) {
      boundary[c] = 3.0f * (kScaleTable.value[c] + kScaleTable.value[c + 1]);
    }
  }
};
inline constexpr BoundaryTable kBoundaryTable;
}  // namespace internal

// The E4M3 code nearest to y / 6 (y >= 0) in exact arithmetic, ties to the smaller code,
// saturating at 448: the code c with boundary[c-1] < y <= boundary[c]. A multiplication by 1/6
// finds the candidate (within one code of the answer) and exact comparisons settle it.
inline uint8_t NearestScaleCodeOfSixth(float y) {
  if (!(y > 0.0f)) return 0;
  const float q = y * (1.0f / 6.0f);
  int c;
  if (q >= 448.0f) {
    c = kMaxScaleCode;
  } else if (q < 0.015625f) {  // below 2^-6: subnormal codes 0..8 (8 is 2^-6)
    c = static_cast<int>(q * 512.0f + 0.5f);
  } else {
    const uint32_t u = std::bit_cast<uint32_t>(q);
    c = static_cast<int>(((((u >> 23) & 0xffu) - 120u) << 3) | ((u >> 20) & 0x7u));
    if ((u & 0xfffffu) >= 0x80000u) ++c;
  }
  const float* b = internal::kBoundaryTable.boundary;
  if (c < kMaxScaleCode && y > b[c]) ++c;
  if (c > 0 && y <= b[c - 1]) --c;
  return static_cast<uint8_t>(std::min(c, static_cast<int>(kMaxScaleCode)));
}

// The value domain a pass is quantized in: the source dtype (a decoder rounds to it), or exact
// binary32 (the two passes of nvfp4x2, whose sum is rounded once).
enum class Domain : uint8_t { kBf16, kFp16, kFp8, kBinary32 };

inline Domain DomainOf(DType dtype) {
  return dtype == DType::kBf16   ? Domain::kBf16
         : dtype == DType::kFp16 ? Domain::kFp16
                                 : Domain::kFp8;
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

// The general search of ChooseScaleCode, for groups whose top values are not exact in the domain:
// binary search for the first code whose top reaches `a`, then the nearer of it and the code
// below (binary32 differences), then the smallest code with the same top value.
inline uint8_t ChooseScaleCodeSearch(Domain d, float a, float p) {
  auto top = [&](int c) { return Round(d, (6.0f * ScaleValue(static_cast<uint8_t>(c))) * p); };
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

// The group scale code for a group whose largest finite magnitude is `a` (FORMAT.md): the code
// whose decoded top value Round((6 * S) * P) is nearest to `a`, ties to the smallest code.
// The code nearest to (a * Q) / 6 with Q = 2^k is the answer whenever the top values next to it
// are exact in the domain (BF16/FP16 tops 6 * S * P have at most 6 significant bits: exact when
// normal and finite); otherwise a search over all codes decides. nvfp4x2 passes (binary32
// domain) always take the nearest code.
inline uint8_t ChooseScaleCode(Domain d, float a, float q_scale, float p) {
  if (!(a > 0.0f)) return 0;
  const uint8_t c0 = NearestScaleCodeOfSixth(a * q_scale);
  if (d == Domain::kBinary32) return c0;
  if (d != Domain::kFp8) {
    // Codes c0-1, c0, c0+1 (code 0's top is 0, always exact).
    const float lo = (6.0f * ScaleValue(static_cast<uint8_t>(std::max(c0 - 1, 1)))) * p;
    const float hi = (6.0f * ScaleValue(static_cast<uint8_t>(std::min(c0 + 1, 0x7e)))) * p;
    const bool exact = lo >= (d == Domain::kBf16 ? 0x1p-126f : 0x1p-14f) &&
                       hi <= (d == Domain::kBf16 ? 0x1.FEp127f : 65504.0f);
    if (exact) return c0;
  }
  return ChooseScaleCodeSearch(d, a, p);
}

// Per-group code thresholds: code(|x|) = number of thresholds |x| exceeds (strictly).
// Midpoints between consecutive decoded magnitudes; a value on a midpoint takes the even code,
// which for odd lower codes means the threshold is the next float below the midpoint.
struct GroupThresholds {
  float decoded[8];
  float threshold[7];
};

// True when every decoded magnitude (e * S) * P of the group is exact in domain `d` (a normal
// number or zero there, and finite), so Round is the identity on the grid and the midpoints are
// t * S * P for t in {0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5}. Never true for FP8.
inline bool GridIsExact(Domain d, float scale, float p) {
  const float lo = (0.5f * scale) * p;
  const float hi = (6.0f * scale) * p;
  switch (d) {
    case Domain::kBf16:
    case Domain::kBinary32:
      return lo >= 0x1p-126f && hi <= 0x1.FEp127f;
    case Domain::kFp16:
      return lo >= 0x1p-14f && hi <= 65504.0f;
    case Domain::kFp8:
      return false;
  }
  return false;
}

inline float NextDown(float positive) {
  return std::bit_cast<float>(std::bit_cast<uint32_t>(positive) - 1u);
}

inline void MakeThresholds(Domain d, uint8_t s, float p, GroupThresholds* t) {
  const float scale = ScaleValue(s);
  if (s == 0) {  // every value of the group encodes as a zero magnitude
    for (int c = 0; c < 8; ++c) t->decoded[c] = 0.0f;
    for (int c = 0; c < 7; ++c) t->threshold[c] = INFINITY;
    return;
  }
  if (GridIsExact(d, scale, p)) {
    static constexpr float kMid[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
    for (int c = 0; c < 8; ++c) t->decoded[c] = (kE2M1[c] * scale) * p;
    for (int c = 0; c < 7; ++c) {
      const float mid = (kMid[c] * scale) * p;
      t->threshold[c] = (c & 1) ? NextDown(mid) : mid;
    }
    return;
  }
  for (int c = 0; c < 8; ++c) t->decoded[c] = Round(d, (kE2M1[c] * scale) * p);
  for (int c = 0; c < 7; ++c) {
    // Exact, and cannot overflow next to the largest finite values (unlike (a + b) / 2).
    const float mid = t->decoded[c] + (t->decoded[c + 1] - t->decoded[c]) * 0.5f;
    t->threshold[c] = (c & 1) ? (mid > 0.0f ? NextDown(mid) : -0x1p-149f) : mid;
  }
}

// The 4-bit code of x: sign in bit 3 (cleared for NaN), magnitude code in bits 0-2.
inline uint8_t EncodeValue(const GroupThresholds& t, float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const float ax = std::bit_cast<float>(bits & 0x7fffffffu);
  uint8_t c = 0;
  for (int i = 0; i < 7; ++i) c += ax > t.threshold[i];
  const bool negative = (bits >> 31) && (bits & 0x7fffffffu) <= 0x7f800000u;  // not NaN
  return static_cast<uint8_t>(c | (negative ? 8 : 0));
}

// nvfp4x2's settled pass 2 (FORMAT.md §5.5). The nearest pass-2 code can push a decoded value
// y = Round(v1 + v2) across a pass-1 midpoint, a group's scale boundary or the buffer's exponent
// range, so that encoding y picks other codes and round trips cycle. A pass-2 code *settles* an
// element when re-encoding y with the group's parameters reproduces y and y (and its residual)
// stay in the cells of the group's scale codes and the buffer's exponents, so that encoding y
// chooses them again. `g1` and `g2` are the binary32 thresholds and decoded magnitudes of the
// group's passes (MakeThresholds with Domain::kBinary32); q1 = 2^k, q2 = 2^k2.
struct TwoPassGroup {
  const GroupThresholds* g1;
  const GroupThresholds* g2;
  float q1, q2;
  float a1, a2;                // the group's largest finite |x| and |r|: they hold s1 and s2
  float buffer_a1, buffer_a2;  // the buffer's: they hold k and k2
  uint8_t s1, s2;
  Domain out;  // the source dtype's domain, where the decoder rounds
};

// The binary32 value a code decodes to in a pass with decoded magnitudes `g` (−0 for −0 codes).
inline float SignedDecoded(const GroupThresholds& g, uint8_t code) {
  const float d = g.decoded[code & 7];
  return (code & 8) ? -d : d;
}

// Whether a decoded magnitude |y| (source value x) keeps its group's scale code s and its
// buffer's exponent q = 2^k: |y|·q at most B[s] and on the same side of the exponent's target as
// |x|·q; for an element that holds the group's scale (`top`) also above B[s−1], and for one that
// holds the buffer's exponent (`buffer_top`) on the same side of half the target. The largest |y|
// of the group then gets s again, and the buffer's largest the same k.
inline bool InScaleCell(float x, float y, float q, uint8_t s, bool top, bool buffer_top) {
  const float a = std::fabs(x) * q;
  const float b = std::fabs(y) * q;
  const float* bound = internal::kBoundaryTable.boundary;
  const float half = 0.5f * kScaledMaxTarget;
  return (a > kScaledMaxTarget) == (b > kScaledMaxTarget) &&
         (s == kMaxScaleCode || b <= bound[s]) && (!top || s == 0 || b > bound[s - 1]) &&
         (!buffer_top || (a > half) == (b > half));
}

// Whether pass-1 code c1 and pass-2 code c2 settle an element x (finite) whose nearest pass-1 code
// leaves the residual r; `y` receives the decoded value.
inline bool Settles(const TwoPassGroup& g, float x, float r, uint8_t c1, uint8_t c2, float* y) {
  *y = Round(g.out, SignedDecoded(*g.g1, c1) + SignedDecoded(*g.g2, c2));
  if (!(std::fabs(*y) <= FLT_MAX)) return false;
  const float w1 = SignedDecoded(*g.g1, EncodeValue(*g.g1, *y));
  const float r2 = *y - w1;
  const float y2 = Round(g.out, w1 + SignedDecoded(*g.g2, EncodeValue(*g.g2, r2)));
  const float ax = std::fabs(x), ar = std::fabs(r);
  return std::bit_cast<uint32_t>(y2) == std::bit_cast<uint32_t>(*y) &&
         InScaleCell(x, *y, g.q1, g.s1, ax == g.a1, ax == g.buffer_a1) &&
         InScaleCell(r, r2, g.q2, g.s2, ar == g.a2, ar == g.buffer_a2);
}

// The pass-1 code on the other side of x from its nearest code c1 (same sign; magnitude 1 with
// x's sign when c1's magnitude is 0), or c1 itself when x is on c1's value or at the grid's end.
inline uint8_t OtherNeighbour(const GroupThresholds& g1, float x, uint8_t c1) {
  const uint8_t m = c1 & 7;
  const float ax = std::fabs(x);
  if (m == 0) return ax > 0.0f ? static_cast<uint8_t>(1 | (std::signbit(x) ? 8 : 0)) : c1;
  if (ax > g1.decoded[m]) return m == 7 ? c1 : static_cast<uint8_t>(c1 + 1);
  return ax < g1.decoded[m] ? static_cast<uint8_t>(c1 - 1) : c1;
}

// How one group's codes came out of SettleGroup.
struct SettleResult {
  int unsettled = 0;   // finite elements no pair settles (they keep their nearest codes)
  int replaced = 0;    // elements whose codes are not the nearest
  float error = 0.0f;  // Σ |y − x| over the finite elements, in element order (binary32)
};

// The codes of a group's elements for pass-2 scale code g.s2: per element its nearest pass-1
// code and the nearest pass-2 code when they settle (or x is not finite); else, over the nearest
// and the other neighbouring pass-1 code and every pass-2 code, the settling pair whose decoded
// value is nearest to x (first found on ties: nearest pass-1 code first, smaller pass-2 codes
// first); else the nearest codes. `codes1` holds the nearest pass-1 codes on entry. An
// `alternative` attempt returns early (counted unsettled) at its first unsettled element or once
// its error reaches `bound`, where it could no longer be chosen.
inline SettleResult SettleGroup(const TwoPassGroup& g, const float* x, const float* r,
                                uint8_t* codes1, uint8_t* codes2, bool alternative = false,
                                float bound = INFINITY) {
  SettleResult result;
  float y;
  for (int j = 0; j < 16; ++j) {
    const uint8_t nearest1 = codes1[j];
    const uint8_t nearest2 = EncodeValue(*g.g2, r[j]);
    codes2[j] = nearest2;
    if (!(std::fabs(x[j]) <= FLT_MAX)) continue;
    if (Settles(g, x[j], r[j], nearest1, nearest2, &y)) {
      result.error += std::fabs(y - x[j]);
      if (bound < INFINITY && result.error >= bound) {  // sums only grow: it cannot win
        ++result.unsettled;
        return result;
      }
      continue;
    }
    // The settling pair with the least error, first in (n1, o) x (0 ... 15) order on ties: the
    // candidates sorted by (error, order) and tried in turn (the first that settles is it).
    const uint8_t other1 = OtherNeighbour(*g.g1, x[j], nearest1);
    struct Candidate {
      float error;
      uint8_t order;
    } candidates[32];
    int n = 0;
    for (int i = 0; i < (other1 == nearest1 ? 1 : 2); ++i) {
      const float v1 = SignedDecoded(*g.g1, i == 0 ? nearest1 : other1);
      for (uint8_t c2 = 0; c2 < 16; ++c2) {
        const float error = std::fabs(Round(g.out, v1 + SignedDecoded(*g.g2, c2)) - x[j]);
        if (!(error < INFINITY)) continue;  // never below the search's starting bound
        int at = n++;
        for (; at > 0 && error < candidates[at - 1].error; --at)
          candidates[at] = candidates[at - 1];
        candidates[at] = {error, static_cast<uint8_t>(16 * i + c2)};
      }
    }
    float best_error = INFINITY;
    for (int t = 0; t < n; ++t) {
      const uint8_t c1 = candidates[t].order < 16 ? nearest1 : other1;
      const uint8_t c2 = candidates[t].order & 15;
      if (!Settles(g, x[j], r[j], c1, c2, &y)) continue;
      best_error = candidates[t].error;
      codes1[j] = c1;
      codes2[j] = c2;
      break;
    }
    if (best_error == INFINITY) {
      ++result.unsettled;
      if (alternative) return result;  // an alternative that cannot be chosen
      result.error += std::fabs(
          Round(g.out, SignedDecoded(*g.g1, nearest1) + SignedDecoded(*g.g2, nearest2)) - x[j]);
    } else {
      ++result.replaced;
      result.error += best_error;
    }
    if (bound < INFINITY && result.error >= bound) {  // sums only grow: it cannot win
      ++result.unsettled;
      return result;
    }
  }
  return result;
}

// nvfp4x2's settled codes for one group whose standard pass-2 scale code is g.s2 (p2 = 2^−k2):
// s2 when its nearest codes settle every element; else, of s2, s2 − 1 and s2 + 1 (within
// 0 … 126), the one whose SettleGroup settles every element with the least error (the first on
// ties); else s2 with SettleGroup's codes. `codes1` holds the nearest pass-1 codes on entry; both
// planes' codes (16 each, unpacked) on return. Returns pass 2's scale code; `g2` receives its
// thresholds.
inline uint8_t SettledPass2(TwoPassGroup g, GroupThresholds* g2, float p2, const float* x,
                            const float* r, uint8_t* codes1, uint8_t* codes2) {
  const uint8_t standard = g.s2;
  g.g2 = g2;
  uint8_t nearest1[16], best1[16], best2[16];
  std::copy(codes1, codes1 + 16, nearest1);
  MakeThresholds(Domain::kBinary32, standard, p2, g2);
  const SettleResult first = SettleGroup(g, x, r, codes1, codes2);
  if (first.unsettled == 0 && first.replaced == 0) return standard;
  int best = first.unsettled == 0 ? standard : -1;
  float best_error = first.error;
  std::copy(codes1, codes1 + 16, best1);
  std::copy(codes2, codes2 + 16, best2);
  for (const int s : {standard - 1, standard + 1}) {
    if (s < 0 || s > kMaxScaleCode) continue;
    g.s2 = static_cast<uint8_t>(s);
    MakeThresholds(Domain::kBinary32, g.s2, p2, g2);
    std::copy(nearest1, nearest1 + 16, codes1);
    // Stops early once it cannot be chosen (an unsettled element, or no less error than `best`).
    const SettleResult other =
        SettleGroup(g, x, r, codes1, codes2, true, best >= 0 ? best_error : INFINITY);
    if (other.unsettled != 0 || (best >= 0 && !(other.error < best_error))) continue;
    best = s;
    best_error = other.error;
    std::copy(codes1, codes1 + 16, best1);
    std::copy(codes2, codes2 + 16, best2);
  }
  if (best < 0) best = standard;  // nothing settles every element: the standard attempt's codes
  std::copy(best1, best1 + 16, codes1);
  std::copy(best2, best2 + 16, codes2);
  MakeThresholds(Domain::kBinary32, static_cast<uint8_t>(best), p2, g2);
  return static_cast<uint8_t>(best);
}

}  // namespace kvtier::codec::nvfp4

#endif  // KVTIER_CODEC_NVFP4_MATH_H_
