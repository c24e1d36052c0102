// `kvtier-bench e2e`: GPU pages end to end through a kvtierd child process, codec raw and codec
// nvfp4 in the same run. This process plays the engine: it starts kvtierd (by default the binary
// next to kvtier-bench; tools/bench/daemon_process.h) on a scratch directory with a host tier
// pinned with CUDA (--host-capacity, 64 MiB chunks), no disk tier, no metrics listener and 4
// workers, and waits until Hello answers. Then, for codec raw and then codec nvfp4, it allocates a
// device pool of 2 * --pages slots of one --preset page (Qwen3-8B BF16 by default: 36 layers, 8 KV
// heads, 128 dims, 32 tokens, 4,718,592 bytes, all buffers in one flat pool "kv"), fills the first
// --pages slots with N(0,1) BF16 pages (one generated page, uploaded into every slot, with the
// slot's first 64 bytes set to 32 values +-1 spelling the page index so that pages differ), shares
// the pool with the daemon through CUDA IPC and registers an engine with that codec. Each of
// --rounds rounds is one Offload RPC of all --pages pages (fresh hashes, acknowledged once stored)
// into the host tier, then one Onboard RPC of the same hashes into slots --pages..2*--pages-1;
// each RPC is timed on the client with steady_clock around the blocking call (ClientContext
// creation included), and every item must come back ITEM_CODE_OK. After the first round the first
// and last onboarded pages are downloaded with their sources (whose destinations were zeroed
// before): raw must be byte-identical (lossless); nvfp4 must be non-zero and within a relative
// RMSE of 0.5 of the source (it is about 0.095 for N(0,1) values; all zeros is 1), and whether it
// is bit-identical to the CPU codec's round trip is reported. Baselines, in this process and the
// same run: cudaMemcpy of the same bytes (--pages slots) between device memory and pinned host
// memory (posix_memalign + cudaHostRegister), best of 3 per direction; and the RPC overhead of a
// batch: an Offload of no pages on the first engine, median of 50 (after 5 untimed). The report
// gives per codec the best and median batch time of each RPC, hot GB/s (pages * hot page bytes /
// time) and that over memcpy's GB/s in the same direction, cold block bytes, and the speedup of
// nvfp4 over raw (raw time / nvfp4 time). Engines are unregistered and their pools freed, the
// pinned memory unpinned and freed, and kvtierd stopped with SIGTERM, on errors too (a pool whose
// engine could not be unregistered is freed only after the daemon has exited). Needs a CUDA device:
// without one it says so and returns 1.
//
// This file has the flags, the run and the report; this process's side of the engine (memory,
// pages, engines, the timed RPCs, the baselines) is in e2e_bench_engine.cc.
//
// Run: build/bin/kvtier-bench e2e --pages=256 --rounds=3 --preset=qwen3-8b
#include "tools/bench/e2e_bench.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/types/span.h"
#include "codec/page_layout.h"
#include "kernels/device.h"
#include "tools/bench/daemon_process.h"
#include "tools/bench/e2e_bench_internal.h"
#include "tools/codec/model_presets.h"
#include "tools/codec/page_metrics.h"

