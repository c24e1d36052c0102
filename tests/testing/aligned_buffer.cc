// AlignedBuffer and the seeded byte patterns (a SplitMix64 stream, 8 bytes per step).
#include "tests/testing/aligned_buffer.h"

#include <algorithm>
#include <cstring>

namespace kvtier::testing {
namespace {

uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

AlignedBuffer::AlignedBuffer(size_t size, size_t alignment) : size_(size) {
  const size_t allocated = (size + alignment - 1) / alignment * alignment;
  data_.reset(
      static_cast<uint8_t*>(std::aligned_alloc(alignment, allocated == 0 ? alignment : allocated)));
  if (data_ == nullptr) std::abort();
  std::memset(data_.get(), 0, allocated == 0 ? alignment : allocated);
}

void FillPattern(absl::Span<uint8_t> bytes, uint64_t seed) {
  uint64_t state = seed;
  for (size_t i = 0; i < bytes.size(); i += 8) {
    const uint64_t word = SplitMix64(state);
    std::memcpy(bytes.data() + i, &word, std::min<size_t>(8, bytes.size() - i));
  }
}

int64_t FirstPatternMismatch(absl::Span<const uint8_t> bytes, uint64_t seed) {
  uint64_t state = seed;
  for (size_t i = 0; i < bytes.size(); i += 8) {
    const uint64_t word = SplitMix64(state);
    const size_t n = std::min<size_t>(8, bytes.size() - i);
    if (std::memcmp(bytes.data() + i, &word, n) != 0) {
      for (size_t j = 0; j < n; ++j) {
        if (bytes[i + j] != reinterpret_cast<const uint8_t*>(&word)[j]) {
          return static_cast<int64_t>(i + j);
        }
      }
    }
  }
  return -1;
}

}  // namespace kvtier::testing
