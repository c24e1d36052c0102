// GpuNvfp4Codec: the fused NVFP4 kernels behind a plain C++ API (no CUDA types; streams are
// `void*`). Codecs nvfp4, nvfp4+rope and nvfp4x2, BF16/FP16/FP8 pages in the flat form of
// codec::FlatPageView, blocks byte-identical to codec::Codec. The kernels write every payload
// byte; the host writes the header and checksums (SealBlock). Thread-compatible.
#ifndef KVTIER_KERNELS_NVFP4_GPU_CODEC_H_
#define KVTIER_KERNELS_NVFP4_GPU_CODEC_H_

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "codec/cold_block.h"

namespace kvtier::kernels {
namespace internal {
struct GpuPlan;
}

class GpuNvfp4Codec {
 public:
  // Unimplemented without CUDA, for the raw codec (kernels::BatchedCopier copies raw pages), or
  // for layouts of more than 224 buffers or 239 padded records (limits of the kernels' plan).
  // Copies the kernels' plan (23 KiB) into the current device's memory when there is a device;
  // another device gets its copy at its first launch, which then waits for that copy.
  static absl::StatusOr<std::unique_ptr<GpuNvfp4Codec>> Create(const codec::BlockPlan& plan);
  ~GpuNvfp4Codec();

  // Encodes `pages` flat hot pages at hot_base + p * hot_stride into blocks at cold_base +
  // p * cold_stride (device-accessible addresses: device memory or mapped pinned host memory),
  // writing every byte but the header; the buffer exponents go to
  // scale_exps[p * exponents_per_page() + e] (device-accessible): e = b for buffer b's exponent k,
  // e = buffers + b for its residual exponent k2 (nvfp4x2). Enqueued on `stream`; returns without
  // waiting.
  absl::Status EncodePayloads(const void* hot_base, uint64_t hot_stride, void* cold_base,
                              uint64_t cold_stride, int pages, int8_t* scale_exps,
                              void* stream) const;
  // How Decode reads blocks that are in host memory.
  enum class HostRead {
    // kStaged for batches of at least kStagedMinSlices slices, else kDirect (measured:
    // docs/PERFORMANCE.md).
    kAuto,
    // The decode kernel reads the blocks over PCIe itself (mapped pinned memory): one launch.
    kDirect,
    // The copy engine moves the blocks to device memory in slices (SliceBytes; a ring of
    // kSlots slices per codec and device, allocated on first use) while the kernel decodes the
    // previous slice: the link is read by DMA, which the H200 runs a few percent faster than SM
    // loads of mapped memory, and the decode hides behind the copy. The pages are still written
    // once; only the cold bytes (0.28x) pass through device memory. Needs cold_stride >=
    // block_bytes and an uncaptured stream (else kDirect).
    kStaged,
  };
  // Slices of kSliceBytes, kLargeSliceBytes for batches of at least kLargeBatchBytes of blocks
  // (fewer copies and launches; the last slice's decode is a small share of such a batch).
  static constexpr uint64_t kSliceBytes = uint64_t{4} << 20;
  static constexpr uint64_t kLargeSliceBytes = uint64_t{8} << 20;
  static constexpr uint64_t kLargeBatchBytes = uint64_t{64} << 20;
  static constexpr int kSlots = 3;
  static constexpr int kStagedMinSlices = 4;

  // Decodes blocks (already checked by codec::ParseColdBlockHeader and their checksum) into flat
  // hot pages. Row-stride gaps are not written. Enqueued on `stream` (kStaged: work on a second
  // stream that `stream` waits for; everything is complete when `stream`'s later work runs).
  // Blocks in device memory are decoded in place.
  absl::Status Decode(const void* cold_base, uint64_t cold_stride, void* hot_base,
                      uint64_t hot_stride, int pages, void* stream,
                      HostRead host_read = HostRead::kAuto) const;
  // Decodes blocks[i] into the flat hot page pages[i] for every i, blocks and pages anywhere (the
  // daemon's host-tier slots and an engine's pool slots): the kStaged pipeline with the copy
  // engine gathering the blocks into the ring (one copy per run of adjacent blocks), one decode
  // launch per run of evenly spaced pages from there. Blocks in
  // host memory need not be mapped (any address cudaMemcpyAsync takes). Same checks and
  // completion rule as Decode; under stream capture, one direct launch per page. InvalidArgument
  // when the spans differ in length.
  absl::Status DecodeGathered(absl::Span<const uint8_t* const> blocks,
                              absl::Span<uint8_t* const> pages, void* stream) const;
  // Host: writes the header (with one page's exponents, laid out as EncodePayloads writes them)
  // and both checksums into `block`.
  void SealBlock(absl::Span<uint8_t> block, absl::Span<const int8_t> scale_exps) const;
  // Exponents per page in EncodePayloads' output: the buffer count, twice it for nvfp4x2.
  int exponents_per_page() const;
  // The staged decode's slice size (default 0: kSliceBytes or kLargeSliceBytes by batch; at least
  // one block is staged per slice).
  // For tests and tuning; not to be changed while a decode is being enqueued.
  void set_staging_slice_bytes(uint64_t bytes) { slice_bytes_ = bytes; }
  // CTAs a launch aims for by splitting buffers among CTAs (default 0: only launches of under 16
  // (buffer, page) CTAs are split, aiming for two per SM; n > 0: any launch aims for n, so 1
  // never splits). For tests and tuning, as above.
  void set_target_ctas(int ctas);

  const codec::BlockPlan& plan() const { return plan_; }

 private:
  struct Staging;  // one device's ring: slices, a copy stream, events
  GpuNvfp4Codec(codec::BlockPlan plan, std::unique_ptr<internal::GpuPlan> gpu_plan);
  absl::Status DecodeStaged(const uint8_t* cold_base, uint64_t cold_stride, uint8_t* hot_base,
                            uint64_t hot_stride, int pages, void* stream) const;
  int AcquireRing(int device, uint64_t slot_bytes, uint64_t stride, Staging** out) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(staging_mu_);
  // The kernels' copy of gpu_plan_ in the current device's memory: uploaded by Create for the
  // device current then (when there is one), on first use for any other. Sets a cudaError_t value
  // into *err and returns null on failure.
  const internal::GpuPlan* DevicePlan(int* err) const;
  // internal::LaunchNvfp4Decode with the device plan; returns a cudaError_t value.
  int LaunchDecode(const uint8_t* cold_base, uint64_t cold_stride, uint8_t* hot_base,
                   uint64_t hot_stride, int pages, void* stream) const;
  codec::BlockPlan plan_;
  std::unique_ptr<internal::GpuPlan> gpu_plan_;
  mutable absl::Mutex plans_mu_;
  // (device, its copy of the plan)
  mutable std::vector<std::pair<int, internal::GpuPlan*>> device_plans_ ABSL_GUARDED_BY(plans_mu_);
  uint64_t SliceBytes(uint64_t batch_bytes) const;
  uint64_t slice_bytes_ = 0;
  mutable absl::Mutex staging_mu_;  // held while a staged decode is enqueued
  mutable std::vector<std::unique_ptr<Staging>> staging_ ABSL_GUARDED_BY(staging_mu_);
};

}  // namespace kvtier::kernels

#endif  // KVTIER_KERNELS_NVFP4_GPU_CODEC_H_
