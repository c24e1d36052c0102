// The `nvfp4` and `nvfp4x2` codecs (CPU reference). Per buffer and page: a power-of-two global
// scale 2^k chosen from the data, one E4M3 scale per 16 values chosen so that the group's largest
// value decodes as close as possible to itself, and E2M1 codes chosen in the decoded value
// domain (see nvfp4_math.h and FORMAT.md). Quantizing where the decoder rounds makes a decoded
// page a fixed point of encode+decode: round trips do not drift. nvfp4x2 adds a second pass over
// the binary32 residual; its sum is rounded once on decode.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "codec/codec_internal.h"
#include "codec/nvfp4_math.h"
#include "common/status_macros.h"

namespace kvtier::codec::internal {
namespace {

using nvfp4::Domain;
using nvfp4::GroupThresholds;

template <DType D>
inline float Load(const uint8_t* row, size_t i) {
  if constexpr (D == DType::kBf16) {
    return Bf16ToFloat(static_cast<uint16_t>(row[2 * i] | (row[2 * i + 1] << 8)));
  } else if constexpr (D == DType::kFp16) {
    return Fp16ToFloat(static_cast<uint16_t>(row[2 * i] | (row[2 * i + 1] << 8)));
  } else {
    return Fp8E4M3ToFloat(row[i]);
  }
}

// Quantizes `values` (rows x quant_len, row-major) in one pass: writes packed codes and scales,
// and, when `decoded` is not null, the binary32 value each element decodes to in this pass.
void QuantizePass(Domain domain, const float* values, uint64_t count, int k, uint8_t* data,
                  uint8_t* scales, float* decoded, BufferEncodeStats* stats) {
  const float p = std::ldexp(1.0f, -k);
  const float q = std::ldexp(1.0f, k);
  GroupThresholds t;
  for (uint64_t g = 0; g < count / kNvfp4GroupSize; ++g) {
    const float* x = values + g * kNvfp4GroupSize;
    float a = 0.0f;
    for (size_t j = 0; j < kNvfp4GroupSize; ++j) {
      const float m = std::fabs(x[j]);
      if (m <= FLT_MAX) a = std::max(a, m);  // skips NaN and infinities
    }
    const uint8_t s = nvfp4::ChooseScaleCode(domain, a, q, p);
    scales[g] = s;
    if (s < 8 && a > 0.0f) ++stats->subnormal_scale_groups;
    nvfp4::MakeThresholds(domain, s, p, &t);
    uint8_t* out = data + g * (kNvfp4GroupSize / 2);
    for (size_t j = 0; j < kNvfp4GroupSize; j += 2) {
      const uint8_t c0 = nvfp4::EncodeValue(t, x[j]);
      const uint8_t c1 = nvfp4::EncodeValue(t, x[j + 1]);
      out[j / 2] = static_cast<uint8_t>(c0 | (c1 << 4));
      if (decoded != nullptr) {
        decoded[g * kNvfp4GroupSize + j] = (c0 & 8) ? -t.decoded[c0 & 7] : t.decoded[c0 & 7];
        decoded[g * kNvfp4GroupSize + j + 1] = (c1 & 8) ? -t.decoded[c1 & 7] : t.decoded[c1 & 7];
      }
    }
  }
  stats->groups += count / kNvfp4GroupSize;
}

float MaxFiniteMagnitude(const float* v, uint64_t n, uint64_t* nonfinite) {
  float a = 0.0f;
  for (uint64_t i = 0; i < n; ++i) {
    const float m = std::fabs(v[i]);
    if (m <= FLT_MAX) {
      a = std::max(a, m);
    } else if (nonfinite != nullptr) {
      ++*nonfinite;
    }
  }
  return a;
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
    std::memset(block.data() + plan_.header_bytes, 0, block.size() - plan_.header_bytes);
    std::vector<BufferEncodeStats> local(plan_.buffers.size());
    std::vector<float> values, residual;
    for (size_t i = 0; i < plan_.buffers.size(); ++i) {
      const BufferSpec& b = plan_.layout.buffers[i];
      const BufferPlan& bp = plan_.buffers[i];
      if (bp.encoding == BufferEncoding::kLossless) {
        GatherRows(plan_.layout, b, page.base[i], block.data() + bp.whole_offset);
        continue;
      }
      EncodeBuffer(b, bp, page.base[i], block.data(), &header.buffers[i], &local[i], values,
                   residual);
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
      for (uint32_t e = 0; e < bp.quant_len; ++e) o[e] = Load<D>(row, bp.quant_start + e);
    }
    (void)layout;
  }

  void EncodeBuffer(const BufferSpec& b, const BufferPlan& bp, const uint8_t* base,
                    uint8_t* block, ColdBufferEntry* entry, BufferEncodeStats* stats,
                    std::vector<float>& values, std::vector<float>& residual) const {
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
    const float amax = MaxFiniteMagnitude(values.data(), count, &stats->nonfinite_values);
    const int k = fixed_scale_exp_.value_or(nvfp4::ChooseScaleExp(amax));
    entry->scale_exp = static_cast<int8_t>(k);
    stats->scale_exp = k;
    uint8_t* data = block + bp.data_offset;
    uint8_t* scales = block + bp.scale_offset;
    if (bp.passes == 1) {
      QuantizePass(nvfp4::DomainOf(b.dtype), values.data(), count, k, data, scales, nullptr,
                   stats);
      return;
    }
    residual.resize(count);
    QuantizePass(Domain::kBinary32, values.data(), count, k, data, scales, residual.data(), stats);
    for (uint64_t i = 0; i < count; ++i) {  // residual of finite values; 0 for NaN and infinities
      const float v = values[i];
      residual[i] = std::fabs(v) <= FLT_MAX ? v - residual[i] : 0.0f;
    }
    const int k2 = fixed_scale_exp_.value_or(
        nvfp4::ChooseScaleExp(MaxFiniteMagnitude(residual.data(), count, nullptr)));
    entry->residual_scale_exp = static_cast<int8_t>(k2);
    stats->residual_scale_exp = k2;
    BufferEncodeStats second;
    QuantizePass(Domain::kBinary32, residual.data(), count, k2, data + count / 2,
                 scales + count / kNvfp4GroupSize, nullptr, &second);
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
          for (int c = 0; c < 8; ++c) {
            v1[c] = nvfp4::Round(out_domain, (nvfp4::kE2M1[c] * s1) * p1);
            v1[c + 8] = -v1[c];
          }
          for (size_t j = 0; j < kNvfp4GroupSize; ++j) {
            const uint8_t nib = (codes[j / 2] >> ((j & 1) * 4)) & 0xf;
            StoreFromFloat(b.dtype, v1[nib], row, bp.quant_start + g * kNvfp4GroupSize + j);
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
