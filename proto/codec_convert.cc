// Conversions between the kvtier/v1 layout and codec messages and the codec library's types.
#include "proto/codec_convert.h"

#include <cstring>

#include "absl/strings/str_format.h"
#include "common/quote.h"

namespace kvtier::proto {
namespace {

absl::StatusOr<codec::DType> DTypeFromProto(v1::DType dtype, absl::string_view buffer) {
  switch (dtype) {
    case v1::DTYPE_BF16:
      return codec::DType::kBf16;
    case v1::DTYPE_FP16:
      return codec::DType::kFp16;
    case v1::DTYPE_FP8_E4M3:
      return codec::DType::kFp8E4M3;
    case v1::DTYPE_FP32:
      return codec::DType::kFp32;
    case v1::DTYPE_BYTES:
      return codec::DType::kBytes;
    default:
      return absl::InvalidArgumentError(
          absl::StrFormat("buffer %s: dtype %d is not set or unknown", Quoted(buffer), dtype));
  }
}

v1::DType DTypeToProto(codec::DType dtype) {
  switch (dtype) {
    case codec::DType::kBf16:
      return v1::DTYPE_BF16;
    case codec::DType::kFp16:
      return v1::DTYPE_FP16;
    case codec::DType::kFp8E4M3:
      return v1::DTYPE_FP8_E4M3;
    case codec::DType::kFp32:
      return v1::DTYPE_FP32;
    case codec::DType::kBytes:
      return v1::DTYPE_BYTES;
  }
  return v1::DTYPE_UNSPECIFIED;
}

}  // namespace

absl::StatusOr<codec::PageLayout> LayoutFromProto(const v1::PageLayout& layout) {
  codec::PageLayout out;
  out.tokens_per_page = layout.tokens_per_page();
  for (const v1::PoolSpec& p : layout.pools()) out.pools.push_back({p.name(), p.slot_bytes()});
  for (const v1::BufferSpec& b : layout.buffers()) {
    codec::BufferSpec s;
    s.name = b.name();
    s.layer = b.layer();
    switch (b.role()) {
      case v1::BUFFER_ROLE_ATTENTION_K:
        s.role = codec::BufferRole::kAttentionK;
        break;
      case v1::BUFFER_ROLE_ATTENTION_V:
        s.role = codec::BufferRole::kAttentionV;
        break;
      case v1::BUFFER_ROLE_MLA_LATENT:
        s.role = codec::BufferRole::kMlaLatent;
        break;
      case v1::BUFFER_ROLE_LOSSLESS:
        s.role = codec::BufferRole::kLossless;
        break;
      default:
        return absl::InvalidArgumentError(absl::StrFormat(
            "buffer %s: role %d is not set or unknown", Quoted(b.name()), b.role()));
    }
    auto dtype = DTypeFromProto(b.dtype(), b.name());
    if (!dtype.ok()) return dtype.status();
    s.dtype = *dtype;
    s.heads = b.heads() == 0 ? 1 : b.heads();  // layout.proto: "Default when 0: 1"
    s.tokens = b.tokens();
    s.head_dim = b.head_dim();
    s.row_stride = b.row_stride();
    s.rope_start = b.rope_start();
    s.rope_len = b.rope_len();
    s.pool = b.pool();
    s.offset_bytes = b.offset_bytes();
    out.buffers.push_back(std::move(s));
  }
  if (absl::Status st = codec::ValidateLayout(out); !st.ok()) return st;
  const uint64_t fingerprint = codec::LayoutFingerprint(out);
  if (layout.fingerprint() != 0 && layout.fingerprint() != fingerprint) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "layout fingerprint %016x disagrees with the server's %016x for the same layout (client "
        "and server compute fingerprints differently: check their versions)",
        layout.fingerprint(), fingerprint));
  }
  return out;
}

void LayoutToProto(const codec::PageLayout& layout, v1::PageLayout* out) {
  out->Clear();
  out->set_tokens_per_page(layout.tokens_per_page);
  for (const codec::PoolSpec& p : layout.pools) {
    v1::PoolSpec* pool = out->add_pools();
    pool->set_name(p.name);
    pool->set_slot_bytes(p.slot_bytes);
  }
  for (const codec::BufferSpec& b : layout.buffers) {
    v1::BufferSpec* s = out->add_buffers();
    s->set_name(b.name);
    s->set_layer(b.layer);
    s->set_role(static_cast<v1::BufferRole>(static_cast<int>(b.role)));
    s->set_dtype(DTypeToProto(b.dtype));
    s->set_heads(b.heads);
    s->set_tokens(b.tokens);
    s->set_head_dim(b.head_dim);
    s->set_row_stride(b.row_stride);
    s->set_rope_start(b.rope_start);
    s->set_rope_len(b.rope_len);
    s->set_pool(b.pool);
    s->set_offset_bytes(b.offset_bytes);
  }
  out->set_fingerprint(codec::LayoutFingerprint(layout));
}

absl::StatusOr<codec::CodecSpec> CodecFromProto(const v1::CodecSpec& spec,
                                                const codec::CodecSpec& fallback) {
  codec::CodecSpec out;
  switch (spec.codec()) {
    case v1::CODEC_UNSPECIFIED:
      out = fallback;
      break;
    case v1::CODEC_RAW:
      out.codec = codec::CodecId::kRaw;
      break;
    case v1::CODEC_NVFP4:
      out.codec = codec::CodecId::kNvfp4;
      break;
    case v1::CODEC_NVFP4X2:
      out.codec = codec::CodecId::kNvfp4x2;
      break;
    default:
      return absl::InvalidArgumentError(absl::StrFormat("codec %d is unknown", spec.codec()));
  }
  switch (spec.rope()) {
    case v1::ROPE_MODE_UNSPECIFIED:
      break;
    case v1::ROPE_MODE_QUANTIZED:
      out.rope_lossless = false;
      break;
    case v1::ROPE_MODE_LOSSLESS:
      out.rope_lossless = true;
      break;
    default:
      return absl::InvalidArgumentError(absl::StrFormat("rope mode %d is unknown", spec.rope()));
  }
  if (spec.alignment_bytes() != 0) {
    const uint32_t a = spec.alignment_bytes();
    if (a < 16 || a > 65536 || (a & (a - 1)) != 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("codec alignment_bytes %d must be a power of two in [16, 65536]", a));
    }
    out.alignment_bytes = a;
  }
  return out;
}

void CodecToProto(const codec::CodecSpec& spec, v1::CodecSpec* out) {
  switch (spec.codec) {
    case codec::CodecId::kRaw:
      out->set_codec(v1::CODEC_RAW);
      break;
    case codec::CodecId::kNvfp4:
      out->set_codec(v1::CODEC_NVFP4);
      break;
    case codec::CodecId::kNvfp4x2:
      out->set_codec(v1::CODEC_NVFP4X2);
      break;
  }
  out->set_rope(spec.rope_lossless ? v1::ROPE_MODE_LOSSLESS : v1::ROPE_MODE_QUANTIZED);
  out->set_alignment_bytes(spec.alignment_bytes);
}

}  // namespace kvtier::proto
