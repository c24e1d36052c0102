// PageLayout: how one hot KV page is spread over an engine's buffers (K and V of each layer, an
// MLA latent, lossless side buffers), with validation, a stable fingerprint and a JSON form.
// Layout types are plain values; functions here are pure and thread-safe.
#ifndef KVTIER_CODEC_PAGE_LAYOUT_H_
#define KVTIER_CODEC_PAGE_LAYOUT_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "codec/dtype.h"

namespace kvtier::codec {

// Numeric codes are part of the cold-block format (FORMAT.md).
enum class BufferRole : uint8_t {
  kAttentionK = 1,  // keys of one attention layer; may carry a RoPE range
  kAttentionV = 2,  // values of one attention layer
  kMlaLatent = 3,   // MLA compressed latent (NoPE part, then RoPE suffix)
  kLossless = 4,    // copied byte for byte by every codec (indexer keys, recurrent state...)
};
absl::string_view BufferRoleName(BufferRole role);  // "k", "v", "mla_latent", "lossless"
absl::StatusOr<BufferRole> ParseBufferRole(absl::string_view name);

// One region of an engine's memory that holds pages in fixed-size slots.
struct PoolSpec {
  std::string name;
  uint64_t slot_bytes = 0;  // bytes between the starts of consecutive slots (pages)
};

// One buffer of a page: `heads * tokens` rows of `head_dim` elements, consecutive rows
// `row_stride` elements apart, starting `offset_bytes` into a slot of pool `pool`.
struct BufferSpec {
  std::string name;  // unique within the layout, e.g. "k.0"
  uint32_t layer = 0;
  BufferRole role = BufferRole::kAttentionK;
  DType dtype = DType::kBf16;
  uint32_t heads = 1;
  uint32_t tokens = 0;      // rows per head; 0 means the layout's tokens_per_page
  uint32_t head_dim = 0;    // elements per row (bytes per row for kBytes)
  uint32_t row_stride = 0;  // elements between row starts; 0 means head_dim
  uint32_t rope_start = 0;  // first element of the row that carries RoPE (K and MLA latent only)
  uint32_t rope_len = 0;    // elements carrying RoPE; 0 when the buffer has none
  uint32_t pool = 0;        // index into PageLayout::pools
  uint64_t offset_bytes = 0;

  uint32_t Tokens(uint32_t tokens_per_page) const { return tokens != 0 ? tokens : tokens_per_page; }
  uint32_t RowStride() const { return row_stride != 0 ? row_stride : head_dim; }
  bool Quantizable() const { return role != BufferRole::kLossless; }
};

struct PageLayout {
  uint32_t tokens_per_page = 0;
  std::vector<PoolSpec> pools;
  std::vector<BufferSpec> buffers;  // ordered by layer (records follow this order)

  uint64_t Rows(const BufferSpec& b) const { return uint64_t{b.heads} * b.Tokens(tokens_per_page); }
  // Bytes of the buffer's data (rows * head_dim elements; row-stride gaps excluded).
  uint64_t DataBytes(const BufferSpec& b) const {
    return Rows(b) * b.head_dim * DTypeBytes(b.dtype);
  }
  // Bytes the buffer spans in its slot (the last row ends at head_dim, not at row_stride).
  uint64_t SpanBytes(const BufferSpec& b) const;
  // Sum of DataBytes over all buffers: the "hot bytes" of a page.
  uint64_t HotBytes() const;
};

// Limits enforced by ValidateLayout (FORMAT.md lists them too).
inline constexpr uint32_t kMaxBuffers = 2000;  // keeps the block header under 64 KiB
inline constexpr uint32_t kMaxPools = 4096;
inline constexpr size_t kMaxNameBytes = 64;  // pool and buffer names
inline constexpr uint32_t kMaxTokensPerPage = 65536;
inline constexpr uint32_t kMaxHeadDim = 65536;
inline constexpr uint64_t kMaxBufferBytes = uint64_t{1} << 32;

// Checks every rule of a layout. InvalidArgument names the buffer and field, e.g.
// "buffer 'k.3': RoPE range [96, 160) exceeds head_dim 128"; names in messages are quoted and cut
// (common/quote.h). The rules include: pool names of 1 to kMaxNameBytes bytes of [A-Za-z0-9_.-],
// buffer names of 1 to kMaxNameBytes bytes, both unique; and no byte of a slot belonging to two
// buffers of its pool: buffers whose spans meet must interleave with equal row strides and rows
// that do not touch (the message names both buffers and the bytes they share). Codec-specific
// rules (quantized runs in multiples of 16) are checked by MakeBlockPlan.
absl::Status ValidateLayout(const PageLayout& layout);

// A stable 64-bit identity of what a page's bytes mean: tokens_per_page and, per buffer in order,
// layer, role, dtype, heads, tokens, head_dim, rope range. Names, strides, pools and offsets are
// excluded (they say where the engine keeps a page, not what it holds). XXH3-64 of the canonical
// encoding in FORMAT.md. REQUIRES: ValidateLayout(layout).ok().
uint64_t LayoutFingerprint(const PageLayout& layout);

// JSON form (documented in FORMAT.md, "Layout JSON"). ParseLayoutJson validates the result.
std::string LayoutToJson(const PageLayout& layout, int indent = 2);
absl::StatusOr<PageLayout> ParseLayoutJson(absl::string_view json);

// ---- Builders for common model families. Each returns a validated layout whose buffers are laid
// end to end in one pool named "kv" (offsets and slot_bytes filled in).

struct GqaOptions {
  uint32_t num_layers = 0;
  uint32_t kv_heads = 0;
  uint32_t head_dim = 0;
  uint32_t tokens_per_page = 0;
  DType dtype = DType::kBf16;
  uint32_t rope_start = 0;  // RoPE range of K rows; rope_len 0 means the whole row
  uint32_t rope_len = 0;
};
// GQA or MHA: buffers "k.<l>" then "v.<l>" for every layer l.
absl::StatusOr<PageLayout> BuildGqaLayout(const GqaOptions& options);

struct MlaOptions {
  uint32_t num_layers = 0;
  uint32_t kv_lora_rank = 512;  // NoPE part of the latent row
  uint32_t rope_dim = 64;       // RoPE suffix of the latent row
  uint32_t tokens_per_page = 0;
  DType dtype = DType::kBf16;
  uint32_t indexer_bytes_per_token = 0;  // >0 adds a lossless "index.<l>" buffer per layer
};
// DeepSeek-style MLA: "latent.<l>" (one head, kv_lora_rank + rope_dim wide, RoPE at the end) and
// optionally "index.<l>".
absl::StatusOr<PageLayout> BuildMlaLayout(const MlaOptions& options);

struct HybridOptions {
  uint32_t num_layers = 0;
  std::vector<uint32_t> attention_layers;  // the rest are state layers
  uint32_t kv_heads = 0;
  uint32_t head_dim = 0;
  uint32_t tokens_per_page = 0;
  DType dtype = DType::kBf16;
  uint32_t rope_start = 0;
  uint32_t rope_len = 0;
  uint32_t state_bytes = 0;  // bytes of recurrent state per state layer per page
};
// Hybrid (attention + recurrent/SSM): "k.<l>", "v.<l>" for attention layers and a lossless
// "state.<l>" of state_bytes for the others.
absl::StatusOr<PageLayout> BuildHybridLayout(const HybridOptions& options);

}  // namespace kvtier::codec

#endif  // KVTIER_CODEC_PAGE_LAYOUT_H_
