// kvtier-triattention-bench: the batched TriAttention round (triattention::GpuRound) on the GPU
// at Qwen3-8B geometry (36 layers, 32 query heads, 8 KV heads, head_dim 128, BF16, pages of 32),
// against baselines measured in the same run:
//  - the HBM read bandwidth of a plain read sweep (kernels/hbm_probe.h) over 4 GiB; the round's
//    floor is the time to read the scored K bytes at that bandwidth;
//  - one decode step's K+V read at the cache size of the round, which the round's cost spread
//    over `beta` steps is compared with.
// Steady state: `requests` requests of `prompt` prompt tokens and budget + beta decode tokens
// each (every round scores budget + beta decode tokens and evicts beta), for each eviction mode
// and both compaction orders. Then a one-off round over a `long`-token decode region, and the
// decode step's K+V bytes with and without eviction over a `long`-token generation.
//
// Run on the GPU machine: kvtier-triattention-bench [--requests=32] [--prompt=1024]
//   [--budget=2048] [--beta=128] [--long=16384] [--long-requests=8] [--iters=10] [--json]
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "codec/dtype.h"
#include "common/cli/command_line.h"
#include "kernels/hbm_probe.h"
#include "nlohmann/json.hpp"
#include "triattention/gpu_round.h"

namespace kvtier::tools {
namespace {

using triattention::CompactionOrder;
using triattention::EvictionMode;

#define BENCH_CUDA(expr)                                                 \
  do {                                                                   \
    cudaError_t err_ = (expr);                                           \
    if (err_ != cudaSuccess) {                                           \
      std::fprintf(stderr, "%s: %s\n", #expr, cudaGetErrorString(err_)); \
      std::exit(1);                                                      \
    }                                                                    \
  } while (0)

#define BENCH_OK(expr)                                                 \
  do {                                                                 \
    absl::Status st_ = (expr);                                         \
    if (!st_.ok()) {                                                   \
      std::fprintf(stderr, "%s: %s\n", #expr, st_.ToString().c_str()); \
      std::exit(1);                                                    \
    }                                                                  \
  } while (0)

struct Flags {
  int requests = 32;
  int64_t prompt = 1024;
  int64_t budget = 2048;
  int64_t beta = 128;
  int64_t long_decode = 16384;
  int long_requests = 8;
  int iters = 10;
  bool json = false;
};

// Reads the flags into `*f`; a usage error names the flag and the value.
absl::Status ParseFlags(const cli::Values& values, Flags* f) {
  f->json = values.Has("json");
  struct Bound {
    const char* name;
    uint64_t min;
    int64_t* out;
  };
  int64_t requests = f->requests, long_requests = f->long_requests, iters = f->iters;
  for (const Bound& b : {Bound{"requests", 1, &requests}, Bound{"prompt", 0, &f->prompt},
                         Bound{"budget", 1, &f->budget}, Bound{"beta", 1, &f->beta},
                         Bound{"long", 1, &f->long_decode},
                         Bound{"long-requests", 1, &long_requests}, Bound{"iters", 1, &iters}}) {
    absl::StatusOr<std::optional<uint64_t>> v = values.OptionalUint64(b.name);
    if (!v.ok()) return v.status();
    if (!v->has_value()) continue;
    if (**v < b.min || **v > (uint64_t{1} << 31)) {
      return cli::UsageError(
          absl::StrCat("flag --", b.name, ": ", **v, " is outside [", b.min, ", 2^31]"));
    }
    *b.out = static_cast<int64_t>(**v);
  }
  f->requests = static_cast<int>(requests);
  f->long_requests = static_cast<int>(long_requests);
  f->iters = static_cast<int>(iters);
  return absl::OkStatus();
}

// Qwen3-8B attention geometry.
constexpr int kLayers = 36;
constexpr int kQueryHeads = 32;
constexpr int kKvHeads = 8;
constexpr int kHeadDim = 128;
constexpr int kPage = 32;
constexpr uint64_t kRowBytes = kHeadDim * 2;
constexpr uint64_t kKBytesPerToken = uint64_t{kLayers} * kKvHeads * kRowBytes;  // one plane

// K and V pools of every layer, filled with BF16 keys of a few scales.
struct Pools {
  std::vector<void*> k, v;
  triattention::KvCacheView view;
  explicit Pools(int64_t pages) {
    const uint64_t bytes = static_cast<uint64_t>(pages) * kPage * kKvHeads * kRowBytes;
    std::vector<uint8_t> pattern(64ull << 20);
    std::mt19937_64 rng(7);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (size_t i = 0; i < pattern.size() / 2; ++i) {
      codec::StoreFromFloat(codec::DType::kBf16,
                            (0.25f + static_cast<float>(i % kHeadDim) / kHeadDim) * normal(rng),
                            pattern.data(), i);
    }
    for (int l = 0; l < kLayers; ++l) {
      for (auto* pool : {&k, &v}) {
        void* p = nullptr;
        BENCH_CUDA(cudaMalloc(&p, bytes));
        for (uint64_t at = 0; at < bytes; at += pattern.size()) {
          const uint64_t n = std::min<uint64_t>(pattern.size(), bytes - at);
          BENCH_CUDA(
              cudaMemcpy(static_cast<uint8_t*>(p) + at, pattern.data(), n, cudaMemcpyHostToDevice));
        }
        pool->push_back(p);
      }
      view.layers.push_back({k.back(), v.back()});
    }
    view.num_pages = pages;
    view.page_tokens = kPage;
    view.num_kv_heads = kKvHeads;
    view.head_dim = kHeadDim;
    view.dtype = codec::DType::kBf16;
    view.layout = triattention::KvLayout::kHnd;
    view.pool_kind = triattention::KvPoolKind::kSeparate;
    view.memory = triattention::KvMemory::kDevice;
  }
  ~Pools() {
    for (void* p : k) cudaFree(p);
    for (void* p : v) cudaFree(p);
  }
};

triattention::Calibration MakeCalibration() {
  triattention::Calibration c;
  c.layers = kLayers;
  c.heads = kQueryHeads;
  c.bands = kHeadDim / 2;
  c.head_dim = kHeadDim;
  c.rope_style = "half";
  std::mt19937_64 rng(11);
  std::normal_distribution<double> normal(0.0, 1.0);
  const size_t n = static_cast<size_t>(kLayers) * kQueryHeads * c.bands;
  for (size_t i = 0; i < n; ++i) {
    const float qr = static_cast<float>(normal(rng)), qi = static_cast<float>(normal(rng));
    c.q_mean_real.push_back(qr);
    c.q_mean_imag.push_back(qi);
    c.q_abs_mean.push_back(static_cast<float>(1.3 * std::hypot(qr, qi)));
  }
  c.present.assign(static_cast<size_t>(kLayers) * kQueryHeads, 1);
  std::vector<float> omega, scale;
  for (int f = 0; f < c.bands; ++f) {
    omega.push_back(static_cast<float>(std::pow(1e6, -2.0 * f / kHeadDim)));
    scale.push_back(1.0f);
  }
  c.omega = omega;
  c.freq_scale_sq = scale;
  return c;
}

// Block tables of `count` requests of `tokens` tokens on distinct pages.
std::vector<std::vector<int32_t>> Tables(int count, int64_t tokens) {
  const int64_t pages = (tokens + kPage - 1) / kPage;
  std::vector<std::vector<int32_t>> out(count);
  for (int r = 0; r < count; ++r) {
    out[r].resize(pages);
    std::iota(out[r].begin(), out[r].end(), static_cast<int32_t>(r * pages));
  }
  return out;
}

double HbmReadBytesPerSecond(cudaStream_t stream) {
  const uint64_t bytes = 4ull << 30;
  void* buffer = nullptr;
  uint64_t* sink = nullptr;
  BENCH_CUDA(cudaMalloc(&buffer, bytes));
  BENCH_CUDA(cudaMalloc(&sink, sizeof(uint64_t)));
  BENCH_CUDA(cudaMemset(buffer, 3, bytes));
  cudaEvent_t start, stop;
  BENCH_CUDA(cudaEventCreate(&start));
  BENCH_CUDA(cudaEventCreate(&stop));
  for (int i = 0; i < 3; ++i) BENCH_OK(kernels::EnqueueReadProbe(buffer, bytes, sink, stream));
  const int iters = 20;
  BENCH_CUDA(cudaEventRecord(start, stream));
  for (int i = 0; i < iters; ++i) BENCH_OK(kernels::EnqueueReadProbe(buffer, bytes, sink, stream));
  BENCH_CUDA(cudaEventRecord(stop, stream));
  BENCH_CUDA(cudaEventSynchronize(stop));
  float ms = 0;
  BENCH_CUDA(cudaEventElapsedTime(&ms, start, stop));
  cudaFree(buffer);
  cudaFree(sink);
  return static_cast<double>(bytes) * iters / (ms * 1e-3);
}

// Average milliseconds of one round over `iters` launches after two warm-up launches.
double TimeRounds(triattention::GpuRound& round, int iters, cudaStream_t stream) {
  cudaEvent_t start, stop;
  BENCH_CUDA(cudaEventCreate(&start));
  BENCH_CUDA(cudaEventCreate(&stop));
  for (int i = 0; i < 2; ++i) BENCH_OK(round.Launch(stream));
  BENCH_CUDA(cudaEventRecord(start, stream));
  for (int i = 0; i < iters; ++i) BENCH_OK(round.Launch(stream));
  BENCH_CUDA(cudaEventRecord(stop, stream));
  BENCH_CUDA(cudaEventSynchronize(stop));
  float ms = 0;
  BENCH_CUDA(cudaEventElapsedTime(&ms, start, stop));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms / iters;
}

const char* ModeName(EvictionMode m) {
  switch (m) {
    case EvictionMode::kUnion:
      return "union";
    case EvictionMode::kPerHead:
      return "per_head";
    default:
      return "per_layer_perhead";
  }
}

int Run(const Flags& f) {
  cudaStream_t stream;
  BENCH_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaDeviceProp prop;
  BENCH_CUDA(cudaGetDeviceProperties(&prop, 0));
  const double bw = HbmReadBytesPerSecond(stream);
  const triattention::Calibration cal = MakeCalibration();

  const int64_t steady_decode = f.budget + f.beta;
  const int64_t steady_tokens = f.prompt + steady_decode;
  const int64_t long_tokens = f.prompt + f.long_decode;
  const int64_t pages = std::max<int64_t>(f.requests * ((steady_tokens + kPage - 1) / kPage),
                                          f.long_requests * ((long_tokens + kPage - 1) / kPage));
  Pools pools(pages);
  nlohmann::json out;
  out["device"] = prop.name;
  out["hbm_read_gbps"] = bw / 1e9;
  out["geometry"] = {{"layers", kLayers},    {"query_heads", kQueryHeads}, {"kv_heads", kKvHeads},
                     {"head_dim", kHeadDim}, {"page_tokens", kPage},       {"dtype", "bf16"}};
  out["steady"] = {{"requests", f.requests},
                   {"prompt", f.prompt},
                   {"budget", f.budget},
                   {"beta", f.beta},
                   {"scored_decode_tokens", steady_decode}};

  // Steady state.
  const auto tables = Tables(f.requests, steady_tokens);
  std::vector<triattention::KvRequestView> views(f.requests);
  std::vector<int64_t> starts(f.requests);
  for (int r = 0; r < f.requests; ++r) {
    views[r].block_table = tables[r];
    views[r].length = steady_tokens;
    views[r].prompt_len = f.prompt;
    starts[r] = steady_tokens + 5 * f.beta;  // some rounds already ran
  }
  const double scored_k = static_cast<double>(f.requests) * steady_decode * kKBytesPerToken;
  const double floor_ms = scored_k / bw * 1e3;
  const double decode_kv = 2.0 * f.requests * steady_tokens * kKBytesPerToken;
  const double decode_floor_ms = decode_kv / bw * 1e3;
  out["steady"]["scored_k_bytes"] = scored_k;
  out["steady"]["floor_ms"] = floor_ms;
  out["steady"]["decode_step_kv_bytes"] = decode_kv;
  out["steady"]["decode_step_floor_ms"] = decode_floor_ms;
  if (!f.json) {
    std::printf("device %s, HBM read %.0f GB/s (4 GiB read sweep)\n", prop.name, bw / 1e9);
    std::printf(
        "steady state: %d requests, prompt %lld, budget %lld, beta %lld: %lld decode "
        "tokens scored per request, %.2f GB of K (floor %.3f ms); decode step K+V "
        "%.2f GB (floor %.3f ms)\n",
        f.requests, static_cast<long long>(f.prompt), static_cast<long long>(f.budget),
        static_cast<long long>(f.beta), static_cast<long long>(steady_decode), scored_k / 1e9,
        floor_ms, decode_kv / 1e9, decode_floor_ms);
    std::printf("%-18s %-15s %10s %10s %16s\n", "mode", "order", "round ms", "x floor",
                "per step / decode");
  }
  for (EvictionMode mode :
       {EvictionMode::kUnion, EvictionMode::kPerHead, EvictionMode::kPerLayerPerHead}) {
    for (CompactionOrder order : {CompactionOrder::kFillHoles, CompactionOrder::kPreserveOrder}) {
      triattention::GpuRoundOptions options;
      options.max_requests = f.requests;
      options.budget = f.budget;
      options.max_decode_tokens = steady_decode;
      options.mode = mode;
      options.order = order;
      auto round = triattention::GpuRound::Create(cal, pools.view, options);
      BENCH_OK(round.status());
      BENCH_OK((*round)->Stage(views, starts, stream).status());
      const double ms = TimeRounds(**round, f.iters, stream);
      const double share = ms / static_cast<double>(f.beta) / decode_floor_ms;
      const char* order_name = order == CompactionOrder::kFillHoles ? "fill_holes" : "preserve";
      out["steady"]["rounds"].push_back({{"mode", ModeName(mode)},
                                         {"order", order_name},
                                         {"round_ms", ms},
                                         {"x_floor", ms / floor_ms},
                                         {"amortised_share_of_decode_step", share}});
      if (!f.json) {
        std::printf("%-18s %-15s %10.3f %10.2f %15.3f%%\n", ModeName(mode), order_name, ms,
                    ms / floor_ms, 100.0 * share);
      }
    }
  }

  // One-off round over a long decode region.
  {
    const auto long_tables = Tables(f.long_requests, long_tokens);
    std::vector<triattention::KvRequestView> lv(f.long_requests);
    std::vector<int64_t> ls(f.long_requests, long_tokens);
    for (int r = 0; r < f.long_requests; ++r) {
      lv[r].block_table = long_tables[r];
      lv[r].length = long_tokens;
      lv[r].prompt_len = f.prompt;
    }
    triattention::GpuRoundOptions options;
    options.max_requests = f.long_requests;
    options.budget = f.budget;
    options.max_decode_tokens = f.long_decode;
    auto round = triattention::GpuRound::Create(cal, pools.view, options);
    BENCH_OK(round.status());
    BENCH_OK((*round)->Stage(lv, ls, stream).status());
    const double ms = TimeRounds(**round, std::max(2, f.iters / 2), stream);
    const double k = static_cast<double>(f.long_requests) * f.long_decode * kKBytesPerToken;
    const double floor = k / bw * 1e3;
    out["long_round"] = {{"requests", f.long_requests},
                         {"decode_tokens", f.long_decode},
                         {"scored_k_bytes", k},
                         {"floor_ms", floor},
                         {"round_ms", ms},
                         {"x_floor", ms / floor}};
    if (!f.json) {
      std::printf(
          "one-off union round over %lld decode tokens x %d requests: %.3f ms, %.2f GB "
          "of K (floor %.3f ms, %.2fx)\n",
          static_cast<long long>(f.long_decode), f.long_requests, ms, k / 1e9, floor, ms / floor);
    }
  }

  // Decode-step K+V bytes over a long generation, per request, with and without eviction.
  {
    const double per_token = 2.0 * kKBytesPerToken;
    double sum_without = 0, sum_with = 0;
    int64_t cache_with = f.prompt;
    for (int64_t t = 1; t <= f.long_decode; ++t) {
      sum_without += static_cast<double>(f.prompt + t) * per_token;
      ++cache_with;
      // A round at each multiple of beta once the decode region passes the budget.
      if (t % f.beta == 0 && cache_with - f.prompt > f.budget) cache_with = f.prompt + f.budget;
      sum_with += static_cast<double>(cache_with) * per_token;
    }
    const double last_without = static_cast<double>(f.prompt + f.long_decode) * per_token;
    const double last_with = static_cast<double>(cache_with) * per_token;
    out["generation"] = {
        {"decode_tokens", f.long_decode},
        {"last_step_kv_bytes_without", last_without},
        {"last_step_kv_bytes_with", last_with},
        {"mean_step_kv_bytes_without", sum_without / f.long_decode},
        {"mean_step_kv_bytes_with", sum_with / f.long_decode},
        {"last_step_floor_ms_without", last_without / bw * 1e3},
        {"last_step_floor_ms_with", last_with / bw * 1e3},
    };
    if (!f.json) {
      std::printf(
          "%lld-token generation, per request: last step reads %.1f MB of K+V without "
          "eviction, %.1f MB with (%.2fx less); mean step %.1f MB vs %.1f MB (%.2fx)\n",
          static_cast<long long>(f.long_decode), last_without / 1e6, last_with / 1e6,
          last_without / last_with, sum_without / f.long_decode / 1e6,
          sum_with / f.long_decode / 1e6, sum_without / sum_with);
    }
  }
  if (f.json) std::printf("%s\n", out.dump(2).c_str());
  cudaStreamDestroy(stream);
  return 0;
}

}  // namespace
}  // namespace kvtier::tools

int main(int argc, char** argv) {
  kvtier::cli::CommandLine command_line("kvtier-triattention-bench");
  command_line.root()
      .SetDescription(
          "The batched TriAttention round on the GPU (Qwen3-8B geometry) against an HBM read\n"
          "sweep of the same bytes.")
      .AddFlag("requests", "N", "requests per round (default 32)")
      .AddFlag("prompt", "TOKENS", "prompt tokens per request (default 1024)")
      .AddFlag("budget", "TOKENS", "KV budget per request (default 2048)")
      .AddFlag("beta", "TOKENS", "tokens per round (default 128)")
      .AddFlag("long", "TOKENS", "decode length of the long requests (default 16384)")
      .AddFlag("long-requests", "N", "long requests (default 8)")
      .AddFlag("iters", "N", "timed iterations (default 10)")
      .AddSwitch("json", "print JSON instead of the table");
  kvtier::cli::Values values;
  if (std::optional<int> exit_status = command_line.Parse(argc, argv, &values)) {
    return *exit_status;
  }
  kvtier::tools::Flags flags;
  if (absl::Status st = kvtier::tools::ParseFlags(values, &flags); !st.ok()) {
    return values.PrintUsageError(st.message());
  }
  return kvtier::tools::Run(flags);
}
