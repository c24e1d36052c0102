// TranslateLoggedEvent with a TokenTable: how a logged event's blocks are grouped into BlockStored
// events by their recorded tokens and block sizes, and the table's bound.
#include "daemon/kvevents/event_translation.h"

#include <gtest/gtest.h>

namespace kvtier::kvevents {
namespace {

index::BlockHash Hash(uint8_t i) {
  index::BlockHash h{};
  h[0] = i;  // an 8-byte engine key: the event carries 0x<i>00000000000000
  return h;
}
uint64_t Reduced(uint8_t i) { return uint64_t{i} << 56; }
std::vector<uint32_t> Page(uint32_t first, uint32_t n) {
  std::vector<uint32_t> t;
  for (uint32_t k = 0; k < n; ++k) t.push_back(first + k);
  return t;
}

service::LoggedEvent Stored(index::NamespaceId ns, std::vector<uint8_t> blocks) {
  service::LoggedEvent e;
  e.kind = store::StoreEventKind::kStored;
  e.ns = ns;
  e.tier = index::Tier::kHost;
  for (uint8_t b : blocks) e.hashes.push_back(Hash(b));
  e.count = e.hashes.size();
  return e;
}

TEST(TokenTableTest, KeepsTheNewestBlocksAndReplacesInPlace) {
  service::TokenTable table(2);
  table.Put(1, Hash(1), Page(10, 4), 4);
  table.Put(1, Hash(2), Page(20, 4), 4);
  table.Put(1, Hash(1), Page(30, 4), 4);  // replaced, keeps its age
  table.Put(1, Hash(3), {}, 4);           // nothing recorded
  EXPECT_EQ(table.size(), 2u);
  EXPECT_EQ(table.Get(1, Hash(1))->token_ids, Page(30, 4));
  table.Put(2, Hash(1), Page(40, 4), 4);  // another namespace's block 1: the oldest goes
  EXPECT_FALSE(table.Get(1, Hash(1)).has_value());
  EXPECT_EQ(table.Get(1, Hash(2))->token_ids, Page(20, 4));
  EXPECT_EQ(table.Get(2, Hash(1))->token_ids, Page(40, 4));
  EXPECT_EQ(table.evicted(), 1u);
  EXPECT_EQ(table.BlockSizeOf(1), 0u);
  table.SetBlockSize(1, 4);
  EXPECT_EQ(table.BlockSizeOf(1), 4u);
}

TEST(TranslateLoggedEventTest, GroupsBlocksByTheirTokens) {
  service::TokenTable table(16);
  table.SetBlockSize(7, 4);
  table.Put(7, Hash(1), Page(10, 4), 4);
  table.Put(7, Hash(2), Page(20, 4), 4);
  table.Put(7, Hash(4), Page(40, 2), 4);  // a partial page
  table.Put(7, Hash(5), Page(50, 4), 4);
  std::vector<KvEvent> out;
  TranslateLoggedEvent(Stored(7, {1, 2, 3, 4, 5}), /*block_size=*/99, &out, &table);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0].block_hashes, (std::vector<uint64_t>{Reduced(1), Reduced(2)}));
  std::vector<uint32_t> both = Page(10, 4);
  for (uint32_t t : Page(20, 4)) both.push_back(t);
  EXPECT_EQ(out[0].token_ids, both);
  EXPECT_EQ(out[1].block_hashes, std::vector<uint64_t>{Reduced(3)});
  EXPECT_TRUE(out[1].token_ids.empty());
  EXPECT_EQ(out[1].block_size, 4u);  // the namespace's, not the configured 99
  EXPECT_EQ(out[2].block_hashes, std::vector<uint64_t>{Reduced(4)});
  EXPECT_EQ(out[2].token_ids, Page(40, 2));
  EXPECT_EQ(out[3].block_hashes, std::vector<uint64_t>{Reduced(5)});  // not with the partial page
  EXPECT_EQ(out[3].token_ids, Page(50, 4));
  for (const KvEvent& e : out) {
    EXPECT_EQ(e.kind, KvEventKind::kBlockStored);
    EXPECT_EQ(e.medium, "CPU");
    EXPECT_EQ(e.block_size, 4u);
  }

  // A namespace the table knows nothing of: one event, the configured block size.
  out.clear();
  TranslateLoggedEvent(Stored(8, {1, 2}), 99, &out, &table);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].block_hashes.size(), 2u);
  EXPECT_TRUE(out[0].token_ids.empty());
  EXPECT_EQ(out[0].block_size, 99u);

  // A move keeps the tokens: BlockStored in the new medium, then BlockRemoved.
  out.clear();
  service::LoggedEvent moved = Stored(7, {1});
  moved.kind = store::StoreEventKind::kMoved;
  moved.to_tier = index::Tier::kDisk;
  TranslateLoggedEvent(moved, 99, &out, &table);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].medium, "STORAGE");
  EXPECT_EQ(out[0].token_ids, Page(10, 4));
  EXPECT_EQ(out[1].kind, KvEventKind::kBlockRemoved);
  EXPECT_EQ(out[1].medium, "CPU");
}

}  // namespace
}  // namespace kvtier::kvevents
