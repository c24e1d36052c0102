// The BlockFile contract, checked against every implementation: io_uring, the thread pool, the
// in-memory fake, and the fault-injecting wrapper over io_uring with no fault armed. Real files
// live in a TempDir; io_uring cases skip where the kernel refuses a ring.
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "daemon/io/block_file.h"
#include "gtest/gtest.h"
#include "tests/testing/aligned_buffer.h"
#include "tests/testing/fault_injecting_block_file.h"
#include "tests/testing/in_memory_block_file.h"
#include "tests/testing/temp_dir.h"

namespace kvtier::io {
namespace {

using ::kvtier::testing::AlignedBuffer;
using ::kvtier::testing::FaultInjectingBlockFile;
using ::kvtier::testing::FillPattern;
using ::kvtier::testing::FirstPatternMismatch;
using ::kvtier::testing::InMemoryBlockFile;
using ::kvtier::testing::TempDir;

enum class Impl { kUring, kThreadPool, kMemory, kFaultInjectingUring };

std::string ImplName(Impl impl) {
  switch (impl) {
    case Impl::kUring:
      return "Uring";
    case Impl::kThreadPool:
      return "ThreadPool";
    case Impl::kMemory:
      return "Memory";
    case Impl::kFaultInjectingUring:
      return "FaultInjectingUring";
  }
  return "?";
}

constexpr uint32_t kAlignment = 4096;
// The block sizes of the disk tier: a page, one layer's block, a Qwen3-8B NVFP4 cold block.
constexpr uint32_t kBlockSizes[] = {4096, 40960, 1331200};

uint64_t Seed(uint64_t slot, uint64_t generation) { return slot * 1000003 + generation; }

class BlockFileConformanceTest : public ::testing::TestWithParam<Impl> {
 protected:
  void SetUp() override {
    absl::StatusOr<TempDir> dir = TempDir::Create();
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_ = std::make_unique<TempDir>(std::move(dir).value());
    if (GetParam() == Impl::kUring || GetParam() == Impl::kFaultInjectingUring) {
      BlockFileOptions probe;
      probe.path = dir_->File("probe");
      probe.size_bytes = kAlignment;
      probe.engine = IoEngine::kUring;
      absl::StatusOr<std::unique_ptr<BlockFile>> file = OpenBlockFile(probe);
      if (absl::IsUnimplemented(file.status())) {
        GTEST_SKIP() << "the kernel refuses io_uring: " << file.status();
      }
      ASSERT_TRUE(file.ok()) << file.status();
    }
  }

  // Opens (or reopens) the file `name` of `size` bytes with the implementation under test.
  absl::StatusOr<std::unique_ptr<BlockFile>> Open(uint64_t size, const std::string& name = "blocks",
                                                  uint32_t queue_depth = 64) {
    BlockFileOptions options;
    options.path = dir_->File(name);
    options.size_bytes = size;
    options.queue_depth = queue_depth;
    switch (GetParam()) {
      case Impl::kUring:
        options.engine = IoEngine::kUring;
        return OpenBlockFile(options);
      case Impl::kThreadPool:
        options.engine = IoEngine::kThreadPool;
        return OpenBlockFile(options);
      case Impl::kMemory: {
        std::shared_ptr<std::vector<uint8_t>>& storage = memory_files_[options.path];
        if (storage == nullptr) storage = std::make_shared<std::vector<uint8_t>>(size, 0);
        absl::StatusOr<std::unique_ptr<InMemoryBlockFile>> file =
            InMemoryBlockFile::CreateOn(storage);
        if (!file.ok()) return file.status();
        return std::unique_ptr<BlockFile>(std::move(file).value());
      }
      case Impl::kFaultInjectingUring: {
        options.engine = IoEngine::kUring;
        absl::StatusOr<std::unique_ptr<BlockFile>> base = OpenBlockFile(options);
        if (!base.ok()) return base.status();
        return std::unique_ptr<BlockFile>(
            std::make_unique<FaultInjectingBlockFile>(std::move(base).value()));
      }
    }
    return absl::InternalError("unknown implementation");
  }

