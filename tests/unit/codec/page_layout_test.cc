// Tests of PageLayout: every ValidateLayout rule (InvalidArgument naming the buffer and the value),
// what the fingerprint covers and what it ignores (plus a golden value: it is on-media format),
// the strict JSON form, and the GQA / MLA / hybrid builders.
#include "codec/page_layout.h"

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "gtest/gtest.h"

namespace kvtier::codec {
namespace {

// A valid two-layer page: k.<l> (2 heads x 64, RoPE [0, 32)) and v.<l>, laid out 64 KiB apart in
// one 1 MiB pool "kv"; tokens_per_page 16.
PageLayout TwoLayerLayout() {
  PageLayout layout;
  layout.tokens_per_page = 16;
  layout.pools = {PoolSpec{"kv", 1 << 20}};
  uint64_t offset = 0;
  for (uint32_t l = 0; l < 2; ++l) {
    for (BufferRole role : {BufferRole::kAttentionK, BufferRole::kAttentionV}) {
      BufferSpec b;
      b.name = absl::StrCat(role == BufferRole::kAttentionK ? "k." : "v.", l);
      b.layer = l;
      b.role = role;
      b.dtype = DType::kBf16;
      b.heads = 2;
      b.head_dim = 64;
      if (role == BufferRole::kAttentionK) b.rope_len = 32;
      b.offset_bytes = offset;
      offset += 64 * 1024;
      layout.buffers.push_back(b);
    }
  }
  return layout;
}

// Expects `status` to be InvalidArgument with a message holding every one of `parts`.
void ExpectInvalid(const absl::Status& status, std::vector<std::string> parts) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  for (const std::string& part : parts) {
    EXPECT_NE(status.message().find(part), absl::string_view::npos)
        << "message lacks \"" << part << "\": " << status;
  }
}

TEST(ValidateLayoutTest, AcceptsTheBaseLayout) {
  EXPECT_TRUE(ValidateLayout(TwoLayerLayout()).ok()) << ValidateLayout(TwoLayerLayout());
}

TEST(ValidateLayoutTest, TokensPerPageZero) {
  PageLayout layout = TwoLayerLayout();
  layout.tokens_per_page = 0;
  ExpectInvalid(ValidateLayout(layout), {"tokens_per_page 0"});
}

TEST(ValidateLayoutTest, TokensPerPageAboveLimit) {
  PageLayout layout = TwoLayerLayout();
  layout.tokens_per_page = kMaxTokensPerPage + 1;
  for (BufferSpec& b : layout.buffers) b.tokens = 1;  // keep the buffers themselves small
  ExpectInvalid(ValidateLayout(layout), {"tokens_per_page 65537"});
}

TEST(ValidateLayoutTest, NoPools) {
  PageLayout layout = TwoLayerLayout();
  layout.pools.clear();
  ExpectInvalid(ValidateLayout(layout), {"no pools"});
}

TEST(ValidateLayoutTest, PoolWithoutName) {
  PageLayout layout = TwoLayerLayout();
  layout.pools.push_back(PoolSpec{"", 4096});
  ExpectInvalid(ValidateLayout(layout), {"pool 1", "no name"});
}

TEST(ValidateLayoutTest, DuplicatePoolName) {
  PageLayout layout = TwoLayerLayout();
  layout.pools.push_back(PoolSpec{"kv", 4096});
  ExpectInvalid(ValidateLayout(layout), {"'kv'", "twice"});
}

TEST(ValidateLayoutTest, PoolSlotBytesZero) {
  PageLayout layout = TwoLayerLayout();
  layout.pools.push_back(PoolSpec{"side", 0});
  ExpectInvalid(ValidateLayout(layout), {"'side'", "slot_bytes is 0"});
}

TEST(ValidateLayoutTest, NoBuffers) {
  PageLayout layout = TwoLayerLayout();
  layout.buffers.clear();
  ExpectInvalid(ValidateLayout(layout), {"no buffers"});
}

TEST(ValidateLayoutTest, TooManyBuffers) {
  PageLayout layout;
  layout.tokens_per_page = 1;
  layout.pools = {PoolSpec{"kv", 1 << 20}};
  for (uint32_t i = 0; i < kMaxBuffers; ++i) {
    BufferSpec b;
    b.name = absl::StrCat("s.", i);
    b.layer = i;
    b.role = BufferRole::kLossless;
    b.dtype = DType::kBytes;
    b.head_dim = 16;
    b.offset_bytes = 16 * i;
    layout.buffers.push_back(b);
  }
  ASSERT_TRUE(ValidateLayout(layout).ok()) << "the limit itself is allowed";
  BufferSpec extra = layout.buffers.back();
  extra.name = "one.too.many";
  extra.offset_bytes += 16;
  layout.buffers.push_back(extra);
  ExpectInvalid(ValidateLayout(layout), {"2001 buffers", "2000"});
}

TEST(ValidateLayoutTest, BufferWithoutName) {
  PageLayout layout = TwoLayerLayout();
  layout.buffers[2].name = "";
  ExpectInvalid(ValidateLayout(layout), {"buffer 2", "no name"});
}

TEST(ValidateLayoutTest, DuplicateBufferName) {
  PageLayout layout = TwoLayerLayout();
  layout.buffers[3].name = "k.1";
  ExpectInvalid(ValidateLayout(layout), {"'k.1'", "twice"});
}

TEST(ValidateLayoutTest, BuffersNotOrderedByLayer) {
  PageLayout layout = TwoLayerLayout();
  layout.buffers[3].layer = 0;  // v.1 claims layer 0 after k.1 of layer 1
  ExpectInvalid(ValidateLayout(layout), {"'v.1'", "layer 0 follows layer 1"});
}

TEST(ValidateLayoutTest, HeadsZero) {
  PageLayout layout = TwoLayerLayout();
  layout.buffers[1].heads = 0;
  ExpectInvalid(ValidateLayout(layout), {"'v.0'", "heads is 0"});
}

TEST(ValidateLayoutTest, BufferTokensAboveLimit) {
  PageLayout layout = TwoLayerLayout();
  layout.buffers[1].tokens = kMaxTokensPerPage + 1;
  ExpectInvalid(ValidateLayout(layout), {"'v.0'", "tokens 65537"});
}

TEST(ValidateLayoutTest, HeadDimZero) {
  PageLayout layout = TwoLayerLayout();
  layout.buffers[1].head_dim = 0;
  ExpectInvalid(ValidateLayout(layout), {"'v.0'", "head_dim 0"});
}

TEST(ValidateLayoutTest, HeadDimAboveLimit) {
  PageLayout layout = TwoLayerLayout();
  layout.buffers[1].head_dim = kMaxHeadDim + 1;
  layout.buffers[1].tokens = 1;
  layout.buffers[1].heads = 1;
  ExpectInvalid(ValidateLayout(layout), {"'v.0'", "head_dim 65537"});
}

TEST(ValidateLayoutTest, RowStrideSmallerThanHeadDim) {
  PageLayout layout = TwoLayerLayout();
  layout.buffers[1].row_stride = 48;
  ExpectInvalid(ValidateLayout(layout), {"'v.0'", "row_stride 48", "head_dim 64"});
}

TEST(ValidateLayoutTest, QuantizableRoleWithFp32) {
  PageLayout layout = TwoLayerLayout();
  layout.buffers[1].dtype = DType::kFp32;
  ExpectInvalid(ValidateLayout(layout), {"'v.0'", "fp32", "'v'"});
}

TEST(ValidateLayoutTest, QuantizableRoleWithBytes) {
  PageLayout layout = TwoLayerLayout();
  layout.buffers[0].dtype = DType::kBytes;
  ExpectInvalid(ValidateLayout(layout), {"'k.0'", "bytes"});
}

TEST(ValidateLayoutTest, LosslessRoleTakesAnyDtype) {
  PageLayout layout = TwoLayerLayout();
  layout.buffers[1].role = BufferRole::kLossless;
  layout.buffers[1].dtype = DType::kFp32;
  EXPECT_TRUE(ValidateLayout(layout).ok()) << ValidateLayout(layout);
}

TEST(ValidateLayoutTest, RopeRangePastHeadDim) {
  PageLayout layout = TwoLayerLayout();
  layout.buffers[2].rope_start = 48;
  layout.buffers[2].rope_len = 32;
  ExpectInvalid(ValidateLayout(layout), {"'k.1'", "[48, 80)", "head_dim 64"});
}

TEST(ValidateLayoutTest, RopeRangeEndingAtHeadDimIsAllowed) {
  PageLayout layout = TwoLayerLayout();
  layout.buffers[2].rope_start = 48;
  layout.buffers[2].rope_len = 16;
  EXPECT_TRUE(ValidateLayout(layout).ok()) << ValidateLayout(layout);
}

TEST(ValidateLayoutTest, RopeRangeOverflowingUint32) {
  PageLayout layout = TwoLayerLayout();
  layout.buffers[2].rope_start = 32;
  layout.buffers[2].rope_len = std::numeric_limits<uint32_t>::max() - 16;  // wraps to 15 in u32
  ExpectInvalid(ValidateLayout(layout), {"'k.1'", "head_dim 64"});
}

TEST(ValidateLayoutTest, RopeStartWithoutLength) {
  PageLayout layout = TwoLayerLayout();
  layout.buffers[0].rope_start = 16;
  layout.buffers[0].rope_len = 0;
  ExpectInvalid(ValidateLayout(layout), {"'k.0'", "rope_len is 0"});
}

TEST(ValidateLayoutTest, RopeOnValueBuffer) {
  PageLayout layout = TwoLayerLayout();
  layout.buffers[3].rope_len = 16;
  ExpectInvalid(ValidateLayout(layout), {"'v.1'", "RoPE", "'v'"});
}

TEST(ValidateLayoutTest, RopeOnLosslessBuffer) {
  PageLayout layout = TwoLayerLayout();
  layout.buffers[3].role = BufferRole::kLossless;
  layout.buffers[3].rope_start = 8;
  layout.buffers[3].rope_len = 8;
  ExpectInvalid(ValidateLayout(layout), {"'v.1'", "RoPE", "'lossless'"});
}

TEST(ValidateLayoutTest, PoolIndexOutOfRange) {
  PageLayout layout = TwoLayerLayout();
  layout.buffers[1].pool = 3;
  ExpectInvalid(ValidateLayout(layout), {"'v.0'", "pool index 3", "1 pools"});
}

TEST(ValidateLayoutTest, BufferSpanningPastSlot) {
  PageLayout layout = TwoLayerLayout();
  // v.1 spans 2 heads * 16 tokens * 64 * 2 B = 4096 bytes; end it exactly at the slot end.
  layout.buffers[3].offset_bytes = (1 << 20) - 4096;
  ASSERT_TRUE(ValidateLayout(layout).ok()) << ValidateLayout(layout);
  layout.buffers[3].offset_bytes += 2;
  ExpectInvalid(ValidateLayout(layout), {"'v.1'", "[1044482, 1048578)", "'kv'", "1048576"});
}

TEST(ValidateLayoutTest, RowStrideGapsAfterTheLastRowDoNotCount) {
  PageLayout layout = TwoLayerLayout();
  // 32 rows of 64 elements, 100 elements apart: the last row ends at (31 * 100 + 64) * 2 bytes.
  layout.buffers[3].row_stride = 100;
  layout.buffers[3].offset_bytes = (1 << 20) - (31 * 100 + 64) * 2;
  EXPECT_TRUE(ValidateLayout(layout).ok()) << ValidateLayout(layout);
  layout.buffers[3].offset_bytes += 1;
  ExpectInvalid(ValidateLayout(layout), {"'v.1'", "spans bytes"});
}

TEST(ValidateLayoutTest, BufferSpanningPastSecondPoolSlot) {
  PageLayout layout = TwoLayerLayout();
  layout.pools.push_back(PoolSpec{"small", 1000});
  layout.buffers[1].pool = 1;
  layout.buffers[1].offset_bytes = 0;
  ExpectInvalid(ValidateLayout(layout), {"'v.0'", "'small'", "1000 bytes"});
}

TEST(ValidateLayoutTest, BufferOver4GiB) {
  PageLayout layout = TwoLayerLayout();
  layout.pools[0].slot_bytes = uint64_t{1} << 40;
  BufferSpec& v = layout.buffers[1];
  v.heads = 4096;
  v.tokens = 4096;
  v.head_dim = 257;  // 4096 * 4096 * 257 * 2 bytes > 2^32
  ExpectInvalid(ValidateLayout(layout), {"'v.0'", "8623489024 bytes"});
}

// A buffer whose size does not fit in 64 bits must not pass because the size arithmetic wraps:
// 2^30 heads * 65536 tokens * 65536 elements * 4 bytes = 2^64 bytes.
TEST(ValidateLayoutTest, BufferSizeOverflowingUint64IsRejected) {
  PageLayout layout = TwoLayerLayout();
  BufferSpec& v = layout.buffers[1];
  v.role = BufferRole::kLossless;
  v.dtype = DType::kFp32;
  v.heads = uint32_t{1} << 30;
  v.tokens = kMaxTokensPerPage;
  v.head_dim = kMaxHeadDim;
  v.offset_bytes = 0;
  ExpectInvalid(ValidateLayout(layout), {"'v.0'"});
}

// An offset near 2^64 must not pass because offset + span wraps around.
TEST(ValidateLayoutTest, OffsetOverflowingUint64IsRejected) {
  PageLayout layout = TwoLayerLayout();
  layout.buffers[1].offset_bytes = std::numeric_limits<uint64_t>::max() - 100;
  ExpectInvalid(ValidateLayout(layout), {"'v.0'", "'kv'"});
}

// ---- Names: limits, and messages that never repeat a long name whole

TEST(ValidateLayoutTest, PoolNamesAreShortAndPlain) {
  PageLayout layout = TwoLayerLayout();
  layout.pools[0].name = std::string(kMaxNameBytes, 'p');
  EXPECT_TRUE(ValidateLayout(layout).ok()) << ValidateLayout(layout);
  layout.pools[0].name = std::string(kMaxNameBytes + 1, 'p');
  ExpectInvalid(ValidateLayout(layout), {"pool 0", "65 bytes", "longer than 64"});
  layout.pools[0].name = "kv/0";
  ExpectInvalid(ValidateLayout(layout), {"pool 0", "'kv/0'", "[A-Za-z0-9_.-]"});
  layout.pools[0].name = "k\x01v";  // escaped in the message
  ExpectInvalid(ValidateLayout(layout), {"pool 0", "'k\\x01v'"});
}

TEST(ValidateLayoutTest, BufferNamesAreShort) {
  PageLayout layout = TwoLayerLayout();
  layout.buffers[2].name = std::string(kMaxNameBytes, 'b');
  EXPECT_TRUE(ValidateLayout(layout).ok()) << ValidateLayout(layout);
  layout.buffers[2].name = std::string(kMaxNameBytes + 1, 'b');
  ExpectInvalid(ValidateLayout(layout), {"buffer 2", "65 bytes", "longer than 64"});
}

TEST(ValidateLayoutTest, AHugeNameComesBackCut) {
  for (int which = 0; which < 2; ++which) {
    PageLayout layout = TwoLayerLayout();
    (which == 0 ? layout.pools[0].name : layout.buffers[1].name) = std::string(1 << 20, 'n');
    const absl::Status st = ValidateLayout(layout);
    ExpectInvalid(st, {"1048576 bytes"});
    EXPECT_LT(st.message().size(), 256u) << (which == 0 ? "pool" : "buffer");
  }
}

TEST(ValidateLayoutTest, TooManyPools) {
  PageLayout layout = TwoLayerLayout();
  for (uint32_t i = 1; i <= kMaxPools; ++i) layout.pools.push_back({absl::StrCat("p", i), 64});
  ExpectInvalid(ValidateLayout(layout), {"4097 pools", "4096"});
  layout.pools.pop_back();
  EXPECT_TRUE(ValidateLayout(layout).ok()) << ValidateLayout(layout);
}

// ---- Overlap: no byte of a slot belongs to two buffers of its pool

TEST(ValidateLayoutTest, BuffersThatOverlapAreRefusedNamingBoth) {
  PageLayout layout = TwoLayerLayout();
  // k.0 spans [0, 4096); v.0 from 4096 is adjacent, from 4094 it overlaps.
  layout.buffers[1].offset_bytes = 4096;
  EXPECT_TRUE(ValidateLayout(layout).ok()) << ValidateLayout(layout);
  layout.buffers[1].offset_bytes = 4094;
  ExpectInvalid(ValidateLayout(layout),
                {"'k.0'", "'v.0'", "overlap", "'kv'", "[0, 4096)", "[4094, 8190)"});
  // Order does not matter: v.1 entirely inside k.0.
  layout = TwoLayerLayout();
  layout.buffers[3].offset_bytes = 1024;
  layout.buffers[3].heads = 1;
  ExpectInvalid(ValidateLayout(layout), {"'k.0'", "'v.1'", "overlap"});
  // Equal offsets in different pools do not overlap.
  layout = TwoLayerLayout();
  layout.pools.push_back(PoolSpec{"side", 1 << 20});
  layout.buffers[1].pool = 1;
  layout.buffers[1].offset_bytes = 0;
  EXPECT_TRUE(ValidateLayout(layout).ok()) << ValidateLayout(layout);
}

// One layer as token-major rows: k and v rows of 128 elements (256 bytes) interleaved, 512 bytes
// apart, v starting `v_offset` bytes into the slot.
PageLayout Interleaved(uint64_t v_offset, uint32_t v_row_stride = 256) {
  PageLayout layout;
  layout.tokens_per_page = 16;
  layout.pools = {PoolSpec{"kv", 1 << 16}};
  for (BufferRole role : {BufferRole::kAttentionK, BufferRole::kAttentionV}) {
    BufferSpec b;
    b.name = role == BufferRole::kAttentionK ? "k.0" : "v.0";
    b.role = role;
    b.head_dim = 128;
    b.row_stride = role == BufferRole::kAttentionK ? 256 : v_row_stride;
    b.offset_bytes = role == BufferRole::kAttentionK ? 0 : v_offset;
    layout.buffers.push_back(b);
  }
  return layout;
}

TEST(ValidateLayoutTest, InterleavedRowsThatDoNotTouchAreAccepted) {
  EXPECT_TRUE(ValidateLayout(Interleaved(256)).ok()) << ValidateLayout(Interleaved(256));
  // v's rows in k's gaps, starting one stride later, or after k's last row: still apart.
  EXPECT_TRUE(ValidateLayout(Interleaved(512 + 256)).ok());
  EXPECT_TRUE(ValidateLayout(Interleaved(16 * 512)).ok());
  // v one stride later, aligned with k's rows: v's row 0 meets k's row 1.
  ExpectInvalid(ValidateLayout(Interleaved(512)),
                {"'k.0'", "'v.0'", "overlap", "[512, 768)", "[512, 768)"});
}

TEST(ValidateLayoutTest, InterleavedRowsThatTouchAreRefused) {
  // v's rows start 64 elements into k's: row t of each share bytes [t*512 + 128, t*512 + 256).
  ExpectInvalid(ValidateLayout(Interleaved(128)),
                {"'k.0'", "'v.0'", "overlap", "[0, 256)", "[128, 384)"});
  // v's rows end 2 bytes into k's next row.
  ExpectInvalid(ValidateLayout(Interleaved(258)), {"'k.0'", "'v.0'", "[512, 768)", "[258, 514)"});
  // Only the last row of v reaches k's first: v starts 15 strides before k, in another order.
  PageLayout layout = Interleaved(0);
  layout.buffers[0].offset_bytes = 15 * 512 + 100;
  layout.buffers[1].offset_bytes = 0;
  ExpectInvalid(ValidateLayout(layout), {"'v.0'", "'k.0'", "overlap"});
}

TEST(ValidateLayoutTest, AContiguousBufferInsideAnotherOnesGapIsAccepted) {
  PageLayout layout = Interleaved(256);
  layout.buffers[1].row_stride = 0;  // v contiguous: 16 rows of 256 bytes from 256
  ExpectInvalid(ValidateLayout(layout), {"'k.0'", "'v.0'", "[512, 768)", "[256, 4352)"});
  layout.buffers[1].tokens = 1;  // v is one row of 256 bytes, in k's first gap
  EXPECT_TRUE(ValidateLayout(layout).ok()) << ValidateLayout(layout);
}

TEST(ValidateLayoutTest, InterleavingWithUnequalStridesIsRefused) {
  ExpectInvalid(ValidateLayout(Interleaved(256, 384)),
                {"'k.0'", "'v.0'", "different row strides", "512 and 768 bytes"});
}

// ---- Fingerprint

struct Mutation {
  std::string what;
  std::function<void(PageLayout&)> apply;
};

TEST(LayoutFingerprintTest, IgnoresNamesStridesPoolsAndOffsets) {
  const PageLayout base = TwoLayerLayout();
  const uint64_t fp = LayoutFingerprint(base);
  const std::vector<Mutation> neutral = {
      {"buffer names", [](PageLayout& l) { l.buffers[0].name = "keys_layer_zero"; }},
      {"row_stride", [](PageLayout& l) { l.buffers[1].row_stride = 80; }},
      {"explicit row_stride equal to head_dim",
       [](PageLayout& l) { l.buffers[1].row_stride = 64; }},
      {"explicit tokens equal to tokens_per_page", [](PageLayout& l) { l.buffers[2].tokens = 16; }},
      {"offsets", [](PageLayout& l) { l.buffers[2].offset_bytes = 500000; }},
      {"pool name and slot size",
       [](PageLayout& l) {
         l.pools[0] = PoolSpec{"engine_kv_cache", 2 << 20};
       }},
      {"pool index", [](PageLayout& l) {
         l.pools.push_back(PoolSpec{"second", 1 << 20});
         l.buffers[3].pool = 1;
         l.buffers[3].offset_bytes = 0;
       }}};
  for (const Mutation& m : neutral) {
    PageLayout layout = base;
    m.apply(layout);
    ASSERT_TRUE(ValidateLayout(layout).ok()) << m.what << ": " << ValidateLayout(layout);
    EXPECT_EQ(LayoutFingerprint(layout), fp) << "changing " << m.what;
  }
}

TEST(LayoutFingerprintTest, ChangesWithEveryFieldThatGivesBytesMeaning) {
  const PageLayout base = TwoLayerLayout();
  const uint64_t fp = LayoutFingerprint(base);
  const std::vector<Mutation> meaningful = {
      {"layer", [](PageLayout& l) { l.buffers[3].layer = 2; }},
      {"role", [](PageLayout& l) { l.buffers[2].role = BufferRole::kMlaLatent; }},
      {"role k/v swap",
       [](PageLayout& l) {
         l.buffers[2].role = BufferRole::kAttentionV;
         l.buffers[2].rope_len = 0;
         l.buffers[3].role = BufferRole::kAttentionK;
         l.buffers[3].rope_len = 32;
       }},
      {"dtype", [](PageLayout& l) { l.buffers[1].dtype = DType::kFp16; }},
      {"heads", [](PageLayout& l) { l.buffers[1].heads = 4; }},
      {"tokens", [](PageLayout& l) { l.buffers[1].tokens = 8; }},
      {"head_dim", [](PageLayout& l) { l.buffers[1].head_dim = 48; }},
      {"rope_start", [](PageLayout& l) { l.buffers[0].rope_start = 16; }},
      {"rope_len", [](PageLayout& l) { l.buffers[0].rope_len = 48; }},
      {"tokens_per_page", [](PageLayout& l) { l.tokens_per_page = 32; }},
      {"buffer count", [](PageLayout& l) { l.buffers.pop_back(); }},
  };
  for (const Mutation& m : meaningful) {
    PageLayout layout = base;
    m.apply(layout);
    ASSERT_TRUE(ValidateLayout(layout).ok()) << m.what << ": " << ValidateLayout(layout);
    EXPECT_NE(LayoutFingerprint(layout), fp) << "changing " << m.what;
  }
}

GqaOptions Qwen3_8B() {
  GqaOptions o;
  o.num_layers = 36;
  o.kv_heads = 8;
  o.head_dim = 128;
  o.tokens_per_page = 32;
  o.dtype = DType::kBf16;
  return o;
}

// The fingerprint is written into every cold block and compared on read. This value is part of
// the on-media format: if it changes, blocks written by earlier builds stop matching their layout.
// Do not update it to make the test pass; bump the format version (and FORMAT.md) instead.
TEST(LayoutFingerprintTest, GoldenValueForQwen3_8B) {
  absl::StatusOr<PageLayout> layout = BuildGqaLayout(Qwen3_8B());
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(LayoutFingerprint(*layout), 0x9d52fdf813a6f184ull)
      << "actual 0x" << std::hex << LayoutFingerprint(*layout);
}

// ---- JSON

void ExpectSameLayout(const PageLayout& a, const PageLayout& b) {
  EXPECT_EQ(a.tokens_per_page, b.tokens_per_page);
  ASSERT_EQ(a.pools.size(), b.pools.size());
  for (size_t i = 0; i < a.pools.size(); ++i) {
    EXPECT_EQ(a.pools[i].name, b.pools[i].name) << "pool " << i;
    EXPECT_EQ(a.pools[i].slot_bytes, b.pools[i].slot_bytes) << "pool " << i;
  }
  ASSERT_EQ(a.buffers.size(), b.buffers.size());
  for (size_t i = 0; i < a.buffers.size(); ++i) {
    const BufferSpec& x = a.buffers[i];
    const BufferSpec& y = b.buffers[i];
    SCOPED_TRACE(absl::StrCat("buffer ", i, " '", x.name, "'"));
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.layer, y.layer);
    EXPECT_EQ(x.role, y.role);
    EXPECT_EQ(x.dtype, y.dtype);
    EXPECT_EQ(x.heads, y.heads);
    EXPECT_EQ(x.Tokens(a.tokens_per_page), y.Tokens(b.tokens_per_page));
    EXPECT_EQ(x.head_dim, y.head_dim);
    EXPECT_EQ(x.RowStride(), y.RowStride());
    EXPECT_EQ(x.rope_start, y.rope_start);
    EXPECT_EQ(x.rope_len, y.rope_len);
    EXPECT_EQ(x.pool, y.pool);
    EXPECT_EQ(x.offset_bytes, y.offset_bytes);
  }
}

