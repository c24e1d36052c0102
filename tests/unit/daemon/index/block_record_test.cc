// Tests of the index encodings (block_record.h): golden bytes of the current formats (and of
// format 1's keys, which the index migrates), round
// trips, key order (one namespace is one contiguous, hash-sorted key range) and rejection of every
// malformed input with DataLoss, never a crash.
#include "daemon/index/block_record.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace kvtier::index {
namespace {

BlockHash RandomHash(std::mt19937_64& rng) {
  BlockHash hash;
  for (uint8_t& byte : hash) byte = static_cast<uint8_t>(rng());
  return hash;
}

BlockRecord RandomRecord(std::mt19937_64& rng) {
  BlockRecord r;
  r.tier = static_cast<Tier>(rng() % kTierCount);
  r.flags = static_cast<uint8_t>(rng());
  r.codec = static_cast<uint8_t>(rng());
  r.device = static_cast<uint16_t>(rng());
  r.offset = rng();
  r.size = static_cast<uint32_t>(rng());
  r.checksum = static_cast<uint32_t>(rng());
  r.parent = RandomHash(rng);
  r.last_access_ms = rng();
  return r;
}

std::string Bytes(std::initializer_list<int> values) {
  std::string out;
  for (int v : values) out.push_back(static_cast<char>(v));
  return out;
}

TEST(TierNameTest, NamesEveryTier) {
  EXPECT_EQ(TierName(Tier::kGpu), "gpu");
  EXPECT_EQ(TierName(Tier::kHost), "host");
  EXPECT_EQ(TierName(Tier::kDisk), "disk");
  EXPECT_EQ(TierName(static_cast<Tier>(3)), "invalid");
}

TEST(BlockKeyTest, GoldenEncoding) {
  BlockKey key;
  key.ns = 0x0102030405060708;
  for (size_t i = 0; i < key.hash.size(); ++i) key.hash[i] = static_cast<uint8_t>(0xa0 + i);
  std::string expected = Bytes({1, 2, 3, 4, 5, 6, 7, 8});
  for (size_t i = 0; i < key.hash.size(); ++i) expected.push_back(static_cast<char>(0xa0 + i));
  EXPECT_EQ(absl::BytesToHexString(EncodeBlockKey(key)), absl::BytesToHexString(expected));
  EXPECT_EQ(EncodeBlockKey(key).size(), kBlockKeyBytes);
}

TEST(BlockKeyTest, LegacyFormat1KeysDecodeWithTheirFourByteId) {
  std::string legacy = Bytes({1, 2, 3, 4});
  for (int i = 0; i < 32; ++i) legacy.push_back(static_cast<char>(0xa0 + i));
  absl::StatusOr<BlockKey> key = DecodeLegacyBlockKey(legacy);
  ASSERT_TRUE(key.ok()) << key.status();
  EXPECT_EQ(key->ns, 0x01020304u);
  EXPECT_EQ(key->hash[31], 0xbf);
  EXPECT_EQ(DecodeBlockKey(legacy).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(DecodeLegacyNamespaceId(Bytes({0, 0, 0, 7})).value(), 7u);
}

TEST(BlockKeyTest, RoundTripsRandomAndExtremeKeys) {
  std::mt19937_64 rng(1);
  std::vector<BlockKey> keys;
  for (NamespaceId ns :
       {NamespaceId{0}, NamespaceId{1}, NamespaceId{255}, NamespaceId{256}, NamespaceId{0x01000000},
        NamespaceId{1} << 32, std::numeric_limits<NamespaceId>::max()}) {
    BlockKey zeros{ns, {}};
    BlockKey ones{ns, {}};
    ones.hash.fill(0xff);
    keys.push_back(zeros);
    keys.push_back(ones);
  }
  for (int i = 0; i < 1000; ++i) keys.push_back({static_cast<NamespaceId>(rng()), RandomHash(rng)});
  for (const BlockKey& key : keys) {
    absl::StatusOr<BlockKey> decoded = DecodeBlockKey(EncodeBlockKey(key));
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(*decoded, key);
  }
}

TEST(BlockKeyTest, EncodedOrderIsNamespaceThenHash) {
  std::mt19937_64 rng(2);
  // Namespaces whose little-endian order differs from their numeric order.
  const std::vector<NamespaceId> namespaces = {
      0, 1, 2, 255, 256, 257, 0x00010000, 0x01000000, 0xfffffffe, 0xffffffff, 1ull << 32, ~0ull};
  std::vector<BlockKey> keys;
  for (int i = 0; i < 2000; ++i) {
    keys.push_back({namespaces[rng() % namespaces.size()], RandomHash(rng)});
  }
  std::vector<BlockKey> by_bytes = keys;
  std::sort(by_bytes.begin(), by_bytes.end(), [](const BlockKey& a, const BlockKey& b) {
    return EncodeBlockKey(a) < EncodeBlockKey(b);
  });
  std::vector<BlockKey> by_fields = keys;
  std::sort(by_fields.begin(), by_fields.end(), [](const BlockKey& a, const BlockKey& b) {
    return std::tie(a.ns, a.hash) < std::tie(b.ns, b.hash);
  });
  ASSERT_EQ(by_bytes.size(), by_fields.size());
  for (size_t i = 0; i < by_bytes.size(); ++i) {
    ASSERT_EQ(by_bytes[i], by_fields[i]) << "position " << i;
  }
  // Hence each namespace is one contiguous run.
  std::vector<NamespaceId> runs;
  for (const BlockKey& key : by_bytes) {
    if (runs.empty() || runs.back() != key.ns) runs.push_back(key.ns);
  }
  std::vector<NamespaceId> unique_runs = runs;
  std::sort(unique_runs.begin(), unique_runs.end());
  EXPECT_TRUE(std::adjacent_find(unique_runs.begin(), unique_runs.end()) == unique_runs.end());
}

TEST(BlockKeyTest, RejectsEveryOtherLength) {
  const std::string valid = EncodeBlockKey({42, {}});
  for (size_t n = 0; n < 2 * kBlockKeyBytes; ++n) {
    if (n == kBlockKeyBytes) continue;
    std::string bytes =
        n < valid.size() ? valid.substr(0, n) : valid + std::string(n - kBlockKeyBytes, 'x');
    absl::StatusOr<BlockKey> key = DecodeBlockKey(bytes);
    ASSERT_EQ(key.status().code(), absl::StatusCode::kDataLoss) << n;
    EXPECT_EQ(key.status().message(), absl::StrCat("block key is ", n, " bytes, expected 40"));
  }
}

TEST(BlockRecordTest, GoldenEncoding) {
  BlockRecord r;
  r.tier = Tier::kDisk;
  r.flags = kBlockFlagDurable | kBlockFlagHasParent;
  r.codec = 3;
  r.device = 0x0102;
  r.offset = 0x0807060504030201ull;
  r.size = 0x0c0b0a09;
  r.checksum = 0x100f0e0d;
  for (size_t i = 0; i < r.parent.size(); ++i) r.parent[i] = static_cast<uint8_t>(0x20 + i);
  r.last_access_ms = 0x4847464544434241ull;
  std::string expected = Bytes({1, 2, 5, 3, 0x02, 0x01, 1,    2,    3,    4,    5,
                                6, 7, 8, 9, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x10});
  for (size_t i = 0; i < r.parent.size(); ++i) expected.push_back(static_cast<char>(0x20 + i));
  expected += Bytes({0x41, 0x42, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48});
  ASSERT_EQ(expected.size(), kBlockRecordBytes);
  EXPECT_EQ(absl::BytesToHexString(EncodeBlockRecord(r)), absl::BytesToHexString(expected));
}

TEST(BlockRecordTest, RoundTripsEveryTierAndFlagCombination) {
  std::mt19937_64 rng(3);
  for (int tier = 0; tier < kTierCount; ++tier) {
    for (int flags = 0; flags < 256; ++flags) {
      BlockRecord r = RandomRecord(rng);
      r.tier = static_cast<Tier>(tier);
      r.flags = static_cast<uint8_t>(flags);
      const std::string bytes = EncodeBlockRecord(r);
      ASSERT_EQ(bytes.size(), kBlockRecordBytes);
      EXPECT_EQ(static_cast<uint8_t>(bytes[0]), kBlockRecordVersion);
      absl::StatusOr<BlockRecord> decoded = DecodeBlockRecord(bytes);
      ASSERT_TRUE(decoded.ok()) << decoded.status();
      EXPECT_EQ(*decoded, r) << "tier " << tier << " flags " << flags;
    }
  }
}

TEST(BlockRecordTest, RoundTripsRandomAndExtremeValues) {
  std::mt19937_64 rng(4);
  std::vector<BlockRecord> records;
  BlockRecord zeros;
  zeros.tier = Tier::kGpu;
  records.push_back(zeros);
  BlockRecord max;
  max.tier = Tier::kDisk;
  max.flags = max.codec = 0xff;
  max.device = std::numeric_limits<uint16_t>::max();
  max.offset = std::numeric_limits<uint64_t>::max();
  max.size = max.checksum = std::numeric_limits<uint32_t>::max();
  max.parent.fill(0xff);
  max.last_access_ms = std::numeric_limits<uint64_t>::max();
  records.push_back(max);
  for (int i = 0; i < 10000; ++i) records.push_back(RandomRecord(rng));
  for (const BlockRecord& r : records) {
    absl::StatusOr<BlockRecord> decoded = DecodeBlockRecord(EncodeBlockRecord(r));
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    ASSERT_EQ(*decoded, r);
  }
}

TEST(BlockRecordTest, RejectsEveryTruncationAndExtension) {
  std::mt19937_64 rng(5);
  const std::string valid = EncodeBlockRecord(RandomRecord(rng));
  absl::StatusOr<BlockRecord> empty = DecodeBlockRecord("");
  ASSERT_EQ(empty.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(empty.status().message().find("empty"), absl::string_view::npos) << empty.status();
  for (size_t n = 1; n < 2 * kBlockRecordBytes; ++n) {
    if (n == kBlockRecordBytes) continue;
    std::string bytes =
        n < valid.size() ? valid.substr(0, n) : valid + std::string(n - valid.size(), '\0');
    absl::StatusOr<BlockRecord> record = DecodeBlockRecord(bytes);
    ASSERT_EQ(record.status().code(), absl::StatusCode::kDataLoss) << n;
    EXPECT_EQ(record.status().message(),
              absl::StrCat("block record of version 1 is ", n, " bytes, expected 62"));
  }
}

TEST(BlockRecordTest, RejectsEveryOtherVersion) {
  std::mt19937_64 rng(6);
  std::string bytes = EncodeBlockRecord(RandomRecord(rng));
  for (int version = 0; version < 256; ++version) {
    if (version == kBlockRecordVersion) continue;
    bytes[0] = static_cast<char>(version);
    absl::StatusOr<BlockRecord> record = DecodeBlockRecord(bytes);
    ASSERT_EQ(record.status().code(), absl::StatusCode::kDataLoss) << version;
    EXPECT_NE(record.status().message().find(absl::StrCat("format version ", version, ",")),
              absl::string_view::npos)
        << record.status();
    // A short record of another version still complains about the version.
    EXPECT_EQ(DecodeBlockRecord(bytes.substr(0, 10)).status().code(), absl::StatusCode::kDataLoss);
  }
}

TEST(BlockRecordTest, RejectsEveryTierOutOfRange) {
  std::mt19937_64 rng(7);
  std::string bytes = EncodeBlockRecord(RandomRecord(rng));
  for (int tier = kTierCount; tier < 256; ++tier) {
    bytes[1] = static_cast<char>(tier);
    absl::StatusOr<BlockRecord> record = DecodeBlockRecord(bytes);
    ASSERT_EQ(record.status().code(), absl::StatusCode::kDataLoss) << tier;
    EXPECT_EQ(record.status().message(),
              absl::StrCat("block record tier value ", tier, " out of range [0, 3)"));
  }
}

TEST(NamespaceIdTest, GoldenRoundTripAndOrder) {
  EXPECT_EQ(EncodeNamespaceId(0x0a0b0c0d), Bytes({0, 0, 0, 0, 0x0a, 0x0b, 0x0c, 0x0d}));
  std::mt19937_64 rng(8);
  for (int i = 0; i < 1000; ++i) {
    const NamespaceId a = static_cast<NamespaceId>(rng());
    const NamespaceId b = static_cast<NamespaceId>(rng());
    absl::StatusOr<NamespaceId> decoded = DecodeNamespaceId(EncodeNamespaceId(a));
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(*decoded, a);
    EXPECT_EQ(a < b, EncodeNamespaceId(a) < EncodeNamespaceId(b));
  }
}

TEST(NamespaceIdTest, RejectsEveryOtherLength) {
  for (size_t n = 0; n < 16; ++n) {
    if (n == 8) continue;
    absl::StatusOr<NamespaceId> id = DecodeNamespaceId(std::string(n, '\x01'));
    ASSERT_EQ(id.status().code(), absl::StatusCode::kDataLoss) << n;
    EXPECT_EQ(id.status().message(), absl::StrCat("namespace id is ", n, " bytes, expected 8"));
  }
}

// Random inputs, half of them shaped like a record (right length and version) to reach the field
// decoding: each either decodes and re-encodes to itself, or is DataLoss.
TEST(DecodersTest, RandomBytesNeverCrash) {
  std::mt19937_64 rng(9);
  int records_decoded = 0;
  for (int i = 0; i < 200000; ++i) {
    std::string bytes(rng() % 80, '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    if (i % 2 == 0) {
      bytes.resize(kBlockRecordBytes);
      bytes[0] = static_cast<char>(kBlockRecordVersion);
    }
    absl::StatusOr<BlockRecord> record = DecodeBlockRecord(bytes);
    if (record.ok()) {
      ++records_decoded;
      ASSERT_EQ(EncodeBlockRecord(*record), bytes);
    } else {
      ASSERT_EQ(record.status().code(), absl::StatusCode::kDataLoss);
    }
    absl::StatusOr<BlockKey> key = DecodeBlockKey(bytes);
    if (key.ok()) {
      ASSERT_EQ(EncodeBlockKey(*key), bytes);
    } else {
      ASSERT_EQ(key.status().code(), absl::StatusCode::kDataLoss);
    }
    absl::StatusOr<NamespaceId> id = DecodeNamespaceId(bytes);
    if (id.ok()) {
      ASSERT_EQ(EncodeNamespaceId(*id), bytes);
    } else {
      ASSERT_EQ(id.status().code(), absl::StatusCode::kDataLoss);
    }
  }
  // About 3/256 of the record-shaped inputs have a valid tier byte.
  EXPECT_GT(records_decoded, 500);
}

}  // namespace
}  // namespace kvtier::index
