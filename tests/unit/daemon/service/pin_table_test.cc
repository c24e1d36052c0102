// PinTable over a real BlockStore: results per hash, the ttl's default and cap, extension
// without stacking, expiry at its exact boundary, that a pin really holds its block (the store's
// Evict skips it) until it is unpinned or expires, that one engine never unpins or drops another's
// pins nor pins a block of another namespace, and pins from several threads at once.
#include "daemon/service/pin_table.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/testing/cold_blocks.h"
#include "tests/testing/temp_dir.h"
#include "tests/unit/daemon/service/engine_fixture.h"

namespace kvtier::service {
namespace {

using ::kvtier::testing::MakeTestBlock;
using ::kvtier::testing::TestHash;

class PinTableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::make_unique<kvtier::testing::TempDir>(kvtier::testing::TempDir::Create().value());
    absl::StatusOr<std::unique_ptr<store::BlockStore>> opened = testing::OpenStore(*dir_);
    ASSERT_TRUE(opened.ok()) << opened.status();
    store_ = std::move(*opened);
    alice_ = NewEngine("a1", "alice", 1);
    bob_ = NewEngine("b1", "bob", 2);
    for (uint64_t id = 1; id <= 4; ++id) {
      ASSERT_TRUE(store_->Put({1, TestHash(id)}, MakeTestBlock(id, 2000)).ok());
    }
    ASSERT_TRUE(store_->Put({2, TestHash(100)}, MakeTestBlock(100, 2000)).ok());
  }
  void TearDown() override {
    table_.reset();  // its holds go before the store
    store_.reset();
  }

  std::shared_ptr<service::Engine> NewEngine(const std::string& id, const std::string& tenant,
                                             store::NamespaceId ns) {
    absl::StatusOr<std::shared_ptr<service::Engine>> engine =
        testing::MakeEngine(*dir_, id, tenant, ns, /*plane=*/nullptr, "pool-" + id);
    EXPECT_TRUE(engine.ok()) << engine.status();
    return engine.ok() ? *engine : nullptr;
  }

  // What the store's Evict says of block `id` of namespace `ns` (FailedPrecondition: pinned).
  absl::Status EvictOne(uint64_t id, store::NamespaceId ns = 1) {
    store::BlockStore::EvictRequest request;
    request.namespaces = {ns};
    request.hashes = {TestHash(id)};
    absl::StatusOr<store::BlockStore::EvictReport> report = store_->Evict(request);
    if (!report.ok()) return report.status();
    return report->results.at(0);
  }

  uint64_t PinsOf(const std::string& engine_id) const {
    absl::flat_hash_map<std::string, uint64_t> counts = table_->CountByEngine();
    auto it = counts.find(engine_id);
    return it == counts.end() ? 0 : it->second;
  }

  std::unique_ptr<kvtier::testing::TempDir> dir_;
  std::unique_ptr<store::BlockStore> store_;
  std::unique_ptr<PinTable> table_;  // made by each test (destroyed before store_)
  std::shared_ptr<service::Engine> alice_, bob_;
};

TEST_F(PinTableTest, ResultsPerHashAndTheTtlsDefaultAndCap) {
  table_ = std::make_unique<PinTable>(
      store_.get(), PinTable::Limits{/*default_ttl=*/absl::Seconds(30), absl::Minutes(10)});
  std::vector<dataplane::ItemResult> results;
  const std::vector<index::BlockHash> hashes = {TestHash(1), TestHash(99), TestHash(2)};
  absl::Time before = absl::Now();
  absl::Time expires = table_->Pin(*alice_, hashes, absl::ZeroDuration(), &results);
  absl::Time after = absl::Now();
  EXPECT_GE(expires, before + absl::Seconds(30));  // not positive: default_ttl
  EXPECT_LE(expires, after + absl::Seconds(30));
  ASSERT_EQ(results.size(), 3u);
  EXPECT_EQ(results[0].code, dataplane::ItemCode::kOk);
  EXPECT_EQ(results[0].tier, index::Tier::kHost);
  EXPECT_EQ(results[1].code, dataplane::ItemCode::kNotFound);
  EXPECT_EQ(results[1].message, "");
  EXPECT_EQ(results[2].code, dataplane::ItemCode::kOk);
  EXPECT_EQ(PinsOf("a1"), 2u);

  // Results are appended; a ttl past max_ttl is cut to it.
  before = absl::Now();
  expires = table_->Pin(*alice_, {TestHash(3)}, absl::Hours(5), &results);
  after = absl::Now();
  EXPECT_EQ(results.size(), 4u);
  EXPECT_GE(expires, before + absl::Minutes(10));
  EXPECT_LE(expires, after + absl::Minutes(10));
}

