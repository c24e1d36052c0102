// Batched KV-cache eviction rounds on the GPU: TriAttention scoring, row statistics, aggregation
// and top-k selection over all due requests of a generation step, and the in-place compaction
// kernel other eviction methods can reuse. Every argument is a plain value or a device address:
// no CUDA types (streams are `void*`, a cudaStream_t). The enqueue functions only launch kernels
// on the caller's stream (no allocation, no host wait, no copy), so a round can be captured in a
// CUDA graph and replayed with new descriptors. The math is that of triattention/scoring.h and
// triattention/compaction.h; docs/TRIATTENTION.md describes the pipeline.
#ifndef KVTIER_KERNELS_KV_ROUND_H_
#define KVTIER_KERNELS_KV_ROUND_H_

#include <cstdint>

#include "absl/status/status.h"

namespace kvtier::kernels {

// Element type of the cache: the values of codec::DType (this header stays C++17 for nvcc).
enum class KvElement : uint8_t { kBf16 = 1, kFp16 = 2, kFp8E4M3 = 3 };

// K and V pool of one attention layer (device addresses). In a combined pool `v` is null and V
// is the second plane of every page of `k`.
struct KvPoolPair {
  void* k = nullptr;
  void* v = nullptr;
};

// A paged KV cache in device memory: byte strides as triattention::KvStridesOf computes them.
struct PagedKvDevice {
  const KvPoolPair* layers = nullptr;  // device array [num_layers]
  int num_layers = 0;
  int page_tokens = 0;  // 16..256
  int kv_heads = 0;
  int head_dim = 0;  // 64, 128 or 256
  KvElement dtype = KvElement::kBf16;
  bool combined = false;   // V is the second plane of each K page
  uint64_t row_bytes = 0;  // head_dim * element size
  uint64_t token_stride = 0;
  uint64_t head_stride = 0;
  uint64_t page_stride = 0;
  uint64_t v_offset = 0;  // offset of the V plane in a combined page, else 0
};

// One request of a round, in device memory (an array of them per round). Tokens are physical
// indices: [0, prompt_len) pinned, [prompt_len, length - protected_tail) scored, the rest the
// protected tail. `block_table` is a device array of at least ceil(length / page_tokens) page ids,
// each in [0, num_pages) and distinct (the host checks it; the kernels trust it).
struct KvRoundRequest {
  const int32_t* block_table = nullptr;
  int64_t length = 0;
  int64_t prompt_len = 0;
  int64_t protected_tail = 0;
  int64_t round_start = 0;  // t0: the logical length (confirmed + evicted tokens)
};

// TriAttention's calibration in device memory: arrays [layers][query_heads][bands] (float) and
// per-band RoPE tables [bands] (double), bands = head_dim / 2.
struct TriCalibrationDevice {
  const float* q_mean_real = nullptr;
  const float* q_mean_imag = nullptr;
  const float* q_abs_mean = nullptr;
  const double* omega = nullptr;
  const double* freq_scale_sq = nullptr;
  int query_heads = 0;
};

// Eviction modes, values of triattention::EvictionMode.
enum class KvEvictionMode : uint8_t { kUnion = 1, kPerHead = 2, kPerLayerPerHead = 3 };

// How compaction places the kept decode tokens behind the prompt.
enum class KvCompactionOrder : uint8_t {
  // Kept tokens already inside [prompt_len, prompt_len + kept) stay; the kept tokens past it move
  // into the evicted slots (holes and movers both ascending). Moves only about as many rows as were
  // evicted. Attention and the next round do not depend on the order of cached keys (each key
  // keeps its RoPE rotation), so this is the default.
  kFillHoles = 1,
  // Kept tokens packed in their original order (TensorRT-LLM's move list): moves every row after
  // the first evicted token.
  kPreserveOrder = 2,
};

// Kept sets per request for a mode: 1, kv_heads or layers * kv_heads (index l * kv_heads + g).
int KvSetsPerRequest(KvEvictionMode mode, int layers, int kv_heads);

// Device workspace of a round, carved out of one allocation by KvRoundWorkspaceLayout.
struct KvRoundWorkspace {
  double* bands = nullptr;        // [requests][bands][2] mean cos, mean sin of the offsets
  float* scores = nullptr;        // [requests][layers][query_heads][max_decode_tokens] raw scores
  double* partials = nullptr;     // [requests][layers][query_heads][T / 16][3] partial sums
  double* row_stats = nullptr;    // [requests][layers][query_heads][3] mean, divisor, 1/divisor
  uint64_t* keys = nullptr;       // [requests][sets][max_decode_tokens] ordered aggregate keys
                                  // (read as uint32 for union and per_layer_perhead)
  int32_t* kept = nullptr;        // [requests][sets][budget] kept physical token indices
  int32_t* kept_count = nullptr;  // [requests] tokens kept per set: min(budget, decode tokens)
  int32_t* holes = nullptr;       // [requests][sets][budget] evicted slots inside the kept range
  int32_t* hole_count = nullptr;  // [requests][sets]
};

// Fixed shape of a round: what a captured graph is specialised for.
struct TriRoundShape {
  int max_requests = 0;
  int64_t max_decode_tokens = 0;  // capacity of every per-token array
  int64_t budget = 0;             // decode tokens kept (the prompt comes on top)
  KvEvictionMode mode = KvEvictionMode::kUnion;
  bool normalize = true;  // z-normalise each (layer, query head) row before aggregating
  int num_offsets = 17;   // future offsets 2^0 .. 2^(num_offsets - 1), mean aggregation
  KvCompactionOrder order = KvCompactionOrder::kFillHoles;
};

// Tokens per scoring tile of the CUDA-core scorer (its granularity of row partial sums), and the
// rows per partial sum of the tensor-core scorer (the workspace is sized for the finer one).
inline constexpr int kKvScoreTile = 128;
inline constexpr int kKvPartialRows = 16;
// Largest kept count compaction handles (its bitmap of the kept range lives in shared memory).
inline constexpr int64_t kKvMaxKept = 393216;

// Bytes of the workspace of `shape` on `kv`, and the pointers into a workspace at `base`
// (256-byte aligned). layout == nullptr only sizes it.
uint64_t KvRoundWorkspaceLayout(const TriRoundShape& shape, const PagedKvDevice& kv,
                                int query_heads, void* base, KvRoundWorkspace* layout);

// Checks a shape against a cache and a calibration: InvalidArgument naming the field for a
// geometry the kernels do not support (head_dim, page_tokens, dtype, query heads not a multiple
// of kv_heads, more than 65535 blocks on a grid axis, sizes past the int64 range).
absl::Status ValidateTriRound(const TriRoundShape& shape, const PagedKvDevice& kv,
                              const TriCalibrationDevice& calibration);

// Enqueues a whole round for requests[0, num_requests) (device array) on `stream`: weights for
// each request's t0, raw scores, row statistics, aggregate keys, kept sets (ascending, ties to the
// lowest index, NaN counted as minus infinity), then compaction of every (layer, KV head). Requests
// with no more than `budget` decode tokens keep all of them and move only nothing. num_requests <=
// shape.max_requests; every request's decode region must fit max_decode_tokens (the host checks;
// the kernels clamp). Errors: those of ValidateTriRound, InvalidArgument for num_requests,
// Internal with the CUDA error of a failed launch.
absl::Status EnqueueTriRound(const TriRoundShape& shape, const PagedKvDevice& kv,
                             const TriCalibrationDevice& calibration,
                             const KvRoundRequest* requests, int num_requests,
                             const KvRoundWorkspace& workspace, void* stream);

// The compaction step alone, for other methods: for every request r (device array) and every
// (layer l, KV head g), the set kept[(r * sets + s) * kept_stride + i], i < kept_count[r] (s as
// in KvSetsPerRequest: sets == 1, kv_heads or layers * kv_heads), physical indices strictly
// ascending inside the decode region, is moved behind the prompt in `order`, then the protected
// tail behind it. Internal with the CUDA error of a failed launch; InvalidArgument for a sets
// value that is none of the three.
absl::Status EnqueueKvCompaction(const PagedKvDevice& kv, const KvRoundRequest* requests,
                                 int num_requests, int sets, const int32_t* kept,
                                 const int32_t* kept_count, int64_t kept_stride,
                                 KvCompactionOrder order, void* stream);

}  // namespace kvtier::kernels

#endif  // KVTIER_KERNELS_KV_ROUND_H_
