// kvtierd: the per-node kvtier daemon. See docs/CONFIG.md and `kvtierd --help`.
#include <signal.h>

#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "common/logging.h"
#include "daemon/kvtierd/config.h"
#include "daemon/kvtierd/daemon.h"
#include "daemon/kvtierd/startup_checks.h"

namespace {

constexpr const char* kUsage = R"(usage: kvtierd [options]

  --config=FILE            YAML configuration (fields: kvtierd --print-default-config)
  --set=FIELD=VALUE        override one field, e.g. --set=host.capacity=8GiB (repeatable)
  --socket=PATH            same as --set=server.socket=PATH
  --state-dir=DIR          same as --set=state_dir=DIR
  --print-default-config   print the default configuration, with every field explained, and exit
  --check-config           check the configuration and what a start with it needs (listen
                           addresses free, TLS certificate and key a pair, tokens file,
                           directories, tier sizes), report every problem, then exit
  --repair-index           repair a damaged index (or set it aside when it cannot be), then exit;
                           needs the configuration the daemon runs with, and no daemon running
  --version                print the version and exit

Signals: SIGTERM/SIGINT drain and stop; SIGHUP reloads log.level.
systemd: with NOTIFY_SOCKET set, kvtierd sends READY=1, RELOADING=1, STOPPING=1 and (with
WATCHDOG_USEC) WATCHDOG=1 while healthy; with LISTEN_FDS=1 and LISTEN_PID it serves gRPC on the
inherited Unix socket (fd 3) instead of binding server.socket. See deploy/systemd/README.md.
Exit status: 0 after a clean stop, 1 on a configuration or start-up error, 2 on a usage error.
)";

}  // namespace

int main(int argc, char** argv) {
  std::string file;
  std::vector<std::string> overrides;
  bool check_only = false;
  bool repair_index = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](const char* flag) -> std::string { return arg.substr(std::strlen(flag)); };
    if (absl::StartsWith(arg, "--config=")) {
      file = value("--config=");
    } else if (absl::StartsWith(arg, "--set=")) {
      overrides.push_back(value("--set="));
    } else if (absl::StartsWith(arg, "--socket=")) {
      overrides.push_back("server.socket=" + value("--socket="));
    } else if (absl::StartsWith(arg, "--state-dir=")) {
      overrides.push_back("state_dir=" + value("--state-dir="));
    } else if (arg == "--print-default-config") {
      std::cout << kvtier::kvtierd::DefaultConfigYaml();
      return 0;
    } else if (arg == "--check-config") {
      check_only = true;
    } else if (arg == "--repair-index") {
      repair_index = true;
    } else if (arg == "--version") {
      std::cout << kvtier::kvtierd::VersionText();
      return 0;
    } else if (arg == "--help" || arg == "-h") {
      std::cout << kUsage;
      return 0;
    } else {
      std::cerr << "kvtierd: unknown argument '" << arg << "'\n" << kUsage;
      return 2;
    }
  }
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
