// Codecs turn one hot page (described by a PageLayout) into one fixed-size, self-describing cold
// block and back (format: codec/FORMAT.md). CPU reference implementations of `raw`, `nvfp4`,
// `nvfp4` with lossless RoPE, and `nvfp4x2`. A Codec is immutable after Create and thread-safe.
#ifndef KVTIER_CODEC_CODEC_H_
#define KVTIER_CODEC_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "codec/codec_spec.h"
#include "codec/cold_block.h"
#include "codec/page_layout.h"

namespace kvtier::codec {

// Where the buffers of one hot page are: `base[i]` is the first row of layout.buffers[i]; rows are
// layout row_stride elements apart. Borrowed for the duration of one call.
struct HotPageView {
  std::vector<const uint8_t*> base;
};
struct MutableHotPageView {
  std::vector<uint8_t*> base;
};
// Views of a page stored flat: the buffers' data back to back in layout order, each rows *
// row_stride elements (the form used by `kvtier-codec` page files). `page` must hold
// FlatPageBytes(layout) bytes; the view borrows it.
uint64_t FlatPageBytes(const PageLayout& layout);
HotPageView FlatPageView(const PageLayout& layout, absl::Span<const uint8_t> page);
MutableHotPageView FlatPageView(const PageLayout& layout, absl::Span<uint8_t> page);

// Per-buffer statistics gathered while encoding (for tools and tests).
struct BufferEncodeStats {
  int32_t scale_exp = 0;           // the buffer's global scale exponent k (0 for lossless)
  int32_t residual_scale_exp = 0;  // nvfp4x2 second-pass exponent
  uint64_t groups = 0;             // quantized 16-value groups
  uint64_t subnormal_scale_groups =
      0;                          // groups whose E4M3 scale is subnormal or zero while nonzero
  uint64_t nonfinite_values = 0;  // NaN or infinite inputs (see FORMAT.md for their encoding)
};

class Codec {
 public:
  virtual ~Codec() = default;

  // Builds a codec for `layout`. InvalidArgument when the layout is invalid or the codec cannot
  // handle it (e.g. a quantized run that is not a multiple of 16 elements).
  static absl::StatusOr<std::unique_ptr<Codec>> Create(const PageLayout& layout,
                                                       const CodecSpec& spec);

  const PageLayout& layout() const { return plan_.layout; }
  const CodecSpec& spec() const { return plan_.spec; }
  const BlockPlan& plan() const { return plan_; }
  // Size of every block this codec produces and accepts (a multiple of spec().alignment_bytes).
  uint64_t block_bytes() const { return plan_.block_bytes; }

  // Encodes one page into `block` (exactly block_bytes() long; every byte is written, padding as
  // zeros). InvalidArgument when `block` has the wrong size or a view has the wrong buffer count.
  // `stats`, when not null, receives one entry per buffer. Does not block on anything but the CPU.
  virtual absl::Status Encode(const HotPageView& page, absl::Span<uint8_t> block,
                              std::vector<BufferEncodeStats>* stats = nullptr) const = 0;

  // Decodes `block` into the page. Checks everything before writing a byte of the page:
  // DataLoss for a bad magic, version, header or payload checksum, or a size that differs from the
  // header's; FailedPrecondition for a block of another codec or layout (fingerprint, geometry).
  // Bytes of a slot outside the layout's rows (row-stride gaps) are never written.
  virtual absl::Status Decode(absl::Span<const uint8_t> block,
                              const MutableHotPageView& page) const = 0;

 protected:
  explicit Codec(BlockPlan plan) : plan_(std::move(plan)) {}
  // Checks header, sizes, identity and payload checksum of `block` against this codec's plan
  // and returns the parsed header.
  absl::StatusOr<ColdBlockHeader> CheckBlock(absl::Span<const uint8_t> block) const;

  BlockPlan plan_;
};

}  // namespace kvtier::codec

#endif  // KVTIER_CODEC_CODEC_H_
