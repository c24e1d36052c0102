// Test buffers for block I/O: AlignedBuffer (zeroed memory from std::aligned_alloc, owned), and
// deterministic byte patterns keyed by a seed to fill a block and check it later. Not thread-safe
// per object; distinct objects may be used from different threads.
#ifndef KVTIER_TESTS_TESTING_ALIGNED_BUFFER_H_
#define KVTIER_TESTS_TESTING_ALIGNED_BUFFER_H_

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>

#include "absl/types/span.h"

namespace kvtier::testing {

class AlignedBuffer {
 public:
  // `size` bytes (rounded up to a multiple of `alignment` for the allocation) at an address that
  // is a multiple of `alignment` (a power of two). Aborts when memory is exhausted.
  AlignedBuffer(size_t size, size_t alignment = 4096);

  uint8_t* data() { return data_.get(); }
  const uint8_t* data() const { return data_.get(); }
  size_t size() const { return size_; }
  absl::Span<uint8_t> span() { return absl::Span<uint8_t>(data_.get(), size_); }
  absl::Span<const uint8_t> span() const { return absl::Span<const uint8_t>(data_.get(), size_); }

 private:
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint8_t, Free> data_;
  size_t size_;
};

// Fills `bytes` with a pseudo-random sequence determined by `seed` alone.
void FillPattern(absl::Span<uint8_t> bytes, uint64_t seed);

// The index of the first byte of `bytes` that differs from FillPattern(seed), or -1 when all match.
int64_t FirstPatternMismatch(absl::Span<const uint8_t> bytes, uint64_t seed);

}  // namespace kvtier::testing

#endif  // KVTIER_TESTS_TESTING_ALIGNED_BUFFER_H_
