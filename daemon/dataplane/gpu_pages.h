// The GPU side of the data plane: engine pools in GPU memory shared through CUDA IPC
// (DevicePool), and GpuPageCodec, which moves whole pages between such a pool and cold blocks in
// the daemon's CUDA-pinned host tier with the fused NVFP4 kernels (nvfp4, nvfp4+rope, nvfp4x2) or
// the batched copy kernel (raw). Kernels write payloads; the host seals headers and checksums.
// Pages must be in the flat form (one pool, buffers back to back), which the fused kernels read.
#ifndef KVTIER_DAEMON_DATAPLANE_GPU_PAGES_H_
#define KVTIER_DAEMON_DATAPLANE_GPU_PAGES_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "codec/cold_block.h"
#include "kernels/batched_copy.h"
#include "kernels/nvfp4_gpu_codec.h"

namespace kvtier::dataplane {

// An engine's GPU allocation shared through CUDA IPC (the contract's CudaIpcMemory, which
// proto_convert.h converts): the 64-byte handle, the device's 16-byte UUID and the engine's
// ordinal for messages, and the range of the allocation that holds the pages.
struct CudaIpcMemory {
  std::string handle;
  std::string device_uuid;
  uint32_t device_ordinal = 0;
  uint64_t base_offset_bytes = 0;
  uint64_t size_bytes = 0;
};

class DevicePool {
 public:
  // Opens the engine's allocation on the device with the pool's UUID. InvalidArgument (naming the
  // pool) for a handle or UUID of the wrong size, a size below slots * slot_bytes, or a handle CUDA
  // rejects; FailedPrecondition when this process does not see the device; Unimplemented without
  // CUDA.
  static absl::StatusOr<std::unique_ptr<DevicePool>> Open(const std::string& pool_name,
                                                          const CudaIpcMemory& memory,
                                                          uint32_t slots, uint64_t slot_bytes);
  ~DevicePool();
  DevicePool(const DevicePool&) = delete;
  DevicePool& operator=(const DevicePool&) = delete;

  int device() const { return device_; }
  uint32_t slots() const { return slots_; }
  // REQUIRES: index < slots().
  uint8_t* slot(uint32_t index) const { return base_ + uint64_t{index} * slot_bytes_; }

 private:
  DevicePool() = default;
  void* mapping_ = nullptr;
  uint8_t* base_ = nullptr;
  int device_ = 0;
  uint32_t slots_ = 0;
  uint64_t slot_bytes_ = 0;
};

// True when the layout's pages are flat: one pool whose buffers lie back to back in layout
// order at offset 0 (codec::FlatPageView's form). The GPU data plane needs it.
bool IsFlatLayout(const codec::PageLayout& layout);

class GpuPageCodec {
 public:
  // Unimplemented without CUDA, for raw with row-stride gaps, or for layouts the
  // fused kernels do not take (kernels::GpuNvfp4Codec::Create's limits); InvalidArgument for a
  // layout that is not flat.
  static absl::StatusOr<std::unique_ptr<GpuPageCodec>> Create(const codec::BlockPlan& plan,
                                                              int device);

  ~GpuPageCodec();
  int device() const { return device_; }
  const codec::BlockPlan& plan() const { return plan_; }

  // Writes the header and checksums of a block EncodeChunks filled (its first bytes hold the
  // scale exponents until then).
  void Seal(uint8_t* block) const;
  // Enqueues the encode of pages[i] (device memory) into blocks[i] (host memory registered with
  // CUDA, plan().block_bytes each) in chunks of `chunk` pages, chunk c on stream
  // c % streams, and returns: `done` gets an event per chunk enqueued, recorded after it, so that
  // the caller seals a chunk's blocks (kernels::WaitEvent) while the GPU encodes later ones. The
  // caller destroys the events (kernels::DestroyEvent) and, when this fails, calls Wait before
  // releasing the blocks (some of their work may be enqueued).
  absl::Status EncodeChunks(absl::Span<const uint8_t* const> pages,
                            absl::Span<uint8_t* const> blocks, size_t chunk,
                            std::vector<void*>* done) const;
  // Decodes blocks[i] (checked: see CheckBlock) into pages[i] and waits.
  absl::Status Decode(absl::Span<const uint8_t* const> blocks,
                      absl::Span<uint8_t* const> pages) const;
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
  GpuPageCodec() = default;
  codec::BlockPlan plan_;
  int device_ = 0;
  std::unique_ptr<kernels::GpuNvfp4Codec> nvfp4_;   // nvfp4, nvfp4+rope, nvfp4x2
  std::unique_ptr<kernels::BatchedCopier> copier_;  // raw
  std::vector<void*> streams_;
};

}  // namespace kvtier::dataplane

#endif  // KVTIER_DAEMON_DATAPLANE_GPU_PAGES_H_