namespace kvtier::bench {
namespace {

using e2e_internal::Baseline;
using e2e_internal::Best;
using e2e_internal::CheckLayout;
using e2e_internal::CodecResult;
using e2e_internal::E2eFlags;
using e2e_internal::GBps;
using e2e_internal::kCopyRepeats;
using e2e_internal::kEmptyOffloads;
using e2e_internal::Median;
using e2e_internal::PresetLayout;
using e2e_internal::Report;
using e2e_internal::Resources;
using e2e_internal::RunWithDaemon;
using e2e_internal::Setup;
using Json = nlohmann::json;

constexpr uint32_t kMaxPages = 65536;  // per batch; the pool has twice as many slots
constexpr uint32_t kMaxRounds = 1000;

// "16GiB", "512MiB", "4096" (the daemon's grammar for sizes) -> bytes; zero is refused.
absl::StatusOr<uint64_t> ParseSize(absl::string_view flag, absl::string_view text) {
  size_t digits = 0;
  while (digits < text.size() && absl::ascii_isdigit(static_cast<unsigned char>(text[digits]))) {
    ++digits;
  }
  const absl::string_view number = text.substr(0, digits);
  const absl::string_view unit = text.substr(digits);
  static constexpr struct {
    absl::string_view name;
    uint64_t scale;
  } kUnits[] = {{"", 1},
                {"B", 1},
                {"KiB", uint64_t{1} << 10},
                {"MiB", uint64_t{1} << 20},
                {"GiB", uint64_t{1} << 30},
                {"TiB", uint64_t{1} << 40}};
  uint64_t scale = 0;
  for (const auto& u : kUnits) {
    if (unit == u.name) scale = u.scale;
  }
  uint64_t value = 0;
  if (number.empty() || scale == 0 || !absl::SimpleAtoi(number, &value) || value == 0 ||
      value > std::numeric_limits<uint64_t>::max() / scale) {
    return cli::UsageError(
        absl::StrCat("--", flag, ": '", text,
                     "' is not a positive size (bytes, or a number with KiB, MiB, "
                     "GiB or TiB)"));
  }
  return value * scale;
}

absl::StatusOr<E2eFlags> ParseFlags(const cli::Values& values) {
  E2eFlags flags;
  for (const auto& [name, given] : values.flags()) {
    std::optional<std::string> value = given;
    if (name == "json") {
      flags.json = true;
      continue;
    }
    if (value->empty()) return cli::UsageError(absl::StrCat("--", name, " needs a value"));
    if (name == "kvtierd") {
      flags.kvtierd = *value;
    } else if (name == "dir") {
      flags.dir = *value;
    } else if (name == "pages") {
      if (!absl::SimpleAtoi(*value, &flags.pages) || flags.pages == 0 || flags.pages > kMaxPages) {
        return cli::UsageError(
            absl::StrCat("--pages: '", *value, "' is not in [1, ", kMaxPages, "]"));
      }
    } else if (name == "rounds") {
      if (!absl::SimpleAtoi(*value, &flags.rounds) || flags.rounds == 0 ||
          flags.rounds > kMaxRounds) {
        return cli::UsageError(
            absl::StrCat("--rounds: '", *value, "' is not in [1, ", kMaxRounds, "]"));
      }
    } else if (name == "preset") {
      if (*value != tools::kQwen3_8bPreset && *value != tools::kDeepseekV3Preset) {
        return cli::UsageError(absl::StrCat("--preset: '", *value, "' is not ",
                                            tools::kQwen3_8bPreset, " or ",
                                            tools::kDeepseekV3Preset));
      }
      flags.preset = *value;
    } else if (name == "layers") {
      if (!absl::SimpleAtoi(*value, &flags.layers) || flags.layers == 0 || flags.layers > 1000) {
        return cli::UsageError(absl::StrCat("--layers: '", *value, "' is not in [1, 1000]"));
      }
    } else if (name == "gpu-capacity") {
      absl::StatusOr<uint64_t> bytes = ParseSize(name, *value);
      if (!bytes.ok()) return bytes.status();
      flags.gpu_capacity = *value;
    } else {  // host-capacity
      absl::StatusOr<uint64_t> bytes = ParseSize(name, *value);
      if (!bytes.ok()) return bytes.status();
      flags.host_capacity = *value;
      flags.host_capacity_bytes = *bytes;
    }
  }
  return flags;
}
// ---- Output ----

struct Speedup {  // raw time / nvfp4 time
  double offload = 0;
  double onboard = 0;
  double both = 0;  // offload + onboard
};

Speedup SpeedupOf(const CodecResult& base, const CodecResult& other, bool median) {
  const auto pick = [median](const std::vector<double>& v) { return median ? Median(v) : Best(v); };
  const double base_off = pick(base.OffloadMs()), base_on = pick(base.OnboardMs());
  const double off = pick(other.OffloadMs()), on = pick(other.OnboardMs());
  Speedup s;
  s.offload = off > 0 ? base_off / off : 0;
  s.onboard = on > 0 ? base_on / on : 0;
  s.both = off + on > 0 ? (base_off + base_on) / (off + on) : 0;
  return s;
}

std::string DescribeCheck(const CodecResult& c) {
  const std::string pages = absl::StrCat("page", c.check.pages.size() > 1 ? "s " : " ",
                                         absl::StrJoin(c.check.pages, " and "));
  if (c.check.identical) {
    return absl::StrCat(c.codec, ": ", pages, " onboarded byte-identical to the sources");
  }
  return absl::StrFormat(
      "%s: %s onboarded with relative RMSE %.4g (SNR %.2f dB) against the sources; "
      "bit-identical to the CPU codec's round trip: %s",
      c.codec, pages, c.check.relative_rmse, c.check.snr_db,
      c.check.cpu_codec_match ? "yes" : "no");
}

void PrintTable(const Report& report, const Setup& setup, const std::string& kvtierd) {
  const E2eFlags& flags = setup.flags;
  const Baseline& b = report.baseline;
  const uint64_t batch_hot = uint64_t{flags.pages} * setup.slot_bytes;
  const double d2h_gbps = GBps(b.copy_bytes, b.d2h_ms);
  const double h2d_gbps = GBps(b.copy_bytes, b.h2d_ms);
  std::printf("kvtierd %s (%s); device %d: %s (sm_%d%d, %.1f GiB)\n", report.server_version.c_str(),
              kvtierd.c_str(), setup.device.ordinal, setup.device.name.c_str(),
              setup.device.sm_major, setup.device.sm_minor,
              static_cast<double>(setup.device.memory_bytes) / (uint64_t{1} << 30));
  std::printf(
      "preset %s: %llu hot bytes a page, one flat pool \"%s\"; %u pages per batch (%.3f GB hot); "
      "%u rounds per codec; host tier %s pinned with CUDA, %s, no disk tier\n",
      flags.preset.c_str(), static_cast<unsigned long long>(setup.slot_bytes),
      setup.layout.pools[0].name.c_str(), flags.pages, static_cast<double>(batch_hot) / 1e9,
      flags.rounds, flags.host_capacity.c_str(),
      flags.gpu_capacity.empty() ? "no GPU tier" : ("GPU tier " + flags.gpu_capacity).c_str());
  std::printf(
      "baseline cudaMemcpy of %.3f GB in this process (best of %d): device -> pinned host "
      "%.2f ms (%.2f GB/s), pinned host -> device %.2f ms (%.2f GB/s)\n",
      static_cast<double>(b.copy_bytes) / 1e9, kCopyRepeats, b.d2h_ms, d2h_gbps, b.h2d_ms,
      h2d_gbps);
  std::printf("baseline RPC: Offload of no pages %.1f us (median of %d; min %.1f us)\n\n",
              b.empty_offload_p50_us, kEmptyOffloads, b.empty_offload_min_us);
  std::printf("%-6s %9s %6s  %-38s  %-38s\n", "", "cold B", "hot/",
              "---------- offload (to host) ----------", "--------- onboard (to device) ---------");
  std::printf("%-6s %9s %6s  %8s %9s %9s %9s  %8s %9s %9s %9s\n", "codec", "a page", "cold",
              "best ms", "median ms", "best GB/s", "x memcpy", "best ms", "median ms", "best GB/s",
              "x memcpy");
  for (const CodecResult& c : report.codecs) {
    const uint64_t hot = c.BatchHotBytes(flags.pages);
    const double off = Best(c.OffloadMs()), on = Best(c.OnboardMs());
    const double off_gbps = GBps(hot, off), on_gbps = GBps(hot, on);
    std::printf("%-6s %9llu %6.2f  %8.2f %9.2f %9.2f %8.2fx  %8.2f %9.2f %9.2f %8.2fx\n",
                c.codec.c_str(), static_cast<unsigned long long>(c.cold_block_bytes),
                static_cast<double>(c.hot_page_bytes) / static_cast<double>(c.cold_block_bytes),
                off, Median(c.OffloadMs()), off_gbps, d2h_gbps > 0 ? off_gbps / d2h_gbps : 0, on,
                Median(c.OnboardMs()), on_gbps, h2d_gbps > 0 ? on_gbps / h2d_gbps : 0);
  }
  if (report.codecs.size() == 2) {
    const Speedup best = SpeedupOf(report.codecs[0], report.codecs[1], false);
    const Speedup median = SpeedupOf(report.codecs[0], report.codecs[1], true);
    std::printf(
        "\n%s vs %s (%s time / %s time): best rounds: offload %.2fx, onboard %.2fx, "
        "offload+onboard %.2fx; median rounds: %.2fx, %.2fx, %.2fx\n",
        report.codecs[1].codec.c_str(), report.codecs[0].codec.c_str(),
        report.codecs[0].codec.c_str(), report.codecs[1].codec.c_str(), best.offload, best.onboard,
        best.both, median.offload, median.onboard, median.both);
  }
  std::printf(
      "times: one RPC of the whole batch, on the client; GB/s: the batch's hot bytes / time; "
      "x memcpy: over cudaMemcpy's GB/s in the same direction\n");
  std::vector<std::string> checks;
  for (const CodecResult& c : report.codecs) checks.push_back(DescribeCheck(c));
  std::printf("checks after round 1: %s\n", absl::StrJoin(checks, "; ").c_str());
  for (const CodecResult& c : report.codecs) {
    if (c.gpu_demoted_pages == 0) continue;
    const uint64_t demoted = c.gpu_demoted_pages * c.hot_page_bytes;
    std::printf(
        "GPU tier, %s: %llu pages (%.3f GB hot) demoted into the host tier by the background "
        "encode in %.2f ms (%.2f GB/s)\n",
        c.codec.c_str(), static_cast<unsigned long long>(c.gpu_demoted_pages),
        static_cast<double>(demoted) / 1e9, c.gpu_demote_ms, GBps(demoted, c.gpu_demote_ms));
  }
}

Json TimesJson(const std::vector<double>& ms) {
  return Json{{"best", Best(ms)}, {"median", Median(ms)}, {"rounds", ms}};
}

Json SpeedupJson(const Speedup& s) {
  return Json{{"offload", s.offload}, {"onboard", s.onboard}, {"offload_onboard", s.both}};
}

Json ToJson(const Report& report, const Setup& setup, const std::string& kvtierd) {
  const E2eFlags& flags = setup.flags;
  const Baseline& b = report.baseline;
  const double d2h_gbps = GBps(b.copy_bytes, b.d2h_ms);
  const double h2d_gbps = GBps(b.copy_bytes, b.h2d_ms);
  Json doc;
  doc["kvtierd"] = kvtierd;
  doc["server_version"] = report.server_version;
  doc["device"] = Json{{"ordinal", setup.device.ordinal},
                       {"name", setup.device.name},
                       {"sm", absl::StrCat(setup.device.sm_major, ".", setup.device.sm_minor)},
                       {"memory_bytes", setup.device.memory_bytes}};
  doc["preset"] = flags.preset;
  doc["layers"] = flags.layers;
  doc["slot_bytes"] = setup.slot_bytes;
  doc["pages"] = flags.pages;
  doc["rounds"] = flags.rounds;
  doc["host_capacity"] = flags.host_capacity;
  doc["gpu_capacity"] = flags.gpu_capacity;
  doc["baseline"] = Json{{"copy_bytes", b.copy_bytes},
                         {"repeats", kCopyRepeats},
                         {"d2h_ms", b.d2h_ms},
                         {"h2d_ms", b.h2d_ms},
                         {"d2h_gbps", d2h_gbps},
                         {"h2d_gbps", h2d_gbps},
                         {"empty_offload_us", Json{{"median", b.empty_offload_p50_us},
                                                   {"min", b.empty_offload_min_us},
                                                   {"count", kEmptyOffloads}}}};
  Json codecs = Json::array();
  for (const CodecResult& c : report.codecs) {
    const uint64_t hot = c.BatchHotBytes(flags.pages);
    const std::vector<double> off = c.OffloadMs(), on = c.OnboardMs();
    Json j;
    j["codec"] = c.codec;
    j["hot_page_bytes"] = c.hot_page_bytes;
    j["cold_block_bytes"] = c.cold_block_bytes;
    j["hot_over_cold"] =
        static_cast<double>(c.hot_page_bytes) / static_cast<double>(c.cold_block_bytes);
    j["batch_hot_bytes"] = hot;
    j["offload_ms"] = TimesJson(off);
    j["onboard_ms"] = TimesJson(on);
    j["offload_gbps"] = Json{{"best", GBps(hot, Best(off))}, {"median", GBps(hot, Median(off))}};
    j["onboard_gbps"] = Json{{"best", GBps(hot, Best(on))}, {"median", GBps(hot, Median(on))}};
    j["offload_over_d2h_memcpy"] = d2h_gbps > 0 ? GBps(hot, Best(off)) / d2h_gbps : 0;
    j["onboard_over_h2d_memcpy"] = h2d_gbps > 0 ? GBps(hot, Best(on)) / h2d_gbps : 0;
    // From the first round's responses.
    j["cold_bytes_written_per_batch"] = c.rounds.front().cold_bytes_written;
    j["cold_bytes_read_per_batch"] = c.rounds.front().cold_bytes_read;
    Json check{{"pages", c.check.pages}, {"identical", c.check.identical}};
    if (!c.check.identical) {
      check["relative_rmse"] = c.check.relative_rmse;
      check["snr_db"] = c.check.snr_db;
      check["cpu_codec_match"] = c.check.cpu_codec_match;
    }
    j["check"] = std::move(check);
    if (c.gpu_demoted_pages > 0) {
      const uint64_t demoted = c.gpu_demoted_pages * c.hot_page_bytes;
      j["gpu_tier_demotion"] = Json{{"pages", c.gpu_demoted_pages},
                                    {"ms", c.gpu_demote_ms},
                                    {"hot_gbps", GBps(demoted, c.gpu_demote_ms)}};
    }
    codecs.push_back(std::move(j));
  }
  doc["codecs"] = std::move(codecs);
  if (report.codecs.size() == 2) {
    doc["speedup"] =
        Json{{"of", report.codecs[1].codec},
             {"over", report.codecs[0].codec},
             {"best", SpeedupJson(SpeedupOf(report.codecs[0], report.codecs[1], false))},
             {"median", SpeedupJson(SpeedupOf(report.codecs[0], report.codecs[1], true))}};
  }
  return doc;
}

}  // namespace

void DeclareE2eBenchFlags(cli::Command& command) {
  command.SetDescription(
      "GPU pages end to end through a kvtierd child process. This process allocates a device pool, "
      "shares\n"
      "it with the daemon through CUDA IPC and registers an engine; each round is one Offload RPC "
      "of\n"
      "--pages pages into the daemon's CUDA-pinned host tier and one Onboard RPC of the same "
      "blocks into\n"
      "other slots of the pool. Codec raw, then codec nvfp4, in the same run, next to cudaMemcpy "
      "of the\n"
      "same bytes (device <-> pinned host, in this process) and an Offload RPC of no pages. "
      "Onboarded\n"
      "pages are checked (raw byte for byte; nvfp4 against its error bound). Needs a CUDA device.");
  command.AddFlag("kvtierd", "PATH",
                  "the daemon binary (default: kvtierd in the directory of kvtier-bench)");
  command.AddFlag("dir", "DIR",
                  "scratch directory for the daemon's state, socket and log; created if\n"
                  "missing, and kept (default: a fresh directory under /tmp, removed at the\n"
                  "end)");
  command.AddFlag("pages", "N",
                  "pages per batch (one Offload and one Onboard RPC each), in [1, 65536] and\n"
                  "at most the daemon's items per request (default 256); the pool has 2N slots");
  command.AddFlag("rounds", "N", "batches per codec, in [1, 1000] (default 3)");
  command.AddFlag("preset", "NAME",
                  "page layout: qwen3-8b (36 layers, 8 KV heads, 128 dims, 32 tokens, BF16:\n"
                  "4,718,592 bytes a page) or deepseek-v3 (default qwen3-8b)");
  command.AddFlag("layers", "N",
                  "layers of the preset's page (default: the model's); --layers=1 with\n"
                  "qwen3-8b gives 131,072-byte pages, the small-launch case");
  command.AddFlag("host-capacity", "SIZE",
                  "the daemon's host tier (host.capacity): bytes, or a number with KiB, MiB,\n"
                  "GiB or TiB; one batch of cold blocks must fit in it (default 16GiB)");
  command.AddFlag("gpu-capacity", "SIZE",
                  "the daemon's GPU tier (gpu.capacity), as --host-capacity: nvfp4 offloads\n"
                  "are then acknowledged once copied into it, and onboarded from it (default:\n"
                  "no GPU tier)");
  command.AddSwitch("json", "print JSON instead of the table");
}

int RunE2eBench(const cli::Values& values) {
  absl::StatusOr<E2eFlags> parsed = ParseFlags(values);
  if (!parsed.ok()) return values.PrintUsageError(parsed.status().message());
  Setup setup;
  setup.flags = *std::move(parsed);
  const E2eFlags& flags = setup.flags;

  absl::StatusOr<std::vector<kernels::DeviceInfo>> devices = kernels::ListDevices();
  if (!devices.ok() || devices->empty()) {
    const std::string why =
        devices.ok() ? "the CUDA runtime lists no device" : std::string(devices.status().message());
    std::fprintf(stderr, "kvtier-bench e2e: needs a CUDA device (%s)\n", why.c_str());
    return 1;
  }
  setup.device = devices->front();

  absl::StatusOr<codec::PageLayout> layout = PresetLayout(flags.preset, flags.layers);
  if (!layout.ok()) {
    std::fprintf(stderr, "kvtier-bench e2e: %s\n", layout.status().ToString().c_str());
    return 1;
  }
  if (absl::Status st = CheckLayout(*layout, flags.preset); !st.ok()) {
    std::fprintf(stderr, "kvtier-bench e2e: %s\n", st.ToString().c_str());
    return 1;
  }
  setup.layout = *std::move(layout);
  setup.slot_bytes = setup.layout.pools[0].slot_bytes;
  setup.host_page.resize(setup.slot_bytes);
  tools::PageGenerator(setup.layout, tools::PageGeneratorOptions{})
      .Fill(absl::MakeSpan(setup.host_page));

  std::string kvtierd = flags.kvtierd;
  if (kvtierd.empty()) {
    absl::StatusOr<std::string> found = DefaultKvtierd();
    if (!found.ok()) {
      std::fprintf(stderr, "kvtier-bench e2e: %s\n", found.status().ToString().c_str());
      return 1;
    }
    kvtierd = *std::move(found);
  }
  bool temporary = false;
  absl::StatusOr<std::string> dir = PrepareScratchDir(flags.dir, "kvtier-bench-e2e", &temporary);
  if (!dir.ok()) {
    std::fprintf(stderr, "kvtier-bench e2e: %s\n", dir.status().ToString().c_str());
    return 1;
  }

  Resources resources;  // declared before the daemon: outlives it
  DaemonProcess daemon;
  absl::StatusOr<Report> report = RunWithDaemon(daemon, resources, setup, kvtierd, *dir);
  const absl::Status stopped = daemon.Stop();  // on errors too
  resources.pools.clear();                     // the daemon has exited: nothing maps them now
  int exit_code = 0;
  if (!report.ok() || !stopped.ok()) {
    exit_code = 1;
    if (!report.ok()) {
      std::fprintf(stderr, "kvtier-bench e2e: %s\n", report.status().ToString().c_str());
    }
    if (!stopped.ok()) std::fprintf(stderr, "kvtier-bench e2e: %s\n", stopped.ToString().c_str());
    const std::string log = daemon.LogTail();
    if (!log.empty()) {
      const std::string where = temporary ? "" : absl::StrCat(" (", daemon.log_path(), ")");
      std::fprintf(stderr, "end of the kvtierd log%s:\n%s%s", where.c_str(), log.c_str(),
                   absl::EndsWith(log, "\n") ? "" : "\n");
    }
  }
  if (temporary) {
    if (absl::Status removed = RemoveScratchDir(*dir); !removed.ok()) {
      std::fprintf(stderr, "kvtier-bench e2e: %s\n", std::string(removed.message()).c_str());
    }
  }
  if (report.ok()) {
    if (flags.json) {
      std::printf("%s\n", ToJson(*report, setup, kvtierd).dump(2).c_str());
    } else {
      PrintTable(*report, setup, kvtierd);
    }
  }
  return exit_code;
}

}  // namespace kvtier::bench
