// `kvtier-codec roundtrip`: encodes and decodes pages (from a file or generated) K times and
// reports per-buffer error and compression. Errors are measured between the original page and the
// page after the last trip. A buffer's compression ratio is its hot bytes over its share of the
// block: its own sections plus the header and padding split in proportion to them
// (BlockShareBytes), so the per-buffer ratios and the page ratio agree.
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "codec/codec.h"
#include "codec/dtype.h"
#include "common/status_macros.h"
#include "tools/codec/commands.h"
#include "tools/codec/file_io.h"
#include "tools/codec/page_metrics.h"

namespace kvtier::tools {
namespace {

constexpr uint32_t kMaxTrips = 1000;

// JSON has no infinity: a non-finite value becomes null (an exact round trip has "exact": true).
nlohmann::json JsonNumber(double value) {
  if (!std::isfinite(value)) return nullptr;
  return value;
}

nlohmann::json StatsJson(const BufferErrorStats& stats, uint64_t hot_bytes_per_page,
                         double share_bytes_per_page) {
  nlohmann::json j;
  j["name"] = stats.name;
  if (stats.name != "total") j["dtype"] = std::string(codec::DTypeName(stats.dtype));
  j["lossless"] = !stats.value_compared;
  j["exact"] = stats.Exact();
  j["elements"] = stats.elements;
  j["changed_elements"] = stats.changed_elements;
  if (stats.value_compared) {
    j["nonfinite_inputs"] = stats.nonfinite_inputs;
    j["max_abs_error"] = JsonNumber(stats.max_abs_error);
    j["rel_rmse"] = JsonNumber(stats.RelativeRmse());
    j["snr_db"] = JsonNumber(stats.SnrDb());
  } else {
    j["nonfinite_inputs"] = nullptr;
    j["max_abs_error"] = nullptr;
    j["rel_rmse"] = nullptr;
    j["snr_db"] = nullptr;
  }
  j["hot_bytes"] = hot_bytes_per_page;
  j["block_share_bytes"] = share_bytes_per_page;
  j["ratio"] = static_cast<double>(hot_bytes_per_page) / share_bytes_per_page;
  return j;
}

std::string StatsLine(const BufferErrorStats& stats, uint64_t hot_bytes_per_page,
                      double share_bytes_per_page) {
  const double ratio = static_cast<double>(hot_bytes_per_page) / share_bytes_per_page;
  std::string errors;
  if (!stats.value_compared) {
    errors = stats.Exact()
                 ? absl::StrFormat("%-12s %-10s %-8s", "exact", "-", "-")
                 : absl::StrFormat("%-12s %-10s %-8s",
                                   absl::StrCat("DIFFERS:", stats.changed_elements), "-", "-");
  } else {
    errors = absl::StrFormat("%-12s %-10s %-8s", FormatMetric(stats.max_abs_error),
                             FormatMetric(stats.RelativeRmse()),
                             FormatMetric(stats.SnrDb(), /*fixed=*/true));
  }
  return absl::StrFormat("%-14s %-9s %s %7.3fx %10d %12.1f", stats.name,
                         stats.name == "total" ? "" : codec::DTypeName(stats.dtype), errors, ratio,
                         hot_bytes_per_page, share_bytes_per_page);
}

}  // namespace

absl::Status RunRoundtrip(const cli::Values& flags) {
  KVTIER_ASSIGN_OR_RETURN(std::string layout_path, flags.RequiredString("layout"));
  KVTIER_ASSIGN_OR_RETURN(codec::CodecSpec spec, CodecSpecFromFlags(flags));
  std::optional<std::string> in_path = flags.Get("in");
  KVTIER_ASSIGN_OR_RETURN(std::optional<uint64_t> generate, flags.OptionalUint64("generate"));
  KVTIER_ASSIGN_OR_RETURN(std::optional<double> sigma, flags.OptionalDouble("sigma"));
  KVTIER_ASSIGN_OR_RETURN(std::optional<uint64_t> seed, flags.OptionalUint64("seed"));
  KVTIER_ASSIGN_OR_RETURN(std::optional<uint32_t> trips_flag, flags.OptionalUint32("trips"));
  const bool json = flags.Has("json");
  if (in_path.has_value() == generate.has_value()) {
    return cli::UsageError("give exactly one of --in FILE and --generate N");
  }
  if (in_path.has_value() && (sigma.has_value() || seed.has_value())) {
    return cli::UsageError("--sigma and --seed apply to --generate only");
  }
  if (generate.has_value() && *generate == 0)
    return cli::UsageError("flag --generate: must be >= 1");
  if (sigma.has_value() && *sigma <= 0) return cli::UsageError("flag --sigma: must be > 0");
  const uint32_t trips = trips_flag.value_or(1);
  if (trips < 1 || trips > kMaxTrips) {
    return cli::UsageError(
        absl::StrCat("flag --trips: ", trips, " is not in [1, ", kMaxTrips, "]"));
  }

  KVTIER_ASSIGN_OR_RETURN(codec::PageLayout layout, LoadLayoutFile(layout_path));
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<codec::Codec> codec,
                          CreateCodec(layout, spec, layout_path));
  const uint64_t page_bytes = codec::FlatPageBytes(layout);
  std::unique_ptr<InputFile> in;
  std::optional<PageGenerator> generator;
  uint64_t pages = 0;
  if (in_path.has_value()) {
    KVTIER_ASSIGN_OR_RETURN(in, InputFile::Open(*in_path));
    KVTIER_ASSIGN_OR_RETURN(pages, CountUnits(*in, page_bytes, "page"));
  } else {
    PageGeneratorOptions options;
    options.sigma = sigma.value_or(1.0);
    options.seed = seed.value_or(1);
    generator.emplace(layout, options);
    pages = *generate;
  }

