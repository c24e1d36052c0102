// BlockSealer: seals cold blocks of one plan on the GPU. The payload's CRC32C, the header (the
// plan's, with each page's scale exponents as the encode kernels stage them) and the header's
// own CRC32C are computed and written by two kernels on the caller's stream (block_seal.cu), so a
// block in device memory is complete, byte-identical to codec::Codec's, when that stream's later
// work runs; the host computes nothing per block. No CUDA types (streams are void*). Immutable;
// thread-safe.
#ifndef KVTIER_KERNELS_BLOCK_SEALER_H_
#define KVTIER_KERNELS_BLOCK_SEALER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "codec/cold_block.h"
#include "kernels/block_seal_launch.h"

namespace kvtier::kernels {

class BlockSealer {
 public:
  // For blocks of `plan` on `device`, whose encode stages `exps_per_page` scale exponents per
  // page (GpuNvfp4Codec::exponents_per_page(); 0 for raw). Unimplemented without CUDA, for a
  // block whose header or payload is not a multiple of 16 bytes (never for this format's plans)
  // or whose payload exceeds 64 MiB; the device's errors otherwise.
  static absl::StatusOr<std::unique_ptr<BlockSealer>> Create(const codec::BlockPlan& plan,
                                                             int exps_per_page, int device);
  ~BlockSealer();
  BlockSealer(const BlockSealer&) = delete;
  BlockSealer& operator=(const BlockSealer&) = delete;

  // Device memory Enqueue needs for `count` blocks (the chunks' registers).
  uint64_t ScratchBytes(int count) const;
  // Enqueues on `stream` (of the sealer's device) the seal of `count` blocks at blocks + i *
  // stride in device memory, every payload byte already written (padding included), block i's
  // exponents at exps + i * exps_per_page (device memory; unused when exps_per_page is 0), with
  // ScratchBytes(count) of device memory at `scratch`, which no other work on another stream may
  // use until this work is done. Internal with the CUDA error.
  absl::Status Enqueue(uint8_t* blocks, uint64_t stride, int count, const int8_t* exps,
                       uint32_t* scratch, void* stream) const;

  int device() const { return device_; }

 private:
  BlockSealer() = default;
  int device_ = 0;
  void* device_header_ = nullptr;  // the template, then the exponents' header offsets
  internal::SealKernelPlan kernel_plan_;
};

// The header a sealer writes before the exponents and checksums are patched in, and where each
// staged exponent goes (-1: not stored): host-side, the same in every build (tests compare it
// with codec::WriteColdBlockHeader).
struct SealTemplate {
  std::vector<uint8_t> header;
  std::vector<int16_t> exp_offsets;
};
SealTemplate MakeSealTemplate(const codec::BlockPlan& plan, int exps_per_page);

}  // namespace kvtier::kernels

#endif  // KVTIER_KERNELS_BLOCK_SEALER_H_
