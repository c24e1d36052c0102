// Exhaustive tests of the element-type conversions of codec/dtype.h: every FP16, BF16 and FP8 E4M3
// bit pattern decodes to its IEEE/OCP value and encodes back to itself; narrowing rounds every
// midpoint between adjacent finite values to the even neighbour and everything else to the nearer
// one; out-of-range values saturate; subnormals, signed zeros and NaN behave as documented.
#include "codec/dtype.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace kvtier::codec {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// One narrow format seen through the functions under test, plus an independent decoder.
struct Format {
  std::string name;
  int exp_bits;
  int man_bits;
  int bias;
  uint32_t sign_bit;
  uint32_t max_finite;  // largest finite positive code
  std::function<float(uint32_t)> to_float;
  std::function<uint32_t(float)> from_float;
  // True when the all-ones exponent encodes Inf/NaN (IEEE); false for E4M3 (only S.1111.111 is
  // NaN).
  bool ieee_specials;
};

Format Fp16() {
  return {"fp16",
          5,
          10,
          15,
          0x8000,
          0x7bff,
          [](uint32_t b) { return Fp16ToFloat(static_cast<uint16_t>(b)); },
          [](float f) { return uint32_t{FloatToFp16(f)}; },
          true};
}
Format Bf16() {
  return {"bf16",
          8,
          7,
          127,
          0x8000,
          0x7f7f,
          [](uint32_t b) { return Bf16ToFloat(static_cast<uint16_t>(b)); },
          [](float f) { return uint32_t{FloatToBf16(f)}; },
          true};
}
Format Fp8E4M3() {
  return {"fp8_e4m3",
          4,
          3,
          7,
          0x80,
          0x7e,
          [](uint32_t b) { return Fp8E4M3ToFloat(static_cast<uint8_t>(b)); },
          [](float f) { return uint32_t{FloatToFp8E4M3(f)}; },
          false};
}

// Names the format in failure messages instead of dumping the struct's bytes.
void PrintTo(const Format& f, std::ostream* os) { *os << f.name; }

uint32_t CodeCount(const Format& f) { return f.sign_bit << 1; }

bool IsNanCode(const Format& f, uint32_t b) {
  const uint32_t exp = (b >> f.man_bits) & ((1u << f.exp_bits) - 1);
  const uint32_t man = b & ((1u << f.man_bits) - 1);
  const bool exp_all_ones = exp == (1u << f.exp_bits) - 1;
  if (f.ieee_specials) return exp_all_ones && man != 0;
  return exp_all_ones && man == (1u << f.man_bits) - 1;
}
bool IsInfCode(const Format& f, uint32_t b) {
  const uint32_t exp = (b >> f.man_bits) & ((1u << f.exp_bits) - 1);
  const uint32_t man = b & ((1u << f.man_bits) - 1);
  return f.ieee_specials && exp == (1u << f.exp_bits) - 1 && man == 0;
}

// The value of a finite code, computed from the definition of the format (in double).
double ReferenceValue(const Format& f, uint32_t b) {
  const uint32_t exp = (b >> f.man_bits) & ((1u << f.exp_bits) - 1);
  const uint32_t man = b & ((1u << f.man_bits) - 1);
  const double frac = static_cast<double>(man) / static_cast<double>(1u << f.man_bits);
  const double magnitude = exp == 0 ? std::ldexp(frac, 1 - f.bias)
                                    : std::ldexp(1.0 + frac, static_cast<int>(exp) - f.bias);
  return (b & f.sign_bit) ? -magnitude : magnitude;
}

class NarrowFormatTest : public testing::TestWithParam<Format> {};

TEST_P(NarrowFormatTest, EveryCodeDecodesToItsValue) {
  const Format& f = GetParam();
  for (uint32_t b = 0; b < CodeCount(f); ++b) {
    const float v = f.to_float(b);
    if (IsNanCode(f, b)) {
      EXPECT_TRUE(std::isnan(v)) << f.name << " code 0x" << std::hex << b;
    } else if (IsInfCode(f, b)) {
      EXPECT_EQ(v, (b & f.sign_bit) ? -kInf : kInf) << f.name << " code 0x" << std::hex << b;
    } else {
      ASSERT_EQ(static_cast<double>(v), ReferenceValue(f, b))
          << f.name << " code 0x" << std::hex << b;
      EXPECT_EQ(std::signbit(v), (b & f.sign_bit) != 0) << f.name << " code 0x" << std::hex << b;
    }
  }
}

