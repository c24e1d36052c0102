// `kvtier-bench route`: for each policy (round-robin, then prefix) it starts two fresh kvtierd
// nodes (tools/bench/daemon_process.h; by default the binary next to kvtier-bench) on scratch
// directories of their own, each with a host tier of --host-capacity (4 MiB chunks, not pinned),
// no disk tier, no cluster tier, no metrics listener, and kv_events on: a PUB socket and a replay
// ROUTER socket on ipc:// endpoints in its directory. Then this process plays the example engine
// (tools/engine/replay.h) over both nodes: the same synthetic agentic sessions for both policies
// (--sessions sessions sharing --system-prompts system prompts, growing by tool results; the
// generator of tools/engine/trace.h with --seed), codec --codec, the "tiny" layout (2 layers, 1
// KV head of 64 dims, BF16) with --tokens-per-page tokens a page. Round-robin serves session i on
// node i mod 2; prefix asks the router (--router, tools/router/kv_router.py, subscribed to both
// nodes' streams) for the node whose cache holds the longest prefix of the session's prompt. A
// session's later turns (tool-call resumes) stay on its node. Every page kvtierd returns is
// checked against the engine's content model. The report gives per policy the prompt tokens, the
// prefix tokens served from cache and their share, the prefill tokens computed, the sessions per
// node, the router's matched pages and counters, the tokens recomputed after a tool call whose
// parked pages were evicted (counted as hook errors too), and the mismatches (which must be 0).
// Daemons are stopped with SIGTERM at the end of each policy, on errors too.
//
// Run: build/bin/kvtier-bench route --sessions=64 --system-prompts=8 --host-capacity=256MiB
#include "tools/bench/route_bench.h"

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "kvtier/compression.h"
#include "kvtier/layout.h"
#include "tools/bench/daemon_process.h"
#include "tools/engine/replay.h"
#include "tools/engine/trace.h"

