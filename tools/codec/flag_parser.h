// Command-line flags of `kvtier-codec` subcommands: `--name value`, `--name=value` and boolean
// `--name`, declared per command, with typed accessors and usage errors that the entry point turns
// into exit code 2. Plain values; not thread-safe to mutate, safe to read from many threads.
#ifndef KVTIER_TOOLS_CODEC_FLAG_PARSER_H_
#define KVTIER_TOOLS_CODEC_FLAG_PARSER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace kvtier::tools {

// Returns an InvalidArgument status marked as a usage error (the command line is wrong, as opposed
// to the data it names); the entry point prints it and exits with code 2.
absl::Status UsageError(absl::string_view message);
// True for statuses made by UsageError.
bool IsUsageError(const absl::Status& status);

// One flag a command accepts. A flag with an empty `value_name` is boolean (takes no value).
struct FlagDef {
  std::string name;        // without the leading "--"
  std::string value_name;  // e.g. "N", "FILE"; empty for boolean flags
  std::string help;        // one line
};

// The flags given on one command line.
class FlagValues {
 public:
  bool Has(absl::string_view name) const { return values_.contains(name); }
  // The raw text of a flag, or nullopt when it was not given.
  std::optional<std::string> Get(absl::string_view name) const;

  // Typed accessors. Each returns a usage error naming the flag and the text when the text does not
  // parse, and the flag's absence as nullopt (optional forms) or a usage error (Required* forms).
  absl::StatusOr<std::string> RequiredString(absl::string_view name) const;
  absl::StatusOr<std::optional<uint64_t>> OptionalUint64(absl::string_view name) const;
  absl::StatusOr<std::optional<uint32_t>> OptionalUint32(absl::string_view name) const;
  absl::StatusOr<std::optional<double>> OptionalDouble(absl::string_view name) const;
  // A comma-separated list of unsigned 32-bit integers ("3,7,11").
  absl::StatusOr<std::optional<std::vector<uint32_t>>> OptionalUint32List(
      absl::string_view name) const;

  void Set(std::string name, std::string value) { values_[std::move(name)] = std::move(value); }

 private:
  absl::flat_hash_map<std::string, std::string> values_;
};

// Parses `args` (the arguments after the subcommand name) against `defs`. Usage errors: an unknown
// flag ("unknown flag --frobnicate for 'encode'"), a missing value, a value given to a boolean
// flag, a flag given twice, or a positional argument. `--help` / `-h` is reported through
// `help_requested` and stops parsing.
absl::StatusOr<FlagValues> ParseFlags(absl::string_view command, absl::Span<const FlagDef> defs,
                                      absl::Span<const std::string> args, bool* help_requested);

// Formats the flag list for a command's `--help`, one flag per line, aligned.
std::string FormatFlagHelp(absl::Span<const FlagDef> defs);

}  // namespace kvtier::tools

#endif  // KVTIER_TOOLS_CODEC_FLAG_PARSER_H_
