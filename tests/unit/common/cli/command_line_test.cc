// Tests of kvtier_cli's CommandLine: both value forms, repeated and single flags, subcommands with
// the parent's flags after them, generated help, `help COMMAND`, --version, and the wording and
// exit status of every usage error a user can make.
#include "common/cli/command_line.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvtier::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// What a run of Parse showed the user.
struct Outcome {
  std::optional<int> exit_status;
  Values values;
  std::string out;
  std::string err;
};

// A kvtierctl-shaped program: connection flags on the root, commands with their own flags.
class Program {
 public:
  Program() : line_("prog") {
    line_.SetVersion([] { std::fputs("prog 1.2.3\n", stdout); });
    line_.root()
        .SetFlagGroup("connection flags")
        .AddFlag("socket", "PATH", "the socket\nsecond line of help")
        .AddSwitch("json", "machine-readable output");
    line_.root().SetFooter("exit status: 0 ok, 2 usage error");
    line_.root()
        .AddSubcommand("stats", "per-tier numbers")
        .AddFlag("namespace", "HEX", "one namespace")
        .AddRepeatedFlag("set", "FIELD=VALUE", "an override")
        .SetDescription("Per-tier table.")
        .SetFooter("exit status: 0 ok");
    line_.root().AddSubcommand("lookup", "a prefix").AddPositionals("HASH", "block hashes");
    Command& config = line_.root().AddSubcommand("config", "configuration files");
    config.AddSubcommand("validate", "check a file").AddPositionals("FILE", "the file");
    config.AddSubcommand("default", "print the defaults");
  }

  Outcome Parse(std::vector<std::string> args) {
    args.insert(args.begin(), "prog");
    std::vector<const char*> argv;
    for (const std::string& a : args) argv.push_back(a.c_str());
    Outcome o;
    testing::internal::CaptureStdout();
    testing::internal::CaptureStderr();
    o.exit_status = line_.Parse(static_cast<int>(argv.size()), argv.data(), &o.values);
    o.out = testing::internal::GetCapturedStdout();
    o.err = testing::internal::GetCapturedStderr();
    return o;
  }

 private:
  CommandLine line_;
};

Outcome ParseArgs(std::vector<std::string> args) { return Program().Parse(std::move(args)); }

TEST(CommandLineTest, ValueAfterSpaceOrEqualsSign) {
  for (const auto& args :
       std::vector<std::vector<std::string>>{{"--socket", "/s", "stats", "--namespace", "ab"},
                                             {"--socket=/s", "stats", "--namespace=ab"},
                                             {"stats", "--socket", "/s", "--namespace=ab"}}) {
    Outcome o = ParseArgs(args);
    ASSERT_FALSE(o.exit_status.has_value()) << o.err;
    EXPECT_EQ(o.values.command(), "stats");
    EXPECT_EQ(o.values.Get("socket"), "/s");
    EXPECT_EQ(o.values.Get("namespace"), "ab");
    EXPECT_FALSE(o.values.Has("json"));
  }
}

TEST(CommandLineTest, ValuesKeepCommandLineOrderAndEqualsSignsInValues) {
  Outcome o = ParseArgs({"stats", "--set=a.b=1", "--namespace", "ab", "--set", "c=2=3", "--json"});
  ASSERT_FALSE(o.exit_status.has_value()) << o.err;
  EXPECT_EQ(o.values.GetAll("set"), (std::vector<std::string>{"a.b=1", "c=2=3"}));
  EXPECT_EQ(o.values.Get("set"), "c=2=3");
  EXPECT_TRUE(o.values.Has("json"));
  // The program's own flags first, then the subcommand's, each in command-line order.
  using Flags = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(o.values.flags(),
            (Flags{{"json", ""}, {"set", "a.b=1"}, {"namespace", "ab"}, {"set", "c=2=3"}}));
}

TEST(CommandLineTest, Positionals) {
  Outcome o = ParseArgs({"lookup", "00ff", "--json", "abcd"});
  ASSERT_FALSE(o.exit_status.has_value()) << o.err;
  EXPECT_EQ(o.values.positional(), (std::vector<std::string>{"00ff", "abcd"}));
  EXPECT_TRUE(o.values.Has("json"));
  o = ParseArgs({"config", "validate", "f.yaml"});
  ASSERT_FALSE(o.exit_status.has_value()) << o.err;
  EXPECT_EQ(o.values.command(), "config validate");
  EXPECT_EQ(o.values.positional(), std::vector<std::string>{"f.yaml"});
}

