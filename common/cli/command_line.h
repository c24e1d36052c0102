// The command lines of kvtier's programs (kvtierd, kvtierctl, kvtier-codec, kvtier-bench,
// kvtier-example-engine): a program declares its commands and flags as a CommandLine, Parse turns
// argv into Values (or prints help, the version or a usage error), and the program reads typed
// values from them. The only module that includes CLI11; it holds the shared conventions: flags
// take their value as `--flag value` or `--flag=value`, `-h`/`--help` and `help COMMAND` print
// generated help on stdout and exit 0, and a usage error is "PROGRAM: MESSAGE" plus the command's
// usage line on stderr with exit status 2. Declaring and parsing are single-threaded; Values is a
// plain value, safe to read from many threads.
#ifndef KVTIER_COMMON_CLI_COMMAND_LINE_H_
#define KVTIER_COMMON_CLI_COMMAND_LINE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace kvtier::cli {

// The exit status of every kvtier program for a wrong command line.
inline constexpr int kExitUsage = 2;

// An InvalidArgument status marked as a usage error (the command line is wrong, as opposed to the
// data it names); programs print it with Values::PrintUsageError and exit with kExitUsage.
absl::Status UsageError(absl::string_view message);
// True for statuses made by UsageError.
bool IsUsageError(const absl::Status& status);

// One command of a program (the program itself, or a subcommand such as `kvtierctl stats`): its
// flags, positional arguments, help text and subcommands. Owned by its CommandLine; the references
// Add* return live as long as it.
class Command {
 public:
  Command(const Command&) = delete;
  Command& operator=(const Command&) = delete;
  ~Command();

  // `--NAME VALUE` or `--NAME=VALUE`, at most once (given twice is a usage error). `value_name`
  // is shown in help ("PATH", "N"); `help` may hold several lines.
  Command& AddFlag(absl::string_view name, absl::string_view value_name, absl::string_view help);
  // Like AddFlag, but may be given any number of times; Values::GetAll returns every value in
  // order.
  Command& AddRepeatedFlag(absl::string_view name, absl::string_view value_name,
                           absl::string_view help);
  // `--NAME` without a value (`--NAME=VALUE` is a usage error); given twice counts once.
  Command& AddSwitch(absl::string_view name, absl::string_view help);
  // Accepts any number of positional words (Values::positional). Without it a positional word is
  // a usage error ("unexpected argument 'x' for stats").
  Command& AddPositionals(absl::string_view value_name, absl::string_view help);
  // Starts a new group of flags in help: the flags added after it are listed under `heading`.
  Command& SetFlagGroup(absl::string_view heading);

  // Help text: the usage line after "usage: PROGRAM " (default: generated from the command's
  // path, flags, positionals and subcommands), a description printed after it, and a footer
  // printed last.
  Command& SetUsage(absl::string_view usage);
  Command& SetDescription(absl::string_view description);
  Command& SetFooter(absl::string_view footer);

  // A subcommand, `summary` being its line in the parent's help. The parent's flags are accepted
  // after the subcommand's name too (kvtierctl's connection flags). A command with subcommands
  // needs one of them unless it has flags or positionals of its own.
  Command& AddSubcommand(absl::string_view name, absl::string_view summary);

  // "stats", "config validate"; empty for the program itself.
  const std::string& path() const { return path_; }

 private:
  friend class CommandLine;
  enum class Kind { kSingle, kRepeated, kSwitch, kPositionals };
  struct Flag {
    std::string name;
    std::string value_name;
    std::string help;
    std::string group;
    Kind kind;
    CLI::Option* option;  // owned by app_
  };

  Command(CLI::App* app, std::string program, std::string path, Command* parent);
  const Flag* FindFlag(absl::string_view name) const;
  bool HasOwnArguments() const;
  std::string UsageLine() const;
  std::string Help() const;

  CLI::App* app_;  // owned by the CommandLine's CLI::App tree
  std::string program_;
  std::string path_;
  Command* parent_;
  std::vector<Flag> flags_;
  std::string group_ = "flags";
  std::string usage_;
  std::string description_;
  std::string footer_;
  std::string summary_;
  std::vector<std::unique_ptr<Command>> subcommands_;
};

// The parsed command line: the selected command, the flags given and the positional words.
class Values {
 public:
  // The selected command's path ("config validate"); empty for a program without subcommands.
  const std::string& command() const { return command_; }
  bool Has(absl::string_view name) const;
  // The value of --name (the last one for a repeated flag); nullopt when it was not given.
  std::optional<std::string> Get(absl::string_view name) const;
  // Every value of --name, in order.
  std::vector<std::string> GetAll(absl::string_view name) const;
  // The flags given as (name, value), "" for a switch: the program's own flags first, then those
  // of each subcommand on the path, each in command-line order.
  const std::vector<std::pair<std::string, std::string>>& flags() const { return flags_; }
  const std::vector<std::string>& positional() const { return positional_; }

  // Typed accessors. Each returns a UsageError naming the flag and the text when the text does not
  // parse, and the flag's absence as nullopt (optional forms) or a UsageError (Required* forms).
  absl::StatusOr<std::string> RequiredString(absl::string_view name) const;
  absl::StatusOr<std::optional<uint64_t>> OptionalUint64(absl::string_view name) const;
  absl::StatusOr<std::optional<uint32_t>> OptionalUint32(absl::string_view name) const;
  // A finite number.
  absl::StatusOr<std::optional<double>> OptionalDouble(absl::string_view name) const;
  // A comma-separated list of unsigned 32-bit integers ("3,7,11"); "" is the empty list.
  absl::StatusOr<std::optional<std::vector<uint32_t>>> OptionalUint32List(
      absl::string_view name) const;

  // Prints "PROGRAM: MESSAGE", the selected command's usage line and where its help is to stderr;
  // returns kExitUsage.
  int PrintUsageError(absl::string_view message) const;

 private:
  friend class CommandLine;
  std::string program_;
  std::string command_;
  std::string usage_line_;
  std::vector<std::pair<std::string, std::string>> flags_;
  std::vector<std::string> positional_;
};

// A program's command line. Declare the commands on root(), then Parse once.
class CommandLine {
 public:
  // `program` is the name used in help and messages ("kvtierctl").
  explicit CommandLine(absl::string_view program);
  CommandLine(const CommandLine&) = delete;
  CommandLine& operator=(const CommandLine&) = delete;
  ~CommandLine();

  Command& root() { return *root_; }
  // Adds `--version`: when given, Parse calls `print` (which writes the version to stdout) and
  // returns 0.
  void SetVersion(std::function<void()> print);

  // Parses argv[1..argc). Returns nullopt with `*values` set when the program should run.
  // Otherwise returns the exit status after printing: 0 for --help, `help [COMMAND]` and
  // --version (stdout), kExitUsage for a usage error (stderr): an unknown flag or command, a
  // missing or unexpected value, a single-valued flag given twice, a stray positional word, a
  // missing subcommand.
  std::optional<int> Parse(int argc, const char* const* argv, Values* values);

 private:
  std::string program_;
  std::unique_ptr<CLI::App> app_;
  std::unique_ptr<Command> root_;
  std::function<void()> print_version_;
};

}  // namespace kvtier::cli

#endif  // KVTIER_COMMON_CLI_COMMAND_LINE_H_
