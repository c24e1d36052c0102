// CodecSpec parsing and printing.
#include "codec/codec_spec.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace kvtier::codec {

absl::string_view CodecName(CodecId id) {
  switch (id) {
    case CodecId::kRaw:
      return "raw";
    case CodecId::kNvfp4:
      return "nvfp4";
    case CodecId::kNvfp4x2:
      return "nvfp4x2";
  }
  return "unknown";
}

absl::StatusOr<CodecSpec> CodecSpec::Parse(absl::string_view text) {
  CodecSpec spec;
  absl::string_view name = text;
  if (absl::EndsWith(name, "+rope")) {
    spec.rope_lossless = true;
    name.remove_suffix(5);
  }
  if (name == "raw") {
    spec.codec = CodecId::kRaw;
  } else if (name == "nvfp4") {
    spec.codec = CodecId::kNvfp4;
  } else if (name == "nvfp4x2") {
    spec.codec = CodecId::kNvfp4x2;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown codec '", text, "' (expected raw, nvfp4, nvfp4+rope, nvfp4x2 or nvfp4x2+rope)"));
  }
  if (spec.codec == CodecId::kRaw && spec.rope_lossless) {
    return absl::InvalidArgumentError(
        "codec 'raw+rope': raw is lossless already (expected raw, nvfp4, nvfp4+rope, nvfp4x2 or "
        "nvfp4x2+rope)");
  }
  return spec;
}

std::string CodecSpec::ToString() const {
  return absl::StrCat(CodecName(codec), rope_lossless ? "+rope" : "");
}

}  // namespace kvtier::codec
