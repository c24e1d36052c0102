// BlockStore events: a sink that replays them must see exactly what the store holds (which blocks,
// in which fastest tier) after puts, host and disk pressure, DemoteAll, Remove, corruption, a
// namespace clear and a restart; silent puts report nothing; Snapshot lines up with the events.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <mutex>

#include "tests/unit/daemon/store/store_fixture.h"

namespace kvtier::store {
namespace {

class RecordingSink : public StoreEventSink {
 public:
  void OnEvent(const StoreEvent& e) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++position_;
    events_.push_back(e);
    events_.back().origin = {};
    origins_.emplace_back(e.origin);
    const std::pair<NamespaceId, BlockHash> key{e.ns, e.hash};
    switch (e.kind) {
      case StoreEventKind::kStored:
        EXPECT_FALSE(view_.contains(key)) << "stored twice";
        view_[key] = e.tier;
        break;
      case StoreEventKind::kMoved:
        EXPECT_EQ(view_[key], e.tier) << "moved from a tier it was not in";
        view_[key] = e.to_tier;
        break;
      case StoreEventKind::kRemoved:
        EXPECT_EQ(view_.count(key), 1u) << "removed but never stored";
        EXPECT_EQ(view_[key], e.tier);
        view_.erase(key);
        break;
      case StoreEventKind::kCleared:
        for (auto it = view_.begin(); it != view_.end();) {
          it = it->first.first == e.ns ? view_.erase(it) : std::next(it);
        }
        break;
    }
  }
  uint64_t Barrier() override {
    std::lock_guard<std::mutex> lock(mu_);
    return position_;
  }

  size_t Count(StoreEventKind kind) {
    std::lock_guard<std::mutex> lock(mu_);
    size_t n = 0;
    for (const StoreEvent& e : events_) n += e.kind == kind;
    return n;
  }
  // Every event's origin (the views are gone after the call; the sink kept copies).
  std::vector<std::string> origins() {
    std::lock_guard<std::mutex> lock(mu_);
    return origins_;
  }
  std::vector<StoreEvent> events() {
    std::lock_guard<std::mutex> lock(mu_);
    return events_;
  }
  std::map<std::pair<NamespaceId, BlockHash>, Tier> view() {
    std::lock_guard<std::mutex> lock(mu_);
    return view_;
  }

 private:
  std::mutex mu_;
  uint64_t position_ = 0;
  std::vector<StoreEvent> events_;
  std::vector<std::string> origins_;
  std::map<std::pair<NamespaceId, BlockHash>, Tier> view_;
};

class BlockStoreEventsTest : public StoreFixture {
 protected:
  void SetUp() override {
    StoreFixture::SetUp();
    options_.events = &sink_;
  }

  // The events' view equals the store's, key by key, for ids [0, n) of namespace `ns`.
  void ExpectViewMatches(BlockStore& store, uint64_t n, NamespaceId ns = 1) {
    ASSERT_TRUE(store.Flush().ok());
    const auto view = sink_.view();
    for (uint64_t id = 0; id < n; ++id) {
      std::vector<Tier> tiers;
      const BlockHash hash = Key(id, ns).hash;
      const size_t hit = store.LookupChain(ns, {&hash, 1}, &tiers);
      auto it = view.find({ns, hash});
      if (hit == 0) {
        EXPECT_TRUE(it == view.end()) << "block " << id << " is gone but no event said so";
      } else {
        ASSERT_TRUE(it != view.end()) << "block " << id << " is stored but no event said so";
        EXPECT_EQ(it->second, tiers[0]) << "block " << id;
      }
    }
  }

