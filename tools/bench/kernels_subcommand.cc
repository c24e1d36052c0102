// `kvtier-bench kernels`: for each page kind (a Qwen3-8B BF16 page of all 36 layers, one layer of
// it, the Qwen3-8B FP8 page, a DeepSeek-style MLA page with a lossless indexer buffer) and batch
// (1, 16, 256 pages by default), times one batch of offload (hot pages in device memory -> cold
// blocks in pinned host memory) and onboard (the reverse) six ways on one stream with CUDA events:
//   memcpy    one cudaMemcpyAsync per page of the hot bytes (pinned host memory): the baseline
//   raw       the batched raw copy kernel (kernels::BatchedCopier) of the hot bytes, mapped memory
//   unfused   nvfp4 into a device buffer, then one cudaMemcpyAsync of the blocks (and the reverse)
//   fused     what GpuNvfp4Codec does with blocks in mapped pinned host memory: offload, the
//             kernel writes the blocks over the link; onboard, HostRead::kAuto (the staged
//             pipeline for large batches, else direct)
//   direct    onboard only: the decode kernel reading the blocks over the link itself
//   device    the fused kernel with blocks in device memory (the GPU tier's staging; no link)
// Every rate is hot (uncompressed) bytes per second, the median of repetitions run for
// --min-time seconds each; ratios are fused over memcpy, unfused and raw of the same run.
// Blocks are headers and checksums sealed on the host once, untimed (decode needs the header).
//
// --queued: each repetition is enqueued behind a device-to-device copy of kQueueBytes (about
// 0.2 ms), so the events time the GPU's work and the gaps between its launches but not the host's
// time to submit them: what an engine sees when its offload or onboard is queued behind its own
// kernels, as long as the host submits a repetition faster than the copy runs (small batches).
// The default times from an idle stream, submission included.
//
// Run: kvtier-bench kernels [--batches=1,16,256] [--min-time=0.2] [--device=0]
//                           [--codec=nvfp4|nvfp4x2] [--target-ctas=N] [--queued] [--json]
// --target-ctas=N: launches of fewer than N (buffer, page) CTAs split buffers among CTAs to reach
// about N (the default: only launches below 16 CTAs, to two per SM).
#include "tools/bench/kernels_subcommand.h"

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

#if KVTIER_BENCH_WITH_CUDA
#include <cuda_runtime.h>

#include <algorithm>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "codec/codec.h"
#include "codec/page_layout.h"
#include "kernels/batched_copy.h"
#include "kernels/device.h"
#include "kernels/nvfp4_gpu_codec.h"
#endif

