// kvtierd: the per-node kvtier daemon. See docs/CONFIG.md and `kvtierd --help`.
#include <signal.h>

#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "common/cli/command_line.h"
#include "common/logging.h"
#include "daemon/config/config.h"
#include "daemon/kvtierd/daemon.h"
#include "daemon/kvtierd/startup_checks.h"

namespace {

constexpr const char* kFooter = R"(Signals: SIGTERM/SIGINT drain and stop; SIGHUP reloads log.level.
systemd: with NOTIFY_SOCKET set, kvtierd sends READY=1, RELOADING=1, STOPPING=1 and (with
WATCHDOG_USEC) WATCHDOG=1 while healthy; with LISTEN_FDS=1 and LISTEN_PID it serves gRPC on the
inherited Unix socket (fd 3) instead of binding server.socket. See deploy/systemd/README.md.
Exit status: 0 after a clean stop, 1 on a configuration or start-up error, 2 on a usage error.)";

void PrintVersion() { std::cout << kvtier::kvtierd::VersionText(); }

}  // namespace

int main(int argc, char** argv) {
  kvtier::cli::CommandLine command_line("kvtierd");
  command_line.SetVersion(PrintVersion);
  command_line.root()
      .SetUsage("[options]")
      .AddFlag("config", "FILE", "YAML configuration (fields: kvtierd --print-default-config)")
      .AddRepeatedFlag("set", "FIELD=VALUE",
                       "override one field, e.g. --set=host.capacity=8GiB; applied after the\n"
                       "file, in command-line order with --socket and --state-dir")
      .AddRepeatedFlag("socket", "PATH", "same as --set=server.socket=PATH")
      .AddRepeatedFlag("state-dir", "DIR", "same as --set=state_dir=DIR")
      .AddSwitch("print-default-config",
                 "print the default configuration, with every field explained, and exit")
      .AddSwitch("check-config",
                 "check the configuration and what a start with it needs (listen\n"
                 "addresses free, TLS certificate and key a pair, tokens file,\n"
                 "directories, tier sizes), report every problem, then exit")
      .AddSwitch("repair-index",
                 "repair a damaged index (or set it aside when it cannot be), then exit;\n"
                 "needs the configuration the daemon runs with, and no daemon running")
      .SetFooter(kFooter);
  kvtier::cli::Values args;
  if (std::optional<int> exit_status = command_line.Parse(argc, argv, &args)) return *exit_status;
  if (args.Has("print-default-config")) {
    std::cout << kvtier::kvtierd::DefaultConfigYaml();
    return 0;
  }
  const std::string file = args.Get("config").value_or("");
  std::vector<std::string> overrides;
  for (const auto& [flag, value] : args.flags()) {
    if (flag == "set") overrides.push_back(value);
    if (flag == "socket") overrides.push_back("server.socket=" + value);
    if (flag == "state-dir") overrides.push_back("state_dir=" + value);
  }
  const bool check_only = args.Has("check-config");
  const bool repair_index = args.Has("repair-index");
  absl::StatusOr<kvtier::kvtierd::Config> config = kvtier::kvtierd::LoadConfig(file, overrides);
  if (!config.ok()) {
    for (absl::string_view line : absl::StrSplit(config.status().message(), '\n')) {
      std::cerr << "kvtierd: " << line << "\n";
    }
    return 1;
  }
  if (check_only) {
    if (absl::Status st = kvtier::kvtierd::CheckStartable(*config); !st.ok()) {
      for (absl::string_view line : absl::StrSplit(st.message(), '\n')) {
        std::cerr << "kvtierd: " << line << "\n";
      }
      return 1;
    }
    for (const std::string& warning : kvtier::kvtierd::ConfigWarnings(*config)) {
      std::cerr << "kvtierd: warning: " << warning << "\n";
    }
    std::cout << "kvtierd: configuration is valid\n";
    return 0;
  }
  if (repair_index) {
    absl::StatusOr<std::string> repaired = kvtier::kvtierd::RepairIndex(*config);
    if (!repaired.ok()) {
      std::cerr << "kvtierd: " << repaired.status().message() << "\n";
      return 1;
    }
    std::cout << "kvtierd: " << *repaired << "\n";
    return 0;
  }
  signal(SIGPIPE, SIG_IGN);                 // a peer that goes away is an error return, not a crash
  kvtier::kvtierd::BlockShutdownSignals();  // before any thread starts
  absl::Status st = kvtier::kvtierd::Run(*config, {file, overrides});
  if (!st.ok()) {
    for (absl::string_view line : absl::StrSplit(st.message(), '\n')) {
      KVTIER_LOG(kError, "kvtierd: ", line);
    }
    return 1;
  }
  return 0;
}