namespace kvtier::bench {
namespace {

constexpr size_t kNodes = 2;

struct RouteFlags {
  std::string kvtierd, dir, router = KV_ROUTER_PATH, codec = "raw", host_capacity = "256MiB";
  engine::SyntheticOptions workload;
  uint32_t tokens_per_page = 512;
  bool json = false;
};

struct PolicyResult {
  std::string policy;
  engine::EngineRunResult run;
};

absl::StatusOr<RouteFlags> ParseFlags(const cli::Values& values) {
  RouteFlags f;
  f.workload.sessions = 64;
  f.workload.system_prompts = 8;
  f.json = values.Has("json");
  f.kvtierd = values.Get("kvtierd").value_or("");
  f.dir = values.Get("dir").value_or("");
  f.router = values.Get("router").value_or(f.router);
  f.codec = values.Get("codec").value_or(f.codec);
  f.host_capacity = values.Get("host-capacity").value_or(f.host_capacity);
  absl::StatusOr<std::optional<uint32_t>> sessions = values.OptionalUint32("sessions");
  absl::StatusOr<std::optional<uint32_t>> prompts = values.OptionalUint32("system-prompts");
  absl::StatusOr<std::optional<uint64_t>> seed = values.OptionalUint64("seed");
  absl::StatusOr<std::optional<uint32_t>> page = values.OptionalUint32("tokens-per-page");
  for (const absl::Status& st :
       {sessions.status(), prompts.status(), seed.status(), page.status()}) {
    if (!st.ok()) return st;
  }
  f.workload.sessions = sessions->value_or(f.workload.sessions);
  f.workload.system_prompts = prompts->value_or(f.workload.system_prompts);
  f.workload.seed = seed->value_or(f.workload.seed);
  f.tokens_per_page = page->value_or(f.tokens_per_page);
  if (f.workload.sessions == 0 || f.workload.system_prompts == 0 || f.tokens_per_page == 0) {
    return cli::UsageError("--sessions, --system-prompts and --tokens-per-page must be positive");
  }
  if (f.codec != "raw" && f.codec != "nvfp4" && f.codec != "nvfp4+rope" && f.codec != "nvfp4x2") {
    return cli::UsageError(absl::StrCat("--codec: '", f.codec,
                                        "' is not raw, nvfp4, nvfp4+rope "
                                        "or nvfp4x2"));
  }
  return f;
}

std::string Quoted(const std::string& s) { return absl::StrCat("'", s, "'"); }

// One policy: two fresh daemons, the engine over them, the daemons stopped.
absl::StatusOr<PolicyResult> RunPolicy(const RouteFlags& f, const std::string& kvtierd,
                                       const std::string& dir, engine::RoutePolicy policy) {
  PolicyResult out;
  out.policy = policy == engine::RoutePolicy::kPrefix ? "prefix" : "round-robin";
  const std::string base = absl::StrCat(dir, "/", out.policy);
  bool unused = false;
  if (absl::StatusOr<std::string> made = PrepareScratchDir(base, "", &unused); !made.ok()) {
    return made.status();
  }
  std::vector<std::unique_ptr<DaemonProcess>> daemons;
  std::string router = absl::StrCat("exec ", Quoted(f.router));
  engine::EngineRunOptions options;
  absl::Status status;
  for (size_t n = 0; n < kNodes && status.ok(); ++n) {
    const std::string node_dir = absl::StrCat(base, "/node", n);
    absl::StatusOr<std::string> made = PrepareScratchDir(node_dir, "", &unused);
    if (!made.ok()) {
      status = made.status();
      break;
    }
    const std::string pub = absl::StrCat("ipc://", node_dir, "/kv.pub");
    const std::string replay = absl::StrCat("ipc://", node_dir, "/kv.replay");
    const std::vector<std::string> settings = {"host.capacity=" + f.host_capacity,
                                               "host.chunk=4MiB",
                                               "host.pin=none",
                                               "disk.capacity=0",
                                               "pools.allowed_dirs=[" + base + "]",
                                               "metrics.listen=\"\"",
                                               "kv_events.enabled=true",
                                               "kv_events.endpoint=" + pub,
                                               "kv_events.replay_endpoint=" + replay};
    DaemonStartOptions start;
    start.client_name = "kvtier-bench route";
    daemons.push_back(std::make_unique<DaemonProcess>());
    status = daemons.back()->Start(kvtierd, node_dir, settings, start);
    if (!status.ok()) {
      status = absl::Status(status.code(), absl::StrCat("node ", n, ": ", status.message(), "\n",
                                                        daemons.back()->LogTail()));
      break;
    }
    options.sockets.push_back(daemons.back()->socket_path());
    absl::StrAppend(&router, " --node ", Quoted(absl::StrCat(pub, ",", replay)));
  }
  if (status.ok()) {
    options.sessions = engine::SyntheticAgenticTrace(f.workload);
    options.layout = PageLayout::Gqa({2, 1, 64, f.tokens_per_page, DType::kBf16, 0, 0}).value();
    options.device = -1;
    options.pool_dir = base;
    options.model = "kvtier-bench/route";
    options.quiet = f.json;
    options.route = policy;
    options.router_command = router;
    CompressionConfig c;
    c.algorithm = "quantization_for_cold_page";
    const size_t plus = f.codec.find("+rope");
    c.quant = f.codec.substr(0, plus);
    c.rope_precision = plus == std::string::npos ? "quantized" : "lossless";
    options.configs.push_back(c);
    if (!f.json) std::fprintf(stderr, "kvtier-bench route: %s routing\n", out.policy.c_str());
    absl::StatusOr<engine::EngineRunResult> run = engine::RunEngine(options);
    if (run.ok()) {
      out.run = *std::move(run);
    } else {
      status = run.status();
    }
  }
  for (size_t n = 0; n < daemons.size(); ++n) {
    absl::Status stopped = daemons[n]->Stop();
    if (status.ok() && !stopped.ok()) {
      status = absl::Status(stopped.code(), absl::StrCat("node ", n, ": ", stopped.message()));
    }
  }
  if (!status.ok()) return status;
  return out;
}

std::string Pct(uint64_t part, uint64_t whole) {
  return whole == 0 ? "-" : absl::StrFormat("%.1f%%", 100.0 * part / whole);
}

void PrintTable(const std::vector<PolicyResult>& results, const RouteFlags& f) {
  std::printf(
      "kvtier-bench route: %u synthetic agentic sessions (seed %llu, %u system prompts of %u "
      "tokens), 2 kvtierd nodes with a %s host tier each and no disk tier, codec %s, %u tokens a "
      "page\n",
      f.workload.sessions, static_cast<unsigned long long>(f.workload.seed),
      f.workload.system_prompts, f.workload.system_prompt_tokens, f.host_capacity.c_str(),
      f.codec.c_str(), f.tokens_per_page);
  std::printf("%-12s %14s %14s %7s %14s %12s %10s %12s %10s\n", "policy", "prompt tok",
              "from cache", "share", "prefill tok", "recomputed", "sessions", "router pgs",
              "mismatches");
  for (const PolicyResult& r : results) {
    const engine::Report& rep = r.run.report;
    std::printf("%-12s %14llu %14llu %7s %14llu %12llu %10s %12s %10llu\n", r.policy.c_str(),
                static_cast<unsigned long long>(rep.prompt_tokens),
                static_cast<unsigned long long>(rep.cached_tokens),
                Pct(rep.cached_tokens, rep.prompt_tokens).c_str(),
                static_cast<unsigned long long>(rep.prefill_tokens),
                static_cast<unsigned long long>(rep.recomputed_tokens),
                absl::StrJoin(rep.sessions_per_node, "/").c_str(),
                r.run.router_stats.empty() ? "-" : absl::StrCat(rep.routed_pages).c_str(),
                static_cast<unsigned long long>(r.run.mismatches()));
  }
  for (const PolicyResult& r : results) {
    if (!r.run.router_stats.empty()) {
      std::printf("router (%s): %s\n", r.policy.c_str(), r.run.router_stats.c_str());
    }
  }
  if (results.size() == 2 && results[0].run.report.cached_tokens > 0) {
    std::printf(
        "prefix / round-robin: %.2fx tokens from cache, %.2fx prefill tokens\n",
        static_cast<double>(results[1].run.report.cached_tokens) /
            static_cast<double>(results[0].run.report.cached_tokens),
        static_cast<double>(results[1].run.report.prefill_tokens) /
            static_cast<double>(std::max<uint64_t>(1, results[0].run.report.prefill_tokens)));
  }
}

nlohmann::json ToJson(const std::vector<PolicyResult>& results, const RouteFlags& f) {
  nlohmann::json doc = {{"sessions", f.workload.sessions},
                        {"seed", f.workload.seed},
                        {"system_prompts", f.workload.system_prompts},
                        {"host_capacity", f.host_capacity},
                        {"codec", f.codec},
                        {"tokens_per_page", f.tokens_per_page},
                        {"policies", nlohmann::json::array()}};
  for (const PolicyResult& r : results) {
    const engine::Report& rep = r.run.report;
    doc["policies"].push_back({{"policy", r.policy},
                               {"prompt_tokens", rep.prompt_tokens},
                               {"cached_tokens", rep.cached_tokens},
                               {"prefill_tokens", rep.prefill_tokens},
                               {"recomputed_tokens", rep.recomputed_tokens},
                               {"sessions_per_node", rep.sessions_per_node},
                               {"routed_pages", rep.routed_pages},
                               {"router_stats", r.run.router_stats},
                               {"hook_errors", rep.hook_errors},
                               {"first_hook_error", rep.first_error},
                               {"mismatches", r.run.mismatches()}});
  }
  return doc;
}

}  // namespace

void DeclareRouteBenchFlags(cli::Command& command) {
  command.SetDescription(
      "Routing simulation: the example engine's synthetic agentic sessions over two kvtierd "
      "nodes that\n"
      "publish KV events, round-robin against prefix routing (tools/router/kv_router.py) in the "
      "same run.");
  command.AddFlag("kvtierd", "PATH",
                  "the daemon binary (default: kvtierd in the directory of kvtier-bench)");
  command.AddFlag("dir", "DIR",
                  "scratch directory for the daemons and the engine's pools; created if missing, "
                  "and kept\n(default: a fresh directory under /tmp, removed at the end)");
  command.AddFlag("router", "PATH", "the router program (default: the source tree's kv_router.py)");
  command.AddFlag("sessions", "N", "synthetic sessions (default 64)");
  command.AddFlag("system-prompts", "N", "shared system prompts of 4096 tokens (default 8)");
  command.AddFlag("seed", "N", "workload seed (default 1)");
  command.AddFlag("host-capacity", "SIZE", "each node's host tier (default 256MiB)");
  command.AddFlag("tokens-per-page", "N", "tokens a page (default 512)");
  command.AddFlag("codec", "NAME", "cold-page codec: raw (default), nvfp4, nvfp4+rope, nvfp4x2");
  command.AddSwitch("json", "print JSON instead of the table");
}

int RunRouteBench(const cli::Values& values) {
  absl::StatusOr<RouteFlags> parsed = ParseFlags(values);
  if (!parsed.ok()) return values.PrintUsageError(parsed.status().message());
  const RouteFlags& f = *parsed;
  std::string kvtierd = f.kvtierd;
  if (kvtierd.empty()) {
    absl::StatusOr<std::string> found = DefaultKvtierd();
    if (!found.ok()) {
      std::fprintf(stderr, "kvtier-bench route: %s\n", found.status().ToString().c_str());
      return 1;
    }
    kvtierd = *std::move(found);
  }
  bool temporary = false;
  absl::StatusOr<std::string> dir = PrepareScratchDir(f.dir, "kvtier-route", &temporary);
  if (!dir.ok()) {
    std::fprintf(stderr, "kvtier-bench route: %s\n", dir.status().ToString().c_str());
    return 1;
  }
  std::vector<PolicyResult> results;
  int exit_code = 0;
  for (const engine::RoutePolicy policy :
       {engine::RoutePolicy::kRoundRobin, engine::RoutePolicy::kPrefix}) {
    absl::StatusOr<PolicyResult> r = RunPolicy(f, kvtierd, *dir, policy);
    if (!r.ok()) {
      std::fprintf(stderr, "kvtier-bench route: %s\n", r.status().ToString().c_str());
      exit_code = 1;
      break;
    }
    if (r->run.mismatches() != 0 || r->run.report.hook_errors != 0) exit_code = 1;
    results.push_back(*std::move(r));
  }
  if (temporary) {
    if (absl::Status removed = RemoveScratchDir(*dir); !removed.ok()) {
      std::fprintf(stderr, "kvtier-bench route: %s\n", std::string(removed.message()).c_str());
    }
  }
  if (f.json) {
    std::printf("%s\n", ToJson(results, f).dump(2).c_str());
  } else {
    PrintTable(results, f);
    for (const PolicyResult& r : results) {
      if (r.run.report.hook_errors != 0) {
        std::printf("%s: %llu hook errors (first: %s)\n", r.policy.c_str(),
                    static_cast<unsigned long long>(r.run.report.hook_errors),
                    r.run.report.first_error.c_str());
      }
    }
  }
  return exit_code;
}

}  // namespace kvtier::bench
