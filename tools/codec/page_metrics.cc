// Page generation and error metrics. Errors are accumulated in double: a page has a few million
// values, each rounded from at most 16 significant bits, so double sums are exact enough that the
// reported RMSE and SNR do not depend on the order of pages. Element access goes through the
// FlatPageView pointers so the flat-page geometry is defined in one place (codec/codec.h).
#include "tools/codec/page_metrics.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "codec/dtype.h"
#include "common/annotate.h"

namespace kvtier::tools {
namespace {

using codec::BufferRole;
using codec::BufferSpec;
using codec::DType;

bool ValueCompared(const BufferSpec& buffer) {
  return buffer.role != BufferRole::kLossless && buffer.dtype != DType::kBytes;
}

double LoadElement(DType dtype, const uint8_t* base, size_t i) {
  if (dtype == DType::kFp32) {
    float f;
    std::memcpy(&f, base + 4 * i, sizeof(f));
    return f;
  }
  return codec::LoadAsFloat(dtype, base, i);
}

void StoreElement(DType dtype, double value, uint8_t* base, size_t i) {
  if (dtype == DType::kFp32) {
    float f = static_cast<float>(value);
    std::memcpy(base + 4 * i, &f, sizeof(f));
    return;
  }
  codec::StoreFromFloat(dtype, static_cast<float>(value), base, i);
}

// Offsets of each buffer in a flat page, from the FlatPageView pointers.
std::vector<size_t> FlatOffsets(const codec::PageLayout& layout, absl::Span<const uint8_t> page) {
  codec::HotPageView view = codec::FlatPageView(layout, page);
  std::vector<size_t> offsets;
  offsets.reserve(view.base.size());
  for (const uint8_t* base : view.base) offsets.push_back(static_cast<size_t>(base - page.data()));
  return offsets;
}

}  // namespace

PageGenerator::PageGenerator(const codec::PageLayout& layout, const PageGeneratorOptions& options)
    : layout_(layout), options_(options), rng_(options.seed), normal_(0.0, options.sigma) {}

void PageGenerator::Fill(absl::Span<uint8_t> page) {
  std::memset(page.data(), 0, page.size());
  std::vector<size_t> offsets = FlatOffsets(layout_, page);
  for (size_t b = 0; b < layout_.buffers.size(); ++b) {
    const BufferSpec& buffer = layout_.buffers[b];
    uint8_t* base = page.data() + offsets[b];
    const uint64_t rows = layout_.Rows(buffer);
    const size_t stride = buffer.RowStride();
    const size_t element_bytes = codec::DTypeBytes(buffer.dtype);
    if (!ValueCompared(buffer)) {
      for (uint64_t r = 0; r < rows; ++r) {
        uint8_t* row = base + r * stride * element_bytes;
        const size_t row_bytes = size_t{buffer.head_dim} * element_bytes;
        for (size_t i = 0; i < row_bytes; i += 8) {
          uint64_t word = rng_();
          std::memcpy(row + i, &word, std::min<size_t>(8, row_bytes - i));
        }
      }
      continue;
    }
    std::vector<double> row_scale(buffer.head_dim, 1.0);
    if (buffer.role == BufferRole::kAttentionK || buffer.role == BufferRole::kMlaLatent) {
      for (uint32_t channel : options_.outlier_channels) {
        if (channel < buffer.head_dim) row_scale[channel] = options_.outlier_scale;
      }
    }
    for (uint64_t r = 0; r < rows; ++r) {
      for (uint32_t e = 0; e < buffer.head_dim; ++e) {
        StoreElement(buffer.dtype, normal_(rng_) * row_scale[e], base, r * stride + e);
      }
    }
  }
}

double BufferErrorStats::RelativeRmse() const {
  if (sum_sq_error == 0) return 0;
  if (sum_sq_reference == 0) return std::numeric_limits<double>::infinity();
  return std::sqrt(sum_sq_error / sum_sq_reference);
}

double BufferErrorStats::SnrDb() const {
  if (sum_sq_error == 0) return std::numeric_limits<double>::infinity();
  if (sum_sq_reference == 0) return -std::numeric_limits<double>::infinity();
  return 10.0 * std::log10(sum_sq_reference / sum_sq_error);
}

void BufferErrorStats::Merge(const BufferErrorStats& other) {
  hot_bytes += other.hot_bytes;
  elements += other.elements;
  changed_elements += other.changed_elements;
  nonfinite_inputs += other.nonfinite_inputs;
  max_abs_error = std::max(max_abs_error, other.max_abs_error);
  sum_sq_reference += other.sum_sq_reference;
  sum_sq_error += other.sum_sq_error;
}

PageComparison::PageComparison(const codec::PageLayout& layout) : layout_(layout) {
  for (const BufferSpec& buffer : layout_.buffers) {
    BufferErrorStats stats;
    stats.name = buffer.name;
    stats.dtype = buffer.dtype;
    stats.value_compared = ValueCompared(buffer);
    buffers_.push_back(std::move(stats));
  }
}

void PageComparison::Add(absl::Span<const uint8_t> reference, absl::Span<const uint8_t> decoded) {
  std::vector<size_t> offsets = FlatOffsets(layout_, reference);
  for (size_t b = 0; b < layout_.buffers.size(); ++b) {
    const BufferSpec& buffer = layout_.buffers[b];
    BufferErrorStats& stats = buffers_[b];
    const uint8_t* x_base = reference.data() + offsets[b];
    const uint8_t* y_base = decoded.data() + offsets[b];
    const uint64_t rows = layout_.Rows(buffer);
    const size_t stride = buffer.RowStride();
    const size_t element_bytes = codec::DTypeBytes(buffer.dtype);
    stats.hot_bytes += layout_.DataBytes(buffer);
    stats.elements += rows * buffer.head_dim;
    for (uint64_t r = 0; r < rows; ++r) {
      const size_t row_start = r * stride;
      if (std::memcmp(x_base + row_start * element_bytes, y_base + row_start * element_bytes,
                      size_t{buffer.head_dim} * element_bytes) == 0) {
        if (!stats.value_compared) continue;
        // Equal bits: no error, but the reference energy still counts.
        for (uint32_t e = 0; e < buffer.head_dim; ++e) {
          double x = LoadElement(buffer.dtype, x_base, row_start + e);
          if (!std::isfinite(x)) {
            ++stats.nonfinite_inputs;
            continue;
          }
          stats.sum_sq_reference += x * x;
        }
        continue;
      }
      for (uint32_t e = 0; e < buffer.head_dim; ++e) {
        const size_t i = row_start + e;
        const bool changed =
            std::memcmp(x_base + i * element_bytes, y_base + i * element_bytes, element_bytes) != 0;
        if (changed) ++stats.changed_elements;
        if (!stats.value_compared) continue;
        double x = LoadElement(buffer.dtype, x_base, i);
        if (!std::isfinite(x)) {
          ++stats.nonfinite_inputs;
          continue;
        }
        double y = LoadElement(buffer.dtype, y_base, i);
        double error = std::isnan(y) ? std::numeric_limits<double>::infinity() : std::abs(x - y);
        stats.max_abs_error = std::max(stats.max_abs_error, error);
        stats.sum_sq_reference += x * x;
        stats.sum_sq_error += error * error;
      }
    }
  }
}

BufferErrorStats PageComparison::Total() const {
  BufferErrorStats total;
  total.name = "total";
  total.value_compared = true;
  for (const BufferErrorStats& stats : buffers_) total.Merge(stats);
  return total;
}

uint64_t CountChangedElements(const codec::PageLayout& layout, absl::Span<const uint8_t> a,
                              absl::Span<const uint8_t> b) {
  std::vector<size_t> offsets = FlatOffsets(layout, a);
  uint64_t changed = 0;
  for (size_t k = 0; k < layout.buffers.size(); ++k) {
    const BufferSpec& buffer = layout.buffers[k];
    const size_t element_bytes = codec::DTypeBytes(buffer.dtype);
    const size_t stride_bytes = size_t{buffer.RowStride()} * element_bytes;
    const size_t row_bytes = size_t{buffer.head_dim} * element_bytes;
    const uint64_t rows = layout.Rows(buffer);
    for (uint64_t r = 0; r < rows; ++r) {
      const uint8_t* x = a.data() + offsets[k] + r * stride_bytes;
      const uint8_t* y = b.data() + offsets[k] + r * stride_bytes;
      if (std::memcmp(x, y, row_bytes) == 0) continue;
      for (size_t i = 0; i < row_bytes; i += element_bytes) {
        if (std::memcmp(x + i, y + i, element_bytes) != 0) ++changed;
      }
    }
  }
  return changed;
}

std::vector<double> BlockShareBytes(const codec::BlockPlan& plan) {
  std::vector<double> own;
  own.reserve(plan.buffers.size());
  double own_total = 0;
  for (const codec::BufferPlan& buffer : plan.buffers) {
    const double quantized = static_cast<double>(buffer.rows) * buffer.quant_len;
    double bytes = buffer.passes * (quantized / 2 + quantized / codec::kNvfp4GroupSize) +
                   static_cast<double>(buffer.rows) * buffer.row_lossless_bytes +
                   static_cast<double>(buffer.whole_bytes);
    own.push_back(bytes);
    own_total += bytes;
  }
  const double overhead = static_cast<double>(plan.block_bytes) - own_total;
  std::vector<double> share;
  share.reserve(own.size());
  for (double bytes : own) {
    share.push_back(own_total > 0 ? bytes + overhead * (bytes / own_total)
                                  : static_cast<double>(plan.block_bytes) / own.size());
  }
  return share;
}

std::string FormatMetric(double value, bool fixed) {
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  if (std::isnan(value)) return "nan";
  return fixed ? absl::StrFormat("%.2f", value) : absl::StrFormat("%.4g", value);
}

RoundTripper::RoundTripper(const codec::Codec& codec)
    : codec_(codec), block_(codec.block_bytes()), previous_(codec::FlatPageBytes(codec.layout())) {}

absl::Status RoundTripper::Run(absl::Span<const uint8_t> page, int trips, absl::Span<uint8_t> out,
                               std::vector<codec::BufferEncodeStats>* first_trip_stats) {
  const codec::PageLayout& layout = codec_.layout();
  absl::Span<const uint8_t> input = page;
  for (int trip = 1; trip <= trips; ++trip) {
    absl::Status status = codec_.Encode(codec::FlatPageView(layout, input), absl::MakeSpan(block_),
                                        trip == 1 ? first_trip_stats : nullptr);
    if (!status.ok()) return Annotate(status, absl::StrCat("trip ", trip, ": encode"));
    status = codec_.Decode(block_, codec::FlatPageView(layout, out));
    if (!status.ok()) return Annotate(status, absl::StrCat("trip ", trip, ": decode"));
    if (trip < trips) {
      std::memcpy(previous_.data(), out.data(), out.size());
      input = previous_;
    }
  }
  return absl::OkStatus();
}

}  // namespace kvtier::tools