namespace kvtier::bench {
namespace {

struct Flags {
  std::vector<int> batches = {1, 16, 256};
  double min_time = 0.2;
  int device = 0;
  std::string codec = "nvfp4";
  int target_ctas = 0;  // GpuNvfp4Codec::set_target_ctas when > 0 (experiments on small launches)
  bool queued = false;
  bool json = false;
};

// The flags of one run; a usage error names the flag and the value.
absl::StatusOr<Flags> ParseFlags(const cli::Values& values) {
  Flags f;
  f.json = values.Has("json");
  f.queued = values.Has("queued");
  if (auto v = values.Get("min-time")) {
    if (!absl::SimpleAtod(*v, &f.min_time) || !(f.min_time >= 0)) {
      return cli::UsageError(absl::StrCat("--min-time: '", *v, "' is not a number of seconds"));
    }
  }
  if (auto v = values.Get("device")) {
    if (!absl::SimpleAtoi(*v, &f.device) || f.device < 0) {
      return cli::UsageError(absl::StrCat("--device: '", *v, "' is not a device ordinal"));
    }
  }
  if (auto v = values.Get("codec")) {
    if (*v != "nvfp4" && *v != "nvfp4x2") {
      return cli::UsageError(absl::StrCat("--codec: '", *v, "' is not nvfp4 or nvfp4x2"));
    }
    f.codec = *v;
  }
  if (auto v = values.Get("target-ctas")) {
    if (!absl::SimpleAtoi(*v, &f.target_ctas) || f.target_ctas < 0) {
      return cli::UsageError(absl::StrCat("--target-ctas: '", *v, "' is not a CTA count"));
    }
  }
  if (auto v = values.Get("batches")) {
    f.batches.clear();
    for (absl::string_view s : absl::StrSplit(*v, ',')) {
      int n = 0;
      if (!absl::SimpleAtoi(s, &n) || n < 1 || n > 4096) {
        return cli::UsageError(absl::StrCat("--batches: '", s, "' is not in [1, 4096]"));
      }
      f.batches.push_back(n);
    }
  }
  return f;
}

#if KVTIER_BENCH_WITH_CUDA

struct PageKind {
  const char* name;
  codec::PageLayout layout;
};

std::vector<PageKind> PageKinds() {
  std::vector<PageKind> kinds;
  codec::GqaOptions o;
  o.num_layers = 36;
  o.kv_heads = 8;
  o.head_dim = 128;
  o.tokens_per_page = 32;
  o.dtype = codec::DType::kBf16;
  kinds.push_back({"qwen3-8b bf16", *codec::BuildGqaLayout(o)});
  o.num_layers = 1;
  kinds.push_back({"one layer bf16", *codec::BuildGqaLayout(o)});
  o.num_layers = 36;
  o.dtype = codec::DType::kFp8E4M3;
  kinds.push_back({"qwen3-8b fp8", *codec::BuildGqaLayout(o)});
  codec::MlaOptions m;
  m.num_layers = 61;
  m.tokens_per_page = 64;
  m.indexer_bytes_per_token = 132;
  kinds.push_back({"mla + lossless", *codec::BuildMlaLayout(m)});
  return kinds;
}

// Values spread over [-1, 1] in each buffer's dtype; lossless buffers get bytes.
std::vector<uint8_t> MakePage(const codec::PageLayout& layout) {
  std::vector<uint8_t> page(codec::FlatPageBytes(layout));
  const codec::HotPageView view = codec::FlatPageView(layout, page);
  for (size_t bi = 0; bi < layout.buffers.size(); ++bi) {
    const codec::BufferSpec& b = layout.buffers[bi];
    auto* base = const_cast<uint8_t*>(view.base[bi]);
    const uint64_t n = layout.Rows(b) * b.RowStride();
    for (uint64_t i = 0; i < n; ++i) {
      const float v = static_cast<float>((i * 2654435761u) % 2001) / 1000.0f - 1.0f;
      if (b.Quantizable()) {
        codec::StoreFromFloat(b.dtype, v, base, i);
      } else {
        base[i] = static_cast<uint8_t>(i * 131);
      }
    }
  }
  return page;
}

struct CudaError {
  std::string what;
};

void Check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw CudaError{absl::StrCat(what, ": ", cudaGetErrorString(err))};
}

void Check(const absl::Status& s, const char* what) {
  if (!s.ok()) throw CudaError{absl::StrCat(what, ": ", s.ToString())};
}

enum Method { kMemcpy, kRaw, kUnfused, kFused, kDirect, kDevice, kMethods };
constexpr const char* kMethodNames[kMethods] = {"memcpy", "raw",    "unfused",
                                                "fused",  "direct", "device"};

struct Row {
  std::string page;
  uint64_t hot_bytes = 0;
  uint64_t cold_bytes = 0;
  int batch = 0;
  bool offload = true;
  double gbps[kMethods] = {};  // hot bytes per second / 1e9
};

// Buffers sized for the largest page kind and batch; reused by every measurement.
struct Areas {
  uint8_t* hot = nullptr;          // device: hot pages
  uint8_t* hot_host = nullptr;     // pinned, mapped: the hot bytes' host side (memcpy, raw)
  uint8_t* hot_mapped = nullptr;   // its device address
  uint8_t* cold_device = nullptr;  // device: blocks (unfused, device)
  uint8_t* cold_host = nullptr;    // pinned, mapped: blocks (fused, unfused)
  uint8_t* cold_mapped = nullptr;
  int8_t* exps = nullptr;
  Areas(uint64_t hot_bytes, uint64_t cold_bytes, uint64_t exp_bytes) {
    Check(cudaMalloc(&hot, hot_bytes), "cudaMalloc hot");
    Check(cudaHostAlloc(&hot_host, hot_bytes, cudaHostAllocMapped), "cudaHostAlloc hot");
    Check(cudaHostGetDevicePointer(&hot_mapped, hot_host, 0), "cudaHostGetDevicePointer");
    Check(cudaMalloc(&cold_device, cold_bytes), "cudaMalloc cold");
    Check(cudaHostAlloc(&cold_host, cold_bytes, cudaHostAllocMapped), "cudaHostAlloc cold");
    Check(cudaHostGetDevicePointer(&cold_mapped, cold_host, 0), "cudaHostGetDevicePointer");
    Check(cudaMalloc(&exps, exp_bytes), "cudaMalloc exps");
  }
  ~Areas() {
    cudaFree(hot);
    cudaFreeHost(hot_host);
    cudaFree(cold_device);
    cudaFreeHost(cold_host);
    cudaFree(exps);
  }
};

// --queued: the device-to-device copy each repetition waits behind.
constexpr uint64_t kQueueBytes = uint64_t{256} << 20;

// Median seconds of `run` on `stream` over repetitions lasting about `min_time` (at least 3),
// after one untimed warm-up; with `queue` (two buffers of kQueueBytes), each repetition behind a
// copy between them.
template <typename F>
double TimeMedian(F run, cudaStream_t stream, cudaEvent_t start, cudaEvent_t stop, double min_time,
                  uint8_t* const* queue) {
  run();
  Check(cudaStreamSynchronize(stream), "warm-up");
  std::vector<double> seconds;
  double total = 0;
  while (seconds.size() < 3 || (total < min_time && seconds.size() < 10000)) {
    if (queue != nullptr) {
      Check(cudaMemcpyAsync(queue[1], queue[0], kQueueBytes, cudaMemcpyDeviceToDevice, stream),
            "queue copy");
    }
    Check(cudaEventRecord(start, stream), "cudaEventRecord");
    run();
    Check(cudaEventRecord(stop, stream), "cudaEventRecord");
    Check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    Check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    seconds.push_back(ms / 1e3);
    total += ms / 1e3;
  }
  std::nth_element(seconds.begin(), seconds.begin() + seconds.size() / 2, seconds.end());
  return seconds[seconds.size() / 2];
}

std::vector<Row> Measure(const Flags& f, const std::vector<PageKind>& kinds) {
  const int max_batch = *std::max_element(f.batches.begin(), f.batches.end());
  const auto spec = codec::CodecSpec::Parse(f.codec);
  Check(spec.status(), "codec");
  uint64_t max_hot = 0, max_cold = 0, max_buffers = 0;
  for (const PageKind& k : kinds) {
    const auto plan = codec::MakeBlockPlan(k.layout, *spec);
    Check(plan.status(), "block plan");
    max_hot = std::max(max_hot, codec::FlatPageBytes(k.layout));
    max_cold = std::max(max_cold, plan->block_bytes);
    max_buffers = std::max<uint64_t>(max_buffers, k.layout.buffers.size());
  }
  Areas areas(max_hot * max_batch, max_cold * max_batch, 2 * max_buffers * max_batch);
  auto copier = kernels::BatchedCopier::Create(f.device);
  Check(copier.status(), "BatchedCopier");
  cudaStream_t stream;
  Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  cudaEvent_t start, stop;
  Check(cudaEventCreate(&start), "cudaEventCreate");
  Check(cudaEventCreate(&stop), "cudaEventCreate");
  uint8_t* queue[2] = {nullptr, nullptr};
  if (f.queued) {
    for (uint8_t*& q : queue) Check(cudaMalloc(&q, kQueueBytes), "cudaMalloc queue");
  }
  std::vector<Row> rows;
  for (const PageKind& k : kinds) {
    const auto plan = codec::MakeBlockPlan(k.layout, *spec);
    auto gpu = kernels::GpuNvfp4Codec::Create(*plan);
    Check(gpu.status(), "GpuNvfp4Codec");
    if (f.target_ctas > 0) (*gpu)->set_target_ctas(f.target_ctas);
    const uint64_t page_bytes = codec::FlatPageBytes(k.layout);
    const uint64_t block_bytes = plan->block_bytes;
    const size_t exps_per_page = static_cast<size_t>((*gpu)->exponents_per_page());
    const std::vector<uint8_t> page = MakePage(k.layout);
    for (int p = 0; p < max_batch; ++p) {
      Check(cudaMemcpy(areas.hot + p * page_bytes, page.data(), page_bytes, cudaMemcpyHostToDevice),
            "cudaMemcpy page");
    }
    // Valid blocks for onboard: encode once, seal on the host, copy to the device side too.
    Check((*gpu)->EncodePayloads(areas.hot, page_bytes, areas.cold_mapped, block_bytes, max_batch,
                                 areas.exps, stream),
          "encode");
    Check(cudaStreamSynchronize(stream), "encode");
    std::vector<int8_t> exps(exps_per_page * max_batch);
    Check(cudaMemcpy(exps.data(), areas.exps, exps.size(), cudaMemcpyDeviceToHost), "exps");
    for (int p = 0; p < max_batch; ++p) {
      (*gpu)->SealBlock(absl::MakeSpan(areas.cold_host + p * block_bytes, block_bytes),
                        absl::MakeConstSpan(exps).subspan(p * exps_per_page, exps_per_page));
    }
    Check(cudaMemcpy(areas.cold_device, areas.cold_host, block_bytes * max_batch,
                     cudaMemcpyHostToDevice),
          "blocks to device");
    for (int batch : f.batches) {
      for (bool offload : {true, false}) {
        Row row{k.name, page_bytes, block_bytes, batch, offload, {}};
        std::vector<kernels::CopySpan> spans(batch);
        for (int p = 0; p < batch; ++p) {
          uint8_t* d = areas.hot + p * page_bytes;
          uint8_t* h = areas.hot_mapped + p * page_bytes;
          spans[p] =
              offload ? kernels::CopySpan{d, h, page_bytes} : kernels::CopySpan{h, d, page_bytes};
        }
        for (int m = 0; m < kMethods; ++m) {
          if (m == kDirect && offload) {  // offload is direct: the same launch as fused
            row.gbps[m] = row.gbps[kFused];
            continue;
          }
          auto run = [&] {
            switch (m) {
              case kMemcpy:
                for (int p = 0; p < batch; ++p) {
                  uint8_t* d = areas.hot + p * page_bytes;
                  uint8_t* h = areas.hot_host + p * page_bytes;
                  Check(offload ? cudaMemcpyAsync(h, d, page_bytes, cudaMemcpyDeviceToHost, stream)
                                : cudaMemcpyAsync(d, h, page_bytes, cudaMemcpyHostToDevice, stream),
                        "cudaMemcpyAsync");
                }
                break;
              case kRaw:
                Check((*copier)->Enqueue(spans, stream), "batched copy");
                break;
              case kUnfused:
                if (offload) {
                  Check((*gpu)->EncodePayloads(areas.hot, page_bytes, areas.cold_device,
                                               block_bytes, batch, areas.exps, stream),
                        "encode");
                  Check(cudaMemcpyAsync(areas.cold_host, areas.cold_device, block_bytes * batch,
                                        cudaMemcpyDeviceToHost, stream),
                        "cudaMemcpyAsync");
                } else {
                  Check(cudaMemcpyAsync(areas.cold_device, areas.cold_host, block_bytes * batch,
                                        cudaMemcpyHostToDevice, stream),
                        "cudaMemcpyAsync");
                  Check((*gpu)->Decode(areas.cold_device, block_bytes, areas.hot, page_bytes, batch,
                                       stream),
                        "decode");
                }
                break;
              default: {
                uint8_t* cold = m == kDevice ? areas.cold_device : areas.cold_mapped;
                using HostRead = kernels::GpuNvfp4Codec::HostRead;
                Check(offload
                          ? (*gpu)->EncodePayloads(areas.hot, page_bytes, cold, block_bytes, batch,
                                                   areas.exps, stream)
                          : (*gpu)->Decode(cold, block_bytes, areas.hot, page_bytes, batch, stream,
                                           m == kDirect ? HostRead::kDirect : HostRead::kAuto),
                      offload ? "encode" : "decode");
              }
            }
          };
          const double s =
              TimeMedian(run, stream, start, stop, f.min_time, f.queued ? queue : nullptr);
          row.gbps[m] = static_cast<double>(page_bytes) * batch / s / 1e9;
        }
        rows.push_back(row);
      }
    }
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaStreamDestroy(stream);
  for (uint8_t* q : queue) cudaFree(q);
  return rows;
}

void Print(const std::string& device, const Flags& f, const std::vector<Row>& rows) {
  std::printf(
      "kvtier-bench kernels on %s, codec %s: hot bytes per second (GB/s), median of "
      "repetitions%s\n",
      device.c_str(), f.codec.c_str(),
      f.queued ? ", each queued behind device work (GPU time, not the host's submission)" : "");
  std::printf("%-15s %9s %9s %5s %-8s %8s %8s %8s %8s %8s %8s  %9s %9s %9s\n", "page", "hot B",
              "cold B", "batch", "dir", "memcpy", "raw", "unfused", "fused", "direct", "device",
              "f/memcpy", "f/unfused", "f/raw");
  for (const Row& r : rows) {
    std::printf(
        "%-15s %9llu %9llu %5d %-8s %8.1f %8.1f %8.1f %8.1f %8.1f %8.1f  %8.2fx %8.2fx %8.2fx\n",
        r.page.c_str(), static_cast<unsigned long long>(r.hot_bytes),
        static_cast<unsigned long long>(r.cold_bytes), r.batch, r.offload ? "offload" : "onboard",
        r.gbps[kMemcpy], r.gbps[kRaw], r.gbps[kUnfused], r.gbps[kFused], r.gbps[kDirect],
        r.gbps[kDevice], r.gbps[kFused] / r.gbps[kMemcpy], r.gbps[kFused] / r.gbps[kUnfused],
        r.gbps[kFused] / r.gbps[kRaw]);
  }
  std::printf(
      "memcpy: cudaMemcpyAsync per page (pinned); raw: batched copy kernel; unfused: nvfp4 into "
      "device memory + one cudaMemcpyAsync of the blocks; fused: GpuNvfp4Codec with blocks in "
      "mapped pinned memory (offload: the kernel writes them; onboard: HostRead::kAuto, staged "
      "for large batches); direct: the decode kernel reading mapped memory itself (offload is "
      "always direct); device: nvfp4 with blocks in device memory (no link)\n");
}

std::string Json(const std::string& device, const Flags& f, const std::vector<Row>& rows) {
  nlohmann::json j;
  j["device"] = device;
  j["min_time_s"] = f.min_time;
  j["codec"] = f.codec;
  j["queued"] = f.queued;
  j["unit"] = "hot GB/s (1e9 bytes)";
  j["results"] = nlohmann::json::array();
  for (const Row& r : rows) {
    nlohmann::json e;
    e["page"] = r.page;
    e["hot_bytes"] = r.hot_bytes;
    e["cold_bytes"] = r.cold_bytes;
    e["batch"] = r.batch;
    e["direction"] = r.offload ? "offload" : "onboard";
    for (int m = 0; m < kMethods; ++m) e[absl::StrCat(kMethodNames[m], "_gbps")] = r.gbps[m];
    e["fused_over_memcpy"] = r.gbps[kFused] / r.gbps[kMemcpy];
    e["fused_over_unfused"] = r.gbps[kFused] / r.gbps[kUnfused];
    e["fused_over_raw"] = r.gbps[kFused] / r.gbps[kRaw];
    j["results"].push_back(e);
  }
  return j.dump(2);
}

#endif  // KVTIER_BENCH_WITH_CUDA

}  // namespace

void DeclareKernelsBenchFlags(cli::Command& command) {
  command
      .SetDescription(
          "Fused nvfp4 offload/onboard on the GPU against cudaMemcpyAsync, the batched raw copy\n"
          "kernel and the unfused path, for four page kinds; hot bytes per second.")
      .AddFlag("batches", "A,B,...", "pages per batch, each in [1, 4096] (default 1,16,256)")
      .AddFlag("min-time", "SECONDS", "shortest timing of each point (default 0.2)")
      .AddFlag("device", "N", "the CUDA device (default 0)")
      .AddFlag("codec", "C", "nvfp4 (default) or nvfp4x2")
      .AddFlag("target-ctas", "N", "GpuNvfp4Codec::set_target_ctas when > 0 (default 0)")
      .AddSwitch("queued", "time each repetition queued behind device work (GPU time only)")
      .AddSwitch("json", "print JSON instead of the table");
}

int RunKernelsBench(const cli::Values& values) {
  absl::StatusOr<Flags> parsed = ParseFlags(values);
  if (!parsed.ok()) return values.PrintUsageError(parsed.status().message());
  [[maybe_unused]] const Flags& f = *parsed;
#if !KVTIER_BENCH_WITH_CUDA
  std::fprintf(stderr,
               "kvtier-bench kernels: this build has no CUDA (KVTIER_CUDA=OFF or no nvcc); "
               "nothing to measure\n");
  return 0;
#else
  auto devices = kernels::ListDevices();
  if (!devices.ok() || devices->empty()) {
    std::fprintf(
        stderr, "kvtier-bench kernels: %s; nothing to measure\n",
        devices.ok() ? "no CUDA device found" : std::string(devices.status().message()).c_str());
    return 0;
  }
  if (f.device >= static_cast<int>(devices->size())) {
    std::fprintf(stderr, "kvtier-bench kernels: no device %d (%zu found)\n", f.device,
                 devices->size());
    return 2;
  }
  const kernels::DeviceInfo& info = (*devices)[f.device];
  if (!info.can_map_host_memory) {
    std::fprintf(stderr, "kvtier-bench kernels: %s cannot map host memory; nothing to measure\n",
                 info.name.c_str());
    return 0;
  }
  const std::string device =
      absl::StrFormat("%s (sm_%d%d)", info.name, info.sm_major, info.sm_minor);
  try {
    Check(cudaSetDevice(f.device), "cudaSetDevice");
    const std::vector<Row> rows = Measure(f, PageKinds());
    if (f.json) {
      std::printf("%s\n", Json(device, f, rows).c_str());
    } else {
      Print(device, f, rows);
    }
  } catch (const CudaError& e) {
    std::fprintf(stderr, "kvtier-bench kernels: %s\n", e.what.c_str());
    return 1;
  }
  return 0;
#endif
}

}  // namespace kvtier::bench
