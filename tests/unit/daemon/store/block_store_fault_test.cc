// BlockStore under injected disk faults (FaultInjectingBlockFile around real io_uring files): EIO
// on reads and writes, ENOSPC, torn writes, flipped bits. Each gives the documented status and
// counter, never wrong bytes, and the store keeps serving the other blocks. A block that fails
// verification when read is DataLoss naming it once (it is removed), a miss afterwards.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>

#include "absl/strings/escaping.h"
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

  // Reads block `id`: true when the read is DataLoss naming the block (its hash in hex) and
  // containing `why`.
  static bool ExpectDataLoss(BlockStore& store, uint64_t id, const std::string& why = "") {
    absl::StatusOr<std::optional<PinnedBlock>> pinned = store.Acquire(Key(id));
    EXPECT_EQ(pinned.status().code(), absl::StatusCode::kDataLoss)
        << "block " << id << ": " << (pinned.ok() ? "read" : pinned.status().ToString());
    if (pinned.status().code() != absl::StatusCode::kDataLoss) return false;
    const std::string hex = absl::BytesToHexString(
        absl::string_view(reinterpret_cast<const char*>(Key(id).hash.data()), Key(id).hash.size()));
    EXPECT_NE(pinned.status().message().find(hex), absl::string_view::npos) << pinned.status();
    EXPECT_NE(pinned.status().message().find(why), absl::string_view::npos) << pinned.status();
    return true;
  }

  std::vector<FaultInjectingBlockFile*> files_;  // owned by the store's disk tier
};

TEST_F(BlockStoreFaultTest, ReadErrorIsDataLossAndACounter) {
  auto store = OpenWithBlocksOnDisk(10);
  for (auto* f : files_) f->FailNextReads(1, EIO);
  EXPECT_TRUE(ExpectDataLoss(*store, 0, "could not be read"));
  EXPECT_TRUE(ExpectDataLoss(*store, 1));  // one per file: both files armed once
  StoreStats stats = store->Stats();
  EXPECT_EQ(stats.io_errors, 2u);
  EXPECT_EQ(stats.checksum_failures, 0u);
  EXPECT_EQ(store->LookupChain(1, {kvtier::testing::TestHash(0)}), 0u) << "dropped from index";
  EXPECT_FALSE(ExpectBlock(*store, 0).has_value()) << "once removed, a miss";
  for (uint64_t id = 2; id < 10; ++id) EXPECT_EQ(ExpectBlock(*store, id), Tier::kDisk);
}

TEST_F(BlockStoreFaultTest, FlippedBitOnReadIsDataLossNamingTheBlock) {
  auto store = OpenWithBlocksOnDisk(4);
  for (auto* f : files_) f->FlipBitOnRead(5000, 3);  // inside the first slot of each file
  int lost = 0;
  for (uint64_t id = 0; id < 4; ++id) {
    absl::StatusOr<std::optional<PinnedBlock>> pinned = store->Acquire(Key(id));
    if (pinned.ok()) {
      EXPECT_TRUE(pinned->has_value()) << "block " << id << " was stored";
      continue;
    }
    EXPECT_EQ(pinned.status().code(), absl::StatusCode::kDataLoss) << pinned.status();
    EXPECT_NE(pinned.status().message().find("checksum"), absl::string_view::npos)
        << pinned.status();
    ++lost;
    EXPECT_EQ(store->LookupChain(1, {Key(id).hash}), 0u) << "dropped from the index";
    EXPECT_FALSE(store->Acquire(Key(id)).value().has_value()) << "a miss once dropped";
  }
  EXPECT_GE(lost, 1);
  const StoreStats stats = store->Stats();
  EXPECT_EQ(stats.checksum_failures, static_cast<uint64_t>(lost));
  EXPECT_EQ(stats.tiers[2].checksum_failures, static_cast<uint64_t>(lost)) << "disk copies";
  EXPECT_EQ(stats.tiers[1].checksum_failures, 0u);
}

TEST_F(BlockStoreFaultTest, ReadIsDataLossToo) {
  auto store = OpenWithBlocksOnDisk(2);
  for (auto* f : files_) f->FlipBitOnRead(5000, 3);
  std::vector<uint8_t> out(Block(0).size());
  int lost = 0;
  for (uint64_t id = 0; id < 2; ++id) {
    absl::StatusOr<std::optional<uint64_t>> n = store->Read(Key(id), absl::MakeSpan(out));
    if (!n.ok()) {
      EXPECT_EQ(n.status().code(), absl::StatusCode::kDataLoss) << n.status();
      ++lost;
    }
  }
  EXPECT_GE(lost, 1);
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
  EXPECT_TRUE(ExpectDataLoss(*store, 1));
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
  for (uint64_t id = 0; id < 5; ++id) EXPECT_TRUE(ExpectDataLoss(*store, id));
  EXPECT_EQ(store->Stats().checksum_failures, 5u);
}

// A persistent host tier's blocks are verified on their first read after a restart: one whose
// memory changed meanwhile is DataLoss, counted against the host tier.
TEST_F(BlockStoreFaultTest, ACorruptPersistentHostBlockIsDataLossCountedForTheHostTier) {
  UsePersistentHost();
  {
    auto store = Open().value();
    for (uint64_t id = 0; id < 3; ++id) ASSERT_TRUE(store->Put(Key(id), Block(id)).ok());
    ASSERT_TRUE(store->Flush().ok());
  }
  // Flip a byte 2000 bytes into block 1's copy in the arena file.
  const std::string arena = dir_->File("host-arena");
  const int fd = open(arena.c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << arena;
  std::vector<uint8_t> bytes(std::filesystem::file_size(arena));
  ASSERT_EQ(pread(fd, bytes.data(), bytes.size(), 0), static_cast<ssize_t>(bytes.size()));
  const std::vector<uint8_t> want = Block(1);
  auto at = std::search(bytes.begin(), bytes.end(), want.begin(), want.begin() + 4096);
  ASSERT_NE(at, bytes.end());
  const off_t off = (at - bytes.begin()) + 2000;
  const uint8_t flipped = bytes[static_cast<size_t>(off)] ^ 0x40;
  ASSERT_EQ(pwrite(fd, &flipped, 1, off), 1);
  close(fd);

  auto store = Open().value();
  EXPECT_EQ(ExpectBlock(*store, 0), Tier::kHost);
  EXPECT_TRUE(ExpectDataLoss(*store, 1, "host copy"));
  EXPECT_EQ(ExpectBlock(*store, 2), Tier::kHost);
  const StoreStats stats = store->Stats();
  EXPECT_EQ(stats.checksum_failures, 1u);
  EXPECT_EQ(stats.tiers[1].checksum_failures, 1u);
  EXPECT_EQ(stats.tiers[2].checksum_failures, 0u);
}

}  // namespace
}  // namespace kvtier::store
