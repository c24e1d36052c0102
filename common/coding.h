// Fixed-width integer coding, after LevelDB's util/coding.h: little-endian encode and decode at a
// byte pointer of any alignment, appends to a std::string or a std::vector<uint8_t>, a variable
// width of 0..8 bytes for formats that have one (pickle's LONG1), and big-endian 32/64 bits for
// keys whose byte order must sort like the number (the index's namespace ids). The on-disk,
// on-wire and hashed integer encodings of the project use these. Header-only, plain C++ with no
// Abseil, so that code which must not include Abseil (the .cu kernels) may; pure functions,
// thread-safe.
#ifndef KVTIER_COMMON_CODING_H_
#define KVTIER_COMMON_CODING_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kvtier {

// ---- Little-endian, fixed width. REQUIRES: `dst` / `src` has room for 2, 4 or 8 bytes. ----
// The shifts are written out, as in LevelDB: GCC and Clang turn each function into one load or
// store (plus a byte swap on a big-endian host).

inline void EncodeFixed16(uint8_t* dst, uint16_t value) {
  dst[0] = static_cast<uint8_t>(value);
  dst[1] = static_cast<uint8_t>(value >> 8);
}

inline void EncodeFixed32(uint8_t* dst, uint32_t value) {
  dst[0] = static_cast<uint8_t>(value);
  dst[1] = static_cast<uint8_t>(value >> 8);
  dst[2] = static_cast<uint8_t>(value >> 16);
  dst[3] = static_cast<uint8_t>(value >> 24);
}

inline void EncodeFixed64(uint8_t* dst, uint64_t value) {
  EncodeFixed32(dst, static_cast<uint32_t>(value));
  EncodeFixed32(dst + 4, static_cast<uint32_t>(value >> 32));
}

inline uint16_t DecodeFixed16(const uint8_t* src) {
  return static_cast<uint16_t>(uint16_t{src[0]} | (uint16_t{src[1]} << 8));
}

inline uint32_t DecodeFixed32(const uint8_t* src) {
  return uint32_t{src[0]} | (uint32_t{src[1]} << 8) | (uint32_t{src[2]} << 16) |
         (uint32_t{src[3]} << 24);
}

inline uint64_t DecodeFixed64(const uint8_t* src) {
  return uint64_t{DecodeFixed32(src)} | (uint64_t{DecodeFixed32(src + 4)} << 32);
}

// ---- Little-endian, `bytes` wide (the low `bytes` bytes of the value). REQUIRES: bytes <= 8.

inline void EncodeLittleEndian(uint8_t* dst, uint64_t value, size_t bytes) {
  for (size_t i = 0; i < bytes; ++i) dst[i] = static_cast<uint8_t>(value >> (8 * i));
}

inline uint64_t DecodeLittleEndian(const uint8_t* src, size_t bytes) {
  uint64_t value = 0;
  for (size_t i = 0; i < bytes; ++i) value |= uint64_t{src[i]} << (8 * i);
  return value;
}

// ---- Big-endian (most significant byte first). REQUIRES: room for 4 or 8 bytes. ----

inline void EncodeBigEndian32(uint8_t* dst, uint32_t value) {
  dst[0] = static_cast<uint8_t>(value >> 24);
  dst[1] = static_cast<uint8_t>(value >> 16);
  dst[2] = static_cast<uint8_t>(value >> 8);
  dst[3] = static_cast<uint8_t>(value);
}

inline void EncodeBigEndian64(uint8_t* dst, uint64_t value) {
  EncodeBigEndian32(dst, static_cast<uint32_t>(value >> 32));
  EncodeBigEndian32(dst + 4, static_cast<uint32_t>(value));
}

inline uint32_t DecodeBigEndian32(const uint8_t* src) {
  return (uint32_t{src[0]} << 24) | (uint32_t{src[1]} << 16) | (uint32_t{src[2]} << 8) |
         uint32_t{src[3]};
}

