// ParallelFor: runs a loop body over [0, n) on a few short-lived threads, the caller's included.
// For batches of blocking per-item work (waiting for a GPU stream, then sealing its blocks) that
// is too short-lived for a pool and too slow for one thread. Thread-safe; `fn` must be.
#ifndef KVTIER_COMMON_PARALLEL_FOR_H_
#define KVTIER_COMMON_PARALLEL_FOR_H_

#include <cstddef>
#include <functional>

namespace kvtier {

// Calls fn(i) for every i in [0, n), on up to `threads` threads (at least one, at most n): thread
// t takes i = t, t + threads, ... Returns once every call has returned.
void ParallelFor(size_t n, size_t threads, const std::function<void(size_t)>& fn);

}  // namespace kvtier

#endif  // KVTIER_COMMON_PARALLEL_FOR_H_
