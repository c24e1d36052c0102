// CRC32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of cold blocks.
// Uses the SSE4.2 instruction when the CPU has it, else a slicing-by-8 table. Thread-safe.
#ifndef KVTIER_CODEC_CRC32C_H_
#define KVTIER_CODEC_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace kvtier::codec {

// Extends `crc` (the CRC32C of earlier bytes, 0 for none) over `n` bytes at `data`.
// Crc32c(0, "123456789", 9) == 0xE3069283.
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n);
inline uint32_t Crc32c(const void* data, size_t n) { return Crc32cExtend(0, data, n); }

}  // namespace kvtier::codec

#endif  // KVTIER_CODEC_CRC32C_H_
