// The `nvfp4` and `nvfp4x2` codecs (CPU reference). Per buffer and page: a power-of-two global
// scale 2^k chosen from the data, one E4M3 scale per 16 values chosen so that the group's largest
// value decodes as close as possible to itself, and E2M1 codes chosen in the decoded value
// domain (see nvfp4_math.h and FORMAT.md). Quantizing where the decoder rounds makes a decoded
// page a fixed point of encode+decode: round trips do not drift. nvfp4x2 adds a second pass over
// the binary32 residual; its sum is rounded once on decode.
#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <optional>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "absl/strings/str_cat.h"
#include "codec/codec_internal.h"
#include "codec/nvfp4_math.h"
#include "common/coding.h"
#include "common/status_macros.h"

namespace kvtier::codec::internal {
namespace {

using nvfp4::Domain;
using nvfp4::GroupThresholds;

typedef uint16_t U16x8 __attribute__((vector_size(16)));
typedef uint32_t U32x8 __attribute__((vector_size(32)));
static_assert(kNvfp4GroupSize == 16);

template <DType D>
inline float Load(const uint8_t* row, size_t i) {
  if constexpr (D == DType::kBf16) {
    return Bf16ToFloat(DecodeFixed16(row + 2 * i));
  } else if constexpr (D == DType::kFp16) {
    return Fp16ToFloat(DecodeFixed16(row + 2 * i));
  } else {
    return Fp8E4M3ToFloat(row[i]);
  }
}

#if defined(__x86_64__)
const bool kHaveAvx2 = __builtin_cpu_supports("avx2");
#endif

constexpr float kMidpoints[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};

#if defined(__SSE2__)
// Packs 16 codes held in four 4 x int32 vectors (lanes in element order) into 8 bytes, element 2i
// in the low nibble of byte i; `code` (when not null) receives the 16 codes.
inline void PackCodes(__m128i c0, __m128i c1, __m128i c2, __m128i c3, uint8_t* out, uint8_t* code) {
  const __m128i bytes = _mm_packus_epi16(_mm_packs_epi32(c0, c1), _mm_packs_epi32(c2, c3));
  if (code != nullptr) _mm_storeu_si128(reinterpret_cast<__m128i*>(code), bytes);
  // Each u16 lane holds codes 2i (low byte) and 2i+1 (high byte): make one nibble pair.
  const __m128i pairs = _mm_or_si128(_mm_and_si128(bytes, _mm_set1_epi16(0x00ff)),
                                     _mm_and_si128(_mm_srli_epi16(bytes, 4), _mm_set1_epi16(0xf0)));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(out), _mm_packus_epi16(pairs, pairs));
}
#endif

// Codes of one group given its thresholds: `out` gets 8 packed bytes (element 2i in the low
// nibble of byte i), `code` (when not null) the 16 codes. Returns nothing; pure.
#if defined(__SSE2__)
inline void EncodeGroup(const float* x, const GroupThresholds& t, uint8_t* out, uint8_t* code) {
  const __m128i abs_mask = _mm_set1_epi32(0x7fffffff);
  const __m128i inf_plus_one = _mm_set1_epi32(0x7f800001);
  __m128i c[4];
  for (int v = 0; v < 4; ++v) {
    const __m128i bits = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x + 4 * v));
    const __m128i mag = _mm_and_si128(bits, abs_mask);
    const __m128 ax = _mm_castsi128_ps(mag);
    // Sign bit 3 for negative non-NaN values (NaN magnitudes are above 0x7f800000).
    __m128i acc =
        _mm_and_si128(_mm_and_si128(_mm_srai_epi32(bits, 31), _mm_cmplt_epi32(mag, inf_plus_one)),
                      _mm_set1_epi32(8));
    for (int i = 0; i < 7; ++i) {
      acc = _mm_sub_epi32(acc, _mm_castps_si128(_mm_cmpgt_ps(ax, _mm_set1_ps(t.threshold[i]))));
    }
    c[v] = acc;
  }
  PackCodes(c[0], c[1], c[2], c[3], out, code);
}
#else
inline void EncodeGroup(const float* x, const GroupThresholds& t, uint8_t* out, uint8_t* code) {
  uint8_t local[kNvfp4GroupSize];
  for (size_t j = 0; j < kNvfp4GroupSize; ++j) local[j] = nvfp4::EncodeValue(t, x[j]);
  for (size_t j = 0; j < kNvfp4GroupSize / 2; ++j) {
    out[j] = static_cast<uint8_t>(local[2 * j] | (local[2 * j + 1] << 4));
  }
  if (code != nullptr) std::memcpy(code, local, sizeof(local));
}
#endif