TEST_F(PinTableTest, APinHoldsItsBlockUntilUnpinned) {
  table_ = std::make_unique<PinTable>(store_.get(), PinTable::Limits{});
  std::vector<dataplane::ItemResult> results;
  table_->Pin(*alice_, {TestHash(1)}, absl::Seconds(30), &results);
  EXPECT_EQ(EvictOne(1).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(table_->Unpin("a1", TestHash(1)));
  EXPECT_FALSE(table_->Unpin("a1", TestHash(1)));
  EXPECT_TRUE(EvictOne(1).ok());
  EXPECT_TRUE(EvictOne(2).ok());  // never pinned
}

TEST_F(PinTableTest, PinningAgainExtendsAndNeverShortensOrStacks) {
  table_ = std::make_unique<PinTable>(store_.get(), PinTable::Limits{});
  std::vector<dataplane::ItemResult> results;
  const absl::Time first = table_->Pin(*alice_, {TestHash(1)}, absl::Seconds(60), &results);
  const absl::Time longer = table_->Pin(*alice_, {TestHash(1)}, absl::Seconds(120), &results);
  table_->Pin(*alice_, {TestHash(1)}, absl::Seconds(1), &results);  // does not shorten
  ASSERT_EQ(results.size(), 3u);
  EXPECT_EQ(results[1].code, dataplane::ItemCode::kOk);
  EXPECT_EQ(results[1].tier, index::Tier::kHost);
  EXPECT_EQ(PinsOf("a1"), 1u);  // one hold, not three

  EXPECT_EQ(table_->DropExpired(first + absl::Nanoseconds(1)), 0u);
  EXPECT_EQ(table_->DropExpired(longer), 0u);  // expired means strictly before `now`
  EXPECT_EQ(EvictOne(1).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(table_->DropExpired(longer + absl::Nanoseconds(1)), 1u);
  EXPECT_EQ(PinsOf("a1"), 0u);
  EXPECT_TRUE(EvictOne(1).ok()) << "an expired pin still held its block";
  // One unpin is enough after pinning several times.
  table_->Pin(*alice_, {TestHash(2)}, absl::Seconds(60), &results);
  table_->Pin(*alice_, {TestHash(2)}, absl::Seconds(60), &results);
  EXPECT_TRUE(table_->Unpin("a1", TestHash(2)));
  EXPECT_TRUE(EvictOne(2).ok());
}

TEST_F(PinTableTest, EnginesNeverTouchEachOthersPins) {
  table_ = std::make_unique<PinTable>(store_.get(), PinTable::Limits{});
  std::shared_ptr<service::Engine> alice2 = NewEngine("a2", "alice", 1);
  std::vector<dataplane::ItemResult> results;
  table_->Pin(*alice_, {TestHash(1), TestHash(2)}, absl::Seconds(60), &results);
  // Bob's namespace does not hold alice's blocks: nothing to pin. His own block pins.
  results.clear();
  table_->Pin(*bob_, {TestHash(1), TestHash(100)}, absl::Seconds(60), &results);
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].code, dataplane::ItemCode::kNotFound);
  EXPECT_EQ(results[1].code, dataplane::ItemCode::kOk);

  EXPECT_FALSE(table_->Unpin("b1", TestHash(1)));
  EXPECT_FALSE(table_->Unpin("a2", TestHash(1))) << "another engine of the same tenant";
  EXPECT_EQ(table_->DropEngine("b1"), 1u);
  EXPECT_EQ(table_->DropEngine("a2"), 0u);
  EXPECT_EQ(PinsOf("a1"), 2u);
  EXPECT_EQ(EvictOne(1).code(), absl::StatusCode::kFailedPrecondition);

  // Two engines pinning one block hold it each: it stays held until both let go.
  table_->Pin(*alice2, {TestHash(1)}, absl::Seconds(60), &results);
  EXPECT_EQ(table_->DropEngine("a1"), 2u);
  EXPECT_EQ(EvictOne(1).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(table_->Unpin("a2", TestHash(1)));
  EXPECT_TRUE(EvictOne(1).ok());
}

// Engines pin, re-pin and unpin overlapping blocks on several threads while another thread
// drops expired pins; at the end every engine's pins are exactly what it did not unpin.
TEST_F(PinTableTest, ConcurrentPinsAndUnpins) {
  table_ = std::make_unique<PinTable>(store_.get(), PinTable::Limits{});
  constexpr int kThreads = 4;
  std::vector<std::shared_ptr<service::Engine>> engines;
  for (int t = 0; t < kThreads; ++t) {
    engines.push_back(NewEngine("e" + std::to_string(t), "alice", 1));
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<dataplane::ItemResult> results;
      for (int round = 0; round < 300; ++round) {
        const uint64_t id = 1 + (round + t) % 4;
        table_->Pin(*engines[t], {TestHash(id), TestHash(1 + (id % 4))}, absl::Seconds(60),
                    &results);
        table_->Unpin(engines[t]->id, TestHash(id));
        results.clear();
      }
    });
  }
  std::thread dropper([&] {
    for (int i = 0; i < 300; ++i) table_->DropExpired(absl::Now());  // nothing expires
  });
  for (std::thread& t : threads) t.join();
  dropper.join();
  // A round pins `id` (pinned already as the previous round's second block) and the next one,
  // then unpins `id`: each engine is left with exactly the last round's second block.
  uint64_t total = 0;
  for (int t = 0; t < kThreads; ++t) {
    const uint64_t pins = PinsOf("e" + std::to_string(t));
    EXPECT_EQ(pins, 1u) << "engine e" << t;
    total += pins;
  }
  uint32_t dropped = 0;
  for (int t = 0; t < kThreads; ++t) dropped += table_->DropEngine("e" + std::to_string(t));
  EXPECT_EQ(dropped, total);
  for (uint64_t id = 1; id <= 4; ++id) EXPECT_TRUE(EvictOne(id).ok()) << "block " << id;
}

}  // namespace
}  // namespace kvtier::service
