// The KV-events batch encoding against test vectors that Python's msgpack (an independent
// implementation) produced from the protocol's description, the hash reduction and the media.
#include "daemon/kvevents/kv_event_encoding.h"

#include "absl/strings/escaping.h"
#include "gtest/gtest.h"

namespace kvtier::kvevents {
namespace {

// msgpack.packb([1.5, [["BlockStored", [1, 2**64-1], None, [], 16, None, "CPU", None, None, None,
// None, None], ["BlockRemoved", [300], "STORAGE", None], ["AllBlocksCleared"]], None])
constexpr const char* kArrayVector =
    "93cb3ff8000000000000939cab426c6f636b53746f7265649201cfffffffffffffffffc09010c0a3435055c0c0c0c0"
    "c094ac426c6f636b52656d6f76656491cd012ca753544f52414745c091b0416c6c426c6f636b73436c6561726564c"
    "0";
// The same events as maps, nil fields left out: {"type": "BlockStored", "block_hashes": [1,
// 2**64-1], "token_ids": [], "block_size": 16, "medium": "CPU"}, {"type": "BlockRemoved",
// "block_hashes": [300], "medium": "STORAGE"}, {"type": "AllBlocksCleared"}.
constexpr const char* kMapVector =
    "93cb3ff80000000000009385a474797065ab426c6f636b53746f726564ac626c6f636b5f6861736865739201cfffff"
    "ffffffffffffa9746f6b656e5f69647390aa626c6f636b5f73697a6510a66d656469756da343505583a474797065ac"
    "426c6f636b52656d6f766564ac626c6f636b5f68617368657391cd012ca66d656469756da753544f5241474581a474"
    "797065b0416c6c426c6f636b73436c6561726564c0";

std::vector<KvEvent> VectorEvents() {
  KvEvent stored;
  stored.kind = KvEventKind::kBlockStored;
  stored.block_hashes = {1, UINT64_MAX};
  stored.block_size = 16;
  stored.medium = "CPU";
  KvEvent removed;
  removed.kind = KvEventKind::kBlockRemoved;
  removed.block_hashes = {300};
  removed.medium = "STORAGE";
  KvEvent cleared;
  cleared.kind = KvEventKind::kAllBlocksCleared;
  return {stored, removed, cleared};
}

TEST(KvEventEncodingTest, ArrayFormMatchesTheTestVector) {
  EXPECT_EQ(absl::BytesToHexString(
                EncodeKvEventBatch(1.5, VectorEvents(), std::nullopt, KvEventEncoding::kArray)),
            kArrayVector);
}

TEST(KvEventEncodingTest, MapFormMatchesTheTestVector) {
  EXPECT_EQ(absl::BytesToHexString(
                EncodeKvEventBatch(1.5, VectorEvents(), std::nullopt, KvEventEncoding::kMap)),
            kMapVector);
}

TEST(KvEventEncodingTest, DataParallelRankIsWrittenWhenSet) {
  const std::string batch = EncodeKvEventBatch(1.5, {}, 3, KvEventEncoding::kMap);
  // [1.5, [], 3]
  EXPECT_EQ(absl::BytesToHexString(batch),
            "93cb3ff800000000000090"
            "03");
}

// Every width of msgpack's unsigned integers, at its edges, in the hash and token arrays (the
// bytes from the msgpack specification's formats: positive fixint, uint 8/16/32/64).
TEST(KvEventEncodingTest, ArraysUseTheShortestIntegerForms) {
  KvEvent e;
  e.kind = KvEventKind::kBlockStored;
  e.block_hashes = {0x7f, 0x80, 0xff, 0x100, 0xffff, 0x10000, 0xffffffff, 0x100000000};
  e.token_ids = {0, 127, 128, 255, 256, 65535, 65536, 4294967295u};
  e.block_size = 8;
  const std::string hex =
      absl::BytesToHexString(EncodeKvEventBatch(1.5, {e}, std::nullopt, KvEventEncoding::kArray));
  const std::string hashes =
      "98"
      "7f"
      "cc80"
      "ccff"
      "cd0100"
      "cdffff"
      "ce00010000"
      "ceffffffff"
      "cf0000000100000000";
  const std::string tokens =
      "98"
      "00"
      "7f"
      "cc80"
      "ccff"
      "cd0100"
      "cdffff"
      "ce00010000"
      "ceffffffff";
  // [1.5, [["BlockStored", hashes, nil, tokens, 8, nil, nil, nil, nil, nil, nil, nil]], nil]
  EXPECT_EQ(hex, "93cb3ff8000000000000919cab426c6f636b53746f726564" + hashes + "c0" + tokens +
                     "08c0c0c0c0c0c0c0c0");
}

TEST(KvEventEncodingTest, ParsesEncodingNames) {
  EXPECT_EQ(ParseKvEventEncoding("array").value(), KvEventEncoding::kArray);
  EXPECT_EQ(ParseKvEventEncoding("map").value(), KvEventEncoding::kMap);
  EXPECT_EQ(ParseKvEventEncoding("json").status().message(),
            "KV-event encoding 'json' is not array or map");
}

TEST(KvEventEncodingTest, ReducesHashes) {
  index::BlockHash sha{};
  for (size_t i = 0; i < sha.size(); ++i) sha[i] = static_cast<uint8_t>(i + 1);
  EXPECT_EQ(ReduceBlockHash(sha), 0x191a1b1c1d1e1f20u);  // the last 8 bytes, big-endian
  index::BlockHash engine_key{};  // an engine's 8-byte key, zero-padded by kvtier
  for (size_t i = 0; i < 8; ++i) engine_key[i] = static_cast<uint8_t>(0xa0 + i);
  EXPECT_EQ(ReduceBlockHash(engine_key), 0xa0a1a2a3a4a5a6a7u);
  index::BlockHash one_past{};  // a ninth byte: not an 8-byte key
  one_past[8] = 1;
  EXPECT_EQ(ReduceBlockHash(one_past), 0u);
}

TEST(KvEventEncodingTest, MediaOfTiers) {
  EXPECT_EQ(MediumOfTier(index::Tier::kGpu), "GPU");
  EXPECT_EQ(MediumOfTier(index::Tier::kHost), "CPU");
  EXPECT_EQ(MediumOfTier(index::Tier::kDisk), "STORAGE");
}

}  // namespace
}  // namespace kvtier::kvevents
