// CRC32C with a hardware path (x86 SSE4.2 `crc32`, three interleaved streams are not needed for
// cold blocks: a single stream runs at several GB/s, far above the encoder) and a portable
// slicing-by-8 path. Both produce identical values; crc32c_test checks them against each other.
#include "codec/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace kvtier::codec {
namespace {

constexpr uint32_t kPoly = 0x82F63B78u;

struct Tables {
  std::array<std::array<uint32_t, 256>, 8> t{};
  constexpr Tables() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1u) ? (c >> 1) ^ kPoly : c >> 1;
      t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i) {
      for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xffu];
    }
  }
};
constexpr Tables kTables;

uint32_t ExtendPortable(uint32_t crc, const uint8_t* p, size_t n) {
  uint32_t c = ~crc;
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    v ^= c;
    c = kTables.t[7][v & 0xff] ^ kTables.t[6][(v >> 8) & 0xff] ^ kTables.t[5][(v >> 16) & 0xff] ^
        kTables.t[4][(v >> 24) & 0xff] ^ kTables.t[3][(v >> 32) & 0xff] ^
        kTables.t[2][(v >> 40) & 0xff] ^ kTables.t[1][(v >> 48) & 0xff] ^
        kTables.t[0][(v >> 56) & 0xff];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) c = (c >> 8) ^ kTables.t[0][(c ^ *p++) & 0xffu];
  return ~c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t ExtendSse42(uint32_t crc, const uint8_t* p, size_t n) {
  uint64_t c = ~crc;
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c = _mm_crc32_u64(c, v);
    p += 8;
    n -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  while (n-- > 0) c32 = _mm_crc32_u8(c32, *p++);
  return ~c32;
}
const bool kHaveSse42 = __builtin_cpu_supports("sse4.2");
#endif

}  // namespace

uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
#if defined(__x86_64__)
  if (kHaveSse42) return ExtendSse42(crc, p, n);
#endif
  return ExtendPortable(crc, p, n);
}

namespace internal {
uint32_t Crc32cExtendPortableForTest(uint32_t crc, const void* data, size_t n) {
  return ExtendPortable(crc, static_cast<const uint8_t*>(data), n);
}
}  // namespace internal

}  // namespace kvtier::codec
