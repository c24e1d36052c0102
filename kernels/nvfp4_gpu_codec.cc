// The members of GpuNvfp4Codec that are host code in every build: slice sizes, the plan's
// settings, and sealing a block (header and CRC32C). The launches are in nvfp4_gpu_codec_cuda.cc
// (or nvfp4_gpu_codec_no_cuda.cc in builds without CUDA).
#include "kernels/nvfp4_gpu_codec.h"

#include "codec/crc32c.h"
#include "kernels/nvfp4_launch.h"

namespace kvtier::kernels {

uint64_t GpuNvfp4Codec::SliceBytes(uint64_t batch_bytes) const {
  if (slice_bytes_ != 0) return slice_bytes_;
  return batch_bytes >= kLargeBatchBytes ? kLargeSliceBytes : kSliceBytes;
}

void GpuNvfp4Codec::set_target_ctas(int ctas) {
  if (gpu_plan_ != nullptr) gpu_plan_->target_ctas = ctas;
}

int GpuNvfp4Codec::exponents_per_page() const {
  return gpu_plan_ == nullptr ? 0 : gpu_plan_->exps_per_page;
}

void GpuNvfp4Codec::SealBlock(absl::Span<uint8_t> block,
                              absl::Span<const int8_t> scale_exps) const {
  codec::ColdBlockHeader h = codec::PlanHeader(plan_);
  const size_t n = h.buffers.size();
  for (size_t i = 0; i < n && i < scale_exps.size(); ++i) {
    h.buffers[i].scale_exp = scale_exps[i];
    if (plan_.buffers[i].passes == 2 && n + i < scale_exps.size()) {
      h.buffers[i].residual_scale_exp = scale_exps[n + i];
    }
  }
  h.payload_crc32c = codec::Crc32c(block.data() + h.header_bytes, block.size() - h.header_bytes);
  codec::WriteColdBlockHeader(h, block);
}

}  // namespace kvtier::kernels
