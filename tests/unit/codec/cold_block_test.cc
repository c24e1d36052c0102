// Tests of the cold-block format: BlockPlan sizes and section offsets (recomputed here from the
// formula of FORMAT.md, not copied from the implementation), the codec options a layout cannot
// take, the header's round trip and its corruption checks, its text/JSON forms, and CodecSpec.
#include "codec/cold_block.h"

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "codec/codec.h"
#include "codec/codec_spec.h"
#include "codec/page_layout.h"
#include "gtest/gtest.h"

namespace kvtier::codec {
namespace {

uint64_t RoundUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

bool Contains(absl::string_view haystack, absl::string_view needle) {
  return haystack.find(needle) != absl::string_view::npos;
}

void ExpectStatus(const absl::Status& status, absl::StatusCode code,
                  std::vector<std::string> parts) {
  EXPECT_EQ(status.code(), code) << status;
  for (const std::string& part : parts) {
    EXPECT_TRUE(Contains(status.message(), part)) << "message lacks \"" << part << "\": " << status;
  }
}

CodecSpec Spec(absl::string_view text, uint32_t alignment = 4096) {
  absl::StatusOr<CodecSpec> spec = CodecSpec::Parse(text);
  EXPECT_TRUE(spec.ok()) << spec.status();
  CodecSpec s = spec.value_or(CodecSpec{});
  s.alignment_bytes = alignment;
  return s;
}

// Payload bytes from the format's formula: per layer record, Σ over quantized buffers of
// passes·rows·q/2 (FP4) + passes·rows·q/16 (E4M3 scales) + rows·(head_dim − q)·esize (lossless part
// of each row), plus Σ over lossless buffers of rows·head_dim·esize, rounded up to 16 bytes. q is
// head_dim, less the RoPE range when RoPE is kept lossless.
uint64_t FormulaPayload(const PageLayout& layout, const CodecSpec& spec) {
  const uint64_t passes = spec.codec == CodecId::kRaw ? 0 : spec.codec == CodecId::kNvfp4 ? 1 : 2;
  uint64_t payload = 0;
  size_t i = 0;
  while (i < layout.buffers.size()) {
    const uint32_t layer = layout.buffers[i].layer;
    uint64_t record = 0;
    for (; i < layout.buffers.size() && layout.buffers[i].layer == layer; ++i) {
      const BufferSpec& b = layout.buffers[i];
      const uint64_t rows = uint64_t{b.heads} * b.Tokens(layout.tokens_per_page);
      const uint64_t esize = DTypeBytes(b.dtype);
      if (passes == 0 || b.role == BufferRole::kLossless) {
        record += rows * b.head_dim * esize;
        continue;
      }
      const uint64_t q = spec.rope_lossless ? b.head_dim - b.rope_len : b.head_dim;
      record += passes * rows * q / 2 + passes * rows * q / 16 + rows * (b.head_dim - q) * esize;
    }
    payload += RoundUp(record, 16);
  }
  return payload;
}

uint64_t FormulaBlock(const PageLayout& layout, const CodecSpec& spec) {
  return RoundUp(64 + 32 * layout.buffers.size() + FormulaPayload(layout, spec),
                 spec.alignment_bytes);
}

BlockPlan Plan(const PageLayout& layout, const CodecSpec& spec) {
  absl::StatusOr<BlockPlan> plan = MakeBlockPlan(layout, spec);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? *std::move(plan) : BlockPlan{};
}

PageLayout Qwen3_8B(DType dtype) {
  GqaOptions o;
  o.num_layers = 36;
  o.kv_heads = 8;
  o.head_dim = 128;
  o.tokens_per_page = 32;
  o.dtype = dtype;
  absl::StatusOr<PageLayout> layout = BuildGqaLayout(o);
  EXPECT_TRUE(layout.ok()) << layout.status();
  return layout.value_or(PageLayout{});
}

PageLayout DeepSeekMla() {
  MlaOptions o;
  o.num_layers = 61;
  o.kv_lora_rank = 512;
  o.rope_dim = 64;
  o.tokens_per_page = 64;
  o.dtype = DType::kBf16;
  o.indexer_bytes_per_token = 132;
  absl::StatusOr<PageLayout> layout = BuildMlaLayout(o);
  EXPECT_TRUE(layout.ok()) << layout.status();
  return layout.value_or(PageLayout{});
}

// Three-layer hybrid: state.0 (100 bytes), k.1 / v.1 (1 head x 4 tokens x 16 BF16), state.2.
PageLayout SmallHybrid() {
  HybridOptions o;
  o.num_layers = 3;
  o.attention_layers = {1};
  o.kv_heads = 1;
  o.head_dim = 16;
  o.tokens_per_page = 4;
  o.dtype = DType::kBf16;
  o.state_bytes = 100;
  absl::StatusOr<PageLayout> layout = BuildHybridLayout(o);
  EXPECT_TRUE(layout.ok()) << layout.status();
  return layout.value_or(PageLayout{});
}

// One layer: k.0 and v.0 of `heads` x `tokens` x `head_dim` FP16, K with RoPE [0, rope_len),
// optionally a lossless "state.0" of `state_bytes` bytes (one row).
PageLayout OneLayer(uint32_t heads, uint32_t tokens, uint32_t head_dim, uint32_t rope_len,
                    uint32_t state_bytes = 0) {
  PageLayout layout;
  layout.tokens_per_page = tokens;
  layout.pools = {PoolSpec{"kv", 1 << 20}};
  BufferSpec k;
  k.name = "k.0";
  k.role = BufferRole::kAttentionK;
  k.dtype = DType::kFp16;
  k.heads = heads;
  k.head_dim = head_dim;
  k.rope_len = rope_len;
  BufferSpec v = k;
  v.name = "v.0";
  v.role = BufferRole::kAttentionV;
  v.rope_len = 0;
  v.offset_bytes = 1 << 19;
  layout.buffers = {k, v};
  if (state_bytes > 0) {
    BufferSpec s;
    s.name = "state.0";
    s.role = BufferRole::kLossless;
    s.dtype = DType::kBytes;
    s.tokens = 1;
    s.head_dim = state_bytes;
    s.offset_bytes = 3 << 18;
    layout.buffers.push_back(s);
  }
  return layout;
}

// ---- Plans: worked examples

TEST(BlockPlanTest, Qwen3_8B_Bf16_Nvfp4) {
  const PageLayout layout = Qwen3_8B(DType::kBf16);
  const BlockPlan plan = Plan(layout, Spec("nvfp4"));
  EXPECT_EQ(plan.header_bytes, 64u + 32 * 72);
  EXPECT_EQ(plan.payload_bytes, FormulaPayload(layout, plan.spec));
  EXPECT_EQ(plan.payload_bytes, 1'327'104u);
  EXPECT_EQ(plan.block_bytes, FormulaBlock(layout, plan.spec));
  EXPECT_EQ(plan.block_bytes, 1'331'200u);
  EXPECT_EQ(plan.block_bytes % 4096, 0u);
  EXPECT_GE(static_cast<double>(layout.HotBytes()) / plan.block_bytes, 3.5);
  EXPECT_EQ(plan.fingerprint, LayoutFingerprint(layout));
  ASSERT_EQ(plan.records.size(), 36u);
  uint64_t offset = plan.header_bytes;
  for (uint32_t l = 0; l < 36; ++l) {
    EXPECT_EQ(plan.records[l].layer, l);
    EXPECT_EQ(plan.records[l].offset, offset) << "layer " << l;
    EXPECT_EQ(plan.records[l].bytes, 36'864u) << "layer " << l;
    offset += plan.records[l].padded_bytes;
  }
  for (const BufferPlan& bp : plan.buffers) {
    EXPECT_EQ(bp.encoding, BufferEncoding::kNvfp4);
    EXPECT_EQ(bp.quant_len, 128u);
    EXPECT_EQ(bp.row_lossless_bytes, 0u);
  }
}

TEST(BlockPlanTest, Qwen3_8B_Fp8_Nvfp4) {
  const PageLayout layout = Qwen3_8B(DType::kFp8E4M3);
  const BlockPlan plan = Plan(layout, Spec("nvfp4"));
  EXPECT_EQ(plan.payload_bytes, FormulaPayload(layout, plan.spec));
  EXPECT_EQ(plan.block_bytes, FormulaBlock(layout, plan.spec));
  EXPECT_EQ(layout.HotBytes(), 2'359'296u);
  EXPECT_GE(static_cast<double>(layout.HotBytes()) / plan.block_bytes, 1.75);
}

TEST(BlockPlanTest, DeepSeekMla_Nvfp4) {
  const PageLayout layout = DeepSeekMla();
  const BlockPlan plan = Plan(layout, Spec("nvfp4"));
  EXPECT_EQ(plan.header_bytes, 64u + 32 * 122);
  EXPECT_EQ(plan.payload_bytes, FormulaPayload(layout, plan.spec));
  EXPECT_EQ(plan.payload_bytes, 1'780'224u);
  EXPECT_EQ(plan.block_bytes, FormulaBlock(layout, plan.spec));
  EXPECT_EQ(plan.block_bytes, 1'785'856u);
  for (size_t i = 0; i < plan.buffers.size(); i += 2) {
    EXPECT_EQ(plan.buffers[i].encoding, BufferEncoding::kNvfp4);
    EXPECT_EQ(plan.buffers[i].quant_len, 576u);
    EXPECT_EQ(plan.buffers[i + 1].encoding, BufferEncoding::kLossless) << "the indexer is lossless";
    EXPECT_EQ(plan.buffers[i + 1].whole_bytes, 64u * 132);
  }
}

TEST(BlockPlanTest, DeepSeekMla_Nvfp4LosslessRope) {
  const PageLayout layout = DeepSeekMla();
  const BlockPlan plan = Plan(layout, Spec("nvfp4+rope"));
  EXPECT_EQ(plan.payload_bytes, FormulaPayload(layout, plan.spec));
  // Per layer: 64 rows x (512 / 2 FP4 + 512 / 16 scales + 64 x 2 RoPE bytes) + 64 x 132 indexer.
  EXPECT_EQ(plan.payload_bytes, 61u * (64 * (256 + 32 + 128) + 64 * 132));
  EXPECT_EQ(plan.block_bytes, FormulaBlock(layout, plan.spec));
  const BufferPlan& latent = plan.buffers[0];
  EXPECT_EQ(latent.quant_start, 0u);
  EXPECT_EQ(latent.quant_len, 512u);
  EXPECT_EQ(latent.row_lossless_bytes, 128u);
  EXPECT_EQ(latent.rows, 64u);
}

TEST(BlockPlanTest, Qwen3_8B_Nvfp4x2IsAbout1Point125BytesPerValue) {
  const PageLayout layout = Qwen3_8B(DType::kBf16);
  const BlockPlan plan = Plan(layout, Spec("nvfp4x2"));
  EXPECT_EQ(plan.payload_bytes, FormulaPayload(layout, plan.spec));
  EXPECT_EQ(plan.block_bytes, FormulaBlock(layout, plan.spec));
  const double values = static_cast<double>(layout.HotBytes()) / 2;
  EXPECT_DOUBLE_EQ(plan.payload_bytes / values, 1.125);
  for (const BufferPlan& bp : plan.buffers) {
    EXPECT_EQ(bp.encoding, BufferEncoding::kNvfp4x2);
    EXPECT_EQ(bp.passes, 2u);
  }
}

TEST(BlockPlanTest, RawIsHotBytesRoundedPerLayer) {
  const PageLayout layout = SmallHybrid();
  const BlockPlan plan = Plan(layout, Spec("raw", 16));
  // state.0: 100 -> 112; k.1 + v.1: 2 x 4 x 16 x 2 = 256; state.2: 100 -> 112.
  EXPECT_EQ(plan.payload_bytes, 112u + 256 + 112);
  EXPECT_EQ(plan.payload_bytes, FormulaPayload(layout, plan.spec));
  EXPECT_EQ(plan.block_bytes, RoundUp(64 + 32 * 4 + 480, 16));
  for (const BufferPlan& bp : plan.buffers) {
    EXPECT_EQ(bp.encoding, BufferEncoding::kLossless);
    EXPECT_EQ(bp.passes, 0u);
  }
  EXPECT_EQ(plan.buffers[0].whole_offset, plan.header_bytes);
  EXPECT_EQ(plan.buffers[1].whole_offset, plan.header_bytes + 112);
  EXPECT_EQ(plan.buffers[2].whole_offset, plan.header_bytes + 112 + 128);
  EXPECT_EQ(plan.buffers[3].whole_offset, plan.header_bytes + 112 + 256);

  const PageLayout mla = DeepSeekMla();
  const BlockPlan mla_plan = Plan(mla, Spec("raw"));
  EXPECT_EQ(mla_plan.payload_bytes, mla.HotBytes());  // every record is a multiple of 16 already
}

TEST(BlockPlanTest, EveryCodecOnEveryFamilyMatchesTheFormula) {
  const std::vector<std::pair<std::string, PageLayout>> layouts = {
      {"qwen3-8b bf16", Qwen3_8B(DType::kBf16)},
      {"qwen3-8b fp16", Qwen3_8B(DType::kFp16)},
      {"qwen3-8b fp8", Qwen3_8B(DType::kFp8E4M3)},
      {"deepseek mla", DeepSeekMla()},
      {"small hybrid", SmallHybrid()},
      {"one layer with state", OneLayer(2, 5, 64, 16, 100)},
  };
  for (const auto& [name, layout] : layouts) {
    for (const char* codec : {"raw", "nvfp4", "nvfp4+rope", "nvfp4x2", "nvfp4x2+rope"}) {
      for (uint32_t alignment : {16u, 512u, 4096u, 65536u}) {
        SCOPED_TRACE(absl::StrCat(name, " ", codec, " alignment ", alignment));
        const BlockPlan plan = Plan(layout, Spec(codec, alignment));
        EXPECT_EQ(plan.header_bytes, 64 + 32 * layout.buffers.size());
        EXPECT_EQ(plan.payload_bytes, FormulaPayload(layout, plan.spec));
        EXPECT_EQ(plan.block_bytes, FormulaBlock(layout, plan.spec));
        ASSERT_FALSE(plan.records.empty());
        const LayerRecordPlan& last = plan.records.back();
        EXPECT_EQ(last.offset + last.padded_bytes, plan.header_bytes + plan.payload_bytes);
      }
    }
  }
}

// ---- Section order inside a layer record

TEST(BlockPlanTest, SectionOrderFp4DataThenScalesThenLossless) {
  // H=1, T=5, D=32 FP16 K and V in one layer.
  const PageLayout layout = OneLayer(1, 5, 32, 0);
  const BlockPlan plan = Plan(layout, Spec("nvfp4"));
  ASSERT_EQ(plan.records.size(), 1u);
  const LayerRecordPlan& record = plan.records[0];
  EXPECT_EQ(record.offset, plan.header_bytes);
  EXPECT_EQ(plan.header_bytes, 128u);
  const BufferPlan& k = plan.buffers[0];
  const BufferPlan& v = plan.buffers[1];
  EXPECT_EQ(k.data_offset - record.offset, 0u);
  EXPECT_EQ(v.data_offset - record.offset, 80u);
  EXPECT_EQ(k.scale_offset - record.offset, 160u);
  EXPECT_EQ(v.scale_offset - record.offset, 170u);
  EXPECT_EQ(record.bytes, 180u);
  EXPECT_EQ(record.padded_bytes, 192u);
  EXPECT_EQ(plan.payload_bytes, 192u);
  EXPECT_EQ(plan.block_bytes, 4096u);
  EXPECT_EQ(Plan(layout, Spec("nvfp4", 16)).block_bytes, 128u + 192);
}

TEST(BlockPlanTest, SectionOrderWithLosslessRopeAndLosslessBuffer) {
  // K: RoPE [0, 16) of 32 kept lossless, quantized run [16, 32). V: all 32 quantized.
  const PageLayout layout = OneLayer(1, 5, 32, 16, 100);
  const BlockPlan plan = Plan(layout, Spec("nvfp4+rope"));
  ASSERT_EQ(plan.records.size(), 1u);
  const uint64_t r = plan.records[0].offset;
  const BufferPlan& k = plan.buffers[0];
  const BufferPlan& v = plan.buffers[1];
  const BufferPlan& state = plan.buffers[2];
  EXPECT_EQ(k.quant_start, 16u);
  EXPECT_EQ(k.quant_len, 16u);
  EXPECT_EQ(k.row_lossless_bytes, 32u);
  EXPECT_EQ(k.data_offset - r, 0u);            // 5 x 16 / 2 = 40 bytes
  EXPECT_EQ(v.data_offset - r, 40u);           // 5 x 32 / 2 = 80 bytes
  EXPECT_EQ(k.scale_offset - r, 120u);         // 5 bytes
  EXPECT_EQ(k.row_lossless_offset - r, 125u);  // 5 rows x 32 bytes of RoPE
  EXPECT_EQ(v.scale_offset - r, 285u);         // 10 bytes
  EXPECT_EQ(state.encoding, BufferEncoding::kLossless);
  EXPECT_EQ(state.whole_offset - r, 295u);  // 100 bytes
  EXPECT_EQ(state.whole_bytes, 100u);
  EXPECT_EQ(plan.records[0].bytes, 395u);
  EXPECT_EQ(plan.records[0].padded_bytes, 400u);
}

TEST(BlockPlanTest, RopeAtTheEndOfTheRow) {
  PageLayout layout = OneLayer(1, 4, 64, 0);
  layout.buffers[0].rope_start = 48;
  layout.buffers[0].rope_len = 16;
  const BlockPlan plan = Plan(layout, Spec("nvfp4+rope"));
  EXPECT_EQ(plan.buffers[0].quant_start, 0u);
  EXPECT_EQ(plan.buffers[0].quant_len, 48u);
  EXPECT_EQ(plan.buffers[0].row_lossless_bytes, 32u);
  EXPECT_EQ(plan.buffers[1].quant_len, 64u);
  const BlockPlan lossy = Plan(layout, Spec("nvfp4"));
  EXPECT_EQ(lossy.buffers[0].quant_len, 64u) << "without +rope the RoPE range is quantized too";
}

// ---- Options a layout cannot take

TEST(BlockPlanTest, LosslessRopeInsideTheRowIsRejected) {
  PageLayout layout = OneLayer(1, 4, 64, 0);
  layout.buffers[0].rope_start = 16;
  layout.buffers[0].rope_len = 32;
  ExpectStatus(MakeBlockPlan(layout, Spec("nvfp4+rope")).status(),
               absl::StatusCode::kInvalidArgument, {"'k.0'", "[16, 48)"});
  ExpectStatus(MakeBlockPlan(layout, Spec("nvfp4x2+rope")).status(),
               absl::StatusCode::kInvalidArgument, {"'k.0'"});
  EXPECT_TRUE(MakeBlockPlan(layout, Spec("nvfp4")).ok());
  EXPECT_TRUE(MakeBlockPlan(layout, Spec("raw")).ok());
}

TEST(BlockPlanTest, QuantizedRunNotAMultipleOf16IsRejected) {
  const PageLayout layout = OneLayer(1, 4, 40, 0);
  for (const char* codec : {"nvfp4", "nvfp4x2"}) {
    ExpectStatus(MakeBlockPlan(layout, Spec(codec)).status(), absl::StatusCode::kInvalidArgument,
                 {"'k.0'", "head_dim 40", codec});
  }
  EXPECT_TRUE(MakeBlockPlan(layout, Spec("raw")).ok()) << "raw copies any row width";

  // A RoPE prefix of 8 leaves the quantized run [8, 64): it starts off a group boundary.
  const PageLayout rope8 = OneLayer(1, 4, 64, 8);
  ExpectStatus(MakeBlockPlan(rope8, Spec("nvfp4+rope")).status(),
               absl::StatusCode::kInvalidArgument, {"'k.0'", "[8, 64)"});
  EXPECT_TRUE(MakeBlockPlan(rope8, Spec("nvfp4")).ok());
}

TEST(BlockPlanTest, LosslessBuffersNeedNoGroups) {
  const PageLayout layout = OneLayer(1, 4, 32, 0, /*state_bytes=*/37);
  EXPECT_TRUE(MakeBlockPlan(layout, Spec("nvfp4")).ok());
}

TEST(BlockPlanTest, AlignmentMustBeAPowerOfTwoIn16To65536) {
  const PageLayout layout = OneLayer(1, 4, 32, 0);
  for (uint32_t bad : {0u, 1u, 8u, 48u, 3000u, 4097u, 131072u}) {
    ExpectStatus(MakeBlockPlan(layout, Spec("nvfp4", bad)).status(),
                 absl::StatusCode::kInvalidArgument, {absl::StrCat("alignment ", bad)});
  }
  for (uint32_t good : {16u, 32u, 4096u, 65536u}) {
    absl::StatusOr<BlockPlan> plan = MakeBlockPlan(layout, Spec("nvfp4", good));
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->block_bytes % good, 0u);
  }
}

TEST(BlockPlanTest, BlockOver4GiBIsRejected) {
  PageLayout layout;
  layout.tokens_per_page = 1;
  layout.pools = {PoolSpec{"kv", uint64_t{1} << 32}};
  for (uint32_t l = 0; l < 2; ++l) {
    BufferSpec b;
    b.name = absl::StrCat("state.", l);
    b.layer = l;
    b.role = BufferRole::kLossless;
    b.dtype = DType::kBytes;
    b.heads = 32768;
    b.head_dim = 65536;  // 2 GiB per buffer, 4 GiB in all: one header too many
    b.offset_bytes = uint64_t{l} << 31;
    layout.buffers.push_back(b);
  }
  ASSERT_TRUE(ValidateLayout(layout).ok()) << ValidateLayout(layout);
  ExpectStatus(MakeBlockPlan(layout, Spec("raw")).status(), absl::StatusCode::kInvalidArgument,
               {"4 GiB"});
}

TEST(BlockPlanTest, InvalidLayoutIsRejected) {
  PageLayout layout = OneLayer(1, 4, 32, 0);
  layout.tokens_per_page = 0;
  ExpectStatus(MakeBlockPlan(layout, Spec("nvfp4")).status(), absl::StatusCode::kInvalidArgument,
               {"tokens_per_page"});
}

// ---- Header

// A plan of three buffers (k.0 with lossless RoPE prefix, v.0, lossless state.0).
BlockPlan ThreeBufferPlan() { return Plan(OneLayer(2, 8, 64, 16, 100), Spec("nvfp4x2+rope", 512)); }

ColdBlockHeader FilledHeader(const BlockPlan& plan) {
  ColdBlockHeader h = PlanHeader(plan);
  h.buffers[0].scale_exp = -128;
  h.buffers[0].residual_scale_exp = 127;
  h.buffers[1].scale_exp = -37;
  h.buffers[1].residual_scale_exp = 23;
  h.payload_crc32c = 0xDEADBEEFu;
  return h;
}

std::vector<uint8_t> BlockWithHeader(const ColdBlockHeader& h, size_t size) {
  std::vector<uint8_t> block(size, 0x5A);
  WriteColdBlockHeader(h, absl::MakeSpan(block));
  return block;
}

TEST(ColdBlockHeaderTest, PlanHeaderDescribesThePlan) {
  const BlockPlan plan = ThreeBufferPlan();
  const ColdBlockHeader h = PlanHeader(plan);
  EXPECT_EQ(h.version, kColdBlockVersion);
  EXPECT_EQ(h.header_bytes, 64u + 3 * 32);
  EXPECT_EQ(h.codec, CodecId::kNvfp4x2);
  EXPECT_EQ(h.codec_flags, kCodecFlagRopeLossless);
  EXPECT_EQ(h.layout_fingerprint, LayoutFingerprint(plan.layout));
  EXPECT_EQ(h.tokens_per_page, 8u);
  EXPECT_EQ(h.alignment_bytes, 512u);
  EXPECT_EQ(h.payload_bytes, plan.payload_bytes);
  EXPECT_EQ(h.block_bytes, plan.block_bytes);
  ASSERT_EQ(h.buffers.size(), 3u);
  EXPECT_EQ(h.buffers[0].role, BufferRole::kAttentionK);
  EXPECT_EQ(h.buffers[0].encoding, BufferEncoding::kNvfp4x2);
  EXPECT_EQ(h.buffers[0].quant_start, 16u);
  EXPECT_EQ(h.buffers[0].quant_len, 48u);
  EXPECT_EQ(h.buffers[1].quant_len, 64u);
  EXPECT_EQ(h.buffers[2].role, BufferRole::kLossless);
  EXPECT_EQ(h.buffers[2].encoding, BufferEncoding::kLossless);
  EXPECT_EQ(h.buffers[2].tokens, 1u);
  EXPECT_EQ(h.buffers[2].head_dim, 100u);
}

TEST(ColdBlockHeaderTest, WriteThenParseRoundTripsEveryField) {
  const BlockPlan plan = ThreeBufferPlan();
  const ColdBlockHeader h = FilledHeader(plan);
  const std::vector<uint8_t> block = BlockWithHeader(h, plan.block_bytes);
  EXPECT_EQ(std::string(block.begin(), block.begin() + 4), "KVTB");

  absl::StatusOr<ColdBlockHeader> parsed = ParseColdBlockHeader(block);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->version, h.version);
  EXPECT_EQ(parsed->header_bytes, h.header_bytes);
  EXPECT_EQ(parsed->codec, h.codec);
  EXPECT_EQ(parsed->codec_flags, h.codec_flags);
  EXPECT_EQ(parsed->layout_fingerprint, h.layout_fingerprint);
  EXPECT_EQ(parsed->tokens_per_page, h.tokens_per_page);
  EXPECT_EQ(parsed->alignment_bytes, h.alignment_bytes);
  EXPECT_EQ(parsed->payload_bytes, h.payload_bytes);
  EXPECT_EQ(parsed->block_bytes, h.block_bytes);
  EXPECT_EQ(parsed->payload_crc32c, 0xDEADBEEFu);
  ASSERT_EQ(parsed->buffers.size(), h.buffers.size());
  for (size_t i = 0; i < h.buffers.size(); ++i) {
    const ColdBufferEntry& a = h.buffers[i];
    const ColdBufferEntry& b = parsed->buffers[i];
    SCOPED_TRACE(absl::StrCat("buffer ", i));
    EXPECT_EQ(b.role, a.role);
    EXPECT_EQ(b.dtype, a.dtype);
    EXPECT_EQ(b.encoding, a.encoding);
    EXPECT_EQ(b.layer, a.layer);
    EXPECT_EQ(b.heads, a.heads);
    EXPECT_EQ(b.tokens, a.tokens);
    EXPECT_EQ(b.head_dim, a.head_dim);
    EXPECT_EQ(b.quant_start, a.quant_start);
    EXPECT_EQ(b.quant_len, a.quant_len);
    EXPECT_EQ(b.scale_exp, a.scale_exp);
    EXPECT_EQ(b.residual_scale_exp, a.residual_scale_exp);
  }
}

TEST(ColdBlockHeaderTest, ShorterThanFixedHeaderIsDataLoss) {
  for (size_t size : {0u, 1u, 63u}) {
    std::vector<uint8_t> block(size, 0);
    ExpectStatus(ParseColdBlockHeader(block).status(), absl::StatusCode::kDataLoss,
                 {absl::StrCat(size, " bytes")});
  }
}

TEST(ColdBlockHeaderTest, BadMagicIsDataLoss) {
  const BlockPlan plan = ThreeBufferPlan();
  std::vector<uint8_t> block = BlockWithHeader(FilledHeader(plan), plan.block_bytes);
  block[0] = 'X';
  ExpectStatus(ParseColdBlockHeader(block).status(), absl::StatusCode::kDataLoss, {"bad magic"});
  std::vector<uint8_t> zeros(plan.block_bytes, 0);
  ExpectStatus(ParseColdBlockHeader(zeros).status(), absl::StatusCode::kDataLoss,
               {"bad magic 0x00000000"});
}

TEST(ColdBlockHeaderTest, UnsupportedVersionIsDataLoss) {
  const BlockPlan plan = ThreeBufferPlan();
  for (uint16_t version : {uint16_t{0}, uint16_t{2}, uint16_t{0xffff}}) {
    ColdBlockHeader h = FilledHeader(plan);
    h.version = version;
    ExpectStatus(ParseColdBlockHeader(BlockWithHeader(h, plan.block_bytes)).status(),
                 absl::StatusCode::kDataLoss, {absl::StrCat("version ", version)});
  }
}

TEST(ColdBlockHeaderTest, EverySingleBitFlipInTheHeaderIsDataLoss) {
  const BlockPlan plan = ThreeBufferPlan();
  std::vector<uint8_t> block = BlockWithHeader(FilledHeader(plan), plan.block_bytes);
  ASSERT_TRUE(ParseColdBlockHeader(block).ok());
  const size_t header_bytes = ColdBlockHeaderBytes(3);
  ASSERT_EQ(header_bytes, 160u);
  for (size_t bit = 0; bit < header_bytes * 8; ++bit) {
    block[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    const absl::Status status = ParseColdBlockHeader(block).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss)
        << "byte " << bit / 8 << " bit " << bit % 8 << ": " << status;
    block[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
  }
  EXPECT_TRUE(ParseColdBlockHeader(block).ok());
}

TEST(ColdBlockHeaderTest, PayloadBytesAreNotTheHeadersConcern) {
  const BlockPlan plan = ThreeBufferPlan();
  std::vector<uint8_t> block = BlockWithHeader(FilledHeader(plan), plan.block_bytes);
  block[plan.header_bytes] ^= 1;
  block.back() ^= 0x80;
  EXPECT_TRUE(ParseColdBlockHeader(block).ok()) << "the payload CRC is checked by the codec";
}

TEST(ColdBlockHeaderTest, BlockSizeDifferingFromHeaderIsDataLoss) {
  const BlockPlan plan = ThreeBufferPlan();
  const ColdBlockHeader h = FilledHeader(plan);
  ASSERT_GT(plan.block_bytes, 160u);
  for (uint64_t size : {plan.block_bytes - 1, uint64_t{160}, plan.block_bytes - 512}) {
    ExpectStatus(ParseColdBlockHeader(BlockWithHeader(h, size)).status(),
                 absl::StatusCode::kDataLoss, {"truncated", absl::StrCat(plan.block_bytes)});
  }
  for (uint64_t size : {plan.block_bytes + 1, plan.block_bytes + 512}) {
    ExpectStatus(ParseColdBlockHeader(BlockWithHeader(h, size)).status(),
                 absl::StatusCode::kDataLoss, {"oversized", absl::StrCat(plan.block_bytes)});
  }
}

TEST(ColdBlockHeaderTest, BlockShorterThanItsBufferTableIsDataLoss) {
  const BlockPlan plan = ThreeBufferPlan();
  std::vector<uint8_t> block = BlockWithHeader(FilledHeader(plan), plan.block_bytes);
  block.resize(100);  // fixed header intact, buffer table cut
  ExpectStatus(ParseColdBlockHeader(block).status(), absl::StatusCode::kDataLoss, {"100 bytes"});
}

// Fields a writer could get wrong while still producing a correct header checksum.
TEST(ColdBlockHeaderTest, OutOfRangeFieldsWithValidChecksumAreDataLoss) {
  const BlockPlan plan = ThreeBufferPlan();
  struct Case {
    std::string what;
    std::function<void(ColdBlockHeader&)> apply;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"codec", [](ColdBlockHeader& h) { h.codec = static_cast<CodecId>(7); }, "codec id 7"},
      {"flags", [](ColdBlockHeader& h) { h.codec_flags = 0x82; }, "flags"},
      {"alignment", [](ColdBlockHeader& h) { h.alignment_bytes = 3000; }, "alignment 3000"},
      {"block_bytes", [](ColdBlockHeader& h) { h.block_bytes += 512; }, "inconsistent"},
      {"payload_bytes", [](ColdBlockHeader& h) { h.payload_bytes += 512; }, "inconsistent"},
      {"role", [](ColdBlockHeader& h) { h.buffers[1].role = static_cast<BufferRole>(9); },
       "buffer 1"},
      {"dtype", [](ColdBlockHeader& h) { h.buffers[2].dtype = static_cast<DType>(0); }, "buffer 2"},
      {"encoding",
       [](ColdBlockHeader& h) { h.buffers[0].encoding = static_cast<BufferEncoding>(3); },
       "buffer 0"},
      {"quant_len", [](ColdBlockHeader& h) { h.buffers[0].quant_len = 40; }, "groups of 16"},
      {"quant range", [](ColdBlockHeader& h) { h.buffers[1].quant_start = 16; }, "head_dim 64"},
  };
  for (const Case& c : cases) {
    ColdBlockHeader h = FilledHeader(plan);
    c.apply(h);
    SCOPED_TRACE(c.what);
    ExpectStatus(ParseColdBlockHeader(BlockWithHeader(h, plan.block_bytes)).status(),
                 absl::StatusCode::kDataLoss, {c.message});
  }
}

TEST(ColdBlockHeaderTest, TextFormShowsCodecFingerprintAndScales) {
  const BlockPlan plan = ThreeBufferPlan();
  ColdBlockHeader h = FilledHeader(plan);
  h.layout_fingerprint = 0x00c0ffee12345678ull;
  const std::string text = ColdBlockHeaderToText(h);
  EXPECT_TRUE(Contains(text, "nvfp4x2+rope")) << text;
  EXPECT_TRUE(Contains(text, "00c0ffee12345678")) << text;
  EXPECT_TRUE(Contains(text, "scale 2^-128 residual 2^127")) << text;
  EXPECT_TRUE(Contains(text, "scale 2^-37 residual 2^23")) << text;
  EXPECT_TRUE(Contains(text, "scale 2^0 residual 2^0")) << text;
  EXPECT_TRUE(Contains(text, "deadbeef")) << text;
}

TEST(ColdBlockHeaderTest, JsonFormShowsCodecFingerprintAndScales) {
  const BlockPlan plan = ThreeBufferPlan();
  ColdBlockHeader h = FilledHeader(plan);
  h.layout_fingerprint = 0x00c0ffee12345678ull;
  const std::string text = ColdBlockHeaderToJson(h);
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(j.is_discarded()) << text;
  EXPECT_EQ(j.value("codec", ""), "nvfp4x2") << text;
  EXPECT_EQ(j.value("rope_lossless", false), true) << text;
  EXPECT_EQ(j.value("layout_fingerprint", ""), "00c0ffee12345678") << text;
  EXPECT_EQ(j.value("payload_crc32c", ""), "deadbeef") << text;
  ASSERT_TRUE(j.contains("buffers") && j["buffers"].is_array() && j["buffers"].size() == 3) << text;
  EXPECT_EQ(j["buffers"][0].value("scale_exp", 0), -128) << text;
  EXPECT_EQ(j["buffers"][0].value("residual_scale_exp", 0), 127) << text;
  EXPECT_EQ(j["buffers"][1].value("scale_exp", 0), -37) << text;
  EXPECT_EQ(j["buffers"][1].value("residual_scale_exp", 0), 23) << text;
  EXPECT_EQ(j["buffers"][2].value("scale_exp", 1), 0) << text;
}

// ---- CodecSpec

TEST(CodecSpecTest, ParsesEveryValidName) {
  struct Expected {
    const char* text;
    CodecId codec;
    bool rope_lossless;
  };
  for (const Expected& e :
       {Expected{"raw", CodecId::kRaw, false}, Expected{"nvfp4", CodecId::kNvfp4, false},
        Expected{"nvfp4+rope", CodecId::kNvfp4, true},
        Expected{"nvfp4x2", CodecId::kNvfp4x2, false},
        Expected{"nvfp4x2+rope", CodecId::kNvfp4x2, true}}) {
    absl::StatusOr<CodecSpec> spec = CodecSpec::Parse(e.text);
    ASSERT_TRUE(spec.ok()) << e.text << ": " << spec.status();
    EXPECT_EQ(spec->codec, e.codec) << e.text;
    EXPECT_EQ(spec->rope_lossless, e.rope_lossless) << e.text;
    EXPECT_EQ(spec->alignment_bytes, 4096u) << e.text;
    EXPECT_EQ(spec->ToString(), e.text);
  }
}

TEST(CodecSpecTest, RejectsUnknownNamesListingValidOnes) {
  for (const char* bad : {"zstd", "", "NVFP4", "nvfp4+rope+rope", "+rope", "nvfp8"}) {
    absl::StatusOr<CodecSpec> spec = CodecSpec::Parse(bad);
    ASSERT_FALSE(spec.ok()) << bad;
    ExpectStatus(
        spec.status(), absl::StatusCode::kInvalidArgument,
        {absl::StrCat("'", bad, "'"), "raw", "nvfp4", "nvfp4+rope", "nvfp4x2", "nvfp4x2+rope"});
  }
}

// raw is lossless already, so "+rope" means nothing for it; the error should still tell the user
// what they can write instead.
TEST(CodecSpecTest, RawWithRopeIsRejectedListingValidNames) {
  absl::StatusOr<CodecSpec> spec = CodecSpec::Parse("raw+rope");
  ASSERT_FALSE(spec.ok());
  ExpectStatus(spec.status(), absl::StatusCode::kInvalidArgument,
               {"'raw+rope'", "raw", "nvfp4", "nvfp4+rope", "nvfp4x2", "nvfp4x2+rope"});
}

TEST(CodecSpecTest, CodecNames) {
  EXPECT_EQ(CodecName(CodecId::kRaw), "raw");
  EXPECT_EQ(CodecName(CodecId::kNvfp4), "nvfp4");
  EXPECT_EQ(CodecName(CodecId::kNvfp4x2), "nvfp4x2");
}

}  // namespace
}  // namespace kvtier::codec