// Fills group_max[g] with the largest finite magnitude of group g (0 when none) and returns the
// largest of them; counts non-finite values into *nonfinite when not null.
#if defined(__x86_64__)
__attribute__((target("avx2"))) float GroupMaximaAvx2(const float* values, uint64_t groups,
                                                      float* group_max, uint64_t* bad_out) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i inf = _mm256_set1_epi32(0x7f800000);
  __m256i bad_lanes = _mm256_setzero_si256();
  __m256 all = _mm256_setzero_ps();
  for (uint64_t g = 0; g < groups; ++g) {
    const __m256i m0 = _mm256_and_si256(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(values + g * 16)), abs_mask);
    const __m256i m1 = _mm256_and_si256(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(values + g * 16 + 8)), abs_mask);
    const __m256i f0 = _mm256_cmpgt_epi32(inf, m0);
    const __m256i f1 = _mm256_cmpgt_epi32(inf, m1);
    // Finite magnitudes as integers: max of bit patterns is the max of values.
    const __m256i top8 = _mm256_max_epi32(_mm256_and_si256(m0, f0), _mm256_and_si256(m1, f1));
    __m128i top4 = _mm_max_epi32(_mm256_castsi256_si128(top8), _mm256_extracti128_si256(top8, 1));
    top4 = _mm_max_epi32(top4, _mm_shuffle_epi32(top4, 0x4e));
    top4 = _mm_max_epi32(top4, _mm_shuffle_epi32(top4, 0xb1));
    group_max[g] = _mm_cvtss_f32(_mm_castsi128_ps(top4));
    all = _mm256_max_ps(all, _mm256_castsi256_ps(top8));
    bad_lanes = _mm256_add_epi32(bad_lanes, _mm256_add_epi32(f0, f1));  // -1 per finite lane
  }
  alignas(32) int32_t lanes[8];
  alignas(32) float tops[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), bad_lanes);
  _mm256_store_ps(tops, all);
  int64_t finite = 0;
  float buffer_max = 0.0f;
  for (int i = 0; i < 8; ++i) finite -= lanes[i], buffer_max = std::max(buffer_max, tops[i]);
  *bad_out = groups * kNvfp4GroupSize - static_cast<uint64_t>(finite);
  return buffer_max;
}
#endif

float GroupMaxima(const float* values, uint64_t groups, float* group_max, uint64_t* nonfinite) {
  float buffer_max = 0.0f;
  uint64_t bad = 0;
#if defined(__x86_64__)
  if (kHaveAvx2 && groups < (uint64_t{1} << 29)) {
    buffer_max = GroupMaximaAvx2(values, groups, group_max, &bad);
    if (nonfinite != nullptr) *nonfinite += bad;
    return buffer_max;
  }
#endif
#if defined(__SSE2__)
  const __m128i abs_mask = _mm_set1_epi32(0x7fffffff);
  const __m128i inf = _mm_set1_epi32(0x7f800000);
  __m128i bad_lanes = _mm_setzero_si128();
  for (uint64_t g = 0; g < groups; ++g) {
    __m128 top = _mm_setzero_ps();
    for (int v = 0; v < 4; ++v) {
      const __m128i mag = _mm_and_si128(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(values + g * 16 + 4 * v)), abs_mask);
      const __m128i finite = _mm_cmplt_epi32(mag, inf);
      top = _mm_max_ps(top, _mm_castsi128_ps(_mm_and_si128(mag, finite)));
      bad_lanes = _mm_add_epi32(bad_lanes, _mm_andnot_si128(finite, _mm_set1_epi32(-1)));
    }
    top = _mm_max_ps(top, _mm_movehl_ps(top, top));
    top = _mm_max_ss(top, _mm_shuffle_ps(top, top, 1));
    group_max[g] = _mm_cvtss_f32(top);
    buffer_max = std::max(buffer_max, group_max[g]);
  }
  alignas(16) int32_t lanes[4];  // each lane counts at most groups * 4 < 2^31 values
  _mm_store_si128(reinterpret_cast<__m128i*>(lanes), bad_lanes);
  bad = static_cast<uint64_t>(-(static_cast<int64_t>(lanes[0]) + lanes[1] + lanes[2] + lanes[3]));