  std::unique_ptr<TempDir> dir_;
  absl::flat_hash_map<std::string, std::shared_ptr<std::vector<uint8_t>>> memory_files_;
};

TEST_P(BlockFileConformanceTest, ReportsItsShape) {
  absl::StatusOr<std::unique_ptr<BlockFile>> file = Open(16 * kAlignment);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->size_bytes(), 16 * kAlignment);
  EXPECT_EQ((*file)->alignment(), kAlignment);
  const std::string expected[] = {"io_uring", "thread-pool", "memory", "fault-injecting(io_uring)"};
  EXPECT_EQ((*file)->mechanism(), expected[static_cast<int>(GetParam())]);
  if (GetParam() != Impl::kMemory) {
    EXPECT_EQ((*file)->path(), dir_->File("blocks"));
  }
}

// Writes a random set of slots concurrently, then reads them back concurrently, for each block
// size of the disk tier.
TEST_P(BlockFileConformanceTest, WritesThenReadsBackRandomSlots) {
  std::mt19937_64 rng(42);
  for (uint32_t block : kBlockSizes) {
    SCOPED_TRACE(absl::StrCat("block size ", block));
    const uint32_t slots = block <= 40960 ? 128 : 24;
    absl::StatusOr<std::unique_ptr<BlockFile>> file =
        Open(uint64_t{slots} * block, absl::StrCat("blocks-", block));
    ASSERT_TRUE(file.ok()) << file.status();
    std::vector<uint32_t> order(slots);
    for (uint32_t i = 0; i < slots; ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), rng);
    const uint32_t count = slots * 3 / 4;  // leave some slots unwritten

    std::vector<AlignedBuffer> buffers;
    std::vector<IoRequest> writes;
    for (uint32_t i = 0; i < count; ++i) {
      buffers.emplace_back(block);
      FillPattern(buffers.back().span(), Seed(order[i], block));
      writes.push_back(
          IoRequest{IoKind::kWrite, uint64_t{order[i]} * block, buffers.back().data(), block});
    }
    for (const absl::Status& status : (*file)->RunBatch(writes)) ASSERT_TRUE(status.ok()) << status;

    std::vector<IoRequest> reads;
    for (uint32_t i = 0; i < count; ++i) {
      std::fill(buffers[i].data(), buffers[i].data() + block, 0);
      reads.push_back(
          IoRequest{IoKind::kRead, uint64_t{order[i]} * block, buffers[i].data(), block});
    }
    std::shuffle(reads.begin(), reads.end(), rng);
    for (const absl::Status& status : (*file)->RunBatch(reads)) ASSERT_TRUE(status.ok()) << status;
    for (uint32_t i = 0; i < count; ++i) {
      EXPECT_EQ(FirstPatternMismatch(buffers[i].span(), Seed(order[i], block)), -1)
          << "slot " << order[i];
    }
    // An unwritten slot reads back as zeros (preallocated, never written).
    AlignedBuffer untouched(block);
    FillPattern(untouched.span(), 7);
    ASSERT_TRUE((*file)->Read(uint64_t{order[slots - 1]} * block, untouched.span()).ok());
    EXPECT_TRUE(
        std::all_of(untouched.data(), untouched.data() + block, [](uint8_t b) { return b == 0; }));
  }
}