TEST_P(NarrowFormatTest, EveryFiniteCodeRoundTripsThroughFloat) {
  const Format& f = GetParam();
  int finite = 0;
  for (uint32_t b = 0; b < CodeCount(f); ++b) {
    if (IsNanCode(f, b) || IsInfCode(f, b)) continue;
    ASSERT_EQ(f.from_float(f.to_float(b)), b) << f.name << " code 0x" << std::hex << b;
    ++finite;
  }
  EXPECT_GT(finite, 0);
}

TEST_P(NarrowFormatTest, EveryNanCodeStaysNan) {
  const Format& f = GetParam();
  int nans = 0;
  for (uint32_t b = 0; b < CodeCount(f); ++b) {
    if (!IsNanCode(f, b)) continue;
    const uint32_t back = f.from_float(f.to_float(b));
    EXPECT_TRUE(IsNanCode(f, back))
        << f.name << " code 0x" << std::hex << b << " came back as 0x" << back;
    ++nans;
  }
  EXPECT_GT(nans, 0);
}

TEST_P(NarrowFormatTest, FloatNansOfAnyPayloadBecomeNan) {
  const Format& f = GetParam();
  for (uint32_t bits : {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu,
                        0x7f802000u, 0x7fa00000u}) {
    const uint32_t code = f.from_float(std::bit_cast<float>(bits));
    EXPECT_TRUE(IsNanCode(f, code))
        << f.name << " float 0x" << std::hex << bits << " gave 0x" << code;
  }
}

// Midpoints between adjacent finite codes round to the even code; a float just above or below a
// midpoint rounds to the nearer code. Covers subnormals (b = 0 is the midpoint 0 .. smallest
// subnormal, which rounds to zero) and both signs.
TEST_P(NarrowFormatTest, RoundsToNearestTiesToEven) {
  const Format& f = GetParam();
  for (uint32_t b = 0; b < f.max_finite; ++b) {
    const double lo = ReferenceValue(f, b);
    const double hi = ReferenceValue(f, b + 1);
    const float mid = static_cast<float>((lo + hi) / 2);
    ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2) << "midpoint not exact in binary32";
    const uint32_t even = (b % 2 == 0) ? b : b + 1;
    const float above = std::nextafter(mid, kInf);
    const float below = std::nextafter(mid, 0.0f);
    ASSERT_EQ(f.from_float(mid), even)
        << f.name << " midpoint " << mid << " after 0x" << std::hex << b;
    ASSERT_EQ(f.from_float(-mid), even | f.sign_bit) << f.name << " midpoint " << -mid;
    ASSERT_EQ(f.from_float(above), b + 1) << f.name << " just above midpoint " << mid;
    ASSERT_EQ(f.from_float(below), b) << f.name << " just below midpoint " << mid;
    ASSERT_EQ(f.from_float(-above), (b + 1) | f.sign_bit) << f.name << " " << -above;
    ASSERT_EQ(f.from_float(-below), b | f.sign_bit) << f.name << " " << -below;
  }
}

TEST_P(NarrowFormatTest, SignOfZeroIsPreserved) {
  const Format& f = GetParam();
  EXPECT_EQ(f.from_float(0.0f), 0u);
  EXPECT_EQ(f.from_float(-0.0f), f.sign_bit);
  EXPECT_TRUE(std::signbit(f.to_float(f.sign_bit)));
  EXPECT_FALSE(std::signbit(f.to_float(0)));
  // A negative value too small for the format underflows to negative zero.
  const float tiny = std::numeric_limits<float>::denorm_min();
  EXPECT_EQ(f.from_float(tiny), 0u);
  EXPECT_EQ(f.from_float(-tiny), f.sign_bit);
}

TEST_P(NarrowFormatTest, SmallestSubnormal) {
  const Format& f = GetParam();
  const double smallest = std::ldexp(1.0, 1 - f.bias - f.man_bits);
  EXPECT_EQ(static_cast<double>(f.to_float(1)), smallest);
  EXPECT_EQ(f.from_float(static_cast<float>(smallest)), 1u);
  EXPECT_EQ(f.from_float(static_cast<float>(-smallest)), 1u | f.sign_bit);
  // Halfway to the smallest subnormal is a tie with zero (even): rounds to zero.
  const float half = static_cast<float>(smallest / 2);
  EXPECT_EQ(f.from_float(half), 0u);
  EXPECT_EQ(f.from_float(-half), f.sign_bit);
  EXPECT_EQ(f.from_float(std::nextafter(half, kInf)), 1u);
  // 1.5x the smallest subnormal is a tie between codes 1 and 2: rounds to 2.
  EXPECT_EQ(f.from_float(static_cast<float>(smallest * 1.5)), 2u);
  // The largest subnormal and the smallest normal.
  const uint32_t smallest_normal = 1u << f.man_bits;
  EXPECT_EQ(static_cast<double>(f.to_float(smallest_normal)), std::ldexp(1.0, 1 - f.bias));
  EXPECT_EQ(f.from_float(f.to_float(smallest_normal - 1)), smallest_normal - 1);
}