#else
  for (uint64_t g = 0; g < groups; ++g) {
    uint32_t amax = 0;
    for (size_t j = 0; j < kNvfp4GroupSize; ++j) {
      const uint32_t m = std::bit_cast<uint32_t>(values[g * 16 + j]) & 0x7fffffffu;
      amax = std::max(amax, m < 0x7f800000u ? m : 0u);
      bad += m < 0x7f800000u ? 0 : 1;
    }
    group_max[g] = std::bit_cast<float>(amax);
    buffer_max = std::max(buffer_max, group_max[g]);
  }
#endif
  if (nonfinite != nullptr) *nonfinite += bad;
  return buffer_max;
}

// Thresholds of a group with scale code s on an exact grid (MakeThresholds' exact branch).
inline void ExactThresholds(uint8_t s, float p, float* threshold) {
  const float sp = nvfp4::ScaleValue(s) * p;  // exact: the grid is normal
  for (int i = 0; i < 7; ++i) {
    const float mid = kMidpoints[i] * sp;
    threshold[i] = s == 0 ? INFINITY : (i & 1) ? nvfp4::NextDown(mid) : mid;
  }
}

void QuantizeExactGroupsPortable(const float* values, const float* group_max, uint64_t groups,
                                 float p, float q, uint8_t* data, uint8_t* scales,
                                 BufferEncodeStats* stats) {
  GroupThresholds t;
  for (uint64_t g = 0; g < groups; ++g) {
    const float a = group_max[g];
    const uint8_t s = nvfp4::NearestScaleCodeOfSixth(a * q);
    scales[g] = s;
    if (s < 8 && a > 0.0f) ++stats->subnormal_scale_groups;
    ExactThresholds(s, p, t.threshold);
    EncodeGroup(values + g * kNvfp4GroupSize, t, data + g * (kNvfp4GroupSize / 2), nullptr);
  }
  stats->groups += groups;
}

#if defined(__x86_64__)
// The same with 8-lane AVX2 comparisons; chosen at run time when the CPU has AVX2.
__attribute__((target("avx2"))) void QuantizeExactGroupsAvx2(const float* values,
                                                             const float* group_max,
                                                             uint64_t groups, float p, float q,
                                                             uint8_t* data, uint8_t* scales,
                                                             BufferEncodeStats* stats) {
  float threshold[7];
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i inf_plus_one = _mm256_set1_epi32(0x7f800001);
  const __m256i eight = _mm256_set1_epi32(8);
  for (uint64_t g = 0; g < groups; ++g) {
    const float a = group_max[g];
    const uint8_t s = nvfp4::NearestScaleCodeOfSixth(a * q);
    scales[g] = s;
    if (s < 8 && a > 0.0f) ++stats->subnormal_scale_groups;
    ExactThresholds(s, p, threshold);
    const float* x = values + g * kNvfp4GroupSize;
    __m256i c[2];
    for (int v = 0; v < 2; ++v) {
      const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 8 * v));
      const __m256i mag = _mm256_and_si256(bits, abs_mask);
      const __m256 ax = _mm256_castsi256_ps(mag);
      __m256i acc = _mm256_and_si256(
          _mm256_and_si256(_mm256_srai_epi32(bits, 31), _mm256_cmpgt_epi32(inf_plus_one, mag)),
          eight);
      for (int i = 0; i < 7; ++i) {
        acc = _mm256_sub_epi32(
            acc, _mm256_castps_si256(_mm256_cmp_ps(ax, _mm256_set1_ps(threshold[i]), _CMP_GT_OQ)));
      }
      c[v] = acc;
    }
    PackCodes(_mm256_castsi256_si128(c[0]), _mm256_extracti128_si256(c[0], 1),
              _mm256_castsi256_si128(c[1]), _mm256_extracti128_si256(c[1], 1),
              data + g * (kNvfp4GroupSize / 2), nullptr);
  }
  stats->groups += groups;
}
#endif

