// Behaviour of the codecs through the public Codec API: lossless raw round trips, the nvfp4 error
// bound, NaN/Inf handling, nvfp4x2 drift, rejection of corrupt, truncated, oversized and foreign
// blocks (never writing a byte of the page), and row-stride gaps left untouched.
#include "codec/codec.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "codec/cold_block.h"
#include "codec/dtype.h"
#include "codec/nvfp4_math.h"
#include "common/coding.h"
#include "gtest/gtest.h"

namespace kvtier::codec {
namespace {

PageLayout SmallGqa(DType dtype, uint32_t layers = 2, uint32_t heads = 2, uint32_t tokens = 16,
                    uint32_t head_dim = 32) {
  GqaOptions o;
  o.num_layers = layers;
  o.kv_heads = heads;
  o.head_dim = head_dim;
  o.tokens_per_page = tokens;
  o.dtype = dtype;
  o.rope_start = 0;
  o.rope_len = 16;
  auto layout = BuildGqaLayout(o);
  EXPECT_TRUE(layout.ok()) << layout.status();
  return *layout;
}

// A flat page of N(0, sigma) values (rounded to each buffer's dtype); lossless buffers random.
std::vector<uint8_t> RandomPage(const PageLayout& layout, float sigma, uint64_t seed) {
  std::vector<uint8_t> page(FlatPageBytes(layout));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, sigma);
  HotPageView view = FlatPageView(layout, page);
  for (size_t i = 0; i < layout.buffers.size(); ++i) {
    const BufferSpec& b = layout.buffers[i];
    uint8_t* base = const_cast<uint8_t*>(view.base[i]);
    const uint64_t elems = layout.Rows(b) * b.RowStride();
    for (uint64_t e = 0; e < elems; ++e) {
      if (b.Quantizable()) {
        StoreFromFloat(b.dtype, normal(rng), base, e);
      } else {
        for (size_t k = 0; k < DTypeBytes(b.dtype); ++k) base[e * DTypeBytes(b.dtype) + k] = rng();
      }
    }
  }
  return page;
}

std::vector<uint8_t> EncodeOrDie(const Codec& codec, const std::vector<uint8_t>& page) {
  std::vector<uint8_t> block(codec.block_bytes(), 0xCD);
  absl::Status s = codec.Encode(FlatPageView(codec.layout(), page), absl::MakeSpan(block));
  EXPECT_TRUE(s.ok()) << s;
  return block;
}

absl::Status DecodeInto(const Codec& codec, absl::Span<const uint8_t> block,
                        std::vector<uint8_t>& page) {
  return codec.Decode(block, FlatPageView(codec.layout(), absl::MakeSpan(page)));
}

std::unique_ptr<Codec> Make(const PageLayout& layout, absl::string_view spec_text) {
  auto spec = CodecSpec::Parse(spec_text);
  EXPECT_TRUE(spec.ok()) << spec.status();
  auto codec = Codec::Create(layout, *spec);
  EXPECT_TRUE(codec.ok()) << codec.status();
  return std::move(*codec);
}

TEST(RawCodecTest, RoundTripIsLosslessForEveryDtype) {
  PageLayout layout = SmallGqa(DType::kBf16);
  BufferSpec state;
  state.name = "state.1";
  state.layer = 1;
  state.role = BufferRole::kLossless;
  state.dtype = DType::kFp32;
  state.tokens = 3;
  state.head_dim = 7;
  layout.buffers.push_back(state);
  layout.pools[0].slot_bytes += 1024;
  layout.buffers.back().offset_bytes = layout.pools[0].slot_bytes - 1024;
  ASSERT_TRUE(ValidateLayout(layout).ok()) << ValidateLayout(layout);
  auto codec = Make(layout, "raw");
  std::vector<uint8_t> page = RandomPage(layout, 1.0f, 1);
  page[5] = 0xff;  // a BF16 NaN pattern survives raw
  page[4] = 0xc1;
  std::vector<uint8_t> block = EncodeOrDie(*codec, page);
  std::vector<uint8_t> out(page.size(), 0);
  ASSERT_TRUE(DecodeInto(*codec, block, out).ok());
  EXPECT_EQ(out, page);
}

TEST(Nvfp4CodecTest, LosslessBuffersAndRopeComeBackExactly) {
  MlaOptions o;
  o.num_layers = 2;
  o.tokens_per_page = 16;
  o.indexer_bytes_per_token = 132;
  auto layout = BuildMlaLayout(o);
  ASSERT_TRUE(layout.ok());
  auto codec = Make(*layout, "nvfp4+rope");
  std::vector<uint8_t> page = RandomPage(*layout, 0.5f, 2);
  std::vector<uint8_t> out(page.size(), 0);
  ASSERT_TRUE(DecodeInto(*codec, EncodeOrDie(*codec, page), out).ok());
  HotPageView in = FlatPageView(*layout, page);
  HotPageView got = FlatPageView(*layout, out);
  for (size_t i = 0; i < layout->buffers.size(); ++i) {
    const BufferSpec& b = layout->buffers[i];
    for (uint64_t r = 0; r < layout->Rows(b); ++r) {
      if (b.role == BufferRole::kLossless) {
        EXPECT_EQ(std::memcmp(in.base[i], got.base[i], layout->DataBytes(b)), 0);
        break;
      }
      // RoPE suffix [512, 576) of every latent row is bit exact.
      const size_t at = (r * b.head_dim + b.rope_start) * 2;
      EXPECT_EQ(std::memcmp(in.base[i] + at, got.base[i] + at, b.rope_len * 2), 0) << "row " << r;
    }
  }
}

// Distance from |v| (representable in dtype) to the next larger representable value.
float Ulp(DType dtype, float v) {
  uint8_t buf[2] = {0, 0};
  StoreFromFloat(dtype, std::fabs(v), buf, 0);
  if (DTypeBytes(dtype) == 1) {
    ++buf[0];
  } else {
    EncodeFixed16(buf, static_cast<uint16_t>(DecodeFixed16(buf) + 1));
  }
  const float next = LoadAsFloat(dtype, buf, 0);
  if (std::isfinite(next)) return next - std::fabs(v);
  return std::fabs(v) - RoundTo(dtype, std::nextafter(std::fabs(v), 0.0f) * 0.96f);  // at the max
}

// Every decoded value is a nearest decoded grid value of its group, and within the documented
// bound: half the E2M1 step times the group scale (plus one ulp of the source dtype for the final
// rounding), or, above the group's top value, at most 3 * P * (next scale - scale).
void CheckErrorBound(DType dtype, float sigma, bool outliers) {
  PageLayout layout = SmallGqa(dtype, 2, 4, 32, 64);
  auto codec = Make(layout, "nvfp4");
  std::vector<uint8_t> page = RandomPage(layout, sigma, 7);
  HotPageView view = FlatPageView(layout, page);
  if (outliers) {
    for (size_t i = 0; i < layout.buffers.size(); ++i) {
      uint8_t* base = const_cast<uint8_t*>(view.base[i]);
      for (uint64_t r = 0; r < layout.Rows(layout.buffers[i]); ++r) {
        const size_t e = r * 64 + 5;
        StoreFromFloat(dtype, LoadAsFloat(dtype, base, e) * 20.0f, base, e);
      }
    }
  }
  std::vector<uint8_t> block = EncodeOrDie(*codec, page);
  std::vector<uint8_t> out(page.size(), 0);
  ASSERT_TRUE(DecodeInto(*codec, block, out).ok());
  auto header = ParseColdBlockHeader(block);
  ASSERT_TRUE(header.ok());
  HotPageView got = FlatPageView(layout, out);
  const nvfp4::Domain domain = nvfp4::DomainOf(dtype);
  uint64_t checked = 0;
  for (size_t i = 0; i < layout.buffers.size(); ++i) {
    const BufferPlan& bp = codec->plan().buffers[i];
    const float p = std::ldexp(1.0f, -header->buffers[i].scale_exp);
    for (uint64_t g = 0; g < bp.rows * bp.quant_len / 16; ++g) {
      const uint8_t s = block[bp.scale_offset + g];
      const float scale = nvfp4::ScaleValue(s);
      const float next_scale = s == nvfp4::kMaxScaleCode ? 480.0f : nvfp4::ScaleValue(s + 1);
      float grid[8];
      for (int c = 0; c < 8; ++c) grid[c] = nvfp4::DecodedMagnitude(domain, c, s, p);
      for (int j = 0; j < 16; ++j) {
        const size_t e = g * 16 + j;  // quant_len == head_dim == row stride here
        const float x = LoadAsFloat(dtype, view.base[i], e);
        const float y = LoadAsFloat(dtype, got.base[i], e);
        const float ax = std::fabs(x);
        float best = INFINITY;
        for (float d : grid) best = std::min(best, std::fabs(ax - d));
        ASSERT_EQ(std::fabs(ax - std::fabs(y)), best) << "not a nearest grid value: x=" << x;
        if (y != 0.0f) {
          ASSERT_EQ(std::signbit(x), std::signbit(y));
        }
        const float ulp = Ulp(dtype, std::max(ax, std::fabs(y)));
        if (ax <= 6.0f * scale * p) {
          const float u = ax / (scale * p);
          const float step = u < 2.0f ? 0.5f : u < 4.0f ? 1.0f : 2.0f;
          ASSERT_LE(std::fabs(x - y), 0.5f * step * scale * p + ulp) << "x=" << x << " y=" << y;
        } else {
          ASSERT_LE(ax - 6.0f * scale * p, 3.0f * p * (next_scale - scale) + ulp)
              << "saturation beyond the documented bound: x=" << x;
        }
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 0u);
}

TEST(Nvfp4CodecTest, ErrorBoundBf16) {
  for (float sigma : {1e-30f, 0.001f, 0.01f, 1.0f, 1000.0f, 1e30f}) {
    SCOPED_TRACE(sigma);
    CheckErrorBound(DType::kBf16, sigma, false);
    CheckErrorBound(DType::kBf16, sigma, true);
  }
}
TEST(Nvfp4CodecTest, ErrorBoundFp16) {
  for (float sigma : {1e-5f, 0.01f, 1.0f, 1000.0f, 20000.0f}) {
    SCOPED_TRACE(sigma);
    CheckErrorBound(DType::kFp16, sigma, false);
    CheckErrorBound(DType::kFp16, sigma, true);
  }
}
TEST(Nvfp4CodecTest, ErrorBoundFp8) {
  for (float sigma : {0.01f, 1.0f, 100.0f}) {
    SCOPED_TRACE(sigma);
    CheckErrorBound(DType::kFp8E4M3, sigma, false);
    CheckErrorBound(DType::kFp8E4M3, sigma, true);
  }
}

TEST(Nvfp4CodecTest, NanAndInfinityAreConfinedToTheirGroup) {
  PageLayout layout = SmallGqa(DType::kBf16, 1, 1, 16, 32);
  auto codec = Make(layout, "nvfp4");
  std::vector<uint8_t> page = RandomPage(layout, 1.0f, 3);
  std::vector<uint8_t> clean = page;
  uint8_t* k = page.data();  // buffer k.0, row 0: group 0 = elements 0..15
  StoreFromFloat(DType::kBf16, NAN, k, 1);
  StoreFromFloat(DType::kBf16, INFINITY, k, 2);
  k[2 * 2] = 0x80, k[2 * 2 + 1] = 0x7f;  // +Inf (FloatToBf16 saturates)
  k[2 * 3] = 0x80, k[2 * 3 + 1] = 0xff;  // -Inf
  // Group 1 of row 0 holds only NaN and Inf.
  for (int j = 16; j < 32; ++j) k[2 * j] = 0xc0, k[2 * j + 1] = 0x7f;  // NaN
  k[2 * 20] = 0x80, k[2 * 20 + 1] = 0x7f;
  std::vector<BufferEncodeStats> stats;
  std::vector<uint8_t> block(codec->block_bytes());
  ASSERT_TRUE(codec->Encode(FlatPageView(layout, page), absl::MakeSpan(block), &stats).ok());
  EXPECT_EQ(stats[0].nonfinite_values, 3u + 16u);
  std::vector<uint8_t> out(page.size());
  ASSERT_TRUE(DecodeInto(*codec, block, out).ok());
  // NaN -> +0; +-Inf -> +- the group's largest decoded magnitude.
  float top = 0.0f;
  for (int j = 0; j < 16; ++j) {
    if (j < 1 || j > 3) top = std::max(top, std::fabs(LoadAsFloat(DType::kBf16, out.data(), j)));
  }
  EXPECT_EQ(LoadAsFloat(DType::kBf16, out.data(), 1), 0.0f);
  EXPECT_FALSE(std::signbit(LoadAsFloat(DType::kBf16, out.data(), 1)));
  EXPECT_EQ(LoadAsFloat(DType::kBf16, out.data(), 2), top);
  EXPECT_EQ(LoadAsFloat(DType::kBf16, out.data(), 3), -top);
  // A group with no finite value decodes to zeros.
  for (int j = 16; j < 32; ++j) EXPECT_EQ(LoadAsFloat(DType::kBf16, out.data(), j), 0.0f) << j;
  // Every other group decodes exactly as the page without the non-finite values does, and the
  // buffer's scale exponent is unchanged (non-finite values do not enter it).
  std::vector<uint8_t> clean_out(page.size());
  std::vector<uint8_t> clean_block = EncodeOrDie(*codec, clean);
  ASSERT_TRUE(DecodeInto(*codec, clean_block, clean_out).ok());
  EXPECT_EQ(ParseColdBlockHeader(block)->buffers[0].scale_exp,
            ParseColdBlockHeader(clean_block)->buffers[0].scale_exp);
  EXPECT_EQ(std::memcmp(out.data() + 64, clean_out.data() + 64, out.size() - 64), 0);
}

double RmsError(DType dtype, const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  double sum = 0;
  const size_t n = a.size() / DTypeBytes(dtype);
  for (size_t i = 0; i < n; ++i) {
    const double d = LoadAsFloat(dtype, a.data(), i) - LoadAsFloat(dtype, b.data(), i);
    sum += d * d;
  }
  return std::sqrt(sum / n);
}

TEST(Nvfp4x2CodecTest, ErrorAfterFourTripsIsAtMostOneAndAHalfTimesTheFirst) {
  for (DType dtype : {DType::kBf16, DType::kFp16, DType::kFp8E4M3}) {
    for (float sigma : {0.01f, 1.0f, 100.0f}) {
      SCOPED_TRACE(std::string(DTypeName(dtype)) + " sigma " + std::to_string(sigma));
      PageLayout layout = SmallGqa(dtype, 2, 4, 32, 64);
      auto codec = Make(layout, "nvfp4x2");
      auto one = Make(layout, "nvfp4");
      const std::vector<uint8_t> page = RandomPage(layout, sigma, 11);
      std::vector<uint8_t> cur = page;
      double first = 0;
      for (int trip = 1; trip <= 4; ++trip) {
        std::vector<uint8_t> next(page.size());
        ASSERT_TRUE(DecodeInto(*codec, EncodeOrDie(*codec, cur), next).ok());
        cur = std::move(next);
        if (trip == 1) first = RmsError(dtype, page, cur);
      }
      const double fourth = RmsError(dtype, page, cur);
      EXPECT_LE(fourth, 1.5 * first) << first << " -> " << fourth;
      // The second pass pays off: much smaller error than one pass (FP8 sources are
      // near-lossless already).
      std::vector<uint8_t> single(page.size());
      ASSERT_TRUE(DecodeInto(*one, EncodeOrDie(*one, page), single).ok());
      EXPECT_LT(first, RmsError(dtype, page, single) / (dtype == DType::kFp8E4M3 ? 1.5 : 4.0));
    }
  }
}

// Any single flipped bit, truncation, extension or foreign block fails with DataLoss or
// FailedPrecondition and leaves the destination page untouched.
class CorruptBlockTest : public ::testing::TestWithParam<const char*> {};

TEST_P(CorruptBlockTest, EveryFlippedBitIsDetected) {
  PageLayout layout = SmallGqa(DType::kBf16, 2, 1, 16, 32);
  CodecSpec spec = *CodecSpec::Parse(GetParam());
  spec.alignment_bytes = 512;
  auto codec = Codec::Create(layout, spec);
  ASSERT_TRUE(codec.ok());
  const std::vector<uint8_t> block = EncodeOrDie(**codec, RandomPage(layout, 1.0f, 5));
  const std::vector<uint8_t> sentinel(FlatPageBytes(layout), 0x5A);
  std::vector<uint8_t> page = sentinel;
  std::vector<uint8_t> bad = block;
  for (size_t bit = 0; bit < block.size() * 8; ++bit) {
    bad[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    absl::Status s = DecodeInto(**codec, bad, page);
    ASSERT_TRUE(absl::IsDataLoss(s) || absl::IsFailedPrecondition(s))
        << "bit " << bit << " of " << block.size() * 8 << ": " << s;
    ASSERT_EQ(page, sentinel) << "decode wrote page bytes for a corrupt block (bit " << bit << ")";
    bad[bit / 8] = block[bit / 8];
  }
}

TEST_P(CorruptBlockTest, TruncatedAndOversizedBlocksFail) {
  PageLayout layout = SmallGqa(DType::kFp16);
  auto codec = Make(layout, GetParam());
  const std::vector<uint8_t> block = EncodeOrDie(*codec, RandomPage(layout, 1.0f, 6));
  std::vector<uint8_t> page(FlatPageBytes(layout), 0x11);
  const std::vector<uint8_t> sentinel = page;
  for (size_t n :
       {size_t{0}, size_t{10}, size_t{63}, size_t{64}, block.size() / 2, block.size() - 1}) {
    absl::Status s = DecodeInto(*codec, absl::MakeConstSpan(block.data(), n), page);
    EXPECT_TRUE(absl::IsDataLoss(s)) << n << ": " << s;
    EXPECT_EQ(page, sentinel);
  }
  std::vector<uint8_t> longer = block;
  longer.resize(block.size() + 4096);
  absl::Status s = DecodeInto(*codec, longer, page);
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_NE(s.message().find("oversized"), std::string::npos) << s;
  EXPECT_EQ(page, sentinel);
}

INSTANTIATE_TEST_SUITE_P(Codecs, CorruptBlockTest,
                         ::testing::Values("raw", "nvfp4", "nvfp4+rope", "nvfp4x2"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n) c = (c == '+') ? '_' : c;
                           return n;
                         });

TEST(CodecTest, BlockOfAnotherLayoutOrCodecIsFailedPrecondition) {
  // Same block size, different meaning: 2 heads x 16 tokens vs 4 heads x 8 tokens.
  PageLayout a = SmallGqa(DType::kBf16, 2, 2, 16, 32);
  PageLayout b = SmallGqa(DType::kBf16, 2, 4, 8, 32);
  auto ca = Make(a, "nvfp4");
  auto cb = Make(b, "nvfp4");
  ASSERT_EQ(ca->block_bytes(), cb->block_bytes());
  const std::vector<uint8_t> block = EncodeOrDie(*ca, RandomPage(a, 1.0f, 8));
  std::vector<uint8_t> page(FlatPageBytes(b), 0x22);
  const std::vector<uint8_t> sentinel = page;
  absl::Status s = DecodeInto(*cb, block, page);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_NE(s.message().find("fingerprint"), std::string::npos) << s;
  EXPECT_EQ(page, sentinel);

  auto rope = Make(a, "nvfp4+rope");
  auto raw = Make(a, "raw");
  std::vector<uint8_t> page_a(FlatPageBytes(a), 0x22);
  s = DecodeInto(*rope, block, page_a);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_NE(s.message().find("codec nvfp4"), std::string::npos) << s;
  s = DecodeInto(*raw, block, page_a);
  EXPECT_TRUE(absl::IsFailedPrecondition(s) || absl::IsDataLoss(s)) << s;
}

TEST(CodecTest, WrongSizesAreInvalidArgument) {
  PageLayout layout = SmallGqa(DType::kBf16);
  auto codec = Make(layout, "nvfp4");
  std::vector<uint8_t> page = RandomPage(layout, 1.0f, 9);
  std::vector<uint8_t> block(codec->block_bytes() - 16);
  EXPECT_TRUE(
      absl::IsInvalidArgument(codec->Encode(FlatPageView(layout, page), absl::MakeSpan(block))));
  HotPageView short_view = FlatPageView(layout, page);
  short_view.base.pop_back();
  block.resize(codec->block_bytes());
  EXPECT_TRUE(absl::IsInvalidArgument(codec->Encode(short_view, absl::MakeSpan(block))));
}

TEST(CodecTest, RowStrideGapsAreNeverWritten) {
  PageLayout layout = SmallGqa(DType::kBf16, 1, 2, 16, 32);
  for (BufferSpec& b : layout.buffers) b.row_stride = 48;  // 16 padding elements per row
  layout.pools[0].slot_bytes = 1 << 20;
  layout.buffers[1].offset_bytes = 1 << 19;
  ASSERT_TRUE(ValidateLayout(layout).ok());
  for (const char* name : {"raw", "nvfp4", "nvfp4x2"}) {
    auto codec = Make(layout, name);
    std::vector<uint8_t> page = RandomPage(layout, 1.0f, 10);
    std::vector<uint8_t> out(page.size(), 0x77);
    ASSERT_TRUE(DecodeInto(*codec, EncodeOrDie(*codec, page), out).ok());
    for (size_t row = 0; row < 2 * 2 * 16; ++row) {
      for (size_t e = 32; e < 48; ++e) {
        ASSERT_EQ(out[(row * 48 + e) * 2], 0x77) << name << " row " << row;
      }
    }
  }
}

TEST(CodecTest, EncodingIsDeterministicAndPaddingIsZero) {
  PageLayout layout = SmallGqa(DType::kBf16);
  auto codec = Make(layout, "nvfp4");
  std::vector<uint8_t> page = RandomPage(layout, 1.0f, 12);
  std::vector<uint8_t> a(codec->block_bytes(), 0x00), b(codec->block_bytes(), 0xff);
  ASSERT_TRUE(codec->Encode(FlatPageView(layout, page), absl::MakeSpan(a)).ok());
  ASSERT_TRUE(codec->Encode(FlatPageView(layout, page), absl::MakeSpan(b)).ok());
  EXPECT_EQ(a, b);
  const uint64_t end = codec->plan().header_bytes + codec->plan().payload_bytes;
  for (uint64_t i = end; i < a.size(); ++i) ASSERT_EQ(a[i], 0) << i;
}

}  // namespace
}  // namespace kvtier::codec