namespace kvtier::codec {
namespace {

TEST(ColdBlockHeaderPrefixTest, ReadsTheBlockSizeFromAFileOfBlocks) {
  GqaOptions o;
  o.num_layers = 1;
  o.kv_heads = 1;
  o.head_dim = 32;
  o.tokens_per_page = 16;
  auto layout = BuildGqaLayout(o);
  ASSERT_TRUE(layout.ok());
  auto codec = Codec::Create(*layout, CodecSpec{});
  ASSERT_TRUE(codec.ok());
  std::vector<uint8_t> page(FlatPageBytes(*layout), 0x3c);
  std::vector<uint8_t> file(2 * (*codec)->block_bytes());
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE((*codec)
                    ->Encode(FlatPageView(*layout, page),
                             absl::MakeSpan(file).subspan(i * (*codec)->block_bytes(),
                                                          (*codec)->block_bytes()))
                    .ok());
  }
  auto header = ParseColdBlockHeaderPrefix(file);
  ASSERT_TRUE(header.ok()) << header.status();
  EXPECT_EQ(header->block_bytes, (*codec)->block_bytes());
  // The whole file is not one block; a header cut short is DataLoss either way.
  EXPECT_TRUE(absl::IsDataLoss(ParseColdBlockHeader(file).status()));
  EXPECT_TRUE(
      absl::IsDataLoss(ParseColdBlockHeaderPrefix(absl::MakeConstSpan(file).first(40)).status()));
  file[61] ^= 1;  // header checksum
  EXPECT_TRUE(absl::IsDataLoss(ParseColdBlockHeaderPrefix(file).status()));
}

}  // namespace
}  // namespace kvtier::codec
