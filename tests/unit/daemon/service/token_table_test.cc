// TokenTable as a ring of token slots: eviction in insertion order across wrap-arounds, a block
// recorded twice keeping its slot, lookups after evictions have moved index entries, widening,
// and the capacity's edges. Checked against a plain model (a map and a queue of keys).
#include "daemon/service/token_table.h"

#include <gtest/gtest.h>

#include <deque>
#include <map>
#include <random>
#include <utility>
#include <vector>

namespace kvtier::service {
namespace {

index::BlockHash Hash(uint64_t i) {
  index::BlockHash h{};
  for (int b = 0; b < 8; ++b) h[b] = static_cast<uint8_t>(i >> (8 * b));
  return h;
}

std::vector<uint32_t> Page(uint32_t first, uint32_t n) {
  std::vector<uint32_t> t;
  for (uint32_t k = 0; k < n; ++k) t.push_back(first + k);
  return t;
}

std::vector<uint32_t> TokensOf(const TokenTable& table, index::NamespaceId ns, uint64_t block) {
  std::optional<TokenTable::Tokens> t = table.Get(ns, Hash(block));
  return t.has_value() ? t->token_ids : std::vector<uint32_t>{};
}

TEST(TokenTableRingTest, WrapsAroundEvictingTheOldestFirst) {
  TokenTable table(4);
  for (uint64_t b = 0; b < 10; ++b) table.Put(1, Hash(b), Page(100 * b, 3), 4);
  EXPECT_EQ(table.size(), 4u);
  EXPECT_EQ(table.evicted(), 6u);
  for (uint64_t b = 0; b < 6; ++b) EXPECT_FALSE(table.Get(1, Hash(b)).has_value()) << b;
  for (uint64_t b = 6; b < 10; ++b) {
    std::optional<TokenTable::Tokens> t = table.Get(1, Hash(b));
    ASSERT_TRUE(t.has_value()) << b;
    EXPECT_EQ(t->token_ids, Page(100 * b, 3));
    EXPECT_EQ(t->block_size, 4u);
  }
}

TEST(TokenTableRingTest, ABlockStoredTwiceKeepsItsSlotAndTakesTheNewTokens) {
  TokenTable table(3);
  table.Put(1, Hash(1), Page(10, 4), 4);
  table.Put(1, Hash(2), Page(20, 4), 4);
  table.Put(1, Hash(3), Page(30, 4), 4);
  table.Put(1, Hash(1), Page(11, 2), 8);  // overwritten in place: still the oldest
  EXPECT_EQ(table.size(), 3u);
  EXPECT_EQ(table.evicted(), 0u);
  std::optional<TokenTable::Tokens> t = table.Get(1, Hash(1));
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->token_ids, Page(11, 2));
  EXPECT_EQ(t->block_size, 8u);
  table.Put(1, Hash(4), Page(40, 4), 4);  // evicts block 1, not 2
  EXPECT_FALSE(table.Get(1, Hash(1)).has_value());
  EXPECT_EQ(TokensOf(table, 1, 2), Page(20, 4));
  EXPECT_EQ(TokensOf(table, 1, 4), Page(40, 4));
  table.Put(1, Hash(1), Page(12, 4), 4);  // back, as the newest: block 2 goes
  EXPECT_FALSE(table.Get(1, Hash(2)).has_value());
  EXPECT_EQ(TokensOf(table, 1, 1), Page(12, 4));
  EXPECT_EQ(table.evicted(), 2u);
}

TEST(TokenTableRingTest, TheSameHashInTwoNamespacesIsTwoBlocks) {
  TokenTable table(2);
  table.Put(1, Hash(5), Page(10, 2), 2);
  table.Put(2, Hash(5), Page(20, 2), 2);
  EXPECT_EQ(TokensOf(table, 1, 5), Page(10, 2));
  EXPECT_EQ(TokensOf(table, 2, 5), Page(20, 2));
  EXPECT_FALSE(table.Get(3, Hash(5)).has_value());
}

TEST(TokenTableRingTest, CapacityOneKeepsTheLastBlock) {
  TokenTable table(1);
  table.Put(1, Hash(1), Page(10, 2), 2);
  table.Put(1, Hash(1), Page(11, 2), 2);
  EXPECT_EQ(table.evicted(), 0u);
  table.Put(1, Hash(2), Page(20, 2), 2);
  EXPECT_EQ(table.size(), 1u);
  EXPECT_EQ(table.evicted(), 1u);
  EXPECT_FALSE(table.Get(1, Hash(1)).has_value());
  EXPECT_EQ(TokensOf(table, 1, 2), Page(20, 2));
}

TEST(TokenTableRingTest, CapacityIsClamped) {
  EXPECT_EQ(TokenTable(0).capacity(), 1u);
  EXPECT_EQ(TokenTable(TokenTable::kMaxCapacity + 1).capacity(), TokenTable::kMaxCapacity);
}

TEST(TokenTableRingTest, EmptyTokensRecordNothing) {
  TokenTable table(2);
  table.Put(1, Hash(1), {}, 4);
  EXPECT_EQ(table.size(), 0u);
  EXPECT_FALSE(table.Get(1, Hash(1)).has_value());
  table.Put(1, Hash(1), Page(1, 4), 4);
  table.Put(1, Hash(1), {}, 4);  // does not remove either
  EXPECT_EQ(TokensOf(table, 1, 1), Page(1, 4));
}

TEST(TokenTableRingTest, ALongerBlockWidensEverySlotKeepingWhatTheyHold) {
  TokenTable table(3);
  table.Put(1, Hash(1), Page(10, 2), 16);
  table.Put(1, Hash(2), Page(20, 3), 16);
  EXPECT_EQ(table.slot_tokens(), 2u * 2);  // at least twice the old width
  table.Put(1, Hash(3), Page(30, 16), 16);
  EXPECT_EQ(table.slot_tokens(), 16u);
  EXPECT_EQ(TokensOf(table, 1, 1), Page(10, 2));
  EXPECT_EQ(TokensOf(table, 1, 2), Page(20, 3));
  EXPECT_EQ(TokensOf(table, 1, 3), Page(30, 16));
  table.Put(1, Hash(4), Page(40, 16), 16);  // wraps over block 1's slot
  EXPECT_FALSE(table.Get(1, Hash(1)).has_value());
  EXPECT_EQ(TokensOf(table, 1, 4), Page(40, 16));
}

TEST(TokenTableRingTest, GetManyReturnsEachBlocksTokensInOrder) {
  TokenTable table(8);
  table.PutMany(7, 4, {{Hash(1), Page(10, 4)}, {Hash(2), {}}, {Hash(3), Page(30, 2)}});
  std::vector<TokenTable::Found> found;
  std::vector<uint32_t> tokens = {99, 99};  // cleared by GetMany
  const std::vector<index::BlockHash> hashes = {Hash(3), Hash(2), Hash(1), Hash(9)};
  table.GetMany(7, hashes, &found, &tokens);
  ASSERT_EQ(found.size(), 4u);
  EXPECT_EQ(found[0].count, 2u);
  EXPECT_EQ(found[1].count, 0u);
  EXPECT_EQ(found[2].count, 4u);
  EXPECT_EQ(found[3].count, 0u);
  EXPECT_EQ(found[2].block_size, 4u);
  ASSERT_EQ(tokens.size(), 6u);
  EXPECT_EQ(
      std::vector<uint32_t>(tokens.begin() + found[0].first, tokens.begin() + found[0].first + 2),
      Page(30, 2));
  EXPECT_EQ(
      std::vector<uint32_t>(tokens.begin() + found[2].first, tokens.begin() + found[2].first + 4),
      Page(10, 4));
}

// Many blocks in a small table, with repeats and colliding probes: every lookup agrees with a
// model of the documented behaviour (a block recorded again keeps its age; the oldest goes).
TEST(TokenTableRingTest, AgreesWithAModelOverManyWrapArounds) {
  constexpr size_t kCapacity = 37;
  TokenTable table(kCapacity);
  std::map<std::pair<index::NamespaceId, uint64_t>, std::vector<uint32_t>> model;
  std::deque<std::pair<index::NamespaceId, uint64_t>> order;
  uint64_t evicted = 0;
  std::mt19937_64 rng(24);
  for (uint32_t step = 0; step < 20000; ++step) {
    const index::NamespaceId ns = rng() % 2;
    const uint64_t block = rng() % 120;  // repeats: some still recorded, some evicted
    const std::vector<uint32_t> tokens = Page(step, 1 + static_cast<uint32_t>(rng() % 16));
    table.Put(ns, Hash(block), tokens, 16);
    const auto key = std::make_pair(ns, block);
    if (model.count(key) == 0) {
      order.push_back(key);
      if (order.size() > kCapacity) {
        model.erase(order.front());
        order.pop_front();
        ++evicted;
      }
    }
    model[key] = tokens;
    if (step % 97 == 0) {
      ASSERT_EQ(table.size(), model.size());
      for (index::NamespaceId n = 0; n < 2; ++n) {
        for (uint64_t b = 0; b < 120; ++b) {
          auto it = model.find({n, b});
          const std::vector<uint32_t> want =
              it == model.end() ? std::vector<uint32_t>{} : it->second;
          ASSERT_EQ(TokensOf(table, n, b), want)
              << "step " << step << " ns " << n << " block " << b;
        }
      }
    }
  }
  EXPECT_EQ(table.evicted(), evicted);
}

}  // namespace
}  // namespace kvtier::service