inline uint64_t DecodeBigEndian64(const uint8_t* src) {
  return (uint64_t{DecodeBigEndian32(src)} << 32) | uint64_t{DecodeBigEndian32(src + 4)};
}

// ---- The same on char buffers (std::string, absl::string_view, stream buffers). ----

inline void EncodeFixed16(char* dst, uint16_t value) {
  EncodeFixed16(reinterpret_cast<uint8_t*>(dst), value);
}
inline void EncodeFixed32(char* dst, uint32_t value) {
  EncodeFixed32(reinterpret_cast<uint8_t*>(dst), value);
}
inline void EncodeFixed64(char* dst, uint64_t value) {
  EncodeFixed64(reinterpret_cast<uint8_t*>(dst), value);
}
inline uint16_t DecodeFixed16(const char* src) {
  return DecodeFixed16(reinterpret_cast<const uint8_t*>(src));
}
inline uint32_t DecodeFixed32(const char* src) {
  return DecodeFixed32(reinterpret_cast<const uint8_t*>(src));
}
inline uint64_t DecodeFixed64(const char* src) {
  return DecodeFixed64(reinterpret_cast<const uint8_t*>(src));
}
inline void EncodeBigEndian32(char* dst, uint32_t value) {
  EncodeBigEndian32(reinterpret_cast<uint8_t*>(dst), value);
}
inline void EncodeBigEndian64(char* dst, uint64_t value) {
  EncodeBigEndian64(reinterpret_cast<uint8_t*>(dst), value);
}
inline uint32_t DecodeBigEndian32(const char* src) {
  return DecodeBigEndian32(reinterpret_cast<const uint8_t*>(src));
}
inline uint64_t DecodeBigEndian64(const char* src) {
  return DecodeBigEndian64(reinterpret_cast<const uint8_t*>(src));
}

// ---- Appends to the end of `dst`. ----

inline void PutFixed16(std::string* dst, uint16_t value) {
  char buf[2];
  EncodeFixed16(buf, value);
  dst->append(buf, sizeof(buf));
}
inline void PutFixed32(std::string* dst, uint32_t value) {
  char buf[4];
  EncodeFixed32(buf, value);
  dst->append(buf, sizeof(buf));
}
inline void PutFixed64(std::string* dst, uint64_t value) {
  char buf[8];
  EncodeFixed64(buf, value);
  dst->append(buf, sizeof(buf));
}
inline void PutBigEndian32(std::string* dst, uint32_t value) {
  char buf[4];
  EncodeBigEndian32(buf, value);
  dst->append(buf, sizeof(buf));
}
inline void PutBigEndian64(std::string* dst, uint64_t value) {
  char buf[8];
  EncodeBigEndian64(buf, value);
  dst->append(buf, sizeof(buf));
}

inline void PutFixed16(std::vector<uint8_t>* dst, uint16_t value) {
  uint8_t buf[2];
  EncodeFixed16(buf, value);
  dst->insert(dst->end(), buf, buf + sizeof(buf));
}
inline void PutFixed32(std::vector<uint8_t>* dst, uint32_t value) {
  uint8_t buf[4];
  EncodeFixed32(buf, value);
  dst->insert(dst->end(), buf, buf + sizeof(buf));
}
inline void PutFixed64(std::vector<uint8_t>* dst, uint64_t value) {
  uint8_t buf[8];
  EncodeFixed64(buf, value);
  dst->insert(dst->end(), buf, buf + sizeof(buf));
}
// The low `bytes` bytes of `value`. REQUIRES: bytes <= 8.
inline void PutLittleEndian(std::vector<uint8_t>* dst, uint64_t value, size_t bytes) {
  const size_t at = dst->size();
  dst->resize(at + bytes);
  EncodeLittleEndian(dst->data() + at, value, bytes);
}

}  // namespace kvtier

#endif  // KVTIER_COMMON_CODING_H_