  std::vector<uint8_t> page(page_bytes);
  std::vector<uint8_t> decoded(page_bytes, 0);
  RoundTripper round_tripper(*codec);
  PageComparison comparison(layout);
  for (uint64_t i = 0; i < pages; ++i) {
    std::string where;
    if (in != nullptr) {
      KVTIER_RETURN_IF_ERROR(in->ReadAt(i * page_bytes, absl::MakeSpan(page)));
      where = absl::StrCat(*in_path, ": page ", i, " at offset ", i * page_bytes);
    } else {
      generator->Fill(absl::MakeSpan(page));
      where = absl::StrCat("generated page ", i);
    }
    absl::Status status = round_tripper.Run(page, trips, absl::MakeSpan(decoded));
    if (!status.ok()) return WithContext(where, status);
    comparison.Add(page, decoded);
  }

  const std::vector<double> shares = BlockShareBytes(codec->plan());
  const BufferErrorStats total = comparison.Total();
  const uint64_t hot_bytes = layout.HotBytes();
  const double block_bytes = static_cast<double>(codec->block_bytes());
  if (json) {
    nlohmann::json j;
    j["codec"] = spec.ToString();
    j["alignment_bytes"] = spec.alignment_bytes;
    j["layout_fingerprint"] = absl::StrFormat("%016x", codec->plan().fingerprint);
    j["pages"] = pages;
    j["trips"] = trips;
    j["source"] = in != nullptr ? *in_path : "generated";
    if (generator.has_value()) {
      j["sigma"] = sigma.value_or(1.0);
      j["seed"] = seed.value_or(1);
    }
    j["hot_bytes_per_page"] = hot_bytes;
    j["block_bytes"] = codec->block_bytes();
    j["ratio"] = static_cast<double>(hot_bytes) / block_bytes;
    j["buffers"] = nlohmann::json::array();
    for (size_t b = 0; b < layout.buffers.size(); ++b) {
      j["buffers"].push_back(
          StatsJson(comparison.buffers()[b], layout.DataBytes(layout.buffers[b]), shares[b]));
    }
    j["total"] = StatsJson(total, hot_bytes, block_bytes);
    absl::PrintF("%s\n", j.dump(2));
    return absl::OkStatus();
  }
  absl::PrintF(
      "roundtrip: codec %s, %d page%s from %s, %d trip%s, layout fingerprint %016x\n"
      "block %d bytes per page for %d hot bytes; a buffer's block bytes are its own sections plus\n"
      "a proportional share of header and padding; errors compare the input with the last trip\n\n",
      spec.ToString(), pages, pages == 1 ? "" : "s",
      in != nullptr ? *in_path
                    : absl::StrFormat("N(0, %g) seed %d", sigma.value_or(1.0), seed.value_or(1)),
      trips, trips == 1 ? "" : "s", codec->plan().fingerprint, codec->block_bytes(), hot_bytes);
  absl::PrintF("%-14s %-9s %-12s %-10s %-8s %8s %10s %12s\n", "buffer", "dtype", "max_abs_err",
               "rel_rmse", "snr_db", "ratio", "hot_bytes", "block_bytes");
  for (size_t b = 0; b < layout.buffers.size(); ++b) {
    absl::PrintF(
        "%s\n", StatsLine(comparison.buffers()[b], layout.DataBytes(layout.buffers[b]), shares[b]));
  }
  absl::PrintF("%s\n", StatsLine(total, hot_bytes, block_bytes));
  if (total.nonfinite_inputs > 0) {
    absl::PrintF("%d NaN/Inf input values were left out of the error figures\n",
                 total.nonfinite_inputs);
  }
  return absl::OkStatus();
}

}  // namespace kvtier::tools