void ExpectJsonRoundTrip(const PageLayout& layout) {
  const std::string json = LayoutToJson(layout);
  absl::StatusOr<PageLayout> parsed = ParseLayoutJson(json);
  ASSERT_TRUE(parsed.ok()) << parsed.status() << "\n" << json;
  ExpectSameLayout(layout, *parsed);
  EXPECT_EQ(LayoutToJson(*parsed), json);
  EXPECT_EQ(LayoutFingerprint(*parsed), LayoutFingerprint(layout));
}

TEST(LayoutJsonTest, RoundTripsGqa) {
  absl::StatusOr<PageLayout> layout = BuildGqaLayout(Qwen3_8B());
  ASSERT_TRUE(layout.ok()) << layout.status();
  ExpectJsonRoundTrip(*layout);
}

TEST(LayoutJsonTest, RoundTripsMlaWithIndexer) {
  MlaOptions o;
  o.num_layers = 61;
  o.tokens_per_page = 64;
  o.indexer_bytes_per_token = 132;
  absl::StatusOr<PageLayout> layout = BuildMlaLayout(o);
  ASSERT_TRUE(layout.ok()) << layout.status();
  ExpectJsonRoundTrip(*layout);
}

TEST(LayoutJsonTest, RoundTripsHybrid) {
  HybridOptions o;
  o.num_layers = 8;
  o.attention_layers = {3, 7};
  o.kv_heads = 4;
  o.head_dim = 64;
  o.tokens_per_page = 16;
  o.dtype = DType::kFp16;
  o.state_bytes = 4000;
  absl::StatusOr<PageLayout> layout = BuildHybridLayout(o);
  ASSERT_TRUE(layout.ok()) << layout.status();
  ExpectJsonRoundTrip(*layout);
}

