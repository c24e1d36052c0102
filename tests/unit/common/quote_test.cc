// Quoted: short values come back whole and escaped; long ones are cut at kMaxQuotedBytes and say
// their length, so a message never grows with the value it names.
#include "common/quote.h"

#include <string>

#include "gtest/gtest.h"

namespace kvtier {
namespace {

TEST(QuotedTest, ShortValuesAreQuotedWhole) {
  EXPECT_EQ(Quoted("k.0"), "'k.0'");
  EXPECT_EQ(Quoted(""), "''");
  EXPECT_EQ(Quoted(std::string(kMaxQuotedBytes, 'a')),
            "'" + std::string(kMaxQuotedBytes, 'a') + "'");
}

TEST(QuotedTest, QuotesBackslashesAndBinaryBytesAreEscaped) {
  EXPECT_EQ(Quoted(std::string("a'b\\c\0-\xff", 8)), "'a\\'b\\\\c\\x00-\\xff'");
  EXPECT_EQ(Quoted("line\nbreak"), "'line\\nbreak'");
}

TEST(QuotedTest, LongValuesAreCutAndSayTheirLength) {
  const std::string mib(1 << 20, 'e');
  const std::string quoted = Quoted(mib);
  EXPECT_EQ(quoted, "'" + std::string(kMaxQuotedBytes, 'e') + "'... (1048576 bytes)");
  EXPECT_EQ(Quoted(std::string(kMaxQuotedBytes + 1, 'x')),
            "'" + std::string(kMaxQuotedBytes, 'x') + "'... (65 bytes)");
}

TEST(QuotedTest, EscapingAlwaysComesFromAtMostTheFirstBytes) {
  // Binary bytes escape to four characters each; the cut is by input bytes, so the result stays
  // bounded (4 * kMaxQuotedBytes plus the quotes and the length).
  const std::string binary(10000, '\x01');
  EXPECT_LE(Quoted(binary).size(), 4 * kMaxQuotedBytes + 32);
}

}  // namespace
}  // namespace kvtier
