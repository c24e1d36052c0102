// Calibration loaders. The official file is converted the way TensorRT-LLM converts it
// (E_q = q_mean_real + i q_mean_imag, E_q_norm = q_abs_mean, missing heads zero), but more
// strictly: TensorRT-LLM trusts whatever torch.load returns, while here every key, dtype, shape and
// value is checked and a file that disagrees with itself (a sampled head without stats, stats
// nobody sampled, a head_dim that is not 2 * F) is refused rather than half-used.
// Each loader first settles the geometry (L, H, F) from shapes alone, checks it against the bounds,
// and only then allocates and copies, so a hostile header cannot make us allocate more than
// kMaxCalibrationValues floats per array.
#include "triattention/calibration.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "common/annotate.h"
#include "common/coding.h"
#include "common/file_reading.h"
#include "common/status_macros.h"
#include "triattention/torch_pickle.h"

namespace kvtier::triattention {
namespace {

constexpr uint64_t kMaxSafetensorsHeaderBytes = uint64_t{16} << 20;
constexpr int kMaxSafetensorsJsonDepth = 3;  // {"name": {"shape": [...]}}

absl::Status Invalid(absl::string_view what) { return absl::InvalidArgumentError(what); }

std::string ShapeString(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

absl::Status CheckFileBytes(size_t bytes) {
  if (bytes > kMaxCalibrationFileBytes) {
    return Invalid(absl::StrCat("calibration file of ", bytes,
                                " bytes is larger than the limit of ", kMaxCalibrationFileBytes,
                                " bytes (1 GiB)"));
  }
  return absl::OkStatus();
}

// Checks L, H, F against the bounds and sizes the arrays (zero-filled, no head present).
absl::Status Allocate(int64_t layers, int64_t heads, int64_t bands, absl::string_view source,
                      Calibration* c) {
  if (layers < 1 || layers > kMaxCalibrationLayers) {
    return Invalid(
        absl::StrCat(source, " has ", layers, " layers; expected 1 to ", kMaxCalibrationLayers));
  }
  if (heads < 1 || heads > kMaxCalibrationHeads) {
    return Invalid(
        absl::StrCat(source, " has ", heads, " query heads; expected 1 to ", kMaxCalibrationHeads));
  }
  if (bands < 1 || bands > kMaxCalibrationBands) {
    return Invalid(absl::StrCat(source, " has ", bands, " frequency bands; expected 1 to ",
                                kMaxCalibrationBands, " (head_dim up to ", 2 * kMaxCalibrationBands,
                                ")"));
  }
  const int64_t values = layers * heads * bands;
  if (values > kMaxCalibrationValues) {
    return Invalid(absl::StrCat(source, " has ", layers, " layers x ", heads, " heads x ", bands,
                                " bands = ", values, " values per statistic; the limit is ",
                                kMaxCalibrationValues));
  }
  c->layers = static_cast<int>(layers);
  c->heads = static_cast<int>(heads);
  c->bands = static_cast<int>(bands);
  c->head_dim = static_cast<int>(2 * bands);
  c->rope_style = "half";
  c->q_mean_real.assign(values, 0.0f);
  c->q_mean_imag.assign(values, 0.0f);
  c->q_abs_mean.assign(values, 0.0f);
  c->present.assign(layers * heads, 0);
  return absl::OkStatus();
}

// Position `i` of a row-major array of `shape`, as "[a][b][c]".
std::string IndexString(size_t i, absl::Span<const int64_t> shape) {
  std::string out;
  for (size_t d = shape.size(); d-- > 0;) {
    const uint64_t size = static_cast<uint64_t>(std::max<int64_t>(shape[d], 1));
    out = absl::StrCat("[", i % size, "]", out);
    i /= size;
  }
  return out;
}

// Every value finite; with `magnitude`, also >= 0 (a mean of |q_f| cannot be negative).
absl::Status CheckValues(absl::Span<const float> values, absl::Span<const int64_t> shape,
                         absl::string_view what, bool magnitude) {
  for (size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) {
      return Invalid(absl::StrCat("calibration tensor ", what, " has the non-finite value ",
                                  values[i], " at ", IndexString(i, shape)));
    }
    if (magnitude && values[i] < 0) {
      return Invalid(absl::StrCat("calibration tensor ", what, " has the negative value ",
                                  values[i], " at ", IndexString(i, shape),
                                  "; a mean magnitude is never negative"));
    }
  }
  return absl::OkStatus();
}

// --- torch.save forms -----------------------------------------------------------------------

// The tensor under `key` of dict `parent`, checked for dtype and rank. `where` names `parent`
// in messages ("stats['layer00_head01']"); empty for the top level.
absl::StatusOr<const TorchTensor*> FindTensor(const PickleValue& parent, absl::string_view key,
                                              absl::string_view where, TorchDType dtype,
                                              size_t rank) {
  const PickleValue* v = parent.Find(key);
  if (v == nullptr) {
    return Invalid(absl::StrCat("calibration entry ", where.empty() ? "(top level)" : where,
                                " has no '", key, "' tensor"));
  }
  const std::string what = where.empty() ? std::string(key) : absl::StrCat(where, "['", key, "']");
  if (v->kind != PickleValue::Kind::kTensor) {
    return Invalid(
        absl::StrCat("calibration entry ", what, " is a ", v->KindName(), ", not a tensor"));
  }
  if (v->tensor->dtype != dtype) {
    return Invalid(absl::StrCat("calibration tensor ", what, " is ",
                                TorchDTypeName(v->tensor->dtype), "; expected ",
                                TorchDTypeName(dtype)));
  }
  if (v->tensor->shape.size() != rank) {
    return Invalid(absl::StrCat("calibration tensor ", what, " has shape ",
                                ShapeString(v->tensor->shape), "; expected ", rank, " dimensions"));
  }
  return v->tensor.get();
}

// "layerLL_headHH" as the official files write it (printf "layer%02d_head%02d").
bool ParseHeadKey(absl::string_view key, int* layer, int* head) {
  auto number = [](absl::string_view digits, int* out) {
    if (digits.size() < 2 || digits.size() > 4) return false;
    if (digits.find_first_not_of("0123456789") != absl::string_view::npos) return false;
    if (!absl::SimpleAtoi(digits, out)) return false;
    return absl::StrFormat("%02d", *out) == digits;  // canonical: no extra leading zeros
  };
  if (!absl::ConsumePrefix(&key, "layer")) return false;
  const size_t sep = key.find("_head");
  if (sep == absl::string_view::npos) return false;
  return number(key.substr(0, sep), layer) && number(key.substr(sep + 5), head);
}

struct StatsEntry {
  int layer = 0;
  int head = 0;
  std::string key;
  const PickleValue* value = nullptr;
};

absl::StatusOr<Calibration> ConvertOfficial(const PickleValue& root) {
  const PickleValue* metadata = root.Find("metadata");
  const PickleValue* stats = root.Find("stats");
  if (metadata == nullptr || metadata->kind != PickleValue::Kind::kDict) {
    return Invalid(absl::StrCat("official calibration file has ",
                                metadata == nullptr
                                    ? "no 'metadata'"
                                    : absl::StrCat("a ", metadata->KindName(), " as 'metadata'"),
                                "; expected a dict"));
  }
  if (stats->kind != PickleValue::Kind::kDict) {
    return Invalid(absl::StrCat("official calibration file has a ", stats->KindName(),
                                " as 'stats'; expected a dict"));
  }
  Calibration c;
  // Metadata.
  const PickleValue* rope_style = metadata->Find("rope_style");
  if (rope_style == nullptr || rope_style->kind != PickleValue::Kind::kString) {
    return Invalid(absl::StrCat("calibration metadata has ",
                                rope_style == nullptr
                                    ? "no rope_style"
                                    : absl::StrCat("a ", rope_style->KindName(), " as rope_style"),
                                "; expected \"half\""));
  }
  if (rope_style->text != "half") {
    return Invalid(absl::StrCat("calibration metadata rope_style is '",
                                absl::CHexEscape(rope_style->text),
                                "'; only 'half' (NeoX pairing q[f] + i q[f + F]) is supported"));
  }
  int64_t head_dim = 0;
  if (const PickleValue* v = metadata->Find("head_dim"); v != nullptr) {
    if (v->kind != PickleValue::Kind::kInt || v->int_value < 2 || v->int_value % 2 != 0 ||
        v->int_value > 2 * kMaxCalibrationBands) {
      return Invalid(absl::StrCat("calibration metadata head_dim is ",
                                  v->kind == PickleValue::Kind::kInt
                                      ? absl::StrCat(v->int_value)
                                      : absl::StrCat("a ", v->KindName()),
                                  "; expected an even int from 2 to ", 2 * kMaxCalibrationBands));
    }
    head_dim = v->int_value;
  }
  if (const PickleValue* v = metadata->Find("model_name"); v != nullptr) {
    if (v->kind == PickleValue::Kind::kString) {
      c.model_name = v->text;
    } else if (v->kind != PickleValue::Kind::kNone) {
      return Invalid(
          absl::StrCat("calibration metadata model_name is a ", v->KindName(), "; expected a str"));
    }
  }

  // Stats keys; F from the shapes.
  std::vector<StatsEntry> entries;
  entries.reserve(stats->dict->entries.size());
  absl::flat_hash_map<int64_t, size_t> by_head;  // layer * kMaxCalibrationHeads + head -> entry
  int64_t bands = -1;
  std::string bands_from;
  for (const auto& [key, value] : stats->dict->entries) {
    StatsEntry entry;
    if (key->kind != PickleValue::Kind::kString ||
        !ParseHeadKey(key->text, &entry.layer, &entry.head) ||
        entry.layer >= kMaxCalibrationLayers || entry.head >= kMaxCalibrationHeads) {
      return Invalid(
          absl::StrCat("calibration stats key ",
                       key->kind == PickleValue::Kind::kString
                           ? absl::StrCat("'", absl::CHexEscape(key->text), "'")
                           : absl::StrCat(key->int_value),
                       " is not of the form layerLL_headHH (zero-padded to two digits, layer < ",
                       kMaxCalibrationLayers, ", head < ", kMaxCalibrationHeads, ")"));
    }
    entry.key = key->text;
    entry.value = value;
    const std::string where = absl::StrCat("stats['", entry.key, "']");
    if (value->kind != PickleValue::Kind::kDict) {
      return Invalid(
          absl::StrCat("calibration entry ", where, " is a ", value->KindName(), ", not a dict"));
    }
    for (absl::string_view name : {"q_mean_real", "q_mean_imag", "q_abs_mean"}) {
      KVTIER_ASSIGN_OR_RETURN(const TorchTensor* t,
                              FindTensor(*value, name, where, TorchDType::kFloat32, 1));
      if (bands < 0) {
        bands = t->shape[0];
        bands_from = absl::StrCat(where, "['", name, "']");
        if (head_dim != 0 && bands * 2 != head_dim) {
          return Invalid(absl::StrCat("calibration metadata head_dim is ", head_dim, ", but ",
                                      bands_from, " has ", bands, " frequency bands (head_dim ",
                                      2 * bands, ")"));
        }
      } else if (t->shape[0] != bands) {
        return Invalid(absl::StrCat("calibration tensor ", where, "['", name, "'] has ",
                                    t->shape[0], " values, but ", bands_from, " has ", bands));
      }
    }
    by_head.emplace(int64_t{entry.layer} * kMaxCalibrationHeads + entry.head, entries.size());
    entries.push_back(std::move(entry));
  }
  if (entries.empty()) return Invalid("calibration stats dict is empty");

  // sampled_heads, when given, must name exactly the stats entries.
  if (const PickleValue* sampled = metadata->Find("sampled_heads"); sampled != nullptr) {
    if (sampled->kind != PickleValue::Kind::kList && sampled->kind != PickleValue::Kind::kTuple) {
      return Invalid(absl::StrCat("calibration metadata sampled_heads is a ", sampled->KindName(),
                                  "; expected a list of [layer, head]"));
    }
    absl::flat_hash_set<int64_t> seen;
    for (size_t i = 0; i < sampled->items.size(); ++i) {
      const PickleValue* pair = sampled->items[i];
      const bool well_formed =
          (pair->kind == PickleValue::Kind::kList || pair->kind == PickleValue::Kind::kTuple) &&
          pair->items.size() == 2 && pair->items[0]->kind == PickleValue::Kind::kInt &&
          pair->items[1]->kind == PickleValue::Kind::kInt;
      if (!well_formed) {
        return Invalid(absl::StrCat("calibration metadata sampled_heads[", i, "] is a ",
                                    pair->KindName(), " of ", pair->items.size(),
                                    " items; expected [layer, head]"));
      }
      const int64_t layer = pair->items[0]->int_value;
      const int64_t head = pair->items[1]->int_value;
      if (layer < 0 || layer >= kMaxCalibrationLayers || head < 0 || head >= kMaxCalibrationHeads) {
        return Invalid(absl::StrCat("calibration metadata sampled_heads[", i, "] is [", layer, ", ",
                                    head, "]; layers go up to ", kMaxCalibrationLayers - 1,
                                    " and heads up to ", kMaxCalibrationHeads - 1));
      }
      const int64_t id = layer * kMaxCalibrationHeads + head;
      if (!seen.insert(id).second) {
        return Invalid(absl::StrCat("calibration metadata sampled_heads lists [", layer, ", ", head,
                                    "] twice"));
      }
      if (!by_head.contains(id)) {
        return Invalid(
            absl::StrFormat("calibration metadata sampled_heads lists [%d, %d], but stats has no "
                            "'layer%02d_head%02d' entry",
                            layer, head, layer, head));
      }
    }
    for (const StatsEntry& entry : entries) {
      if (!seen.contains(int64_t{entry.layer} * kMaxCalibrationHeads + entry.head)) {
        return Invalid(absl::StrCat("calibration stats entry '", entry.key,
                                    "' is not listed in metadata sampled_heads"));
      }
    }
  }

  int max_layer = 0;
  int max_head = 0;
  for (const StatsEntry& entry : entries) {
    max_layer = std::max(max_layer, entry.layer);
    max_head = std::max(max_head, entry.head);
  }
  KVTIER_RETURN_IF_ERROR(
      Allocate(max_layer + 1, max_head + 1, bands, "official calibration file", &c));
  const std::vector<int64_t> band_shape = {bands};
  for (const StatsEntry& entry : entries) {
    const std::string where = absl::StrCat("stats['", entry.key, "']");
    const size_t base =
        (static_cast<size_t>(entry.layer) * c.heads + entry.head) * static_cast<size_t>(bands);
    struct Target {
      const char* name;
      std::vector<float>* out;
      bool magnitude;
    };
    for (const Target& target : {Target{"q_mean_real", &c.q_mean_real, false},
                                 Target{"q_mean_imag", &c.q_mean_imag, false},
                                 Target{"q_abs_mean", &c.q_abs_mean, true}}) {
      KVTIER_ASSIGN_OR_RETURN(const TorchTensor* t, FindTensor(*entry.value, target.name, where,
                                                               TorchDType::kFloat32, 1));
      KVTIER_ASSIGN_OR_RETURN(std::vector<float> values, TensorToFloats(*t));
      KVTIER_RETURN_IF_ERROR(CheckValues(
          values, band_shape, absl::StrCat(where, "['", target.name, "']"), target.magnitude));
      std::copy(values.begin(), values.end(), target.out->begin() + base);
    }
    c.present[static_cast<size_t>(entry.layer) * c.heads + entry.head] = 1;
  }
  return c;
}

absl::StatusOr<Calibration> ConvertFlat(const PickleValue& root) {
  for (absl::string_view key : {"E_q", "E_q_norm", "omega", "freq_scale_sq"}) {
    if (root.Find(key) == nullptr) {
      return Invalid(absl::StrCat("flat calibration file has no '", key,
                                  "'; it needs E_q, E_q_norm, omega and freq_scale_sq"));
    }
  }
  constexpr absl::string_view kWhere = "";
  KVTIER_ASSIGN_OR_RETURN(const TorchTensor* e_q,
                          FindTensor(root, "E_q", kWhere, TorchDType::kComplex64, 3));
  KVTIER_ASSIGN_OR_RETURN(const TorchTensor* e_q_norm,
                          FindTensor(root, "E_q_norm", kWhere, TorchDType::kFloat32, 3));
  KVTIER_ASSIGN_OR_RETURN(const TorchTensor* omega,
                          FindTensor(root, "omega", kWhere, TorchDType::kFloat32, 1));
  KVTIER_ASSIGN_OR_RETURN(const TorchTensor* freq_scale_sq,
                          FindTensor(root, "freq_scale_sq", kWhere, TorchDType::kFloat32, 1));
  const std::vector<int64_t>& shape = e_q->shape;
  if (e_q_norm->shape != shape) {
    return Invalid(absl::StrCat("calibration tensor E_q_norm has shape ",
                                ShapeString(e_q_norm->shape), ", but E_q has ",
                                ShapeString(shape)));
  }
  for (const auto& [name, t] : {std::pair{"omega", omega}, {"freq_scale_sq", freq_scale_sq}}) {
    if (t->shape[0] != shape[2]) {
      return Invalid(absl::StrCat("calibration tensor ", name, " has shape ", ShapeString(t->shape),
                                  ", but E_q has ", shape[2], " frequency bands (shape ",
                                  ShapeString(shape), ")"));
    }
  }
  Calibration c;
  KVTIER_RETURN_IF_ERROR(Allocate(shape[0], shape[1], shape[2], "calibration tensor E_q", &c));
  KVTIER_ASSIGN_OR_RETURN(std::vector<float> complex_values, TensorToFloats(*e_q));
  KVTIER_RETURN_IF_ERROR(CheckValues(complex_values, {shape[0], shape[1], shape[2], int64_t{2}},
                                     "E_q (as [L][H][F][real, imag])", false));
  for (size_t i = 0; i < c.q_mean_real.size(); ++i) {
    c.q_mean_real[i] = complex_values[2 * i];
    c.q_mean_imag[i] = complex_values[2 * i + 1];
  }
  KVTIER_ASSIGN_OR_RETURN(c.q_abs_mean, TensorToFloats(*e_q_norm));
  KVTIER_RETURN_IF_ERROR(CheckValues(c.q_abs_mean, shape, "E_q_norm", true));
  KVTIER_ASSIGN_OR_RETURN(c.omega, TensorToFloats(*omega));
  KVTIER_RETURN_IF_ERROR(CheckValues(*c.omega, omega->shape, "omega", false));
  KVTIER_ASSIGN_OR_RETURN(c.freq_scale_sq, TensorToFloats(*freq_scale_sq));
  KVTIER_RETURN_IF_ERROR(
      CheckValues(*c.freq_scale_sq, freq_scale_sq->shape, "freq_scale_sq", false));
  std::fill(c.present.begin(), c.present.end(), 1);
  return c;
}

// --- safetensors ----------------------------------------------------------------------------

struct SafetensorsTensor {
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // within the data region
  uint64_t end = 0;
};

absl::StatusOr<uint64_t> SafetensorsDTypeBytes(absl::string_view dtype) {
  static const std::map<std::string, uint64_t, std::less<>> kBytes = {
      {"F64", 8}, {"F32", 4}, {"F16", 2},  {"BF16", 2},    {"I64", 8},
      {"I32", 4}, {"I16", 2}, {"I8", 1},   {"U64", 8},     {"U32", 4},
      {"U16", 2}, {"U8", 1},  {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  auto it = kBytes.find(dtype);
  if (it == kBytes.end()) {
    return Invalid(absl::StrCat("safetensors dtype '", absl::CHexEscape(dtype), "' is unknown"));
  }
  return it->second;
}

// Nesting depth of a JSON text, counted outside strings; stops early past `limit`.
int JsonDepth(absl::string_view text, int limit) {
  int depth = 0;
  int deepest = 0;
  bool in_string = false;
  bool escaped = false;
  for (char ch : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (ch == '\\') {
        escaped = true;
      } else if (ch == '"') {
        in_string = false;
      }
    } else if (ch == '"') {
      in_string = true;
    } else if (ch == '{' || ch == '[') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) break;
    } else if (ch == '}' || ch == ']') {
      --depth;
    }
  }
  return deepest;
}

absl::Status ParseSafetensorsHeader(absl::Span<const uint8_t> file,
                                    std::map<std::string, SafetensorsTensor>* tensors,
                                    std::map<std::string, std::string>* metadata,
                                    absl::Span<const uint8_t>* data) {
  if (file.size() < 8) {
    return Invalid(absl::StrCat("safetensors file of ", file.size(),
                                " bytes is too short for its 8-byte header length"));
  }
  const uint64_t header_bytes = DecodeFixed64(file.data());
  if (header_bytes > kMaxSafetensorsHeaderBytes || header_bytes > file.size() - 8) {
    return Invalid(
        absl::StrCat("safetensors header length ", header_bytes, " exceeds ",
                     header_bytes > kMaxSafetensorsHeaderBytes
                         ? absl::StrCat("the limit of ", kMaxSafetensorsHeaderBytes)
                         : absl::StrCat("the ", file.size() - 8, " bytes after the length field"),
                     " (not a safetensors file, or a truncated one)"));
  }
  const absl::string_view text(reinterpret_cast<const char*>(file.data() + 8), header_bytes);
  if (text.empty() || text[0] != '{') {
    return Invalid("safetensors header does not start with '{'");
  }
  if (JsonDepth(text, kMaxSafetensorsJsonDepth) > kMaxSafetensorsJsonDepth) {
    return Invalid(
        absl::StrCat("safetensors header nests deeper than ", kMaxSafetensorsJsonDepth, " levels"));
  }
  // Duplicate keys are an error (nlohmann would keep the last one silently).
  std::vector<absl::flat_hash_set<std::string>> open_objects;
  std::string duplicate;
  const nlohmann::json::parser_callback_t on_event =
      [&](int /*depth*/, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
        if (event == nlohmann::json::parse_event_t::object_start) {
          open_objects.emplace_back();
        } else if (event == nlohmann::json::parse_event_t::object_end) {
          if (!open_objects.empty()) open_objects.pop_back();
        } else if (event == nlohmann::json::parse_event_t::key && !open_objects.empty() &&
                   parsed.is_string()) {
          const std::string& key = parsed.get_ref<const std::string&>();
          if (!open_objects.back().insert(key).second && duplicate.empty()) duplicate = key;
        }
        return true;
      };
  const nlohmann::json header =
      nlohmann::json::parse(text.begin(), text.end(), on_event, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) {
    return Invalid("safetensors header is not a valid JSON object");
  }
  if (!duplicate.empty()) {
    return Invalid(
        absl::StrCat("safetensors header has the key '", absl::CHexEscape(duplicate), "' twice"));
  }
  *data = file.subspan(8 + header_bytes);
  std::vector<std::pair<uint64_t, std::string>> order;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) return Invalid("safetensors __metadata__ is not an object");
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) {
          return Invalid(absl::StrCat("safetensors __metadata__ value of '", absl::CHexEscape(key),
                                      "' is not a string"));
        }
        (*metadata)[key] = value.get<std::string>();
      }
      continue;
    }
    const std::string what = absl::StrCat("safetensors tensor '", absl::CHexEscape(name), "'");
    if (!entry.is_object() || entry.size() != 3 || !entry.contains("dtype") ||
        !entry.contains("shape") || !entry.contains("data_offsets")) {
      return Invalid(absl::StrCat(what, " is not exactly {dtype, shape, data_offsets}"));
    }
    const nlohmann::json& dtype = entry["dtype"];
    const nlohmann::json& shape = entry["shape"];
    const nlohmann::json& offsets = entry["data_offsets"];
    if (!dtype.is_string()) return Invalid(absl::StrCat(what, " has a non-string dtype"));
    if (!shape.is_array() || shape.size() > 8) {
      return Invalid(absl::StrCat(what, " has a shape that is not an array of up to 8 sizes"));
    }
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
        !offsets[1].is_number_unsigned()) {
      return Invalid(absl::StrCat(what, " has data_offsets that are not [begin, end]"));
    }
    SafetensorsTensor tensor;
    tensor.dtype = dtype.get<std::string>();
    KVTIER_ASSIGN_OR_RETURN(const uint64_t element_bytes, SafetensorsDTypeBytes(tensor.dtype));
    uint64_t elements = 1;
    for (const nlohmann::json& size : shape) {
      if (!size.is_number_unsigned()) {
        return Invalid(absl::StrCat(what, " has a shape entry ", size.dump(),
                                    " that is not a non-negative integer"));
      }
      const uint64_t n = size.get<uint64_t>();
      if (n != 0 && elements > data->size() / n) {
        return Invalid(absl::StrCat(what, " has shape ", shape.dump(),
                                    ", larger than the data region of ", data->size(), " bytes"));
      }
      elements *= n;
      tensor.shape.push_back(static_cast<int64_t>(n));
    }
    tensor.begin = offsets[0].get<uint64_t>();
    tensor.end = offsets[1].get<uint64_t>();
    if (tensor.begin > tensor.end || tensor.end > data->size()) {
      return Invalid(absl::StrCat(what, " has data_offsets [", tensor.begin, ", ", tensor.end,
                                  "] outside the data region of ", data->size(), " bytes"));
    }
    if (tensor.end - tensor.begin != elements * element_bytes) {
      return Invalid(absl::StrCat(what, " spans ", tensor.end - tensor.begin, " bytes, but ",
                                  tensor.dtype, " ", ShapeString(tensor.shape), " needs ",
                                  elements * element_bytes));
    }
    order.emplace_back(tensor.begin, name);
    tensors->emplace(name, std::move(tensor));
  }
  // The tensors tile the data region: in offset order, each starts where the previous ended.
  std::sort(order.begin(), order.end());
  uint64_t expected = 0;
  std::string previous = "the start of the data region";
  for (const auto& [begin, name] : order) {
    const SafetensorsTensor& t = tensors->at(name);
    if (t.begin != expected) {
      return Invalid(absl::StrCat("safetensors tensor '", absl::CHexEscape(name), "' starts at ",
                                  t.begin, ", but ", previous, " ends at ", expected,
                                  t.begin < expected ? " (overlap)" : " (gap)"));
    }
    expected = t.end;
    previous = absl::StrCat("tensor '", absl::CHexEscape(name), "'");
  }
  if (expected != data->size()) {
    return Invalid(absl::StrCat("safetensors data region holds ", data->size(),
                                " bytes, but its tensors cover ", expected));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Calibration> ParseTorchCalibration(absl::Span<const uint8_t> file) {
  KVTIER_RETURN_IF_ERROR(CheckFileBytes(file.size()));
  KVTIER_ASSIGN_OR_RETURN(TorchCheckpoint checkpoint, TorchCheckpoint::Read(file));
  const PickleValue& root = checkpoint.root();
  if (root.kind != PickleValue::Kind::kDict) {
    return Invalid(
        absl::StrCat("torch calibration file holds a ", root.KindName(), "; expected a dict"));
  }
  if (root.Find("stats") != nullptr) return ConvertOfficial(root);
  if (root.Find("E_q") != nullptr) return ConvertFlat(root);
  std::vector<std::string> keys;
  for (const auto& [key, value] : root.dict->entries) {
    if (keys.size() == 8) {
      keys.push_back("...");
      break;
    }
    keys.push_back(key->kind == PickleValue::Kind::kString
                       ? absl::StrCat("'", absl::CHexEscape(key->text), "'")
                       : absl::StrCat(key->int_value));
  }
  return Invalid(
      absl::StrCat("torch calibration file has neither 'stats' (official form) nor 'E_q' (flat "
                   "form); its keys: ",
                   keys.empty() ? "none" : absl::StrJoin(keys, ", ")));
}

absl::StatusOr<Calibration> ParseSafetensorsCalibration(absl::Span<const uint8_t> file) {
  KVTIER_RETURN_IF_ERROR(CheckFileBytes(file.size()));
  std::map<std::string, SafetensorsTensor> tensors;
  std::map<std::string, std::string> metadata;
  absl::Span<const uint8_t> data;
  KVTIER_RETURN_IF_ERROR(ParseSafetensorsHeader(file, &tensors, &metadata, &data));
  auto find = [&](absl::string_view name, size_t rank) -> absl::StatusOr<const SafetensorsTensor*> {
    auto it = tensors.find(std::string(name));
    if (it == tensors.end()) {
      return Invalid(absl::StrCat("safetensors calibration file has no '", name,
                                  "' tensor; it needs E_q_real, E_q_imag, E_q_norm, omega and "
                                  "freq_scale_sq"));
    }
    const SafetensorsTensor& t = it->second;
    if (t.dtype != "F32") {
      return Invalid(absl::StrCat("calibration tensor ", name, " is ", t.dtype, "; expected F32"));
    }
    if (t.shape.size() != rank) {
      return Invalid(absl::StrCat("calibration tensor ", name, " has shape ", ShapeString(t.shape),
                                  "; expected ", rank, " dimensions"));
    }
    return &t;
  };
  KVTIER_ASSIGN_OR_RETURN(const SafetensorsTensor* real, find("E_q_real", 3));
  KVTIER_ASSIGN_OR_RETURN(const SafetensorsTensor* imag, find("E_q_imag", 3));
  KVTIER_ASSIGN_OR_RETURN(const SafetensorsTensor* norm, find("E_q_norm", 3));
  KVTIER_ASSIGN_OR_RETURN(const SafetensorsTensor* omega, find("omega", 1));
  KVTIER_ASSIGN_OR_RETURN(const SafetensorsTensor* scale, find("freq_scale_sq", 1));
  const std::vector<int64_t>& shape = real->shape;
  for (const auto& [name, t] : {std::pair{"E_q_imag", imag}, {"E_q_norm", norm}}) {
    if (t->shape != shape) {
      return Invalid(absl::StrCat("calibration tensor ", name, " has shape ", ShapeString(t->shape),
                                  ", but E_q_real has ", ShapeString(shape)));
    }
  }
  for (const auto& [name, t] : {std::pair{"omega", omega}, {"freq_scale_sq", scale}}) {
    if (t->shape[0] != shape[2]) {
      return Invalid(absl::StrCat("calibration tensor ", name, " has shape ", ShapeString(t->shape),
                                  ", but E_q_real has ", shape[2], " frequency bands (shape ",
                                  ShapeString(shape), ")"));
    }
  }
  Calibration c;
  KVTIER_RETURN_IF_ERROR(Allocate(shape[0], shape[1], shape[2], "calibration tensor E_q_real", &c));
  auto copy = [&](const SafetensorsTensor& t, std::vector<float>* out) {
    out->resize((t.end - t.begin) / sizeof(float));
    std::memcpy(out->data(), data.data() + t.begin, t.end - t.begin);
  };
  copy(*real, &c.q_mean_real);
  copy(*imag, &c.q_mean_imag);
  copy(*norm, &c.q_abs_mean);
  c.omega.emplace();
  copy(*omega, &*c.omega);
  c.freq_scale_sq.emplace();
  copy(*scale, &*c.freq_scale_sq);
  KVTIER_RETURN_IF_ERROR(CheckValues(c.q_mean_real, shape, "E_q_real", false));
  KVTIER_RETURN_IF_ERROR(CheckValues(c.q_mean_imag, shape, "E_q_imag", false));
  KVTIER_RETURN_IF_ERROR(CheckValues(c.q_abs_mean, shape, "E_q_norm", true));
  KVTIER_RETURN_IF_ERROR(CheckValues(*c.omega, omega->shape, "omega", false));
  KVTIER_RETURN_IF_ERROR(CheckValues(*c.freq_scale_sq, scale->shape, "freq_scale_sq", false));
  std::fill(c.present.begin(), c.present.end(), 1);

  if (auto it = metadata.find("rope_style"); it != metadata.end() && it->second != "half") {
    return Invalid(absl::StrCat("safetensors metadata rope_style is '",
                                absl::CHexEscape(it->second),
                                "'; only 'half' (NeoX pairing q[f] + i q[f + F]) is supported"));
  }
  if (auto it = metadata.find("head_dim"); it != metadata.end()) {
    int head_dim = 0;
    if (!absl::SimpleAtoi(it->second, &head_dim) || head_dim != c.head_dim) {
      return Invalid(absl::StrCat("safetensors metadata head_dim is '",
                                  absl::CHexEscape(it->second), "', but the tensors have ", c.bands,
                                  " frequency bands (head_dim ", c.head_dim, ")"));
    }
  }
  if (auto it = metadata.find("model_name"); it != metadata.end()) c.model_name = it->second;
  return c;
}

absl::StatusOr<Calibration> LoadCalibration(const std::string& path) {
  KVTIER_ASSIGN_OR_RETURN(const std::string file,
                          ReadRegularFile(path, kMaxCalibrationFileBytes, "calibration file"));
  const absl::Span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(file.data()), file.size());
  absl::StatusOr<Calibration> result;
  if (bytes.size() >= 4 && bytes[0] == 'P' && bytes[1] == 'K' &&
      ((bytes[2] == 3 && bytes[3] == 4) || (bytes[2] == 5 && bytes[3] == 6))) {
    result = ParseTorchCalibration(bytes);
  } else if (bytes.size() >= 4 && bytes[0] == 0x80 && bytes[1] == 0x02 && bytes[2] == 0x8a &&
             bytes[3] == 0x0a) {
    // PROTO 2, then LONG1 of 10 bytes: the magic number that legacy torch.save files start with.
    return absl::InvalidArgumentError(absl::StrCat(
        "calibration file '", path,
        "' is a legacy (pre-zip, torch < 1.6) torch.save pickle; save it again with a current "
        "torch"));
  } else {
    result = ParseSafetensorsCalibration(bytes);
  }
  if (!result.ok()) {
    return Annotate(result.status(), absl::StrCat("calibration file '", path, "'"));
  }
  return result;
}

absl::Status CheckGeometry(const Calibration& calibration, int layers, int query_heads,
                           int head_dim) {
  if (layers <= 0 || query_heads <= 0 || head_dim <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("model geometry must be positive: ", layers,
                                                   " layers, ", query_heads,
                                                   " query heads, head_dim ", head_dim));
  }
  if (calibration.layers != layers) {
    return absl::InvalidArgumentError(
        absl::StrCat("calibration has ", calibration.layers, " layers, the model ", layers));
  }
  if (calibration.heads != query_heads) {
    return absl::InvalidArgumentError(absl::StrCat("calibration has ", calibration.heads,
                                                   " query heads, the model ", query_heads));
  }
  if (2 * calibration.bands != head_dim) {
    return absl::InvalidArgumentError(absl::StrCat("calibration has head_dim ",
                                                   2 * calibration.bands, " (", calibration.bands,
                                                   " frequency bands), the model ", head_dim));
  }
  return absl::OkStatus();
}

}  // namespace kvtier::triattention
