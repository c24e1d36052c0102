// Batched raw copy on the GPU: many (src, dst, bytes) spans in one kernel launch, between device
// memory and pinned host memory mapped into the device's address space. It is the `raw` codec's
// data path and the baseline the fused NVFP4 kernels are measured against. No CUDA types here:
// streams are passed as `void*` (a cudaStream_t). A BatchedCopier is thread-compatible.
#ifndef KVTIER_KERNELS_BATCHED_COPY_H_
#define KVTIER_KERNELS_BATCHED_COPY_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace kvtier::kernels {

// `bytes` from `src` to `dst`. Both must be addresses the device can access (device memory, or
// mapped pinned host memory); spans must not overlap each other's destinations.
struct CopySpan {
  const void* src = nullptr;
  void* dst = nullptr;
  uint64_t bytes = 0;
};

class BatchedCopier {
 public:
  // A copier for CUDA device `device`. Unimplemented in builds without CUDA; Unavailable when the
  // device cannot be used (the message carries the CUDA runtime's reason).
  static absl::StatusOr<std::unique_ptr<BatchedCopier>> Create(int device);

  // Enqueues the copies on `stream` (a cudaStream_t; nullptr means the legacy default stream) and
  // returns without waiting; the span array may be reused as soon as this returns. Any number of
  // spans: they go in launches of up to kSpansPerLaunch. InvalidArgument for a null address with
  // a nonzero size; Internal with the CUDA error when a launch fails.
  absl::Status Enqueue(absl::Span<const CopySpan> spans, void* stream) const;

  // Waits until all work on `stream` is done (a host wait, for tests and tools).
  static absl::Status Synchronize(void* stream);

  static constexpr int kSpansPerLaunch = 1024;

 private:
  explicit BatchedCopier(int device) : device_(device) {}
  int device_;
};

}  // namespace kvtier::kernels

#endif  // KVTIER_KERNELS_BATCHED_COPY_H_
