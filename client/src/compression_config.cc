// ParseCompressionConfig / LoadCompressionConfig: one compression configuration block, YAML or
// JSON (JSON is YAML to yaml-cpp), read into CompressionConfig.
//
// The block is a flat mapping of scalars, optionally under a top-level "compression_config" key.
// Every key lands in `options` as its text, so methods registered outside the library read their
// own settings from there; the keys the built-in methods use are also checked and typed here, so a
// typo in a number or an enumeration fails at load time with the key and the value, before any
// method is built. Unknown algorithms are left to CreateCompressionMethod, which knows the
// registry at the time the method is built.
#include <cerrno>
#include <cstring>
#include <sstream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/annotate.h"
#include "common/file_reading.h"
#include "kvtier/compression.h"
#include "triattention/evictor.h"
#include "yaml-cpp/yaml.h"

namespace kvtier {
namespace {

constexpr char kWrapperKey[] = "compression_config";

std::string NodeKind(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
      return "nothing";
    case YAML::NodeType::Scalar:
      return "a scalar";
    case YAML::NodeType::Sequence:
      return "a sequence";
    case YAML::NodeType::Map:
      return "a mapping";
    default:
      return "an undefined node";
  }
}

std::string Where(const YAML::Node& node) {
  const YAML::Mark mark = node.Mark();
  if (mark.line < 0) return "";
  return absl::StrCat(" (line ", mark.line + 1, ")");
}

absl::Status Invalid(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("compression config: ", what));
}

// A count setting (budget, beta): a whole number >= 1.
absl::StatusOr<int64_t> PositiveInteger(const std::string& key, const std::string& text) {
  int64_t value = 0;
  if (!absl::SimpleAtoi(text, &value)) {
    return Invalid(absl::StrCat(key, " '", text, "' is not a whole number"));
  }
  if (value < 1) return Invalid(absl::StrCat(key, " ", value, " must be at least 1"));
  return value;
}

absl::StatusOr<std::string> OneOf(const std::string& key, const std::string& text,
                                  std::initializer_list<const char*> accepted) {
  for (const char* name : accepted) {
    if (text == name) return text;
  }
  return Invalid(absl::StrCat(key, " '", text, "' is not one of ", absl::StrJoin(accepted, ", ")));
}

// Fills the typed fields of `config` from its options.
absl::Status ReadKnownKeys(CompressionConfig& config) {
  const auto& options = config.options;
  auto text = [&](const char* key) -> const std::string* {
    auto it = options.find(key);
    return it == options.end() ? nullptr : &it->second;
  };
  const std::string* algorithm = text("algorithm");
  if (algorithm == nullptr || algorithm->empty()) {
    return Invalid(absl::StrCat(
        "missing 'algorithm' (registered: ", absl::StrJoin(CompressionMethodNames(), ", "), ")"));
  }
  config.algorithm = *algorithm;
  if (const std::string* v = text("budget")) {
    absl::StatusOr<int64_t> budget = PositiveInteger("budget", *v);
    if (!budget.ok()) return budget.status();
    config.budget = *budget;
  }
  if (const std::string* v = text("beta")) {
    absl::StatusOr<int64_t> beta = PositiveInteger("beta", *v);
    if (!beta.ok()) return beta.status();
    config.beta = *beta;
  }
  if (const std::string* v = text("eviction_mode")) {
    absl::StatusOr<triattention::EvictionMode> mode = triattention::ParseEvictionMode(*v);
    if (!mode.ok()) return Invalid(absl::StrCat("eviction_mode: ", mode.status().message()));
    config.eviction_mode = *v;
  }
  if (const std::string* v = text("calibration_path")) config.calibration_path = *v;
  if (const std::string* v = text("model_config_path")) config.model_config_path = *v;
  if (const std::string* v = text("quant")) {
    absl::StatusOr<std::string> quant = OneOf("quant", *v, {"nvfp4", "nvfp4x2", "raw"});
    if (!quant.ok()) return quant.status();
    config.quant = *quant;
  }
  if (const std::string* v = text("rope_precision")) {
    absl::StatusOr<std::string> rope = OneOf("rope_precision", *v, {"quantized", "lossless"});
    if (!rope.ok()) return rope.status();
    config.rope_precision = *rope;
  }
  if (const std::string* v = text("daemon_socket")) config.daemon_socket = *v;
  if (const std::string* v = text("durable")) {
    if (*v == "true" || *v == "yes" || *v == "on") {
      config.durable = true;
    } else if (*v == "false" || *v == "no" || *v == "off") {
      config.durable = false;
    } else {
      return Invalid(absl::StrCat("durable '", *v, "' is not true or false"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CompressionConfig> ParseCompressionConfig(std::string_view text) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return Invalid(absl::StrCat("not YAML or JSON: ", e.what()));
  }
  if (!root.IsDefined() || root.IsNull()) return Invalid("empty document");
  // Looked up through a const node: yaml-cpp's non-const operator[] may add the key.
  const YAML::Node& const_root = root;
  if (root.IsMap() && const_root[kWrapperKey]) {
    const YAML::Node inner = const_root[kWrapperKey];
    if (root.size() != 1) {
      return Invalid(
          absl::StrCat("'", kWrapperKey, "' must be the only top-level key", Where(root)));
    }
    if (inner.IsNull()) return Invalid(absl::StrCat("'", kWrapperKey, "' is empty"));
    root.reset(inner);  // reset: assignment would overwrite the node's value
  }
  if (!root.IsMap()) {
    return Invalid(
        absl::StrCat("expected a mapping of settings, got ", NodeKind(root), Where(root)));
  }
  CompressionConfig config;
  for (const auto& entry : root) {
    if (!entry.first.IsScalar()) {
      return Invalid(
          absl::StrCat("a key is ", NodeKind(entry.first), ", not a name", Where(entry.first)));
    }
    const std::string key = entry.first.as<std::string>();
    if (!entry.second.IsScalar()) {
      return Invalid(absl::StrCat("key '", key, "' must have a scalar value, got ",
                                  NodeKind(entry.second), Where(entry.second)));
    }
    if (!config.options.emplace(key, entry.second.as<std::string>()).second) {
      return Invalid(absl::StrCat("key '", key, "' is given twice", Where(entry.first)));
    }
  }
  absl::Status known = ReadKnownKeys(config);
  if (!known.ok()) return known;
  return config;
}

absl::StatusOr<CompressionConfig> LoadCompressionConfig(const std::string& path) {
  constexpr uint64_t kMaxConfigBytes = uint64_t{16} << 20;
  absl::StatusOr<std::string> text = ReadRegularFile(path, kMaxConfigBytes, "compression config");
  if (!text.ok()) {
    // NotFound stays NotFound; every other failure to read is the caller's argument.
    if (text.status().code() == absl::StatusCode::kNotFound) return text.status();
    return absl::InvalidArgumentError(text.status().message());
  }
  absl::StatusOr<CompressionConfig> config = ParseCompressionConfig(*text);
  if (!config.ok()) {
    return Annotate(config.status(), path);
  }
  return config;
}

}  // namespace kvtier
