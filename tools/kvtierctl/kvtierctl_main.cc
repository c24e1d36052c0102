// kvtierctl: the operator's command line for a running kvtierd. `kvtierctl help` lists the
// commands; docs/KVTIERCTL.md describes each with its output and exit statuses.
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "common/build_info/build_info.h"
#include "tools/kvtierctl/kvtierctl.h"

namespace kvtier::ctl {
namespace {

constexpr const char* kGlobalUsage =
    R"(connection (every command that talks to kvtierd):
  --socket=PATH          kvtierd's Unix socket (default $KVTIER_SOCKET, else /run/kvtier/kvtier.sock)
  --address=ADDRESS      unix:PATH, or HOST:PORT for kvtierd's TCP listener (TLS by default)
  --tls-ca=FILE --tls-cert=FILE --tls-key=FILE --tls-server-name=NAME
                         TLS for a HOST:PORT address; --insecure for plain text on loopback
  --token-file=FILE      file whose first line is the bearer token (default $KVTIER_TOKEN_FILE);
                         admin commands need an admin tenant's token when authentication is on
  --timeout=SECONDS      deadline of each call (default 5; drain, verify, clear, evict: 600)
  --json                 machine-readable output on stdout

exit status: 0 ok, 1 kvtierd unreachable or refused (or an invalid config file), 2 usage error,
3 verify found bad blocks, 4 the deadline passed first
)";

struct Command {
  const char* name;
  const char* summary;  // one line for `kvtierctl help`
  const char* synopsis;
  const char* help;
  std::vector<FlagSpec> flags;
  int (*run)(const Invocation&);
};

const FlagSpec kNamespaceFlags[] = {
    {"namespace", true}, {"tenant", true}, {"model", true}, {"partition", true}};

std::vector<FlagSpec> WithNamespace(std::vector<FlagSpec> flags, bool all) {
  flags.insert(flags.end(), std::begin(kNamespaceFlags), std::end(kNamespaceFlags));
  if (all) flags.push_back({"all"});
  return flags;
}

const std::vector<Command>& Commands() {
  static const std::vector<Command> commands = {
      {"status",
       "the daemon: version, uptime, engines, tiers",
       "status",
       "The daemon's version, node, incarnation, uptime, whether it is draining, its engines and "
       "a per-tier summary.",
       {},
       RunStatus},
      {"stats", "per-tier (and per-namespace) capacity, use, hits, traffic",
       "stats [--namespace=HEX | --tenant=T --model=M --partition=P] [--namespaces] "
       "[--engines]",
       "Per-tier table: capacity, use, blocks, hits and hit rate, bytes in and out (cold block\n"
       "bytes; the GPU tier holds hot pages), evictions; then hot and cold bytes offloaded and\n"
       "onboarded with their compression ratio. --namespace (or --tenant/--model/--partition)\n"
       "adds the selected namespaces' blocks per tier, hits, misses and parked requests;\n"
       "--namespaces adds every namespace, --engines the registered engines.",
       WithNamespace({{"namespaces"}, {"engines"}}, false), RunStats},
      {"namespaces", "the namespaces and what each holds",
       "namespaces [--namespace=HEX | --tenant=T --model=M --partition=P]",
       "One line per namespace: id, tenant, model, partition, codec, blocks and bytes per tier,\n"
       "engines, parked requests, hit rate. The ids are what --namespace takes.",
       WithNamespace({}, false), RunNamespaces},
      {"lookup",
       "how much of a prefix is cached, and where",
       "lookup --namespace=HEX (HASH... | --hash-file=FILE | --tokens=FILE --page-tokens=N)",
       "How much of a prefix the cache holds, and in which tiers. Hashes are hex (one per page,\n"
       "in chain order); --hash-file holds them one per line. --tokens reads token ids (decimal,\n"
       "separated by spaces, commas or newlines; a JSON array works) and hashes full pages of\n"
       "--page-tokens tokens with the namespace's hash root, as its engines do (BlockHasher).",
       {{"namespace", true}, {"hash-file", true}, {"tokens", true}, {"page-tokens", true}},
       RunLookup},
      {"evict", "make room in a tier (demote or drop blocks)",
       "evict (--namespace=HEX | --tenant=T --model=M --partition=P | --all) "
       "[--tier=gpu|host|disk]\n"
       "         (--bytes=SIZE | --blocks=N | --hashes=HEX,...) [--drop]",
       "Makes room: least recently used blocks of the selected namespaces leave --tier (demoted\n"
       "to the next tier unless --drop; without --tier they leave the cache). SIZE takes KiB,\n"
       "MiB, GiB suffixes. --hashes evicts exactly those blocks of one --namespace.",
       WithNamespace(
           {{"tier", true}, {"bytes", true}, {"blocks", true}, {"hashes", true}, {"drop"}}, true),
       RunEvict},
      {"clear", "remove every block of namespaces",
       "clear (--namespace=HEX | --tenant=T --model=M --partition=P | --all) "
       "[--tier=gpu|host|disk] [--include-parked]",
       "Removes every block of the selected namespaces (from one tier with --tier);\n"
       "--include-parked also releases their parked requests.",
       WithNamespace({{"tier", true}, {"include-parked"}}, true), RunClear},
      {"verify", "scrub stored blocks, report and remove bad ones",
       "verify [--tier=host|disk] [--namespace=HEX | --tenant=T ...] [--headers-only]\n"
       "          [--report-only] [--max-blocks=N] [--quiet]",
       "Scrubs stored blocks: reads each one back and checks its header and checksum against\n"
       "the index (--headers-only: headers only). Works namespace by namespace and tier by tier,\n"
       "printing progress on stderr (--quiet: none). Bad blocks are listed and removed (kept\n"
       "with --report-only). Exit status 3 when any block is bad, 4 when --timeout stopped it.",
       WithNamespace(
           {{"tier", true}, {"headers-only"}, {"report-only"}, {"max-blocks", true}, {"quiet"}},
           false),
       RunVerify},
      {"drain",
       "stop admitting work before a restart; flush to disk",
       "drain [--flush-to-disk] [--cancel]",
       "Before a restart or upgrade: stops admitting registrations, offloads and parks (lookups,\n"
       "onboards and resumes go on), waits for in-flight work and queued disk writes, and\n"
       "reports. --flush-to-disk also copies every host-tier block without a disk copy to disk,\n"
       "keeping the host copy (a cancelled drain still serves from host memory). --cancel\n"
       "accepts work again. Exit status 4 when --timeout passes first (draining goes on; run it\n"
       "again to wait).",
       {{"flush-to-disk"}, {"cancel"}},
       RunDrain},
      {"watch", "follow cache events",
       "watch [--namespace=HEX | --tenant=T ...] [--from=now|snapshot|SEQUENCE] [--count=N]\n"
       "         [--duration=SECONDS]",
       "Follows cache events (blocks stored, moved, removed; namespaces cleared; events lost),\n"
       "one line each (--json: one JSON object per line) until Ctrl-C, --count events or\n"
       "--duration seconds. --from=snapshot first lists the blocks held now; --from=SEQUENCE\n"
       "replays retained events after that sequence.",
       WithNamespace({{"from", true}, {"count", true}, {"duration", true}}, false), RunWatch},
      {"config validate",
       "check a kvtierd configuration file",
       "config validate FILE [--set=FIELD=VALUE ...]",
       "Loads FILE as kvtierd would (defaults, the file, then each --set) and reports whether\n"
       "it is valid, with the effective socket and tier sizes, or lists every error; exit\n"
       "status 1 when it is not (also for a FILE that is a directory, FIFO or device). Does not\n"
       "contact the daemon.",
       {{"set", true, true}},
       RunConfigValidate},
      {"config default",
       "print the default configuration",
       "config default",
       "Prints kvtierd's default configuration with every field explained (YAML; --json: the\n"
       "same values as JSON). Does not contact the daemon.",
       {},
       RunConfigDefault},
  };
  return commands;
}

const FlagSpec kGlobalFlags[] = {
    {"socket", true},  {"address", true},
    {"tls-ca", true},  {"tls-cert", true},
    {"tls-key", true}, {"tls-server-name", true},
    {"insecure"},      {"token-file", true},
    {"timeout", true}, {"json"},
    {"help"},
};

const Command* Find(const std::string& name) {
  for (const Command& c : Commands()) {
    if (name == c.name) return &c;
  }
  return nullptr;
}

void PrintCommandUsage(const Command& c, std::ostream& out) {
  out << "usage: kvtierctl [connection flags] " << c.synopsis << " [--json]\n\n"
      << c.help << "\n\n"
      << kGlobalUsage;
}

void PrintUsage(std::ostream& out) {
  out << "usage: kvtierctl [connection flags] COMMAND [flags]\n\ncommands:\n";
  for (const Command& c : Commands()) {
    std::string name = c.name;
    name.resize(17, ' ');
    out << "  " << name << c.summary << "\n";
  }
  out << "\n`kvtierctl help COMMAND` or `kvtierctl COMMAND --help` describes a command.\n\n"
      << kGlobalUsage;
}

}  // namespace

