// `kvtier-codec layout`: builds a page layout for a model family from flags (or a preset, which
// flags then override) and prints its JSON form. Every value here comes from the command line, so
// a layout the builders reject is reported as a usage error (exit code 2).
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "codec/dtype.h"
#include "codec/page_layout.h"
#include "common/status_macros.h"
#include "tools/codec/commands.h"
#include "tools/codec/model_presets.h"

namespace kvtier::tools {
namespace {

// Flags that describe geometry, and the families each applies to.
struct GeometryFlag {
  absl::string_view name;
  bool gqa;
  bool mla;
  bool hybrid;
};
constexpr GeometryFlag kGeometryFlags[] = {
    {"layers", true, true, true},
    {"kv-heads", true, false, true},
    {"head-dim", true, false, true},
    {"tokens", true, true, true},
    {"dtype", true, true, true},
    {"rope-start", true, false, true},
    {"rope-len", true, false, true},
    {"kv-lora-rank", false, true, false},
    {"rope-dim", false, true, false},
    {"indexer-bytes-per-token", false, true, false},
    {"attention-layers", false, false, true},
    {"state-bytes", false, false, true},
};

absl::Status CheckApplicable(const cli::Values& flags, absl::string_view family) {
  for (const GeometryFlag& flag : kGeometryFlags) {
    const bool applies = family == "gqa" ? flag.gqa : family == "mla" ? flag.mla : flag.hybrid;
    if (!applies && flags.Has(flag.name)) {
      return cli::UsageError(
          absl::StrCat("flag --", flag.name, " does not apply to --family ", family));
    }
  }
  return absl::OkStatus();
}

// Overrides `*field` with flag `name` when given; without a preset the flag is required.
absl::Status ApplyUint32(const cli::Values& flags, absl::string_view name, bool required,
                         uint32_t* field) {
  KVTIER_ASSIGN_OR_RETURN(std::optional<uint32_t> value, flags.OptionalUint32(name));
  if (value.has_value()) {
    *field = *value;
  } else if (required) {
    return cli::UsageError(absl::StrCat("missing required flag --", name, " (or use --preset)"));
  }
  return absl::OkStatus();
}

absl::Status ApplyDType(const cli::Values& flags, codec::DType* dtype) {
  std::optional<std::string> text = flags.Get("dtype");
  if (!text.has_value()) return absl::OkStatus();
  absl::StatusOr<codec::DType> parsed = codec::ParseDType(*text);
  if (!parsed.ok() || !codec::IsQuantizable(*parsed)) {
    return cli::UsageError(
        absl::StrCat("flag --dtype: '", *text, "' is not one of bf16, fp16, fp8_e4m3"));
  }
  *dtype = *parsed;
  return absl::OkStatus();
}

absl::StatusOr<codec::PageLayout> BuildGqa(const cli::Values& flags, bool preset) {
  codec::GqaOptions o = preset ? Qwen3_8bOptions() : codec::GqaOptions{};
  KVTIER_RETURN_IF_ERROR(ApplyUint32(flags, "layers", !preset, &o.num_layers));
  KVTIER_RETURN_IF_ERROR(ApplyUint32(flags, "kv-heads", !preset, &o.kv_heads));
  KVTIER_RETURN_IF_ERROR(ApplyUint32(flags, "head-dim", !preset, &o.head_dim));
  KVTIER_RETURN_IF_ERROR(ApplyUint32(flags, "tokens", !preset, &o.tokens_per_page));
  KVTIER_RETURN_IF_ERROR(ApplyDType(flags, &o.dtype));
  KVTIER_RETURN_IF_ERROR(ApplyUint32(flags, "rope-start", false, &o.rope_start));
  KVTIER_RETURN_IF_ERROR(ApplyUint32(flags, "rope-len", false, &o.rope_len));
  if (preset && flags.Has("head-dim") && !flags.Has("rope-len")) {
    o.rope_len = 0;  // the preset's RoPE covers the whole row; keep it so for another head_dim
  }
  return codec::BuildGqaLayout(o);
}

absl::StatusOr<codec::PageLayout> BuildMla(const cli::Values& flags, bool preset) {
  codec::MlaOptions o = preset ? DeepseekV3Options() : codec::MlaOptions{};
  KVTIER_RETURN_IF_ERROR(ApplyUint32(flags, "layers", !preset, &o.num_layers));
  KVTIER_RETURN_IF_ERROR(ApplyUint32(flags, "kv-lora-rank", false, &o.kv_lora_rank));
  KVTIER_RETURN_IF_ERROR(ApplyUint32(flags, "rope-dim", false, &o.rope_dim));
  KVTIER_RETURN_IF_ERROR(ApplyUint32(flags, "tokens", !preset, &o.tokens_per_page));
  KVTIER_RETURN_IF_ERROR(ApplyDType(flags, &o.dtype));
  KVTIER_RETURN_IF_ERROR(
      ApplyUint32(flags, "indexer-bytes-per-token", false, &o.indexer_bytes_per_token));
  return codec::BuildMlaLayout(o);
}

absl::StatusOr<codec::PageLayout> BuildHybrid(const cli::Values& flags) {
  codec::HybridOptions o;
  KVTIER_RETURN_IF_ERROR(ApplyUint32(flags, "layers", true, &o.num_layers));
  KVTIER_ASSIGN_OR_RETURN(std::optional<std::vector<uint32_t>> attention,
                          flags.OptionalUint32List("attention-layers"));
  if (!attention.has_value()) return cli::UsageError("missing required flag --attention-layers");
  o.attention_layers = *std::move(attention);
  KVTIER_RETURN_IF_ERROR(ApplyUint32(flags, "kv-heads", true, &o.kv_heads));
  KVTIER_RETURN_IF_ERROR(ApplyUint32(flags, "head-dim", true, &o.head_dim));
  KVTIER_RETURN_IF_ERROR(ApplyUint32(flags, "tokens", true, &o.tokens_per_page));
  KVTIER_RETURN_IF_ERROR(ApplyDType(flags, &o.dtype));
  KVTIER_RETURN_IF_ERROR(ApplyUint32(flags, "rope-start", false, &o.rope_start));
  KVTIER_RETURN_IF_ERROR(ApplyUint32(flags, "rope-len", false, &o.rope_len));
  KVTIER_RETURN_IF_ERROR(ApplyUint32(flags, "state-bytes", false, &o.state_bytes));
  return codec::BuildHybridLayout(o);
}

}  // namespace

absl::Status RunLayout(const cli::Values& flags) {
  std::optional<std::string> preset = flags.Get("preset");
  std::optional<std::string> family = flags.Get("family");
  std::string preset_family;
  if (preset.has_value()) {
    if (*preset == kQwen3_8bPreset) {
      preset_family = "gqa";
    } else if (*preset == kDeepseekV3Preset) {
      preset_family = "mla";
    } else {
      return cli::UsageError(absl::StrCat("flag --preset: unknown preset '", *preset,
                                          "' (expected ", kQwen3_8bPreset, " or ",
                                          kDeepseekV3Preset, ")"));
    }
    if (family.has_value() && *family != preset_family) {
      return cli::UsageError(absl::StrCat("--family ", *family, " contradicts --preset ", *preset,
                                          " (a ", preset_family, " model)"));
    }
    family = preset_family;
  }
  if (!family.has_value()) return cli::UsageError("missing required flag --family (or --preset)");
  if (*family != "gqa" && *family != "mla" && *family != "hybrid") {
    return cli::UsageError(absl::StrCat("flag --family: unknown family '", *family,
                                        "' (expected gqa, mla or hybrid)"));
  }
  KVTIER_RETURN_IF_ERROR(CheckApplicable(flags, *family));

  absl::StatusOr<codec::PageLayout> layout;
  if (*family == "gqa") {
    layout = BuildGqa(flags, preset.has_value());
  } else if (*family == "mla") {
    layout = BuildMla(flags, preset.has_value());
  } else {
    layout = BuildHybrid(flags);
  }
  if (!layout.ok()) {
    if (cli::IsUsageError(layout.status())) return layout.status();
    return cli::UsageError(
        absl::StrCat("invalid ", *family, " layout: ", layout.status().ToString()));
  }
  absl::PrintF("%s\n", codec::LayoutToJson(*layout));
  return absl::OkStatus();
}

}  // namespace kvtier::tools