TEST(CommandLineTest, UsageErrorsNameTheFlagAndExitTwo) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const Case cases[] = {
      {{"stats", "--bogus"}, "prog: unknown flag --bogus for stats"},
      {{"stats", "--bogus=3"}, "prog: unknown flag --bogus for stats"},
      {{"stats", "-x"}, "prog: unknown flag -x for stats"},
      {{"stats", "--namespace"}, "prog: --namespace needs a value (--namespace HEX or"},
      {{"stats", "--namespace=a", "--namespace", "b"}, "prog: --namespace given more than once"},
      {{"--socket=a", "stats", "--socket=b"}, "prog: --socket given more than once"},
      {{"stats", "--json=1"}, "prog: --json takes no value (got '1')"},
      {{"stats", "extra"}, "prog: unexpected argument 'extra' for stats"},
      {{"frobnicate"}, "prog: unknown command 'frobnicate'"},
      {{}, "prog: no command"},
      {{"--json"}, "prog: no command"},
      {{"config"}, "prog: config needs a subcommand: validate, default"},
      {{"config", "frob"}, "prog: unknown command 'config frob'"},
      {{"help", "frob"}, "prog: no command 'frob'"},
      {{"help", "stats", "frob"}, "prog: no command 'frob'"},
  };
  for (const Case& c : cases) {
    Outcome o = ParseArgs(c.args);
    EXPECT_EQ(o.exit_status, kExitUsage) << c.message;
    EXPECT_THAT(o.err, HasSubstr(c.message + "")) << testing::PrintToString(c.args);
    EXPECT_THAT(o.err, HasSubstr("usage: prog ")) << c.message;
    EXPECT_EQ(o.out, "") << c.message;
  }
  Outcome o = ParseArgs({"stats", "--bogus"});
  EXPECT_THAT(o.err, HasSubstr("usage: prog stats [flags]\n(see 'prog stats --help')\n"));
}

TEST(CommandLineTest, HelpIsGeneratedOnStdoutAndExitsZero) {
  Outcome o = ParseArgs({"stats", "--help"});
  EXPECT_EQ(o.exit_status, 0);
  EXPECT_EQ(o.err, "");
  EXPECT_THAT(o.out, HasSubstr("usage: prog stats [flags]\n\nPer-tier table.\n"));
  EXPECT_THAT(o.out, HasSubstr("  --namespace HEX"));
  EXPECT_THAT(o.out, HasSubstr("an override (repeatable)"));
  EXPECT_THAT(o.out, HasSubstr("connection flags:\n  --socket PATH"));  // the parent's flags
  EXPECT_THAT(o.out, HasSubstr("second line of help"));
  EXPECT_THAT(o.out, HasSubstr("exit status: 0 ok"));
  EXPECT_THAT(o.out, Not(HasSubstr("--version")));
  EXPECT_EQ(ParseArgs({"-h", "stats"}).out, o.out);
  EXPECT_EQ(ParseArgs({"help", "stats"}).out, o.out);
  EXPECT_EQ(ParseArgs({"--socket=/s", "help", "stats"}).out, o.out);

  o = ParseArgs({"--help"});
  EXPECT_EQ(o.exit_status, 0);
  EXPECT_THAT(o.out, HasSubstr("usage: prog COMMAND [flags]"));
  EXPECT_THAT(o.out, HasSubstr("  config validate"));
  EXPECT_THAT(o.out, HasSubstr("  --version"));
  EXPECT_THAT(o.out, HasSubstr("exit status: 0 ok, 2 usage error"));
  EXPECT_EQ(ParseArgs({"help"}).out, o.out);

  EXPECT_EQ(ParseArgs({"help", "config", "validate"}).out,
            ParseArgs({"config", "validate", "--help"}).out);
  o = ParseArgs({"config", "validate", "--help"});
  EXPECT_THAT(o.out, HasSubstr("usage: prog config validate [flags] [FILE...]"));
}

TEST(CommandLineTest, VersionPrintsAndExitsZero) {
  Outcome o = ParseArgs({"--version"});
  EXPECT_EQ(o.exit_status, 0);
  EXPECT_EQ(o.out, "prog 1.2.3\n");
}

TEST(CommandLineTest, ProgramWithoutSubcommands) {
  CommandLine line("daemon");
  line.root().AddFlag("config", "FILE", "the file").SetUsage("daemon [options]");
  Values values;
  std::vector<const char*> argv = {"daemon", "--config", "x.yaml"};
  EXPECT_EQ(line.Parse(3, argv.data(), &values), std::nullopt);
  EXPECT_EQ(values.command(), "");
  EXPECT_EQ(values.Get("config"), "x.yaml");
  testing::internal::CaptureStderr();
  std::vector<const char*> stray = {"daemon", "x.yaml"};
  EXPECT_EQ(CommandLine("daemon").Parse(2, stray.data(), &values), kExitUsage);
  EXPECT_THAT(testing::internal::GetCapturedStderr(),
              HasSubstr("daemon: unexpected argument 'x.yaml'\nusage: daemon [flags]\n"));
}

TEST(ValuesTest, TypedAccessorsReturnUsageErrorsNamingTheFlag) {
  Outcome o = ParseArgs({"stats", "--namespace=12x", "--set=4096"});
  ASSERT_FALSE(o.exit_status.has_value());
  absl::StatusOr<std::optional<uint64_t>> n = o.values.OptionalUint64("namespace");
  ASSERT_FALSE(n.ok());
  EXPECT_TRUE(IsUsageError(n.status()));
  EXPECT_EQ(n.status().message(), "flag --namespace: '12x' is not an unsigned integer");
  EXPECT_EQ(*o.values.OptionalUint64("set"), 4096u);
  EXPECT_EQ(*o.values.OptionalUint64("socket"), std::nullopt);
  EXPECT_FALSE(o.values.RequiredString("socket").ok());
  testing::internal::CaptureStderr();
  EXPECT_EQ(o.values.PrintUsageError("--namespace is not a hexadecimal id"), kExitUsage);
  EXPECT_EQ(testing::internal::GetCapturedStderr(),
            "prog: --namespace is not a hexadecimal id\nusage: prog stats [flags]\n"
            "(see 'prog stats --help')\n");
  EXPECT_FALSE(IsUsageError(absl::InvalidArgumentError("x")));
}

}  // namespace
}  // namespace kvtier::cli