int UsageError(const Invocation& inv, const std::string& message) {
  std::cerr << "kvtierctl: " << message << "\n";
  if (const Command* c = Find(inv.command)) {
    std::cerr << "usage: kvtierctl [connection flags] " << c->synopsis << " [--json]\n"
              << "(kvtierctl " << c->name << " --help for more)\n";
  } else {
    std::cerr << "(kvtierctl help lists the commands)\n";
  }
  return kExitUsage;
}

int Main(int argc, char** argv) {
  std::vector<std::string> words;
  std::vector<std::string> flag_args;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-h") {
      flag_args.push_back("--help");
    } else if (absl::StartsWith(arg, "--")) {
      flag_args.push_back(arg);
    } else if (absl::StartsWith(arg, "-") && arg != "-") {
      std::cerr << "kvtierctl: unexpected argument '" << arg << "' (flags are --name or "
                << "--name=VALUE)\n";
      return kExitUsage;
    } else {
      words.push_back(arg);
    }
  }
  if (words.empty() && flag_args.size() == 1 && flag_args[0] == "--version") {
    std::cout << kvtier::build_info::VersionText("kvtierctl");
    return kExitOk;
  }
  Invocation inv;
  size_t used_words = 0;
  if (!words.empty()) {
    inv.command = words[0];
    used_words = 1;
    if (words[0] == "config" && words.size() > 1) {
      inv.command += " " + words[1];
      used_words = 2;
    }
  }
  if (inv.command == "help" || inv.command.empty()) {
    const bool asked = inv.command == "help" || (flag_args.size() == 1 && flag_args[0] == "--help");
    std::string topic;
    for (size_t i = 1; i < words.size(); ++i) topic += (topic.empty() ? "" : " ") + words[i];
    if (!topic.empty()) {
      const Command* c = Find(topic);
      if (c == nullptr) {
        std::cerr << "kvtierctl: no command '" << topic << "'\n";
        PrintUsage(std::cerr);
        return kExitUsage;
      }
      PrintCommandUsage(*c, std::cout);
      return kExitOk;
    }
    if (!asked) {
      std::cerr << "kvtierctl: no command\n";
      PrintUsage(std::cerr);
      return kExitUsage;
    }
    PrintUsage(std::cout);
    return kExitOk;
  }
  const Command* command = Find(inv.command);
  if (command == nullptr) {
    if (inv.command == "config") {
      std::cerr << "kvtierctl: config needs a subcommand: validate FILE, or default\n";
    } else {
      std::cerr << "kvtierctl: unknown command '" << inv.command << "'\n";
    }
    PrintUsage(std::cerr);
    return kExitUsage;
  }
  inv.positional.assign(words.begin() + static_cast<ptrdiff_t>(used_words), words.end());
  for (const std::string& arg : flag_args) {
    const size_t eq = arg.find('=');
    const std::string name = arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    const bool has_value = eq != std::string::npos;
    const FlagSpec* spec = nullptr;
    for (const FlagSpec& f : kGlobalFlags) {
      if (f.name == name) spec = &f;
    }
    for (const FlagSpec& f : command->flags) {
      if (f.name == name) spec = &f;
    }
    if (spec == nullptr) return UsageError(inv, "unknown flag --" + name + " for " + inv.command);
    if (spec->takes_value != has_value) {
      return UsageError(inv, spec->takes_value ? "--" + name + " needs a value (--" + name + "=...)"
                                               : "--" + name + " takes no value");
    }
    if (!spec->repeatable && inv.Has(name)) {
      return UsageError(inv, "--" + name + " given twice");
    }
    inv.flags.emplace_back(name, has_value ? arg.substr(eq + 1) : "");
  }
  if (inv.Has("help")) {
    PrintCommandUsage(*command, std::cout);
    return kExitOk;
  }
  const bool takes_positional = inv.command == "lookup" || inv.command == "config validate";
  if (!takes_positional && !inv.positional.empty()) {
    return UsageError(inv, "unexpected argument '" + inv.positional[0] + "'");
  }
  return command->run(inv);
}

}  // namespace kvtier::ctl

int main(int argc, char** argv) { return kvtier::ctl::Main(argc, argv); }
