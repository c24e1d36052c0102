// CommandLine over CLI11 (Debian's libcli11-dev 2.1).
//
// CLI11 does the tokenizing: `--flag value` and `--flag=value`, `--` to end flags, subcommands
// with the parent's flags falling through to them. Everything a user reads is ours, so that the
// five programs look alike and their messages stay stable across CLI11 versions:
//   - every option is declared without a bound variable and with MultiOptionPolicy::TakeAll, and
//     every App allows extras; after CLI11 returns, Parse checks counts (a single flag given
//     twice), switch values and leftover words itself and words the usage error;
//   - the one error CLI11 raises that we word (a flag without its value) is recognized by the
//     option name CLI11 puts first in its message;
//   - help is formatted here from our own declarations, not by CLI11's formatter, and `help
//     [COMMAND]` is a real subcommand added when a program has subcommands.
// Values are read back in command-line order from each App's parse_order().
#include "common/cli/command_line.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>

#include "CLI/CLI.hpp"
#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace kvtier::cli {
namespace {

constexpr absl::string_view kUsageErrorPayload = "type.kvtier.dev/kvtier.cli.UsageError";
constexpr absl::string_view kHelpCommand = "help";

// "  --name VALUE" and its help, the help's continuation lines indented to the same column; a
// left column wider than the others gets a line of its own.
void AppendHelpRows(const std::vector<std::pair<std::string, std::string>>& rows,
                    std::string* out) {
  size_t width = 0;
  for (const auto& [left, help] : rows) {
    if (left.size() <= 30) width = std::max(width, left.size());
  }
  const std::string indent(width + 2, ' ');
  for (const auto& [left, help] : rows) {
    std::string line = left;
    if (line.size() > width) {
      absl::StrAppend(out, line, "\n");
      line = indent;
    } else {
      line.resize(width + 2, ' ');
    }
    for (absl::string_view help_line : absl::StrSplit(help, '\n')) {
      absl::StrAppend(out, line, help_line, "\n");
      line = indent;
    }
  }
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

// ---- Command ----

Command::Command(CLI::App* app, std::string program, std::string path, Command* parent)
    : app_(app), program_(std::move(program)), path_(std::move(path)), parent_(parent) {}

Command::~Command() = default;

Command& Command::AddFlag(absl::string_view name, absl::string_view value_name,
                          absl::string_view help) {
  CLI::Option* option = app_->add_option(absl::StrCat("--", name));
  option->type_name(std::string(value_name))->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  flags_.push_back({std::string(name), std::string(value_name), std::string(help), group_,
                    Kind::kSingle, option});
  return *this;
}

Command& Command::AddRepeatedFlag(absl::string_view name, absl::string_view value_name,
                                  absl::string_view help) {
  AddFlag(name, value_name, help);
  flags_.back().kind = Kind::kRepeated;
  return *this;
}

Command& Command::AddSwitch(absl::string_view name, absl::string_view help) {
  CLI::Option* option = app_->add_flag(absl::StrCat("--", name));
  flags_.push_back(
      {std::string(name), std::string(), std::string(help), group_, Kind::kSwitch, option});
  return *this;
}

Command& Command::AddPositionals(absl::string_view value_name, absl::string_view help) {
  CLI::Option* option = app_->add_option(std::string(value_name));
  option->expected(-1)->allow_extra_args(true)->multi_option_policy(
      CLI::MultiOptionPolicy::TakeAll);
  flags_.push_back({std::string(value_name), std::string(value_name), std::string(help), group_,
                    Kind::kPositionals, option});
  return *this;
}

Command& Command::SetFlagGroup(absl::string_view heading) {
  group_ = std::string(heading);
  return *this;
}

Command& Command::SetUsage(absl::string_view usage) {
  usage_ = std::string(usage);
  return *this;
}

Command& Command::SetDescription(absl::string_view description) {
  description_ = std::string(description);
  return *this;
}

Command& Command::SetFooter(absl::string_view footer) {
  footer_ = std::string(footer);
  return *this;
}

Command& Command::AddSubcommand(absl::string_view name, absl::string_view summary) {
  CLI::App* sub = app_->add_subcommand(std::string(name), std::string(summary));
  sub->fallthrough(true);
  sub->allow_extras(true);
  std::string path = path_.empty() ? std::string(name) : absl::StrCat(path_, " ", name);
  subcommands_.push_back(
      std::unique_ptr<Command>(new Command(sub, program_, std::move(path), this)));
  subcommands_.back()->summary_ = std::string(summary);
  return *subcommands_.back();
}

const Command::Flag* Command::FindFlag(absl::string_view name) const {
  for (const Command* c = this; c != nullptr; c = c->parent_) {
    for (const Flag& flag : c->flags_) {
      if (flag.kind != Kind::kPositionals && flag.name == name) return &flag;
    }
  }
  return nullptr;
}

bool Command::HasOwnArguments() const {
  return std::any_of(flags_.begin(), flags_.end(),
                     [](const Flag& f) { return f.kind == Kind::kPositionals; }) ||
         (parent_ != nullptr && !flags_.empty());
}

std::string Command::UsageLine() const {
  std::string line = absl::StrCat("usage: ", program_, " ");
  if (!usage_.empty()) return absl::StrCat(line, usage_);
  if (!path_.empty()) absl::StrAppend(&line, path_, " ");
  if (!subcommands_.empty() && parent_ == nullptr) absl::StrAppend(&line, "COMMAND ");
  absl::StrAppend(&line, "[flags]");
  for (const Flag& flag : flags_) {
    if (flag.kind == Kind::kPositionals) absl::StrAppend(&line, " [", flag.value_name, "...]");
  }
  if (!subcommands_.empty() && parent_ != nullptr) absl::StrAppend(&line, " COMMAND");
  return line;
}

std::string Command::Help() const {
  std::string out = absl::StrCat(UsageLine(), "\n");
  if (!description_.empty()) absl::StrAppend(&out, "\n", description_, "\n");
  // Groups in order of first appearance: this command's, then the ancestors' (accepted here too).
  std::vector<std::string> groups;
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> rows;
  auto add_rows = [&](const Command& c, bool own) {
    for (const Flag& flag : c.flags_) {
      if (!own && flag.kind == Kind::kPositionals) continue;
      if (!own && flag.name == "version") continue;
      std::string left = flag.kind == Kind::kPositionals ? absl::StrCat("  ", flag.value_name)
                                                         : absl::StrCat("  --", flag.name);
      if (flag.kind == Kind::kSingle || flag.kind == Kind::kRepeated) {
        absl::StrAppend(&left, " ", flag.value_name);
      }
      std::string help = flag.help;
      if (flag.kind == Kind::kRepeated) absl::StrAppend(&help, " (repeatable)");
      if (!rows.contains(flag.group)) groups.push_back(flag.group);
      rows[flag.group].emplace_back(std::move(left), std::move(help));
    }
  };
  add_rows(*this, true);
  if (!rows.contains("flags")) groups.insert(groups.begin(), "flags");
  rows["flags"].emplace_back("  -h, --help", "print this help and exit");
  for (const Command* c = parent_; c != nullptr; c = c->parent_) add_rows(*c, false);
  for (const std::string& group : groups) {
    absl::StrAppend(&out, "\n", group, ":\n");
    AppendHelpRows(rows[group], &out);
  }
  if (!subcommands_.empty()) {
    std::vector<std::pair<std::string, std::string>> commands;
    std::function<void(const Command&, const std::string&)> list = [&](const Command& c,
                                                                       const std::string& prefix) {
      for (const auto& sub : c.subcommands_) {
        const std::string name = absl::StrCat(prefix, sub->app_->get_name());
        if (sub->subcommands_.empty() || sub->HasOwnArguments()) {
          commands.emplace_back(absl::StrCat("  ", name), sub->summary_);
        }
        list(*sub, absl::StrCat(name, " "));
      }
    };
    list(*this, "");
    absl::StrAppend(&out, "\ncommands:\n");
    AppendHelpRows(commands, &out);
    if (parent_ == nullptr) {
      absl::StrAppend(&out, "\n'", program_, " help COMMAND' or '", program_,
                      " COMMAND --help' describes a command.\n");
    }
  }
  if (!footer_.empty())
    absl::StrAppend(&out, "\n", footer_, absl::EndsWith(footer_, "\n") ? "" : "\n");
  return out;
}

// ---- Values ----

bool Values::Has(absl::string_view name) const {
  return std::any_of(flags_.begin(), flags_.end(), [&](const auto& f) { return f.first == name; });
}

std::optional<std::string> Values::Get(absl::string_view name) const {
  std::optional<std::string> out;
  for (const auto& [flag, value] : flags_) {
    if (flag == name) out = value;
  }
  return out;
}

std::vector<std::string> Values::GetAll(absl::string_view name) const {
  std::vector<std::string> out;
  for (const auto& [flag, value] : flags_) {
    if (flag == name) out.push_back(value);
  }
  return out;
}

absl::StatusOr<std::string> Values::RequiredString(absl::string_view name) const {
  std::optional<std::string> value = Get(name);
  if (!value.has_value()) return UsageError(absl::StrCat("missing required flag --", name));
  return *value;
}

absl::StatusOr<std::optional<uint64_t>> Values::OptionalUint64(absl::string_view name) const {
  std::optional<std::string> text = Get(name);
  if (!text.has_value()) return std::optional<uint64_t>();
  uint64_t value = 0;
  if (text->empty() || (*text)[0] == '-' || (*text)[0] == '+' || !absl::SimpleAtoi(*text, &value)) {
    return UsageError(absl::StrCat("flag --", name, ": '", *text, "' is not an unsigned integer"));
  }
  return std::optional<uint64_t>(value);
}

absl::StatusOr<std::optional<uint32_t>> Values::OptionalUint32(absl::string_view name) const {
  absl::StatusOr<std::optional<uint64_t>> wide = OptionalUint64(name);
  if (!wide.ok()) return wide.status();
  if (!wide->has_value()) return std::optional<uint32_t>();
  if (**wide > std::numeric_limits<uint32_t>::max()) {
    return UsageError(absl::StrCat("flag --", name, ": ", **wide, " is larger than ",
                                   std::numeric_limits<uint32_t>::max()));
  }
  return std::optional<uint32_t>(static_cast<uint32_t>(**wide));
}

absl::StatusOr<std::optional<double>> Values::OptionalDouble(absl::string_view name) const {
  std::optional<std::string> text = Get(name);
  if (!text.has_value()) return std::optional<double>();
  double value = 0;
  if (!absl::SimpleAtod(*text, &value) || !std::isfinite(value)) {
    return UsageError(absl::StrCat("flag --", name, ": '", *text, "' is not a finite number"));
  }
  return std::optional<double>(value);
}

absl::StatusOr<std::optional<std::vector<uint32_t>>> Values::OptionalUint32List(
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

int Values::PrintUsageError(absl::string_view message) const {
  const std::string help = command_.empty() ? absl::StrCat(program_, " --help")
                                            : absl::StrCat(program_, " ", command_, " --help");
  std::string text =
      absl::StrCat(program_, ": ", message, "\n", usage_line_, "\n(see '", help, "')\n");
  std::fputs(text.c_str(), stderr);
  return kExitUsage;
}

// ---- CommandLine ----

CommandLine::CommandLine(absl::string_view program)
    : program_(program), app_(std::make_unique<CLI::App>("", std::string(program))) {
  app_->set_help_flag("-h,--help", "print this help and exit");
  app_->fallthrough(true);
  app_->allow_extras(true);
  root_ = std::unique_ptr<Command>(new Command(app_.get(), program_, "", nullptr));
}

CommandLine::~CommandLine() = default;

void CommandLine::SetVersion(std::function<void()> print) {
  print_version_ = std::move(print);
  root_->AddSwitch("version", "print the version and exit");
}

std::optional<int> CommandLine::Parse(int argc, const char* const* argv, Values* values) {
  const bool has_help_command =
      std::any_of(root_->subcommands_.begin(), root_->subcommands_.end(),
                  [](const auto& sub) { return sub->app_->get_name() == kHelpCommand; });
  if (!root_->subcommands_.empty() && !has_help_command) {
    root_->AddSubcommand(kHelpCommand, "describe a command (help COMMAND)")
        .AddPositionals("COMMAND", "the command to describe");
  }
  *values = Values();
  values->program_ = program_;
  // The deepest command CLI11 entered, `help` aside: in `help stats` CLI11 enters both.
  Command* help_command = nullptr;
  for (const auto& sub : root_->subcommands_) {
    if (sub->app_->get_name() == kHelpCommand) help_command = sub.get();
  }
  auto selected = [&]() {
    Command* c = root_.get();
    for (bool descended = true; descended;) {
      descended = false;
      for (const auto& sub : c->subcommands_) {
        if (sub.get() != help_command && sub->app_->parsed()) {
          c = sub.get();
          descended = true;
          break;
        }
      }
    }
    return c;
  };
  auto fail = [&](const Command& c, absl::string_view message) {
    values->command_ = c.path_;
    values->usage_line_ = c.UsageLine();
    return values->PrintUsageError(message);
  };
  try {
    app_->parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::fputs(selected()->Help().c_str(), stdout);
    return 0;
  } catch (const CLI::ParseError& e) {
    Command* c = selected();
    const std::string what = e.what();
    const size_t colon = what.find(':');
    if (colon != std::string::npos && absl::StartsWith(what, "--")) {
      if (const Command::Flag* flag = c->FindFlag(what.substr(2, colon - 2))) {
        return fail(
            *c, absl::StrCat("--", flag->name, " needs a value (--", flag->name, " ",
                             flag->value_name, " or --", flag->name, "=", flag->value_name, ")"));
      }
    }
    return fail(*c, what);
  }
  if (help_command != nullptr && help_command->app_->parsed()) {
    Command* topic = selected();
    std::vector<std::string> words;
    for (const std::string& word : help_command->flags_.front().option->results()) {
      words.push_back(word);
    }
    for (const std::string& word : app_->remaining(true)) words.push_back(word);
    for (const std::string& word : words) {
      Command* next = nullptr;
      for (const auto& sub : topic->subcommands_) {
        if (sub->app_->get_name() == word) next = sub.get();
      }
      if (next == nullptr) {
        return fail(*root_, absl::StrCat("no command '", absl::StrJoin(words, " "), "'"));
      }
      topic = next;
    }
    std::fputs(topic->Help().c_str(), stdout);
    return 0;
  }
  Command* command = selected();
  const std::string for_command =
      command->path_.empty() ? "" : absl::StrCat(" for ", command->path_);
  // Values in command-line order, the root's first.
  std::vector<Command*> chain;
  for (Command* c = command; c != nullptr; c = c->parent_) chain.insert(chain.begin(), c);
  for (Command* c : chain) {
    std::map<const CLI::Option*, size_t> taken;
    for (const CLI::Option* option : c->app_->parse_order()) {
      const Command::Flag* flag = nullptr;
      for (const Command::Flag& f : c->flags_) {
        if (f.option == option) flag = &f;
      }
      if (flag == nullptr) continue;
      const std::vector<std::string>& results = option->results();
      const size_t index = taken[option]++;
      if (index >= results.size()) continue;
      const std::string& value = results[index];
      switch (flag->kind) {
        case Command::Kind::kPositionals:
          values->positional_.push_back(value);
          break;
        case Command::Kind::kSwitch:
          if (value != "true") {
            return fail(*command,
                        absl::StrCat("--", flag->name, " takes no value (got '", value, "')"));
          }
          if (!values->Has(flag->name)) values->flags_.emplace_back(flag->name, "");
          break;
        case Command::Kind::kSingle:
          if (values->Has(flag->name)) {
            return fail(*command, absl::StrCat("--", flag->name, " given more than once"));
          }
          values->flags_.emplace_back(flag->name, value);
          break;
        case Command::Kind::kRepeated:
          values->flags_.emplace_back(flag->name, value);
          break;
      }
    }
  }
  if (print_version_ && values->Has("version")) {
    print_version_();
    return 0;
  }
  for (const std::string& extra : app_->remaining(true)) {
    if (absl::StartsWith(extra, "-") && extra != "-") {
      const std::string name = extra.substr(0, extra.find('='));
      return fail(*command, absl::StrCat("unknown flag ", name, for_command));
    }
    if (!command->subcommands_.empty()) {
      if (command->parent_ == nullptr) {
        return fail(*command, absl::StrCat("unknown command '", extra, "'"));
      }
      return fail(*command, absl::StrCat("unknown command '", command->path_, " ", extra, "'"));
    }
    return fail(*command, absl::StrCat("unexpected argument '", extra, "'", for_command));
  }
  if (!command->subcommands_.empty() && !command->HasOwnArguments()) {
    if (command->parent_ == nullptr) return fail(*command, "no command");
    std::vector<std::string> names;
    for (const auto& sub : command->subcommands_) names.push_back(sub->app_->get_name());
    return fail(*command,
                absl::StrCat(command->path_, " needs a subcommand: ", absl::StrJoin(names, ", ")));
  }
  values->command_ = command->path_;
  values->usage_line_ = command->UsageLine();
  return std::nullopt;
}

}  // namespace kvtier::cli
