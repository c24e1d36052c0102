// CRC32C's polynomial arithmetic in the reflected form (bit 31 is x^0): the product mod P and the
// operator that appends zero bytes to a CRC register. Header-only and dependency-free so the same
// functions serve codec/crc32c.cc (combining its three streams) and, under nvcc, the GPU seal's
// kernels (kernels/crc32c_math.h).
#ifndef KVTIER_CODEC_CRC32C_POLY_H_
#define KVTIER_CODEC_CRC32C_POLY_H_

#include <cstdint>

#if defined(__CUDACC__)
#define KVTIER_CRC32C_HD __host__ __device__
#else
#define KVTIER_CRC32C_HD
#endif

namespace kvtier::codec::crc32c {

inline constexpr uint32_t kPoly = 0x82F63B78u;  // CRC32C, reflected

// a * b mod P.
KVTIER_CRC32C_HD constexpr uint32_t MultModP(uint32_t a, uint32_t b) {
  uint32_t product = 0;
  for (int i = 0; i < 32; ++i) {
    if (a & (0x80000000u >> i)) product ^= b;
    b = (b & 1u) ? (b >> 1) ^ kPoly : b >> 1;
  }
  return product;
}

// x^(8n) mod P: multiplying a register by it appends n zero bytes.
KVTIER_CRC32C_HD constexpr uint32_t ZerosOperator(uint64_t n) {
  uint32_t result = 0x80000000u;  // x^0
  uint32_t square = 1u << 23;     // x^8
  for (; n != 0; n >>= 1) {
    if (n & 1) result = MultModP(square, result);
    square = MultModP(square, square);
  }
  return result;
}

}  // namespace kvtier::codec::crc32c

#endif  // KVTIER_CODEC_CRC32C_POLY_H_
