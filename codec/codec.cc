// Codec factory, flat page views and the block checks shared by every codec.
// Decode trusts nothing in a block until the header checksum, the identity of layout and codec
// and the payload checksum all hold; only then are page bytes written.
#include "codec/codec.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "codec/codec_internal.h"
#include "codec/crc32c.h"
#include "codec/nvfp4_math.h"
#include "common/status_macros.h"

namespace kvtier::codec {

uint64_t FlatPageBytes(const PageLayout& layout) {
  uint64_t total = 0;
  for (const BufferSpec& b : layout.buffers) {
    total += layout.Rows(b) * b.RowStride() * DTypeBytes(b.dtype);
  }
  return total;
}

HotPageView FlatPageView(const PageLayout& layout, absl::Span<const uint8_t> page) {
  HotPageView view;
  uint64_t offset = 0;
  for (const BufferSpec& b : layout.buffers) {
    view.base.push_back(page.data() + offset);
    offset += layout.Rows(b) * b.RowStride() * DTypeBytes(b.dtype);
  }
  return view;
}

MutableHotPageView FlatPageView(const PageLayout& layout, absl::Span<uint8_t> page) {
  MutableHotPageView view;
  uint64_t offset = 0;
  for (const BufferSpec& b : layout.buffers) {
    view.base.push_back(page.data() + offset);
    offset += layout.Rows(b) * b.RowStride() * DTypeBytes(b.dtype);
  }
  return view;
}

absl::StatusOr<std::unique_ptr<Codec>> Codec::Create(const PageLayout& layout,
                                                     const CodecSpec& spec) {
  KVTIER_ASSIGN_OR_RETURN(BlockPlan plan, MakeBlockPlan(layout, spec));
  if (spec.codec == CodecId::kRaw) return internal::MakeRawCodec(std::move(plan));
  return internal::MakeNvfp4Codec(std::move(plan), std::nullopt);
}

absl::StatusOr<ColdBlockHeader> Codec::CheckBlock(absl::Span<const uint8_t> block) const {
  KVTIER_ASSIGN_OR_RETURN(ColdBlockHeader h, ParseColdBlockHeader(block));
  const ColdBlockHeader want = PlanHeader(plan_);
  if (h.codec != want.codec || h.codec_flags != want.codec_flags) {
    return absl::FailedPreconditionError(
        absl::StrCat("block was written by codec ", CodecName(h.codec),
                     (h.codec_flags & kCodecFlagRopeLossless) ? "+rope" : "", ", this codec is ",
                     plan_.spec.ToString()));
  }
  if (h.layout_fingerprint != want.layout_fingerprint || h.buffers.size() != want.buffers.size() ||
      h.tokens_per_page != want.tokens_per_page) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "block layout fingerprint %016x (%d buffers, %d tokens/page) does not match this "
        "codec's layout %016x (%d buffers, %d tokens/page)",
        h.layout_fingerprint, h.buffers.size(), h.tokens_per_page, want.layout_fingerprint,
        want.buffers.size(), want.tokens_per_page));
  }
  if (h.alignment_bytes != want.alignment_bytes || h.block_bytes != want.block_bytes ||
      h.payload_bytes != want.payload_bytes) {
    return absl::FailedPreconditionError(
        absl::StrCat("block geometry (", h.block_bytes, " bytes, alignment ", h.alignment_bytes,
                     ") does not match this codec's (", want.block_bytes, " bytes, alignment ",
                     want.alignment_bytes, ")"));
  }
  for (size_t i = 0; i < h.buffers.size(); ++i) {
    const ColdBufferEntry& a = h.buffers[i];
    const ColdBufferEntry& b = want.buffers[i];
    if (a.role != b.role || a.dtype != b.dtype || a.encoding != b.encoding || a.layer != b.layer ||
        a.heads != b.heads || a.tokens != b.tokens || a.head_dim != b.head_dim ||
        a.quant_start != b.quant_start || a.quant_len != b.quant_len) {
      return absl::FailedPreconditionError(absl::StrCat("block buffer ", i,
                                                        " geometry does not match layout buffer '",
                                                        plan_.layout.buffers[i].name, "'"));
    }
    if (a.scale_exp < nvfp4::kMinScaleExp || a.scale_exp > nvfp4::kMaxScaleExp ||
        a.residual_scale_exp < nvfp4::kMinScaleExp || a.residual_scale_exp > nvfp4::kMaxScaleExp) {
      return absl::DataLossError(absl::StrCat("block buffer ", i, " scale exponent ",
                                              int{a.scale_exp}, "/", int{a.residual_scale_exp},
                                              " out of range"));
    }
  }
  const uint32_t crc = Crc32c(block.data() + h.header_bytes, block.size() - h.header_bytes);
  if (crc != h.payload_crc32c) {
    return absl::DataLossError(absl::StrFormat(
        "cold block payload checksum mismatch (bytes %d..%d: stored %08x, computed %08x)",
        h.header_bytes, block.size(), h.payload_crc32c, crc));
  }
  return h;
}

