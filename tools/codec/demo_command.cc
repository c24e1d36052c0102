// `kvtier-codec demo`: the first-run demonstration. Generates pages for two real model geometries
// (Qwen3-8B GQA and DeepSeek-V3 MLA), runs every codec over them and prints one table per model:
// block size, compression against the hot page, error, and whether a second round trip changes
// anything. Everything is generated in memory; nothing is written to disk.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "codec/codec.h"
#include "codec/codec_spec.h"
#include "codec/dtype.h"
#include "common/status_macros.h"
#include "tools/codec/commands.h"
#include "tools/codec/model_presets.h"
#include "tools/codec/page_metrics.h"

namespace kvtier::tools {
namespace {

constexpr uint32_t kDefaultPages = 8;
constexpr uint32_t kMaxPages = 256;
constexpr char const* kCodecs[] = {"raw", "nvfp4", "nvfp4+rope", "nvfp4x2"};

struct DemoModel {
  std::string title;
  codec::PageLayout layout;
  std::string note;  // printed under the table; may be empty
};

// Round-trips `pages` through one codec and prints its table row.
absl::Status PrintCodecRow(const codec::PageLayout& layout, const std::string& codec_name,
                           const std::vector<std::vector<uint8_t>>& pages) {
  KVTIER_ASSIGN_OR_RETURN(codec::CodecSpec spec, codec::CodecSpec::Parse(codec_name));
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<codec::Codec> codec,
                          CreateCodec(layout, spec, "demo layout"));
  RoundTripper round_tripper(*codec);
  PageComparison comparison(layout);
  const uint64_t page_bytes = codec::FlatPageBytes(layout);
  std::vector<uint8_t> once(page_bytes, 0);
  std::vector<uint8_t> twice(page_bytes, 0);
  uint64_t changed_on_second_trip = 0;
  for (const std::vector<uint8_t>& page : pages) {
    KVTIER_RETURN_IF_ERROR(round_tripper.Run(page, 1, absl::MakeSpan(once)));
    comparison.Add(page, once);
    KVTIER_RETURN_IF_ERROR(round_tripper.Run(once, 1, absl::MakeSpan(twice)));
    changed_on_second_trip += CountChangedElements(layout, once, twice);
  }
  const BufferErrorStats total = comparison.Total();
  const std::string stable =
      changed_on_second_trip == 0
          ? std::string("yes")
          : absl::StrCat("no (", changed_on_second_trip, " of ", total.elements, " values)");
  absl::PrintF("  %-11s %11d %8.3fx %10s %8s %11s  %s\n", codec_name, codec->block_bytes(),
               static_cast<double>(layout.HotBytes()) / codec->block_bytes(),
               FormatMetric(total.RelativeRmse()), FormatMetric(total.SnrDb(), /*fixed=*/true),
               FormatMetric(total.max_abs_error), stable);
  return absl::OkStatus();
}

absl::Status RunModel(const DemoModel& model, uint32_t page_count, uint64_t seed) {
  PageGeneratorOptions options;
  options.sigma = 1.0;
  options.seed = seed;
  options.outlier_channels = {3, 77};
  options.outlier_scale = 20.0;
  PageGenerator generator(model.layout, options);
  std::vector<std::vector<uint8_t>> pages(page_count,
                                          std::vector<uint8_t>(codec::FlatPageBytes(model.layout)));
  for (std::vector<uint8_t>& page : pages) generator.Fill(absl::MakeSpan(page));

  absl::PrintF("%s\n  %d hot bytes per page, %d buffers, %d pages\n\n", model.title,
               model.layout.HotBytes(), model.layout.buffers.size(), page_count);
  absl::PrintF("  %-11s %11s %9s %10s %8s %11s  %s\n", "codec", "block bytes", "vs BF16",
               "rel RMSE", "SNR dB", "max abs err", "stable");
  for (const char* codec_name : kCodecs) {
    KVTIER_RETURN_IF_ERROR(PrintCodecRow(model.layout, codec_name, pages));
  }
  if (!model.note.empty()) absl::PrintF("  %s\n", model.note);
  absl::PrintF("\n");
  return absl::OkStatus();
}

}  // namespace

absl::Status RunDemo(const cli::Values& flags) {
  KVTIER_ASSIGN_OR_RETURN(std::optional<uint32_t> pages_flag, flags.OptionalUint32("pages"));
  KVTIER_ASSIGN_OR_RETURN(std::optional<uint64_t> seed_flag, flags.OptionalUint64("seed"));
  const uint32_t page_count = pages_flag.value_or(kDefaultPages);
  if (page_count < 1 || page_count > kMaxPages) {
    return cli::UsageError(
        absl::StrCat("flag --pages: ", page_count, " is not in [1, ", kMaxPages, "]"));
  }
  const uint64_t seed = seed_flag.value_or(1);

  std::vector<DemoModel> models;
  {
    codec::GqaOptions o = Qwen3_8bOptions();
    KVTIER_ASSIGN_OR_RETURN(codec::PageLayout layout, codec::BuildGqaLayout(o));
    models.push_back(
        {absl::StrFormat("Qwen3-8B (GQA: %d layers x %d KV heads x head_dim %d, %d tokens/page, "
                         "%s)",
                         o.num_layers, o.kv_heads, o.head_dim, o.tokens_per_page,
                         codec::DTypeName(o.dtype)),
         std::move(layout),
         "Qwen3 applies RoPE to the whole K row, so nvfp4+rope keeps K lossless and compresses V "
         "only."});
  }
  {
    codec::MlaOptions o = DeepseekV3Options();
    KVTIER_ASSIGN_OR_RETURN(codec::PageLayout layout, codec::BuildMlaLayout(o));
    models.push_back({absl::StrFormat("DeepSeek-V3 (MLA: %d layers, latent %d + %d RoPE, %d "
                                      "tokens/page, %s, lossless indexer %d bytes/token)",
                                      o.num_layers, o.kv_lora_rank, o.rope_dim, o.tokens_per_page,
                                      codec::DTypeName(o.dtype), o.indexer_bytes_per_token),
                      std::move(layout),
                      "The indexer buffer is copied byte for byte by every codec; errors cover "
                      "the latent."});
  }

  absl::PrintF(
      "kvtier-codec demo: hot KV pages -> cold blocks -> hot pages, on generated data\n"
      "values N(0, 1) rounded to the page dtype, channels 3 and 77 of K / latent rows x20 "
      "(outliers), seed %d\n"
      "vs BF16: BF16 hot page bytes / block bytes. rel RMSE, SNR, max abs err: input vs one round "
      "trip.\n"
      "stable: a second round trip reproduces the first bit for bit.\n\n",
      seed);
  for (const DemoModel& model : models) {
    KVTIER_RETURN_IF_ERROR(RunModel(model, page_count, seed));
  }
  absl::PrintF(
      "The cold-block format (header, sections, arithmetic) is specified in codec/FORMAT.md.\n");
  return absl::OkStatus();
}

}  // namespace kvtier::tools
