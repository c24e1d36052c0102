// BlockStore on real files, a real RocksDB and real shared memory: the request paths, demotion
// down the tiers, quotas, durability, recovery across restarts, and concurrent use.
#include "daemon/store/block_store.h"

#include <atomic>
#include <random>
#include <thread>

#include "codec/cold_block.h"
#include "daemon/index/block_index.h"
#include "gtest/gtest.h"
#include "tests/unit/daemon/store/store_fixture.h"

namespace kvtier::store {
namespace {

using BlockStoreTest = StoreFixture;

TEST_F(BlockStoreTest, PutLookupAcquireRead) {
  auto store = Open().value();
  for (uint64_t id = 0; id < 10; ++id) ASSERT_TRUE(store->Put(Key(id), Block(id)).ok());
  std::vector<BlockHash> chain;
  for (uint64_t id = 0; id < 12; ++id) chain.push_back(kvtier::testing::TestHash(id));
  std::vector<Tier> tiers;
  EXPECT_EQ(store->LookupChain(1, chain, &tiers), 10u);
  EXPECT_EQ(tiers, std::vector<Tier>(10, Tier::kHost));
  EXPECT_EQ(store->LookupChain(2, chain), 0u) << "namespaces isolate blocks";
  chain[3] = kvtier::testing::TestHash(1000);
  EXPECT_EQ(store->LookupChain(1, chain), 3u) << "the chain stops at the first miss";
  EXPECT_EQ(ExpectBlock(*store, 7), Tier::kHost);
  std::vector<uint8_t> out(Block(7).size());
  absl::StatusOr<std::optional<uint64_t>> n = store->Read(Key(7), absl::MakeSpan(out));
  ASSERT_TRUE(n.ok() && n->has_value());
  EXPECT_EQ(out, Block(7));
  std::vector<uint8_t> small(100);
  EXPECT_EQ(store->Read(Key(7), absl::MakeSpan(small)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(store->Acquire(Key(99)).value().has_value());
  const StoreStats stats = store->Stats();
  EXPECT_EQ(stats.puts, 10u);
  EXPECT_EQ(stats.tiers[1].hits, 3u);
  EXPECT_EQ(stats.misses, 1u);
  EXPECT_EQ(stats.tiers[1].blocks, 10u);
}

TEST_F(BlockStoreTest, RejectsWhatIsNotAColdBlock) {
  auto store = Open().value();
  std::vector<uint8_t> block = Block(1);
  block[block.size() - 1] ^= 1;  // payload checksum now wrong
  absl::Status st = store->Put(Key(1), block);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("checksum"), std::string::npos) << st;
  EXPECT_EQ(store->LookupChain(1, {kvtier::testing::TestHash(1)}), 0u);
  EXPECT_EQ(store->Put(Key(2), {}).code(), absl::StatusCode::kInvalidArgument);
  std::vector<uint8_t> huge(2u << 20);
  EXPECT_EQ(store->Put(Key(3), huge).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->Stats().tiers[1].used_bytes, 0u) << "rejected puts must not leak slots";
}

TEST_F(BlockStoreTest, DuplicatePutKeepsTheFirst) {
  auto store = Open().value();
  ASSERT_TRUE(store->Put(Key(1), Block(1)).ok());
  ASSERT_TRUE(store->Put(Key(1), Block(1)).ok());
  EXPECT_EQ(store->Stats().duplicate_puts, 1u);
  EXPECT_EQ(store->Stats().tiers[1].blocks, 1u);
  absl::StatusOr<Reservation> r = store->Reserve(Key(1), 4096);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kAlreadyExists);
}

TEST_F(BlockStoreTest, ReservationIsInvisibleUntilCommitAndFreedOnAbort) {
  auto store = Open().value();
  const std::vector<uint8_t> block = Block(5);
  {
    Reservation r = store->Reserve(Key(5), block.size()).value();
    EXPECT_EQ(store->LookupChain(1, {kvtier::testing::TestHash(5)}), 0u);
    EXPECT_FALSE(store->Acquire(Key(5)).value().has_value());
  }  // aborted
  EXPECT_EQ(store->Stats().tiers[1].used_bytes, 0u);
  Reservation r = store->Reserve(Key(5), block.size()).value();
  std::copy(block.begin(), block.end(), r.bytes().begin());
  ASSERT_TRUE(store->Commit(std::move(r)).ok());
  EXPECT_EQ(ExpectBlock(*store, 5), Tier::kHost);
}

TEST_F(BlockStoreTest, HostPressureDemotesToDiskAndReadsVerify) {
  auto store = Open().value();
  // 16 MiB host tier, 40 KiB blocks: 1,000 blocks overflow it several times over.
  for (uint64_t id = 0; id < 1000; ++id) ASSERT_TRUE(store->Put(Key(id), Block(id)).ok()) << id;
  ASSERT_TRUE(store->Flush().ok());
  const StoreStats stats = store->Stats();
  EXPECT_GT(stats.evictions_host_to_disk, 0u);
  EXPECT_LE(stats.tiers[1].used_bytes, stats.tiers[1].capacity_bytes);
  EXPECT_GT(stats.tiers[2].blocks, 0u);
  int from_disk = 0;
  for (uint64_t id = 0; id < 1000; ++id) {
    std::optional<Tier> t = ExpectBlock(*store, id);
    ASSERT_TRUE(t.has_value()) << "block " << id << " lost (disk is big enough for all)";
    from_disk += *t == Tier::kDisk;
  }
  EXPECT_GT(from_disk, 0);
  EXPECT_EQ(store->Stats().checksum_failures, 0u);
}

TEST_F(BlockStoreTest, DiskPressureDropsLeastRecentlyUsed) {
  options_.disk.capacity_bytes = 8ull << 20;  // two 4 MiB files
  auto store = Open().value();
  for (uint64_t id = 0; id < 1200; ++id) ASSERT_TRUE(store->Put(Key(id), Block(id)).ok()) << id;
  ASSERT_TRUE(store->Flush().ok());
  const StoreStats stats = store->Stats();
  EXPECT_GT(stats.evictions_disk_dropped, 0u);
  EXPECT_LE(stats.tiers[2].used_bytes, stats.tiers[2].capacity_bytes);
  // The newest blocks survive; the oldest went first.
  EXPECT_TRUE(ExpectBlock(*store, 1199).has_value());
  EXPECT_FALSE(store->Acquire(Key(0)).value().has_value());
  // Whatever is found has the right bytes.
  for (uint64_t id = 0; id < 1200; id += 7) ExpectBlock(*store, id);
}

// A round drops at most a few hundred blocks under the store's lock, then lets the lock's waiters
// in: thousands of blocks to drop take many rounds, which still go all the way down to the low
// watermark (although the tier is below its high one after the first) and keep the most recently
// used blocks.
TEST_F(BlockStoreTest, HostPressureDropsThousandsOfBlocksInBoundedRounds) {
  options_.disk.dirs.clear();  // no disk tier: the host tier drops
  options_.host.capacity_bytes = 64ull << 20;
  options_.host_watermarks = {0.95, 0.10};
  auto store = Open().value();
  const uint64_t capacity = options_.host.capacity_bytes;
  // Small blocks up to 94% of the tier, then 60 KB ones until one crosses the high watermark.
  constexpr uint32_t kSmall = 4000, kLarge = 60000;
  uint64_t id = 0;
  while (store->Stats().tiers[1].used_bytes < capacity * 94 / 100) {
    for (int k = 0; k < 100; ++k, ++id) ASSERT_TRUE(store->Put(Key(id), Block(id, kSmall)).ok());
  }
  const uint64_t small_blocks = id;
  ASSERT_GT(small_blocks, 10000u);
  while (store->Stats().evictions_host_dropped == 0) {
    ASSERT_LT(id, small_blocks + 100) << "no eviction past the high watermark";
    ASSERT_TRUE(store->Put(Key(id), Block(id, kLarge)).ok());
    ++id;
    ASSERT_TRUE(store->Flush().ok());  // the background thread is done
  }
  const StoreStats stats = store->Stats();
  EXPECT_LE(stats.tiers[1].used_bytes, capacity / 10) << "the drop stopped above the low watermark";
  EXPECT_GT(stats.evictions_host_dropped, 9000u);
  EXPECT_EQ(ExpectBlock(*store, id - 1, kLarge), Tier::kHost);
  EXPECT_FALSE(store->Acquire(Key(0)).value().has_value()) << "the oldest block went first";
}

TEST_F(BlockStoreTest, AdmissionReusedOrDurableDropsColdBlocks) {
  options_.admission = DiskAdmission::kReusedOrDurable;
  auto store = Open().value();
  ASSERT_TRUE(store->Put(Key(0), Block(0)).ok());
  ASSERT_TRUE(ExpectBlock(*store, 0).has_value());  // reused
  for (uint64_t id = 1; id < 800; ++id) ASSERT_TRUE(store->Put(Key(id), Block(id)).ok());
  ASSERT_TRUE(store->Flush().ok());
  const StoreStats stats = store->Stats();
  EXPECT_GT(stats.evictions_host_dropped, 0u);
  EXPECT_EQ(ExpectBlock(*store, 0), Tier::kDisk) << "the reused block was admitted to disk";
  EXPECT_EQ(stats.tiers[2].blocks, 1u);
}

TEST_F(BlockStoreTest, PinnedBlocksStayPut) {
  auto store = Open().value();
  ASSERT_TRUE(store->Put(Key(0), Block(0)).ok());
  std::optional<PinnedBlock> pinned = store->Acquire(Key(0)).value();
  ASSERT_TRUE(pinned.has_value());
  const std::vector<uint8_t> expected = Block(0);
  ASSERT_TRUE(store->Remove(Key(0)).value());
  for (uint64_t id = 1; id < 800; ++id) ASSERT_TRUE(store->Put(Key(id), Block(id)).ok());
  ASSERT_TRUE(store->Flush().ok());
  // Removed and under pressure, but its bytes are intact while pinned.
  EXPECT_TRUE(std::equal(pinned->bytes().begin(), pinned->bytes().end(), expected.begin()));
  EXPECT_EQ(store->Stats().pinned_blocks, 1u);
  pinned.reset();
  EXPECT_EQ(store->Stats().pinned_blocks, 0u);
  EXPECT_FALSE(store->Acquire(Key(0)).value().has_value());
}

TEST_F(BlockStoreTest, NamespaceQuotaEvictsInsideTheNamespace) {
  auto store = Open().value();
  ASSERT_TRUE(store->PutNamespace(7, "tenant-a", 400ull << 10).ok());  // ~9 blocks of 44 KiB
  for (uint64_t id = 0; id < 5; ++id) ASSERT_TRUE(store->Put(Key(id, 8), Block(id)).ok());
  for (uint64_t id = 0; id < 30; ++id) ASSERT_TRUE(store->Put(Key(id, 7), Block(id)).ok());
  const StoreStats stats = store->Stats();
  EXPECT_GT(stats.evictions_quota, 0u);
  for (uint64_t id = 0; id < 5; ++id) {
    EXPECT_TRUE(ExpectBlock(*store, id, 40000, 8).has_value()) << "other namespace untouched";
  }
  EXPECT_TRUE(ExpectBlock(*store, 29, 40000, 7).has_value());
  EXPECT_FALSE(store->Acquire(Key(0, 7)).value().has_value());
  ASSERT_TRUE(store->PutNamespace(9, "tiny", 4096).ok());
  EXPECT_EQ(store->Put(Key(1, 9), Block(1)).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(store->ClearNamespace(8).value().blocks, 5u);
  EXPECT_FALSE(store->Acquire(Key(1, 8)).value().has_value());
}

TEST_F(BlockStoreTest, NamespaceUsageCountsCopiesAndReadsAndClearKeepsParkedPages) {
  auto store = Open().value();
  ASSERT_TRUE(store->PutNamespace(3, "ns-3", 0).ok());
  for (uint64_t id = 0; id < 4; ++id) ASSERT_TRUE(store->Put(Key(id, 3), Block(id)).ok());
  PutOptions silent;  // a parked page
  silent.silent = true;
  ASSERT_TRUE(store->Put(Key(10, 3), Block(10), silent).ok());
  ASSERT_TRUE(store->Put(Key(20, 1), Block(20)).ok());  // another namespace
  constexpr int kHost = static_cast<int>(Tier::kHost);
  constexpr int kDisk = static_cast<int>(Tier::kDisk);
  BlockStore::NamespaceUsage usage = store->UsageOf(3);
  EXPECT_EQ(usage.blocks[kHost], 5u);
  EXPECT_EQ(usage.blocks[kDisk], 0u);
  EXPECT_GE(usage.bytes[kHost], 5u * 40000);
  EXPECT_EQ(usage.bytes[kHost] % 5, 0u) << "five equal slots";
  EXPECT_EQ(usage.hits + usage.misses, 0u);
  EXPECT_GT(usage.last_access_ms, 0u) << "a store is an access";
  // Two hits and a miss in namespace 3; a read of namespace 1 is not its.
  EXPECT_EQ(ExpectBlock(*store, 1, 40000, 3), Tier::kHost);
  EXPECT_EQ(ExpectBlock(*store, 2, 40000, 3), Tier::kHost);
  EXPECT_FALSE(store->Acquire(Key(99, 3)).value().has_value());
  EXPECT_EQ(ExpectBlock(*store, 20, 40000, 1), Tier::kHost);
  usage = store->UsageOf(3);
  EXPECT_EQ(usage.hits, 2u);
  EXPECT_EQ(usage.misses, 1u);
  // A disk copy counts in the disk tier too.
  BlockStore::EvictRequest demote;
  demote.namespaces = {3};
  demote.tier = Tier::kHost;
  demote.max_blocks = 1;
  demote.keep_silent = true;
  ASSERT_EQ(store->Evict(demote).value().demoted_blocks, 1u);
  ASSERT_TRUE(store->Flush().ok());
  usage = store->UsageOf(3);
  EXPECT_EQ(usage.blocks[kHost] + usage.blocks[kDisk], 5u);
  EXPECT_EQ(usage.blocks[kDisk], 1u);
  EXPECT_GT(usage.bytes[kDisk], 0u);
  EXPECT_EQ(store->UsageOf(4).blocks[kHost], 0u) << "an unknown namespace holds nothing";
  // Clear without the silent block: it stays, and the bytes of the rest are reported.
  const BlockStore::ClearReport cleared = store->ClearNamespace(3, false).value();
  EXPECT_EQ(cleared.blocks, 4u);
  EXPECT_EQ(cleared.bytes, usage.bytes[kHost] + usage.bytes[kDisk] - usage.bytes[kHost] / 4);
  EXPECT_EQ(ExpectBlock(*store, 10, 40000, 3), Tier::kHost) << "the parked page stays";
  EXPECT_EQ(store->UsageOf(3).blocks[kHost], 1u);
  EXPECT_EQ(ExpectBlock(*store, 20, 40000, 1), Tier::kHost) << "other namespace untouched";
  EXPECT_EQ(store->ClearNamespace(3).value().blocks, 1u);
}

TEST_F(BlockStoreTest, DurablePutIsOnDiskWhenAcknowledged) {
  auto store = Open().value();
  PutOptions durable;
  durable.durable = true;
  durable.wait_durable = true;
  durable.parent = kvtier::testing::TestHash(99);
  ASSERT_TRUE(store->Put(Key(1), Block(1), durable).ok());
  std::vector<Tier> tiers;
  EXPECT_EQ(store->LookupChain(1, {kvtier::testing::TestHash(1)}, &tiers), 1u);
  EXPECT_EQ(store->Stats().tiers[2].blocks, 1u) << "write-through gave it a disk copy";
  store.reset();
  store = Open().value();  // volatile host tier: only the disk copy survives
  EXPECT_EQ(store->recovery().disk_blocks, 1u);
  EXPECT_EQ(ExpectBlock(*store, 1), Tier::kDisk);
}

TEST_F(BlockStoreTest, DurablePutOfAStoredBlockMakesItDurable) {
  auto store = Open().value();
  ASSERT_TRUE(store->Put(Key(1), Block(1)).ok());  // host only
  PutOptions durable;
  durable.durable = true;
  durable.wait_durable = true;
  ASSERT_TRUE(store->Put(Key(1), Block(1), durable).ok());
  EXPECT_EQ(store->Stats().duplicate_puts, 1u);
  EXPECT_EQ(store->Stats().tiers[2].blocks, 1u) << "the duplicate durable put wrote it through";
  store.reset();
  store = Open().value();
  EXPECT_EQ(ExpectBlock(*store, 1), Tier::kDisk);
}

// The index records the codec the block's header names (FORMAT.md §2, byte 8), read through the
// codec module's parser, not a neighbouring header field.
TEST_F(BlockStoreTest, IndexRecordsTheCodecOfTheBlocksHeader) {
  const std::vector<uint8_t> block = Block(1);
  const codec::ColdBlockHeader header = codec::ParseColdBlockHeader(block).value();
  ASSERT_NE(header.header_bytes & 0xFF, static_cast<int>(header.codec)) << "test needs them apart";
  {
    auto store = Open().value();
    PutOptions durable;
    durable.durable = true;
    durable.wait_durable = true;
    ASSERT_TRUE(store->Put(Key(1), block, durable).ok());
  }
  index::RocksDbIndexOptions index_options;
  index_options.path = options_.index_path;
  index_options.min_free_bytes = 0;
  index_options.reserve_bytes = 0;
  auto index = index::OpenRocksDbBlockIndex(index_options).value();
  int records = 0;
  ASSERT_TRUE(index
                  ->ForEachBlock([&](const index::BlockKey&, const index::BlockRecord& record) {
                    ++records;
                    EXPECT_EQ(record.codec, static_cast<uint8_t>(header.codec));
                    return true;
                  })
                  .ok());
  EXPECT_EQ(records, 1);
}

TEST_F(BlockStoreTest, RestartKeepsDiskDropsVolatileHost) {
  {
    auto store = Open().value();
    for (uint64_t id = 0; id < 600; ++id) ASSERT_TRUE(store->Put(Key(id), Block(id)).ok());
    ASSERT_TRUE(store->Flush().ok());
  }
  auto store = Open().value();
  const RecoveryReport& r = store->recovery();
  EXPECT_GT(r.disk_blocks, 0u) << r.ToString();
  EXPECT_EQ(r.host_blocks, 0u);
  EXPECT_EQ(r.dropped_invalid, 0u);
  uint64_t found = 0;
  for (uint64_t id = 0; id < 600; ++id) found += ExpectBlock(*store, id).has_value();
  EXPECT_EQ(found, r.disk_blocks);
  EXPECT_EQ(store->Stats().checksum_failures, 0u);
}

TEST_F(BlockStoreTest, PersistentHostTierSurvivesRestart) {
  UsePersistentHost();
  {
    auto store = Open().value();
    for (uint64_t id = 0; id < 50; ++id) ASSERT_TRUE(store->Put(Key(id), Block(id)).ok());
    ASSERT_TRUE(store->Flush().ok());
  }
  auto store = Open().value();
  EXPECT_EQ(store->recovery().host_blocks, 50u) << store->recovery().ToString();
  for (uint64_t id = 0; id < 50; ++id) EXPECT_EQ(ExpectBlock(*store, id), Tier::kHost);
  store.reset();
  // A new arena (another capacity) means new memory: its entries must go.
  options_.host.capacity_bytes = 8ull << 20;
  store = Open().value();
  EXPECT_EQ(store->recovery().host_blocks, 0u);
  EXPECT_EQ(store->recovery().dropped_volatile, 50u);
  EXPECT_FALSE(store->Acquire(Key(3)).value().has_value());
}

TEST_F(BlockStoreTest, DemoteAllMovesEverythingToDisk) {
  auto store = Open().value();
  for (uint64_t id = 0; id < 20; ++id) ASSERT_TRUE(store->Put(Key(id), Block(id)).ok());
  ASSERT_TRUE(store->DemoteAll().ok());
  const StoreStats stats = store->Stats();
  EXPECT_EQ(stats.tiers[1].blocks, 0u);
  EXPECT_EQ(stats.tiers[2].blocks, 20u);
  for (uint64_t id = 0; id < 20; ++id) EXPECT_EQ(ExpectBlock(*store, id), Tier::kDisk);
}

// FlushToDisk (kvtierctl drain --flush-to-disk) copies: the host copies stay and are read, the
// disk copies survive a restart, and nothing counts as an eviction.
TEST_F(BlockStoreTest, FlushToDiskCopiesTheHostTierAndCountsNoEviction) {
  auto store = Open().value();
  for (uint64_t id = 0; id < 20; ++id) ASSERT_TRUE(store->Put(Key(id), Block(id)).ok());
  ASSERT_TRUE(store->FlushToDisk().ok());
  StoreStats stats = store->Stats();
  EXPECT_EQ(stats.tiers[1].blocks, 20u);
  EXPECT_EQ(stats.tiers[2].blocks, 20u);
  EXPECT_EQ(stats.blocks_written_to_disk, 20u);
  EXPECT_EQ(stats.evictions_host_to_disk, 0u);
  EXPECT_EQ(stats.evictions_host_copy_freed, 0u);
  EXPECT_EQ(stats.evictions_host_dropped, 0u);
  EXPECT_EQ(stats.evictions_disk_dropped, 0u);
  for (uint64_t id = 0; id < 20; ++id) EXPECT_EQ(ExpectBlock(*store, id), Tier::kHost);
  ASSERT_TRUE(store->FlushToDisk().ok());
  EXPECT_EQ(store->Stats().blocks_written_to_disk, 20u) << "a second flush has nothing to write";
  store.reset();
  store = Open().value();  // a volatile host tier: only the disk copies come back
  stats = store->Stats();
  EXPECT_EQ(stats.tiers[1].blocks, 0u);
  EXPECT_EQ(stats.tiers[2].blocks, 20u);
  for (uint64_t id = 0; id < 20; ++id) EXPECT_EQ(ExpectBlock(*store, id), Tier::kDisk);
}

// A disk tier smaller than the host tier: the flush ends, keeps every host copy, and the disk
// keeps the most recently used blocks (the least recently used are written first and make room
// for the later ones).
TEST_F(BlockStoreTest, FlushToDiskIntoASmallerDiskKeepsTheMostRecentlyUsed) {
  options_.disk.dirs = {dir_->File("disk0")};
  options_.disk.capacity_bytes = 2ull << 20;
  auto store = Open().value();
  constexpr uint64_t kBlocks = 150;  // about 6 MB: three times the disk tier
  for (uint64_t id = 0; id < kBlocks; ++id) ASSERT_TRUE(store->Put(Key(id), Block(id)).ok());
  ASSERT_TRUE(store->FlushToDisk().ok());
  const StoreStats stats = store->Stats();
  EXPECT_EQ(stats.tiers[1].blocks, kBlocks);
  EXPECT_GT(stats.tiers[2].blocks, 0u);
  EXPECT_LT(stats.tiers[2].blocks, kBlocks);
  EXPECT_EQ(
      stats.evictions_host_to_disk + stats.evictions_host_copy_freed + stats.evictions_host_dropped,
      0u);
  EXPECT_EQ(stats.blocks_written_to_disk, kBlocks) << "every block was written once";
  const uint64_t on_disk = stats.tiers[2].blocks;
  store.reset();
  store = Open().value();
  // What survived is the most recent blocks, all of them intact.
  for (uint64_t id = 0; id < kBlocks; ++id) {
    if (id < kBlocks - on_disk) {
      EXPECT_EQ(store->LookupChain(1, {kvtier::testing::TestHash(id)}), 0u) << "block " << id;
    } else {
      EXPECT_EQ(ExpectBlock(*store, id), Tier::kDisk) << "block " << id;
    }
  }
}

TEST_F(BlockStoreTest, ManyThreadsNeverSeeWrongBytes) {
  auto store = Open().value();
  std::atomic<bool> failed{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      for (int i = 0; i < 400 && !failed; ++i) {
        const uint64_t id = rng() % 600;
        const int op = static_cast<int>(rng() % 10);
        if (op < 5) {
          if (!store->Put(Key(id), Block(id)).ok()) failed = true;
        } else if (op < 9) {
          absl::StatusOr<std::optional<PinnedBlock>> p = store->Acquire(Key(id));
          if (!p.ok()) {
            failed = true;
          } else if (p->has_value()) {
            const std::vector<uint8_t> expected = Block(id);
            if (!std::equal((*p)->bytes().begin(), (*p)->bytes().end(), expected.begin(),
                            expected.end())) {
              failed = true;
            }
          }
        } else {
          if (!store->Remove(Key(id)).ok()) failed = true;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_FALSE(failed);
  ASSERT_TRUE(store->Flush().ok());
  const StoreStats stats = store->Stats();
  EXPECT_EQ(stats.checksum_failures, 0u);
  EXPECT_EQ(stats.pinned_blocks, 0u);
}

TEST_F(BlockStoreTest, OptionsAreChecked) {
  options_.host_watermarks.high = 0.5;
  options_.host_watermarks.low = 0.9;
  EXPECT_EQ(Open().status().code(), absl::StatusCode::kInvalidArgument);
  options_.host_watermarks = Watermarks();
  options_.index_path.clear();
  EXPECT_EQ(Open().status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvtier::store
