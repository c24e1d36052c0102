// kvtierctl config validate and config default: kvtierd's configuration, without a daemon.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "daemon/config/config.h"
#include "tools/kvtierctl/kvtierctl.h"
#include "yaml-cpp/yaml.h"

namespace kvtier::ctl {
namespace {

// A YAML node as JSON: quoted scalars stay strings; plain ones become booleans, integers, numbers
// or null where they read as such.
Json YamlToJson(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map: {
      Json out = Json::object();
      for (const auto& item : node) out[item.first.as<std::string>()] = YamlToJson(item.second);
      return out;
    }
    case YAML::NodeType::Sequence: {
      Json out = Json::array();
      for (const auto& item : node) out.push_back(YamlToJson(item));
      return out;
    }
    case YAML::NodeType::Scalar: {
      const std::string text = node.Scalar();
      if (node.Tag() == "!") return text;  // quoted
      if (text == "true") return true;
      if (text == "false") return false;
      if (text == "null" || text == "~" || text.empty()) return nullptr;
      int64_t i = 0;
      if (absl::SimpleAtoi(text, &i)) return i;
      double d = 0;
      if (text.find_first_not_of("0123456789.eE+-") == std::string::npos &&
          absl::SimpleAtod(text, &d)) {
        return d;
      }
      return text;
    }
    default:
      return nullptr;
  }
}

}  // namespace

int RunConfigValidate(const Invocation& inv) {
  if (inv.positional.size() != 1) {
    return UsageError(inv, "config validate needs one FILE");
  }
  const std::string& file = inv.positional[0];
  absl::StatusOr<kvtierd::Config> config = kvtierd::LoadConfig(file, inv.GetAll("set"));
  if (inv.json()) {
    Json json = Json::object();
    json["file"] = file;
    json["valid"] = config.ok();
    if (!config.ok()) {
      json["error"] = std::string(config.status().message());
      const std::vector<std::string> errors = absl::StrSplit(config.status().message(), '\n');
      json["errors"] = errors;
    } else {
      json["socket"] = config->socket;
      json["state_dir"] = config->state_dir;
      // null: auto (sized when the daemon starts); a GPU tier of 0 is off.
      json["host_capacity_bytes"] =
          config->host_capacity == 0 ? Json(nullptr) : Json(config->host_capacity);
      json["gpu_capacity_bytes"] = config->gpu_capacity;
      json["disk_capacity_bytes"] =
          config->disk_capacity == 0 ? Json(nullptr) : Json(config->disk_capacity);
      json["metrics_listen"] = config->metrics_listen;
      json["warnings"] = kvtierd::ConfigWarnings(*config);
    }
    PrintJson(json);
    return config.ok() ? kExitOk : kExitFailed;
  }
  if (!config.ok()) {
    const std::vector<std::string> errors = absl::StrSplit(config.status().message(), '\n');
    if (errors.size() == 1) {
      std::cerr << "kvtierctl: " << file << " is not valid: " << errors[0] << "\n";
    } else {
      std::cerr << "kvtierctl: " << file << " is not valid (" << errors.size() << " errors):\n";
      for (const std::string& error : errors) std::cerr << "  " << error << "\n";
    }
    return kExitFailed;
  }
  auto capacity = [](uint64_t bytes) { return bytes == 0 ? std::string("auto") : Bytes(bytes); };
  std::printf("%s is valid\n", file.c_str());
  std::printf("  socket %s, state %s, metrics %s\n", config->socket.c_str(),
              config->state_dir.c_str(),
              config->metrics_listen.empty() ? "off" : config->metrics_listen.c_str());
  std::printf("  tiers: gpu %s, host %s, disk %s\n",
              config->gpu_capacity == 0 ? "off" : Bytes(config->gpu_capacity).c_str(),
              capacity(config->host_capacity).c_str(), capacity(config->disk_capacity).c_str());
  for (const std::string& warning : kvtierd::ConfigWarnings(*config)) {
    std::printf("  warning: %s\n", warning.c_str());
  }
  return kExitOk;
}

int RunConfigDefault(const Invocation& inv) {
  const absl::string_view yaml = kvtierd::DefaultConfigYaml();
  if (!inv.json()) {
    std::cout << yaml;
    return kExitOk;
  }
  try {
    PrintJson(YamlToJson(YAML::Load(std::string(yaml))));
  } catch (const YAML::Exception& e) {
    std::cerr << "kvtierctl: the embedded default configuration does not parse: " << e.what()
              << "\n";
    return kExitFailed;
  }
  return kExitOk;
}

}  // namespace kvtier::ctl
