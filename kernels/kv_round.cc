// Host side of kv_round.h, the same in every build: shape validation and the workspace layout.
// After its checks an Enqueue call hands the launch to kv_round_start.h, which the build picks.
#include "kernels/kv_round.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "codec/dtype.h"
#include "kernels/kv_round_launch.h"
#include "kernels/kv_round_start.h"

namespace kvtier::kernels {
namespace {

static_assert(static_cast<int>(KvElement::kBf16) == static_cast<int>(codec::DType::kBf16));
static_assert(static_cast<int>(KvElement::kFp16) == static_cast<int>(codec::DType::kFp16));
static_assert(static_cast<int>(KvElement::kFp8E4M3) == static_cast<int>(codec::DType::kFp8E4M3));

constexpr uint64_t kAlign = 256;
constexpr int64_t kMaxGridY = 65535;

uint64_t AlignUp(uint64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

// Adds an array of `count` elements of `size` bytes at the running offset; returns its offset.
uint64_t Carve(uint64_t* offset, uint64_t count, uint64_t size) {
  const uint64_t at = *offset;
  *offset = AlignUp(at + count * size);
  return at;
}

absl::Status ValidatePagedKv(const PagedKvDevice& kv) {
  if (kv.layers == nullptr || kv.num_layers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("paged kv has ", kv.num_layers, " layers (or no layer array)"));
  }
  if (kv.page_tokens < 16 || kv.page_tokens > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_tokens ", kv.page_tokens, " outside [16, 256]"));
  }
  if (kv.kv_heads < 1) {
    return absl::InvalidArgumentError(absl::StrCat("kv_heads ", kv.kv_heads, " < 1"));
  }
  if (kv.head_dim != 64 && kv.head_dim != 128 && kv.head_dim != 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("head_dim ", kv.head_dim, " is not 64, 128 or 256"));
  }
  if (kv.dtype != KvElement::kBf16 && kv.dtype != KvElement::kFp16 &&
      kv.dtype != KvElement::kFp8E4M3) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv dtype ", static_cast<int>(kv.dtype), " is not bf16, fp16 or fp8_e4m3"));
  }
  const uint64_t element_bytes = kv.dtype == KvElement::kFp8E4M3 ? 1 : 2;
  if (kv.row_bytes != static_cast<uint64_t>(kv.head_dim) * element_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("row_bytes ", kv.row_bytes, " is not head_dim ", kv.head_dim, " elements"));
  }
  for (uint64_t stride : {kv.token_stride, kv.head_stride, kv.page_stride, kv.v_offset}) {
    if (stride % 16 != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("paged kv stride or offset ", stride, " is not a multiple of 16 bytes"));
    }
  }
  if (static_cast<int64_t>(kv.num_layers) * kv.kv_heads > kMaxGridY) {
    return absl::InvalidArgumentError(absl::StrCat(
        "layers * kv_heads = ", int64_t{kv.num_layers} * kv.kv_heads, " exceeds ", kMaxGridY));
  }
  return absl::OkStatus();
}

}  // namespace

int KvSetsPerRequest(KvEvictionMode mode, int layers, int kv_heads) {
  switch (mode) {
    case KvEvictionMode::kUnion:
      return 1;
    case KvEvictionMode::kPerHead:
      return kv_heads;
    case KvEvictionMode::kPerLayerPerHead:
      return layers * kv_heads;
  }
  return 0;
}

uint64_t KvRoundWorkspaceLayout(const TriRoundShape& shape, const PagedKvDevice& kv,
                                int query_heads, void* base, KvRoundWorkspace* layout) {
  const uint64_t R = static_cast<uint64_t>(shape.max_requests);
  const uint64_t T = static_cast<uint64_t>(shape.max_decode_tokens);
  const uint64_t rows = R * static_cast<uint64_t>(kv.num_layers) * query_heads;
  const uint64_t tiles = (T + kKvPartialRows - 1) / kKvPartialRows;
  const uint64_t sets =
      static_cast<uint64_t>(KvSetsPerRequest(shape.mode, kv.num_layers, kv.kv_heads));
  uint64_t offset = 0;
  const uint64_t bands = Carve(&offset, R * (kv.head_dim / 2) * 2, sizeof(double));
  const uint64_t scores = Carve(&offset, rows * T, sizeof(float));
  const uint64_t partials = Carve(&offset, rows * tiles * 3, sizeof(double));
  const uint64_t row_stats = Carve(&offset, rows * 3, sizeof(double));
  const uint64_t keys = Carve(&offset, R * sets * T, sizeof(uint64_t));
  const uint64_t kept =
      Carve(&offset, R * sets * static_cast<uint64_t>(shape.budget), sizeof(int32_t));
  const uint64_t kept_count = Carve(&offset, R, sizeof(int32_t));
  const uint64_t holes =
      Carve(&offset, R * sets * static_cast<uint64_t>(shape.budget), sizeof(int32_t));
  const uint64_t hole_count = Carve(&offset, R * sets, sizeof(int32_t));
  if (layout != nullptr) {
    auto* b = static_cast<uint8_t*>(base);
    layout->bands = reinterpret_cast<double*>(b + bands);
    layout->scores = reinterpret_cast<float*>(b + scores);
    layout->partials = reinterpret_cast<double*>(b + partials);
    layout->row_stats = reinterpret_cast<double*>(b + row_stats);
    layout->keys = reinterpret_cast<uint64_t*>(b + keys);
    layout->kept = reinterpret_cast<int32_t*>(b + kept);
    layout->kept_count = reinterpret_cast<int32_t*>(b + kept_count);
    layout->holes = reinterpret_cast<int32_t*>(b + holes);
    layout->hole_count = reinterpret_cast<int32_t*>(b + hole_count);
  }
  return offset;
}

