// Page layouts of well-known models, shared by `kvtier-codec layout --preset`, `kvtier-codec demo`
// and the codec benchmark. Pure functions; thread-safe.
#ifndef KVTIER_TOOLS_CODEC_MODEL_PRESETS_H_
#define KVTIER_TOOLS_CODEC_MODEL_PRESETS_H_

#include "absl/strings/string_view.h"

#include "codec/page_layout.h"

namespace kvtier::tools {

// Qwen3-8B, BF16: GQA, 36 layers, 8 KV heads, head_dim 128, 32 tokens per page; RoPE covers the
// whole K row (rope_start 0, rope_len 128). 4,718,592 hot bytes per page.
codec::GqaOptions Qwen3_8bOptions();

// DeepSeek-V3 style MLA, BF16: 61 layers, kv_lora_rank 512, rope_dim 64, 64 tokens per page, and a
// lossless indexer buffer of 132 bytes per token per layer.
codec::MlaOptions DeepseekV3Options();

// Preset names accepted by `kvtier-codec layout --preset`.
inline constexpr absl::string_view kQwen3_8bPreset = "qwen3-8b";
inline constexpr absl::string_view kDeepseekV3Preset = "deepseek-v3";

}  // namespace kvtier::tools

#endif  // KVTIER_TOOLS_CODEC_MODEL_PRESETS_H_
