// FaultInjectingBlockFile over a real file (io_uring, or the thread pool where the kernel refuses
// it) and over the in-memory fake: each injected fault surfaces with the status code BlockFile
// documents, hits only what it targets, and leaves every other block working.
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "daemon/io/block_file.h"
#include "gtest/gtest.h"
#include "tests/testing/aligned_buffer.h"
#include "tests/testing/fault_injecting_block_file.h"
#include "tests/testing/in_memory_block_file.h"
#include "tests/testing/temp_dir.h"

namespace kvtier::testing {
namespace {

using io::BlockFile;
using io::IoKind;
using io::IoRequest;

constexpr uint32_t kBlock = 40960;
constexpr int kSlots = 8;

enum class Base { kFile, kMemory };

class FaultInjectionTest : public ::testing::TestWithParam<Base> {
 protected:
  void SetUp() override {
    std::unique_ptr<BlockFile> base;
    if (GetParam() == Base::kFile) {
      absl::StatusOr<TempDir> dir = TempDir::Create();
      ASSERT_TRUE(dir.ok()) << dir.status();
      dir_ = std::make_unique<TempDir>(std::move(dir).value());
      io::BlockFileOptions options;
      options.path = dir_->File("blocks");
      options.size_bytes = uint64_t{kSlots} * kBlock;
      absl::StatusOr<std::unique_ptr<BlockFile>> file = io::OpenBlockFile(options);
      ASSERT_TRUE(file.ok()) << file.status();
      base = std::move(file).value();
    } else {
      absl::StatusOr<std::unique_ptr<InMemoryBlockFile>> file =
          InMemoryBlockFile::Create(uint64_t{kSlots} * kBlock);
      ASSERT_TRUE(file.ok()) << file.status();
      base = std::move(file).value();
    }
    base_mechanism_ = base->mechanism();
    file_ = std::make_unique<FaultInjectingBlockFile>(std::move(base));
    // Every slot starts with its own pattern (generation 0).
    for (int slot = 0; slot < kSlots; ++slot) ASSERT_TRUE(WriteSlot(slot, 0).ok());
  }

  static uint64_t Seed(int slot, int generation) { return uint64_t(slot) * 131 + generation; }

  absl::Status WriteSlot(int slot, int generation) {
    AlignedBuffer buffer(kBlock);
    FillPattern(buffer.span(), Seed(slot, generation));
    return file_->Write(uint64_t(slot) * kBlock, buffer.span());
  }

  // Reads `slot` through the wrapper into `out`.
  absl::Status ReadSlot(int slot, AlignedBuffer& out) {
    return file_->Read(uint64_t(slot) * kBlock, out.span());
  }

  // Expects `slot` to read back as generation `generation`.
  void ExpectSlot(int slot, int generation) {
    AlignedBuffer buffer(kBlock);
    ASSERT_TRUE(ReadSlot(slot, buffer).ok()) << "slot " << slot;
    EXPECT_EQ(FirstPatternMismatch(buffer.span(), Seed(slot, generation)), -1) << "slot " << slot;
  }

  // Every slot except `skip` still reads and writes.
  void ExpectOtherSlotsWork(int skip) {
    for (int slot = 0; slot < kSlots; ++slot) {
      if (slot == skip) continue;
      ASSERT_TRUE(WriteSlot(slot, 9).ok()) << "slot " << slot;
      ExpectSlot(slot, 9);
    }
  }

