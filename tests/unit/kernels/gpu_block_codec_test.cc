// GpuBlockCodec, the one GPU codec of the store's GPU tier and the engine pools' data plane: what
// it refuses in every build (layouts that are not flat, raw rows with stride gaps, anything
// without CUDA), and on a device, blocks byte-identical to the CPU codec's and pages decoded as
// the CPU decodes them, through both faces: per page on the caller's stream (CreateFused) and
// batched on the codec's streams (Create: chunked encode with events, the encode sealed on the
// device through its ring, direct and staged decode), with CheckBlock refusing another plan's
// blocks.
#include "kernels/gpu_block_codec.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "codec/codec.h"
#include "codec/cold_block.h"
#include "codec/dtype.h"
#include "gtest/gtest.h"
#include "kernels/device.h"
#include "tests/unit/kernels/gpu_buffer.h"

namespace kvtier::kernels {
namespace {

codec::PageLayout Gqa(uint32_t tokens = 32) {
  return codec::BuildGqaLayout({2, 4, 128, tokens, codec::DType::kBf16, 0, 64}).value();
}

// Rows 144 elements apart (stride gaps), buffers still back to back: flat, but not raw-copyable.
codec::PageLayout Strided() {
  codec::PageLayout layout = Gqa();
  uint64_t offset = 0;
  for (codec::BufferSpec& b : layout.buffers) {
    b.row_stride = 144;
    b.offset_bytes = offset;
    offset += layout.Rows(b) * b.RowStride() * codec::DTypeBytes(b.dtype);
  }
  layout.pools[0].slot_bytes = offset;
  return layout;
}

// Buffer 0, a 64-byte gap, then the others back to back: not flat.
codec::PageLayout Gapped() {
  codec::PageLayout layout = Gqa();
  for (size_t i = 1; i < layout.buffers.size(); ++i) layout.buffers[i].offset_bytes += 64;
  layout.pools[0].slot_bytes += 64;
  return layout;
}

codec::BlockPlan Plan(const codec::PageLayout& layout, const char* spec) {
  return codec::MakeBlockPlan(layout, codec::CodecSpec::Parse(spec).value()).value();
}

bool HaveDevice() {
  auto devices = ListDevices();
  return devices.ok() && !devices->empty();
}

TEST(IsFlatLayoutTest, BuffersBackToBackInOnePool) {
  EXPECT_TRUE(IsFlatLayout(Gqa()));
  EXPECT_TRUE(IsFlatLayout(Strided()));
  EXPECT_FALSE(IsFlatLayout(Gapped()));
  codec::PageLayout small = Gqa();
  small.pools[0].slot_bytes = codec::FlatPageBytes(small) - 1;
  EXPECT_FALSE(IsFlatLayout(small));
  codec::PageLayout two_pools = Gqa();
  two_pools.pools.push_back(two_pools.pools[0]);
  EXPECT_FALSE(IsFlatLayout(two_pools));
}

TEST(GpuBlockCodecTest, PoolsNeedFlatLayoutsInEveryBuild) {
  absl::StatusOr<std::unique_ptr<GpuBlockCodec>> codec =
      GpuBlockCodec::Create(Plan(Gapped(), "nvfp4"), 0);
  EXPECT_TRUE(absl::IsInvalidArgument(codec.status())) << codec.status();
  EXPECT_NE(codec.status().message().find("flat layout"), std::string::npos) << codec.status();
}

TEST(GpuBlockCodecTest, RawNeedsRowsWithoutStrideGaps) {
  absl::StatusOr<std::unique_ptr<GpuBlockCodec>> codec =
      GpuBlockCodec::Create(Plan(Strided(), "raw"), 0);
  EXPECT_TRUE(absl::IsUnimplemented(codec.status())) << codec.status();
  EXPECT_NE(codec.status().message().find("stride gaps"), std::string::npos) << codec.status();
}

TEST(GpuBlockCodecTest, TheGpuTierTakesFusedCodecsOnly) {
  // Raw is the kernels' refusal (BatchedCopier copies raw pages), in every build.
  EXPECT_TRUE(absl::IsUnimplemented(GpuBlockCodec::CreateFused(Plan(Gqa(), "raw")).status()));
}

TEST(GpuBlockCodecTest, UnimplementedWithoutCuda) {
  if (BuiltWithCuda()) GTEST_SKIP() << "built with CUDA";
  for (const char* spec : {"raw", "nvfp4", "nvfp4x2"}) {
    EXPECT_TRUE(absl::IsUnimplemented(GpuBlockCodec::Create(Plan(Gqa(), spec), 0).status()))
        << spec;
  }
  EXPECT_TRUE(absl::IsUnimplemented(GpuBlockCodec::CreateFused(Plan(Gqa(), "nvfp4")).status()));
}

// Flat BF16 pages of N(0, sigma) values, sigma by page (1e-3 .. 1e3).
std::vector<uint8_t> MakePages(const codec::PageLayout& layout, size_t pages) {
  const uint64_t page_bytes = codec::FlatPageBytes(layout);
  std::vector<uint8_t> out(page_bytes * pages);
  std::mt19937_64 rng(pages);
  for (size_t p = 0; p < pages; ++p) {
    std::normal_distribution<float> normal(0.0f, std::pow(10.0f, static_cast<float>(p % 7) - 3));
    codec::HotPageView view =
        codec::FlatPageView(layout, absl::MakeConstSpan(out).subspan(p * page_bytes, page_bytes));
    for (size_t i = 0; i < layout.buffers.size(); ++i) {
      const codec::BufferSpec& b = layout.buffers[i];
      auto* base = const_cast<uint8_t*>(view.base[i]);
      for (uint64_t e = 0; e < layout.Rows(b) * b.RowStride(); ++e) {
        codec::StoreFromFloat(b.dtype, normal(rng), base, e);
      }
    }
  }
  return out;
}

// The CPU codec's blocks of `pages` and its decode of them.
struct Reference {
  std::vector<uint8_t> blocks;
  std::vector<uint8_t> decoded;
};
Reference CpuReference(const codec::BlockPlan& plan, const std::vector<uint8_t>& pages) {
  auto cpu = codec::Codec::Create(plan.layout, plan.spec).value();
  const uint64_t page_bytes = codec::FlatPageBytes(plan.layout);
  const size_t n = pages.size() / page_bytes;
  Reference r{std::vector<uint8_t>(n * plan.block_bytes), std::vector<uint8_t>(pages.size())};
  for (size_t p = 0; p < n; ++p) {
    auto block = absl::MakeSpan(r.blocks).subspan(p * plan.block_bytes, plan.block_bytes);
    EXPECT_TRUE(cpu->Encode(codec::FlatPageView(plan.layout, absl::MakeConstSpan(pages).subspan(
                                                                 p * page_bytes, page_bytes)),
                            block)
                    .ok());
    EXPECT_TRUE(
        cpu->Decode(block, codec::FlatPageView(plan.layout, absl::MakeSpan(r.decoded).subspan(
                                                                p * page_bytes, page_bytes)))
            .ok());
  }
  return r;
}

// Hot pages in device memory, blocks in mapped pinned host memory (as the daemon's host tier).
struct Areas {
  std::unique_ptr<GpuBuffer> hot;
  std::unique_ptr<GpuBuffer> cold;
  std::vector<const uint8_t*> pages;
  std::vector<uint8_t*> mutable_pages;
  std::vector<uint8_t*> blocks;
  std::vector<const uint8_t*> const_blocks;
};
Areas MakeAreas(const GpuBlockCodec& codec, size_t n) {
  Areas a;
  a.hot = GpuBuffer::Allocate(GpuBuffer::Kind::kDevice, n * codec.page_bytes()).value();
  a.cold = GpuBuffer::Allocate(GpuBuffer::Kind::kMappedHost, n * codec.plan().block_bytes).value();
  for (size_t p = 0; p < n; ++p) {
    a.mutable_pages.push_back(a.hot->data() + p * codec.page_bytes());
    a.pages.push_back(a.mutable_pages.back());
    a.blocks.push_back(a.cold->data() + p * codec.plan().block_bytes);
    a.const_blocks.push_back(a.blocks.back());
  }
  return a;
}

std::vector<uint8_t> Blocks(const Areas& a, size_t bytes) {
  return std::vector<uint8_t>(a.cold->data(), a.cold->data() + bytes);
}

class PoolCodecTest : public ::testing::TestWithParam<const char*> {};

TEST_P(PoolCodecTest, ChunkedEncodeAndBothDecodesMatchTheCpuCodec) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  // Enough pages of 128 tokens for a staged decode of the nvfp4 codecs.
  const codec::BlockPlan plan = Plan(Gqa(128), GetParam());
  auto codec = GpuBlockCodec::Create(plan, 0);
  ASSERT_TRUE(codec.ok()) << codec.status();
  const size_t n =
      GpuNvfp4Codec::kStagedMinSlices * GpuNvfp4Codec::kSliceBytes / plan.block_bytes + 3;
  const std::vector<uint8_t> pages = MakePages(plan.layout, n);
  const Reference ref = CpuReference(plan, pages);
  Areas a = MakeAreas(**codec, n);
  ASSERT_TRUE(a.hot->Write(pages).ok());
  ASSERT_TRUE(a.cold->Fill(0xA5).ok());

