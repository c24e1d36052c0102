// Generated pages and round-trip error metrics, shared by `kvtier-codec roundtrip`, `kvtier-codec
// demo` and the codec benchmark. Pages are in the flat form of codec::FlatPageView (the buffers'
// rows back to back in layout order). PageGenerator, PageComparison and RoundTripper are not
// thread-safe; the free functions are pure.
#ifndef KVTIER_TOOLS_CODEC_PAGE_METRICS_H_
#define KVTIER_TOOLS_CODEC_PAGE_METRICS_H_

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "codec/codec.h"
#include "codec/page_layout.h"

namespace kvtier::tools {

struct PageGeneratorOptions {
  double sigma = 1.0;  // standard deviation of the N(0, sigma) values
  uint64_t seed = 1;
  // Elements of every row of K and MLA-latent buffers that are multiplied by `outlier_scale`
  // (channels at or beyond a row's head_dim are ignored).
  std::vector<uint32_t> outlier_channels;
  double outlier_scale = 20.0;
};

// Fills flat pages with N(0, sigma) values (std::mt19937_64 + std::normal_distribution, rounded to
// each buffer's dtype with codec::StoreFromFloat) and lossless buffers with random bytes.
// Row-stride gaps are zero. The sequence of pages is a function of the layout and the options only.
class PageGenerator {
 public:
  PageGenerator(const codec::PageLayout& layout, const PageGeneratorOptions& options);

  // Writes the next page. REQUIRES: page.size() == codec::FlatPageBytes(layout).
  void Fill(absl::Span<uint8_t> page);

 private:
  codec::PageLayout layout_;
  PageGeneratorOptions options_;
  std::mt19937_64 rng_;
  std::normal_distribution<double> normal_;
};

// How far the decoded form of one buffer is from its reference, accumulated over pages.
// Value-compared buffers (quantizable roles) fill the error fields; lossless buffers (role
// kLossless or dtype kBytes) are compared byte for byte only.
struct BufferErrorStats {
  std::string name;
  codec::DType dtype = codec::DType::kBytes;
  bool value_compared = false;
  uint64_t hot_bytes = 0;         // data bytes compared (rows * head_dim * element bytes * pages)
  uint64_t elements = 0;          // elements compared
  uint64_t changed_elements = 0;  // elements whose bits differ
  uint64_t nonfinite_inputs = 0;  // NaN/Inf reference values, left out of the error sums
  double max_abs_error = 0;       // max |x - y| over finite x
  double sum_sq_reference = 0;    // sum x^2 over finite x
  double sum_sq_error = 0;        // sum (x - y)^2 over finite x

  bool Exact() const { return changed_elements == 0; }
  // sqrt(sum (x-y)^2 / sum x^2); 0 when exact, +inf when the reference is all zero but y is not.
  double RelativeRmse() const;
  // 10 * log10(sum x^2 / sum (x-y)^2); +inf when there is no error.
  double SnrDb() const;
  // Adds `other`'s counts and sums (name and dtype stay).
  void Merge(const BufferErrorStats& other);
};

// Compares decoded pages with their references buffer by buffer (data rows only; row-stride gaps
// are ignored).
class PageComparison {
 public:
  explicit PageComparison(const codec::PageLayout& layout);

  // REQUIRES: both spans are codec::FlatPageBytes(layout) long.
  void Add(absl::Span<const uint8_t> reference, absl::Span<const uint8_t> decoded);

  const std::vector<BufferErrorStats>& buffers() const { return buffers_; }
  // All buffers merged: errors over the value-compared buffers, bytes and changes over all.
  BufferErrorStats Total() const;

 private:
  codec::PageLayout layout_;
  std::vector<BufferErrorStats> buffers_;
};

// Number of elements (bytes, for lossless buffers) whose bits differ between two flat pages of
// `layout`, data rows only. REQUIRES: both spans are codec::FlatPageBytes(layout) long.
uint64_t CountChangedElements(const codec::PageLayout& layout, absl::Span<const uint8_t> a,
                              absl::Span<const uint8_t> b);

// The bytes of a block attributed to each buffer of plan.layout: the buffer's own sections (FP4
// data planes, scale planes, per-row lossless bytes, whole lossless data) plus a share of the
// overhead (header, record padding, block padding) proportional to those sections. The shares sum
// to plan.block_bytes, so hot bytes / share is a per-buffer compression ratio that agrees with the
// page's.
std::vector<double> BlockShareBytes(const codec::BlockPlan& plan);

// "%.4g" (or "%.2f" when `fixed`), spelling non-finite values "inf", "-inf" and "nan".
std::string FormatMetric(double value, bool fixed = false);

// Encode-then-decode loops over one page with reusable scratch buffers. Borrows `codec`, which must
// outlive the RoundTripper.
class RoundTripper {
 public:
  explicit RoundTripper(const codec::Codec& codec);

  // Runs `trips` encode/decode cycles, each on the previous cycle's output, starting from `page`,
  // and leaves the last decoded page in `out` (row-stride gaps of `out` are left as they are).
  // Returns the codec's status, prefixed with the trip number, on failure.
  // REQUIRES: trips >= 1; page and out are codec::FlatPageBytes(layout) long.
  absl::Status Run(absl::Span<const uint8_t> page, int trips, absl::Span<uint8_t> out,
                   std::vector<codec::BufferEncodeStats>* first_trip_stats = nullptr);

  // The block of the last trip.
  absl::Span<const uint8_t> last_block() const { return block_; }

 private:
  const codec::Codec& codec_;
  std::vector<uint8_t> block_;
  std::vector<uint8_t> previous_;
};

}  // namespace kvtier::tools

#endif  // KVTIER_TOOLS_CODEC_PAGE_METRICS_H_
