// CRC32C arithmetic shared by the GPU seal kernel (block_seal.cu) and its host-side planning and
// tests: the same functions compile for the host and, under nvcc, for the device. Plain C++ with
// no CUDA types, so the development machine's tests check the decomposition the kernel uses
// (crc32c_math_test) against codec::Crc32c.
//
// The kernels split a message of L bytes into equal pieces after `pad` leading zero bytes (piece
// a multiple of 16). Each thread runs the CRC register from zero over its piece (the *linear*
// CRC: leading zeros leave a zero register as it is, so the padding changes nothing); two
// adjacent parts combine as lin(A || B) = lin(A) * x^(8|B|) ^ lin(B) (mod P, reflected), in a
// tree whose level l joins parts of piece * 2^l bytes. The standard CRC32C (initial register ~0,
// final complement) is then ~(lin(M) ^ ~0 * x^(8L)).
#ifndef KVTIER_KERNELS_CRC32C_MATH_H_
#define KVTIER_KERNELS_CRC32C_MATH_H_

#include <cstdint>

#include "codec/crc32c_poly.h"

#if defined(__CUDACC__)
#define KVTIER_CRC_HD __host__ __device__ __forceinline__
#else
#define KVTIER_CRC_HD inline
#endif

namespace kvtier::kernels::crc {

using codec::crc32c::kPoly;
using codec::crc32c::MultModP;       // a * b mod P (reflected: bit 31 is x^0)
using codec::crc32c::ZerosOperator;  // x^(8n) mod P: appends n zero bytes to a register

// Entry i of slicing table s: the register after byte i and then s zero bytes, from zero.
KVTIER_CRC_HD uint32_t SliceTableEntry(int s, uint32_t i) {
  uint32_t c = i;
  for (int k = 0; k < 8 * (s + 1); ++k) c = (c & 1u) ? (c >> 1) ^ kPoly : c >> 1;
  return c;
}

// The register after four more message bytes (little-endian `word`), with the four slicing
// tables t[0..3][256] (t[s][i] = SliceTableEntry(s, i)).
KVTIER_CRC_HD uint32_t UpdateWord(uint32_t reg, uint32_t word, const uint32_t* t) {
  const uint32_t v = reg ^ word;
  return t[3 * 256 + (v & 0xffu)] ^ t[2 * 256 + ((v >> 8) & 0xffu)] ^ t[256 + ((v >> 16) & 0xffu)] ^
         t[v >> 24];
}

// How a message of `bytes` bytes is split over `threads` (a power of two up to 1024) pieces,
// and the constants that join them. Planned on the host, used by the kernel (the header: 32
// pieces, one warp).
struct SplitPlan {
  static constexpr int kMaxLevels = 10;
  uint64_t piece = 0;              // bytes per thread, a multiple of 16
  uint64_t pad = 0;                // leading zero bytes: threads * piece - bytes
  uint32_t join[kMaxLevels] = {};  // x^(8 * piece * 2^l) mod P
  uint32_t ones = 0;  // ~0 * x^(8 * bytes): the standard CRC's initial register, carried over
};

inline SplitPlan PlanSplit(uint64_t bytes, int threads) {
  SplitPlan p;
  const uint64_t per = (bytes + threads - 1) / threads;
  p.piece = (per + 15) / 16 * 16;
  if (p.piece == 0) p.piece = 16;
  p.pad = p.piece * threads - bytes;
  for (int l = 0; l < SplitPlan::kMaxLevels; ++l) p.join[l] = ZerosOperator(p.piece << l);
  p.ones = MultModP(ZerosOperator(bytes), 0xFFFFFFFFu);
  return p;
}

// A payload split into chunks of kChunkThreads pieces of kPieceBytes (one CTA a chunk, so that a
// large block is spread over many SMs), after `pad` leading zero bytes; a second step joins the
// chunks' registers in a tree of kChunkThreads leaves, the missing chunks in front (zero
// registers, which the join leaves as they are).
struct ChunkPlan {
  static constexpr int kChunkThreads = 1024;
  static constexpr uint64_t kPieceBytes = 64;
  static constexpr uint64_t kChunkBytes = kChunkThreads * kPieceBytes;  // 64 KiB
  uint64_t chunks = 0;                                                  // at most kChunkThreads
  uint64_t pad = 0;                                 // chunks * kChunkBytes - bytes
  uint32_t piece_join[SplitPlan::kMaxLevels] = {};  // x^(8 * kPieceBytes * 2^l)
  uint32_t chunk_join[SplitPlan::kMaxLevels] = {};  // x^(8 * kChunkBytes * 2^l)
  uint32_t ones = 0;
};

// False when the message needs more than kChunkThreads chunks (64 MiB).
inline bool PlanChunks(uint64_t bytes, ChunkPlan* p) {
  p->chunks = (bytes + ChunkPlan::kChunkBytes - 1) / ChunkPlan::kChunkBytes;
  if (p->chunks == 0) p->chunks = 1;
  if (p->chunks > static_cast<uint64_t>(ChunkPlan::kChunkThreads)) return false;
  p->pad = p->chunks * ChunkPlan::kChunkBytes - bytes;
  for (int l = 0; l < SplitPlan::kMaxLevels; ++l) {
    p->piece_join[l] = ZerosOperator(ChunkPlan::kPieceBytes << l);
    p->chunk_join[l] = ZerosOperator(ChunkPlan::kChunkBytes << l);
  }
  p->ones = MultModP(ZerosOperator(bytes), 0xFFFFFFFFu);
  return true;
}

// The standard CRC32C of a message from its linear CRC (the tree's result) and the `ones` of its
// plan.
KVTIER_CRC_HD uint32_t FinishCrc(uint32_t linear, uint32_t ones) { return ~(linear ^ ones); }

}  // namespace kvtier::kernels::crc

#endif  // KVTIER_KERNELS_CRC32C_MATH_H_
