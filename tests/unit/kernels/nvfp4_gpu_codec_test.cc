// The fused NVFP4 kernels against the CPU reference codec: blocks must be byte-identical and
// decoded pages identical, for nvfp4, nvfp4+rope and nvfp4x2 on BF16/FP16/FP8 GQA pages (RoPE
// quantized or lossless, row-stride gaps), MLA pages with a lossless indexer and hybrid pages
// (attention layers between lossless state buffers), on random pages of several magnitudes and on
// adversarial pages (outlier channels, zeros, subnormals, maximal values, NaN and infinities).
// Cold blocks live in mapped pinned host memory at an unaligned base; destinations are poisoned.
#include "kernels/nvfp4_gpu_codec.h"

#include <cmath>
#include <cstring>
#include <random>
#include <tuple>
#include <vector>

#include "codec/codec.h"
#include "gtest/gtest.h"
#include "kernels/device.h"
#include "tests/unit/kernels/gpu_buffer.h"

namespace kvtier::kernels {
namespace {

TEST(GpuNvfp4CodecTest, ReportsWhatItCannotDo) {
  codec::GqaOptions o{1, 1, 32, 16, codec::DType::kBf16, 0, 0};
  auto layout = codec::BuildGqaLayout(o);
  ASSERT_TRUE(layout.ok());
  auto plan = codec::MakeBlockPlan(*layout, *codec::CodecSpec::Parse("raw"));
  ASSERT_TRUE(plan.ok());
  EXPECT_TRUE(absl::IsUnimplemented(GpuNvfp4Codec::Create(*plan).status()));
}

struct Case {
  const char* name;
  codec::PageLayout layout;
  const char* codec;
};

std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (codec::DType dtype : {codec::DType::kBf16, codec::DType::kFp16, codec::DType::kFp8E4M3}) {
    codec::GqaOptions o{2, 4, 128, 32, dtype, 0, 64};
    codec::PageLayout gqa = *codec::BuildGqaLayout(o);
    cases.push_back({"gqa", gqa, "nvfp4"});
    cases.push_back({"gqa", gqa, "nvfp4+rope"});
    cases.push_back({"gqa", gqa, "nvfp4x2"});
    codec::PageLayout strided = gqa;
    uint64_t offset = 0;
    for (codec::BufferSpec& b : strided.buffers) {
      b.row_stride = 144;
      b.offset_bytes = offset;
      offset += strided.SpanBytes(b) + 64;
    }
    strided.pools[0].slot_bytes = offset;
    cases.push_back({"gqa_strided", strided, "nvfp4"});
    cases.push_back({"gqa_strided", strided, "nvfp4x2+rope"});
  }
  codec::MlaOptions m;
  m.num_layers = 3;
  m.tokens_per_page = 64;
  m.indexer_bytes_per_token = 132;
  codec::PageLayout mla = *codec::BuildMlaLayout(m);
  cases.push_back({"mla", mla, "nvfp4"});
  cases.push_back({"mla", mla, "nvfp4+rope"});
  cases.push_back({"mla", mla, "nvfp4x2"});
  // Hybrid: attention layers with RoPE on half the row between lossless recurrent-state buffers of
  // a size that is not a multiple of 16.
  for (codec::DType dtype : {codec::DType::kBf16, codec::DType::kFp8E4M3}) {
    codec::HybridOptions h;
    h.num_layers = 4;
    h.attention_layers = {1, 3};
    h.kv_heads = 2;
    h.head_dim = 128;
    h.tokens_per_page = 32;
    h.dtype = dtype;
    h.rope_start = 64;  // RoPE as the row's second half (lossless RoPE needs an end of the row)
    h.rope_len = 64;
    h.state_bytes = 1000;
    codec::PageLayout hybrid = *codec::BuildHybridLayout(h);
    cases.push_back({"hybrid", hybrid, "nvfp4+rope"});
    cases.push_back({"hybrid", hybrid, dtype == codec::DType::kBf16 ? "nvfp4" : "nvfp4x2"});
  }
  return cases;
}

// Pages: 0 N(0, 1e-3), 1 N(0, 1), 2 N(0, 1000), 3 adversarial (specials; FP8: random bytes too).
std::vector<uint8_t> MakePages(const codec::PageLayout& layout, int pages, uint64_t seed) {
  const uint64_t page_bytes = codec::FlatPageBytes(layout);
  std::vector<uint8_t> out(page_bytes * pages);
  std::mt19937_64 rng(seed);
  for (int p = 0; p < pages; ++p) {
    const float sigma = p % 4 == 0 ? 1e-3f : p % 4 == 1 ? 1.0f : 1000.0f;
    std::normal_distribution<float> normal(0.0f, sigma);
    codec::HotPageView view =
        codec::FlatPageView(layout, absl::MakeConstSpan(out).subspan(p * page_bytes, page_bytes));
    for (size_t i = 0; i < layout.buffers.size(); ++i) {
      const codec::BufferSpec& b = layout.buffers[i];
      auto* base = const_cast<uint8_t*>(view.base[i]);
      const uint64_t elems = layout.Rows(b) * b.RowStride();
      for (uint64_t e = 0; e < elems; ++e) {
        if (!b.Quantizable()) {
          base[e] = static_cast<uint8_t>(rng());
          continue;
        }
        float v = normal(rng);
        if (p % 4 == 3) {
          switch (rng() % 12) {
            case 0:
              v = 0.0f;
              break;
            case 1:
              v = -0.0f;
              break;
            case 2:
              v = std::ldexp(1.0f, -130);
              break;
            case 3:
              v = 3.0e38f;
              break;
            case 4:
              v = NAN;
              break;
            case 5:
              v = (rng() & 1) ? INFINITY : -INFINITY;
              break;
            case 6:
              v = 65504.0f;
              break;
            case 7:
              v = 1e-6f;
              break;
            case 8:  // any FP8 byte (NaN, -0, subnormals) where the buffer is FP8
              if (b.dtype == codec::DType::kFp8E4M3) {
                base[e] = static_cast<uint8_t>(rng());
                continue;
              }
              break;
            default:
              v = normal(rng) * ((e % 128 == 7) ? 50.0f : 1.0f);
              break;
          }
        }
        codec::StoreFromFloat(b.dtype, v, base, e);
      }
    }
  }
  return out;
}

// Param: (case index, cold base offset: 0 aligned, 1 unaligned, target CTAs: 0 the default, one
// CTA per buffer and page for these 8-page batches, or 512, which splits each buffer among CTAs).
class GpuNvfp4IdentityTest : public ::testing::TestWithParam<std::tuple<int, int, int>> {};

TEST_P(GpuNvfp4IdentityTest, BlocksAndPagesMatchTheCpuCodec) {
  auto devices = ListDevices();
  if (!devices.ok() || devices->empty()) GTEST_SKIP() << "no CUDA device";
  const Case c = Cases()[std::get<0>(GetParam())];
  const int base = std::get<1>(GetParam());
  SCOPED_TRACE(std::string(c.name) + " " +
               std::string(codec::DTypeName(c.layout.buffers[0].dtype)) + " " + c.codec);
  auto spec = codec::CodecSpec::Parse(c.codec);
  ASSERT_TRUE(spec.ok());
  auto cpu = codec::Codec::Create(c.layout, *spec);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  auto gpu = GpuNvfp4Codec::Create((*cpu)->plan());
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  (*gpu)->set_target_ctas(std::get<2>(GetParam()));
  constexpr int kPages = 8;
  const uint64_t page_bytes = codec::FlatPageBytes(c.layout);
  const uint64_t block_bytes = (*cpu)->block_bytes();
  const std::vector<uint8_t> pages = MakePages(c.layout, kPages, std::get<0>(GetParam()) + 1);

  // CPU reference blocks and decoded pages (destination poisoned like the GPU's).
  std::vector<uint8_t> cpu_blocks(block_bytes * kPages), cpu_decoded(pages.size(), 0x5A);
  for (int p = 0; p < kPages; ++p) {
    auto block = absl::MakeSpan(cpu_blocks).subspan(p * block_bytes, block_bytes);
    ASSERT_TRUE((*cpu)
                    ->Encode(codec::FlatPageView(c.layout, absl::MakeConstSpan(pages).subspan(
                                                               p * page_bytes, page_bytes)),
                             block)
                    .ok());
    ASSERT_TRUE(
        (*cpu)
            ->Decode(block,
                     codec::FlatPageView(
                         c.layout, absl::MakeSpan(cpu_decoded).subspan(p * page_bytes, page_bytes)))
            .ok());
  }

  // GPU encode: hot pages in device memory, blocks in mapped pinned host memory at `base` (its
  // host address is the kernels' address), exponents in mapped pinned host memory too.
  using Kind = GpuBuffer::Kind;
  auto hot_buffer = GpuBuffer::Allocate(Kind::kDevice, pages.size());
  ASSERT_TRUE(hot_buffer.ok()) << hot_buffer.status();
  auto cold_buffer = GpuBuffer::Allocate(Kind::kMappedHost, block_bytes * kPages + 64);
  ASSERT_TRUE(cold_buffer.ok()) << cold_buffer.status();
  uint8_t* const hot = (*hot_buffer)->data();
  uint8_t* const cold_host = (*cold_buffer)->data();
  const size_t exps_per_page = static_cast<size_t>((*gpu)->exponents_per_page());
  ASSERT_EQ(exps_per_page,
            c.layout.buffers.size() * (spec->codec == codec::CodecId::kNvfp4x2 ? 2 : 1));
  auto exps_buffer = GpuBuffer::Allocate(Kind::kMappedHost, exps_per_page * kPages);
  ASSERT_TRUE(exps_buffer.ok()) << exps_buffer.status();
  int8_t* const exps = reinterpret_cast<int8_t*>((*exps_buffer)->data());
  ASSERT_TRUE((*hot_buffer)->Write(pages).ok());
  std::memset(cold_host, 0xCD, block_bytes * kPages + 64);
  ASSERT_TRUE(
      (*gpu)
          ->EncodePayloads(hot, page_bytes, cold_host + base, block_bytes, kPages, exps, nullptr)
          .ok());
  ASSERT_TRUE(SynchronizeStream(nullptr).ok());
  if (base > 0) {
    EXPECT_EQ(cold_host[base - 1], 0xCD) << "wrote before the first block";
  }
  EXPECT_EQ(cold_host[base + block_bytes * kPages], 0xCD) << "wrote after the last block";
  for (int p = 0; p < kPages; ++p) {
    auto block = absl::MakeSpan(cold_host + base + p * block_bytes, block_bytes);
    (*gpu)->SealBlock(block, absl::MakeConstSpan(exps + p * exps_per_page, exps_per_page));
    const uint8_t* want = cpu_blocks.data() + p * block_bytes;
    for (uint64_t i = 0; i < block_bytes; ++i) {
      ASSERT_EQ(block[i], want[i]) << "page " << p << " block byte " << i;
    }
  }

  // GPU encode into device memory at `base` (the kernels pick their variant by where the blocks
  // are): the same bytes.
  std::vector<uint8_t> dev_blocks;
  {
    auto cold_dev = GpuBuffer::Allocate(Kind::kDevice, block_bytes * kPages + 64);
    ASSERT_TRUE(cold_dev.ok()) << cold_dev.status();
    ASSERT_TRUE((*cold_dev)->Fill(0xCD).ok());
    std::memset(exps, 0x7F, exps_per_page * kPages);
    ASSERT_TRUE((*gpu)
                    ->EncodePayloads(hot, page_bytes, (*cold_dev)->data() + base, block_bytes,
                                     kPages, exps, nullptr)
                    .ok());
    ASSERT_TRUE(SynchronizeStream(nullptr).ok());
    auto read = (*cold_dev)->Read();
    ASSERT_TRUE(read.ok()) << read.status();
    dev_blocks = *std::move(read);
  }
  if (base > 0) {
    EXPECT_EQ(dev_blocks[base - 1], 0xCD) << "device: wrote before the first block";
  }
  EXPECT_EQ(dev_blocks[base + block_bytes * kPages], 0xCD) << "device: wrote after the last block";
  for (int p = 0; p < kPages; ++p) {
    auto block = absl::MakeSpan(dev_blocks.data() + base + p * block_bytes, block_bytes);
    (*gpu)->SealBlock(block, absl::MakeConstSpan(exps + p * exps_per_page, exps_per_page));
    const uint8_t* want = cpu_blocks.data() + p * block_bytes;
    for (uint64_t i = 0; i < block_bytes; ++i) {
      ASSERT_EQ(block[i], want[i]) << "device: page " << p << " block byte " << i;
    }
  }

  // GPU decode of the CPU's blocks into poisoned device pages.
  auto blocks_dev = GpuBuffer::Allocate(Kind::kDevice, cpu_blocks.size());
  ASSERT_TRUE(blocks_dev.ok()) << blocks_dev.status();
  ASSERT_TRUE((*blocks_dev)->Write(cpu_blocks).ok());
  ASSERT_TRUE((*hot_buffer)->Fill(0x5A).ok());
  ASSERT_TRUE(
      (*gpu)->Decode((*blocks_dev)->data(), block_bytes, hot, page_bytes, kPages, nullptr).ok());
  // Reads the decoded pages (after the decode: both are on the legacy default stream).
  std::vector<uint8_t> gpu_decoded;
  auto read_decoded = [&] {
    auto read = (*hot_buffer)->Read();
    ASSERT_TRUE(read.ok()) << read.status();
    gpu_decoded = *std::move(read);
  };
  ASSERT_NO_FATAL_FAILURE(read_decoded());
  for (uint64_t i = 0; i < pages.size(); ++i) {
    ASSERT_EQ(gpu_decoded[i], cpu_decoded[i]) << "decoded byte " << i;
  }

  // GPU decode of the blocks in mapped pinned host memory (unaligned base): the kernel reading
  // them over the link, and the staged pipeline in slices of two pages (four slices through a
  // ring of three: slots are reused).
  (*gpu)->set_staging_slice_bytes(2 * block_bytes + 1);
  for (auto mode : {GpuNvfp4Codec::HostRead::kDirect, GpuNvfp4Codec::HostRead::kStaged}) {
    SCOPED_TRACE(mode == GpuNvfp4Codec::HostRead::kDirect ? "direct" : "staged");
    ASSERT_TRUE((*hot_buffer)->Fill(0x5A).ok());
    ASSERT_TRUE(
        (*gpu)->Decode(cold_host + base, block_bytes, hot, page_bytes, kPages, nullptr, mode).ok());
    ASSERT_NO_FATAL_FAILURE(read_decoded());
    for (uint64_t i = 0; i < pages.size(); ++i) {
      ASSERT_EQ(gpu_decoded[i], cpu_decoded[i]) << "decoded byte " << i;
    }
  }
  // Gathered decode (the daemon's onboard), slices of two blocks: blocks read through their host
  // addresses, (a) in reverse (one copy and one launch per page), (b) in order (one copy and one
  // launch per slice), (c) pages and blocks 0, 1, 2, 6, 5, 4, 3, 7 (runs broken inside slices;
  // pages 2 and 6 one launch with a stride of four pages).
  for (const std::vector<int>& order : std::vector<std::vector<int>>{
           {7, 6, 5, 4, 3, 2, 1, 0}, {0, 1, 2, 3, 4, 5, 6, 7}, {0, 1, 2, 6, 5, 4, 3, 7}}) {
    SCOPED_TRACE(::testing::PrintToString(order));
    std::vector<const uint8_t*> blocks;
    std::vector<uint8_t*> dests;
    for (int p : order) {
      blocks.push_back(cold_host + base + p * block_bytes);
      dests.push_back(hot + p * page_bytes);
    }
    ASSERT_TRUE((*hot_buffer)->Fill(0x5A).ok());
    ASSERT_TRUE((*gpu)->DecodeGathered(blocks, dests, nullptr).ok());
    ASSERT_NO_FATAL_FAILURE(read_decoded());
    for (uint64_t i = 0; i < pages.size(); ++i) {
      ASSERT_EQ(gpu_decoded[i], cpu_decoded[i]) << "gathered: decoded byte " << i;
    }
    const absl::Status mismatch =
        (*gpu)->DecodeGathered(absl::MakeConstSpan(blocks).subspan(1), dests, nullptr);
    EXPECT_EQ(mismatch.code(), absl::StatusCode::kInvalidArgument) << mismatch;
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, GpuNvfp4IdentityTest,
                         ::testing::Combine(::testing::Range(0, static_cast<int>(Cases().size())),
                                            ::testing::Values(0, 1), ::testing::Values(0, 512)));

}  // namespace
}  // namespace kvtier::kernels
