// CodecSpec: which codec turns hot pages into cold blocks, and its options. Plain value type.
#ifndef KVTIER_CODEC_CODEC_SPEC_H_
#define KVTIER_CODEC_CODEC_SPEC_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kvtier::codec {

// Numeric codes are part of the cold-block format.
enum class CodecId : uint8_t {
  kRaw = 0,      // lossless: every buffer's data, byte for byte
  kNvfp4 = 1,    // E2M1 values, one E4M3 scale per 16 values, a power-of-two scale per buffer
  kNvfp4x2 = 2,  // nvfp4 plus a second nvfp4 pass over the residual
};
absl::string_view CodecName(CodecId id);  // "raw", "nvfp4", "nvfp4x2"

struct CodecSpec {
  CodecId codec = CodecId::kNvfp4;
  bool rope_lossless = false;  // keep the RoPE range of K / MLA-latent rows at source precision
  uint32_t alignment_bytes = 4096;  // block size is a multiple of this; power of two in [16, 65536]

  // "raw", "nvfp4", "nvfp4x2", optionally followed by "+rope" for lossless RoPE ("nvfp4+rope").
  static absl::StatusOr<CodecSpec> Parse(absl::string_view text);
  std::string ToString() const;
};

}  // namespace kvtier::codec

#endif  // KVTIER_CODEC_CODEC_SPEC_H_
