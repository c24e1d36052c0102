// Element types of hot pages and exact conversions between them and binary32.
// All conversions to a narrower type round to nearest, ties to even, and saturate finite values to
// the largest finite value of the target type ("satfinite"); NaN stays NaN. Thread-safe (pure).
#ifndef KVTIER_CODEC_DTYPE_H_
#define KVTIER_CODEC_DTYPE_H_

#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/coding.h"

namespace kvtier::codec {

// Numeric codes are part of the cold-block format (FORMAT.md) and of the JSON layout form.
enum class DType : uint8_t {
  kBf16 = 1,
  kFp16 = 2,
  kFp8E4M3 = 3,
  kFp32 = 4,
  kBytes = 5,  // opaque bytes: only for lossless buffers
};

// Size of one element in bytes (1 for kBytes).
size_t DTypeBytes(DType dtype);
// "bf16", "fp16", "fp8_e4m3", "fp32", "bytes".
absl::string_view DTypeName(DType dtype);
// Inverse of DTypeName; InvalidArgument names the accepted spellings.
absl::StatusOr<DType> ParseDType(absl::string_view name);
// True for the dtypes an NVFP4 codec can quantize (BF16, FP16, FP8 E4M3).
bool IsQuantizable(DType dtype);

inline float Bf16ToFloat(uint16_t bits) { return std::bit_cast<float>(uint32_t{bits} << 16); }

// binary32 -> BF16, round to nearest even, saturating to +-0x1.FEp127.
inline uint16_t FloatToBf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // NaN
  uint32_t rounded = u + 0x7fffu + ((u >> 16) & 1u);
  if ((rounded & 0x7f800000u) == 0x7f800000u) {  // rounded (or was) to infinity: saturate
    return static_cast<uint16_t>(((u >> 16) & 0x8000u) | 0x7f7fu);
  }
  return static_cast<uint16_t>(rounded >> 16);
}

float Fp16ToFloat(uint16_t bits);
// binary32 -> FP16, round to nearest even (gradual underflow), saturating to +-65504.
uint16_t FloatToFp16(float f);
float Fp8E4M3ToFloat(uint8_t bits);

namespace internal {
// Value of an FP8 E4M3 bit pattern, usable in constant expressions (exact: scaling by powers of 2).
constexpr float Fp8E4M3Value(uint8_t bits) {
  const uint32_t exp = (bits >> 3) & 0xfu;
  const uint32_t man = bits & 0x7u;
  if (exp == 15 && man == 7) return std::numeric_limits<float>::quiet_NaN();
  float v = exp == 0 ? static_cast<float>(man) / 512.0f : static_cast<float>(8 + man) / 8.0f;
  for (uint32_t e = 1; e < exp; ++e) v *= 2.0f;  // normal: (1 + man/8) * 2^(exp - 7)
  if (exp != 0) v /= 64.0f;
  return (bits & 0x80u) ? -v : v;
}
struct Fp8E4M3Table {
  float value[256];
  constexpr Fp8E4M3Table() : value() {
    for (int b = 0; b < 256; ++b) value[b] = Fp8E4M3Value(static_cast<uint8_t>(b));
  }
  constexpr float operator[](uint8_t b) const { return value[b]; }
};
inline constexpr Fp8E4M3Table kFp8E4M3Values;
}  // namespace internal
// binary32 -> FP8 E4M3 (OCP, no infinities, max 448), round to nearest even, saturating.
uint8_t FloatToFp8E4M3(float f);

// Loads element `i` of a buffer of `dtype` (BF16, FP16 or FP8 E4M3) as an exact binary32 value.
inline float LoadAsFloat(DType dtype, const uint8_t* base, size_t i) {
  switch (dtype) {
    case DType::kBf16:
      return Bf16ToFloat(DecodeFixed16(base + 2 * i));
    case DType::kFp16:
      return Fp16ToFloat(DecodeFixed16(base + 2 * i));
    default:
      return Fp8E4M3ToFloat(base[i]);
  }
}

// Rounds `f` to `dtype` (BF16, FP16 or FP8 E4M3) and stores it as element `i` (little-endian).
inline void StoreFromFloat(DType dtype, float f, uint8_t* base, size_t i) {
  switch (dtype) {
    case DType::kBf16:
      EncodeFixed16(base + 2 * i, FloatToBf16(f));
      return;
    case DType::kFp16:
      EncodeFixed16(base + 2 * i, FloatToFp16(f));
      return;
    default:
      base[i] = FloatToFp8E4M3(f);
  }
}

// Rounds `f` to `dtype` and back to binary32 (the value a decoder would store).
inline float RoundTo(DType dtype, float f) {
  switch (dtype) {
    case DType::kBf16:
      return Bf16ToFloat(FloatToBf16(f));
    case DType::kFp16:
      return Fp16ToFloat(FloatToFp16(f));
    default:
      return Fp8E4M3ToFloat(FloatToFp8E4M3(f));
  }
}

}  // namespace kvtier::codec

#endif  // KVTIER_CODEC_DTYPE_H_
