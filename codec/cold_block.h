// The cold-block format, version 1 (codec/FORMAT.md is the specification): the fixed header, the
// per-buffer table, and BlockPlan, the byte offsets of every section for a (layout, codec) pair.
// Header functions are pure and thread-safe; they never read past the span they are given.
#ifndef KVTIER_CODEC_COLD_BLOCK_H_
#define KVTIER_CODEC_COLD_BLOCK_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "codec/codec_spec.h"
#include "codec/page_layout.h"

namespace kvtier::codec {

inline constexpr uint32_t kColdBlockMagic = 0x4254564Bu;  // bytes "KVTB"
inline constexpr uint16_t kColdBlockVersion = 1;
inline constexpr size_t kColdBlockFixedHeaderBytes = 64;
inline constexpr size_t kColdBlockBufferEntryBytes = 32;
inline constexpr size_t kColdBlockEntryScaleExpOffset = 28;  // int8 k within a buffer entry
inline constexpr size_t kColdBlockPayloadCrcOffset = 48;     // CRC32C of [header_bytes, end)
inline constexpr size_t kColdBlockHeaderCrcOffset = 60;      // CRC32C of the header, field as 0
inline constexpr size_t kColdBlockRecordAlignment = 16;
inline constexpr size_t kNvfp4GroupSize = 16;

// How a buffer's bytes are stored in the block.
enum class BufferEncoding : uint8_t {
  kLossless = 0,  // rows of head_dim elements, byte for byte
  kNvfp4 = 1,     // one FP4 pass over each row's quantized run, the rest of the row lossless
  kNvfp4x2 = 2,   // two FP4 passes (value, then residual)
};

// One entry of the buffer table (32 bytes on media).
struct ColdBufferEntry {
  BufferRole role = BufferRole::kLossless;
  DType dtype = DType::kBytes;
  BufferEncoding encoding = BufferEncoding::kLossless;
  uint32_t layer = 0;
  uint32_t heads = 0;
  uint32_t tokens = 0;
  uint32_t head_dim = 0;
  uint32_t quant_start = 0;  // first quantized element of a row
  uint32_t quant_len = 0;    // quantized elements per row (multiple of 16; 0 when lossless)
  int8_t scale_exp = 0;      // k: values are multiplied by 2^k before block scaling
  int8_t residual_scale_exp = 0;
};

struct ColdBlockHeader {
  uint16_t version = kColdBlockVersion;
  uint16_t header_bytes = 0;
  CodecId codec = CodecId::kRaw;
  uint8_t codec_flags = 0;  // bit 0: lossless RoPE
  uint64_t layout_fingerprint = 0;
  uint32_t tokens_per_page = 0;
  uint32_t alignment_bytes = 0;
  uint64_t payload_bytes = 0;  // bytes of layer records after the header, before block padding
  uint64_t block_bytes = 0;
  uint32_t payload_crc32c = 0;  // CRC32C of bytes [header_bytes, block_bytes)
  std::vector<ColdBufferEntry> buffers;
};

inline constexpr uint8_t kCodecFlagRopeLossless = 1;

// Size of the header (fixed part plus buffer table) for `buffer_count` buffers.
size_t ColdBlockHeaderBytes(size_t buffer_count);

// Parses and checks a block's header: magic, version, header checksum, field ranges and the
// consistency of sizes with `block.size()`. DataLoss names the field and offset of the first
// problem ("block header at offset 0: bad magic 0x12345678"). Reads only `block`.
absl::StatusOr<ColdBlockHeader> ParseColdBlockHeader(absl::Span<const uint8_t> block);

// The same checks for a header at the start of `data`, which may hold less or more than one block
// (a prefix of a file of blocks, say): everything except that data.size() equals block_bytes.
// REQUIRES nothing; reads only `data`.
absl::StatusOr<ColdBlockHeader> ParseColdBlockHeaderPrefix(absl::Span<const uint8_t> data);

// Checks a whole block read back from a tier: everything ParseColdBlockHeader checks, then the
// payload checksum. Returns the header checksum (bytes 60..63), which identifies the block's
// contents: the store keeps it in its index and compares it on every read. DataLoss on any
// mismatch. Reads only `block`.
absl::StatusOr<uint32_t> VerifyColdBlock(absl::Span<const uint8_t> block);

// The header checksum stored in bytes 60..63 of a block, unchecked.
// REQUIRES: block.size() >= kColdBlockFixedHeaderBytes.
uint32_t StoredHeaderChecksum(absl::Span<const uint8_t> block);

// Serializes `header` (computing the header checksum) into the first header_bytes of `out`.
// REQUIRES: out.size() >= ColdBlockHeaderBytes(header.buffers.size()).
void WriteColdBlockHeader(const ColdBlockHeader& header, absl::Span<uint8_t> out);

// Human-readable and JSON forms of a header, for `kvtier-codec inspect`.
std::string ColdBlockHeaderToText(const ColdBlockHeader& header);
std::string ColdBlockHeaderToJson(const ColdBlockHeader& header);

// Where each buffer's sections sit in a block. Offsets are from the start of the block.
struct BufferPlan {
  BufferEncoding encoding = BufferEncoding::kLossless;
  uint64_t rows = 0;
  uint32_t quant_start = 0;
  uint32_t quant_len = 0;
  uint32_t passes = 0;               // 0 lossless, 1 nvfp4, 2 nvfp4x2
  uint64_t data_offset = 0;          // packed E2M1, `passes` planes of rows*quant_len/2 bytes
  uint64_t scale_offset = 0;         // E4M3 scales, `passes` planes of rows*quant_len/16 bytes
  uint64_t row_lossless_offset = 0;  // per row [prefix][suffix] bytes of a quantized buffer
  uint64_t row_lossless_bytes = 0;   // per row
  uint64_t whole_offset = 0;         // a lossless buffer's data
  uint64_t whole_bytes = 0;
};

struct LayerRecordPlan {
  uint32_t layer = 0;
  uint64_t offset = 0;        // start of the record
  uint64_t bytes = 0;         // without padding
  uint64_t padded_bytes = 0;  // multiple of 16
};

struct BlockPlan {
  PageLayout layout;
  CodecSpec spec;
  uint64_t fingerprint = 0;
  size_t header_bytes = 0;
  uint64_t payload_bytes = 0;
  uint64_t block_bytes = 0;
  std::vector<BufferPlan> buffers;
  std::vector<LayerRecordPlan> records;
};

// Computes the plan. InvalidArgument for an invalid layout, a codec option the layout cannot
// take (a RoPE range inside a row with lossless RoPE, a quantized run not a multiple of 16, a
// block over 4 GiB), or a bad alignment.
absl::StatusOr<BlockPlan> MakeBlockPlan(const PageLayout& layout, const CodecSpec& spec);

// The header a block of `plan` carries (scale exponents zero; the encoder fills them in).
ColdBlockHeader PlanHeader(const BlockPlan& plan);

}  // namespace kvtier::codec

#endif  // KVTIER_CODEC_COLD_BLOCK_H_