void QuantizeExactGroups(const float* values, const float* group_max, uint64_t groups, float p,
                         float q, uint8_t* data, uint8_t* scales, BufferEncodeStats* stats) {
#if defined(__x86_64__)
  if (kHaveAvx2) {
    QuantizeExactGroupsAvx2(values, group_max, groups, p, q, data, scales, stats);
    return;
  }
#endif
  QuantizeExactGroupsPortable(values, group_max, groups, p, q, data, scales, stats);
}

// Quantizes `values` (rows x quant_len, row-major) in one pass: writes packed codes and scales,
// and, when `decoded` is not null, the binary32 value each element decodes to in this pass.
void QuantizePass(Domain domain, const float* values, const float* group_max, uint64_t count, int k,
                  uint8_t* data, uint8_t* scales, float* decoded, BufferEncodeStats* stats) {
  const float p = std::ldexp(1.0f, -k);
  const float q = std::ldexp(1.0f, k);
  GroupThresholds t;
  uint8_t code[kNvfp4GroupSize];
  // For BF16 and binary32 with |k| <= 116 every group's grid (e * S * P) and top values are exact
  // (normal and finite), so ChooseScaleCode and MakeThresholds reduce to their exact forms.
  if (decoded == nullptr && (domain == Domain::kBf16 || domain == Domain::kBinary32) && k <= 116 &&
      k >= -116) {
    QuantizeExactGroups(values, group_max, count / kNvfp4GroupSize, p, q, data, scales, stats);
    return;
  }
  for (uint64_t g = 0; g < count / kNvfp4GroupSize; ++g) {
    const float* x = values + g * kNvfp4GroupSize;
    const float a = group_max[g];
    const uint8_t s = nvfp4::ChooseScaleCode(domain, a, q, p);
    scales[g] = s;
    if (s < 8 && a > 0.0f) ++stats->subnormal_scale_groups;
    const float scale = nvfp4::ScaleValue(s);
    if (decoded == nullptr && s != 0 && nvfp4::GridIsExact(domain, scale, p)) {
      // Same thresholds as MakeThresholds computes for an exact grid, without the decoded table.
      const float sp = scale * p;  // exact: the grid check guarantees a normal result
      for (int i = 0; i < 7; ++i) {
        const float mid = kMidpoints[i] * sp;
        t.threshold[i] = (i & 1) ? nvfp4::NextDown(mid) : mid;
      }
      EncodeGroup(x, t, data + g * (kNvfp4GroupSize / 2), nullptr);
      continue;
    }
    nvfp4::MakeThresholds(domain, s, p, &t);
    EncodeGroup(x, t, data + g * (kNvfp4GroupSize / 2), decoded != nullptr ? code : nullptr);
    if (decoded != nullptr) {
      for (size_t j = 0; j < kNvfp4GroupSize; ++j) {
        const float d = t.decoded[code[j] & 7];
        decoded[g * kNvfp4GroupSize + j] = (code[j] & 8) ? -d : d;
      }
    }
  }
  stats->groups += count / kNvfp4GroupSize;
}