  // Flips one payload byte of block `id`'s disk copy; false when no disk file holds it.
  bool FlipDiskByte(uint64_t id) {
    bool flipped = false;
    for (const char* sub : {"disk0", "disk1"}) {
      for (const auto& entry : std::filesystem::directory_iterator(dir_->File(sub))) {
        const int fd = open(entry.path().c_str(), O_RDWR);
        if (fd < 0) return false;
        std::vector<uint8_t> bytes(static_cast<size_t>(entry.file_size()));
        if (pread(fd, bytes.data(), bytes.size(), 0) != static_cast<ssize_t>(bytes.size())) {
          close(fd);
          return false;
        }
        const std::vector<uint8_t> want = Block(id);
        auto at = std::search(bytes.begin(), bytes.end(), want.begin(), want.begin() + 4096);
        if (at != bytes.end()) {
          const off_t off = (at - bytes.begin()) + 2000;
          uint8_t b = bytes[static_cast<size_t>(off)] ^ 0x40;
          flipped = pwrite(fd, &b, 1, off) == 1;
        }
        close(fd);
      }
    }
    return flipped;
  }

  RecordingSink sink_;
};

TEST_F(BlockStoreEventsTest, ReplayedEventsMatchTheStoreUnderPressure) {
  options_.disk.capacity_bytes = 8ull << 20;  // both tiers overflow: moves and evictions
  auto store = Open().value();
  PutOptions put;
  put.origin = "engine-7";
  for (uint64_t id = 0; id < 1200; ++id) ASSERT_TRUE(store->Put(Key(id), Block(id), put).ok());
  ExpectViewMatches(*store, 1200);
  EXPECT_EQ(sink_.Count(StoreEventKind::kStored), 1200u);
  EXPECT_GT(sink_.Count(StoreEventKind::kMoved), 0u);
  EXPECT_GT(sink_.Count(StoreEventKind::kRemoved), 0u);
  for (const StoreEvent& e : sink_.events()) {
    if (e.kind == StoreEventKind::kMoved) {
      EXPECT_EQ(e.tier, Tier::kHost);
      EXPECT_EQ(e.to_tier, Tier::kDisk);
    }
    if (e.kind == StoreEventKind::kRemoved) {
      EXPECT_EQ(e.removed_by, RemovedBy::kEvicted);
    }
    if (e.kind == StoreEventKind::kStored) {
      EXPECT_EQ(e.block_bytes, Block(0).size());
    }
  }
  const std::vector<std::string> origins = sink_.origins();
  EXPECT_EQ(origins.front(), "engine-7");

  // A duplicate put reports nothing; Remove reports why.
  const size_t before = sink_.events().size();
  ASSERT_TRUE(store->Put(Key(1199), Block(1199)).ok());
  EXPECT_EQ(sink_.events().size(), before);
  ASSERT_TRUE(store->Remove(Key(1199)).value());
  EXPECT_EQ(sink_.events().back().kind, StoreEventKind::kRemoved);
  EXPECT_EQ(sink_.events().back().removed_by, RemovedBy::kRemoved);
  ExpectViewMatches(*store, 1200);
}

TEST_F(BlockStoreEventsTest, DemoteAllClearAndCorruptionAreReported) {
  auto store = Open().value();
  for (uint64_t id = 0; id < 20; ++id) ASSERT_TRUE(store->Put(Key(id), Block(id)).ok());
  for (uint64_t id = 0; id < 5; ++id) ASSERT_TRUE(store->Put(Key(id, 2), Block(id)).ok());
  ASSERT_TRUE(store->DemoteAll().ok());
  EXPECT_EQ(sink_.Count(StoreEventKind::kMoved), 25u);
  ExpectViewMatches(*store, 20);

  // Flip a byte of block 3's disk copy: the read fails with DataLoss, drops the block and reports
  // it as corrupt.
  ASSERT_TRUE(FlipDiskByte(3));
  EXPECT_EQ(store->Acquire(Key(3)).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(sink_.events().back().kind, StoreEventKind::kRemoved);
  EXPECT_EQ(sink_.events().back().removed_by, RemovedBy::kCorrupt);
  EXPECT_EQ(sink_.events().back().tier, Tier::kDisk);
  ExpectViewMatches(*store, 20);

  // Clear: one event with the count, no per-block removals.
  const size_t removed_before = sink_.Count(StoreEventKind::kRemoved);
  EXPECT_EQ(store->ClearNamespace(1).value().blocks, 19u);
  EXPECT_EQ(sink_.Count(StoreEventKind::kRemoved), removed_before);
  EXPECT_EQ(sink_.events().back().kind, StoreEventKind::kCleared);
  EXPECT_EQ(sink_.events().back().ns, 1u);
  EXPECT_EQ(sink_.events().back().count, 19u);
  ExpectViewMatches(*store, 20);
  ExpectViewMatches(*store, 5, 2);
}

TEST_F(BlockStoreEventsTest, SilentPutsReportNothingAndRecoveryReportsWhatSurvived) {
  {
    auto store = Open().value();
    PutOptions silent;
    silent.silent = true;
    for (uint64_t id = 0; id < 10; ++id) {
      ASSERT_TRUE(store->Put(Key(id), Block(id), id < 5 ? silent : PutOptions{}).ok());
    }
    EXPECT_EQ(sink_.Count(StoreEventKind::kStored), 5u);
    ASSERT_TRUE(store->DemoteAll().ok());
    EXPECT_EQ(sink_.Count(StoreEventKind::kMoved), 5u);  // the silent ones moved quietly
    ASSERT_TRUE(store->Remove(Key(0)).value());
    EXPECT_EQ(sink_.Count(StoreEventKind::kRemoved), 0u);
    uint64_t position = 0;
    const auto snapshot = store->Snapshot({}, &position);
    EXPECT_EQ(snapshot.size(), 5u);  // the visible ones only
    EXPECT_EQ(position, sink_.events().size());
    for (const auto& b : snapshot) EXPECT_EQ(b.tier, Tier::kDisk);
  }
  RecordingSink after;
  options_.events = &after;
  auto store = Open().value();
  // Recovery cannot tell parked blocks apart: every block on disk is reported.
  EXPECT_EQ(after.Count(StoreEventKind::kStored), 9u);
  for (const StoreEvent& e : after.events()) {
    EXPECT_EQ(e.stored_by, StoredBy::kRecovery);
    EXPECT_EQ(e.tier, Tier::kDisk);
  }
  uint64_t position = 0;
  EXPECT_EQ(store->Snapshot(std::vector<NamespaceId>{1}, &position).size(), 9u);
  EXPECT_EQ(store->Snapshot(std::vector<NamespaceId>{2}, &position).size(), 0u);
  EXPECT_EQ(position, 9u);
}

TEST_F(BlockStoreEventsTest, EvictTakesBlocksOutOfATierOrTheCache) {
  auto store = Open().value();
  for (uint64_t id = 0; id < 30; ++id) ASSERT_TRUE(store->Put(Key(id), Block(id)).ok());
  BlockStore::EvictRequest req;
  req.namespaces = {1};
  EXPECT_TRUE(absl::IsInvalidArgument(store->Evict(req).status()));  // no amount
  req.max_blocks = 5;
  req.max_bytes = 5;
  EXPECT_TRUE(absl::IsInvalidArgument(store->Evict(req).status()));  // two amounts

  // Out of the cache, least recently used first: blocks 0..4.
  req.max_bytes = 0;
  BlockStore::EvictReport r = store->Evict(req).value();
  EXPECT_EQ(r.evicted_blocks, 5u);
  EXPECT_EQ(r.demoted_blocks, 0u);
  for (uint64_t id = 0; id < 5; ++id) EXPECT_FALSE(store->Acquire(Key(id)).value().has_value());
  EXPECT_EQ(sink_.events().back().removed_by, RemovedBy::kRemoved);

  // Out of the host tier without drop: written to disk, then the host copy goes.
  req.tier = Tier::kHost;
  req.max_blocks = 10;
  r = store->Evict(req).value();
  EXPECT_EQ(r.evicted_blocks, 10u);
  EXPECT_EQ(r.demoted_blocks, 10u);
  ASSERT_TRUE(store->Flush().ok());
  for (uint64_t id = 5; id < 15; ++id) EXPECT_EQ(ExpectBlock(*store, id), Tier::kDisk) << id;
  EXPECT_EQ(ExpectBlock(*store, 15), Tier::kHost);

  // By hash: pinned ones are refused, unknown ones are not found, disk-only ones drop.
  std::optional<PinnedBlock> pinned = store->Acquire(Key(20)).value();
  BlockStore::EvictRequest by_hash;
  by_hash.namespaces = {1};
  by_hash.tier = Tier::kDisk;
  by_hash.hashes = {Key(20).hash, Key(99).hash, Key(6).hash, Key(21).hash};
  r = store->Evict(by_hash).value();
  ASSERT_EQ(r.results.size(), 4u);
  EXPECT_TRUE(absl::IsNotFound(r.results[0])) << r.results[0];  // on host, not on disk
  EXPECT_TRUE(absl::IsNotFound(r.results[1])) << r.results[1];
  EXPECT_TRUE(r.results[2].ok()) << r.results[2];
  EXPECT_TRUE(absl::IsNotFound(r.results[3])) << r.results[3];
  EXPECT_FALSE(store->Acquire(Key(6)).value().has_value());
  by_hash.tier.reset();
  by_hash.hashes = {Key(20).hash};
  r = store->Evict(by_hash).value();
  EXPECT_TRUE(absl::IsFailedPrecondition(r.results[0])) << r.results[0];
  EXPECT_EQ(r.skipped_busy, 1u);
  pinned.reset();
  r = store->Evict(by_hash).value();
  EXPECT_TRUE(r.results[0].ok());
  ExpectViewMatches(*store, 30);
}

TEST_F(BlockStoreEventsTest, VerifyReportsKeepsOrRemovesByTierAndNamespace) {
  auto store = Open().value();
  for (uint64_t id = 0; id < 10; ++id) ASSERT_TRUE(store->Put(Key(id), Block(id)).ok());
  for (uint64_t id = 0; id < 4; ++id) ASSERT_TRUE(store->Put(Key(id, 2), Block(id)).ok());
  ASSERT_TRUE(store->DemoteAll().ok());
  ASSERT_TRUE(FlipDiskByte(4));  // block 4 of namespace 1 (namespace 2 holds 0..3)

  BlockStore::VerifyOptions only_ns2;
  only_ns2.namespaces = {2};
  only_ns2.report_only = true;
  BlockStore::VerifyReport r = store->Verify(only_ns2).value();
  EXPECT_EQ(r.blocks, 4u);  // namespace 2 holds blocks 0..3: all fine
  EXPECT_EQ(r.failed, 0u);

  BlockStore::VerifyOptions report;
  report.report_only = true;
  report.tier = Tier::kDisk;
  r = store->Verify(report).value();
  EXPECT_EQ(r.blocks, 14u);
  EXPECT_EQ(r.failed, 1u);
  EXPECT_EQ(r.removed, 0u);
  ASSERT_EQ(r.failures.size(), 1u);
  EXPECT_EQ(r.failures[0].key.hash, Key(4).hash);
  EXPECT_EQ(r.failures[0].tier, Tier::kDisk);
  EXPECT_NE(r.failures[0].message.find("checksum"), std::string::npos) << r.failures[0].message;
  EXPECT_EQ(sink_.Count(StoreEventKind::kRemoved), 0u);  // report only: still there

  BlockStore::VerifyOptions capped;
  capped.max_blocks = 3;
  capped.report_only = true;
  r = store->Verify(capped).value();
  EXPECT_EQ(r.blocks, 3u);
  EXPECT_FALSE(r.complete);

  r = store->Verify().value();  // removes what fails
  EXPECT_EQ(r.failed, 1u);
  EXPECT_EQ(r.removed, 1u);
  EXPECT_TRUE(r.complete);
  EXPECT_FALSE(store->Acquire(Key(4)).value().has_value());
  EXPECT_EQ(sink_.events().back().removed_by, RemovedBy::kCorrupt);
  ExpectViewMatches(*store, 10);
}

}  // namespace
}  // namespace kvtier::store
