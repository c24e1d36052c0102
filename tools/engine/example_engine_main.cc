// kvtier-example-engine: a small inference "engine" that shows libkvtier end to end. It owns a
// paged KV pool (GPU memory shared through CUDA IPC when a device is there, a shared-memory file
// otherwise), replays a workload (a Mooncake trace or the built-in agentic generator) in arrival
// order, and drives the compression framework's hooks only: request start (lookup and onboard),
// prefill chunk and context end, generation step begin and end, tool-call pause and resume (park
// and resume), request finish (offload). Page contents derive from the token prefix, so every page
// kvtierd returns is checked: exactly for a lossless codec, against the CPU codec's round trip for
// a lossy one. Prints prefix tokens served from cache, hits by tier, bytes moved and mismatches.
//
// Exit status: 0 when the replay ran and nothing mismatched, 1 on an error or a mismatch, 2 on a
// usage error.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/cli/command_line.h"
#include "common/file_reading.h"
#include "kvtier/client.h"
#include "kvtier/compression.h"
#include "kvtier/layout.h"
#include "nlohmann/json.hpp"
#include "tools/engine/replay.h"
#include "tools/engine/trace.h"

namespace kvtier::engine {
namespace {

// One flag: a switch when `value_name` is empty.
struct FlagDef {
  const char* name;
  const char* value_name;
  const char* help;
};

const FlagDef kFlags[] = {
    {"socket", "PATH", "kvtierd's socket (default $KVTIER_SOCKET, else /run/kvtier/kvtier.sock)"},
    {"sockets", "P1,P2,...", "a fleet of kvtierd nodes instead of --socket (see --route)"},
    {"route", "POLICY",
     "which node serves a session: round-robin (default: session i on node i mod N) or prefix "
     "(the node --router-command names from the nodes' KV events)"},
    {"router-command", "CMD",
     "the router for --route=prefix, run with /bin/sh -c, e.g. 'tools/router/kv_router.py "
     "--node ipc:///run/a.pub,ipc:///run/a.replay --node ...' (node i: the i-th of --sockets)"},
    {"trace", "FILE", "replay a Mooncake trace (JSON lines); default: the synthetic agentic trace"},
    {"requests", "N", "replay the first N requests (trace) or N sessions (synthetic; default 32)"},
    {"seed", "N", "synthetic trace seed (default 1)"},
    {"codec", "NAME", "cold-page codec: raw, nvfp4 (default), nvfp4+rope, nvfp4x2"},
    {"config", "FILES", "compression configs (YAML/JSON), comma-separated; replaces --codec"},
    {"layout", "NAME",
     "model layout: tiny (default: 2 layers, 1 KV head of 64, bf16), a preset "
     "(qwen3-8b, llama-3.1-8b, ...) or a layout JSON file"},
    {"tokens-per-page", "N", "tokens per page (default 512, the Mooncake block)"},
    {"device", "WHERE", "KV pool in GPU memory: auto (default), host, or a device ordinal"},
    {"pool-dir", "DIR",
     "directory of the shared-memory pool (default $KVTIER_POOL_DIR or "
     "/dev/shm)"},
    {"model", "NAME", "model name of the cache namespace (default kvtier-example/<layout>)"},
    {"json", "", "print the report as JSON"},
    {"quiet", "", "no progress lines on stderr"},
};

std::string EnvOr(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::string(v) : fallback;
}

absl::StatusOr<PageLayout> LayoutFromFlag(const std::string& name, uint32_t tokens_per_page) {
  if (name == "tiny") return PageLayout::Gqa({2, 1, 64, tokens_per_page, DType::kBf16, 0, 0});
  if (name.size() > 5 && name.substr(name.size() - 5) == ".json") {
    absl::StatusOr<std::string> text = ReadRegularFile(name, uint64_t{16} << 20, "layout file");
    if (!text.ok()) return text.status();
    return PageLayout::FromJson(*text);
  }
  return PageLayout::Preset(name, tokens_per_page);
}

std::string Pct(uint64_t part, uint64_t whole) {
  return whole == 0 ? "-" : absl::StrFormat("%.1f%%", 100.0 * part / whole);
}

int Main(int argc, char** argv) {
  cli::CommandLine command_line("kvtier-example-engine");
  command_line.root().SetFooter(
      "Exit status: 0 when the replay ran and nothing mismatched, 1 on an error or a mismatch, 2 "
      "on\n"
      "a usage error.");
  for (const FlagDef& flag : kFlags) {
    if (*flag.value_name == '\0') {
      command_line.root().AddSwitch(flag.name, flag.help);
    } else {
      command_line.root().AddFlag(flag.name, flag.value_name, flag.help);
    }
  }
  cli::Values flags;
  if (std::optional<int> exit_status = command_line.Parse(argc, argv, &flags)) {
    return *exit_status;
  }
  auto usage = [&](const absl::Status& st) { return flags.PrintUsageError(st.message()); };
  auto fail = [](const absl::Status& st) {
    std::fprintf(stderr, "kvtier-example-engine: %s\n", st.ToString().c_str());
    return 1;
  };
  const bool json = flags.Has("json"), quiet = flags.Has("quiet");
  absl::StatusOr<std::optional<uint64_t>> requests = flags.OptionalUint64("requests");
  absl::StatusOr<std::optional<uint64_t>> seed = flags.OptionalUint64("seed");
  absl::StatusOr<std::optional<uint32_t>> page_tokens = flags.OptionalUint32("tokens-per-page");
  for (const absl::Status& st : {requests.status(), seed.status(), page_tokens.status()}) {
    if (!st.ok()) return usage(st);
  }
  const uint32_t tokens_per_page = page_tokens->value_or(512);
  const std::string layout_name = flags.Get("layout").value_or("tiny");
  absl::StatusOr<PageLayout> layout = LayoutFromFlag(layout_name, tokens_per_page);
  if (!layout.ok()) return usage(layout.status());

  // The workload.
  std::vector<Session> sessions;
  std::string workload;
  if (std::optional<std::string> trace = flags.Get("trace")) {
    absl::StatusOr<std::vector<Session>> loaded = LoadMooncakeTrace(*trace, requests->value_or(0));
    if (!loaded.ok()) return fail(loaded.status());
    sessions = *std::move(loaded);
    workload = *trace;
  } else {
    SyntheticOptions o;
    o.seed = seed->value_or(1);
    o.sessions = static_cast<uint32_t>(requests->value_or(32));
    sessions = SyntheticAgenticTrace(o);
    workload = absl::StrCat("synthetic agentic sessions (seed ", o.seed, ")");
  }
  // The KV pool's place.
  const std::string where = flags.Get("device").value_or("auto");
  int device = -1;
  if (where == "auto") {
    device = CudaAvailable() ? 0 : -1;
  } else if (where != "host") {
    device = std::atoi(where.c_str());
    if (std::to_string(device) != where || device < 0) {
      return usage(absl::InvalidArgumentError(
          absl::StrCat("--device: expected auto, host or a device ordinal, not '", where, "'")));
    }
  }
  EngineRunOptions options;
  options.socket = flags.Get("socket").value_or(EnvOr("KVTIER_SOCKET", "/run/kvtier/kvtier.sock"));
  if (std::optional<std::string> fleet = flags.Get("sockets"); fleet.has_value()) {
    options.sockets = absl::StrSplit(*fleet, ',', absl::SkipEmpty());
  }
  const std::string route = flags.Get("route").value_or("round-robin");
  if (route == "prefix") {
    options.route = RoutePolicy::kPrefix;
    options.router_command = flags.Get("router-command").value_or("");
    if (options.router_command.empty()) {
      return usage(absl::InvalidArgumentError("--route=prefix needs --router-command"));
    }
  } else if (route != "round-robin") {
    return usage(absl::InvalidArgumentError(
        absl::StrCat("--route: expected round-robin or prefix, not '", route, "'")));
  }
  options.sessions = std::move(sessions);
  options.layout = *layout;
  options.device = device;
  options.pool_dir = flags.Get("pool-dir").value_or(EnvOr("KVTIER_POOL_DIR", "/dev/shm"));
  options.model = flags.Get("model").value_or(absl::StrCat("kvtier-example/", layout_name));
  options.quiet = quiet;
  if (std::optional<std::string> files = flags.Get("config")) {
    for (const std::string& f :
         std::vector<std::string>(absl::StrSplit(*files, ',', absl::SkipEmpty()))) {
      absl::StatusOr<CompressionConfig> c = LoadCompressionConfig(f);
      if (!c.ok()) return fail(c.status());
      options.configs.push_back(*std::move(c));
    }
  } else {
    CompressionConfig c;
    c.algorithm = "quantization_for_cold_page";
    const std::string codec = flags.Get("codec").value_or("nvfp4");
    const size_t plus = codec.find("+rope");
    c.quant = codec.substr(0, plus);
    c.rope_precision = plus == std::string::npos ? "quantized" : "lossless";
    options.configs.push_back(c);
  }
  if (!quiet) std::fprintf(stderr, "kvtier-example-engine: replaying %s\n", workload.c_str());
  absl::StatusOr<EngineRunResult> result = RunEngine(options);
  if (!result.ok()) return fail(result.status());
  const EngineRunResult& res = *result;
  std::map<Tier, uint64_t> hits = res.hits_by_tier;
  const std::string& codec = res.codec;
  const std::vector<std::string>& method_names = res.methods;
  const uint64_t hot_off = res.hot_bytes_offloaded, cold_off = res.cold_bytes_offloaded;
  const uint64_t hot_on = res.hot_bytes_onboarded, cold_on = res.cold_bytes_onboarded;
  const Report& r = res.report;
  const uint64_t mismatches = r.page_mismatches + r.resume_mismatches;
  if (json) {
    nlohmann::json j = {
        {"workload", workload},
        {"codec", codec},
        {"methods", method_names},
        {"pool", res.device_pool ? "gpu" : "host"},
        {"page_bytes", res.page_bytes},
        {"sessions", r.sessions},
        {"turns", r.turns},
        {"prompt_tokens", r.prompt_tokens},
        {"cached_prefix_tokens", r.cached_tokens},
        {"prefill_tokens", r.prefill_tokens},
        {"generated_tokens", r.generated_tokens},
        {"hits_by_tier",
         {{"gpu", hits[Tier::kGpu]}, {"host", hits[Tier::kHost]}, {"disk", hits[Tier::kDisk]}}},
        {"pages_checked", r.pages_checked},
        {"resumes", r.resumes},
        {"resumed_pages_checked", r.resumed_pages_checked},
        {"recomputed_tokens", r.recomputed_tokens},
        {"evicted_tokens", r.evicted_tokens},
        {"mismatches", mismatches},
        {"route", route},
        {"sessions_per_node", r.sessions_per_node},
        {"routed_pages", r.routed_pages},
        {"router_stats", res.router_stats},
        {"hook_errors", r.hook_errors},
        {"first_hook_error", r.first_error},
        {"hot_bytes_offloaded", hot_off},
        {"cold_bytes_offloaded", cold_off},
        {"cold_bytes_onboarded", cold_on},
        {"hot_bytes_onboarded", hot_on},
    };
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("kvtier-example-engine: %llu sessions, %llu turns (%s), codec %s, methods %s\n",
                static_cast<unsigned long long>(r.sessions),
                static_cast<unsigned long long>(r.turns), workload.c_str(), codec.c_str(),
                absl::StrJoin(method_names, ", ").c_str());
    std::printf("  prompt tokens                %14llu\n",
                static_cast<unsigned long long>(r.prompt_tokens));
    std::printf("  prefix tokens from cache     %14llu  (%s of prompt tokens)\n",
                static_cast<unsigned long long>(r.cached_tokens),
                Pct(r.cached_tokens, r.prompt_tokens).c_str());
    std::printf("  prefill tokens computed      %14llu\n",
                static_cast<unsigned long long>(r.prefill_tokens));
    if (r.sessions_per_node.size() > 1) {
      std::printf("  sessions per node (%s) %*s\n", route.c_str(),
                  static_cast<int>(std::max<size_t>(1, 16 - route.size())),
                  absl::StrJoin(r.sessions_per_node, " / ").c_str());
    }
    if (!res.router_stats.empty()) std::printf("  router: %s\n", res.router_stats.c_str());
    std::printf(
        "  blocks served  gpu/host/disk %14s\n",
        absl::StrCat(hits[Tier::kGpu], " / ", hits[Tier::kHost], " / ", hits[Tier::kDisk]).c_str());
    std::printf(
        "  tool-call resumes            %14llu  (%llu pages checked, %llu tokens "
        "recomputed)\n",
        static_cast<unsigned long long>(r.resumes),
        static_cast<unsigned long long>(r.resumed_pages_checked),
        static_cast<unsigned long long>(r.recomputed_tokens));
    std::printf("  bytes offloaded hot / cold   %14s\n",
                absl::StrCat(hot_off, " / ", cold_off).c_str());
    std::printf("  bytes onboarded cold / hot   %14s\n",
                absl::StrCat(cold_on, " / ", hot_on).c_str());
    std::printf("  pages checked                %14llu\n",
                static_cast<unsigned long long>(r.pages_checked + r.resumed_pages_checked));
    std::printf("  mismatches                   %14llu\n",
                static_cast<unsigned long long>(mismatches));
    if (r.pages_checked + r.resumed_pages_checked == 0) {
      std::printf("  note: no page came back from kvtierd, so none was checked\n");
    }
    if (r.evicted_tokens > 0) {
      std::printf("  tokens evicted (decode)      %14llu\n",
                  static_cast<unsigned long long>(r.evicted_tokens));
    }
    if (r.hook_errors > 0) {
      std::printf("  hook errors                  %14llu  (first: %s)\n",
                  static_cast<unsigned long long>(r.hook_errors), r.first_error.c_str());
    }
  }
  return mismatches == 0 && r.hook_errors == 0 ? 0 : 1;
}

}  // namespace
}  // namespace kvtier::engine

int main(int argc, char** argv) { return kvtier::engine::Main(argc, argv); }
