// Small helpers shared by the kvtier-bench subcommands that drive a daemon (lookup, fairness):
// synthetic block hashes for chains of test pages and nearest-rank summaries of latency samples.
// Plain functions without state; safe from any thread.
#ifndef KVTIER_TOOLS_BENCH_BENCH_COMMON_H_
#define KVTIER_TOOLS_BENCH_BENCH_COMMON_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace kvtier::bench {

// A distinct 32-byte block hash for `i` (a splitmix64 sequence seeded from it): different values
// of `i` give different hashes.
inline std::string SyntheticBlockHash(uint64_t i) {
  std::string h(32, '\0');
  uint64_t x = i * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
  for (size_t b = 0; b < h.size(); b += 8) {
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    std::memcpy(h.data() + b, &x, 8);
  }
  return h;
}

// Latencies of a sample, in microseconds (all zero for an empty sample).
struct LatencySummary {
  size_t count = 0;
  double p50_us = 0;
  double p99_us = 0;
  double p999_us = 0;
  double max_us = 0;
  double mean_us = 0;
};

// Nearest-rank percentiles (the smallest sample with at least p of the samples at or below it).
inline LatencySummary Summarize(std::vector<double> us) {
  LatencySummary l;
  l.count = us.size();
  if (us.empty()) return l;
  std::sort(us.begin(), us.end());
  const auto rank = [&](double p) {
    const double r = std::ceil(p * static_cast<double>(us.size()));
    return us[std::min(us.size() - 1, static_cast<size_t>(std::max(1.0, r)) - 1)];
  };
  l.p50_us = rank(0.50);
  l.p99_us = rank(0.99);
  l.p999_us = rank(0.999);
  l.max_us = us.back();
  double sum = 0;
  for (double v : us) sum += v;
  l.mean_us = sum / static_cast<double>(us.size());
  return l;
}

}  // namespace kvtier::bench

#endif  // KVTIER_TOOLS_BENCH_BENCH_COMMON_H_
