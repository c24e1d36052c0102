// The seal kernels, for cold blocks in device memory. ChunkCrcKernel: one CTA of 1024 threads per
// 64 KiB chunk of a block's payload, each thread running the CRC register over 64 bytes (slicing
// by four, the tables in shared memory), the pieces joined by two warp trees (crc32c_math.h).
// SealHeaderKernel: one CTA per block joins its chunks the same way, writes the header from its
// template with the block's scale exponents and payload checksum, and its first warp computes the
// header's CRC32C over the bytes just written (the checksum field still zero) and stores it.
// Byte-identical to codec::WriteColdBlockHeader over codec::Crc32c (block_sealer's tests).
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/block_seal_launch.h"

namespace kvtier::kernels::internal {
namespace {

// The register over [start, start + piece) of `message` (start may be negative: leading zeros).
__device__ uint32_t PieceCrc(const uint8_t* message, int64_t start, uint64_t piece,
                             const uint32_t* table) {
  uint32_t reg = 0;
  for (uint64_t off = 0; off < piece; off += 16) {
    const int64_t m = start + static_cast<int64_t>(off);
    if (m < 0) continue;  // padding: a zero register stays zero
    const uint4 v = *reinterpret_cast<const uint4*>(message + m);
    reg = crc::UpdateWord(reg, v.x, table);
    reg = crc::UpdateWord(reg, v.y, table);
    reg = crc::UpdateWord(reg, v.z, table);
    reg = crc::UpdateWord(reg, v.w, table);
  }
  return reg;
}

// Joins the 32 lanes' parts (lane order = message order) with join[l] for parts of 2^l pieces;
// lane 0 returns the whole.
__device__ uint32_t JoinWarp(uint32_t v, const uint32_t* join) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int l = 0; l < 5; ++l) {
    const uint32_t next = __shfl_down_sync(0xffffffffu, v, 1 << l);
    if ((lane & ((2 << l) - 1)) == 0) v = crc::MultModP(join[l], v) ^ next;
  }
  return v;
}

// Joins the CTA's kSealThreads parts (thread order = message order): a tree per warp, then one
// over the warps' results; thread 0 returns the whole.
__device__ uint32_t JoinCta(uint32_t v, const uint32_t* join, uint32_t* parts) {
  v = JoinWarp(v, join);
  if ((threadIdx.x & 31) == 0) parts[threadIdx.x >> 5] = v;
  __syncthreads();
  uint32_t whole = 0;
  if (threadIdx.x < 32) whole = JoinWarp(parts[threadIdx.x], join + 5);
  return whole;
}

__device__ void LoadTables(uint32_t* table) {
  for (int i = threadIdx.x; i < 4 * 256; i += blockDim.x) {
    table[i] = crc::SliceTableEntry(i >> 8, static_cast<uint32_t>(i & 255));
  }
  __syncthreads();
}

// Grid (chunk, block): the register of one 64 KiB chunk of a block's payload.
__global__ void __launch_bounds__(kSealThreads)
    ChunkCrcKernel(const SealKernelPlan plan, const uint8_t* blocks, uint64_t stride,
                   uint32_t* scratch) {
  __shared__ uint32_t table[4 * 256];
  __shared__ uint32_t parts[32];
  LoadTables(table);
  const uint8_t* payload = blocks + uint64_t{blockIdx.y} * stride + plan.header_bytes;
  const int64_t start = static_cast<int64_t>(uint64_t{blockIdx.x} * crc::ChunkPlan::kChunkBytes +
                                             uint64_t{threadIdx.x} * crc::ChunkPlan::kPieceBytes) -
                        static_cast<int64_t>(plan.payload.pad);
  const uint32_t v = PieceCrc(payload, start, crc::ChunkPlan::kPieceBytes, table);
  const uint32_t whole = JoinCta(v, plan.payload.piece_join, parts);
  if (threadIdx.x == 0) scratch[uint64_t{blockIdx.y} * plan.payload.chunks + blockIdx.x] = whole;
}

// One CTA per block: the chunks joined into the payload CRC, then the header.
__global__ void __launch_bounds__(kSealThreads)
    SealHeaderKernel(const SealKernelPlan plan, uint8_t* blocks, uint64_t stride,
                     const int8_t* exps, const uint32_t* scratch) {
  __shared__ uint32_t table[4 * 256];
  __shared__ uint32_t parts[32];
  LoadTables(table);
  uint8_t* block = blocks + uint64_t{blockIdx.x} * stride;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  // Leaf t holds chunk t - (kSealThreads - chunks): the missing ones in front, zero.
  const int64_t chunk = static_cast<int64_t>(threadIdx.x) -
                        (kSealThreads - static_cast<int64_t>(plan.payload.chunks));
  const uint32_t leaf =
      chunk >= 0 ? scratch[uint64_t{blockIdx.x} * plan.payload.chunks + chunk] : 0u;
  const uint32_t joined = JoinCta(leaf, plan.payload.chunk_join, parts);
  const uint32_t payload_crc = crc::FinishCrc(joined, plan.payload.ones);  // thread 0's

  // The header: template, exponents, payload checksum.
  for (uint32_t i = threadIdx.x; i < plan.header_bytes; i += blockDim.x) {
    block[i] = plan.header_template[i];
  }
  __syncthreads();
  if (threadIdx.x < plan.exps_per_page && plan.exp_offsets[threadIdx.x] >= 0) {
    block[plan.exp_offsets[threadIdx.x]] =
        static_cast<uint8_t>(exps[uint64_t{blockIdx.x} * plan.exps_per_page + threadIdx.x]);
  }
  if (threadIdx.x == 0) *reinterpret_cast<uint32_t*>(block + plan.payload_crc_offset) = payload_crc;
  __syncthreads();
  if (warp == 0) {
    uint32_t h = PieceCrc(
        block,
        static_cast<int64_t>(lane * plan.header.piece) - static_cast<int64_t>(plan.header.pad),
        plan.header.piece, table);
    h = JoinWarp(h, plan.header.join);
    if (lane == 0) {
      *reinterpret_cast<uint32_t*>(block + plan.header_crc_offset) =
          crc::FinishCrc(h, plan.header.ones);
    }
  }
}

}  // namespace

int LaunchSealBlocks(const SealKernelPlan& plan, uint8_t* blocks, uint64_t stride, int count,
                     const int8_t* exps, uint32_t* scratch, void* stream) {
  if (count <= 0) return 0;
  auto s = static_cast<cudaStream_t>(stream);
  const dim3 chunks(static_cast<unsigned>(plan.payload.chunks), static_cast<unsigned>(count));
  ChunkCrcKernel<<<chunks, kSealThreads, 0, s>>>(plan, blocks, stride, scratch);
  if (const cudaError_t err = cudaGetLastError(); err != cudaSuccess) return static_cast<int>(err);
  SealHeaderKernel<<<count, kSealThreads, 0, s>>>(plan, blocks, stride, exps, scratch);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace kvtier::kernels::internal
