#include "common/parallel_for.h"

#include <algorithm>
#include <thread>
#include <vector>

namespace kvtier {

void ParallelFor(size_t n, size_t threads, const std::function<void(size_t)>& fn) {
  threads = std::max<size_t>(1, std::min(threads, n));
  std::vector<std::thread> pool;
  pool.reserve(threads - 1);
  for (size_t t = 1; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (size_t i = t; i < n; i += threads) fn(i);
    });
  }
  for (size_t i = 0; i < n; i += threads) fn(i);
  for (std::thread& th : pool) th.join();
}

}  // namespace kvtier
