// IoCounters: the lock-free counters and latency histograms behind BlockFile::stats(), shared by
// every implementation so that each reports the same numbers the same way, and AcceptIo, the
// admission every Submit() starts with. All methods are thread-safe and wait-free except for the
// max_in_flight update (a short compare-exchange loop).
#ifndef KVTIER_DAEMON_IO_IO_COUNTERS_H_
#define KVTIER_DAEMON_IO_IO_COUNTERS_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/histogram.h"
#include "daemon/io/block_file.h"

namespace kvtier::io {

class IoCounters {
 public:
  using Clock = std::chrono::steady_clock;

  // A request was accepted into the implementation's queue.
  void OnQueued() { queued_.fetch_add(1, std::memory_order_relaxed); }

  // A queued request was handed to the kernel or a worker.
  void OnStarted() {
    queued_.fetch_sub(1, std::memory_order_relaxed);
    const uint64_t now = in_flight_.fetch_add(1, std::memory_order_relaxed) + 1;
    uint64_t seen = max_in_flight_.load(std::memory_order_relaxed);
    while (now > seen &&
           !max_in_flight_.compare_exchange_weak(seen, now, std::memory_order_relaxed)) {
    }
  }

  // A started request finished with `status` after moving `bytes` (counted only when OK);
  // `submitted` is when Submit() accepted it. Call before running its callback.
  void OnFinished(IoKind kind, const absl::Status& status, uint64_t bytes,
                  Clock::time_point submitted) {
    in_flight_.fetch_sub(1, std::memory_order_relaxed);
    OnCompleted(kind, status, bytes, submitted);
  }

  // A request completed without ever being queued or started (rejected in Submit()).
  void OnRejected(IoKind kind) {
    (kind == IoKind::kRead ? read_errors_ : write_errors_).fetch_add(1, std::memory_order_relaxed);
  }

  // A partial completion whose rest is being resubmitted.
  void OnShortTransfer() { short_transfers_.fetch_add(1, std::memory_order_relaxed); }
  // An EINTR / EAGAIN completion being resubmitted.
  void OnRetry() { retries_.fetch_add(1, std::memory_order_relaxed); }
  // A transfer issued on a registered (fixed) buffer.
  void OnFixedBufferOp() { fixed_buffer_ops_.fetch_add(1, std::memory_order_relaxed); }

  // A snapshot of every counter (each read individually: consistent enough for metrics).
  BlockFileStats Read() const {
    BlockFileStats s;
    s.reads = reads_.load(std::memory_order_relaxed);
    s.writes = writes_.load(std::memory_order_relaxed);
    s.read_bytes = read_bytes_.load(std::memory_order_relaxed);
    s.write_bytes = write_bytes_.load(std::memory_order_relaxed);
    s.read_errors = read_errors_.load(std::memory_order_relaxed);
    s.write_errors = write_errors_.load(std::memory_order_relaxed);
    s.short_transfers = short_transfers_.load(std::memory_order_relaxed);
    s.retries = retries_.load(std::memory_order_relaxed);
    s.fixed_buffer_ops = fixed_buffer_ops_.load(std::memory_order_relaxed);
    s.queued = queued_.load(std::memory_order_relaxed);
    s.in_flight = in_flight_.load(std::memory_order_relaxed);
    s.max_in_flight = max_in_flight_.load(std::memory_order_relaxed);
    s.read_latency = read_latency_.Read();
    s.write_latency = write_latency_.Read();
    return s;
  }

 private:
  void OnCompleted(IoKind kind, const absl::Status& status, uint64_t bytes,
                   Clock::time_point submitted) {
    const bool read = kind == IoKind::kRead;
    const auto micros =
        std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - submitted).count();
    (read ? read_latency_ : write_latency_).Record(micros > 0 ? static_cast<uint64_t>(micros) : 0);
    if (!status.ok()) {
      (read ? read_errors_ : write_errors_).fetch_add(1, std::memory_order_relaxed);
      return;
    }
    (read ? reads_ : writes_).fetch_add(1, std::memory_order_relaxed);
    (read ? read_bytes_ : write_bytes_).fetch_add(bytes, std::memory_order_relaxed);
  }

  std::atomic<uint64_t> reads_{0};
  std::atomic<uint64_t> writes_{0};
  std::atomic<uint64_t> read_bytes_{0};
  std::atomic<uint64_t> write_bytes_{0};
  std::atomic<uint64_t> read_errors_{0};
  std::atomic<uint64_t> write_errors_{0};
  std::atomic<uint64_t> short_transfers_{0};
  std::atomic<uint64_t> retries_{0};
  std::atomic<uint64_t> fixed_buffer_ops_{0};
  std::atomic<uint64_t> queued_{0};
  std::atomic<uint64_t> in_flight_{0};
  std::atomic<uint64_t> max_in_flight_{0};
  LatencyHistogram read_latency_;
  LatencyHistogram write_latency_;
};

// What every implementation keeps of a request between Submit() and its completion.
struct SubmittedIo {
  IoRequest request;
  IoCallback done;
  IoCounters::Clock::time_point submitted;
};

// Submit()'s first step in every implementation: a request ValidateIoRequest rejects is counted
// and `done` runs at once with the error (null); otherwise a new Op (a SubmittedIo) holding the
// request, the callback and the submission time.
template <typename Op>
std::unique_ptr<Op> AcceptIo(const IoRequest& request, IoCallback& done, uint64_t size_bytes,
                             uint32_t alignment, absl::string_view path, IoCounters& counters) {
  if (absl::Status valid = ValidateIoRequest(request, size_bytes, alignment, path); !valid.ok()) {
    counters.OnRejected(request.kind);
    done(std::move(valid));
    return nullptr;
  }
  auto op = std::make_unique<Op>();
  op->request = request;
  op->done = std::move(done);
  op->submitted = IoCounters::Clock::now();
  return op;
}

}  // namespace kvtier::io

#endif  // KVTIER_DAEMON_IO_IO_COUNTERS_H_