  std::unique_ptr<TempDir> dir_;
  std::string base_mechanism_;
  std::unique_ptr<FaultInjectingBlockFile> file_;
};

TEST_P(FaultInjectionTest, NamesItsBase) {
  EXPECT_EQ(file_->mechanism(), "fault-injecting(" + base_mechanism_ + ")");
}

TEST_P(FaultInjectionTest, ReadEioIsDataLoss) {
  file_->FailNextReads(1, EIO);
  AlignedBuffer buffer(kBlock);
  const absl::Status status = ReadSlot(3, buffer);
  EXPECT_TRUE(absl::IsDataLoss(status)) << status;
  EXPECT_NE(status.message().find("EIO"), absl::string_view::npos) << status;
  EXPECT_EQ(file_->injected().failed_reads, 1u);
  EXPECT_EQ(file_->stats().read_errors, 1u);
  ExpectSlot(3, 0);  // only one read was armed
  ExpectOtherSlotsWork(-1);
}

TEST_P(FaultInjectionTest, WriteEioIsInternalAndWritesNothing) {
  file_->FailNextWrites(1, EIO);
  const absl::Status status = WriteSlot(2, 1);
  EXPECT_TRUE(absl::IsInternal(status)) << status;
  ExpectSlot(2, 0);
  EXPECT_EQ(file_->injected().failed_writes, 1u);
  EXPECT_EQ(file_->stats().write_errors, 1u);
  ExpectOtherSlotsWork(-1);
}

TEST_P(FaultInjectionTest, EnospcIsResourceExhausted) {
  file_->FailNextWrites(2, ENOSPC);
  EXPECT_TRUE(absl::IsResourceExhausted(WriteSlot(1, 1)));
  EXPECT_TRUE(absl::IsResourceExhausted(WriteSlot(1, 1)));
  ASSERT_TRUE(WriteSlot(1, 1).ok());
  ExpectSlot(1, 1);
  ExpectOtherSlotsWork(1);
}

TEST_P(FaultInjectionTest, FailedRangeHitsOnlyOverlappingRequests) {
  file_->FailRange(uint64_t{5} * kBlock + 4096, 100, EIO);
  AlignedBuffer buffer(kBlock);
  EXPECT_TRUE(absl::IsDataLoss(ReadSlot(5, buffer)));
  EXPECT_TRUE(absl::IsInternal(WriteSlot(5, 1)));
  ExpectOtherSlotsWork(5);
  file_->ClearFaults();
  ExpectSlot(5, 0);
  EXPECT_EQ(file_->injected().failed_reads, 1u);
  EXPECT_EQ(file_->injected().failed_writes, 1u);
}

TEST_P(FaultInjectionTest, ReadOnlyRangeLetsWritesThrough) {
  file_->FailRange(uint64_t{6} * kBlock, kBlock, EIO, FaultTarget::kReads);
  ASSERT_TRUE(WriteSlot(6, 1).ok());
  AlignedBuffer buffer(kBlock);
  EXPECT_TRUE(absl::IsDataLoss(ReadSlot(6, buffer)));
  file_->ClearFaults();
  ExpectSlot(6, 1);
}

TEST_P(FaultInjectionTest, TornWriteLeavesOnlyThePrefix) {
  file_->TearNextWrite(8192 + 100, EIO);  // rounds down to 8192 bytes
  EXPECT_TRUE(absl::IsInternal(WriteSlot(4, 1)));
  AlignedBuffer now(kBlock);
  ASSERT_TRUE(ReadSlot(4, now).ok());
  AlignedBuffer old_data(kBlock);
  AlignedBuffer new_data(kBlock);
  FillPattern(old_data.span(), Seed(4, 0));
  FillPattern(new_data.span(), Seed(4, 1));
  EXPECT_TRUE(std::equal(now.data(), now.data() + 8192, new_data.data()));
  EXPECT_TRUE(std::equal(now.data() + 8192, now.data() + kBlock, old_data.data() + 8192));
  EXPECT_EQ(file_->injected().torn_writes, 1u);
  ExpectOtherSlotsWork(-1);
}

TEST_P(FaultInjectionTest, LyingTornWriteReportsSuccess) {
  file_->TearNextWrite(4096, /*err=*/0);
  ASSERT_TRUE(WriteSlot(0, 1).ok());
  AlignedBuffer now(kBlock);
  ASSERT_TRUE(ReadSlot(0, now).ok());
  AlignedBuffer old_data(kBlock);
  FillPattern(old_data.span(), Seed(0, 0));
  EXPECT_EQ(FirstPatternMismatch(now.span().subspan(0, 4096), Seed(0, 1)), -1);
  EXPECT_TRUE(std::equal(now.data() + 4096, now.data() + kBlock, old_data.data() + 4096));
}

TEST_P(FaultInjectionTest, BitFlipIsVisibleInReadData) {
  const uint64_t byte = uint64_t{2} * kBlock + 1000;
  file_->FlipBitOnRead(byte, 3);
  AlignedBuffer flipped(kBlock);
  ASSERT_TRUE(ReadSlot(2, flipped).ok());
  AlignedBuffer expected(kBlock);
  FillPattern(expected.span(), Seed(2, 0));
  EXPECT_EQ(flipped.data()[1000], expected.data()[1000] ^ 0x08);
  flipped.data()[1000] ^= 0x08;
  EXPECT_EQ(FirstPatternMismatch(flipped.span(), Seed(2, 0)), -1) << "only that bit differs";
  EXPECT_EQ(file_->injected().flipped_reads, 1u);
  ExpectSlot(1, 0);  // other blocks read clean
  file_->ClearFaults();
  ExpectSlot(2, 0);  // the stored bytes were never changed
}

TEST_P(FaultInjectionTest, CorruptedStoredBitPersists) {
  const uint64_t byte = uint64_t{7} * kBlock + 12345;
  ASSERT_TRUE(file_->CorruptStoredBit(byte, 6).ok());
  AlignedBuffer now(kBlock);
  ASSERT_TRUE(file_->base().Read(uint64_t{7} * kBlock, now.span()).ok());
  EXPECT_EQ(FirstPatternMismatch(now.span(), Seed(7, 0)), 12345);
  EXPECT_TRUE(absl::IsInvalidArgument(file_->CorruptStoredBit(uint64_t{kSlots} * kBlock, 0)));
  ExpectOtherSlotsWork(7);
}

TEST_P(FaultInjectionTest, WritesAfterTheCrashPointAreDropped) {
  file_->SetCrashPoint(2);
  for (int slot = 0; slot < 4; ++slot) ASSERT_TRUE(WriteSlot(slot, 1).ok()) << "slot " << slot;
  EXPECT_TRUE(file_->crashed());
  EXPECT_EQ(file_->injected().dropped_writes, 2u);
  ExpectSlot(0, 1);
  ExpectSlot(1, 1);
  ExpectSlot(2, 0);
  ExpectSlot(3, 0);
  file_->ClearFaults();
  EXPECT_FALSE(file_->crashed());
  ASSERT_TRUE(WriteSlot(3, 1).ok());
  ExpectSlot(3, 1);
}

TEST_P(FaultInjectionTest, InvalidRequestsStillFailAsInvalid) {
  file_->FailNextWrites(1, EIO);
  AlignedBuffer buffer(kBlock);
  EXPECT_TRUE(absl::IsInvalidArgument(file_->Write(100, buffer.span())));
  EXPECT_TRUE(absl::IsInternal(WriteSlot(0, 1)));  // the armed fault was not used up
}

INSTANTIATE_TEST_SUITE_P(Bases, FaultInjectionTest, ::testing::Values(Base::kFile, Base::kMemory),
                         [](const ::testing::TestParamInfo<Base>& info) {
                           return info.param == Base::kFile ? "File" : "Memory";
                         });

}  // namespace
}  // namespace kvtier::testing