class Nvfp4Codec final : public Codec {
 public:
  Nvfp4Codec(BlockPlan plan, std::optional<int> fixed_scale_exp)
      : Codec(std::move(plan)), fixed_scale_exp_(fixed_scale_exp) {}

  absl::Status Encode(const HotPageView& page, absl::Span<uint8_t> block,
                      std::vector<BufferEncodeStats>* stats) const override {
    KVTIER_RETURN_IF_ERROR(CheckViewSize(page.base.size(), plan_.buffers.size()));
    if (block.size() != plan_.block_bytes) {
      return absl::InvalidArgumentError(absl::StrCat("block buffer is ", block.size(), " bytes, a ",
                                                     plan_.spec.ToString(), " block is ",
                                                     plan_.block_bytes));
    }
    ColdBlockHeader header = PlanHeader(plan_);
    ZeroPadding(plan_, block);
    std::vector<BufferEncodeStats> local(plan_.buffers.size());
    std::vector<float> values, residual, group_max;
    for (size_t i = 0; i < plan_.buffers.size(); ++i) {
      const BufferSpec& b = plan_.layout.buffers[i];
      const BufferPlan& bp = plan_.buffers[i];
      if (bp.encoding == BufferEncoding::kLossless) {
        GatherRows(plan_.layout, b, page.base[i], block.data() + bp.whole_offset);
        continue;
      }
      EncodeBuffer(b, bp, page.base[i], block.data(), &header.buffers[i], &local[i], values,
                   residual, group_max);
    }
    SealBlock(header, block);
    if (stats != nullptr) *stats = std::move(local);
    return absl::OkStatus();
  }

  absl::Status Decode(absl::Span<const uint8_t> block,
                      const MutableHotPageView& page) const override {
    KVTIER_RETURN_IF_ERROR(CheckViewSize(page.base.size(), plan_.buffers.size()));
    KVTIER_ASSIGN_OR_RETURN(ColdBlockHeader header, CheckBlock(block));
    for (size_t i = 0; i < plan_.buffers.size(); ++i) {  // validate every scale first
      const BufferPlan& bp = plan_.buffers[i];
      if (bp.encoding == BufferEncoding::kLossless) continue;
      const uint64_t n = bp.passes * bp.rows * bp.quant_len / kNvfp4GroupSize;
      const uint8_t* scales = block.data() + bp.scale_offset;
      for (uint64_t g = 0; g < n; ++g) {
        if (scales[g] > nvfp4::kMaxScaleCode) {
          return absl::DataLossError(absl::StrCat("buffer '", plan_.layout.buffers[i].name,
                                                  "': scale byte 0x", absl::Hex(scales[g]),
                                                  " at block offset ", bp.scale_offset + g,
                                                  " is not a non-negative finite E4M3 value"));
        }
      }
    }
    for (size_t i = 0; i < plan_.buffers.size(); ++i) {
      const BufferSpec& b = plan_.layout.buffers[i];
      const BufferPlan& bp = plan_.buffers[i];
      if (bp.encoding == BufferEncoding::kLossless) {
        ScatterRows(plan_.layout, b, block.data() + bp.whole_offset, page.base[i]);
        continue;
      }
      DecodeBuffer(b, bp, header.buffers[i], block.data(), page.base[i]);
    }
    return absl::OkStatus();
  }

 private:
  template <DType D>
  static void LoadRuns(const PageLayout& layout, const BufferSpec& b, const BufferPlan& bp,
                       const uint8_t* base, float* out) {
    const size_t stride = size_t{b.RowStride()} * DTypeBytes(b.dtype);
    for (uint64_t r = 0; r < bp.rows; ++r) {
      const uint8_t* row = base + r * stride;
      float* o = out + r * bp.quant_len;
      if constexpr (D == DType::kBf16) {  // widening shift, vectorized by the compiler
        const uint8_t* src = row + size_t{bp.quant_start} * 2;
        for (uint32_t e = 0; e < bp.quant_len; e += 8) {  // quant_len is a multiple of 16
          U16x8 h;
          std::memcpy(&h, src + 2 * e, sizeof(h));
          const U32x8 w = __builtin_convertvector(h, U32x8) << 16;
          std::memcpy(o + e, &w, sizeof(w));
        }
      } else {
        for (uint32_t e = 0; e < bp.quant_len; ++e) o[e] = Load<D>(row, bp.quant_start + e);
      }
    }
    (void)layout;
  }