namespace internal {

void GatherRows(const PageLayout& layout, const BufferSpec& b, const uint8_t* base, uint8_t* out) {
  const size_t row_bytes = size_t{b.head_dim} * DTypeBytes(b.dtype);
  const size_t stride = size_t{b.RowStride()} * DTypeBytes(b.dtype);
  const uint64_t rows = layout.Rows(b);
  if (row_bytes == stride) {
    std::memcpy(out, base, rows * row_bytes);
    return;
  }
  for (uint64_t r = 0; r < rows; ++r)
    std::memcpy(out + r * row_bytes, base + r * stride, row_bytes);
}

void ScatterRows(const PageLayout& layout, const BufferSpec& b, const uint8_t* in, uint8_t* base) {
  const size_t row_bytes = size_t{b.head_dim} * DTypeBytes(b.dtype);
  const size_t stride = size_t{b.RowStride()} * DTypeBytes(b.dtype);
  const uint64_t rows = layout.Rows(b);
  if (row_bytes == stride) {
    std::memcpy(base, in, rows * row_bytes);
    return;
  }
  for (uint64_t r = 0; r < rows; ++r) std::memcpy(base + r * stride, in + r * row_bytes, row_bytes);
}

void SealBlock(const ColdBlockHeader& header, absl::Span<uint8_t> block) {
  ColdBlockHeader h = header;
  h.payload_crc32c = Crc32c(block.data() + h.header_bytes, block.size() - h.header_bytes);
  WriteColdBlockHeader(h, block);
}

void ZeroPadding(const BlockPlan& plan, absl::Span<uint8_t> block) {
  for (const LayerRecordPlan& r : plan.records) {
    std::memset(block.data() + r.offset + r.bytes, 0, r.padded_bytes - r.bytes);
  }
  const uint64_t end = plan.header_bytes + plan.payload_bytes;
  std::memset(block.data() + end, 0, block.size() - end);
}

absl::Status CheckViewSize(size_t views, size_t buffers) {
  if (views != buffers) {
    return absl::InvalidArgumentError(
        absl::StrCat("page view has ", views, " buffers, the layout has ", buffers));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Codec>> CreateFixedScaleCodecForTest(const PageLayout& layout,
                                                                    const CodecSpec& spec,
                                                                    int fixed_scale_exp) {
  if (spec.codec == CodecId::kRaw) {
    return absl::InvalidArgumentError("a fixed scale exponent needs an nvfp4 codec");
  }
  KVTIER_ASSIGN_OR_RETURN(BlockPlan plan, MakeBlockPlan(layout, spec));
  return MakeNvfp4Codec(std::move(plan), fixed_scale_exp);
}

}  // namespace internal
}  // namespace kvtier::codec
