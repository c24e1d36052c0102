// RoPE tables for the TriAttention scorer: the angular frequency of every rotary band (the model's
// inv_freq, already scaled) and the attention scaling, derived from a Hugging Face config.json the
// way transformers' modeling_rope_utils.py derives them at model initialisation, plus the checks
// and the fill-in that tie them to a Calibration. Pure functions on values; a RopeTables is a plain
// value, safe to share read-only between threads.
#ifndef KVTIER_TRIATTENTION_ROPE_H_
#define KVTIER_TRIATTENTION_ROPE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "triattention/calibration.h"

namespace kvtier::triattention {

inline constexpr int kMaxRopeHeadDim = 1024;
inline constexpr int64_t kMaxConfigCount = int64_t{1} << 20;  // layers, heads
inline constexpr uint64_t kMaxConfigJsonBytes = uint64_t{16} << 20;

struct RopeTables {
  // omega_f for f = 0..F-1, F = rotary_dim / 2, already scaled (linear, dynamic, llama3, yarn).
  // Band f pairs dims f and f + F of the rotated part of the head ("half" / NeoX pairing).
  std::vector<double> inv_freq;
  double attention_factor = 1.0;  // HF attention_scaling: the YaRN mscale, 1 for the others
  int head_dim = 0;               // d
  int rotary_dim = 0;             // int(head_dim * partial_rotary_factor): the rotated dims
  std::string rope_type;          // "default", "linear", "dynamic", "llama3" or "yarn"
  int num_layers = 0;             // num_hidden_layers
  int num_attention_heads = 0;    // H, query heads
  int num_kv_heads = 0;           // G, num_key_value_heads (default H); divides H
};

// Derives the RoPE tables from the text of a Hugging Face config.json (borrowed for the call).
// Reads `text_config` when present (multimodal configs), and the top level for the fields it
// leaves out. The scaling parameters come from `rope_scaling` (transformers < 5) or
// `rope_parameters` (transformers >= 5, which also holds rope_theta and partial_rotary_factor);
// `rope_scaling` wins when both are set, as in transformers. Type from `rope_type`, else the legacy
// `type`, else "default". A JSON null counts as absent. Defaults: rope_theta 10000 (but a nested
// text_config must give it: transformers omits there what equals the text model's own default),
// partial_rotary_factor 1, num_key_value_heads = num_attention_heads, head_dim = hidden_size //
// num_attention_heads; YaRN beta_fast 32, beta_slow 1, truncate true,
// original_max_position_embeddings = max_position_embeddings, attention_factor from mscale /
// mscale_all_dim or 0.1 * ln(factor) + 1. "dynamic" gives the tables HF builds at initialisation,
// which equal the unscaled ones (seq_len = max_position_embeddings).
// Returns InvalidArgument naming the field and its value for text that is not a JSON object, an
// unsupported rope type (e.g. "longrope", "mrope") or a model whose layers do not share one RoPE
// (per-layer-type rope_parameters, rope_local_base_freq, model_type gemma3 / gemma3n / llama4 /
// cohere2), a required field that is missing or not a number (an integer where a count is meant),
// and a value out of range: rope_theta <= 0, factor < 1, head_dim odd or outside [2, 1024],
// rotary_dim odd or 0, partial_rotary_factor outside (0, 1], num_key_value_heads not dividing
// num_attention_heads, llama3 high_freq_factor <= low_freq_factor, yarn beta_fast < beta_slow.
absl::StatusOr<RopeTables> RopeTablesFromConfigJson(absl::string_view json_text);

// Reads the config.json at `config_json_path` (or `<path>/config.json` when the path is a model
// directory), at most kMaxConfigJsonBytes, and parses it with RopeTablesFromConfigJson. Errors name
// the path: NotFound when the file does not exist, PermissionDenied when it cannot be read,
// InvalidArgument when it is too large or not a regular file (a FIFO, socket, device or directory
// is refused before it is opened for reading, so the call never waits on it), and the parser's
// errors. Blocks on file I/O.
absl::StatusOr<RopeTables> LoadRopeTables(const std::string& config_json_path);

// Checks that a calibration belongs to the model the tables came from: same layer count, same
// query head count, one band per rotary pair (F == rotary_dim / 2; with full rotary that is
// head_dim / 2), and, where the calibration file carries omega / freq_scale_sq, that they agree
// with inv_freq / attention_factor^2 within a relative 1e-4. A calibration of a partially rotated
// head must cover the rotated dims only; one with F == head_dim / 2 pairs q[f] with q[f + d/2],
// not the model's rotation pairs, and is refused. InvalidArgument naming both sides otherwise.
absl::Status CheckCalibrationAgainstRope(const Calibration& calibration, const RopeTables& rope);

// Sets calibration->omega to inv_freq[0..F) (as float) and calibration->freq_scale_sq to
// attention_factor^2 for every band, each only where the calibration lacks it, as TensorRT-LLM
// does for the official file form. `calibration` is borrowed for the call.
// REQUIRES: CheckCalibrationAgainstRope(*calibration, rope).ok(); otherwise (more bands than
// inv_freq) the calibration is left unchanged.
void FillCalibrationRope(const RopeTables& rope, Calibration* calibration);

}  // namespace kvtier::triattention

#endif  // KVTIER_TRIATTENTION_ROPE_H_