TEST_P(NarrowFormatTest, InfinitySaturatesToLargestFinite) {
  const Format& f = GetParam();
  EXPECT_EQ(f.from_float(kInf), f.max_finite);
  EXPECT_EQ(f.from_float(-kInf), f.max_finite | f.sign_bit);
  EXPECT_EQ(f.from_float(std::numeric_limits<float>::max()), f.max_finite);
  EXPECT_EQ(f.from_float(std::numeric_limits<float>::lowest()), f.max_finite | f.sign_bit);
}

INSTANTIATE_TEST_SUITE_P(AllFormats, NarrowFormatTest, testing::Values(Fp16(), Bf16(), Fp8E4M3()),
                         [](const testing::TestParamInfo<Format>& info) {
                           return info.param.name;
                         });

TEST(Fp16Test, SaturatesFrom65520Up) {
  EXPECT_EQ(Fp16ToFloat(0x7bff), 65504.0f);
  EXPECT_EQ(FloatToFp16(65504.0f), 0x7bff);
  // 65520 is the midpoint between 65504 and 65536 (which would be infinity): saturates.
  EXPECT_EQ(FloatToFp16(65520.0f), 0x7bff);
  EXPECT_EQ(FloatToFp16(std::nextafter(65520.0f, 0.0f)), 0x7bff);
  EXPECT_EQ(FloatToFp16(std::nextafter(65520.0f, kInf)), 0x7bff);
  EXPECT_EQ(FloatToFp16(65536.0f), 0x7bff);
  EXPECT_EQ(FloatToFp16(1e10f), 0x7bff);
  EXPECT_EQ(FloatToFp16(-65520.0f), 0xfbff);
  EXPECT_EQ(FloatToFp16(-1e30f), 0xfbff);
}

TEST(Bf16Test, OverflowSaturatesToLargestFinite) {
  EXPECT_EQ(Bf16ToFloat(0x7f7f), std::ldexp(255.0f / 128.0f, 127));
  // Midpoint between the largest finite BF16 (0x1.FEp127) and 2^128: saturates instead of Inf.
  const float midpoint = std::ldexp(511.0f / 256.0f, 127);
  EXPECT_EQ(FloatToBf16(midpoint), 0x7f7f);
  EXPECT_EQ(FloatToBf16(std::nextafter(midpoint, 0.0f)), 0x7f7f);
  EXPECT_EQ(FloatToBf16(std::nextafter(midpoint, kInf)), 0x7f7f);
  EXPECT_EQ(FloatToBf16(-midpoint), 0xff7f);
}

TEST(Bf16Test, MatchesTruncationWhenLowBitsAreZero) {
  // Every binary32 whose low 16 bits are zero is a BF16 value: conversion is exact.
  for (uint32_t hi = 0; hi < 0x10000; ++hi) {
    if ((hi & 0x7f80) == 0x7f80) continue;  // Inf / NaN
    const float f = std::bit_cast<float>(hi << 16);
    ASSERT_EQ(FloatToBf16(f), hi) << std::hex << hi;
  }
}

TEST(Fp8E4M3Test, SaturatesFrom448Up) {
  EXPECT_EQ(Fp8E4M3ToFloat(0x7e), 448.0f);
  EXPECT_EQ(FloatToFp8E4M3(448.0f), 0x7e);
  EXPECT_EQ(FloatToFp8E4M3(std::nextafter(448.0f, kInf)), 0x7e);
  EXPECT_EQ(FloatToFp8E4M3(464.0f), 0x7e);  // midpoint to the (nonexistent) 480
  EXPECT_EQ(FloatToFp8E4M3(480.0f), 0x7e);
  EXPECT_EQ(FloatToFp8E4M3(1e6f), 0x7e);
  EXPECT_EQ(FloatToFp8E4M3(-448.0f), 0xfe);
  EXPECT_EQ(FloatToFp8E4M3(-500.0f), 0xfe);
  // Just below 448 still rounds to 448, not to 416.
  EXPECT_EQ(FloatToFp8E4M3(std::nextafter(448.0f, 0.0f)), 0x7e);
  EXPECT_EQ(FloatToFp8E4M3(433.0f), 0x7e);
  EXPECT_EQ(FloatToFp8E4M3(431.0f), 0x7d);
}

