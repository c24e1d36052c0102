// Model presets: the geometry of real models' KV pages, in one place so the tool, the demo and
// the benchmark agree on what "a Qwen3-8B page" is.
#include "tools/codec/model_presets.h"

namespace kvtier::tools {

codec::GqaOptions Qwen3_8bOptions() {
  codec::GqaOptions options;
  options.num_layers = 36;
  options.kv_heads = 8;
  options.head_dim = 128;
  options.tokens_per_page = 32;
  options.dtype = codec::DType::kBf16;
  options.rope_start = 0;
  options.rope_len = 128;
  return options;
}

codec::MlaOptions DeepseekV3Options() {
  codec::MlaOptions options;
  options.num_layers = 61;
  options.kv_lora_rank = 512;
  options.rope_dim = 64;
  options.tokens_per_page = 64;
  options.dtype = codec::DType::kBf16;
  options.indexer_bytes_per_token = 132;
  return options;
}

}  // namespace kvtier::tools
