// RoPE tables from config.json. The formulas and defaults are those of transformers'
// modeling_rope_utils.py (ROPE_INIT_FUNCTIONS, as called by the rotary embedding's __init__, and
// RotaryEmbeddingConfigMixin.standardize_rope_params for where each parameter is read from);
// TensorRT-LLM's TriAttention takes omega = inv_freq[:F] and freq_scale_sq = attention_scaling^2
// from exactly these functions.
//  - Precision: transformers computes inv_freq in float32; here everything is double, so the
//    tables are the exact values of the formulas and agree with transformers' to float32 rounding.
//  - "dynamic": the rotary embedding is built with seq_len = None, which the NTK function turns
//  into
//    max_position_embeddings, and base * (factor * L / L - (factor - 1))^(d / (d - 2)) = base, so
//    the initial tables are the unscaled ones (attention_scaling 1); transformers rescales them in
//    the forward pass only once a sequence outgrows max_position_embeddings. The scorer uses the
//    initial tables; engines that scale dynamic NTK statically (for the full extended length)
//    rotate with a larger base and need other tables.
//  - Where transformers only warns about a value it calls invalid (factor < 1, beta_fast <
//    beta_slow, high_freq_factor <= low_freq_factor), we refuse the config.
//  - Partial rotary: the rotation acts on dims [0, rotary_dim) with pairs (f, f + rotary_dim / 2);
//    the official calibration pairs (f, f + head_dim / 2) over the whole head, which for a
//    partially rotated head mixes rotated and unrotated dims, so such a calibration is refused
//    rather than given made-up frequencies. A calibration over the rotated dims only (F =
//    rotary_dim / 2) fits.
#include "triattention/rope.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <optional>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/annotate.h"
#include "common/file_reading.h"
#include "common/status_macros.h"

namespace kvtier::triattention {
namespace {

using Json = nlohmann::json;

constexpr double kDefaultRopeTheta = 10000.0;
constexpr double kCalibrationRopeTolerance = 1e-4;  // relative, omega and freq_scale_sq

absl::Status Invalid(absl::string_view what) { return absl::InvalidArgumentError(what); }

// A JSON value for a message: compact, at most 64 characters.
std::string ValueText(const Json& value) {
  std::string text = value.dump(-1, ' ', /*ensure_ascii=*/true, Json::error_handler_t::replace);
  if (text.size() > 64) text = absl::StrCat(text.substr(0, 61), "...");
  return text;
}

// A JSON object of config.json and the dotted path of its fields in messages ("text_config.",
// "text_config.rope_scaling.", ...). `object` is null for an absent dict. Fields absent (or null)
// here are looked up in `outer` (the top level, for text_config), which must outlive the scope.
struct Scope {
  const Json* object = nullptr;
  std::string prefix;
  const Scope* outer = nullptr;