TEST(Fp8E4M3Test, HasNoInfinity) {
  EXPECT_EQ(Fp8E4M3ToFloat(0x78), 256.0f);  // S.1111.000 is a normal number in E4M3
  EXPECT_TRUE(std::isnan(Fp8E4M3ToFloat(0x7f)));
  EXPECT_TRUE(std::isnan(Fp8E4M3ToFloat(0xff)));
}

TEST(LoadStoreTest, ElementsAreLittleEndian) {
  uint8_t buf[4] = {0, 0, 0, 0};
  StoreFromFloat(DType::kBf16, 1.0f, buf, 1);
  EXPECT_EQ(buf[2], 0x80);
  EXPECT_EQ(buf[3], 0x3f);
  EXPECT_EQ(LoadAsFloat(DType::kBf16, buf, 1), 1.0f);
  StoreFromFloat(DType::kFp16, -2.0f, buf, 0);
  EXPECT_EQ(buf[0], 0x00);
  EXPECT_EQ(buf[1], 0xc0);
  EXPECT_EQ(LoadAsFloat(DType::kFp16, buf, 0), -2.0f);
  StoreFromFloat(DType::kFp8E4M3, 0.5f, buf, 3);
  EXPECT_EQ(buf[3], 0x30);
  EXPECT_EQ(LoadAsFloat(DType::kFp8E4M3, buf, 3), 0.5f);
}

TEST(LoadStoreTest, RoundToMatchesConversions) {
  EXPECT_EQ(RoundTo(DType::kBf16, 1.00390625f), 1.0f);     // 1 + 2^-8: tie, to even
  EXPECT_EQ(RoundTo(DType::kFp16, 1.00048828125f), 1.0f);  // 1 + 2^-11: tie, to even
  EXPECT_EQ(RoundTo(DType::kFp8E4M3, 1.0625f), 1.0f);      // 1 + 2^-4: tie, to even
  EXPECT_EQ(RoundTo(DType::kFp8E4M3, 1.1875f), 1.25f);     // 1 + 3*2^-4: tie, to even
  EXPECT_EQ(RoundTo(DType::kFp16, 1e6f), 65504.0f);
}

TEST(DTypeTest, NamesRoundTrip) {
  for (DType d : {DType::kBf16, DType::kFp16, DType::kFp8E4M3, DType::kFp32, DType::kBytes}) {
    absl::StatusOr<DType> parsed = ParseDType(DTypeName(d));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, d) << DTypeName(d);
  }
  EXPECT_EQ(DTypeName(DType::kBf16), "bf16");
  EXPECT_EQ(DTypeName(DType::kFp16), "fp16");
  EXPECT_EQ(DTypeName(DType::kFp8E4M3), "fp8_e4m3");
  EXPECT_EQ(DTypeName(DType::kFp32), "fp32");
  EXPECT_EQ(DTypeName(DType::kBytes), "bytes");
}

TEST(DTypeTest, UnknownNameIsInvalidArgumentListingValidNames) {
  for (const char* bad : {"int8", "", "fp8", "bfloat16"}) {
    absl::StatusOr<DType> parsed = ParseDType(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string message(parsed.status().message());
    EXPECT_NE(message.find(absl::StrCat("'", bad, "'")), std::string::npos) << message;
    for (const char* valid : {"bf16", "fp16", "fp8_e4m3", "fp32", "bytes"}) {
      EXPECT_NE(message.find(valid), std::string::npos) << message << " lacks " << valid;
    }
  }
}

TEST(DTypeTest, SizesAndQuantizability) {
  EXPECT_EQ(DTypeBytes(DType::kBf16), 2u);
  EXPECT_EQ(DTypeBytes(DType::kFp16), 2u);
  EXPECT_EQ(DTypeBytes(DType::kFp8E4M3), 1u);
  EXPECT_EQ(DTypeBytes(DType::kFp32), 4u);
  EXPECT_EQ(DTypeBytes(DType::kBytes), 1u);
  EXPECT_TRUE(IsQuantizable(DType::kBf16));
  EXPECT_TRUE(IsQuantizable(DType::kFp16));
  EXPECT_TRUE(IsQuantizable(DType::kFp8E4M3));
  EXPECT_FALSE(IsQuantizable(DType::kFp32));
  EXPECT_FALSE(IsQuantizable(DType::kBytes));
}

}  // namespace
}  // namespace kvtier::codec
