// Cold-block header (de)serialization and section planning, format version 1.
// The header is read field by field from little-endian bytes (never by casting a struct), checks
// every range before use, and is protected by its own CRC32C so a flipped header bit is DataLoss
// before any field is trusted. The plan is a pure function of (layout, codec spec).
#include "codec/cold_block.h"

#include <cstring>
#include <limits>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "codec/crc32c.h"
#include "common/coding.h"
#include "common/status_macros.h"

namespace kvtier::codec {
namespace {

// Field offsets of the fixed header (FORMAT.md, "Header").
constexpr size_t kOffMagic = 0;
constexpr size_t kOffVersion = 4;
constexpr size_t kOffHeaderBytes = 6;
constexpr size_t kOffCodec = 8;
constexpr size_t kOffCodecFlags = 9;
constexpr size_t kOffReserved0 = 10;
constexpr size_t kOffBufferCount = 12;
constexpr size_t kOffFingerprint = 16;
constexpr size_t kOffTokensPerPage = 24;
constexpr size_t kOffAlignment = 28;
constexpr size_t kOffPayloadBytes = 32;
constexpr size_t kOffBlockBytes = 40;
constexpr size_t kOffPayloadCrc = kColdBlockPayloadCrcOffset;
constexpr size_t kOffReserved1 = 52;
constexpr size_t kOffHeaderCrc = kColdBlockHeaderCrcOffset;

absl::Status HeaderLoss(size_t offset, absl::string_view what) {
  return absl::DataLossError(absl::StrCat("cold block header at offset ", offset, ": ", what));
}

uint64_t RoundUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

}  // namespace

size_t ColdBlockHeaderBytes(size_t buffer_count) {
  return kColdBlockFixedHeaderBytes + kColdBlockBufferEntryBytes * buffer_count;
}

void WriteColdBlockHeader(const ColdBlockHeader& h, absl::Span<uint8_t> out) {
  const size_t n = ColdBlockHeaderBytes(h.buffers.size());
  uint8_t* p = out.data();
  std::memset(p, 0, n);
  EncodeFixed32(p + kOffMagic, kColdBlockMagic);
  EncodeFixed16(p + kOffVersion, h.version);
  EncodeFixed16(p + kOffHeaderBytes, static_cast<uint16_t>(n));
  p[kOffCodec] = static_cast<uint8_t>(h.codec);
  p[kOffCodecFlags] = h.codec_flags;
  EncodeFixed32(p + kOffBufferCount, static_cast<uint32_t>(h.buffers.size()));
  EncodeFixed64(p + kOffFingerprint, h.layout_fingerprint);
  EncodeFixed32(p + kOffTokensPerPage, h.tokens_per_page);
  EncodeFixed32(p + kOffAlignment, h.alignment_bytes);
  EncodeFixed64(p + kOffPayloadBytes, h.payload_bytes);
  EncodeFixed64(p + kOffBlockBytes, h.block_bytes);
  EncodeFixed32(p + kOffPayloadCrc, h.payload_crc32c);
  for (size_t i = 0; i < h.buffers.size(); ++i) {
    const ColdBufferEntry& e = h.buffers[i];
    uint8_t* q = p + kColdBlockFixedHeaderBytes + i * kColdBlockBufferEntryBytes;
    q[0] = static_cast<uint8_t>(e.role);
    q[1] = static_cast<uint8_t>(e.dtype);
    q[2] = static_cast<uint8_t>(e.encoding);
    EncodeFixed32(q + 4, e.layer);
    EncodeFixed32(q + 8, e.heads);
    EncodeFixed32(q + 12, e.tokens);
    EncodeFixed32(q + 16, e.head_dim);
    EncodeFixed32(q + 20, e.quant_start);
    EncodeFixed32(q + 24, e.quant_len);
    q[kColdBlockEntryScaleExpOffset] = static_cast<uint8_t>(e.scale_exp);
    q[29] = static_cast<uint8_t>(e.residual_scale_exp);
  }
  EncodeFixed32(p + kOffHeaderCrc, Crc32c(p, n));  // computed with the CRC field still zero
}

uint32_t StoredHeaderChecksum(absl::Span<const uint8_t> block) {
  return DecodeFixed32(block.data() + kOffHeaderCrc);
}

absl::StatusOr<uint32_t> VerifyColdBlock(absl::Span<const uint8_t> block) {
  KVTIER_ASSIGN_OR_RETURN(const ColdBlockHeader h, ParseColdBlockHeader(block));
  const uint32_t crc = Crc32c(block.data() + h.header_bytes, block.size() - h.header_bytes);
  if (crc != h.payload_crc32c) {
    return absl::DataLossError(absl::StrFormat(
        "cold block payload checksum mismatch (bytes %d..%d: stored %08x, computed %08x)",
        h.header_bytes, block.size(), h.payload_crc32c, crc));
  }
  return StoredHeaderChecksum(block);
}

absl::StatusOr<ColdBlockHeader> ParseColdBlockHeader(absl::Span<const uint8_t> block) {
  KVTIER_ASSIGN_OR_RETURN(ColdBlockHeader h, ParseColdBlockHeaderPrefix(block));
  if (block.size() != h.block_bytes) {
    return absl::DataLossError(
        absl::StrCat("cold block is ", block.size(), " bytes but its header says ", h.block_bytes,
                     block.size() < h.block_bytes ? " (truncated)" : " (oversized)"));
  }
  return h;
}

absl::StatusOr<ColdBlockHeader> ParseColdBlockHeaderPrefix(absl::Span<const uint8_t> block) {
  if (block.size() < kColdBlockFixedHeaderBytes) {
    return absl::DataLossError(absl::StrCat("cold block is ", block.size(),
                                            " bytes, shorter than the ", kColdBlockFixedHeaderBytes,
                                            "-byte header"));
  }
  const uint8_t* p = block.data();
  const uint32_t magic = DecodeFixed32(p + kOffMagic);
  if (magic != kColdBlockMagic) {
    return HeaderLoss(kOffMagic, absl::StrFormat("bad magic 0x%08x (expected 0x%08x, \"KVTB\")",
                                                 magic, kColdBlockMagic));
  }
  ColdBlockHeader h;
  h.version = DecodeFixed16(p + kOffVersion);
  if (h.version != kColdBlockVersion) {
    return HeaderLoss(kOffVersion, absl::StrCat("format version ", h.version,
                                                " is not supported (this build reads version ",
                                                kColdBlockVersion, ")"));
  }
  h.header_bytes = DecodeFixed16(p + kOffHeaderBytes);
  const uint32_t buffer_count = DecodeFixed32(p + kOffBufferCount);
  if (buffer_count == 0 || buffer_count > kMaxBuffers) {
    return HeaderLoss(kOffBufferCount, absl::StrCat("buffer count ", buffer_count,
                                                    " out of range [1, ", kMaxBuffers, "]"));
  }
  const size_t expected_header = ColdBlockHeaderBytes(buffer_count);
  if (h.header_bytes != expected_header) {
    return HeaderLoss(kOffHeaderBytes,
                      absl::StrCat("header_bytes ", h.header_bytes, " but ", buffer_count,
                                   " buffers need ", expected_header));
  }
  if (block.size() < expected_header) {
    return absl::DataLossError(absl::StrCat("cold block is ", block.size(),
                                            " bytes, shorter than its ", expected_header,
                                            "-byte header"));
  }
  const uint32_t stored_crc = DecodeFixed32(p + kOffHeaderCrc);
  static constexpr uint8_t kZero[4] = {0, 0, 0, 0};
  uint32_t crc = Crc32cExtend(0, p, kOffHeaderCrc);
  crc = Crc32cExtend(crc, kZero, 4);
  crc = Crc32cExtend(crc, p + kOffHeaderCrc + 4, expected_header - kOffHeaderCrc - 4);
  if (crc != stored_crc) {
    return HeaderLoss(kOffHeaderCrc, absl::StrFormat("header checksum mismatch (stored 0x%08x, "
                                                     "computed 0x%08x)",
                                                     stored_crc, crc));
  }
  const uint8_t codec = p[kOffCodec];
  if (codec > static_cast<uint8_t>(CodecId::kNvfp4x2)) {
    return HeaderLoss(kOffCodec, absl::StrCat("unknown codec id ", codec));
  }
  h.codec = static_cast<CodecId>(codec);
  h.codec_flags = p[kOffCodecFlags];
  if ((h.codec_flags & ~kCodecFlagRopeLossless) != 0) {
    return HeaderLoss(kOffCodecFlags,
                      absl::StrCat("unknown codec flags 0x", absl::Hex(h.codec_flags)));
  }
  if (DecodeFixed16(p + kOffReserved0) != 0 || DecodeFixed64(p + kOffReserved1) != 0) {
    return HeaderLoss(kOffReserved0, "reserved fields are not zero");
  }
  h.layout_fingerprint = DecodeFixed64(p + kOffFingerprint);
  h.tokens_per_page = DecodeFixed32(p + kOffTokensPerPage);
  h.alignment_bytes = DecodeFixed32(p + kOffAlignment);
  if (h.alignment_bytes < 16 || h.alignment_bytes > 65536 ||
      (h.alignment_bytes & (h.alignment_bytes - 1)) != 0) {
    return HeaderLoss(kOffAlignment, absl::StrCat("alignment ", h.alignment_bytes,
                                                  " is not a power of two in [16, 65536]"));
  }
  h.payload_bytes = DecodeFixed64(p + kOffPayloadBytes);
  h.block_bytes = DecodeFixed64(p + kOffBlockBytes);
  if (h.payload_bytes > h.block_bytes - std::min<uint64_t>(h.block_bytes, expected_header) ||
      h.block_bytes != RoundUp(expected_header + h.payload_bytes, h.alignment_bytes)) {
    return HeaderLoss(kOffPayloadBytes,
                      absl::StrCat("payload_bytes ", h.payload_bytes, " and block_bytes ",
                                   h.block_bytes, " are inconsistent with a ", expected_header,
                                   "-byte header and ", h.alignment_bytes, "-byte alignment"));
  }
  h.payload_crc32c = DecodeFixed32(p + kOffPayloadCrc);
  h.buffers.resize(buffer_count);
  for (uint32_t i = 0; i < buffer_count; ++i) {
    const size_t off = kColdBlockFixedHeaderBytes + size_t{i} * kColdBlockBufferEntryBytes;
    const uint8_t* q = p + off;
    ColdBufferEntry& e = h.buffers[i];
    if (q[0] < 1 || q[0] > 4 || q[1] < 1 || q[1] > 5 || q[2] > 2 || q[3] != 0 ||
        DecodeFixed16(q + 30) != 0) {
      return HeaderLoss(off, absl::StrCat("buffer ", i, ": invalid role ", q[0], ", dtype ", q[1],
                                          " or encoding ", q[2]));
    }
    e.role = static_cast<BufferRole>(q[0]);
    e.dtype = static_cast<DType>(q[1]);
    e.encoding = static_cast<BufferEncoding>(q[2]);
    e.layer = DecodeFixed32(q + 4);
    e.heads = DecodeFixed32(q + 8);
    e.tokens = DecodeFixed32(q + 12);
    e.head_dim = DecodeFixed32(q + 16);
    e.quant_start = DecodeFixed32(q + 20);
    e.quant_len = DecodeFixed32(q + 24);
    e.scale_exp = static_cast<int8_t>(q[kColdBlockEntryScaleExpOffset]);
    e.residual_scale_exp = static_cast<int8_t>(q[29]);
    if (uint64_t{e.quant_start} + e.quant_len > e.head_dim || e.quant_len % kNvfp4GroupSize != 0) {
      return HeaderLoss(
          off, absl::StrCat("buffer ", i, ": quantized run [", e.quant_start, ", +", e.quant_len,
                            ") does not fit head_dim ", e.head_dim, " in groups of 16"));
    }
  }
  return h;
}

std::string ColdBlockHeaderToText(const ColdBlockHeader& h) {
  std::string s = absl::StrFormat(
      "cold block v%d: codec %s%s, %d buffers, layout fingerprint %016x, %d tokens/page\n"
      "  header %d B, payload %d B, block %d B (alignment %d), payload crc32c %08x\n",
      h.version, CodecName(h.codec), (h.codec_flags & kCodecFlagRopeLossless) ? "+rope" : "",
      h.buffers.size(), h.layout_fingerprint, h.tokens_per_page, h.header_bytes, h.payload_bytes,
      h.block_bytes, h.alignment_bytes, h.payload_crc32c);
  for (size_t i = 0; i < h.buffers.size(); ++i) {
    const ColdBufferEntry& e = h.buffers[i];
    absl::StrAppendFormat(&s,
                          "  [%d] layer %d %s %s heads %d tokens %d head_dim %d quantized "
                          "[%d,+%d) encoding %d scale 2^%d residual 2^%d\n",
                          i, e.layer, BufferRoleName(e.role), DTypeName(e.dtype), e.heads, e.tokens,
                          e.head_dim, e.quant_start, e.quant_len, static_cast<int>(e.encoding),
                          e.scale_exp, e.residual_scale_exp);
  }
  return s;
}

std::string ColdBlockHeaderToJson(const ColdBlockHeader& h) {
  nlohmann::json j;
  j["version"] = h.version;
  j["codec"] = std::string(CodecName(h.codec));
  j["rope_lossless"] = (h.codec_flags & kCodecFlagRopeLossless) != 0;
  j["layout_fingerprint"] = absl::StrFormat("%016x", h.layout_fingerprint);
  j["tokens_per_page"] = h.tokens_per_page;
  j["alignment_bytes"] = h.alignment_bytes;
  j["header_bytes"] = h.header_bytes;
  j["payload_bytes"] = h.payload_bytes;
  j["block_bytes"] = h.block_bytes;
  j["payload_crc32c"] = absl::StrFormat("%08x", h.payload_crc32c);
  j["buffers"] = nlohmann::json::array();
  for (const ColdBufferEntry& e : h.buffers) {
    j["buffers"].push_back({{"layer", e.layer},
                            {"role", std::string(BufferRoleName(e.role))},
                            {"dtype", std::string(DTypeName(e.dtype))},
                            {"encoding", static_cast<int>(e.encoding)},
                            {"heads", e.heads},
                            {"tokens", e.tokens},
                            {"head_dim", e.head_dim},
                            {"quant_start", e.quant_start},
                            {"quant_len", e.quant_len},
                            {"scale_exp", e.scale_exp},
                            {"residual_scale_exp", e.residual_scale_exp}});
  }
  return j.dump(2);
}

absl::StatusOr<BlockPlan> MakeBlockPlan(const PageLayout& layout, const CodecSpec& spec) {
  KVTIER_RETURN_IF_ERROR(ValidateLayout(layout));
  const uint32_t a = spec.alignment_bytes;
  if (a < 16 || a > 65536 || (a & (a - 1)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("alignment ", a, " is not a power of two in [16, 65536]"));
  }
  if (spec.codec == CodecId::kRaw && spec.rope_lossless) {
    return absl::InvalidArgumentError("codec raw with lossless RoPE: raw is lossless already");
  }
  BlockPlan plan;
  plan.layout = layout;
  plan.spec = spec;
  plan.fingerprint = LayoutFingerprint(layout);
  plan.header_bytes = ColdBlockHeaderBytes(layout.buffers.size());
  plan.buffers.resize(layout.buffers.size());
  const uint32_t passes = spec.codec == CodecId::kRaw ? 0 : spec.codec == CodecId::kNvfp4 ? 1 : 2;

  // First pass: geometry of every buffer.
  for (size_t i = 0; i < layout.buffers.size(); ++i) {
    const BufferSpec& b = layout.buffers[i];
    BufferPlan& bp = plan.buffers[i];
    bp.rows = layout.Rows(b);
    if (passes == 0 || !b.Quantizable()) {
      bp.encoding = BufferEncoding::kLossless;
      bp.whole_bytes = layout.DataBytes(b);
      continue;
    }
    bp.encoding = passes == 1 ? BufferEncoding::kNvfp4 : BufferEncoding::kNvfp4x2;
    bp.passes = passes;
    bp.quant_start = 0;
    bp.quant_len = b.head_dim;
    if (spec.rope_lossless && b.rope_len > 0) {
      if (b.rope_start == 0) {
        bp.quant_start = b.rope_len;
        bp.quant_len = b.head_dim - b.rope_len;
      } else if (b.rope_start + b.rope_len == b.head_dim) {
        bp.quant_len = b.rope_start;
      } else {
        return absl::InvalidArgumentError(absl::StrCat(
            "buffer '", b.name, "': RoPE range [", b.rope_start, ", ", b.rope_start + b.rope_len,
            ") sits inside the row; lossless RoPE needs it at the start or the end of the row"));
      }
    }
    if (bp.quant_len % kNvfp4GroupSize != 0 || bp.quant_start % kNvfp4GroupSize != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("buffer '", b.name, "': the quantized run [", bp.quant_start, ", ",
                       bp.quant_start + bp.quant_len,
                       ") of each row must start and end on multiples of 16 "
                       "elements for ",
                       spec.ToString(), " (head_dim ", b.head_dim, ")"));
    }
    bp.row_lossless_bytes = uint64_t{b.head_dim - bp.quant_len} * DTypeBytes(b.dtype);
  }

