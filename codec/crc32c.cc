// CRC32C with a hardware path (x86 SSE4.2 `crc32`) and a portable slicing-by-8 path. Both produce
// identical values; crc32c_test checks them against each other. The `crc32` instruction has a
// latency of three cycles and a throughput of one, so one dependent stream runs at a third of what
// the unit can do: from kThreeWayBytes on, the buffer's first 3L bytes go as three streams of L
// bytes (the second and third from a zero register) and the three registers are combined by
// multiplying by x^(8L) mod P (appending L zero bytes to a CRC register is that product; the
// register is linear in its initial value). The daemon seals and verifies whole cold blocks (1.3 MB
// for a Qwen3-8B page under nvfp4), where this is about three times as fast.
#include "codec/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

#include "codec/crc32c_poly.h"
#include "common/coding.h"

namespace kvtier::codec {
namespace {

using crc32c::kPoly;
using crc32c::MultModP;

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
    const uint64_t v = DecodeFixed64(p) ^ c;
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

// kZeros.x8[k] = x^(8 * 2^k) mod P: appending 2^k zero bytes.
struct ZeroOperators {
  std::array<uint32_t, 64> x8{};
  constexpr ZeroOperators() {
    x8[0] = 1u << 23;  // x^8
    for (int k = 1; k < 64; ++k) x8[k] = MultModP(x8[k - 1], x8[k - 1]);
  }
};
constexpr ZeroOperators kZeros;

// The CRC register `c` after `n` more zero bytes.
uint32_t AppendZeros(uint32_t c, uint64_t n) {
  for (int k = 0; n != 0; ++k, n >>= 1) {
    if (n & 1) c = MultModP(kZeros.x8[k], c);
  }
  return c;
}

constexpr size_t kThreeWayBytes = 16 * 1024;

#if defined(__x86_64__)
// One dependent stream of `crc32` instructions.
__attribute__((target("sse4.2"))) uint32_t ExtendSse42OneStream(uint32_t crc, const uint8_t* p,
                                                                size_t n) {
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

__attribute__((target("sse4.2"))) uint32_t ExtendSse42(uint32_t crc, const uint8_t* p, size_t n) {
  if (n < kThreeWayBytes) return ExtendSse42OneStream(crc, p, n);
  const size_t len = n / 24 * 8;  // each stream a multiple of 8 bytes
  const uint8_t* a = p;
  const uint8_t* b = p + len;
  const uint8_t* d = p + 2 * len;
  uint64_t ca = ~crc, cb = 0, cd = 0;
  for (size_t i = 0; i < len; i += 8) {
    uint64_t va, vb, vd;
    std::memcpy(&va, a + i, 8);
    std::memcpy(&vb, b + i, 8);
    std::memcpy(&vd, d + i, 8);
    ca = _mm_crc32_u64(ca, va);
    cb = _mm_crc32_u64(cb, vb);
    cd = _mm_crc32_u64(cd, vd);
  }
  uint32_t c = AppendZeros(static_cast<uint32_t>(ca), len) ^ static_cast<uint32_t>(cb);
  c = AppendZeros(c, len) ^ static_cast<uint32_t>(cd);
  return ExtendSse42OneStream(~c, p + 3 * len, n - 3 * len);
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
uint32_t Crc32cAppendZerosForTest(uint32_t crc, uint64_t n) { return ~AppendZeros(~crc, n); }
uint32_t Crc32cExtendOneStreamForBench(uint32_t crc, const void* data, size_t n) {
#if defined(__x86_64__)
  if (kHaveSse42) return ExtendSse42OneStream(crc, static_cast<const uint8_t*>(data), n);
#endif
  return ExtendPortable(crc, static_cast<const uint8_t*>(data), n);
}
}  // namespace internal

}  // namespace kvtier::codec
