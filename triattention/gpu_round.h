// GpuRound: the batched TriAttention round on a CUDA device (kernels/kv_round.h) for an engine's
// paged KV cache in device memory. It owns the calibration on the device, the round's workspace
// and a pinned staging area for the per-step request descriptors and block tables; Enqueue
// validates the step's requests on the host, uploads them with one copy and launches the round on
// the caller's stream without waiting, so a step's round can be captured in a CUDA graph.
// Thread-compatible: one thread (the engine's step loop) drives a GpuRound.
#ifndef KVTIER_TRIATTENTION_GPU_ROUND_H_
#define KVTIER_TRIATTENTION_GPU_ROUND_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "triattention/calibration.h"
#include "triattention/compaction.h"
#include "triattention/kv_view.h"
#include "triattention/scoring.h"

namespace kvtier::triattention {

struct GpuRoundOptions {
  int device = 0;
  int max_requests = 32;          // due requests one Enqueue may carry
  int64_t max_decode_tokens = 0;  // per request; 0 means budget + 2 * 128 + 64
  int64_t budget = 2048;
  EvictionMode mode = EvictionMode::kUnion;
  bool normalize = true;
  CompactionOrder order = CompactionOrder::kFillHoles;
  int num_offsets = kDefaultNumOffsets;
};

class GpuRound {
 public:
  // Uploads `calibration` (omega and freq_scale_sq filled, see FillCalibrationRope) and allocates
  // the workspace for `view` (memory kDevice). InvalidArgument when the calibration and the view
  // disagree (layers, query heads not a multiple of KV heads, bands != head_dim / 2), for pool
  // addresses or strides not 16-byte aligned, or for options the kernels do not support;
  // FailedPrecondition for a host view or a calibration without RoPE tables; Unimplemented
  // without CUDA; ResourceExhausted when the device memory runs out.
  static absl::StatusOr<std::unique_ptr<GpuRound>> Create(const Calibration& calibration,
                                                          const KvCacheView& view,
                                                          const GpuRoundOptions& options);
  ~GpuRound();
  GpuRound(const GpuRound&) = delete;
  GpuRound& operator=(const GpuRound&) = delete;

  // Enqueues one round for `requests` (each with its round start t0 in `round_starts`) on
  // `stream`: scores, selection and compaction of every request at once. Requests with no more
  // decode tokens than the budget are left as they are. The block tables are copied before this
  // returns; the pools must not be touched by other work until the stream passes the round.
  // Waits (on the host) only for the previous upload to leave the staging area. Stage + Launch.
  // InvalidArgument for more requests than max_requests, mismatched spans, a request that fails
  // ValidateKvRequest, or a decode region larger than max_decode_tokens; Internal for CUDA errors.
  absl::Status Enqueue(absl::Span<const KvRequestView> requests,
                       absl::Span<const int64_t> round_starts, void* stream);

  // The two halves of Enqueue, for CUDA graphs: Stage checks the requests and writes their
  // descriptors and block tables into the pinned staging area (host work only, after waiting for
  // the previous upload); Launch enqueues the upload and the kernels, and nothing else, so it can
  // be captured once and the graph replayed after each Stage of the same number of requests.
  // A graph captured with more block-table entries than the staging area holds must be
  // re-captured after a Stage that grows it (Stage returns true then). After a graph replay,
  // Stage must not run before the replay's upload has (synchronise the stream, or an event of
  // the caller's, first): a Launch under capture records no event for Stage to wait on.
  absl::StatusOr<bool> Stage(absl::Span<const KvRequestView> requests,
                             absl::Span<const int64_t> round_starts, void* stream);
  absl::Status Launch(void* stream);

  // Results for request `index` of the last Stage's round once it ran (through Launch or a graph
  // replay), copied back after waiting for `stream` (tests and tools): the raw scores [L][H][T]
  // and the kept sets (physical token indices). FailedPrecondition before the first Launch;
  // OutOfRange for an index past the staged requests.
  absl::StatusOr<RoundScores> RawScores(int index, void* stream) const;
  absl::StatusOr<KeptTokens> Kept(int index, void* stream) const;

  const GpuRoundOptions& options() const { return options_; }
  // Bytes of device memory the round holds (calibration, pools table, workspace, staging).
  uint64_t device_bytes() const { return device_bytes_; }

 private:
  struct Device;
  GpuRound(GpuRoundOptions options, KvCacheView view);

  GpuRoundOptions options_;
  KvCacheView view_;
  int query_heads_ = 0;
  uint64_t device_bytes_ = 0;
  std::unique_ptr<Device> device_;
  std::vector<int64_t> staged_decode_tokens_;  // per request of the last Stage
};

}  // namespace kvtier::triattention

#endif  // KVTIER_TRIATTENTION_GPU_ROUND_H_