  // The scope that holds a non-null `key`, this one first; nullptr when none does.
  const Scope* Holder(absl::string_view key) const {
    for (const Scope* scope = this; scope != nullptr; scope = scope->outer) {
      if (scope->object == nullptr) continue;
      const auto it = scope->object->find(key);
      if (it != scope->object->end() && !it->is_null()) return scope;
    }
    return nullptr;
  }
  // The value of `key`; nullptr when absent or JSON null everywhere.
  const Json* Find(absl::string_view key) const {
    const Scope* holder = Holder(key);
    return holder == nullptr ? nullptr : &*holder->object->find(key);
  }
  // The name of `key` in messages: where it was found, else where it was looked for first.
  std::string Field(absl::string_view key) const {
    const Scope* holder = Holder(key);
    return absl::StrCat(holder == nullptr ? prefix : holder->prefix, key);
  }
};

absl::Status FieldError(absl::string_view field, const Json& value, absl::string_view problem) {
  return Invalid(
      absl::StrCat("config.json field '", field, "' is ", ValueText(value), ", ", problem));
}

absl::Status Missing(absl::string_view field, absl::string_view needed_by) {
  return Invalid(absl::StrCat("config.json has no field '", field, "'", needed_by));
}

// A number (integer or floating point JSON), finite; nullopt when absent.
absl::StatusOr<std::optional<double>> OptionalNumber(const Scope& scope, absl::string_view key) {
  const Json* value = scope.Find(key);
  if (value == nullptr) return std::nullopt;
  if (!value->is_number()) return FieldError(scope.Field(key), *value, "expected a number");
  const double number = value->get<double>();
  if (!std::isfinite(number)) {
    return FieldError(scope.Field(key), *value, "expected a finite number");
  }
  return number;
}

absl::StatusOr<double> RequiredNumber(const Scope& scope, absl::string_view key,
                                      absl::string_view needed_by) {
  KVTIER_ASSIGN_OR_RETURN(const std::optional<double> number, OptionalNumber(scope, key));
  if (!number.has_value()) return Missing(scope.Field(key), needed_by);
  return *number;
}

// A positive JSON integer of at most `max`; nullopt when absent.
absl::StatusOr<std::optional<int64_t>> OptionalCount(const Scope& scope, absl::string_view key,
                                                     int64_t max) {
  const Json* value = scope.Find(key);
  if (value == nullptr) return std::nullopt;
  if (!value->is_number_integer()) {
    return FieldError(scope.Field(key), *value, "expected an integer");
  }
  const bool in_range = value->is_number_unsigned()
                            ? value->get<uint64_t>() >= 1 && value->get<uint64_t>() <= uint64_t(max)
                            : value->get<int64_t>() >= 1 && value->get<int64_t>() <= max;
  if (!in_range) {
    return FieldError(scope.Field(key), *value, absl::StrCat("expected 1 to ", max));
  }
  return value->get<int64_t>();
}

absl::StatusOr<int64_t> RequiredCount(const Scope& scope, absl::string_view key, int64_t max) {
  KVTIER_ASSIGN_OR_RETURN(const std::optional<int64_t> count, OptionalCount(scope, key, max));
  if (!count.has_value()) return Missing(scope.Field(key), "");
  return *count;
}

// A positive number; nullopt when absent.
absl::StatusOr<std::optional<double>> OptionalPositive(const Scope& scope, absl::string_view key) {
  KVTIER_ASSIGN_OR_RETURN(const std::optional<double> number, OptionalNumber(scope, key));
  if (number.has_value() && !(*number > 0)) {
    return FieldError(scope.Field(key), *scope.Find(key), "must be > 0");
  }
  return number;
}

// The scaling factor the rope types other than "default" need: required, >= 1.
absl::StatusOr<double> ScalingFactor(const Scope& rope, absl::string_view rope_type) {
  KVTIER_ASSIGN_OR_RETURN(
      const double factor,
      RequiredNumber(rope, "factor", absl::StrCat(", which rope_type \"", rope_type, "\" needs")));
  if (!(factor >= 1.0)) {
    return FieldError(rope.Field("factor"), *rope.Find("factor"), "must be >= 1");
  }
  return factor;
}

// The pretraining context length for llama3 / yarn: rope dict, else the config's own
// original_max_position_embeddings (Phi-3 style), else max_position_embeddings.
absl::StatusOr<double> OriginalMaxPositions(const Scope& config, const Scope& rope,
                                            absl::string_view rope_type) {
  for (const Scope* scope : {&rope, &config}) {
    KVTIER_ASSIGN_OR_RETURN(const std::optional<double> length,
                            OptionalPositive(*scope, "original_max_position_embeddings"));
    if (length.has_value()) return *length;
  }
  KVTIER_ASSIGN_OR_RETURN(const std::optional<double> length,
                          OptionalPositive(config, "max_position_embeddings"));
  if (!length.has_value()) {
    return Missing(rope.Field("original_max_position_embeddings"),
                   absl::StrCat(" (nor '", config.Field("max_position_embeddings"),
                                "'), which rope_type \"", rope_type, "\" needs"));
  }
  return *length;
}

// omega_f = theta^(-2f / rotary_dim), f = 0..rotary_dim/2 - 1.
std::vector<double> UnscaledInvFreq(double theta, int rotary_dim) {
  std::vector<double> inv_freq(rotary_dim / 2);
  for (int f = 0; f < rotary_dim / 2; ++f) {
    inv_freq[f] = 1.0 / std::pow(theta, static_cast<double>(2 * f) / rotary_dim);
  }
  return inv_freq;
}

absl::Status ApplyLlama3(const Scope& config, const Scope& rope, RopeTables* tables) {
  KVTIER_ASSIGN_OR_RETURN(const double factor, ScalingFactor(rope, "llama3"));
  const std::string needs = ", which rope_type \"llama3\" needs";
  KVTIER_ASSIGN_OR_RETURN(const double low_freq_factor,
                          RequiredNumber(rope, "low_freq_factor", needs));
  KVTIER_ASSIGN_OR_RETURN(const double high_freq_factor,
                          RequiredNumber(rope, "high_freq_factor", needs));
  if (!(low_freq_factor > 0)) {
    return FieldError(rope.Field("low_freq_factor"), *rope.Find("low_freq_factor"), "must be > 0");
  }
  if (!(high_freq_factor > low_freq_factor)) {
    return FieldError(rope.Field("high_freq_factor"), *rope.Find("high_freq_factor"),
                      absl::StrCat("must be greater than low_freq_factor ", low_freq_factor));
  }
  KVTIER_ASSIGN_OR_RETURN(const double old_context, OriginalMaxPositions(config, rope, "llama3"));
  const double low_freq_wavelen = old_context / low_freq_factor;
  const double high_freq_wavelen = old_context / high_freq_factor;
  for (double& omega : tables->inv_freq) {
    const double wavelen = 2 * std::numbers::pi / omega;
    if (wavelen < high_freq_wavelen) continue;  // high frequency: unchanged
    if (wavelen > low_freq_wavelen) {           // low frequency: interpolated by the factor
      omega /= factor;
      continue;
    }
    const double smooth =
        (old_context / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
    omega = (1 - smooth) * omega / factor + smooth * omega;
  }
  return absl::OkStatus();
}

double YarnMscale(double scale, double mscale) {
  return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

absl::Status ApplyYarn(const Scope& config, const Scope& rope, double theta,
                       const std::string& theta_field, RopeTables* tables) {
  KVTIER_ASSIGN_OR_RETURN(const double original, OriginalMaxPositions(config, rope, "yarn"));
  // transformers >= 5: an explicit null factor means max_position_embeddings / original.
  double factor = 0;
  if (rope.object != nullptr && rope.object->contains("factor") &&
      rope.object->at("factor").is_null()) {
    KVTIER_ASSIGN_OR_RETURN(const std::optional<double> max_positions,
                            OptionalPositive(config, "max_position_embeddings"));
    if (!max_positions.has_value()) {
      return Missing(config.Field("max_position_embeddings"),
                     absl::StrCat(", which '", rope.Field("factor"), "': null needs"));
    }
    factor = *max_positions / original;
    if (!(factor >= 1.0)) {
      return Invalid(
          absl::StrCat("config.json's yarn factor max_position_embeddings / "
                       "original_max_position_embeddings = ",
                       *max_positions, " / ", original, " must be >= 1"));
    }
  } else {
    KVTIER_ASSIGN_OR_RETURN(factor, ScalingFactor(rope, "yarn"));
  }
  if (theta == 1.0) {
    return Invalid(absl::StrCat("config.json field '", theta_field,
                                "' is 1, which yarn cannot use (log(theta) = 0)"));
  }

  KVTIER_ASSIGN_OR_RETURN(const std::optional<double> attention_factor,
                          OptionalPositive(rope, "attention_factor"));
  KVTIER_ASSIGN_OR_RETURN(const std::optional<double> mscale, OptionalNumber(rope, "mscale"));
  KVTIER_ASSIGN_OR_RETURN(const std::optional<double> mscale_all_dim,
                          OptionalNumber(rope, "mscale_all_dim"));
  if (attention_factor.has_value()) {
    tables->attention_factor = *attention_factor;
  } else if (mscale.value_or(0) != 0 && mscale_all_dim.value_or(0) != 0) {
    tables->attention_factor = YarnMscale(factor, *mscale) / YarnMscale(factor, *mscale_all_dim);
  } else {
    tables->attention_factor = YarnMscale(factor, 1.0);
  }
  if (!(tables->attention_factor > 0) || !std::isfinite(tables->attention_factor)) {
    return Invalid(absl::StrCat("config.json's yarn mscale ", mscale.value_or(0),
                                " and mscale_all_dim ", mscale_all_dim.value_or(0),
                                " give attention factor ", tables->attention_factor,
                                ", which must be > 0"));
  }

  // beta_fast / beta_slow: 0 and null fall back to the defaults, as `get(...) or 32` does.
  KVTIER_ASSIGN_OR_RETURN(const std::optional<double> beta_fast_value,
                          OptionalNumber(rope, "beta_fast"));
  KVTIER_ASSIGN_OR_RETURN(const std::optional<double> beta_slow_value,
                          OptionalNumber(rope, "beta_slow"));
  const double beta_fast = beta_fast_value.value_or(0) != 0 ? *beta_fast_value : 32.0;
  const double beta_slow = beta_slow_value.value_or(0) != 0 ? *beta_slow_value : 1.0;
  if (!(beta_slow > 0)) {
    return FieldError(rope.Field("beta_slow"), *rope.Find("beta_slow"), "must be > 0");
  }
  if (beta_fast < beta_slow) {
    return Invalid(absl::StrCat("config.json's yarn beta_fast ", beta_fast,
                                " must not be less than beta_slow ", beta_slow));
  }
  bool truncate = true;
  if (const Json* value = rope.Find("truncate"); value != nullptr) {
    if (!value->is_boolean()) {
      return FieldError(rope.Field("truncate"), *value, "expected true or false");
    }
    truncate = value->get<bool>();
  }

  // The band indices at which a band turns beta_fast (low) and beta_slow (high) times over the
  // original context; bands below `low` keep their frequency, those above `high` are divided by
  // factor, and a linear ramp over the band index blends the two in between.
  const int dim = tables->rotary_dim;
  const auto correction_dim = [&](double rotations) {
    return dim * std::log(original / (rotations * 2 * std::numbers::pi)) / (2 * std::log(theta));
  };
  double low = correction_dim(beta_fast);
  double high = correction_dim(beta_slow);
  if (truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // as transformers does against a zero-width ramp
  for (int f = 0; f < dim / 2; ++f) {
    const double ramp = std::clamp((f - low) / (high - low), 0.0, 1.0);
    const double extrapolation_weight = 1.0 - ramp;
    const double pos_freq = std::pow(theta, static_cast<double>(2 * f) / dim);
    const double extrapolated = 1.0 / pos_freq;
    const double interpolated = 1.0 / (factor * pos_freq);
    tables->inv_freq[f] =
        interpolated * (1 - extrapolation_weight) + extrapolated * extrapolation_weight;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<RopeTables> RopeTablesFromConfigJson(absl::string_view json_text) {
  Json root;
  try {
    root = Json::parse(json_text.begin(), json_text.end());
  } catch (const Json::parse_error& e) {
    return Invalid(absl::StrCat("config.json is not valid JSON (byte ", e.byte, "): ", e.what()));
  } catch (const Json::exception& e) {  // e.g. out_of_range 406: a number too large for a double
    return Invalid(absl::StrCat("config.json is not valid JSON: ", e.what()));
  }
  if (!root.is_object()) {
    return Invalid(absl::StrCat("config.json is ", ValueText(root), ", expected a JSON object"));
  }
  // A multimodal config's text_config first, the top level for what it leaves out (transformers
  // writes a nested config as a diff against the text model's class defaults, and Qwen2-VL-style
  // files keep the text model's fields at the top level too).
  const Scope top{&root, "", nullptr};
  Scope config = top;
  if (const Json* text_config = top.Find("text_config"); text_config != nullptr) {
    if (!text_config->is_object()) {
      return FieldError("text_config", *text_config, "expected a JSON object");
    }
    config = Scope{text_config, "text_config.", &top};
  }
  // Models that rotate some layers differently (or not at all): one table cannot describe them.
  static constexpr const char* kPerLayerRopeModels[] = {
      "gemma3", "gemma3_text", "gemma3n", "gemma3n_text", "llama4", "llama4_text", "cohere2"};
  for (const Scope* scope = &config; scope != nullptr; scope = scope->outer) {
    const auto it = scope->object->find("model_type");
    if (it == scope->object->end() || !it->is_string()) continue;
    if (std::find(std::begin(kPerLayerRopeModels), std::end(kPerLayerRopeModels),
                  it->get<std::string>()) != std::end(kPerLayerRopeModels)) {
      return FieldError(absl::StrCat(scope->prefix, "model_type"), *it,
                        "a model whose layers do not all share one RoPE (per-layer RoPE bases "
                        "or layers without RoPE), which is not supported");
    }
  }
  if (const Json* local_base = config.Find("rope_local_base_freq"); local_base != nullptr) {
    return FieldError(config.Field("rope_local_base_freq"), *local_base,
                      "a second RoPE base for sliding-window layers, which is not supported");
  }

  RopeTables tables;
  KVTIER_ASSIGN_OR_RETURN(const int64_t heads,
                          RequiredCount(config, "num_attention_heads", kMaxConfigCount));
  KVTIER_ASSIGN_OR_RETURN(const int64_t layers,
                          RequiredCount(config, "num_hidden_layers", kMaxConfigCount));
  KVTIER_ASSIGN_OR_RETURN(const std::optional<int64_t> kv_heads,
                          OptionalCount(config, "num_key_value_heads", kMaxConfigCount));
  tables.num_attention_heads = static_cast<int>(heads);
  tables.num_layers = static_cast<int>(layers);
  tables.num_kv_heads = static_cast<int>(kv_heads.value_or(heads));
  if (heads % tables.num_kv_heads != 0) {
    return Invalid(absl::StrCat("config.json field '", config.Field("num_key_value_heads"), "' is ",
                                tables.num_kv_heads, ", which does not divide num_attention_heads ",
                                heads));
  }

  // head_dim, else hidden_size // num_attention_heads.
  KVTIER_ASSIGN_OR_RETURN(const std::optional<int64_t> explicit_head_dim,
                          OptionalCount(config, "head_dim", int64_t{1} << 30));
  std::string head_dim_source;
  int64_t head_dim = 0;
  if (explicit_head_dim.has_value()) {
    head_dim = *explicit_head_dim;
    head_dim_source = absl::StrCat("config.json field '", config.Field("head_dim"), "' is ");
  } else {
    KVTIER_ASSIGN_OR_RETURN(const std::optional<int64_t> hidden_size,
                            OptionalCount(config, "hidden_size", int64_t{1} << 40));
    if (!hidden_size.has_value()) {
      return Missing(config.Field("head_dim"),
                     absl::StrCat(" nor '", config.Field("hidden_size"), "'"));
    }
    head_dim = *hidden_size / heads;
    head_dim_source = absl::StrCat("config.json's head_dim (hidden_size ", *hidden_size,
                                   " // num_attention_heads ", heads, ") is ");
  }
  if (head_dim < 2 || head_dim > kMaxRopeHeadDim || head_dim % 2 != 0) {
    return Invalid(absl::StrCat(head_dim_source, head_dim, ", expected an even number from 2 to ",
                                kMaxRopeHeadDim));
  }
  tables.head_dim = static_cast<int>(head_dim);

  // The RoPE parameter dict: rope_scaling (transformers < 5), else rope_parameters; text_config's
  // first. Its fields are not looked up anywhere else.
  Scope rope;
  for (const Scope* scope = &config; scope != nullptr && rope.object == nullptr;
       scope = scope->outer) {
    for (const char* key : {"rope_scaling", "rope_parameters"}) {
      const auto it = scope->object->find(key);
      if (it == scope->object->end() || it->is_null()) continue;
      if (!it->is_object()) {
        return FieldError(absl::StrCat(scope->prefix, key), *it, "expected a JSON object");
      }
      if (it->empty()) continue;
      rope = Scope{&*it, absl::StrCat(scope->prefix, key, "."), nullptr};
      break;
    }
  }
  if (rope.object != nullptr) {
    for (const auto& [key, value] : rope.object->items()) {
      if (value.is_object()) {
        return Invalid(
            absl::StrCat("config.json field '", rope.Field(key),
                         "' is a JSON object: per-layer-type RoPE parameters are not supported"));
      }
    }
  }

  std::string type_field = rope.Field("rope_type");
  const Json* type_value = rope.Find("rope_type");
  if (type_value == nullptr) {
    type_field = rope.Field("type");
    type_value = rope.Find("type");
  }
  tables.rope_type = "default";
  if (type_value != nullptr) {
    if (!type_value->is_string()) return FieldError(type_field, *type_value, "expected a string");
    tables.rope_type = type_value->get<std::string>();
  }
  static constexpr const char* kSupported[] = {"default", "linear", "dynamic", "llama3", "yarn"};
  if (std::find(std::begin(kSupported), std::end(kSupported), tables.rope_type) ==
      std::end(kSupported)) {
    return FieldError(
        type_field, *type_value,
        absl::StrCat("which is not supported (supported: ", absl::StrJoin(kSupported, ", "), ")"));
  }

  // rope_theta: the dict's (transformers >= 5), else the config's, else 10000 -- except in a
  // nested text_config, where an absent rope_theta means "the text model's class default", which is
  // not always 10000 (1e6 for Qwen2.5-VL), so it must be given.
  double theta = kDefaultRopeTheta;
  std::string theta_field = config.Field("rope_theta");
  bool theta_given = false;
  for (const Scope* scope : {&rope, &config}) {
    KVTIER_ASSIGN_OR_RETURN(const std::optional<double> value,
                            OptionalNumber(*scope, "rope_theta"));
    if (!value.has_value()) continue;
    theta_field = scope->Field("rope_theta");
    if (!(*value > 0)) return FieldError(theta_field, *scope->Find("rope_theta"), "must be > 0");
    theta = *value;
    theta_given = true;
    break;
  }
  if (!theta_given && config.outer != nullptr) {
    return Missing(config.Field("rope_theta"),
                   " (nor the top level or the RoPE dict); transformers leaves out of text_config "
                   "the values equal to the text model's defaults, and the default rope_theta "
                   "depends on the model: add it to text_config");
  }

  // partial_rotary_factor: the config's, else the dict's (transformers >= 5 copies it there).
  double partial_rotary_factor = 1.0;
  for (const Scope* scope : {&config, &rope}) {
    KVTIER_ASSIGN_OR_RETURN(const std::optional<double> value,
                            OptionalNumber(*scope, "partial_rotary_factor"));
    if (!value.has_value()) continue;
    if (!(*value > 0 && *value <= 1)) {
      return FieldError(scope->Field("partial_rotary_factor"),
                        *scope->Find("partial_rotary_factor"), "expected a value in (0, 1]");
    }
    partial_rotary_factor = *value;
    break;
  }
  // int(head_dim * partial_rotary_factor), truncated as Python's int() does.
  tables.rotary_dim = static_cast<int>(static_cast<double>(head_dim) * partial_rotary_factor);
  if (tables.rotary_dim < 2 || tables.rotary_dim % 2 != 0) {
    return Invalid(absl::StrCat("config.json's partial_rotary_factor ", partial_rotary_factor,
                                " of head_dim ", head_dim, " gives rotary_dim ", tables.rotary_dim,
                                ", expected an even number >= 2"));
  }

  tables.inv_freq = UnscaledInvFreq(theta, tables.rotary_dim);
  if (tables.rope_type == "linear") {
    KVTIER_ASSIGN_OR_RETURN(const double factor, ScalingFactor(rope, "linear"));
    for (double& omega : tables.inv_freq) omega /= factor;
  } else if (tables.rope_type == "dynamic") {
    // Initial tables: unscaled (see the banner); factor is still required and checked.
    KVTIER_RETURN_IF_ERROR(ScalingFactor(rope, "dynamic").status());
  } else if (tables.rope_type == "llama3") {
    KVTIER_RETURN_IF_ERROR(ApplyLlama3(config, rope, &tables));
  } else if (tables.rope_type == "yarn") {
    KVTIER_RETURN_IF_ERROR(ApplyYarn(config, rope, theta, theta_field, &tables));
  }
  return tables;
}

absl::StatusOr<RopeTables> LoadRopeTables(const std::string& config_json_path) {
  std::string path = config_json_path;
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    path = absl::StrCat(path, path.ends_with('/') ? "" : "/", "config.json");
  }
  KVTIER_ASSIGN_OR_RETURN(const std::string text,
                          ReadRegularFile(path, kMaxConfigJsonBytes, "model config"));
  absl::StatusOr<RopeTables> tables = RopeTablesFromConfigJson(text);
  if (!tables.ok()) {
    return Annotate(tables.status(), absl::StrCat("model config '", path, "'"));
  }
  return tables;
}

absl::Status CheckCalibrationAgainstRope(const Calibration& calibration, const RopeTables& rope) {
  if (calibration.layers != rope.num_layers) {
    return Invalid(absl::StrCat("calibration has ", calibration.layers,
                                " layers, config.json's num_hidden_layers ", rope.num_layers));
  }
  if (calibration.heads != rope.num_attention_heads) {
    return Invalid(absl::StrCat("calibration has ", calibration.heads,
                                " query heads, config.json's num_attention_heads ",
                                rope.num_attention_heads));
  }
  const int bands = rope.rotary_dim / 2;
  if (calibration.bands != bands || static_cast<int>(rope.inv_freq.size()) != bands) {
    if (rope.rotary_dim < rope.head_dim && calibration.bands == rope.head_dim / 2) {
      return Invalid(absl::StrCat("calibration has ", calibration.bands,
                                  " bands (head_dim / 2), but config.json's head_dim ",
                                  rope.head_dim, " is rotated only in its first ", rope.rotary_dim,
                                  " dims (partial_rotary_factor), which give ", bands,
                                  " bands: the calibration's pairs (f, f + ", rope.head_dim / 2,
                                  ") are not the model's rotation pairs (f, f + ", bands,
                                  "); calibrate the rotated dims only"));
    }
    if (rope.rotary_dim < rope.head_dim) {
      return Invalid(absl::StrCat("calibration has ", calibration.bands,
                                  " bands, config.json's head_dim ", rope.head_dim,
                                  " with rotary_dim ", rope.rotary_dim, " gives ", bands));
    }
    return Invalid(absl::StrCat("calibration has ", calibration.bands,
                                " bands, config.json's head_dim ", rope.head_dim, " gives ",
                                bands));
  }
  const auto near = [](double file_value, double config_value) {
    return std::abs(file_value - config_value) <=
           kCalibrationRopeTolerance * std::abs(config_value);
  };
  if (calibration.omega.has_value()) {
    const std::vector<float>& omega = *calibration.omega;
    if (static_cast<int>(omega.size()) != bands) {
      return Invalid(absl::StrCat("calibration's omega has ", omega.size(), " values, config.json ",
                                  "gives ", bands, " bands"));
    }
    for (int f = 0; f < bands; ++f) {
      if (!near(omega[f], rope.inv_freq[f])) {
        return Invalid(absl::StrCat("calibration's omega[", f, "] is ", omega[f],
                                    ", config.json's RoPE (", rope.rope_type, ") gives ",
                                    rope.inv_freq[f]));
      }
    }
  }
  if (calibration.freq_scale_sq.has_value()) {
    const std::vector<float>& scale_sq = *calibration.freq_scale_sq;
    const double expected = rope.attention_factor * rope.attention_factor;
    if (static_cast<int>(scale_sq.size()) != bands) {
      return Invalid(absl::StrCat("calibration's freq_scale_sq has ", scale_sq.size(),
                                  " values, config.json gives ", bands, " bands"));
    }
    for (int f = 0; f < bands; ++f) {
      if (!near(scale_sq[f], expected)) {
        return Invalid(absl::StrCat("calibration's freq_scale_sq[", f, "] is ", scale_sq[f],
                                    ", config.json's RoPE (", rope.rope_type, ", attention factor ",
                                    rope.attention_factor, ") gives ", expected));
      }
    }
  }
  return absl::OkStatus();
}

void FillCalibrationRope(const RopeTables& rope, Calibration* calibration) {
  const int bands = calibration->bands;
  if (bands < 0 || static_cast<size_t>(bands) > rope.inv_freq.size()) return;
  if (!calibration->omega.has_value()) {
    calibration->omega.emplace(rope.inv_freq.begin(), rope.inv_freq.begin() + bands);
  }
  if (!calibration->freq_scale_sq.has_value()) {
    calibration->freq_scale_sq.emplace(
        bands, static_cast<float>(rope.attention_factor * rope.attention_factor));
  }
}

}  // namespace kvtier::triattention
