// Internal: the CUDA side of BlockSealer, with plain types only (no Abseil in .cu files).
#ifndef KVTIER_KERNELS_BLOCK_SEAL_LAUNCH_H_
#define KVTIER_KERNELS_BLOCK_SEAL_LAUNCH_H_

#include <cstdint>

#include "kernels/crc32c_math.h"

namespace kvtier::kernels::internal {

// Threads of a seal CTA: a chunk's pieces (or a block's chunks), joined in two warp trees.
inline constexpr int kSealThreads = crc::ChunkPlan::kChunkThreads;

struct SealKernelPlan {
  const uint8_t* header_template =
      nullptr;                           // device: header_bytes bytes, checksums and exponents 0
  const int16_t* exp_offsets = nullptr;  // device: per staged exponent its header byte, or -1
  uint32_t header_bytes = 0;
  uint32_t payload_crc_offset = 0;  // where the header holds the two checksums (cold_block.h)
  uint32_t header_crc_offset = 0;
  uint32_t exps_per_page = 0;
  uint64_t block_bytes = 0;
  crc::ChunkPlan payload;  // [header_bytes, block_bytes) in chunks of kSealThreads pieces
  crc::SplitPlan header;   // [0, header_bytes) over 32 pieces
};

// Seals `count` blocks at blocks + i * stride (device memory; every payload byte written):
// payload CRC32C, the header from the template with block i's exponents exps[i * exps_per_page
// + e] (nullptr when exps_per_page is 0) and the payload checksum patched in, then the header's
// own CRC32C. Two launches on `stream` for the current device: the chunks' registers into
// `scratch` (count * plan.payload.chunks words of device memory), then one CTA per block joins
// them and writes the header. Returns a cudaError_t value.
int LaunchSealBlocks(const SealKernelPlan& plan, uint8_t* blocks, uint64_t stride, int count,
                     const int8_t* exps, uint32_t* scratch, void* stream);

}  // namespace kvtier::kernels::internal

#endif  // KVTIER_KERNELS_BLOCK_SEAL_LAUNCH_H_
