// Unit tests of common/coding.h: known byte vectors at every width (little- and big-endian),
// round trips of values with the top bit set at every width, unaligned pointers, char and
// uint8_t buffers, and the appends to std::string and std::vector<uint8_t>.
#include "common/coding.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace kvtier {
namespace {

std::vector<uint8_t> Bytes(const std::string& s) {
  return std::vector<uint8_t>(s.begin(), s.end());
}

TEST(CodingTest, KnownLittleEndianBytes) {
  uint8_t buf[8] = {};
  EncodeFixed16(buf, 0x0102);
  EXPECT_EQ(std::vector<uint8_t>(buf, buf + 2), (std::vector<uint8_t>{0x02, 0x01}));
  EncodeFixed32(buf, 0x01020304u);
  EXPECT_EQ(std::vector<uint8_t>(buf, buf + 4), (std::vector<uint8_t>{0x04, 0x03, 0x02, 0x01}));
  EncodeFixed64(buf, 0x0102030405060708ull);
  EXPECT_EQ(std::vector<uint8_t>(buf, buf + 8),
            (std::vector<uint8_t>{0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01}));

  const uint8_t in[8] = {0xEF, 0xCD, 0xAB, 0x89, 0x67, 0x45, 0x23, 0x01};
  EXPECT_EQ(DecodeFixed16(in), 0xCDEFu);
  EXPECT_EQ(DecodeFixed32(in), 0x89ABCDEFu);
  EXPECT_EQ(DecodeFixed64(in), 0x0123456789ABCDEFull);
}

TEST(CodingTest, KnownBigEndianBytes) {
  uint8_t buf[8] = {};
  EncodeBigEndian32(buf, 0x01020304u);
  EXPECT_EQ(std::vector<uint8_t>(buf, buf + 4), (std::vector<uint8_t>{0x01, 0x02, 0x03, 0x04}));
  EncodeBigEndian64(buf, 0x0102030405060708ull);
  EXPECT_EQ(std::vector<uint8_t>(buf, buf + 8),
            (std::vector<uint8_t>{0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08}));
  const uint8_t in[8] = {0xFE, 0xDC, 0xBA, 0x98, 0x76, 0x54, 0x32, 0x10};
  EXPECT_EQ(DecodeBigEndian32(in), 0xFEDCBA98u);
  EXPECT_EQ(DecodeBigEndian64(in), 0xFEDCBA9876543210ull);
}

// Big-endian keys sort bytewise like the numbers they hold (what the index relies on).
TEST(CodingTest, BigEndianOrderIsNumericOrder) {
  const uint64_t values[] = {
      0,           1, 0xFF, 0x100, uint64_t{1} << 32, 0x7FFFFFFFFFFFFFFFull, 0x8000000000000000ull,
      ~uint64_t{0}};
  std::string previous;
  for (uint64_t v : values) {
    std::string key;
    PutBigEndian64(&key, v);
    ASSERT_EQ(key.size(), 8u);
    EXPECT_LT(previous, key) << v;
    EXPECT_EQ(DecodeBigEndian64(key.data()), v);
    previous = key;
  }
}

TEST(CodingTest, RoundTripsWithTheTopBitSet) {
  const uint64_t values[] = {0,
                             1,
                             0x80,
                             0xFF,
                             0x8000,
                             0xFFFF,
                             0x80000000u,
                             0xFFFFFFFFu,
                             0x8000000000000000ull,
                             0xFFFFFFFFFFFFFFFFull,
                             0x8123456789ABCDEFull,
                             0xDEADBEEFCAFEF00Dull};
  for (uint64_t v : values) {
    uint8_t buf[8];
    const auto v16 = static_cast<uint16_t>(v);
    const auto v32 = static_cast<uint32_t>(v);
    EncodeFixed16(buf, v16);
    EXPECT_EQ(DecodeFixed16(buf), v16);
    EncodeFixed32(buf, v32);
    EXPECT_EQ(DecodeFixed32(buf), v32);
    EncodeFixed64(buf, v);
    EXPECT_EQ(DecodeFixed64(buf), v);
    EncodeBigEndian32(buf, v32);
    EXPECT_EQ(DecodeBigEndian32(buf), v32);
    EncodeBigEndian64(buf, v);
    EXPECT_EQ(DecodeBigEndian64(buf), v);
    for (size_t bytes = 0; bytes <= 8; ++bytes) {
      const uint64_t low = bytes == 8 ? v : v & ((uint64_t{1} << (8 * bytes)) - 1);
      EncodeLittleEndian(buf, v, bytes);
      EXPECT_EQ(DecodeLittleEndian(buf, bytes), low) << bytes << " bytes of " << v;
    }
  }
}

// The variable width writes exactly `bytes` bytes, the same as the fixed width of that size.
TEST(CodingTest, VariableWidthMatchesFixedWidth) {
  const uint64_t v = 0xF1E2D3C4B5A69788ull;
  std::array<uint8_t, 10> fixed{}, variable{};
  for (size_t bytes = 0; bytes <= 8; ++bytes) {
    fixed.fill(0xAA);
    variable.fill(0xAA);
    EncodeLittleEndian(variable.data() + 1, v, bytes);
    for (size_t i = 0; i < bytes; ++i) fixed[1 + i] = static_cast<uint8_t>(v >> (8 * i));
    EXPECT_EQ(fixed, variable) << bytes;
  }
  uint8_t buf[8];
  EncodeFixed16(buf, static_cast<uint16_t>(v));
  EXPECT_EQ(DecodeLittleEndian(buf, 2), v & 0xFFFF);
  EncodeFixed32(buf, static_cast<uint32_t>(v));
  EXPECT_EQ(DecodeLittleEndian(buf, 4), v & 0xFFFFFFFF);
  EncodeFixed64(buf, v);
  EXPECT_EQ(DecodeLittleEndian(buf, 8), v);
}

TEST(CodingTest, UnalignedPointersAndNeighbours) {
  const uint64_t v = 0x8877665544332211ull;
  for (size_t offset = 0; offset < 8; ++offset) {
    alignas(8) uint8_t buf[24];
    std::fill(buf, buf + sizeof(buf), 0x5A);
    EncodeFixed64(buf + offset, v);
    EXPECT_EQ(DecodeFixed64(buf + offset), v);
    EXPECT_EQ(buf[offset], 0x11);
    EXPECT_EQ(buf[offset + 7], 0x88);
    if (offset > 0) {
      EXPECT_EQ(buf[offset - 1], 0x5A);
    }
    EXPECT_EQ(buf[offset + 8], 0x5A);  // nothing written past the field
    EXPECT_EQ(DecodeFixed32(buf + offset + 1), 0x55443322u);
    EXPECT_EQ(DecodeFixed16(buf + offset + 3), 0x5544u);

    EncodeFixed32(buf + offset, 0xA1B2C3D4u);
    EXPECT_EQ(DecodeFixed32(buf + offset), 0xA1B2C3D4u);
    EncodeFixed16(buf + offset, 0xE5F6);
    EXPECT_EQ(DecodeFixed16(buf + offset), 0xE5F6u);
    EncodeBigEndian64(buf + offset, v);
    EXPECT_EQ(buf[offset], 0x88);
    EXPECT_EQ(DecodeBigEndian64(buf + offset), v);
    EXPECT_EQ(DecodeBigEndian32(buf + offset), 0x88776655u);
  }
}

// char buffers (std::string) decode the same as uint8_t buffers, bytes >= 0x80 included: no
// sign extension.
TEST(CodingTest, CharBuffersAreUnsigned) {
  std::string s(9, '\xFF');
  s[0] = '\x80';
  EXPECT_EQ(DecodeFixed16(s.data()), 0xFF80u);
  EXPECT_EQ(DecodeFixed32(s.data() + 1), 0xFFFFFFFFu);
  EXPECT_EQ(DecodeFixed64(s.data()), 0xFFFFFFFFFFFFFF80ull);
  EXPECT_EQ(DecodeBigEndian32(s.data()), 0x80FFFFFFu);
  EXPECT_EQ(DecodeBigEndian64(s.data()), 0x80FFFFFFFFFFFFFFull);
  EncodeFixed16(s.data(), 0x8081);
  EncodeFixed32(s.data() + 2, 0x82838485u);
  EncodeFixed64(s.data() + 1, 0x9091929394959697ull);
  EXPECT_EQ(Bytes(s), (std::vector<uint8_t>{0x81, 0x97, 0x96, 0x95, 0x94, 0x93, 0x92, 0x91, 0x90}));
  EncodeBigEndian64(s.data() + 1, 0x0102030405060708ull);
  EXPECT_EQ(Bytes(s), (std::vector<uint8_t>{0x81, 1, 2, 3, 4, 5, 6, 7, 8}));
  EncodeBigEndian32(s.data() + 5, 0xF0E0D0C0u);
  EXPECT_EQ(Bytes(s), (std::vector<uint8_t>{0x81, 1, 2, 3, 4, 0xF0, 0xE0, 0xD0, 0xC0}));
}

TEST(CodingTest, AppendsToStringAndVector) {
  std::string s = "x";
  PutFixed16(&s, 0xBEEF);
  PutFixed32(&s, 0xDEADBEEFu);
  PutFixed64(&s, 0x8000000000000001ull);
  PutBigEndian64(&s, 0x8000000000000001ull);
  PutBigEndian32(&s, 0x80000002u);
  EXPECT_EQ(Bytes(s), (std::vector<uint8_t>{'x',  0xEF, 0xBE,                       // 16
                                            0xEF, 0xBE, 0xAD, 0xDE,                 // 32
                                            0x01, 0,    0,    0,    0, 0, 0, 0x80,  // 64
                                            0x80, 0,    0,    0,    0, 0, 0, 0x01,  // big-endian 64
                                            0x80, 0,    0,    0x02}));              // big-endian 32

  std::vector<uint8_t> v = {'x'};
  PutFixed16(&v, 0xBEEF);
  PutFixed32(&v, 0xDEADBEEFu);
  PutFixed64(&v, 0x8000000000000001ull);
  PutLittleEndian(&v, 0x8000000000C0FFEEull, 3);
  PutLittleEndian(&v, 0xFF, 0);
  EXPECT_EQ(v, (std::vector<uint8_t>{'x', 0xEF, 0xBE, 0xEF, 0xBE, 0xAD, 0xDE, 0x01, 0, 0, 0, 0, 0,
                                     0, 0x80, 0xEE, 0xFF, 0xC0}));
}

}  // namespace
}  // namespace kvtier