  std::vector<void*> done;
  ASSERT_TRUE((*codec)->EncodeChunks(a.pages, a.blocks, 8, &done).ok());
  ASSERT_EQ(done.size(), (n + 7) / 8);
  for (size_t c = 0; c < done.size(); ++c) {
    ASSERT_TRUE(WaitEvent(done[c]).ok());
    for (size_t k = c * 8; k < std::min(n, (c + 1) * 8); ++k) (*codec)->Seal(a.blocks[k]);
    DestroyEvent(done[c]);
  }
  EXPECT_TRUE(Blocks(a, ref.blocks.size()) == ref.blocks) << "blocks differ from the CPU codec's";
  for (const uint8_t* block : a.const_blocks) {
    EXPECT_TRUE((*codec)->CheckBlock({block, plan.block_bytes}).ok());
  }

  EXPECT_EQ((*codec)->Staged(n), plan.spec.codec != codec::CodecId::kRaw);
  EXPECT_FALSE((*codec)->Staged(1));
  for (bool staged : {false, (*codec)->Staged(n)}) {
    ASSERT_TRUE(a.hot->Fill(0x5A).ok());
    ASSERT_TRUE((*codec)->DecodeAsync(a.const_blocks, a.mutable_pages, staged).ok());
    ASSERT_TRUE((*codec)->Wait().ok());
    EXPECT_TRUE(a.hot->Read().value() == ref.decoded) << "staged " << staged;
  }
}

TEST_P(PoolCodecTest, BlocksSealedOnTheDeviceAreTheCpuCodecs) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  // Several ring slices (and ring slots reused within a call and across calls), small pages and
  // Qwen3-8B-sized ones (one block a slice for raw).
  for (uint32_t tokens : {16u, 128u}) {
    const codec::BlockPlan plan = Plan(Gqa(tokens), GetParam());
    auto codec = GpuBlockCodec::Create(plan, 0);
    ASSERT_TRUE(codec.ok()) << codec.status();
    ASSERT_TRUE((*codec)->SealsOnDevice());
    const size_t n =
        4 * std::max<uint64_t>(1, GpuBlockCodec::kSealSliceBytes / plan.block_bytes) + 3;
    const std::vector<uint8_t> pages = MakePages(plan.layout, n);
    const Reference ref = CpuReference(plan, pages);
    Areas a = MakeAreas(**codec, n);
    ASSERT_TRUE(a.hot->Write(pages).ok());
    // In order (runs of adjacent slots and evenly spaced pages), then scattered: the blocks in
    // reverse order, the pages in a shuffled one.
    std::vector<size_t> order(n);
    for (size_t i = 0; i < n; ++i) order[i] = i;
    for (bool scattered : {false, true}) {
      if (scattered) std::shuffle(order.begin(), order.end(), std::mt19937_64(n));
      std::vector<const uint8_t*> from;
      std::vector<uint8_t*> to;
      for (size_t i = 0; i < n; ++i) {
        from.push_back(a.pages[order[i]]);
        to.push_back(a.blocks[scattered ? n - 1 - order[i] : order[i]]);
      }
      ASSERT_TRUE(a.cold->Fill(0xA5).ok());
      std::vector<void*> done;
      size_t per_event = 0;
      ASSERT_TRUE((*codec)->EncodeSealed(from, to, &done, &per_event).ok());
      ASSERT_GT(per_event, 0u);
      ASSERT_EQ(done.size(), (n + per_event - 1) / per_event);
      for (void* event : done) {
        ASSERT_TRUE(WaitEvent(event).ok());
        DestroyEvent(event);
      }
      const std::vector<uint8_t> got = Blocks(a, ref.blocks.size());
      for (size_t p = 0; p < n; ++p) {
        const size_t slot = scattered ? n - 1 - p : p;
        const std::vector<uint8_t> want(ref.blocks.begin() + p * plan.block_bytes,
                                        ref.blocks.begin() + (p + 1) * plan.block_bytes);
        const std::vector<uint8_t> block(got.begin() + slot * plan.block_bytes,
                                         got.begin() + (slot + 1) * plan.block_bytes);
        ASSERT_TRUE(block == want)
            << "page " << p << " of " << n << " (" << tokens << " tokens, scattered " << scattered
            << ") differs from the CPU codec's block";
        EXPECT_TRUE(codec::VerifyColdBlock(block).ok());
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Codecs, PoolCodecTest, ::testing::Values("raw", "nvfp4", "nvfp4x2"));

TEST(GpuBlockCodecTest, CheckBlockRefusesAnotherPlansBlocks) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  const codec::BlockPlan plan = Plan(Gqa(), "nvfp4");
  auto codec = GpuBlockCodec::Create(plan, 0);
  ASSERT_TRUE(codec.ok()) << codec.status();
  const std::vector<uint8_t> pages = MakePages(plan.layout, 1);
  const Reference other = CpuReference(Plan(Gqa(), "nvfp4x2"), pages);
  absl::Status checked = (*codec)->CheckBlock(other.blocks);
  EXPECT_TRUE(absl::IsFailedPrecondition(checked)) << checked;
  EXPECT_TRUE((*codec)->CheckBlock(CpuReference(plan, pages).blocks).ok());
}

TEST(GpuBlockCodecTest, GpuTierCodecWorksPerPageOnTheCallersStream) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  // Not a flat layout: the GPU tier holds the flat form of any layout.
  const codec::PageLayout layout = Gapped();
  const codec::BlockPlan plan = Plan(layout, "nvfp4+rope");
  auto codec = GpuBlockCodec::CreateFused(plan);
  ASSERT_TRUE(codec.ok()) << codec.status();
  EXPECT_EQ((*codec)->page_bytes(), codec::FlatPageBytes(layout));
  const std::vector<uint8_t> pages = MakePages(layout, 2);
  const Reference ref = CpuReference(plan, pages);
  Areas a = MakeAreas(**codec, 2);
  ASSERT_TRUE(a.hot->Write(pages).ok());

  ASSERT_TRUE((*codec)->EncodeToHost(0, a.pages[0], a.blocks[0]).ok());
  void* stream = PerThreadStream();
  ASSERT_TRUE((*codec)->EnqueueEncode(a.pages[1], a.blocks[1], stream).ok());
  ASSERT_TRUE(SynchronizeStream(stream).ok());
  (*codec)->Seal(a.blocks[1]);
  EXPECT_TRUE(Blocks(a, ref.blocks.size()) == ref.blocks) << "blocks differ from the CPU codec's";

  ASSERT_TRUE(a.hot->Fill(0x5A).ok());
  for (size_t p = 0; p < 2; ++p) {
    ASSERT_TRUE((*codec)->EnqueueDecode(a.blocks[p], a.mutable_pages[p], stream).ok());
  }
  ASSERT_TRUE(SynchronizeStream(stream).ok());
  EXPECT_TRUE(a.hot->Read().value() == ref.decoded);

  // It has no streams of its own for the batched calls, and does not seal on the device.
  EXPECT_FALSE((*codec)->SealsOnDevice());
  std::vector<void*> done;
  EXPECT_TRUE(absl::IsFailedPrecondition((*codec)->EncodeChunks(a.pages, a.blocks, 8, &done)));
  EXPECT_TRUE(done.empty());
  EXPECT_TRUE(absl::IsFailedPrecondition((*codec)->DecodeAsync(a.const_blocks, a.mutable_pages,
                                                               /*staged=*/false)));
}

}  // namespace
}  // namespace kvtier::kernels
