// Sha256 and HmacSha256 against the published test vectors (FIPS 180-4's examples, RFC 4231), and
// LowerHex's digits.
#include "common/digest.h"

#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace kvtier {
namespace {

TEST(Sha256Test, MatchesTheStandardsExamples) {
  EXPECT_EQ(LowerHex(Sha256("")),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(LowerHex(Sha256("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(LowerHex(Sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(Sha256Test, HashesEveryByteOfTheInput) {
  // Embedded NULs and bytes above 0x7f count: the input is a byte string, not a C string.
  const std::string with_nul("a\0b", 3);
  EXPECT_NE(Sha256(with_nul), Sha256("a"));
  EXPECT_NE(Sha256(std::string("\xff", 1)), Sha256(std::string("\x7f", 1)));
}

TEST(HmacSha256Test, MatchesRfc4231) {
  // Test case 1: a 20-byte key of 0x0b.
  EXPECT_EQ(LowerHex(HmacSha256(std::string(20, '\x0b'), "Hi There")),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  // Test case 2: a key shorter than the block.
  EXPECT_EQ(LowerHex(HmacSha256("Jefe", "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // Test case 6: a 131-byte key, longer than the block, which HMAC hashes first.
  EXPECT_EQ(LowerHex(HmacSha256(std::string(131, '\xaa'),
                                "Test Using Larger Than Block-Size Key - Hash Key First")),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST(HmacSha256Test, TheKeyMatters) {
  EXPECT_NE(HmacSha256("", "data"), HmacSha256("k", "data"));
  EXPECT_NE(HmacSha256("k", "data"), Sha256("data"));
}

TEST(LowerHexTest, TwoLowerCaseDigitsPerByte) {
  EXPECT_EQ(LowerHex(absl::string_view()), "");
  EXPECT_EQ(LowerHex(std::string("\x00\x0f\xa0\xff", 4)), "000fa0ff");
  const std::vector<uint8_t> bytes = {0xde, 0xad, 0xBE, 0xEF};
  EXPECT_EQ(LowerHex(absl::MakeConstSpan(bytes)), "deadbeef");
}

}  // namespace
}  // namespace kvtier