TEST(LayoutJsonTest, RoundTripsPoolsStridesAndOffsets) {
  PageLayout layout = TwoLayerLayout();
  layout.pools.push_back(PoolSpec{"v_pool", 3 << 20});
  layout.buffers[1].pool = 1;
  layout.buffers[1].offset_bytes = 12345;
  layout.buffers[1].row_stride = 96;
  layout.buffers[2].rope_start = 16;
  layout.buffers[2].rope_len = 48;
  layout.buffers[3].tokens = 8;
  ASSERT_TRUE(ValidateLayout(layout).ok()) << ValidateLayout(layout);
  ExpectJsonRoundTrip(layout);
}

TEST(LayoutJsonTest, OptionalFieldsTakeTheirDefaults) {
  absl::StatusOr<PageLayout> layout = ParseLayoutJson(R"({
    "tokens_per_page": 16,
    "pools": [{"name": "kv", "slot_bytes": 4096}],
    "buffers": [{"name": "v", "role": "v", "dtype": "fp16", "head_dim": 64}]
  })");
  ASSERT_TRUE(layout.ok()) << layout.status();
  ASSERT_EQ(layout->buffers.size(), 1u);
  const BufferSpec& b = layout->buffers[0];
  EXPECT_EQ(b.layer, 0u);
  EXPECT_EQ(b.heads, 1u);
  EXPECT_EQ(b.Tokens(layout->tokens_per_page), 16u);
  EXPECT_EQ(b.RowStride(), 64u);
  EXPECT_EQ(b.rope_len, 0u);
  EXPECT_EQ(b.pool, 0u);
  EXPECT_EQ(b.offset_bytes, 0u);
  EXPECT_EQ(layout->HotBytes(), 16u * 64 * 2);
}