  // Second pass: layer records.
  uint64_t offset = plan.header_bytes;
  size_t i = 0;
  while (i < layout.buffers.size()) {
    size_t end = i;
    while (end < layout.buffers.size() && layout.buffers[end].layer == layout.buffers[i].layer) {
      ++end;
    }
    LayerRecordPlan record;
    record.layer = layout.buffers[i].layer;
    record.offset = offset;
    uint64_t cursor = offset;
    for (size_t j = i; j < end; ++j) {  // 1. packed FP4 data
      BufferPlan& bp = plan.buffers[j];
      if (bp.encoding == BufferEncoding::kLossless) continue;
      bp.data_offset = cursor;
      cursor += bp.passes * bp.rows * bp.quant_len / 2;
    }
    for (size_t j = i; j < end; ++j) {  // 2. scales, then per-row lossless bytes
      BufferPlan& bp = plan.buffers[j];
      if (bp.encoding == BufferEncoding::kLossless) continue;
      bp.scale_offset = cursor;
      cursor += bp.passes * bp.rows * bp.quant_len / kNvfp4GroupSize;
      bp.row_lossless_offset = cursor;
      cursor += bp.rows * bp.row_lossless_bytes;
    }
    for (size_t j = i; j < end; ++j) {  // 3. lossless buffers, whole
      BufferPlan& bp = plan.buffers[j];
      if (bp.encoding != BufferEncoding::kLossless) continue;
      bp.whole_offset = cursor;
      cursor += bp.whole_bytes;
    }
    record.bytes = cursor - offset;
    record.padded_bytes = RoundUp(record.bytes, kColdBlockRecordAlignment);
    offset += record.padded_bytes;
    plan.records.push_back(record);
    i = end;
  }
  plan.payload_bytes = offset - plan.header_bytes;
  plan.block_bytes = RoundUp(offset, a);
  if (plan.block_bytes > std::numeric_limits<uint32_t>::max()) {
    return absl::InvalidArgumentError(absl::StrCat("a ", spec.ToString(), " block would be ",
                                                   plan.block_bytes,
                                                   " bytes; the maximum is 4 GiB - 1"));
  }
  return plan;
}

