// kvtierctl: the operator's command line for a running kvtierd. `kvtierctl help` lists the
// commands; docs/KVTIERCTL.md describes each with its output and exit statuses.
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "common/build_info/build_info.h"
#include "common/cli/command_line.h"
#include "tools/kvtierctl/kvtierctl.h"

namespace kvtier::ctl {
namespace {

constexpr const char* kExitStatus =
    R"(exit status: 0 ok, 1 kvtierd unreachable or refused (or an invalid config file), 2 usage error,
3 verify found bad blocks, 4 the deadline passed first)";

// One flag of a command: a switch when `value_name` is empty.
struct FlagSpec {
  std::string name;
  std::string value_name;
  std::string help;
  bool repeatable = false;
};

struct Command {
  const char* name;
  const char* summary;  // one line for `kvtierctl help`
  const char* synopsis;
  const char* help;
  std::vector<FlagSpec> flags;
  int (*run)(const Invocation&);
};

const FlagSpec kNamespaceFlags[] = {
    {"namespace", "HEX", "a namespace by id (16 hex digits, as `kvtierctl namespaces` prints)"},
    {"tenant", "T", "with --model and --partition: the namespace of that tenant, model, partition"},
    {"model", "M", "see --tenant"},
    {"partition", "P", "see --tenant"}};

const FlagSpec kTierFlag = {"tier", "TIER", "gpu, host or disk"};

std::vector<FlagSpec> WithNamespace(std::vector<FlagSpec> flags, bool all) {
  flags.insert(flags.end(), std::begin(kNamespaceFlags), std::end(kNamespaceFlags));
  if (all) flags.push_back({"all", "", "every namespace"});
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
       WithNamespace({{"namespaces", "", "add every namespace"},
                      {"engines", "", "add the registered engines"}},
                     false),
       RunStats},
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
       {kNamespaceFlags[0],
        {"hash-file", "FILE", "block hashes in hex, one per line"},
        {"tokens", "FILE", "token ids to hash into full pages (with --page-tokens)"},
        {"page-tokens", "N", "tokens per page of the namespace's engines"}},
       RunLookup},
      {"evict", "make room in a tier (demote or drop blocks)",
       "evict (--namespace=HEX | --tenant=T --model=M --partition=P | --all) "
       "[--tier=gpu|host|disk]\n"
       "         (--bytes=SIZE | --blocks=N | --hashes=HEX,...) [--drop]",
       "Makes room: least recently used blocks of the selected namespaces leave --tier (demoted\n"
       "to the next tier unless --drop; without --tier they leave the cache). SIZE takes KiB,\n"
       "MiB, GiB suffixes. --hashes evicts exactly those blocks of one --namespace.",
       WithNamespace({{"tier", "TIER", "the tier to make room in: gpu, host or disk"},
                      {"bytes", "SIZE", "this many bytes (KiB, MiB, GiB suffixes)"},
                      {"blocks", "N", "this many blocks"},
                      {"hashes", "HEX,...", "exactly these blocks of one --namespace"},
                      {"drop", "", "drop the blocks instead of demoting them"}},
                     true),
       RunEvict},
      {"clear", "remove every block of namespaces",
       "clear (--namespace=HEX | --tenant=T --model=M --partition=P | --all) "
       "[--tier=gpu|host|disk] [--include-parked]",
       "Removes every block of the selected namespaces (from one tier with --tier);\n"
       "--include-parked also releases their parked requests.",
       WithNamespace({{"tier", "TIER", "only this tier: gpu, host or disk"},
                      {"include-parked", "", "also release parked requests"}},
                     true),
       RunClear},
      {"verify", "scrub stored blocks, report and remove bad ones",
       "verify [--tier=host|disk] [--namespace=HEX | --tenant=T ...] [--headers-only]\n"
       "          [--report-only] [--max-blocks=N] [--quiet]",
       "Scrubs stored blocks: reads each one back and checks its header and checksum against\n"
       "the index (--headers-only: headers only). Works namespace by namespace and tier by tier,\n"
       "printing progress on stderr (--quiet: none). Bad blocks are listed and removed (kept\n"
       "with --report-only). Exit status 3 when any block is bad, 4 when --timeout stopped it.",
       WithNamespace({{"tier", "TIER", "only this tier: host or disk"},
                      {"headers-only", "", "check headers only"},
                      {"report-only", "", "list bad blocks but keep them"},
                      {"max-blocks", "N", "stop after checking N blocks"},
                      {"quiet", "", "no progress on stderr"}},
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
       {{"flush-to-disk", "", "also copy host-tier blocks without a disk copy to disk"},
        {"cancel", "", "accept work again"}},
       RunDrain},
      {"watch", "follow cache events",
       "watch [--namespace=HEX | --tenant=T ...] [--from=now|snapshot|SEQUENCE] [--count=N]\n"
       "         [--duration=SECONDS]\n"
       "       watch --format=vllm (--endpoint=ENDPOINT | --config=FILE [--set=FIELD=VALUE ...])\n"
       "         [--topic=PREFIX] [--count=N] [--duration=SECONDS]",
       "Follows cache events (blocks stored, moved, removed; namespaces cleared; events lost),\n"
       "one line each (--json: one JSON object per line) until Ctrl-C, --count events or\n"
       "--duration seconds. --from=snapshot first lists the blocks held now; --from=SEQUENCE\n"
       "replays retained events after that sequence. --format=vllm instead subscribes to the\n"
       "daemon's KV-events publisher (kv_events, over ZeroMQ; not gRPC) and prints each vLLM KV\n"
       "event as a JSON object per line, as routers receive it.",
       WithNamespace(
           {{"from", "WHERE", "now (default), snapshot, or an event SEQUENCE to replay after"},
            {"count", "N", "stop after N events"},
            {"duration", "SECONDS", "stop after this many seconds"},
            {"format", "FORMAT", "kvtier (default: WatchEvents) or vllm (the KV-events socket)"},
            {"endpoint", "ENDPOINT", "with --format=vllm: the ZeroMQ endpoint to subscribe to"},
            {"config", "FILE",
             "with --format=vllm: the daemon's configuration (kv_events.endpoint)"},
            {"set", "FIELD=VALUE", "with --config: override one field, as kvtierd --set does",
             true},
            {"topic", "PREFIX", "with --format=vllm: only messages whose topic starts so"}},
           false),
       RunWatch},
      {"config validate",
       "check a kvtierd configuration file",
       "config validate FILE [--set=FIELD=VALUE ...]",
       "Loads FILE as kvtierd would (defaults, the file, then each --set) and reports whether\n"
       "it is valid, with the effective socket and tier sizes, or lists every error; exit\n"
       "status 1 when it is not (also for a FILE that is a directory, FIFO or device). Does not\n"
       "contact the daemon.",
       {{"set", "FIELD=VALUE", "override one field after the file, as kvtierd --set does", true}},
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

void PrintVersion() { std::cout << kvtier::build_info::VersionText("kvtierctl"); }

void DeclareCommandLine(cli::CommandLine& command_line) {
  command_line.SetVersion(PrintVersion);
  cli::Command& root = command_line.root();
  root.SetUsage("[connection flags] COMMAND [flags]")
      .SetFooter(kExitStatus)
      .SetFlagGroup("connection flags (every command that talks to kvtierd)")
      .AddFlag("socket", "PATH",
               "kvtierd's Unix socket (default $KVTIER_SOCKET, else /run/kvtier/kvtier.sock)")
      .AddFlag("address", "ADDRESS",
               "unix:PATH, or HOST:PORT for kvtierd's TCP listener (TLS by default)")
      .AddFlag("tls-ca", "FILE", "CA certificates for a HOST:PORT address")
      .AddFlag("tls-cert", "FILE", "client certificate (with --tls-key)")
      .AddFlag("tls-key", "FILE", "client private key (with --tls-cert)")
      .AddFlag("tls-server-name", "NAME", "the name the server's certificate must carry")
      .AddSwitch("insecure", "plain text to a HOST:PORT address on loopback")
      .AddFlag("token-file", "FILE",
               "file whose first line is the bearer token (default $KVTIER_TOKEN_FILE);\n"
               "admin commands need an admin tenant's token when authentication is on")
      .AddFlag("timeout", "SECONDS",
               "deadline of each call (default 5; drain, verify, clear, evict: 600)")
      .AddSwitch("json", "machine-readable output on stdout");
  cli::Command* config = nullptr;
  for (const Command& c : Commands()) {
    const std::string name = c.name;
    cli::Command* sub = nullptr;
    if (name.rfind("config ", 0) == 0) {
      if (config == nullptr) {
        config = &root.AddSubcommand("config", "kvtierd configuration files");
        config->SetUsage("[connection flags] config COMMAND");
      }
      sub = &config->AddSubcommand(name.substr(7), c.summary);
    } else {
      sub = &root.AddSubcommand(name, c.summary);
    }
    sub->SetUsage(std::string("[connection flags] ") + c.synopsis + " [--json]")
        .SetDescription(c.help)
        .SetFooter(kExitStatus);
    for (const FlagSpec& f : c.flags) {
      if (f.value_name.empty()) {
        sub->AddSwitch(f.name, f.help);
      } else if (f.repeatable) {
        sub->AddRepeatedFlag(f.name, f.value_name, f.help);
      } else {
        sub->AddFlag(f.name, f.value_name, f.help);
      }
    }
    if (name == "lookup") sub->AddPositionals("HASH", "block hashes in hex, in chain order");
    if (name == "config validate") sub->AddPositionals("FILE", "the configuration file");
  }
}

}  // namespace

int UsageError(const Invocation& inv, const std::string& message) {
  return inv.args.PrintUsageError(message);
}

int Main(int argc, char** argv) {
  cli::CommandLine command_line("kvtierctl");
  DeclareCommandLine(command_line);
  Invocation inv;
  if (std::optional<int> exit_status = command_line.Parse(argc, argv, &inv.args)) {
    return *exit_status;
  }
  inv.command = inv.args.command();
  inv.positional = inv.args.positional();
  for (const Command& c : Commands()) {
    if (inv.command == c.name) return c.run(inv);
  }
  return UsageError(inv, "no command");
}

}  // namespace kvtier::ctl

int main(int argc, char** argv) { return kvtier::ctl::Main(argc, argv); }
