// Exact conversions between binary32 and the narrow element types of hot pages.
// Narrowing conversions implement IEEE round-to-nearest-even with gradual underflow and saturate
// to the largest finite value; they are the reference the GPU kernels must match bit for bit.
#include "codec/dtype.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/quote.h"

namespace kvtier::codec {

size_t DTypeBytes(DType dtype) {
  switch (dtype) {
    case DType::kBf16:
    case DType::kFp16:
      return 2;
    case DType::kFp32:
      return 4;
    case DType::kFp8E4M3:
    case DType::kBytes:
      return 1;
  }
  return 0;
}

absl::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kBf16:
      return "bf16";
    case DType::kFp16:
      return "fp16";
    case DType::kFp8E4M3:
      return "fp8_e4m3";
    case DType::kFp32:
      return "fp32";
    case DType::kBytes:
      return "bytes";
  }
  return "unknown";
}

absl::StatusOr<DType> ParseDType(absl::string_view name) {
  for (DType d : {DType::kBf16, DType::kFp16, DType::kFp8E4M3, DType::kFp32, DType::kBytes}) {
    if (name == DTypeName(d)) return d;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown dtype ", Quoted(name), " (expected bf16, fp16, fp8_e4m3, fp32 or bytes)"));
}

bool IsQuantizable(DType dtype) {
  return dtype == DType::kBf16 || dtype == DType::kFp16 || dtype == DType::kFp8E4M3;
}

float Fp16ToFloat(uint16_t bits) {
  const uint32_t sign = uint32_t{bits & 0x8000u} << 16;
  const uint32_t exp = (bits >> 10) & 0x1fu;
  const uint32_t man = bits & 0x3ffu;
  float magnitude;
  if (exp == 0) {
    magnitude = std::ldexp(static_cast<float>(man), -24);  // exact
  } else if (exp == 31) {
    magnitude = man == 0 ? INFINITY : NAN;
  } else {
    magnitude = std::bit_cast<float>(((exp + 112u) << 23) | (man << 13));
  }
  return std::bit_cast<float>(std::bit_cast<uint32_t>(magnitude) | sign);
}

uint16_t FloatToFp16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u;                // NaN
  if (a >= 0x477ff000u) return sign | 0x7bffu;               // >= 65520 rounds past 65504: saturate
  if (a < 0x38800000u) {                                     // below 2^-14: FP16 subnormal or zero
    const float t = std::bit_cast<float>(a) * 16777216.0f;   // * 2^24, exact
    return sign | static_cast<uint16_t>(std::nearbyint(t));  // ties to even (default mode)
  }
  uint32_t result = ((((a >> 23) - 112u) << 10) | ((a >> 13) & 0x3ffu));
  const uint32_t rem = a & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (result & 1u))) ++result;
  return sign | static_cast<uint16_t>(result);
}

float Fp8E4M3ToFloat(uint8_t bits) { return internal::kFp8E4M3Values[bits]; }

uint8_t FloatToFp8E4M3(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7fu;            // NaN
  if (a >= 0x43e00000u) return sign | 0x7eu;           // >= 448 (and infinity): saturate to 448
  if (a < 0x3c800000u) {                               // below 2^-6: subnormal or zero
    const float t = std::bit_cast<float>(a) * 512.0f;  // * 2^9, exact
    return sign | static_cast<uint8_t>(std::nearbyint(t));
  }
  uint32_t result = ((((a >> 23) - 120u) << 3) | ((a >> 20) & 0x7u));
  const uint32_t rem = a & 0xfffffu;
  if (rem > 0x80000u || (rem == 0x80000u && (result & 1u))) ++result;
  if (result > 0x7eu) result = 0x7eu;  // 448 < x < 464 can round up to 480: saturate
  return sign | static_cast<uint8_t>(result);
}

}  // namespace kvtier::codec
