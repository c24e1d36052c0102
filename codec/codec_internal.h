// Internal to the codec module: factories of the concrete codecs, helpers they share, and the
// testing hook that builds the identity-scale baseline. Not part of the public API.
#ifndef KVTIER_CODEC_CODEC_INTERNAL_H_
#define KVTIER_CODEC_CODEC_INTERNAL_H_

#include <memory>
#include <optional>

#include "codec/codec.h"

namespace kvtier::codec::internal {

std::unique_ptr<Codec> MakeRawCodec(BlockPlan plan);
// `fixed_scale_exp`, when set, replaces the data-chosen buffer exponent (0 gives the identity
// global scale of TensorRT-LLM's default; used only as a baseline by tests and benchmarks).
std::unique_ptr<Codec> MakeNvfp4Codec(BlockPlan plan, std::optional<int> fixed_scale_exp);

// Builds an nvfp4/nvfp4x2 codec whose buffer exponent is always `fixed_scale_exp`.
absl::StatusOr<std::unique_ptr<Codec>> CreateFixedScaleCodecForTest(const PageLayout& layout,
                                                                    const CodecSpec& spec,
                                                                    int fixed_scale_exp);

// Copies the data rows of buffer `b` (head_dim elements each, row-stride gaps skipped) to `out`.
void GatherRows(const PageLayout& layout, const BufferSpec& b, const uint8_t* base, uint8_t* out);
// The inverse: writes rows from `in` into the buffer, leaving row-stride gaps untouched.
void ScatterRows(const PageLayout& layout, const BufferSpec& b, const uint8_t* in, uint8_t* base);

// Fills in the payload and header checksums of an encoded block whose header fields and payload
// are final. `header` is written into the block.
void SealBlock(const ColdBlockHeader& header, absl::Span<uint8_t> block);

absl::Status CheckViewSize(size_t views, size_t buffers);

// Zeroes the padding of every layer record and the block's tail padding (the sections themselves
// are written in full by the encoders).
void ZeroPadding(const BlockPlan& plan, absl::Span<uint8_t> block);

}  // namespace kvtier::codec::internal

#endif  // KVTIER_CODEC_CODEC_INTERNAL_H_
