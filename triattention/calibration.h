// TriAttention calibration: per (layer, query head) statistics of the pre-RoPE query in each RoPE
// frequency band, which the scorer needs, and the loaders for the three file forms that carry them
// (the official torch.save {metadata, stats} file, TensorRT-LLM's flat torch.save file, and a
// safetensors file with the flat form's tensors). Loading is pure CPU work on a private buffer; a
// Calibration is a plain value, safe to share read-only between threads.
#ifndef KVTIER_TRIATTENTION_CALIBRATION_H_
#define KVTIER_TRIATTENTION_CALIBRATION_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace kvtier::triattention {

// Bounds every loader enforces (InvalidArgument when exceeded).
inline constexpr int kMaxCalibrationLayers = 4096;
inline constexpr int kMaxCalibrationHeads = 4096;
inline constexpr int kMaxCalibrationBands = 1024;                   // head_dim <= 2048
inline constexpr int64_t kMaxCalibrationValues = int64_t{1} << 24;  // L * H * F
inline constexpr uint64_t kMaxCalibrationFileBytes = uint64_t{1} << 30;

// Statistics per (layer l, QUERY head h) over F = head_dim / 2 frequency bands, with the "half"
// (NeoX) pairing q_f = q[f] + i * q[f + F]. Arrays indexed [l][h][f] are row-major:
// index (l * heads + h) * bands + f.
struct Calibration {
  int layers = 0;                  // L
  int heads = 0;                   // H, query heads (not KV heads)
  int bands = 0;                   // F
  std::vector<float> q_mean_real;  // [L][H][F]: Re E[q_f], the complex mean of the band
  std::vector<float> q_mean_imag;  // [L][H][F]: Im E[q_f]
  std::vector<float> q_abs_mean;   // [L][H][F]: E|q_f|, the mean magnitude of the band
  // [L][H]: 1 when the file had statistics for that head. The official form may leave heads out;
  // their statistics are zero. The flat and safetensors forms cover every head.
  std::vector<uint8_t> present;
  // [F]: RoPE angular frequencies and the squared attention scaling per band. Only the flat and
  // safetensors forms carry them; for the official form they come from the model's config.
  std::optional<std::vector<float>> omega;
  std::optional<std::vector<float>> freq_scale_sq;
  int head_dim = 0;        // 2 * F (the official metadata's head_dim, checked against F)
  std::string rope_style;  // always "half": the only pairing the files use and the loaders accept
  std::string model_name;  // the official metadata's or safetensors metadata's, when given
};

// Reads the file at `path` (at most kMaxCalibrationFileBytes) and parses it by its form: a ZIP
// archive (torch.save) goes to ParseTorchCalibration, anything else to
// ParseSafetensorsCalibration. Errors name the path and keep the parser's code; also NotFound when
// the file does not exist, PermissionDenied when it cannot be read, InvalidArgument for a legacy
// (pre-zip) torch.save file, a file over the limit, and a path that is not a regular file (a
// FIFO, socket, device or directory is refused before it is opened for reading, so the call never
// waits on it). Blocks on file I/O.
absl::StatusOr<Calibration> LoadCalibration(const std::string& path);

// Parses the bytes of a torch.save file in either form (file is borrowed for the call):
//  - official: {"metadata": {rope_style: "half", head_dim: int, sampled_heads: [[l, h], ...]
//    (optional: else the stats keys are the list), model_name: str (optional), ...},
//    "stats": {"layerLL_headHH": {"q_mean_real", "q_mean_imag", "q_abs_mean": float32 [F]}}}.
//    L = max layer + 1, H = max head + 1. Every sampled head must have a stats entry and every
//    stats entry must be sampled; keys are "layer%02d_head%02d".
//  - flat: {"E_q": complex64 [L, H, F], "E_q_norm": float32 [L, H, F], "omega": float32 [F],
//    "freq_scale_sq": float32 [F]}; other keys are ignored.
// Tensors may be any strided view of their storage. Every value must be finite and every mean
// magnitude (q_abs_mean, E_q_norm) >= 0. InvalidArgument naming the key and the value for a
// missing key, a wrong type, dtype or shape, a non-finite value, a rope_style other than "half", a
// head_dim that is not 2 * F, a malformed or duplicate head, or a bound exceeded; errors of the
// archive and pickle as TorchCheckpoint::Read returns them (DataLoss for a CRC mismatch).
absl::StatusOr<Calibration> ParseTorchCalibration(absl::Span<const uint8_t> file);

// Parses the bytes of a safetensors file (file is borrowed for the call). Safetensors has no
// complex dtype, so the flat form's E_q is split into two tensors:
//   "E_q_real", "E_q_imag", "E_q_norm": F32 [L, H, F];  "omega", "freq_scale_sq": F32 [F].
// Other tensors are allowed (any standard dtype) and ignored. The optional "__metadata__" may
// carry "rope_style" (must be "half"), "head_dim" (decimal, must be 2 * F) and "model_name".
// The header is checked strictly: an 8-byte little-endian length of at most 16 MiB, one JSON
// object without duplicate keys, each tensor exactly {dtype, shape, data_offsets}, offsets
// inside the data region, in order without gaps or overlaps, covering it, each span matching
// shape * element size. InvalidArgument naming the tensor and the value otherwise, and for the
// value checks of ParseTorchCalibration.
absl::StatusOr<Calibration> ParseSafetensorsCalibration(absl::Span<const uint8_t> file);

// Checks a calibration against a model's geometry. InvalidArgument naming both sides, e.g.
// "calibration has 36 layers, the model 28", for a different layer count, query head count or
// head_dim (2 * F), and for a non-positive model dimension.
absl::Status CheckGeometry(const Calibration& calibration, int layers, int query_heads,
                           int head_dim);

}  // namespace kvtier::triattention

#endif  // KVTIER_TRIATTENTION_CALIBRATION_H_
