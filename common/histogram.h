// LatencyHistogram: a lock-free histogram of durations in microseconds with fixed, Prometheus-style
// cumulative buckets (1 us .. ~67 s, powers of two) plus a count and a sum. Record() is wait-free
// and may be called from any thread; Snapshot() reads a consistent-enough copy for metrics.
#ifndef KVTIER_COMMON_HISTOGRAM_H_
#define KVTIER_COMMON_HISTOGRAM_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace kvtier {

class LatencyHistogram {
 public:
  // Upper bounds are 2^i microseconds for i in [0, kBuckets - 1); the last bucket is +Inf.
  static constexpr size_t kBuckets = 28;

  struct Snapshot {
    std::array<uint64_t, kBuckets> counts{};  // per bucket, not cumulative
    uint64_t count = 0;
    uint64_t sum_us = 0;
    // Upper bound in microseconds of bucket i (the last is infinite: returns UINT64_MAX).
    static uint64_t UpperBoundUs(size_t i) {
      return i + 1 < kBuckets ? uint64_t{1} << i : UINT64_MAX;
    }
    // The smallest bucket bound with at least `q` of the samples at or below it (0 when empty).
    uint64_t QuantileUpperBoundUs(double q) const;
  };

  void Record(uint64_t micros) {
    size_t bucket = 0;
    while (bucket + 1 < kBuckets && micros > (uint64_t{1} << bucket)) ++bucket;
    counts_[bucket].fetch_add(1, std::memory_order_relaxed);
    count_.fetch_add(1, std::memory_order_relaxed);
    sum_us_.fetch_add(micros, std::memory_order_relaxed);
  }

  Snapshot Read() const {
    Snapshot s;
    for (size_t i = 0; i < kBuckets; ++i) s.counts[i] = counts_[i].load(std::memory_order_relaxed);
    s.count = count_.load(std::memory_order_relaxed);
    s.sum_us = sum_us_.load(std::memory_order_relaxed);
    return s;
  }

 private:
  std::array<std::atomic<uint64_t>, kBuckets> counts_{};
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> sum_us_{0};
};

inline uint64_t LatencyHistogram::Snapshot::QuantileUpperBoundUs(double q) const {
  uint64_t total = 0;
  for (uint64_t c : counts) total += c;
  if (total == 0) return 0;
  const double target = q * static_cast<double>(total);
  uint64_t seen = 0;
  for (size_t i = 0; i < kBuckets; ++i) {
    seen += counts[i];
    if (static_cast<double>(seen) >= target) return UpperBoundUs(i);
  }
  return UpperBoundUs(kBuckets - 1);
}

}  // namespace kvtier

#endif  // KVTIER_COMMON_HISTOGRAM_H_
