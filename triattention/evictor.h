// Evictor: the TriAttention eviction loop an engine drives once per generation step. It keeps the
// round schedule of every request (schedule.h), and for the requests that are due runs one round
// (scoring, selection, in-place compaction) over the engine's paged KV cache: the CPU reference
// (scoring.h, compaction.h) for a host-memory view, the batched GpuRound for a device-memory view.
// It tells the engine the new physical length and the pages to free. Thread-compatible: one thread
// (the engine's step loop) drives an Evictor; const methods may run concurrently with each other.
#ifndef KVTIER_TRIATTENTION_EVICTOR_H_
#define KVTIER_TRIATTENTION_EVICTOR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "triattention/calibration.h"
#include "triattention/compaction.h"
#include "triattention/gpu_round.h"
#include "triattention/kv_view.h"
#include "triattention/schedule.h"
#include "triattention/scoring.h"

namespace kvtier::triattention {

struct EvictorConfig {
  int64_t budget = 2048;  // decode tokens kept; the prompt comes on top
  int64_t beta = 128;     // round cadence in confirmed tokens
  EvictionMode mode = EvictionMode::kUnion;
  bool normalize = true;  // z-normalise each (layer, query head) row before aggregating
  CompactionOrder order = CompactionOrder::kFillHoles;
  int num_offsets = kDefaultNumOffsets;  // future offsets 2^0 .. 2^(num_offsets - 1)
  // Device-memory views only (the GPU round):
  int device = 0;
  int max_batch = 64;             // due requests one step may carry in one launch
  int64_t max_decode_tokens = 0;  // decode tokens of a due request; 0: budget + 2 * beta + 64
};

// "union", "per_head" or "per_layer_perhead" (TensorRT-LLM's eviction_mode names).
// InvalidArgument listing the accepted names otherwise.
absl::StatusOr<EvictionMode> ParseEvictionMode(absl::string_view name);
// The name ParseEvictionMode accepts for `mode`; "unknown" for a value outside the enum.
absl::string_view EvictionModeName(EvictionMode mode);

// InvalidArgument naming the field and its value: budget or beta < 1, an unknown mode or order,
// num_offsets outside [1, 62], device < 0, max_batch < 1, max_decode_tokens < 0 or, when set,
// below budget + beta (a due request would not fit).
absl::Status ValidateEvictorConfig(const EvictorConfig& config);

// One request's state at the end of a generation step.
struct StepRequest {
  uint64_t id = 0;
  int64_t new_tokens = 1;  // tokens this step confirmed (1 + accepted draft tokens)
  KvRequestView kv;        // block table, physical length, prompt_len, protected tail now
};

struct StepOutcome {
  uint64_t id = 0;
  bool evicted = false;        // a round ran for this request this step
  int64_t new_length = 0;      // physical tokens in the cache now (kv.length when not evicted)
  int64_t evicted_tokens = 0;  // decode tokens evicted so far (logical = physical + this)
  // Block-table entries the engine must free, in block-table order: those at indices >=
  // ceil(new_length / page_tokens) and < ceil(kv.length / page_tokens). Empty when not evicted.
  std::vector<int32_t> freed_pages;
};

class Evictor {
 public:
  // An Evictor for the cache `view` (copied; the pools it points to are borrowed and must stay
  // alive and unmoved while the Evictor is used). `calibration` must carry omega and
  // freq_scale_sq (FillCalibrationRope). A host view runs the CPU reference, a device view
  // (KvMemory::kDevice) the GPU round on `config.device`.
  // Errors: those of ValidateEvictorConfig and ValidateKvCacheView; FailedPrecondition for a
  // calibration without omega / freq_scale_sq; InvalidArgument naming both sides when the
  // calibration's layers differ from the view's, its bands * 2 from the view's head_dim, or its
  // query heads are not a positive multiple of the view's KV heads, or when its arrays do not
  // match its shape. For a device view, the errors of GpuRound::Create (Unimplemented in a build
  // without CUDA, ResourceExhausted when device memory runs out).
  static absl::StatusOr<std::unique_ptr<Evictor>> Create(const EvictorConfig& config,
                                                         Calibration calibration,
                                                         const KvCacheView& view);

