// Hand-written flag parsing for `kvtier-codec`. The tool has a handful of flags per command and no
// global flag registry, so each command declares its flags as data and this file turns argv into a
// map of strings; typed conversion happens when a command reads a flag, so the error can name it.
#include "tools/codec/flag_parser.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace kvtier::tools {
namespace {

constexpr absl::string_view kUsageErrorPayload = "type.kvtier.dev/kvtier.tools.UsageError";

const FlagDef* FindFlag(absl::Span<const FlagDef> defs, absl::string_view name) {
  for (const FlagDef& def : defs) {
    if (def.name == name) return &def;
  }
  return nullptr;
}

}  // namespace

absl::Status UsageError(absl::string_view message) {
  absl::Status status = absl::InvalidArgumentError(message);
  status.SetPayload(kUsageErrorPayload, absl::Cord("1"));
  return status;
}

bool IsUsageError(const absl::Status& status) {
  return status.GetPayload(kUsageErrorPayload).has_value();
}

std::optional<std::string> FlagValues::Get(absl::string_view name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

absl::StatusOr<std::string> FlagValues::RequiredString(absl::string_view name) const {
  std::optional<std::string> value = Get(name);
  if (!value.has_value()) return UsageError(absl::StrCat("missing required flag --", name));
  return *value;
}

absl::StatusOr<std::optional<uint64_t>> FlagValues::OptionalUint64(absl::string_view name) const {
  std::optional<std::string> text = Get(name);
  if (!text.has_value()) return std::optional<uint64_t>();
  uint64_t value = 0;
  if (text->empty() || (*text)[0] == '-' || (*text)[0] == '+' || !absl::SimpleAtoi(*text, &value)) {
    return UsageError(absl::StrCat("flag --", name, ": '", *text, "' is not an unsigned integer"));
  }
  return std::optional<uint64_t>(value);
}

absl::StatusOr<std::optional<uint32_t>> FlagValues::OptionalUint32(absl::string_view name) const {
  absl::StatusOr<std::optional<uint64_t>> wide = OptionalUint64(name);
  if (!wide.ok()) return wide.status();
  if (!wide->has_value()) return std::optional<uint32_t>();
  if (**wide > std::numeric_limits<uint32_t>::max()) {
    return UsageError(absl::StrCat("flag --", name, ": ", **wide, " is larger than ",
                                   std::numeric_limits<uint32_t>::max()));
  }
  return std::optional<uint32_t>(static_cast<uint32_t>(**wide));
}

absl::StatusOr<std::optional<double>> FlagValues::OptionalDouble(absl::string_view name) const {
  std::optional<std::string> text = Get(name);
  if (!text.has_value()) return std::optional<double>();
  double value = 0;
  if (!absl::SimpleAtod(*text, &value) || !std::isfinite(value)) {
    return UsageError(absl::StrCat("flag --", name, ": '", *text, "' is not a finite number"));
  }
  return std::optional<double>(value);
}

absl::StatusOr<std::optional<std::vector<uint32_t>>> FlagValues::OptionalUint32List(
    absl::string_view name) const {
  std::optional<std::string> text = Get(name);
  if (!text.has_value()) return std::optional<std::vector<uint32_t>>();
  std::vector<uint32_t> values;
  if (text->empty()) return std::optional<std::vector<uint32_t>>(values);
  for (absl::string_view item : absl::StrSplit(*text, ',')) {
    uint32_t value = 0;
    if (item.empty() || item[0] == '-' || item[0] == '+' || !absl::SimpleAtoi(item, &value)) {
      return UsageError(absl::StrCat("flag --", name, ": '", item, "' in '", *text,
                                     "' is not an unsigned integer"));
    }
    values.push_back(value);
  }
  return std::optional<std::vector<uint32_t>>(std::move(values));
}

absl::StatusOr<FlagValues> ParseFlags(absl::string_view command, absl::Span<const FlagDef> defs,
                                      absl::Span<const std::string> args, bool* help_requested) {
  *help_requested = false;
  FlagValues values;
  for (size_t i = 0; i < args.size(); ++i) {
    absl::string_view arg = args[i];
    if (arg == "--help" || arg == "-h") {
      *help_requested = true;
      return values;
    }
    if (!absl::ConsumePrefix(&arg, "--") || arg.empty()) {
      return UsageError(absl::StrCat("unexpected argument '", args[i], "' for '", command,
                                     "' (flags start with --; see 'kvtier-codec ", command,
                                     " --help')"));
    }
    absl::string_view name = arg;
    std::optional<std::string> inline_value;
    if (size_t eq = arg.find('='); eq != absl::string_view::npos) {
      name = arg.substr(0, eq);
      inline_value = std::string(arg.substr(eq + 1));
    }
    const FlagDef* def = FindFlag(defs, name);
    if (def == nullptr) {
      return UsageError(absl::StrCat("unknown flag --", name, " for '", command,
                                     "' (see 'kvtier-codec ", command, " --help')"));
    }
    if (values.Has(name)) {
      return UsageError(absl::StrCat("flag --", name, " given more than once"));
    }
    std::string value;
    if (def->value_name.empty()) {
      if (inline_value.has_value()) {
        return UsageError(
            absl::StrCat("flag --", name, " takes no value (got '", *inline_value, "')"));
      }
    } else if (inline_value.has_value()) {
      value = *std::move(inline_value);
    } else {
      if (i + 1 >= args.size()) {
        return UsageError(absl::StrCat("flag --", name, " needs a value (", def->value_name, ")"));
      }
      value = args[++i];
    }
    values.Set(std::string(name), std::move(value));
  }
  return values;
}

std::string FormatFlagHelp(absl::Span<const FlagDef> defs) {
  std::vector<std::string> left;
  size_t width = 0;
  for (const FlagDef& def : defs) {
    std::string text = absl::StrCat("  --", def.name);
    if (!def.value_name.empty()) absl::StrAppend(&text, " ", def.value_name);
    width = std::max(width, text.size());
    left.push_back(std::move(text));
  }
  std::string out;
  for (size_t i = 0; i < defs.size(); ++i) {
    absl::StrAppend(&out, left[i], std::string(width - left[i].size() + 2, ' '), defs[i].help,
                    "\n");
  }
  return out;
}

}  // namespace kvtier::tools
