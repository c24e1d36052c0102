// The factories of libkvtier's built-in compression methods, which the registry (compression.cc)
// holds under their algorithm names: "triattention" (triattention_method.cc) and
// "quantization_for_cold_page" (cold_page_method.cc). Internal to libkvtier; engines reach them
// through CreateCompressionMethod. Thread-safe (each call builds its own method).
#ifndef KVTIER_CLIENT_SRC_COMPRESSION_METHODS_H_
#define KVTIER_CLIENT_SRC_COMPRESSION_METHODS_H_

#include <memory>

#include "absl/status/statusor.h"
#include "kvtier/compression.h"

namespace kvtier::compression_internal {

inline constexpr char kTriAttentionName[] = "triattention";
inline constexpr char kColdPageName[] = "quantization_for_cold_page";

// TriAttention eviction at the end of each generation step over the engine's GQA pools. Errors:
// InvalidArgument for an MLA or non-GQA layout, missing calibration_path / model_config_path or
// pools, and the errors of triattention::Evictor::CreateFromFiles (a calibration that does not
// match the model, a bad view). Blocks on reading the two files.
absl::StatusOr<std::unique_ptr<CompressionManager>> CreateTriAttentionMethod(
    const CompressionConfig& config, const EngineContext& engine);

// Cold-page offload through kvtierd: connects to config.daemon_socket and registers the engine.
// Errors: InvalidArgument for a missing model / layout / pool registrations; the errors of
// Client::Connect (Unavailable when no daemon answers) and Client::RegisterEngine. Blocks on the
// daemon.
absl::StatusOr<std::unique_ptr<CompressionManager>> CreateColdPageMethod(
    const CompressionConfig& config, const EngineContext& engine);

}  // namespace kvtier::compression_internal

#endif  // KVTIER_CLIENT_SRC_COMPRESSION_METHODS_H_
