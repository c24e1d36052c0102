// libFuzzer target for the cold-block parser and decoders: arbitrary bytes go to
// ParseColdBlockHeader and to Codec::Decode of a few small fixed (layout, codec) pairs; nothing may
// crash, read out of bounds, hit undefined behaviour or leak. Built by tests/fuzz/CMakeLists.txt
// (KVTIER_BUILD_FUZZERS=ON, clang) and run by scripts/fuzz.sh, which seeds it with valid blocks of
// the same fixtures. Single-threaded, as libFuzzer calls it.
//
// Two ways in per input:
//  1. The input as a whole block, for every fixture (header parsing, size and identity checks,
//     payload checksum).
//  2. The input as the payload of a block of one fixture (chosen by the first byte), behind a
//     valid header whose scale exponents come from the input, and sealed with correct checksums,
//     so the fuzzer reaches the E2M1/E4M3 decoding paths instead of stopping at the checksum.
// Whenever Decode accepts a block, the decoded page is encoded again (must not crash) and, if that
// succeeds, the new block must decode: a block the encoder wrote is always readable.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "codec/codec.h"
#include "codec/codec_spec.h"
#include "codec/cold_block.h"
#include "codec/dtype.h"
#include "codec/page_layout.h"

namespace kvtier::codec {
namespace {

// The fixtures. scripts/fuzz.sh writes seed blocks for the same layouts and codecs (keep them in
// sync): GQA 2 layers x 2 heads x head_dim 32 x 16 tokens with RoPE on [16, 32), in BF16 and FP8,
// and MLA 1 layer with a 32 + 16 latent, 8 tokens, FP16 and an 8-byte-per-token indexer. All
// blocks use 16-byte alignment to stay small.
constexpr uint32_t kAlignment = 16;

struct Fixture {
  std::unique_ptr<Codec> codec;
  std::vector<uint8_t> page;   // FlatPageBytes
  std::vector<uint8_t> block;  // block_bytes, scratch for re-encoding and sealed inputs
};

GqaOptions SmallGqa(DType dtype) {
  GqaOptions o;
  o.num_layers = 2;
  o.kv_heads = 2;
  o.head_dim = 32;
  o.tokens_per_page = 16;
  o.dtype = dtype;
  o.rope_start = 16;
  o.rope_len = 16;
  return o;
}

MlaOptions SmallMla() {
  MlaOptions o;
  o.num_layers = 1;
  o.kv_lora_rank = 32;
  o.rope_dim = 16;
  o.tokens_per_page = 8;
  o.dtype = DType::kFp16;
  o.indexer_bytes_per_token = 8;
  return o;
}

[[noreturn]] void Fail(const char* what, const absl::Status& status) {
  std::fprintf(stderr, "cold_block_fuzz: %s: %s\n", what, status.ToString().c_str());
  std::abort();
}

Fixture MakeFixture(const absl::StatusOr<PageLayout>& layout, const char* codec_name) {
  if (!layout.ok()) Fail("fixture layout", layout.status());
  absl::StatusOr<CodecSpec> spec = CodecSpec::Parse(codec_name);
  if (!spec.ok()) Fail("fixture codec", spec.status());
  spec->alignment_bytes = kAlignment;
  absl::StatusOr<std::unique_ptr<Codec>> codec = Codec::Create(*layout, *spec);
  if (!codec.ok()) Fail("fixture codec", codec.status());
  Fixture f;
  f.codec = *std::move(codec);
  f.page.assign(FlatPageBytes(*layout), 0);
  f.block.assign(f.codec->block_bytes(), 0);
  return f;
}

// CRC32C (Castagnoli, reflected 0x82F63B78), bit by bit: an independent reference for sealing
// fuzzed payloads. Checked against a block the codec wrote before use.
uint32_t ReferenceCrc32c(const uint8_t* data, size_t n) {
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    crc ^= data[i];
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return ~crc;
}

struct Fixtures {
  std::vector<Fixture> all;
  bool can_seal = false;  // ReferenceCrc32c agrees with the codec's payload checksum
};

Fixtures& GetFixtures() {
  static Fixtures* const fixtures = [] {
    auto* f = new Fixtures;
    const absl::StatusOr<PageLayout> gqa_bf16 = BuildGqaLayout(SmallGqa(DType::kBf16));
    const absl::StatusOr<PageLayout> gqa_fp8 = BuildGqaLayout(SmallGqa(DType::kFp8E4M3));
    const absl::StatusOr<PageLayout> mla_fp16 = BuildMlaLayout(SmallMla());
    f->all.push_back(MakeFixture(gqa_bf16, "raw"));
    f->all.push_back(MakeFixture(gqa_bf16, "nvfp4"));
    f->all.push_back(MakeFixture(gqa_bf16, "nvfp4x2"));
    f->all.push_back(MakeFixture(gqa_bf16, "nvfp4+rope"));
    f->all.push_back(MakeFixture(gqa_fp8, "nvfp4"));
    f->all.push_back(MakeFixture(mla_fp16, "nvfp4x2+rope"));
    // Encode a page of ones with the first quantizing fixture and compare checksums.
    Fixture& probe = f->all[1];
    for (size_t i = 0; i < probe.page.size() / 2; ++i) {
      StoreFromFloat(DType::kBf16, 1.0f, probe.page.data(), i);
    }
    absl::Status status =
        probe.codec->Encode(FlatPageView(probe.codec->layout(), absl::MakeConstSpan(probe.page)),
                            absl::MakeSpan(probe.block));
    if (!status.ok()) Fail("probe encode", status);
    absl::StatusOr<ColdBlockHeader> header = ParseColdBlockHeader(probe.block);
    if (!header.ok()) Fail("probe header", header.status());
    f->can_seal =
        ReferenceCrc32c(probe.block.data() + header->header_bytes,
                        probe.block.size() - header->header_bytes) == header->payload_crc32c;
    if (!f->can_seal) {
      std::fprintf(stderr,
                   "cold_block_fuzz: payload checksum is not plain CRC32C; sealed inputs off\n");
    }
    return f;
  }();
  return *fixtures;
}

// Decodes `block` with fixture `f`; on success encodes the page again and checks that the new
// block decodes.
void DecodeAndReencode(Fixture& f, absl::Span<const uint8_t> block) {
  const PageLayout& layout = f.codec->layout();
  if (!f.codec->Decode(block, FlatPageView(layout, absl::MakeSpan(f.page))).ok()) return;
  std::vector<uint8_t> reencoded(f.codec->block_bytes());
  absl::Status status =
      f.codec->Encode(FlatPageView(layout, absl::MakeConstSpan(f.page)), absl::MakeSpan(reencoded));
  if (!status.ok()) return;
  status = f.codec->Decode(reencoded, FlatPageView(layout, absl::MakeSpan(f.page)));
  if (!status.ok()) Fail("a block written by Encode does not decode", status);
}

// Builds a block of fixture `f` around fuzzed bytes: header from the plan with the scale
// exponents taken from `data`, payload from the rest of `data`, then sealed.
void DecodeSealed(Fixture& f, const uint8_t* data, size_t size) {
  const BlockPlan& plan = f.codec->plan();
  ColdBlockHeader header = PlanHeader(plan);
  for (ColdBufferEntry& entry : header.buffers) {
    if (size >= 2) {
      entry.scale_exp = static_cast<int8_t>(data[0]);
      entry.residual_scale_exp = static_cast<int8_t>(data[1]);
      data += 2;
      size -= 2;
    }
  }
  std::vector<uint8_t> block(plan.block_bytes, 0);
  const size_t payload = block.size() - header.header_bytes;
  std::memcpy(block.data() + header.header_bytes, data, size < payload ? size : payload);
  header.payload_crc32c = ReferenceCrc32c(block.data() + header.header_bytes, payload);
  WriteColdBlockHeader(header, absl::MakeSpan(block));
  DecodeAndReencode(f, block);
}

}  // namespace
}  // namespace kvtier::codec

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvtier::codec;  // NOLINT(build/namespaces): entry point of this file only
  Fixtures& fixtures = GetFixtures();
  const absl::Span<const uint8_t> input(data, size);

  absl::StatusOr<ColdBlockHeader> header = ParseColdBlockHeader(input);
  if (header.ok()) {
    std::string text = ColdBlockHeaderToText(*header);
    std::string json = ColdBlockHeaderToJson(*header);
    if (text.empty() || json.empty()) std::abort();
  }
  for (Fixture& f : fixtures.all) DecodeAndReencode(f, input);

  if (fixtures.can_seal && size >= 1) {
    Fixture& f = fixtures.all[data[0] % fixtures.all.size()];
    DecodeSealed(f, data + 1, size - 1);
  }
  return 0;
}