// A valid document whose first buffer member `key` is replaced by `value` (raw JSON text), or
// removed when `value` is empty.
std::string JsonWithBufferField(const std::string& key, const std::string& value) {
  std::vector<std::pair<std::string, std::string>> fields = {
      {"name", R"("k.0")"}, {"layer", "0"},     {"role", R"("k")"}, {"dtype", R"("bf16")"},
      {"heads", "2"},       {"head_dim", "64"}, {"rope_len", "64"},
  };
  bool replaced = false;
  for (auto& [k, v] : fields) {
    if (k == key) {
      v = value;
      replaced = true;
    }
  }
  if (!replaced) fields.emplace_back(key, value);
  std::string buffer;
  for (const auto& [k, v] : fields) {
    if (v.empty()) continue;
    absl::StrAppend(&buffer, buffer.empty() ? "" : ", ", "\"", k, "\": ", v);
  }
  return absl::StrCat(R"({"tokens_per_page": 16, "pools": [{"name": "kv", "slot_bytes": 65536}],)",
                      R"( "buffers": [{)", buffer, "}]}");
}

TEST(LayoutJsonTest, HelperDocumentIsValid) {
  absl::StatusOr<PageLayout> layout = ParseLayoutJson(JsonWithBufferField("layer", "0"));
  EXPECT_TRUE(layout.ok()) << layout.status();
}