  void EncodeBuffer(const BufferSpec& b, const BufferPlan& bp, const uint8_t* base, uint8_t* block,
                    ColdBufferEntry* entry, BufferEncodeStats* stats, std::vector<float>& values,
                    std::vector<float>& residual, std::vector<float>& group_max) const {
    const size_t esize = DTypeBytes(b.dtype);
    const size_t stride = size_t{b.RowStride()} * esize;
    // Lossless part of each row: [prefix][suffix].
    if (bp.row_lossless_bytes > 0) {
      const size_t prefix = size_t{bp.quant_start} * esize;
      const size_t suffix_at = size_t{bp.quant_start + bp.quant_len} * esize;
      const size_t suffix = size_t{b.head_dim} * esize - suffix_at;
      uint8_t* out = block + bp.row_lossless_offset;
      for (uint64_t r = 0; r < bp.rows; ++r) {
        const uint8_t* row = base + r * stride;
        std::memcpy(out, row, prefix);
        std::memcpy(out + prefix, row + suffix_at, suffix);
        out += bp.row_lossless_bytes;
      }
    }
    const uint64_t count = bp.rows * bp.quant_len;
    if (count == 0) return;
    values.resize(count);
    switch (b.dtype) {
      case DType::kBf16:
        LoadRuns<DType::kBf16>(plan_.layout, b, bp, base, values.data());
        break;
      case DType::kFp16:
        LoadRuns<DType::kFp16>(plan_.layout, b, bp, base, values.data());
        break;
      default:
        LoadRuns<DType::kFp8E4M3>(plan_.layout, b, bp, base, values.data());
        break;
    }
    const uint64_t groups = count / kNvfp4GroupSize;
    group_max.resize(groups);
    const float amax =
        GroupMaxima(values.data(), groups, group_max.data(), &stats->nonfinite_values);
    const int k = fixed_scale_exp_.value_or(nvfp4::ChooseScaleExp(amax));
    entry->scale_exp = static_cast<int8_t>(k);
    stats->scale_exp = k;
    uint8_t* data = block + bp.data_offset;
    uint8_t* scales = block + bp.scale_offset;
    if (bp.passes == 1) {
      QuantizePass(nvfp4::DomainOf(b.dtype), values.data(), group_max.data(), count, k, data,
                   scales, nullptr, stats);
      return;
    }
    residual.resize(2 * count);  // [residual | pass 1's decoded values]
    float* decoded1 = residual.data() + count;
    QuantizePass(Domain::kBinary32, values.data(), group_max.data(), count, k, data, scales,
                 decoded1, stats);
    for (uint64_t i = 0; i < count; ++i) {  // residual of finite values; 0 for NaN and infinities
      const float v = values[i];
      residual[i] = std::fabs(v) <= FLT_MAX ? v - decoded1[i] : 0.0f;
    }
    const float amax2 = GroupMaxima(residual.data(), groups, group_max.data(), nullptr);
    const int k2 = fixed_scale_exp_.value_or(nvfp4::ChooseScaleExp(amax2));
    entry->residual_scale_exp = static_cast<int8_t>(k2);
    stats->residual_scale_exp = k2;
    uint8_t* data2 = data + count / 2;
    uint8_t* scales2 = scales + groups;
    SettlePass2(nvfp4::DomainOf(b.dtype), values.data(), residual.data(), groups,
                {k, k2, amax, amax2}, scales, scales2, data, data2);
  }

