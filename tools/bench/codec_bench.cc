// Micro-benchmarks of the CPU reference codecs: encode and decode throughput of one hot page, in
// bytes of hot (uncompressed) page per second, next to a memcpy of the same hot bytes measured in
// the same run. Pages: a Qwen3-8B page (36 layers x 8 KV heads x 128 x 32 tokens) in BF16, FP16
// and FP8 E4M3, a Qwen3-8B-geometry page with partial rotary (RoPE on 64 of 128 elements, for
// nvfp4+rope), and a one-layer page of the same geometry. Single-threaded.
//
// crc32c/N: the checksum of N bytes (the daemon seals and verifies whole cold blocks: 1331200 B is
// a Qwen3-8B nvfp4 block) by codec::Crc32c, next to crc32c-one-stream/N (one dependent stream of
// the crc32 instruction, the previous implementation) and memcpy/N in the same run.
//
// Run: build/bin/kvtier-codec-bench [--benchmark_filter=encode/qwen3-8b/bf16]
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "benchmark/benchmark.h"
#include "codec/codec.h"
#include "codec/codec_spec.h"
#include "codec/crc32c.h"
#include "codec/page_layout.h"
#include "common/annotate.h"
#include "tools/codec/model_presets.h"
#include "tools/codec/page_metrics.h"

namespace kvtier::codec::internal {
// Defined in codec/crc32c.cc: one stream of the crc32 instruction (the portable path without it).
uint32_t Crc32cExtendOneStreamForBench(uint32_t crc, const void* data, size_t n);
}  // namespace kvtier::codec::internal

