// PageLayout (kvtier/layout.h): a shared, immutable codec::PageLayout behind the public value
// type; the builders and the JSON form are the codec library's, the presets are listed here.
#include "kvtier/layout.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "codec/page_layout.h"

namespace kvtier {
namespace {

codec::DType ToCodec(DType dtype) { return static_cast<codec::DType>(dtype); }

absl::StatusOr<PageLayout> Wrap(absl::StatusOr<codec::PageLayout> layout) {
  if (!layout.ok()) return layout.status();
  return PageLayout(std::make_shared<const codec::PageLayout>(*std::move(layout)));
}

struct GqaPreset {
  const char* name;
  uint32_t layers;
  uint32_t kv_heads;
  uint32_t head_dim;
};

// From the models' config.json: num_hidden_layers, num_key_value_heads, head_dim.
constexpr GqaPreset kGqaPresets[] = {
    {"qwen3-8b", 36, 8, 128},
    {"qwen3-32b", 64, 8, 128},
    {"llama-3.1-8b", 32, 8, 128},
    {"llama-3.1-70b", 80, 8, 128},
};

}  // namespace

PageLayout::PageLayout(std::shared_ptr<const codec::PageLayout> impl) : impl_(std::move(impl)) {}

absl::StatusOr<PageLayout> PageLayout::Gqa(const GqaLayoutOptions& o) {
  codec::GqaOptions c;
  c.num_layers = o.num_layers;
  c.kv_heads = o.kv_heads;
  c.head_dim = o.head_dim;
  c.tokens_per_page = o.tokens_per_page;
  c.dtype = ToCodec(o.dtype);
  c.rope_start = o.rope_start;
  c.rope_len = o.rope_len;
  return Wrap(codec::BuildGqaLayout(c));
}

absl::StatusOr<PageLayout> PageLayout::Mla(const MlaLayoutOptions& o) {
  codec::MlaOptions c;
  c.num_layers = o.num_layers;
  c.kv_lora_rank = o.kv_lora_rank;
  c.rope_dim = o.rope_dim;
  c.tokens_per_page = o.tokens_per_page;
  c.dtype = ToCodec(o.dtype);
  c.indexer_bytes_per_token = o.indexer_bytes_per_token;
  return Wrap(codec::BuildMlaLayout(c));
}

absl::StatusOr<PageLayout> PageLayout::Hybrid(const HybridLayoutOptions& o) {
  codec::HybridOptions c;
  c.num_layers = o.num_layers;
  c.attention_layers = o.attention_layers;
  c.kv_heads = o.kv_heads;
  c.head_dim = o.head_dim;
  c.tokens_per_page = o.tokens_per_page;
  c.dtype = ToCodec(o.dtype);
  c.rope_start = o.rope_start;
  c.rope_len = o.rope_len;
  c.state_bytes = o.state_bytes;
  return Wrap(codec::BuildHybridLayout(c));
}

std::vector<std::string> PageLayout::PresetNames() {
  std::vector<std::string> names;
  for (const GqaPreset& p : kGqaPresets) names.push_back(p.name);
  names.push_back("deepseek-v3");
  names.push_back("deepseek-v3.2");
  return names;
}

absl::StatusOr<PageLayout> PageLayout::Preset(std::string_view name, uint32_t tokens_per_page,
                                              DType dtype) {
  for (const GqaPreset& p : kGqaPresets) {
    if (name == p.name) {
      return Gqa({p.layers, p.kv_heads, p.head_dim, tokens_per_page, dtype, 0, 0});
    }
  }
  if (name == "deepseek-v3" || name == "deepseek-v3.2") {
    MlaLayoutOptions o;
    o.num_layers = 61;
    o.tokens_per_page = tokens_per_page;
    o.dtype = dtype;
    // V3.2's sparse-attention indexer: 128 FP8 key elements and an FP32 scale per token.
    o.indexer_bytes_per_token = name == "deepseek-v3.2" ? 132 : 0;
    return Mla(o);
  }
  return absl::NotFoundError(absl::StrCat("no layout preset '", std::string(name),
                                          "'; presets: ", absl::StrJoin(PresetNames(), ", ")));
}

absl::StatusOr<PageLayout> PageLayout::FromJson(std::string_view json) {
  return Wrap(codec::ParseLayoutJson(absl::string_view(json.data(), json.size())));
}

std::string PageLayout::ToJson() const { return codec::LayoutToJson(*impl_); }

uint32_t PageLayout::tokens_per_page() const { return impl_->tokens_per_page; }

std::vector<PoolInfo> PageLayout::pools() const {
  std::vector<PoolInfo> pools;
  for (const codec::PoolSpec& p : impl_->pools) pools.push_back({p.name, p.slot_bytes});
  return pools;
}

std::vector<BufferInfo> PageLayout::buffers() const {
  std::vector<BufferInfo> buffers;
  for (const codec::BufferSpec& b : impl_->buffers) {
    BufferInfo i;
    i.name = b.name;
    i.role = std::string(codec::BufferRoleName(b.role));
    i.layer = b.layer;
    i.dtype = static_cast<DType>(b.dtype);
    i.heads = b.heads;
    i.tokens = b.Tokens(impl_->tokens_per_page);
    i.head_dim = b.head_dim;
    i.row_stride = b.RowStride();
    i.pool = b.pool;
    i.offset_bytes = b.offset_bytes;
    i.data_bytes = impl_->DataBytes(b);
    buffers.push_back(std::move(i));
  }
  return buffers;
}

uint64_t PageLayout::hot_page_bytes() const { return impl_->HotBytes(); }

uint64_t PageLayout::fingerprint() const { return codec::LayoutFingerprint(*impl_); }

bool PageLayout::has_mla() const {
  for (const codec::BufferSpec& b : impl_->buffers) {
    if (b.role == codec::BufferRole::kMlaLatent) return true;
  }
  return false;
}

}  // namespace kvtier