ColdBlockHeader PlanHeader(const BlockPlan& plan) {
  ColdBlockHeader h;
  h.header_bytes = static_cast<uint16_t>(plan.header_bytes);
  h.codec = plan.spec.codec;
  h.codec_flags = plan.spec.rope_lossless ? kCodecFlagRopeLossless : 0;
  h.layout_fingerprint = plan.fingerprint;
  h.tokens_per_page = plan.layout.tokens_per_page;
  h.alignment_bytes = plan.spec.alignment_bytes;
  h.payload_bytes = plan.payload_bytes;
  h.block_bytes = plan.block_bytes;
  h.buffers.resize(plan.buffers.size());
  for (size_t i = 0; i < plan.buffers.size(); ++i) {
    const BufferSpec& b = plan.layout.buffers[i];
    const BufferPlan& bp = plan.buffers[i];
    ColdBufferEntry& e = h.buffers[i];
    e.role = b.role;
    e.dtype = b.dtype;
    e.encoding = bp.encoding;
    e.layer = b.layer;
    e.heads = b.heads;
    e.tokens = b.Tokens(plan.layout.tokens_per_page);
    e.head_dim = b.head_dim;
    e.quant_start = bp.quant_start;
    e.quant_len = bp.quant_len;
  }
  return h;
}

}  // namespace kvtier::codec