  struct BufferExponents {
    int k, k2;
    float amax1, amax2;  // the largest finite |x| and |r| of the buffer
  };

  // nvfp4x2's pass 2 over the residual r = x − v1, and both planes' codes settled (nvfp4_math.h,
  // FORMAT.md §5.5); plane 1 holds pass 1's nearest codes on entry.
  static void SettlePass2(Domain out, const float* values, const float* residual, uint64_t groups,
                          const BufferExponents& e, const uint8_t* scales1, uint8_t* scales2,
                          uint8_t* data1, uint8_t* data2) {
    const float p1 = std::ldexp(1.0f, -e.k), p2 = std::ldexp(1.0f, -e.k2);
    GroupThresholds g1, g2;
    nvfp4::TwoPassGroup g{
        &g1, &g2, std::ldexp(1.0f, e.k), std::ldexp(1.0f, e.k2), 0, 0, e.amax1, e.amax2, 0, 0, out};
    uint8_t codes1[kNvfp4GroupSize], codes2[kNvfp4GroupSize];
    for (uint64_t gi = 0; gi < groups; ++gi) {
      const float* x = values + gi * kNvfp4GroupSize;
      const float* r = residual + gi * kNvfp4GroupSize;
      g.a1 = g.a2 = 0.0f;
      for (size_t j = 0; j < kNvfp4GroupSize; ++j) {
        if (std::fabs(x[j]) <= FLT_MAX) g.a1 = std::max(g.a1, std::fabs(x[j]));
        g.a2 = std::max(g.a2, std::fabs(r[j]));
      }
      g.s1 = scales1[gi];
      g.s2 = nvfp4::ChooseScaleCode(Domain::kBinary32, g.a2, g.q2, p2);
      nvfp4::MakeThresholds(Domain::kBinary32, g.s1, p1, &g1);
      uint8_t* packed1 = data1 + gi * (kNvfp4GroupSize / 2);
      uint8_t* packed2 = data2 + gi * (kNvfp4GroupSize / 2);
      for (size_t j = 0; j < kNvfp4GroupSize; ++j)
        codes1[j] = (packed1[j / 2] >> (j & 1) * 4) & 0xf;
      scales2[gi] = nvfp4::SettledPass2(g, &g2, p2, x, r, codes1, codes2);
      for (size_t j = 0; j < kNvfp4GroupSize / 2; ++j) {
        packed1[j] = static_cast<uint8_t>(codes1[2 * j] | codes1[2 * j + 1] << 4);
        packed2[j] = static_cast<uint8_t>(codes2[2 * j] | codes2[2 * j + 1] << 4);
      }
    }
  }