TEST(LayoutJsonTest, UnknownTopLevelKey) {
  const std::string json = R"({"tokens_per_page": 16, "pools": [], "buffers": [], "tokens": 4})";
  ExpectInvalid(ParseLayoutJson(json).status(), {"unknown key 'tokens'"});
}

TEST(LayoutJsonTest, UnknownBufferKey) {
  ExpectInvalid(ParseLayoutJson(JsonWithBufferField("head_dims", "64")).status(),
                {"buffers[0]", "unknown key 'head_dims'"});
}

TEST(LayoutJsonTest, UnknownPoolKey) {
  const std::string json =
      R"({"tokens_per_page": 16, "pools": [{"name": "kv", "slot_bytes": 1, "slots": 4}],)"
      R"( "buffers": []})";
  ExpectInvalid(ParseLayoutJson(json).status(), {"pools[0]", "unknown key 'slots'"});
}

TEST(LayoutJsonTest, WrongTypes) {
  ExpectInvalid(ParseLayoutJson(JsonWithBufferField("head_dim", R"("64")")).status(),
                {"buffers[0]", "'head_dim'", "\"64\""});
  ExpectInvalid(ParseLayoutJson(JsonWithBufferField("heads", "2.5")).status(),
                {"buffers[0]", "'heads'", "2.5"});
  ExpectInvalid(ParseLayoutJson(JsonWithBufferField("layer", "true")).status(),
                {"buffers[0]", "'layer'"});
  ExpectInvalid(ParseLayoutJson(JsonWithBufferField("name", "7")).status(),
                {"buffers[0]", "'name'", "string"});
  ExpectInvalid(ParseLayoutJson(JsonWithBufferField("dtype", "[]")).status(),
                {"buffers[0]", "'dtype'"});
  ExpectInvalid(
      ParseLayoutJson(R"({"tokens_per_page": "16", "pools": [], "buffers": []})").status(),
      {"'tokens_per_page'"});
  ExpectInvalid(ParseLayoutJson(R"({"tokens_per_page": 16, "pools": {}, "buffers": []})").status(),
                {"'pools'", "array"});
  ExpectInvalid(ParseLayoutJson(R"({"tokens_per_page": 16, "pools": [], "buffers": 3})").status(),
                {"'buffers'", "array"});
  ExpectInvalid(ParseLayoutJson("[1, 2]").status(), {"not an object"});
}

