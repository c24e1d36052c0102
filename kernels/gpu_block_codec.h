// GpuBlockCodec: a block plan's codec on the GPU, for flat hot pages in device memory and cold
// blocks in host memory registered with CUDA. The fused NVFP4 kernels (nvfp4, nvfp4+rope,
// nvfp4x2; GpuNvfp4Codec) or the batched copy (raw; BatchedCopier) write every payload byte and
// stage the scale exponents; the header and checksums are written either by the host (Seal) or,
// on EncodeSealed's path, by the GPU (BlockSealer) in a device ring the copy engine empties into
// the host slots. The daemon's two GPU paths share it: the store's GPU tier (the daemon's own
// device memory; CreateFused) and the data plane of engines' GPU pools (CUDA IPC; Create), so a
// block is encoded, sealed and checked the same way on both: per page on the caller's stream (the
// GPU tier) or batched on the codec's own streams (engine pools). Immutable once made;
// thread-safe.
#ifndef KVTIER_KERNELS_GPU_BLOCK_CODEC_H_
#define KVTIER_KERNELS_GPU_BLOCK_CODEC_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "codec/cold_block.h"
#include "kernels/batched_copy.h"
#include "kernels/block_sealer.h"
#include "kernels/nvfp4_gpu_codec.h"

namespace kvtier::kernels {

// True when the layout's own pages are flat: one pool whose buffers lie back to back in layout
// order from offset 0 (codec::FlatPageView's form). Engine pools on the GPU need it, since the
// kernels read and write pages in the flat form.
bool IsFlatLayout(const codec::PageLayout& layout);

class GpuBlockCodec {
 public:
  // The codec of an engine's GPU pool on `device`, whose slots hold pages in the layout's own
  // form, with streams of its own for the batched calls. InvalidArgument for a layout that is
  // not flat (IsFlatLayout); Unimplemented without CUDA, for raw with row-stride gaps, or
  // for layouts the fused kernels do not take (GpuNvfp4Codec::Create's limits).
  static absl::StatusOr<std::unique_ptr<GpuBlockCodec>> Create(const codec::BlockPlan& plan,
                                                               int device);
  // The codec of the daemon's GPU tier, whose slots hold the flat form of any layout: the fused
  // kernels only, no device or streams of its own (the per-page calls take the caller's).
  // Unimplemented without CUDA, for the raw codec, or for layouts the kernels do not take
  // (GpuNvfp4Codec::Create).
  static absl::StatusOr<std::unique_ptr<GpuBlockCodec>> CreateFused(const codec::BlockPlan& plan);

  ~GpuBlockCodec();
  GpuBlockCodec(const GpuBlockCodec&) = delete;
  GpuBlockCodec& operator=(const GpuBlockCodec&) = delete;

  // Create's device (0 for CreateFused).
  int device() const { return device_; }
  const codec::BlockPlan& plan() const { return plan_; }
  // codec::FlatPageBytes(plan().layout): a hot page's size (a GPU tier slot).
  uint64_t page_bytes() const { return page_bytes_; }

  // Enqueues on `stream` the encode of the hot page at `page` (device memory) into the block at
  // `block` (plan().block_bytes of host memory registered with CUDA): every payload byte, and
  // the scale exponents into the block's first bytes, where Seal finds them before it writes
  // the header over them. Internal with the CUDA error.
  absl::Status EnqueueEncode(const uint8_t* page, uint8_t* block, void* stream) const;
  // After the encode has finished: writes the header and checksums (raw: also zeroes the
  // padding the copy did not write).
  void Seal(uint8_t* block) const;
  // Both, on the calling thread's stream of `device`, waiting in between.
  absl::Status EncodeToHost(int device, const uint8_t* page, uint8_t* block) const;
  // Enqueues on `stream` the decode of one block (checked: see CheckBlock) into the hot page at
  // `page` (device memory) and returns.
  absl::Status EnqueueDecode(const uint8_t* block, uint8_t* page, void* stream) const;