  // Loads the calibration file (LoadCalibration: official or flat torch.save, safetensors) and the
  // model's config.json (LoadRopeTables; a model directory works too), checks them against each
  // other (CheckCalibrationAgainstRope) and against the view's KV head count, fills the RoPE
  // tables in (FillCalibrationRope), then calls Create. Errors of those functions, naming the
  // path; InvalidArgument naming both counts for a KV head mismatch. Blocks on file I/O.
  static absl::StatusOr<std::unique_ptr<Evictor>> CreateFromFiles(
      const EvictorConfig& config, const std::string& calibration_path,
      const std::string& model_config_path, const KvCacheView& view);

  ~Evictor();
  Evictor(const Evictor&) = delete;
  Evictor& operator=(const Evictor&) = delete;

  // Starts tracking request `id` after its prefill of `prompt_len` tokens (nothing generated
  // yet). AlreadyExists for a tracked id; InvalidArgument for prompt_len < 0.
  absl::Status AddRequest(uint64_t id, int64_t prompt_len);

  // Stops tracking request `id` (finished or aborted). NotFound for an unknown id.
  absl::Status RemoveRequest(uint64_t id);

  // Ends a generation step for `requests`: advances each one's schedule by new_tokens, runs one
  // round for the requests that are now due, commits those rounds and returns one outcome per
  // request, in input order. The block tables are borrowed for the call. Requests not listed are
  // left alone (their schedule does not move).
  // Host view: the rounds run on this thread (BuildRoundWeights, ScoreRequest, NormalizeRows,
  // SelectKeptTokens, CompactRequest) and are done when this returns; `stream` is ignored.
  // Device view: all due requests are enqueued at once on `stream` (a cudaStream_t; nullptr is
  // the legacy default stream) without waiting; the engine must not touch their pages, nor free
  // or reuse the freed ones, before the stream passes the round. More than max_batch due
  // requests go in chunks of max_batch, each chunk after the first waiting on the host for the
  // previous chunk's upload.
  // Errors change no state; everything is checked first: NotFound for an unknown id;
  // InvalidArgument naming the request id and the values for an id listed twice, new_tokens < 1,
  // a kv view failing ValidateKvRequest, a prompt_len other than AddRequest's, a confirmed length
  // (kv.length - protected_tail) other than the schedule's count, or (device view) a due request
  // with more decode tokens than max_decode_tokens. A round that fails after the checks (a CUDA
  // error: Internal) leaves the schedule unchanged and the cache of the step's due requests
  // unspecified.
  absl::StatusOr<std::vector<StepOutcome>> OnGenerationStepEnd(
      absl::Span<const StepRequest> requests, void* stream = nullptr);

  const EvictorConfig& config() const { return config_; }
  bool on_gpu() const { return gpu_ != nullptr; }
  int64_t num_requests() const { return static_cast<int64_t>(states_.size()); }

  // The schedule state of request `id` (tests, metrics). NotFound for an unknown id.
  absl::StatusOr<RequestRoundState> State(uint64_t id) const;

 private:
  Evictor(const EvictorConfig& config, Calibration calibration, const KvCacheView& view);

  // Runs the CPU round of one due request (host view).
  absl::Status RunCpuRound(const KvRequestView& kv, int64_t round_start);
  // Enqueues the GPU round of the due requests (device view).
  absl::Status EnqueueGpuRounds(absl::Span<const KvRequestView> due,
                                absl::Span<const int64_t> round_starts, void* stream);

  EvictorConfig config_;
  ScheduleConfig schedule_;
  Calibration calibration_;
  KvCacheView view_;
  std::unique_ptr<GpuRound> gpu_;  // null for a host view
  absl::flat_hash_map<uint64_t, RequestRoundState> states_;
};

}  // namespace kvtier::triattention

#endif  // KVTIER_TRIATTENTION_EVICTOR_H_