namespace kvtier::tools {
namespace {

// One page of one geometry, with its hot bytes, shared by the benchmarks that use it.
struct BenchPage {
  std::string name;  // e.g. "qwen3-8b/bf16"
  codec::PageLayout layout;
  std::vector<uint8_t> page;
};

// A codec over a page, with an encoded block of that page ready for decode.
struct BenchCodec {
  std::shared_ptr<const BenchPage> page;
  std::unique_ptr<codec::Codec> codec;
  std::vector<uint8_t> block;
};

absl::StatusOr<std::shared_ptr<const BenchPage>> MakePage(std::string name,
                                                          const codec::GqaOptions& options) {
  absl::StatusOr<codec::PageLayout> layout = codec::BuildGqaLayout(options);
  if (!layout.ok()) return layout.status();
  auto page = std::make_shared<BenchPage>();
  page->name = std::move(name);
  page->layout = *std::move(layout);
  page->page.resize(codec::FlatPageBytes(page->layout));
  PageGeneratorOptions generator_options;
  generator_options.sigma = 1.0;
  generator_options.seed = 1;
  PageGenerator(page->layout, generator_options).Fill(absl::MakeSpan(page->page));
  return std::shared_ptr<const BenchPage>(std::move(page));
}

absl::StatusOr<std::shared_ptr<BenchCodec>> MakeCodec(std::shared_ptr<const BenchPage> page,
                                                      absl::string_view codec_name) {
  absl::StatusOr<codec::CodecSpec> spec = codec::CodecSpec::Parse(codec_name);
  if (!spec.ok()) return spec.status();
  absl::StatusOr<std::unique_ptr<codec::Codec>> codec = codec::Codec::Create(page->layout, *spec);
  if (!codec.ok()) return codec.status();
  auto result = std::make_shared<BenchCodec>();
  result->page = std::move(page);
  result->codec = *std::move(codec);
  result->block.resize(result->codec->block_bytes());
  absl::Status status = result->codec->Encode(
      codec::FlatPageView(result->page->layout, result->page->page), absl::MakeSpan(result->block));
  if (!status.ok()) return status;
  return result;
}

std::string Label(const BenchCodec& c) {
  const uint64_t hot = c.page->layout.HotBytes();
  return absl::StrFormat("hot %d B, block %d B, %.2fx", hot, c.codec->block_bytes(),
                         static_cast<double>(hot) / c.codec->block_bytes());
}

void BmEncode(benchmark::State& state, std::shared_ptr<BenchCodec> c) {
  const codec::HotPageView view = codec::FlatPageView(c->page->layout, c->page->page);
  std::vector<uint8_t> block(c->codec->block_bytes());
  for (auto _ : state) {
    absl::Status status = c->codec->Encode(view, absl::MakeSpan(block));
    if (!status.ok()) {
      state.SkipWithError(status.ToString().c_str());
      break;
    }
    benchmark::DoNotOptimize(block.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * c->page->layout.HotBytes()));
  state.SetLabel(Label(*c));
}

void BmDecode(benchmark::State& state, std::shared_ptr<BenchCodec> c) {
  std::vector<uint8_t> page(c->page->page.size(), 0);
  const codec::MutableHotPageView view = codec::FlatPageView(c->page->layout, absl::MakeSpan(page));
  for (auto _ : state) {
    absl::Status status = c->codec->Decode(c->block, view);
    if (!status.ok()) {
      state.SkipWithError(status.ToString().c_str());
      break;
    }
    benchmark::DoNotOptimize(page.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * c->page->layout.HotBytes()));
  state.SetLabel(Label(*c));
}

// The baseline: copying the page's hot bytes once.
void BmMemcpy(benchmark::State& state, std::shared_ptr<const BenchPage> page) {
  const size_t bytes = page->layout.HotBytes();
  std::vector<uint8_t> out(bytes);
  for (auto _ : state) {
    std::memcpy(out.data(), page->page.data(), bytes);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
  state.SetLabel(absl::StrFormat("hot %d B", bytes));
}

// Checksums of `bytes` random bytes: 0 codec::Crc32c, 1 one stream, 2 memcpy (the baseline).
void BmChecksum(benchmark::State& state, size_t bytes, int method) {
  std::vector<uint8_t> data(bytes), out(bytes);
  for (size_t i = 0; i < bytes; ++i) data[i] = static_cast<uint8_t>(i * 2654435761u >> 13);
  for (auto _ : state) {
    if (method == 2) {
      std::memcpy(out.data(), data.data(), bytes);
      benchmark::DoNotOptimize(out.data());
      benchmark::ClobberMemory();
    } else {
      uint32_t crc = method == 0
                         ? codec::Crc32c(data.data(), bytes)
                         : codec::internal::Crc32cExtendOneStreamForBench(0, data.data(), bytes);
      benchmark::DoNotOptimize(crc);
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
}

absl::Status RegisterAll() {
  for (size_t bytes : {size_t{40960}, size_t{1331200}}) {
    for (int method : {0, 1, 2}) {
      const char* name = method == 0 ? "crc32c" : method == 1 ? "crc32c-one-stream" : "memcpy";
      benchmark::RegisterBenchmark(absl::StrCat(name, "/", bytes).c_str(), BmChecksum, bytes,
                                   method)
          ->Unit(benchmark::kMicrosecond);
    }
  }
  codec::GqaOptions qwen = Qwen3_8bOptions();
  codec::GqaOptions qwen_fp16 = qwen;
  qwen_fp16.dtype = codec::DType::kFp16;
  codec::GqaOptions qwen_fp8 = qwen;
  qwen_fp8.dtype = codec::DType::kFp8E4M3;
  codec::GqaOptions partial = qwen;  // partial rotary: RoPE on the first 64 of 128 elements
  partial.rope_start = 0;
  partial.rope_len = 64;
  codec::GqaOptions layer = qwen;  // one layer of the same geometry
  layer.num_layers = 1;
  codec::GqaOptions layer_partial = partial;
  layer_partial.num_layers = 1;

  struct Case {
    std::string page_name;
    const codec::GqaOptions* options;
    std::vector<absl::string_view> codecs;
  };
  const std::vector<Case> cases = {
      {"qwen3-8b/bf16", &qwen, {"raw", "nvfp4", "nvfp4x2"}},
      {"qwen3-8b-rope64/bf16", &partial, {"nvfp4+rope"}},
      {"qwen3-8b/fp16", &qwen_fp16, {"nvfp4"}},
      {"qwen3-8b/fp8_e4m3", &qwen_fp8, {"nvfp4"}},
      {"layer/bf16", &layer, {"raw", "nvfp4", "nvfp4x2"}},
      {"layer-rope64/bf16", &layer_partial, {"nvfp4+rope"}},
  };
  for (const Case& c : cases) {
    absl::StatusOr<std::shared_ptr<const BenchPage>> page = MakePage(c.page_name, *c.options);
    if (!page.ok()) return page.status();
    benchmark::RegisterBenchmark(absl::StrCat("memcpy/", c.page_name).c_str(), BmMemcpy, *page)
        ->Unit(benchmark::kMicrosecond);
    for (absl::string_view codec_name : c.codecs) {
      absl::StatusOr<std::shared_ptr<BenchCodec>> bench_codec = MakeCodec(*page, codec_name);
      if (!bench_codec.ok()) {
        return Annotate(bench_codec.status(), absl::StrCat(c.page_name, " ", codec_name));
      }
      benchmark::RegisterBenchmark(absl::StrCat("encode/", c.page_name, "/", codec_name).c_str(),
                                   BmEncode, *bench_codec)
          ->Unit(benchmark::kMicrosecond);
      benchmark::RegisterBenchmark(absl::StrCat("decode/", c.page_name, "/", codec_name).c_str(),
                                   BmDecode, *bench_codec)
          ->Unit(benchmark::kMicrosecond);
    }
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace kvtier::tools

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  absl::Status status = kvtier::tools::RegisterAll();
  if (!status.ok()) {
    absl::FPrintF(stderr, "kvtier-codec-bench: %s\n", status.ToString());
    return 1;
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