  // The batched calls, on the codec's streams (EncodeChunks and DecodeAsync: FailedPrecondition
  // for a codec made by CreateFused, which has none).
  //
  // Enqueues the encode of pages[i] (device memory) into blocks[i] (as EnqueueEncode) in chunks
  // of `chunk` pages, chunk c on stream c % streams, and returns: `done` gets an event per chunk
  // enqueued, recorded after it, so that the caller seals a chunk's blocks (kernels::WaitEvent)
  // while the GPU encodes later ones. The caller destroys the events (kernels::DestroyEvent)
  // and, when this fails, calls Wait before releasing the blocks (some of their work may be
  // enqueued).
  absl::Status EncodeChunks(absl::Span<const uint8_t* const> pages,
                            absl::Span<uint8_t* const> blocks, size_t chunk,
                            std::vector<void*>* done) const;
  // Whether EncodeSealed is available: a codec made by Create, in a CUDA build, whose ring
  // (three slots of kSealSliceBytes, rounded to whole blocks, in device memory) Create could
  // allocate.
  bool SealsOnDevice() const { return sealer_ != nullptr; }
  // Enqueues the encode of pages[i] (device memory) into blocks[i] (host memory registered with
  // CUDA, anywhere) as complete blocks, with no host work per block: slices of kSealSliceBytes
  // of blocks are encoded (nvfp4) or copied (raw) into a device ring, sealed there by the GPU
  // (BlockSealer), and moved into their host slots by the copy engine (one copy per run of
  // adjacent slots) while the next slice is encoded. `done` gets an event per slice of
  // `*pages_per_event` pages (the last may hold fewer), recorded after the slice's copies. The
  // caller destroys the events and, when this fails, calls Wait before releasing the blocks.
  // FailedPrecondition unless SealsOnDevice().
  absl::Status EncodeSealed(absl::Span<const uint8_t* const> pages,
                            absl::Span<uint8_t* const> blocks, std::vector<void*>* done,
                            size_t* pages_per_event) const;
  static constexpr uint64_t kSealSliceBytes = uint64_t{8} << 20;

  // Whether a batch of `pages` pages is decoded staged: nvfp4 codecs, at least
  // GpuNvfp4Codec::kStagedMinSlices slices of blocks. The copy engine then gathers the blocks
  // into device memory while the kernel decodes the previous slice (DecodeGathered); otherwise
  // one decode launch per page reads its block over the link, round-robin over the streams.
  bool Staged(size_t pages) const;
  // Enqueues the decode of blocks[i] into pages[i] (`staged` as Staged() says for the whole
  // batch this is part of) and returns; the blocks and pages must stay valid until Wait returns.
  absl::Status DecodeAsync(absl::Span<const uint8_t* const> blocks,
                           absl::Span<uint8_t* const> pages, bool staged) const;
  // Waits for everything enqueued on the codec's streams.
  absl::Status Wait() const;

  // FailedPrecondition unless `block` is a block of this plan (fingerprint, codec, size); the
  // store has verified its checksums.
  absl::Status CheckBlock(absl::Span<const uint8_t> block) const;

 private:
  struct Ring;  // EncodeSealed's slots in device memory, their exponents and events
  explicit GpuBlockCodec(const codec::BlockPlan& plan);
  absl::Status MakeRing() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(ring_mu_);
  absl::Status MakeFused();
  absl::Status NeedStreams() const;
  // Raw: the copies of one page into its block, or back, one span per buffer.
  void AddEncodeSpans(const uint8_t* page, uint8_t* block, std::vector<CopySpan>* spans) const;
  void AddDecodeSpans(const uint8_t* block, uint8_t* page, std::vector<CopySpan>* spans) const;

  codec::BlockPlan plan_;
  uint64_t page_bytes_ = 0;
  int device_ = 0;
  std::unique_ptr<GpuNvfp4Codec> nvfp4_;   // nvfp4, nvfp4+rope, nvfp4x2
  std::unique_ptr<BatchedCopier> copier_;  // raw
  std::vector<void*> streams_;             // Create's
  std::unique_ptr<BlockSealer> sealer_;    // Create's, where the GPU seal takes the plan
  mutable absl::Mutex ring_mu_;            // held while EncodeSealed enqueues
  mutable std::unique_ptr<Ring> ring_ ABSL_GUARDED_BY(ring_mu_);
};

}  // namespace kvtier::kernels

#endif  // KVTIER_KERNELS_GPU_BLOCK_CODEC_H_