TEST(LayoutJsonTest, MissingRequiredFields) {
  ExpectInvalid(ParseLayoutJson(JsonWithBufferField("head_dim", "")).status(),
                {"buffers[0]", "missing 'head_dim'"});
  ExpectInvalid(ParseLayoutJson(JsonWithBufferField("name", "")).status(),
                {"buffers[0]", "missing 'name'"});
  ExpectInvalid(ParseLayoutJson(JsonWithBufferField("role", "")).status(),
                {"buffers[0]", "missing 'role'"});
  ExpectInvalid(ParseLayoutJson(R"({"pools": [], "buffers": []})").status(),
                {"missing 'tokens_per_page'"});
}

TEST(LayoutJsonTest, NegativeAndOversizedNumbers) {
  ExpectInvalid(ParseLayoutJson(JsonWithBufferField("layer", "-1")).status(),
                {"buffers[0]", "'layer'", "-1"});
  ExpectInvalid(ParseLayoutJson(JsonWithBufferField("offset_bytes", "-4096")).status(),
                {"buffers[0]", "'offset_bytes'", "-4096"});
  ExpectInvalid(ParseLayoutJson(JsonWithBufferField("head_dim", "4294967360")).status(),
                {"buffers[0]", "'head_dim'", "4294967360"});
}