// Eight threads each keep 64 asynchronous requests outstanding at once.
TEST_P(BlockFileConformanceTest, ManyConcurrentSubmitters) {
  constexpr int kThreads = 8;
  constexpr int kPerThread = 64;
  constexpr uint32_t kBlock = 4096;
  absl::StatusOr<std::unique_ptr<BlockFile>> opened =
      Open(uint64_t{kThreads} * kPerThread * kBlock);
  ASSERT_TRUE(opened.ok()) << opened.status();
  BlockFile& file = **opened;
  std::atomic<int> failures{0};

  auto run_phase = [&](IoKind kind) {
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        std::vector<AlignedBuffer> buffers;
        for (int i = 0; i < kPerThread; ++i) buffers.emplace_back(kBlock);
        absl::BlockingCounter remaining(kPerThread);
        for (int i = 0; i < kPerThread; ++i) {
          const uint64_t slot = uint64_t{static_cast<uint64_t>(i)} * kThreads + t;
          if (kind == IoKind::kWrite) FillPattern(buffers[i].span(), Seed(slot, 1));
          file.Submit(IoRequest{kind, slot * kBlock, buffers[i].data(), kBlock},
                      [&](absl::Status status) {
                        if (!status.ok()) failures.fetch_add(1);
                        remaining.DecrementCount();
                      });
        }
        remaining.Wait();
        if (kind == IoKind::kRead) {
          for (int i = 0; i < kPerThread; ++i) {
            const uint64_t slot = uint64_t{static_cast<uint64_t>(i)} * kThreads + t;
            if (FirstPatternMismatch(buffers[i].span(), Seed(slot, 1)) != -1) failures.fetch_add(1);
          }
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
  };
  run_phase(IoKind::kWrite);
  run_phase(IoKind::kRead);
  EXPECT_EQ(failures.load(), 0);
  const BlockFileStats stats = file.stats();
  EXPECT_EQ(stats.writes, uint64_t{kThreads} * kPerThread);
  EXPECT_EQ(stats.reads, uint64_t{kThreads} * kPerThread);
  EXPECT_EQ(stats.in_flight, 0u);
  EXPECT_EQ(stats.queued, 0u);
}

TEST_P(BlockFileConformanceTest, RunBatchReturnsStatusesInRequestOrder) {
  constexpr uint32_t kBlock = 40960;
  absl::StatusOr<std::unique_ptr<BlockFile>> file = Open(8 * kBlock);
  ASSERT_TRUE(file.ok()) << file.status();
  std::vector<AlignedBuffer> buffers;
  for (int i = 0; i < 6; ++i) {
    buffers.emplace_back(kBlock + kAlignment);
    FillPattern(buffers.back().span(), Seed(i, 2));
  }
  const std::vector<IoRequest> batch = {
      {IoKind::kWrite, 0 * kBlock, buffers[0].data(), kBlock},
      {IoKind::kWrite, 1 * kBlock + 512, buffers[1].data(), kBlock},  // misaligned offset
      {IoKind::kWrite, 2 * kBlock, buffers[2].data(), kBlock},
      {IoKind::kWrite, 8 * kBlock, buffers[3].data(), kBlock},  // past the end
      {IoKind::kWrite, 4 * kBlock, buffers[4].data(), 0},       // empty
      {IoKind::kWrite, 5 * kBlock, buffers[5].data(), kBlock},
  };
  const std::vector<absl::Status> statuses = (*file)->RunBatch(batch);
  ASSERT_EQ(statuses.size(), batch.size());
  EXPECT_TRUE(statuses[0].ok()) << statuses[0];
  EXPECT_TRUE(absl::IsInvalidArgument(statuses[1])) << statuses[1];
  EXPECT_TRUE(statuses[2].ok()) << statuses[2];
  EXPECT_TRUE(absl::IsInvalidArgument(statuses[3])) << statuses[3];
  EXPECT_TRUE(absl::IsInvalidArgument(statuses[4])) << statuses[4];
  EXPECT_TRUE(statuses[5].ok()) << statuses[5];
  AlignedBuffer check(kBlock);
  for (int i : {0, 2, 5}) {
    ASSERT_TRUE((*file)->Read(uint64_t(i) * kBlock, check.span()).ok());
    EXPECT_EQ(FirstPatternMismatch(check.span(), Seed(i, 2)), -1) << "slot " << i;
  }
  EXPECT_TRUE((*file)->RunBatch({}).empty());
}

// Each invalid request fails with InvalidArgument, runs its callback exactly once (inline), and
// leaves the file as it was.
TEST_P(BlockFileConformanceTest, RejectsInvalidRequestsWithoutTouchingTheFile) {
  constexpr uint32_t kBlock = 8192;
  constexpr uint64_t kSize = 4 * kBlock;
  absl::StatusOr<std::unique_ptr<BlockFile>> opened = Open(kSize);
  ASSERT_TRUE(opened.ok()) << opened.status();
  BlockFile& file = **opened;
  AlignedBuffer original(kSize);
  FillPattern(original.span(), 11);
  ASSERT_TRUE(file.Write(0, original.span()).ok());

  AlignedBuffer junk(2 * kBlock);
  FillPattern(junk.span(), 99);
  struct Case {
    const char* what;
    uint64_t offset;
    uint8_t* buffer;
    uint32_t length;
    const char* message;  // a fragment the message must contain
  };
  const Case cases[] = {
      {"misaligned offset", kBlock + 512, junk.data(), kBlock, "offset 8704"},
      {"misaligned length", kBlock, junk.data(), kBlock + 512, "length 8704"},
      {"misaligned buffer", kBlock, junk.data() + 512, kBlock, "buffer address"},
      {"zero length", kBlock, junk.data(), 0, "length 0"},
      {"null buffer", kBlock, nullptr, kBlock, "null buffer"},
      {"starts at the end", kSize, junk.data(), kBlock, "past the end"},
      {"runs past the end", kSize - kBlock, junk.data(), 2 * kBlock, "past the end"},
      {"offset overflows", UINT64_MAX - kAlignment + 1, junk.data(), kBlock, "past the end"},
  };
  std::vector<std::unique_ptr<std::atomic<int>>> calls;
  for (const Case& c : cases) {
    for (IoKind kind : {IoKind::kWrite, IoKind::kRead}) {
      SCOPED_TRACE(absl::StrCat(c.what, kind == IoKind::kRead ? " (read)" : " (write)"));
      calls.push_back(std::make_unique<std::atomic<int>>(0));
      std::atomic<int>* count = calls.back().get();
      absl::Status seen;
      file.Submit(IoRequest{kind, c.offset, c.buffer, c.length}, [&seen, count](absl::Status s) {
        seen = std::move(s);
        count->fetch_add(1);
      });
      EXPECT_EQ(count->load(), 1) << "the callback of a rejected request runs inline";
      EXPECT_TRUE(absl::IsInvalidArgument(seen)) << seen;
      EXPECT_NE(seen.message().find(c.message), absl::string_view::npos) << seen;
    }
  }
  AlignedBuffer after(kSize);
  ASSERT_TRUE(file.Read(0, after.span()).ok());
  EXPECT_EQ(FirstPatternMismatch(after.span(), 11), -1);
  ASSERT_TRUE(file.Sync().ok());
  for (const auto& count : calls) EXPECT_EQ(count->load(), 1);
}

TEST_P(BlockFileConformanceTest, SyncMakesWritesDurable) {
  absl::StatusOr<std::unique_ptr<BlockFile>> file = Open(4 * kAlignment);
  ASSERT_TRUE(file.ok()) << file.status();
  AlignedBuffer block(kAlignment);
  FillPattern(block.span(), 5);
  ASSERT_TRUE((*file)->Write(kAlignment, block.span()).ok());
  EXPECT_TRUE((*file)->Sync().ok());
  EXPECT_TRUE((*file)->Sync().ok());  // nothing new: still fine
}

TEST_P(BlockFileConformanceTest, StatsCountEveryOutcome) {
  constexpr uint32_t kBlock = 40960;
  absl::StatusOr<std::unique_ptr<BlockFile>> opened = Open(16 * kBlock);
  ASSERT_TRUE(opened.ok()) << opened.status();
  BlockFile& file = **opened;
  EXPECT_EQ(file.stats().writes, 0u);
  AlignedBuffer block(kBlock);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(file.Write(uint64_t(i) * kBlock, block.span()).ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(file.Read(uint64_t(i) * kBlock, block.span()).ok());
  EXPECT_FALSE(file.Read(16 * kBlock, block.span()).ok());
  EXPECT_FALSE(file.Write(7, block.span()).ok());
  EXPECT_FALSE(file.Write(kBlock, block.span().subspan(0, 100)).ok());

  const BlockFileStats s = file.stats();
  EXPECT_EQ(s.writes, 5u);
  EXPECT_EQ(s.write_bytes, 5u * kBlock);
  EXPECT_EQ(s.reads, 3u);
  EXPECT_EQ(s.read_bytes, 3u * kBlock);
  EXPECT_EQ(s.read_errors, 1u);
  EXPECT_EQ(s.write_errors, 2u);
  EXPECT_EQ(s.in_flight, 0u);
  EXPECT_EQ(s.queued, 0u);
  EXPECT_GE(s.max_in_flight, 1u);
  EXPECT_EQ(s.write_latency.count, 5u);
  EXPECT_EQ(s.read_latency.count, 3u);
  EXPECT_EQ(s.short_transfers, 0u);
}

// Destroying the file with requests queued and in the kernel completes each accepted request once;
// requests that callbacks submit during shutdown complete once too (OK or Unavailable).
TEST_P(BlockFileConformanceTest, DestructionRunsEveryCallbackExactlyOnce) {
  constexpr int kRequests = 256;
  constexpr uint32_t kBlock = 40960;
  std::vector<AlignedBuffer> buffers;
  for (int i = 0; i < kRequests; ++i) {
    buffers.emplace_back(kBlock);
    FillPattern(buffers.back().span(), Seed(i, 3));
  }
  std::vector<std::atomic<int>> calls(kRequests);
  std::vector<std::atomic<int>> follow_up_calls(kRequests);
  std::atomic<int> failures{0};
  std::atomic<int> follow_up_unexpected{0};
  {
    absl::StatusOr<std::unique_ptr<BlockFile>> opened = Open(uint64_t{kRequests} * kBlock);
    ASSERT_TRUE(opened.ok()) << opened.status();
    BlockFile* file = opened->get();
    for (int i = 0; i < kRequests; ++i) {
      file->Submit(IoRequest{IoKind::kWrite, uint64_t(i) * kBlock, buffers[i].data(), kBlock},
                   [&, i, file](absl::Status status) {
                     if (!status.ok()) failures.fetch_add(1);
                     calls[i].fetch_add(1);
                     if (i % 8 != 0) return;
                     // Reads the block back into its own buffer, which the write is done with.
                     file->Submit(
                         IoRequest{IoKind::kRead, uint64_t(i) * kBlock, buffers[i].data(), kBlock},
                         [&, i](absl::Status s) {
                           if (!s.ok() && !absl::IsUnavailable(s)) {
                             follow_up_unexpected.fetch_add(1);
                           }
                           follow_up_calls[i].fetch_add(1);
                         });
                   });
    }
    opened->reset();  // destroy while most requests are still outstanding
  }
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(follow_up_unexpected.load(), 0);
  for (int i = 0; i < kRequests; ++i) {
    EXPECT_EQ(calls[i].load(), 1) << "request " << i;
    EXPECT_EQ(follow_up_calls[i].load(), i % 8 == 0 ? 1 : 0) << "follow-up of request " << i;
  }
  // Every accepted write landed.
  absl::StatusOr<std::unique_ptr<BlockFile>> reopened = Open(uint64_t{kRequests} * kBlock);
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  AlignedBuffer check(kBlock);
  for (int i = 0; i < kRequests; i += 17) {
    ASSERT_TRUE((*reopened)->Read(uint64_t(i) * kBlock, check.span()).ok());
    EXPECT_EQ(FirstPatternMismatch(check.span(), Seed(i, 3)), -1) << "slot " << i;
  }
}

TEST_P(BlockFileConformanceTest, ReopenedFileSeesTheData) {
  constexpr uint32_t kBlock = 1331200;
  constexpr uint64_t kSize = 6ull * kBlock;
  AlignedBuffer block(kBlock);
  {
    absl::StatusOr<std::unique_ptr<BlockFile>> file = Open(kSize);
    ASSERT_TRUE(file.ok()) << file.status();
    for (int i = 0; i < 6; i += 2) {
      FillPattern(block.span(), Seed(i, 4));
      ASSERT_TRUE((*file)->Write(uint64_t(i) * kBlock, block.span()).ok());
    }
    ASSERT_TRUE((*file)->Sync().ok());
  }
  absl::StatusOr<std::unique_ptr<BlockFile>> file = Open(kSize);
  ASSERT_TRUE(file.ok()) << file.status();
  for (int i = 0; i < 6; i += 2) {
    ASSERT_TRUE((*file)->Read(uint64_t(i) * kBlock, block.span()).ok());
    EXPECT_EQ(FirstPatternMismatch(block.span(), Seed(i, 4)), -1) << "slot " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(AllImplementations, BlockFileConformanceTest,
                         ::testing::Values(Impl::kUring, Impl::kThreadPool, Impl::kMemory,
                                           Impl::kFaultInjectingUring),
                         [](const ::testing::TestParamInfo<Impl>& info) {
                           return ImplName(info.param);
                         });

}  // namespace
}  // namespace kvtier::io
