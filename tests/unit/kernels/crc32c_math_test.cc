// The GPU seal's arithmetic (kernels/crc32c_math.h), on the host: the kernel's decomposition of a
// message into equal pieces after leading zeros, joined in a tree, gives codec::Crc32c for every
// length and thread count the kernel uses, and a header built from MakeSealTemplate the way the
// kernel builds it (exponents and payload checksum patched in, its own checksum over the result)
// is codec::WriteColdBlockHeader's. Runs in every build (no device).
#include "kernels/crc32c_math.h"

#include <cstring>
#include <random>
#include <vector>

#include "codec/cold_block.h"
#include "codec/crc32c.h"
#include "codec/page_layout.h"
#include "gtest/gtest.h"
#include "kernels/block_sealer.h"

namespace kvtier::kernels {
namespace {

std::vector<uint32_t> Tables() {
  std::vector<uint32_t> t(4 * 256);
  for (uint32_t i = 0; i < t.size(); ++i) t[i] = crc::SliceTableEntry(i >> 8, i & 255);
  return t;
}

// The register of `piece` bytes of `msg` from `start` (negative: leading zeros), as a thread of
// block_seal.cu runs it.
uint32_t PieceCrc(const uint8_t* msg, int64_t start, uint64_t piece) {
  static const std::vector<uint32_t> table = Tables();
  uint32_t reg = 0;
  for (uint64_t off = 0; off < piece; off += 16) {
    const int64_t m = start + static_cast<int64_t>(off);
    if (m < 0) continue;
    for (int w = 0; w < 4; ++w) {
      uint32_t word;
      std::memcpy(&word, msg + m + 4 * w, 4);
      reg = crc::UpdateWord(reg, word, table.data());
    }
  }
  return reg;
}

// A tree over v (a power of two of leaves, message order) with join[l] at level l.
uint32_t Join(std::vector<uint32_t> v, const uint32_t* join) {
  for (int l = 0; (size_t{1} << l) < v.size(); ++l) {
    for (size_t t = 0; t < v.size(); t += size_t{2} << l) {
      v[t] = crc::MultModP(join[l], v[t]) ^ v[t + (size_t{1} << l)];
    }
  }
  return v[0];
}

// The header's CRC as SealHeaderKernel's first warp computes it: `threads` pieces.
uint32_t SplitCrc(const uint8_t* msg, uint64_t len, int threads) {
  const crc::SplitPlan p = crc::PlanSplit(len, threads);
  EXPECT_EQ(p.piece % 16, 0u);
  EXPECT_EQ(p.pad % 16, 0u);
  EXPECT_EQ(p.piece * threads, len + p.pad);
  std::vector<uint32_t> v(threads);
  for (int t = 0; t < threads; ++t) {
    v[t] = PieceCrc(msg, static_cast<int64_t>(t * p.piece) - static_cast<int64_t>(p.pad), p.piece);
  }
  return crc::FinishCrc(Join(v, p.join), p.ones);
}

// The payload's CRC as ChunkCrcKernel (a CTA per 64 KiB chunk) and SealHeaderKernel (the chunks
// joined, the missing ones in front) compute it.
uint32_t ChunkedCrc(const uint8_t* msg, uint64_t len) {
  crc::ChunkPlan p;
  EXPECT_TRUE(crc::PlanChunks(len, &p));
  EXPECT_EQ(p.pad % 16, 0u);
  const int threads = crc::ChunkPlan::kChunkThreads;
  std::vector<uint32_t> leaves(threads, 0);
  for (uint64_t c = 0; c < p.chunks; ++c) {
    std::vector<uint32_t> v(threads);
    for (int t = 0; t < threads; ++t) {
      const int64_t start =
          static_cast<int64_t>(c * crc::ChunkPlan::kChunkBytes + t * crc::ChunkPlan::kPieceBytes) -
          static_cast<int64_t>(p.pad);
      v[t] = PieceCrc(msg, start, crc::ChunkPlan::kPieceBytes);
    }
    leaves[threads - p.chunks + c] = Join(v, p.piece_join);
  }
  return crc::FinishCrc(Join(leaves, p.chunk_join), p.ones);
}

TEST(Crc32cMathTest, ZerosOperatorAppendsZeroBytes) {
  // A register carried over n zero bytes equals the CRC of those bytes from that register.
  const std::vector<uint8_t> zeros(1000, 0);
  for (uint64_t n : {0u, 1u, 7u, 16u, 999u}) {
    const uint32_t reg = ~codec::Crc32c("kvtier", 6);
    EXPECT_EQ(~crc::MultModP(crc::ZerosOperator(n), reg),
              codec::Crc32cExtend(~reg, zeros.data(), n))
        << n;
  }
}

TEST(Crc32cMathTest, PiecesJoinedInATreeAreTheWholeCrc) {
  std::mt19937_64 rng(7);
  std::vector<uint8_t> msg(5 * 1024 * 1024);
  for (auto& b : msg) b = static_cast<uint8_t>(rng());
  // The kernels' two shapes (header: 32 pieces; payload: chunks of 1024 pieces) over lengths
  // that leave no padding, some, and more padding than a piece or a chunk; the payloads of the
  // bench's nvfp4 and raw Qwen3-8B blocks.
  std::vector<uint64_t> lengths = {
      16,        32,    48,    512,    1024,           2368,
      4096 - 16, 16400, 65536, 131072, 1331200 - 2368, 4722688 + 4096 - 2368};
  for (int i = 0; i < 12; ++i) lengths.push_back((rng() % 200000 + 1) * 16);
  for (uint64_t len : lengths) {
    ASSERT_LE(len, msg.size());
    const uint32_t want = codec::Crc32c(msg.data(), len);
    EXPECT_EQ(ChunkedCrc(msg.data(), len), want) << len << " bytes in chunks";
    if (len <= 65536) {
      EXPECT_EQ(SplitCrc(msg.data(), len, 32), want) << len << " bytes, 32 pieces";
    }
  }
  crc::ChunkPlan too_large;
  EXPECT_FALSE(crc::PlanChunks((uint64_t{64} << 20) + 16, &too_large));
}

TEST(Crc32cMathTest, TheSealTemplateMakesTheCodecsHeader) {
  for (const char* spec : {"raw", "nvfp4", "nvfp4+rope", "nvfp4x2"}) {
    const codec::PageLayout layout =
        codec::BuildGqaLayout({3, 4, 128, 32, codec::DType::kBf16, 0, 64}).value();
    const codec::BlockPlan plan =
        codec::MakeBlockPlan(layout, codec::CodecSpec::Parse(spec).value()).value();
    const size_t n = plan.buffers.size();
    const int exps = spec == std::string("raw")
                         ? 0
                         : static_cast<int>(spec == std::string("nvfp4x2") ? 2 * n : n);
    const SealTemplate t = MakeSealTemplate(plan, exps);
    ASSERT_EQ(t.header.size(), plan.header_bytes);
    // The header the host writes for some exponents and a payload checksum.
    codec::ColdBlockHeader h = codec::PlanHeader(plan);
    std::vector<int8_t> staged(exps);
    for (int e = 0; e < exps; ++e) staged[e] = static_cast<int8_t>(e * 7 - 60);
    for (size_t i = 0; i < n && exps > 0; ++i) {
      h.buffers[i].scale_exp = staged[i];
      if (plan.buffers[i].passes == 2 && static_cast<size_t>(exps) > n) {
        h.buffers[i].residual_scale_exp = staged[n + i];
      }
    }
    h.payload_crc32c = 0x12345678u;
    std::vector<uint8_t> expected(plan.header_bytes);
    codec::WriteColdBlockHeader(h, absl::MakeSpan(expected));
    // The kernel's: template, exponents, payload checksum, then its own checksum.
    std::vector<uint8_t> got = t.header;
    for (int e = 0; e < exps; ++e) {
      if (t.exp_offsets[e] >= 0) got[t.exp_offsets[e]] = static_cast<uint8_t>(staged[e]);
    }
    const uint32_t payload_crc = 0x12345678u;
    std::memcpy(got.data() + codec::kColdBlockPayloadCrcOffset, &payload_crc, 4);
    const uint32_t header_crc = SplitCrc(got.data(), got.size(), 32);
    std::memcpy(got.data() + codec::kColdBlockHeaderCrcOffset, &header_crc, 4);
    EXPECT_TRUE(got == expected) << spec;
  }
}

}  // namespace
}  // namespace kvtier::kernels