TEST(LayoutJsonTest, InvalidJsonText) {
  for (const char* text : {"", "{", R"({"tokens_per_page": 16,})", "not json", "{'a': 1}"}) {
    ExpectInvalid(ParseLayoutJson(text).status(), {"not valid JSON"});
  }
}

TEST(LayoutJsonTest, UnknownRoleOrDtype) {
  ExpectInvalid(ParseLayoutJson(JsonWithBufferField("role", R"("q")")).status(),
                {"buffers[0]", "unknown buffer role 'q'"});
  ExpectInvalid(ParseLayoutJson(JsonWithBufferField("dtype", R"("int4")")).status(),
                {"buffers[0]", "unknown dtype 'int4'"});
}

TEST(LayoutJsonTest, ParsedLayoutIsValidated) {
  ExpectInvalid(ParseLayoutJson(JsonWithBufferField("role", R"("v")")).status(), {"'k.0'", "RoPE"});
}

// ---- Builders

TEST(BuildGqaLayoutTest, Qwen3_8B) {
  absl::StatusOr<PageLayout> layout = BuildGqaLayout(Qwen3_8B());
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_TRUE(ValidateLayout(*layout).ok());
  EXPECT_EQ(layout->tokens_per_page, 32u);
  ASSERT_EQ(layout->buffers.size(), 72u);
  EXPECT_EQ(layout->HotBytes(), 4'718'592u);
  ASSERT_EQ(layout->pools.size(), 1u);
  EXPECT_EQ(layout->pools[0].name, "kv");
  EXPECT_EQ(layout->pools[0].slot_bytes, 4'718'592u);
  uint64_t expected_offset = 0;
  for (uint32_t l = 0; l < 36; ++l) {
    const BufferSpec& k = layout->buffers[2 * l];
    const BufferSpec& v = layout->buffers[2 * l + 1];
    SCOPED_TRACE(absl::StrCat("layer ", l));
    EXPECT_EQ(k.name, absl::StrCat("k.", l));
    EXPECT_EQ(v.name, absl::StrCat("v.", l));
    EXPECT_EQ(k.layer, l);
    EXPECT_EQ(v.layer, l);
    EXPECT_EQ(k.role, BufferRole::kAttentionK);
    EXPECT_EQ(v.role, BufferRole::kAttentionV);
    for (const BufferSpec* b : {&k, &v}) {
      EXPECT_EQ(b->dtype, DType::kBf16);
      EXPECT_EQ(b->heads, 8u);
      EXPECT_EQ(b->Tokens(32), 32u);
      EXPECT_EQ(b->head_dim, 128u);
      EXPECT_EQ(layout->DataBytes(*b), 65536u);
      EXPECT_EQ(b->offset_bytes, expected_offset);
      expected_offset += 65536;
    }
    EXPECT_EQ(k.rope_start, 0u);
    EXPECT_EQ(k.rope_len, 128u);
    EXPECT_EQ(v.rope_len, 0u);
  }
}

TEST(BuildGqaLayoutTest, PartialRope) {
  GqaOptions o = Qwen3_8B();
  o.rope_start = 64;
  absl::StatusOr<PageLayout> layout = BuildGqaLayout(o);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->buffers[0].rope_start, 64u);
  EXPECT_EQ(layout->buffers[0].rope_len, 64u);
  o.rope_len = 32;
  layout = BuildGqaLayout(o);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->buffers[0].rope_start, 64u);
  EXPECT_EQ(layout->buffers[0].rope_len, 32u);
}

TEST(BuildGqaLayoutTest, InvalidOptions) {
  GqaOptions o = Qwen3_8B();
  o.num_layers = 0;
  ExpectInvalid(BuildGqaLayout(o).status(), {"num_layers is 0"});
  o = Qwen3_8B();
  o.rope_start = 128;
  ExpectInvalid(BuildGqaLayout(o).status(), {"rope_start 128", "head_dim 128"});
  o = Qwen3_8B();
  o.rope_start = 64;
  o.rope_len = 65;
  ExpectInvalid(BuildGqaLayout(o).status(), {"'k.0'", "[64, 129)"});
  o = Qwen3_8B();
  o.head_dim = 0;
  ExpectInvalid(BuildGqaLayout(o).status(), {"'k.0'", "head_dim 0"});
  o = Qwen3_8B();
  o.kv_heads = 0;
  ExpectInvalid(BuildGqaLayout(o).status(), {"'k.0'", "heads is 0"});
  o = Qwen3_8B();
  o.tokens_per_page = 0;
  ExpectInvalid(BuildGqaLayout(o).status(), {"tokens_per_page 0"});
  o = Qwen3_8B();
  o.dtype = DType::kFp32;
  ExpectInvalid(BuildGqaLayout(o).status(), {"'k.0'", "fp32"});
}