absl::Status ValidateTriRound(const TriRoundShape& shape, const PagedKvDevice& kv,
                              const TriCalibrationDevice& calibration) {
  if (absl::Status s = ValidatePagedKv(kv); !s.ok()) return s;
  if (calibration.q_mean_real == nullptr || calibration.q_mean_imag == nullptr ||
      calibration.q_abs_mean == nullptr || calibration.omega == nullptr ||
      calibration.freq_scale_sq == nullptr) {
    return absl::InvalidArgumentError("calibration has a null device array");
  }
  if (calibration.query_heads < 1 || calibration.query_heads % kv.kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("calibration has ", calibration.query_heads,
                                                   " query heads, not a positive multiple of ",
                                                   kv.kv_heads, " kv heads"));
  }
  if (shape.max_requests < 1 || shape.max_requests > kMaxGridY) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_requests ", shape.max_requests, " outside [1, ", kMaxGridY, "]"));
  }
  // Physical token indices travel as int32.
  constexpr int64_t kMaxTokens = std::numeric_limits<int32_t>::max() / 2;
  if (shape.max_decode_tokens < 1 || shape.max_decode_tokens > kMaxTokens) {
    return absl::InvalidArgumentError(absl::StrCat("max_decode_tokens ", shape.max_decode_tokens,
                                                   " outside [1, ", kMaxTokens, "]"));
  }
  if (shape.budget > kKvMaxKept) {
    return absl::InvalidArgumentError(
        absl::StrCat("budget ", shape.budget, " exceeds the GPU round's limit ", kKvMaxKept));
  }
  if (shape.budget < 1 || shape.budget > shape.max_decode_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("budget ", shape.budget, " outside [1, ",
                                                   shape.max_decode_tokens,
                                                   "] (max_decode_tokens)"));
  }
  const int sets = KvSetsPerRequest(shape.mode, kv.num_layers, kv.kv_heads);
  if (sets < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown eviction mode ", static_cast<int>(shape.mode)));
  }
  if (shape.order != KvCompactionOrder::kFillHoles &&
      shape.order != KvCompactionOrder::kPreserveOrder) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown compaction order ", static_cast<int>(shape.order)));
  }
  if (shape.num_offsets < 1 || shape.num_offsets > 62) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_offsets ", shape.num_offsets, " outside [1, 62]"));
  }
  const int64_t tiles = (shape.max_decode_tokens + kKvPartialRows - 1) / kKvPartialRows;
  if (tiles > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError("max_decode_tokens needs too many score tiles");
  }
  // Workspace arrays must stay far from the uint64 range: rows * tokens * 8 bytes.
  const double bytes = static_cast<double>(shape.max_requests) * kv.num_layers *
                       calibration.query_heads * static_cast<double>(shape.max_decode_tokens) * 8.0;
  if (bytes > 1e15) {
    return absl::InvalidArgumentError("the round's workspace would exceed a petabyte");
  }
  return absl::OkStatus();
}

absl::Status EnqueueTriRound(const TriRoundShape& shape, const PagedKvDevice& kv,
                             const TriCalibrationDevice& calibration,
                             const KvRoundRequest* requests, int num_requests,
                             const KvRoundWorkspace& workspace, void* stream) {
  if (absl::Status s = ValidateTriRound(shape, kv, calibration); !s.ok()) return s;
  if (num_requests < 0 || num_requests > shape.max_requests) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_requests ", num_requests, " outside [0, ", shape.max_requests, "]"));
  }
  if (num_requests > 0 && (requests == nullptr || workspace.scores == nullptr)) {
    return absl::InvalidArgumentError("null request array or workspace");
  }
  internal::TriRoundArgs args;
  args.shape = shape;
  args.kv = kv;
  args.calibration = calibration;
  args.requests = requests;
  args.num_requests = num_requests;
  args.sets = KvSetsPerRequest(shape.mode, kv.num_layers, kv.kv_heads);
  args.workspace = workspace;
  return internal::StartTriRound(args, stream);
}

absl::Status EnqueueKvCompaction(const PagedKvDevice& kv, const KvRoundRequest* requests,
                                 int num_requests, int sets, const int32_t* kept,
                                 const int32_t* kept_count, int64_t kept_stride,
                                 KvCompactionOrder order, void* stream) {
  if (absl::Status s = ValidatePagedKv(kv); !s.ok()) return s;
  if (sets != 1 && sets != kv.kv_heads && sets != kv.num_layers * kv.kv_heads) {
    return absl::InvalidArgumentError(absl::StrCat("sets ", sets, " is not 1, kv_heads ",
                                                   kv.kv_heads, " or layers * kv_heads ",
                                                   kv.num_layers * kv.kv_heads));
  }
  if (order != KvCompactionOrder::kFillHoles && order != KvCompactionOrder::kPreserveOrder) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown compaction order ", static_cast<int>(order)));
  }
  if (num_requests < 0 || num_requests > kMaxGridY) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_requests ", num_requests, " outside [0, ", kMaxGridY, "]"));
  }
  if (kept_stride < 0 || kept_stride > kKvMaxKept) {
    return absl::InvalidArgumentError(
        absl::StrCat("kept_stride ", kept_stride, " outside [0, ", kKvMaxKept, "]"));
  }
  if (num_requests > 0 && (requests == nullptr || kept == nullptr || kept_count == nullptr)) {
    return absl::InvalidArgumentError("null request, kept or kept_count array");
  }
  internal::CompactionArgs args;
  args.kv = kv;
  args.requests = requests;
  args.num_requests = num_requests;
  args.sets = sets;
  args.kept = kept;
  args.kept_count = kept_count;
  args.kept_stride = kept_stride;
  args.order = order;
  return internal::StartKvCompaction(args, stream);
}

}  // namespace kvtier::kernels