  static void DecodeBuffer(const BufferSpec& b, const BufferPlan& bp, const ColdBufferEntry& entry,
                           const uint8_t* block, uint8_t* base) {
    const size_t esize = DTypeBytes(b.dtype);
    const size_t stride = size_t{b.RowStride()} * esize;
    if (bp.row_lossless_bytes > 0) {
      const size_t prefix = size_t{bp.quant_start} * esize;
      const size_t suffix_at = size_t{bp.quant_start + bp.quant_len} * esize;
      const size_t suffix = size_t{b.head_dim} * esize - suffix_at;
      const uint8_t* in = block + bp.row_lossless_offset;
      for (uint64_t r = 0; r < bp.rows; ++r) {
        uint8_t* row = base + r * stride;
        std::memcpy(row, in, prefix);
        std::memcpy(row + suffix_at, in + prefix, suffix);
        in += bp.row_lossless_bytes;
      }
    }
    const uint64_t count = bp.rows * bp.quant_len;
    if (count == 0) return;
    const uint32_t groups_per_row = bp.quant_len / kNvfp4GroupSize;
    const uint8_t* data = block + bp.data_offset;
    const uint8_t* scales = block + bp.scale_offset;
    const float p1 = std::ldexp(1.0f, -entry.scale_exp);
    const float p2 = std::ldexp(1.0f, -entry.residual_scale_exp);
    const Domain out_domain = nvfp4::DomainOf(b.dtype);
    float v1[16], v2[16];
    for (uint64_t r = 0; r < bp.rows; ++r) {
      uint8_t* row = base + r * stride;
      for (uint32_t g = 0; g < groups_per_row; ++g) {
        const uint64_t gi = r * groups_per_row + g;
        const uint8_t* codes = data + gi * (kNvfp4GroupSize / 2);
        const float s1 = nvfp4::ScaleValue(scales[gi]);
        if (bp.passes == 1) {
          // The 16 possible outputs of this group, already in the destination format.
          uint8_t lut[16][2];
          if (b.dtype == DType::kBf16 && nvfp4::GridIsExact(out_domain, s1, p1)) {
            for (int c = 0; c < 8; ++c) {  // exact: the BF16 bits are the float's top half
              const uint32_t f = std::bit_cast<uint32_t>((nvfp4::kE2M1[c] * s1) * p1);
              EncodeFixed16(lut[c], static_cast<uint16_t>(f >> 16));
              lut[c + 8][0] = lut[c][0], lut[c + 8][1] = lut[c][1] | 0x80;
            }
          } else if (b.dtype == DType::kFp16 && nvfp4::GridIsExact(out_domain, s1, p1)) {
            for (int c = 0; c < 8; ++c) {  // exact: converting cannot round
              const uint16_t h = FloatToFp16((nvfp4::kE2M1[c] * s1) * p1);
              EncodeFixed16(lut[c], h);
              lut[c + 8][0] = lut[c][0], lut[c + 8][1] = lut[c][1] | 0x80;
            }
          } else {
            for (int c = 0; c < 8; ++c) {
              const float d = nvfp4::Round(out_domain, (nvfp4::kE2M1[c] * s1) * p1);
              StoreFromFloat(b.dtype, d, lut[c], 0);
              StoreFromFloat(b.dtype, -d, lut[c + 8], 0);
            }
          }
          uint8_t* out = row + (size_t{bp.quant_start} + g * kNvfp4GroupSize) * esize;
          if (esize == 2) {
            for (size_t j = 0; j < kNvfp4GroupSize / 2; ++j) {
              const uint8_t byte = codes[j];
              std::memcpy(out + 4 * j, lut[byte & 0xf], 2);
              std::memcpy(out + 4 * j + 2, lut[byte >> 4], 2);
            }
          } else {
            for (size_t j = 0; j < kNvfp4GroupSize / 2; ++j) {
              out[2 * j] = lut[codes[j] & 0xf][0];
              out[2 * j + 1] = lut[codes[j] >> 4][0];
            }
          }
          continue;
        }
        const float s2 = nvfp4::ScaleValue(scales[count / kNvfp4GroupSize + gi]);
        const uint8_t* codes2 = data + count / 2 + gi * (kNvfp4GroupSize / 2);
        for (int c = 0; c < 8; ++c) {
          v1[c] = (nvfp4::kE2M1[c] * s1) * p1;
          v1[c + 8] = -v1[c];
          v2[c] = (nvfp4::kE2M1[c] * s2) * p2;
          v2[c + 8] = -v2[c];
        }
        for (size_t j = 0; j < kNvfp4GroupSize; ++j) {
          const uint8_t n1 = (codes[j / 2] >> ((j & 1) * 4)) & 0xf;
          const uint8_t n2 = (codes2[j / 2] >> ((j & 1) * 4)) & 0xf;
          StoreFromFloat(b.dtype, v1[n1] + v2[n2], row, bp.quant_start + g * kNvfp4GroupSize + j);
        }
      }
    }
  }

  std::optional<int> fixed_scale_exp_;
};

}  // namespace

std::unique_ptr<Codec> MakeNvfp4Codec(BlockPlan plan, std::optional<int> fixed_scale_exp) {
  return std::make_unique<Nvfp4Codec>(std::move(plan), fixed_scale_exp);
}

}  // namespace kvtier::codec::internal