MlaOptions DeepSeekMla() {
  MlaOptions o;
  o.num_layers = 61;
  o.kv_lora_rank = 512;
  o.rope_dim = 64;
  o.tokens_per_page = 64;
  o.dtype = DType::kBf16;
  o.indexer_bytes_per_token = 132;
  return o;
}

TEST(BuildMlaLayoutTest, DeepSeekWithIndexer) {
  absl::StatusOr<PageLayout> layout = BuildMlaLayout(DeepSeekMla());
  ASSERT_TRUE(layout.ok()) << layout.status();
  ASSERT_EQ(layout->buffers.size(), 122u);
  for (uint32_t l = 0; l < 61; ++l) {
    const BufferSpec& latent = layout->buffers[2 * l];
    const BufferSpec& index = layout->buffers[2 * l + 1];
    SCOPED_TRACE(absl::StrCat("layer ", l));
    EXPECT_EQ(latent.name, absl::StrCat("latent.", l));
    EXPECT_EQ(latent.layer, l);
    EXPECT_EQ(latent.role, BufferRole::kMlaLatent);
    EXPECT_EQ(latent.dtype, DType::kBf16);
    EXPECT_EQ(latent.heads, 1u);
    EXPECT_EQ(latent.head_dim, 576u);
    EXPECT_EQ(latent.rope_start, 512u);
    EXPECT_EQ(latent.rope_len, 64u);
    EXPECT_EQ(layout->DataBytes(latent), 64u * 576 * 2);
    EXPECT_EQ(index.name, absl::StrCat("index.", l));
    EXPECT_EQ(index.layer, l);
    EXPECT_EQ(index.role, BufferRole::kLossless);
    EXPECT_EQ(index.dtype, DType::kBytes);
    EXPECT_EQ(index.rope_len, 0u);
    EXPECT_EQ(layout->DataBytes(index), 64u * 132);
  }
  EXPECT_EQ(layout->HotBytes(), 61u * (64 * 576 * 2 + 64 * 132));
}

TEST(BuildMlaLayoutTest, WithoutIndexer) {
  MlaOptions o = DeepSeekMla();
  o.indexer_bytes_per_token = 0;
  absl::StatusOr<PageLayout> layout = BuildMlaLayout(o);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->buffers.size(), 61u);
  for (const BufferSpec& b : layout->buffers) EXPECT_EQ(b.role, BufferRole::kMlaLatent);
}

TEST(BuildMlaLayoutTest, InvalidOptions) {
  MlaOptions o = DeepSeekMla();
  o.num_layers = 0;
  ExpectInvalid(BuildMlaLayout(o).status(), {"num_layers is 0"});
  o = DeepSeekMla();
  o.tokens_per_page = 0;
  ExpectInvalid(BuildMlaLayout(o).status(), {"tokens_per_page 0"});
}

HybridOptions EightLayerHybrid() {
  HybridOptions o;
  o.num_layers = 8;
  o.attention_layers = {3, 7};
  o.kv_heads = 4;
  o.head_dim = 64;
  o.tokens_per_page = 16;
  o.dtype = DType::kBf16;
  o.state_bytes = 4000;
  return o;
}

TEST(BuildHybridLayoutTest, AttentionAndStateLayers) {
  absl::StatusOr<PageLayout> layout = BuildHybridLayout(EightLayerHybrid());
  ASSERT_TRUE(layout.ok()) << layout.status();
  std::vector<std::string> names;
  for (const BufferSpec& b : layout->buffers) {
    names.push_back(b.name);
    SCOPED_TRACE(b.name);
    if (b.role == BufferRole::kLossless) {
      EXPECT_EQ(b.dtype, DType::kBytes);
      EXPECT_EQ(layout->DataBytes(b), 4000u) << "state bytes are per page, not per token";
    } else {
      EXPECT_TRUE(b.layer == 3 || b.layer == 7);
      EXPECT_EQ(b.dtype, DType::kBf16);
      EXPECT_EQ(b.heads, 4u);
      EXPECT_EQ(layout->DataBytes(b), 4u * 16 * 64 * 2);
    }
  }
  EXPECT_EQ(names, (std::vector<std::string>{"state.0", "state.1", "state.2", "k.3", "v.3",
                                             "state.4", "state.5", "state.6", "k.7", "v.7"}));
  EXPECT_EQ(layout->buffers[3].role, BufferRole::kAttentionK);
  EXPECT_EQ(layout->buffers[3].rope_len, 64u);
  EXPECT_EQ(layout->buffers[4].role, BufferRole::kAttentionV);
  EXPECT_EQ(layout->buffers[5].layer, 4u);
}

TEST(BuildHybridLayoutTest, AllAttentionNeedsNoStateBytes) {
  HybridOptions o = EightLayerHybrid();
  o.attention_layers = {0, 1, 2, 3, 4, 5, 6, 7};
  o.state_bytes = 0;
  absl::StatusOr<PageLayout> layout = BuildHybridLayout(o);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->buffers.size(), 16u);
}

TEST(BuildHybridLayoutTest, InvalidOptions) {
  HybridOptions o = EightLayerHybrid();
  o.num_layers = 0;
  o.attention_layers = {};
  ExpectInvalid(BuildHybridLayout(o).status(), {"num_layers is 0"});
  o = EightLayerHybrid();
  o.attention_layers = {3, 8};
  ExpectInvalid(BuildHybridLayout(o).status(), {"attention layer 8", "8 layers"});
  o = EightLayerHybrid();
  o.state_bytes = 0;
  ExpectInvalid(BuildHybridLayout(o).status(), {"state_bytes"});
}

}  // namespace
}  // namespace kvtier::codec
