// BlockStore under injected disk faults (FaultInjectingBlockFile around real io_uring files): EIO
// on reads and writes, ENOSPC, torn writes, flipped bits. Each gives the documented status and
// counter, never wrong bytes, and the store keeps serving the other blocks.
#include <cerrno>

#include "daemon/store/block_store.h"
#include "gtest/gtest.h"
#include "tests/testing/fault_injecting_block_file.h"
#include "tests/unit/daemon/store/store_fixture.h"

namespace kvtier::store {
namespace {

using kvtier::testing::FaultInjectingBlockFile;

class BlockStoreFaultTest : public StoreFixture {
 protected:
  void SetUp() override {
    StoreFixture::SetUp();
    options_.disk.open_file =
        [this](const io::BlockFileOptions& o) -> absl::StatusOr<std::unique_ptr<io::BlockFile>> {
      absl::StatusOr<std::unique_ptr<io::BlockFile>> base = io::OpenBlockFile(o);
      if (!base.ok()) return base.status();
      auto wrapped = std::make_unique<FaultInjectingBlockFile>(std::move(*base));
      files_.push_back(wrapped.get());
      return std::unique_ptr<io::BlockFile>(std::move(wrapped));
    };
  }

  // Stores blocks 0..n-1 and moves them all to disk.
  std::unique_ptr<BlockStore> OpenWithBlocksOnDisk(uint64_t n) {
    auto store = Open().value();
    for (uint64_t id = 0; id < n; ++id) EXPECT_TRUE(store->Put(Key(id), Block(id)).ok());
    EXPECT_TRUE(store->DemoteAll().ok());
    EXPECT_EQ(store->Stats().tiers[2].blocks, n);
    return store;
  }

  std::vector<FaultInjectingBlockFile*> files_;  // owned by the store's disk tier
};

TEST_F(BlockStoreFaultTest, ReadErrorIsAMissAndACounter) {
  auto store = OpenWithBlocksOnDisk(10);
  for (auto* f : files_) f->FailNextReads(1, EIO);
  EXPECT_FALSE(ExpectBlock(*store, 0).has_value());
  EXPECT_FALSE(ExpectBlock(*store, 1).has_value());  // one per file: both files armed once
  StoreStats stats = store->Stats();
  EXPECT_EQ(stats.io_errors, 2u);
  EXPECT_EQ(stats.checksum_failures, 0u);
  EXPECT_EQ(store->LookupChain(1, {kvtier::testing::TestHash(0)}), 0u) << "dropped from index";
  for (uint64_t id = 2; id < 10; ++id) EXPECT_EQ(ExpectBlock(*store, id), Tier::kDisk);
}

TEST_F(BlockStoreFaultTest, FlippedBitOnReadIsCaught) {
  auto store = OpenWithBlocksOnDisk(4);
  for (auto* f : files_) f->FlipBitOnRead(5000, 3);  // inside the first slot of each file
  int misses = 0;
  for (uint64_t id = 0; id < 4; ++id) misses += !ExpectBlock(*store, id).has_value();
  EXPECT_GE(misses, 1);
  EXPECT_EQ(store->Stats().checksum_failures, static_cast<uint64_t>(misses));
}

TEST_F(BlockStoreFaultTest, CorruptStoredBlockIsFoundByVerify) {
  auto store = OpenWithBlocksOnDisk(6);
  ASSERT_TRUE(files_[0]->CorruptStoredBit(100, 0).ok());  // a header byte of file 0's first slot
  BlockStore::VerifyReport report = store->Verify().value();
  EXPECT_EQ(report.blocks, 6u);
  EXPECT_EQ(report.failed, 1u);
  EXPECT_EQ(store->Stats().checksum_failures, 1u);
  report = store->Verify().value();
  EXPECT_EQ(report.blocks, 5u);
  EXPECT_EQ(report.failed, 0u);
}

TEST_F(BlockStoreFaultTest, WriteErrorFailsADurablePutButKeepsTheBlock) {
  auto store = Open().value();
  for (auto* f : files_) f->FailNextWrites(1, EIO);
  PutOptions durable;
  durable.durable = true;
  durable.wait_durable = true;
  absl::Status st = store->Put(Key(1), Block(1), durable);
  EXPECT_FALSE(st.ok());
  EXPECT_GE(store->Stats().io_errors, 1u);
  EXPECT_EQ(ExpectBlock(*store, 1), Tier::kHost) << "the host copy stays readable";
  for (auto* f : files_) f->ClearFaults();
  EXPECT_TRUE(store->Put(Key(2), Block(2), durable).ok());
  EXPECT_EQ(ExpectBlock(*store, 2), Tier::kHost);
}

TEST_F(BlockStoreFaultTest, DiskFullIsResourceExhaustedAndTheStoreGoesOn) {
  auto store = Open().value();
  for (auto* f : files_) f->FailNextWrites(1000, ENOSPC);
  PutOptions durable;
  durable.durable = true;
  durable.wait_durable = true;
  EXPECT_EQ(store->Put(Key(1), Block(1), durable).code(), absl::StatusCode::kResourceExhausted);
  // Host pressure with a failing disk: demotions fail, blocks are dropped, puts go on.
  for (uint64_t id = 10; id < 700; ++id) ASSERT_TRUE(store->Put(Key(id), Block(id)).ok()) << id;
  ASSERT_TRUE(store->Flush().ok());
  StoreStats stats = store->Stats();
  EXPECT_GT(stats.io_errors, 0u);
  EXPECT_GT(stats.evictions_host_dropped, 0u);
  EXPECT_EQ(stats.tiers[2].used_bytes, 0u) << "failed writes must not leak disk slots";
  EXPECT_TRUE(ExpectBlock(*store, 699).has_value());
}

TEST_F(BlockStoreFaultTest, TornWriteOnALyingDeviceIsNeverReturned) {
  auto store = Open().value();
  ASSERT_TRUE(store->Put(Key(1), Block(1)).ok());
  for (auto* f : files_) f->TearNextWrite(4096, /*err=*/0);  // reports OK, keeps 4 KiB
  ASSERT_TRUE(store->DemoteAll().ok());
  EXPECT_FALSE(ExpectBlock(*store, 1).has_value());
  EXPECT_EQ(store->Stats().checksum_failures, 1u);
}

TEST_F(BlockStoreFaultTest, WritesLostInACrashAreNotServedAfterRestart) {
  {
    auto store = Open().value();
    for (uint64_t id = 0; id < 5; ++id) ASSERT_TRUE(store->Put(Key(id), Block(id)).ok());
    for (auto* f : files_) f->SetCrashPoint(0);  // every later write vanishes
    ASSERT_TRUE(store->DemoteAll().ok());
  }
  files_.clear();
  auto store = Open().value();
  EXPECT_EQ(store->recovery().disk_blocks, 5u);
  for (uint64_t id = 0; id < 5; ++id) EXPECT_FALSE(ExpectBlock(*store, id).has_value());
  EXPECT_EQ(store->Stats().checksum_failures, 5u);
}

}  // namespace
}  // namespace kvtier::store
