// Page layouts: how one page of an engine's KV cache lies in its pools (buffers per layer, heads,
// tokens, dtype, strides, the RoPE range of K rows). Builders for the common model families (GQA /
// MHA, MLA with an optional lossless indexer, hybrid attention + recurrent state), presets of
// well-known models, and the JSON form shared with `kvtier-codec layout`. PageLayout is an
// immutable value: cheap to copy, thread-safe.
#ifndef KVTIER_CLIENT_INCLUDE_KVTIER_LAYOUT_H_
#define KVTIER_CLIENT_INCLUDE_KVTIER_LAYOUT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "kvtier/types.h"

namespace kvtier {

namespace codec {
struct PageLayout;
}  // namespace codec

// Grouped-query (or multi-head) attention: per layer a K and a V buffer of kv_heads x tokens rows
// of head_dim elements, all in one pool "kv" (k.0, v.0, k.1, ... end to end).
struct GqaLayoutOptions {
  uint32_t num_layers = 0;
  uint32_t kv_heads = 0;
  uint32_t head_dim = 0;
  uint32_t tokens_per_page = 0;
  DType dtype = DType::kBf16;
  uint32_t rope_start = 0;  // RoPE range of K rows; rope_len 0 means the whole row
  uint32_t rope_len = 0;
};

// Multi-head latent attention: per layer one latent buffer (kv_lora_rank NoPE elements then
// rope_dim RoPE elements per token) and, with indexer_bytes_per_token > 0, a lossless indexer.
struct MlaLayoutOptions {
  uint32_t num_layers = 0;
  uint32_t kv_lora_rank = 512;
  uint32_t rope_dim = 64;
  uint32_t tokens_per_page = 0;
  DType dtype = DType::kBf16;
  uint32_t indexer_bytes_per_token = 0;
};

// Hybrid models: attention layers (K and V as in GQA) and state layers whose recurrent state
// (state_bytes per page) is kept losslessly.
struct HybridLayoutOptions {
  uint32_t num_layers = 0;
  std::vector<uint32_t> attention_layers;  // the other layers are state layers
  uint32_t kv_heads = 0;
  uint32_t head_dim = 0;
  uint32_t tokens_per_page = 0;
  DType dtype = DType::kBf16;
  uint32_t rope_start = 0;
  uint32_t rope_len = 0;
  uint32_t state_bytes = 0;
};

// One pool of a layout: the engine registers memory for `slots` pages of slot_bytes each.
struct PoolInfo {
  std::string name;
  uint64_t slot_bytes = 0;
};

// One buffer of a layout (see codec/FORMAT.md for the roles).
struct BufferInfo {
  std::string name;  // e.g. "k.0"
  std::string role;  // "k", "v", "mla_latent", "lossless"
  uint32_t layer = 0;
  DType dtype = DType::kBf16;
  uint32_t heads = 0;
  uint32_t tokens = 0;      // rows per head
  uint32_t head_dim = 0;    // elements per row
  uint32_t row_stride = 0;  // elements between row starts
  uint32_t pool = 0;        // index into pools()
  uint64_t offset_bytes = 0;
  uint64_t data_bytes = 0;  // heads x tokens x head_dim x element size
};

class PageLayout {
 public:
  // The builders. InvalidArgument names the field (zero heads, a RoPE range past the row, ...).
  static absl::StatusOr<PageLayout> Gqa(const GqaLayoutOptions& options);
  static absl::StatusOr<PageLayout> Mla(const MlaLayoutOptions& options);
  static absl::StatusOr<PageLayout> Hybrid(const HybridLayoutOptions& options);
  // A well-known model: "qwen3-8b", "qwen3-32b", "llama-3.1-8b", "llama-3.1-70b" (GQA, RoPE over
  // the whole K row) or "deepseek-v3" (MLA with a 132-byte indexer). NotFound lists the names.
  static absl::StatusOr<PageLayout> Preset(std::string_view name, uint32_t tokens_per_page,
                                           DType dtype = DType::kBf16);
  static std::vector<std::string> PresetNames();
  // The JSON form (`kvtier-codec layout`); InvalidArgument names the offending field.
  static absl::StatusOr<PageLayout> FromJson(std::string_view json);
  std::string ToJson() const;

  uint32_t tokens_per_page() const;
  std::vector<PoolInfo> pools() const;
  std::vector<BufferInfo> buffers() const;
  // Sum of the data bytes of all buffers (what Offload reads per page).
  uint64_t hot_page_bytes() const;
  // The layout's fingerprint, as the daemon derives namespaces from it.
  uint64_t fingerprint() const;
  // True for layouts with MLA latent buffers (TriAttention does not apply to them).
  bool has_mla() const;

  // The codec library's representation, for code inside kvtier. REQUIRES: not moved from.
  const codec::PageLayout& internal() const { return *impl_; }
  explicit PageLayout(std::shared_ptr<const codec::PageLayout> impl);

 private:
  std::shared_ptr<const codec::PageLayout> impl_;
};

}  // namespace kvtier

#endif  // KVTIER_CLIENT_INCLUDE_KVTIER_LAYOUT_H_
