// Test cold blocks: real, verifiable blocks of the `raw` codec whose bytes are a pure function of
// an id, so that a test (or a crash harness after a restart) can recompute what a block must hold.
// Header-only; the consumer links kvtier_codec. Thread-safe.
#ifndef KVTIER_TESTS_TESTING_COLD_BLOCKS_H_
#define KVTIER_TESTS_TESTING_COLD_BLOCKS_H_

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "codec/codec.h"
#include "codec/page_layout.h"
#include "daemon/index/block_record.h"

namespace kvtier::testing {

inline uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// A raw-codec layout with one lossless buffer of `payload_bytes` per page.
inline codec::PageLayout LosslessLayout(uint32_t payload_bytes) {
  codec::PageLayout layout;
  layout.tokens_per_page = 1;
  layout.pools.push_back({"pool", payload_bytes});
  codec::BufferSpec b;
  b.name = "state";
  b.role = codec::BufferRole::kLossless;
  b.dtype = codec::DType::kBytes;
  b.heads = 1;
  b.tokens = 1;
  b.head_dim = payload_bytes;
  layout.buffers.push_back(b);
  return layout;
}

// The block of `id`: a raw block whose payload is SplitMix64 noise seeded by the id.
// REQUIRES: payload_bytes > 0.
inline std::vector<uint8_t> MakeTestBlock(uint64_t id, uint32_t payload_bytes) {
  const codec::PageLayout layout = LosslessLayout(payload_bytes);
  codec::CodecSpec spec;
  spec.codec = codec::CodecId::kRaw;
  std::unique_ptr<codec::Codec> c = codec::Codec::Create(layout, spec).value();
  std::vector<uint8_t> page(payload_bytes);
  uint64_t state = id * 0x2545F4914F6CDD1Dull + 1;
  for (size_t i = 0; i < page.size(); i += 8) {
    const uint64_t v = SplitMix64(state);
    std::memcpy(page.data() + i, &v, std::min<size_t>(8, page.size() - i));
  }
  std::vector<uint8_t> block(c->block_bytes());
  const absl::Status st = c->Encode(codec::FlatPageView(layout, page), absl::MakeSpan(block));
  if (!st.ok()) std::abort();
  return block;
}

// A block hash for `id`: its 8 bytes little-endian, then noise.
inline index::BlockHash TestHash(uint64_t id) {
  index::BlockHash h{};
  uint64_t state = id ^ 0xA5A5A5A5DEADBEEFull;
  for (size_t i = 0; i < h.size(); i += 8) {
    const uint64_t v = i == 0 ? id : SplitMix64(state);
    std::memcpy(h.data() + i, &v, 8);
  }
  return h;
}

}  // namespace kvtier::testing

#endif  // KVTIER_TESTS_TESTING_COLD_BLOCKS_H_
