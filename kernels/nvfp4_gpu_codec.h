// GpuNvfp4Codec: the fused NVFP4 kernels behind a plain C++ API (no CUDA types; streams are
// `void*`). First version: codecs nvfp4 and nvfp4+rope, BF16/FP16/FP8 pages in the flat form of
// codec::FlatPageView, blocks byte-identical to codec::Codec. The kernels write every payload
// byte; the host writes the header and checksums (SealBlock). Thread-compatible.
#ifndef KVTIER_KERNELS_NVFP4_GPU_CODEC_H_
#define KVTIER_KERNELS_NVFP4_GPU_CODEC_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "codec/cold_block.h"

namespace kvtier::kernels {
namespace internal {
struct GpuPlan;
}

class GpuNvfp4Codec {
 public:
  // Unimplemented without CUDA, for codecs other than nvfp4 / nvfp4+rope, or for layouts of more
  // than 224 buffers or 239 padded records (limits of this first version).
  static absl::StatusOr<std::unique_ptr<GpuNvfp4Codec>> Create(const codec::BlockPlan& plan);
  ~GpuNvfp4Codec();

  // Encodes `pages` flat hot pages at hot_base + p * hot_stride into blocks at cold_base +
  // p * cold_stride (device-accessible addresses: device memory or mapped pinned host memory),
  // writing every byte but the header; the buffer exponents go to scale_exps[p * buffers + b]
  // (device-accessible). Enqueued on `stream`; returns without waiting.
  absl::Status EncodePayloads(const void* hot_base, uint64_t hot_stride, void* cold_base,
                              uint64_t cold_stride, int pages, int8_t* scale_exps,
                              void* stream) const;
  // Decodes blocks (already checked by codec::ParseColdBlockHeader and their checksum) into flat
  // hot pages. Row-stride gaps are not written. Enqueued on `stream`.
  absl::Status Decode(const void* cold_base, uint64_t cold_stride, void* hot_base,
                      uint64_t hot_stride, int pages, void* stream) const;
  // Host: writes the header (with these exponents) and both checksums into `block`.
  void SealBlock(absl::Span<uint8_t> block, absl::Span<const int8_t> scale_exps) const;

  const codec::BlockPlan& plan() const { return plan_; }

 private:
  GpuNvfp4Codec(codec::BlockPlan plan, std::unique_ptr<internal::GpuPlan> gpu_plan);
  codec::BlockPlan plan_;
  std::unique_ptr<internal::GpuPlan> gpu_plan_;
};

}  // namespace kvtier::kernels

#endif  // KVTIER_KERNELS_NVFP4_GPU_CODEC_H_
