// GPU copy benchmarks (CUDA builds only): the batched copy kernel against cudaMemcpyAsync of the
// same bytes, between device memory and pinned host memory (mapped for the kernel), for batches of
// pages. Bytes per second are page bytes moved; times come from CUDA events (manual time).
//
// Run on the GPU machine: kvtier-kernels-bench [--benchmark_filter=d2h]
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "codec/codec.h"
#include "codec/page_layout.h"
#include "kernels/batched_copy.h"
#include "kernels/nvfp4_gpu_codec.h"

namespace kvtier::tools {
namespace {

#define KVTIER_BENCH_CHECK(expr)                                         \
  do {                                                                   \
    cudaError_t err_ = (expr);                                           \
    if (err_ != cudaSuccess) {                                           \
      std::fprintf(stderr, "%s: %s\n", #expr, cudaGetErrorString(err_)); \
      std::abort();                                                      \
    }                                                                    \
  } while (0)

// Device and pinned host areas of `pages` slots of `page_bytes` each.
struct Areas {
  uint8_t* device = nullptr;
  uint8_t* host = nullptr;         // host address
  uint8_t* host_mapped = nullptr;  // the same memory as the device sees it
  Areas(size_t pages, size_t page_bytes) {
    const size_t bytes = pages * page_bytes;
    KVTIER_BENCH_CHECK(cudaMalloc(&device, bytes));
    KVTIER_BENCH_CHECK(cudaHostAlloc(&host, bytes, cudaHostAllocMapped));
    KVTIER_BENCH_CHECK(cudaHostGetDevicePointer(&host_mapped, host, 0));
    KVTIER_BENCH_CHECK(cudaMemset(device, 1, bytes));
    KVTIER_BENCH_CHECK(cudaMemset(host_mapped, 2, bytes));
  }
  ~Areas() {
    cudaFree(device);
    cudaFreeHost(host);
  }
};

enum Direction { kD2H = 0, kH2D = 1 };
enum Method { kKernel = 0, kMemcpy = 1 };

// Args: page bytes, pages per batch, direction, method.
void BmCopy(benchmark::State& state) {
  const size_t page_bytes = static_cast<size_t>(state.range(0));
  const size_t pages = static_cast<size_t>(state.range(1));
  const auto direction = static_cast<Direction>(state.range(2));
  const auto method = static_cast<Method>(state.range(3));
  static auto copier = kernels::BatchedCopier::Create(0);
  if (!copier.ok()) {
    state.SkipWithError(std::string(copier.status().message()).c_str());
    return;
  }
  Areas areas(pages, page_bytes);
  cudaStream_t stream;
  KVTIER_BENCH_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t start, stop;
  KVTIER_BENCH_CHECK(cudaEventCreate(&start));
  KVTIER_BENCH_CHECK(cudaEventCreate(&stop));
  std::vector<kernels::CopySpan> spans(pages);
  for (size_t p = 0; p < pages; ++p) {
    uint8_t* d = areas.device + p * page_bytes;
    uint8_t* h = (method == kKernel ? areas.host_mapped : areas.host) + p * page_bytes;
    spans[p] = direction == kD2H ? kernels::CopySpan{d, h, page_bytes}
                                 : kernels::CopySpan{h, d, page_bytes};
  }
  auto run = [&] {
    if (method == kKernel) {
      absl::Status s = (*copier)->Enqueue(spans, stream);
      if (!s.ok()) std::abort();
    } else {
      for (const auto& span : spans) {
        KVTIER_BENCH_CHECK(
            cudaMemcpyAsync(span.dst, span.src, span.bytes, cudaMemcpyDefault, stream));
      }
    }
  };
  run();  // warm up
  KVTIER_BENCH_CHECK(cudaStreamSynchronize(stream));
  for (auto _ : state) {
    KVTIER_BENCH_CHECK(cudaEventRecord(start, stream));
    run();
    KVTIER_BENCH_CHECK(cudaEventRecord(stop, stream));
    KVTIER_BENCH_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    KVTIER_BENCH_CHECK(cudaEventElapsedTime(&ms, start, stop));
    state.SetIterationTime(ms / 1e3);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * pages * page_bytes));
  state.SetLabel(absl::StrCat(method == kKernel ? "batched kernel" : "cudaMemcpyAsync",
                              direction == kD2H ? ", device->host" : ", host->device"));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaStreamDestroy(stream);
}

// Args: page bytes, batch, dir (0 device->host, 1 host->device), method (0 kernel, 1 memcpy).
// Pages: a per-layer page (8 KV heads x 128 x 32 tokens x BF16, K and V: 131,072 B), the FP8
// Qwen3-8B page (2,359,296 B), the DeepSeek-style MLA page (5,012,736 B) and a
// Qwen3-8B page (all 36 layers: 4,718,592 B); batches of 1, 16 and 256 pages.
void Args(benchmark::internal::Benchmark* b) {
  for (int64_t page : {131072, 2359296, 4718592, 5012736}) {
    for (int64_t batch : {1, 16, 256}) {
      for (int64_t direction : {kD2H, kH2D}) {
        for (int64_t method : {kMemcpy, kKernel}) b->Args({page, batch, direction, method});
      }
    }
  }
}
BENCHMARK(BmCopy)->Apply(Args)->UseManualTime()->ArgNames({"page", "batch", "dir", "method"});

// Fused nvfp4 offload (encode: device hot pages -> blocks in mapped pinned host memory) and
// onboard (decode: blocks in mapped host memory -> device hot pages), throughput in hot bytes.
// Args: layout (0 Qwen3-8B BF16 page, 1 per-layer BF16 page, 2 Qwen3-8B FP8 page, 3 DeepSeek-style
// MLA BF16 page with a lossless indexer), batch, dir (0 offload, 1 onboard), cold (0 fused: blocks
// in mapped pinned host memory; 1 blocks in device memory (the GPU tier's staging); 2 unfused:
// encode into a device buffer then cudaMemcpyAsync the blocks to pinned host memory, and the
// reverse for onboard).
void BmNvfp4(benchmark::State& state) {
  codec::PageLayout layout;
  if (state.range(0) == 3) {  // DeepSeek-style MLA page (BF16 latent, lossless indexer)
    codec::MlaOptions m;
    m.num_layers = 61;
    m.tokens_per_page = 64;
    m.indexer_bytes_per_token = 132;
    layout = *codec::BuildMlaLayout(m);
  } else {
    codec::GqaOptions o;
    o.num_layers = state.range(0) == 1 ? 1 : 36;
    o.kv_heads = 8;
    o.head_dim = 128;
    o.tokens_per_page = 32;
    o.dtype = state.range(0) == 2 ? codec::DType::kFp8E4M3 : codec::DType::kBf16;
    layout = *codec::BuildGqaLayout(o);
  }
  const auto plan = codec::MakeBlockPlan(layout, codec::CodecSpec{});
  auto gpu = kernels::GpuNvfp4Codec::Create(*plan);
  if (!gpu.ok()) {
    state.SkipWithError(std::string(gpu.status().message()).c_str());
    return;
  }
  const size_t pages = static_cast<size_t>(state.range(1));
  const uint64_t page_bytes = codec::FlatPageBytes(layout);
  const uint64_t block_bytes = plan->block_bytes;
  uint8_t *hot = nullptr, *cold_host = nullptr, *cold = nullptr, *cold_device = nullptr;
  int8_t* exps = nullptr;
  const int where = static_cast<int>(state.range(3));
  KVTIER_BENCH_CHECK(cudaMalloc(&hot, pages * page_bytes));
  KVTIER_BENCH_CHECK(cudaHostAlloc(&cold_host, pages * block_bytes, cudaHostAllocMapped));
  KVTIER_BENCH_CHECK(cudaHostGetDevicePointer(&cold, cold_host, 0));
  if (where != 0) KVTIER_BENCH_CHECK(cudaMalloc(&cold_device, pages * block_bytes));
  uint8_t* target = where == 0 ? cold : cold_device;  // where the kernels read and write blocks
  KVTIER_BENCH_CHECK(cudaMalloc(&exps, pages * (*gpu)->exponents_per_page()));
  {
    std::vector<uint8_t> page(page_bytes);
    // Values spread over [-1, 1] in each buffer's dtype; lossless buffers get bytes.
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

    for (size_t p = 0; p < pages; ++p) {
      KVTIER_BENCH_CHECK(
          cudaMemcpy(hot + p * page_bytes, page.data(), page_bytes, cudaMemcpyHostToDevice));
    }
  }
  // Onboard needs valid blocks: encode once first.
  if (!(*gpu)
           ->EncodePayloads(hot, page_bytes, cold, block_bytes, static_cast<int>(pages), exps,
                            nullptr)
           .ok()) {
    std::abort();
  }
  KVTIER_BENCH_CHECK(cudaDeviceSynchronize());
  std::vector<int8_t> host_exps((*gpu)->exponents_per_page());
  for (size_t p = 0; p < pages; ++p) {
    KVTIER_BENCH_CHECK(cudaMemcpy(host_exps.data(), exps + p * host_exps.size(), host_exps.size(),
                                  cudaMemcpyDeviceToHost));
    (*gpu)->SealBlock(absl::MakeSpan(cold_host + p * block_bytes, block_bytes), host_exps);
  }
  if (cold_device != nullptr) {
    KVTIER_BENCH_CHECK(
        cudaMemcpy(cold_device, cold_host, pages * block_bytes, cudaMemcpyHostToDevice));
  }
  cudaStream_t stream;
  KVTIER_BENCH_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t start, stop;
  KVTIER_BENCH_CHECK(cudaEventCreate(&start));
  KVTIER_BENCH_CHECK(cudaEventCreate(&stop));
  const bool offload = state.range(2) == 0;
  for (auto _ : state) {
    KVTIER_BENCH_CHECK(cudaEventRecord(start, stream));
    if (!offload && where == 2) {
      KVTIER_BENCH_CHECK(cudaMemcpyAsync(cold_device, cold_host, pages * block_bytes,
                                         cudaMemcpyHostToDevice, stream));
    }
    absl::Status s = offload ? (*gpu)->EncodePayloads(hot, page_bytes, target, block_bytes,
                                                      static_cast<int>(pages), exps, stream)
                             : (*gpu)->Decode(target, block_bytes, hot, page_bytes,
                                              static_cast<int>(pages), stream);
    if (!s.ok()) std::abort();
    if (offload && where == 2) {
      KVTIER_BENCH_CHECK(cudaMemcpyAsync(cold_host, cold_device, pages * block_bytes,
                                         cudaMemcpyDeviceToHost, stream));
    }
    KVTIER_BENCH_CHECK(cudaEventRecord(stop, stream));
    KVTIER_BENCH_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    KVTIER_BENCH_CHECK(cudaEventElapsedTime(&ms, start, stop));
    state.SetIterationTime(ms / 1e3);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * pages * page_bytes));
  const char* kinds[] = {"fused nvfp4 ", "nvfp4 into device memory ", "unfused nvfp4 + memcpy "};
  state.SetLabel(absl::StrCat(kinds[where],
                              offload ? "offload (device->host)" : "onboard (host->device)",
                              ", hot bytes; block ", block_bytes, " B"));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaStreamDestroy(stream);
  cudaFree(hot);
  cudaFree(exps);
  cudaFreeHost(cold_host);
  if (cold_device != nullptr) cudaFree(cold_device);
}
BENCHMARK(BmNvfp4)
    ->ArgsProduct({{0, 1, 2, 3}, {1, 16, 256}, {0, 1}, {0, 1, 2}})
    ->UseManualTime()
    ->ArgNames({"layout", "batch", "dir", "cold"});

}  // namespace
}  // namespace kvtier::tools

BENCHMARK_MAIN();
