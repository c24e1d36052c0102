// Host side of the fused NVFP4 kernels: turns a codec::BlockPlan into the kernels' descriptor
// table, launches, and seals blocks on the host (header and CRC32C).
#include "kernels/nvfp4_gpu_codec.h"

#include "absl/strings/str_cat.h"
#include "codec/crc32c.h"
#include "kernels/nvfp4_launch.h"

#if KVTIER_WITH_CUDA
#include "kernels/device_query.h"
#endif

namespace kvtier::kernels {

GpuNvfp4Codec::GpuNvfp4Codec(codec::BlockPlan plan, std::unique_ptr<internal::GpuPlan> gpu_plan)
    : plan_(std::move(plan)), gpu_plan_(std::move(gpu_plan)) {}
GpuNvfp4Codec::~GpuNvfp4Codec() = default;

absl::StatusOr<std::unique_ptr<GpuNvfp4Codec>> GpuNvfp4Codec::Create(const codec::BlockPlan& plan) {
#if !KVTIER_WITH_CUDA
  (void)plan;
  return absl::UnimplementedError("kvtier was built without CUDA (KVTIER_CUDA=OFF or no nvcc)");
#else
  if (plan.spec.codec != codec::CodecId::kNvfp4) {
    return absl::UnimplementedError(
        absl::StrCat("the GPU kernels do not implement codec ", plan.spec.ToString(), " yet"));
  }
  if (plan.buffers.size() > internal::kMaxGpuBuffers) {
    return absl::UnimplementedError(absl::StrCat("layouts of more than ", internal::kMaxGpuBuffers,
                                                 " buffers are not supported by the GPU kernels"));
  }
  auto gpu = std::make_unique<internal::GpuPlan>();
  gpu->buffer_count = static_cast<int>(plan.buffers.size());
  uint64_t hot_offset = 0;
  for (size_t i = 0; i < plan.buffers.size(); ++i) {
    const codec::BufferSpec& b = plan.layout.buffers[i];
    const codec::BufferPlan& bp = plan.buffers[i];
    internal::GpuBuffer& g = gpu->buffers[i];
    const uint64_t esize = codec::DTypeBytes(b.dtype);
    g.hot_offset = hot_offset;
    g.row_stride_bytes = uint64_t{b.RowStride()} * esize;
    g.rows = bp.rows;
    g.data_offset = bp.data_offset;
    g.scale_offset = bp.scale_offset;
    g.row_lossless_offset = bp.row_lossless_offset;
    g.whole_offset = bp.whole_offset;
    g.scale_exp_offset = codec::kColdBlockFixedHeaderBytes + i * codec::kColdBlockBufferEntryBytes +
                         codec::kColdBlockEntryScaleExpOffset;
    g.row_lossless_bytes = static_cast<uint32_t>(bp.row_lossless_bytes);
    g.head_dim = b.head_dim;
    g.quant_start = bp.quant_start;
    g.quant_len = bp.quant_len;
    g.dtype = static_cast<uint8_t>(b.dtype);
    g.esize = static_cast<uint8_t>(esize);
    g.quantized = bp.encoding != codec::BufferEncoding::kLossless;
    g.pad = 0;
    hot_offset += bp.rows * g.row_stride_bytes;
  }
  auto add_zero = [&](uint64_t offset, uint64_t bytes) {
    if (bytes == 0) return true;
    if (gpu->zero_count == internal::kMaxZeroRanges) return false;
    gpu->zeros[gpu->zero_count++] = {offset, bytes};
    return true;
  };
  gpu->zero_count = 0;
  bool fits = true;
  for (const codec::LayerRecordPlan& r : plan.records) {
    fits = fits && add_zero(r.offset + r.bytes, r.padded_bytes - r.bytes);
  }
  const uint64_t end = plan.header_bytes + plan.payload_bytes;
  fits = fits && add_zero(end, plan.block_bytes - end);
  if (!fits) {
    return absl::UnimplementedError("too many padded layer records for the GPU kernels");
  }
  return std::unique_ptr<GpuNvfp4Codec>(new GpuNvfp4Codec(plan, std::move(gpu)));
#endif
}

absl::Status GpuNvfp4Codec::EncodePayloads(const void* hot_base, uint64_t hot_stride,
                                           void* cold_base, uint64_t cold_stride, int pages,
                                           int8_t* scale_exps, void* stream) const {
#if KVTIER_WITH_CUDA
  const int err = internal::LaunchNvfp4Encode(*gpu_plan_, static_cast<const uint8_t*>(hot_base),
                                              hot_stride, static_cast<uint8_t*>(cold_base),
                                              cold_stride, pages, scale_exps, stream);
  if (err != 0) {
    return absl::InternalError(
        absl::StrCat("nvfp4 encode launch (", pages, " pages): ", internal::ErrorString(err)));
  }
  return absl::OkStatus();
#else
  (void)hot_base, (void)hot_stride, (void)cold_base, (void)cold_stride, (void)pages,
      (void)scale_exps, (void)stream;
  return absl::UnimplementedError("kvtier was built without CUDA");
#endif
}

absl::Status GpuNvfp4Codec::Decode(const void* cold_base, uint64_t cold_stride, void* hot_base,
                                   uint64_t hot_stride, int pages, void* stream) const {
#if KVTIER_WITH_CUDA
  const int err =
      internal::LaunchNvfp4Decode(*gpu_plan_, static_cast<const uint8_t*>(cold_base), cold_stride,
                                  static_cast<uint8_t*>(hot_base), hot_stride, pages, stream);
  if (err != 0) {
    return absl::InternalError(
        absl::StrCat("nvfp4 decode launch (", pages, " pages): ", internal::ErrorString(err)));
  }
  return absl::OkStatus();
#else
  (void)cold_base, (void)cold_stride, (void)hot_base, (void)hot_stride, (void)pages, (void)stream;
  return absl::UnimplementedError("kvtier was built without CUDA");
#endif
}

void GpuNvfp4Codec::SealBlock(absl::Span<uint8_t> block,
                              absl::Span<const int8_t> scale_exps) const {
  codec::ColdBlockHeader h = codec::PlanHeader(plan_);
  for (size_t i = 0; i < h.buffers.size() && i < scale_exps.size(); ++i) {
    h.buffers[i].scale_exp = scale_exps[i];
  }
  h.payload_crc32c = codec::Crc32c(block.data() + h.header_bytes, block.size() - h.header_bytes);
  codec::WriteColdBlockHeader(h, block);
}

}  // namespace kvtier::kernels
