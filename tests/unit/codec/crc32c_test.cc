// Tests of CRC32C: known-answer vectors (iSCSI / RFC 3720), incremental extension at every split
// point, and agreement of the hardware path (Crc32cExtend) with the portable slicing-by-8 path on
// random lengths and unaligned starts.
#include "codec/crc32c.h"

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace kvtier::codec::internal {
// Defined in codec/crc32c.cc: the table-driven path, whatever the CPU supports.
uint32_t Crc32cExtendPortableForTest(uint32_t crc, const void* data, size_t n);
// The CRC of the bytes behind `crc` followed by n zero bytes, by the combine's multiplication.
uint32_t Crc32cAppendZerosForTest(uint32_t crc, uint64_t n);
}  // namespace kvtier::codec::internal

namespace kvtier::codec {
namespace {

using internal::Crc32cExtendPortableForTest;

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> out(n);
  for (uint8_t& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

TEST(Crc32cTest, CheckValueOfDigits) {
  const std::string digits = "123456789";
  EXPECT_EQ(Crc32c(digits.data(), digits.size()), 0xE3069283u);
  EXPECT_EQ(Crc32cExtendPortableForTest(0, digits.data(), digits.size()), 0xE3069283u);
}

TEST(Crc32cTest, EmptyInputIsZeroAndExtendsNothing) {
  EXPECT_EQ(Crc32c(nullptr, 0), 0u);
  EXPECT_EQ(Crc32cExtend(0xE3069283u, nullptr, 0), 0xE3069283u);
}

TEST(Crc32cTest, Rfc3720Vectors) {
  std::vector<uint8_t> zeros(32, 0x00);
  std::vector<uint8_t> ones(32, 0xFF);
  std::vector<uint8_t> ascending(32);
  std::vector<uint8_t> descending(32);
  for (int i = 0; i < 32; ++i) {
    ascending[i] = static_cast<uint8_t>(i);
    descending[i] = static_cast<uint8_t>(31 - i);
  }
  for (auto* crc : {&Crc32cExtend, &Crc32cExtendPortableForTest}) {
    EXPECT_EQ(crc(0, zeros.data(), zeros.size()), 0x8A9136AAu);
    EXPECT_EQ(crc(0, ones.data(), ones.size()), 0x62A8AB43u);
    EXPECT_EQ(crc(0, ascending.data(), ascending.size()), 0x46DD794Eu);
    EXPECT_EQ(crc(0, descending.data(), descending.size()), 0x113FDB5Cu);
  }
}

TEST(Crc32cTest, ExtendOverEverySplitEqualsOneShot) {
  const std::vector<uint8_t> data = RandomBytes(1000, 1);
  const uint32_t whole = Crc32c(data.data(), data.size());
  for (size_t split = 0; split <= data.size(); ++split) {
    const uint32_t head = Crc32c(data.data(), split);
    EXPECT_EQ(Crc32cExtend(head, data.data() + split, data.size() - split), whole)
        << "split at " << split;
    EXPECT_EQ(Crc32cExtendPortableForTest(Crc32cExtendPortableForTest(0, data.data(), split),
                                          data.data() + split, data.size() - split),
              whole)
        << "portable, split at " << split;
  }
}

TEST(Crc32cTest, DetectsEverySingleBitFlip) {
  std::vector<uint8_t> data = RandomBytes(64, 2);
  const uint32_t good = Crc32c(data.data(), data.size());
  for (size_t bit = 0; bit < data.size() * 8; ++bit) {
    data[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    EXPECT_NE(Crc32c(data.data(), data.size()), good) << "bit " << bit;
    data[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
  }
}

TEST(Crc32cTest, PortablePathMatchesOnRandomLengthsAndUnalignedStarts) {
  const std::vector<uint8_t> data = RandomBytes(4096 + 16, 3);
  std::mt19937 rng(4);
  std::uniform_int_distribution<size_t> length(0, 4096);
  std::uniform_int_distribution<size_t> start(0, 15);
  std::uniform_int_distribution<uint32_t> seed_crc;
  for (int trial = 0; trial < 2000; ++trial) {
    const size_t n = trial <= 64 ? static_cast<size_t>(trial) : length(rng);
    const size_t s = start(rng);
    const uint8_t* p = data.data() + s;
    ASSERT_EQ(Crc32cExtendPortableForTest(0, p, n), Crc32c(p, n))
        << "length " << n << " start " << s;
    const uint32_t prior = seed_crc(rng);
    ASSERT_EQ(Crc32cExtendPortableForTest(prior, p, n), Crc32cExtend(prior, p, n))
        << "length " << n << " start " << s << " prior crc " << prior;
  }
}

// Buffers long enough for the three-stream path (16 KiB and up), at lengths that are and are not
// multiples of 24 and unaligned starts, against the portable path.
TEST(Crc32cTest, ThreeStreamPathMatchesThePortablePath) {
  const std::vector<uint8_t> data = RandomBytes((1u << 21) + 64, 5);
  std::mt19937 rng(6);
  std::uniform_int_distribution<size_t> length(16 * 1024, 1u << 21);
  std::uniform_int_distribution<size_t> start(0, 63);
  std::uniform_int_distribution<uint32_t> seed_crc;
  const std::vector<size_t> edges = {16 * 1024 - 1, 16 * 1024,     16 * 1024 + 1, 16 * 1024 + 23,
                                     24 * 1000,     24 * 1000 + 7, 1331200,       1u << 21};
  for (int trial = 0; trial < 40; ++trial) {
    const size_t n = trial < static_cast<int>(edges.size()) ? edges[trial] : length(rng);
    const size_t s = start(rng);
    const uint8_t* p = data.data() + s;
    const uint32_t prior = trial % 2 == 0 ? 0 : seed_crc(rng);
    ASSERT_EQ(Crc32cExtendPortableForTest(prior, p, n), Crc32cExtend(prior, p, n))
        << "length " << n << " start " << s << " prior crc " << prior;
  }
}

TEST(Crc32cTest, AppendingZerosByMultiplicationEqualsExtendingOverZeros) {
  const std::vector<uint8_t> zeros(100000, 0);
  const std::vector<uint8_t> head = RandomBytes(37, 7);
  const uint32_t crc = Crc32c(head.data(), head.size());
  for (size_t n : {size_t{0}, size_t{1}, size_t{8}, size_t{9}, size_t{4096}, size_t{99999}}) {
    EXPECT_EQ(internal::Crc32cAppendZerosForTest(crc, n),
              Crc32cExtendPortableForTest(crc, zeros.data(), n))
        << n << " zero bytes";
  }
}

}  // namespace
}  // namespace kvtier::codec
