// The kernels of a batched eviction round (kv_round.h), launched in order on one stream:
//  1. RoundBandsKernel (kv_round_score.cu): per request and band, the mean cos / sin of the future
//     query angles (t0 + 2^d) * omega in double, as triattention::BuildRoundWeights.
//  2. Scoring (kv_round_score.cu), grid (1,024 tokens, layer * KV head, request). A block turns
//     the calibration and the band means into float weights for the query heads of its KV head,
//     then either ScoreKernelTensor (BF16 / FP8 keys, up to 8 heads per KV head): every warp
//     scores 16-row slabs with mma.sync on tensor cores (see the comment before MmaBf16), or
//     ScoreKernel (CUDA cores): each row of bands / 4 lanes reads one key, and a reduce-scatter
//     across those lanes leaves one head's score per lane. Scores go out with sums and sums of
//     squares of the finite ones (double, fixed order: deterministic).
//  3. RowStatsKernel: a warp per (request, layer, query head) row: mean and max(std, 1e-6) of
//     the finite scores (NaN and infinite scores keep their value, as in NormalizeRows).
//  4. AggregateKernel: a thread per token and layer (union), KV head (per_head) or set
//     (per_layer_perhead): z-scores rounded to float as NormalizeRows does, the mode's max or
//     mean of group maxima, written as order-preserving integer keys (32-bit for the float-valued
//     modes, 64-bit for per_head's double mean; NaN and -inf lowest, -0 equal to +0), so
//     selection compares integers. Union gathers the layers with atomicMax.
//  5. TopKKernel: a block per kept set: an 8-bit radix select of the budget-th largest key, then
//     an ordered scan that takes every greater key and the first ties by index.
//  6. CompactionKernel: a block per (request, layer, KV head) moving K and V rows in chunks whose
//     reads all finish before their writes (see the comment there).
// Steps 4 and 5 are one launch each per mode (plus a clear of the union keys).
#include <cuda_runtime.h>
#include <math_constants.h>

#include <cstdint>
#include <cub/block/block_scan.cuh>

#include "kernels/kv_round_device.cuh"
#include "kernels/kv_round_launch.h"

namespace kvtier::kernels::internal {
namespace {

constexpr int kTopKThreads = 256;  // one radix bin per thread
static_assert(kTopKThreads == 256, "TopKKernel gives each thread one 8-bit radix bin");
constexpr int kAggregateThreads = 256;
constexpr int kCompactThreads = 256;
constexpr int kVectorsPerThread = 8;  // compaction: 16-byte vectors held per thread per chunk
constexpr int kMoveList = 1024;       // compaction: moves gathered before they run
constexpr double kStdEpsilon = 1e-6;  // triattention::kScoreStdEpsilon

// A warp per (request, layer, query head) row.
__global__ void RowStatsKernel(const KvRoundRequest* requests, int rows_per_request,
                               int64_t max_tokens, int tiles, int group_tokens,
                               int partials_per_group, bool normalize, const double* partials,
                               double* row_stats, int total_rows) {
  const int row = blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= total_rows) return;
  const int64_t T = DecodeTokens(requests[row / rows_per_request], max_tokens);
  const int used = static_cast<int>((T + group_tokens - 1) / group_tokens) * partials_per_group;
  double s = 0.0, s2 = 0.0, n = 0.0;
  for (int t = lane; t < used; t += 32) {
    const double* part = partials + (static_cast<size_t>(row) * tiles + t) * kPartials;
    s = __dadd_rn(s, part[0]);
    s2 = __dadd_rn(s2, part[1]);
    n = __dadd_rn(n, part[2]);
  }
#pragma unroll
  for (int off = 16; off >= 1; off >>= 1) {
    s = __dadd_rn(s, __shfl_xor_sync(0xffffffffu, s, off));
    s2 = __dadd_rn(s2, __shfl_xor_sync(0xffffffffu, s2, off));
    n = __dadd_rn(n, __shfl_xor_sync(0xffffffffu, n, off));
  }
  if (lane != 0) return;
  double mean = 0.0, divisor = 1.0;
  if (normalize && T > 0 && n > 0.0) {
    mean = __ddiv_rn(s, n);
    double var = __dsub_rn(__ddiv_rn(s2, n), __dmul_rn(mean, mean));
    if (!(var > 0.0)) var = 0.0;
    const double sd = sqrt(var);
    divisor = sd > kStdEpsilon ? sd : kStdEpsilon;
  }
  row_stats[3 * static_cast<size_t>(row)] = mean;
  row_stats[3 * static_cast<size_t>(row) + 1] = divisor;
  row_stats[3 * static_cast<size_t>(row) + 2] = __drcp_rn(divisor);
}

// Order-preserving integer keys: NaN counts as -inf, -0 equals +0, larger values give larger keys.
__device__ __forceinline__ uint64_t OrderedKey(double v) {
  if (isnan(v)) v = -CUDART_INF;
  if (v == 0.0) v = 0.0;
  const uint64_t bits = static_cast<uint64_t>(__double_as_longlong(v));
  return (bits >> 63) ? ~bits : bits | (uint64_t{1} << 63);
}
__device__ __forceinline__ uint32_t OrderedKey(float v) {
  if (isnan(v)) v = -CUDART_INF_F;
  if (v == 0.0f) v = 0.0f;
  const uint32_t bits = __float_as_uint(v);
  return (bits >> 31) ? ~bits : bits | 0x80000000u;
}

struct AggregateParams {
  const KvRoundRequest* requests;
  const float* scores;
  const double* row_stats;
  void* keys;  // uint32 keys [R][sets][T] (union, per_layer_perhead) or uint64 (per_head)
  int64_t max_tokens;
  int layers;
  int heads;
  int kv_heads;
  int sets;
  bool normalize;
};

// z of one score as NormalizeRows stores it (rounded to float), NaN as -inf.
__device__ __forceinline__ float ZScore(const AggregateParams& p, size_t row, int64_t i) {
  const float v = p.scores[row * p.max_tokens + i];
  if (!p.normalize) return isnan(v) ? -CUDART_INF_F : v;
  const double* stats = p.row_stats + 3 * row;  // mean, divisor, 1 / divisor
  const double d = __dsub_rn(static_cast<double>(v), stats[0]);
  // float(d / divisor), as NormalizeRows rounds it, without a division: d * (1 / divisor) is
  // within 2 ulps (double) of the quotient, so it rounds to the same float unless the quotient
  // lies that close to a halfway point between floats (the 29 bits below a float's mantissa near
  // 2^28), or outside the normal float range, or is not finite: then divide.
  double q = __dmul_rn(d, stats[2]);
  const uint64_t bits = static_cast<uint64_t>(__double_as_longlong(q));
  const uint32_t below = static_cast<uint32_t>(bits) & 0x1fffffffu;
  const int exponent = static_cast<int>((bits >> 52) & 0x7ff) - 1023;
  if (below - ((1u << 28) - 8u) < 16u || exponent < -125 || exponent > 126) {
    q = __ddiv_rn(d, stats[1]);
  }
  const float z = __double2float_rn(q);
  return isnan(z) ? -CUDART_INF_F : z;
}

__device__ __forceinline__ float GroupMax(const AggregateParams& p, size_t rows, int l, int g,
                                          int64_t i) {
  const int group = p.heads / p.kv_heads;
  float m = -CUDART_INF_F;
#pragma unroll 4
  for (int h = g * group; h < (g + 1) * group; ++h) {
    m = fmaxf(m, ZScore(p, rows + static_cast<size_t>(l) * p.heads + h, i));
  }
  return m;
}

// Grid (token block, y, request), a thread per token; y is the layer (union: the token's max over
// all rows gathers with atomicMax, which is order-free), the KV head (per_head: the mean over the
// layers, summed in layer order in double as SelectKeptTokens does) or the (layer, KV head) set.
template <int kMode>
__global__ void __launch_bounds__(kAggregateThreads) AggregateKernel(const AggregateParams p) {
  const int r = blockIdx.z;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kAggregateThreads + threadIdx.x;
  const int64_t T = DecodeTokens(p.requests[r], p.max_tokens);
  if (i >= T) return;
  const size_t rows = static_cast<size_t>(r) * p.layers * p.heads;
  if constexpr (kMode == static_cast<int>(KvEvictionMode::kUnion)) {
    const int l = blockIdx.y;
    float m = -CUDART_INF_F;
#pragma unroll 2
    for (int g = 0; g < p.kv_heads; ++g) m = fmaxf(m, GroupMax(p, rows, l, g, i));
    atomicMax(static_cast<uint32_t*>(p.keys) + static_cast<size_t>(r) * p.max_tokens + i,
              OrderedKey(m));
  } else if constexpr (kMode == static_cast<int>(KvEvictionMode::kPerHead)) {
    const int g = blockIdx.y;
    double sum = 0.0;
    for (int l = 0; l < p.layers; ++l) {
      sum = __dadd_rn(sum, static_cast<double>(GroupMax(p, rows, l, g, i)));
    }
    static_cast<uint64_t*>(p.keys)[(static_cast<size_t>(r) * p.sets + g) * p.max_tokens + i] =
        OrderedKey(__ddiv_rn(sum, static_cast<double>(p.layers)));
  } else {
    const int set = blockIdx.y;
    static_cast<uint32_t*>(p.keys)[(static_cast<size_t>(r) * p.sets + set) * p.max_tokens + i] =
        OrderedKey(GroupMax(p, rows, set / p.kv_heads, set % p.kv_heads, i));
  }
}

// Union keys start at the lowest key (0) before AggregateKernel<union> gathers into them.
__global__ void ClearKeysKernel(uint32_t* keys, uint64_t count) {
  for (uint64_t i = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < count;
       i += uint64_t{gridDim.x} * blockDim.x) {
    keys[i] = 0;
  }
}

struct TopKParams {
  const KvRoundRequest* requests;
  const void* keys;
  int32_t* kept;
  int32_t* kept_count;
  int32_t* holes;
  int32_t* hole_count;
  int64_t max_tokens;
  int64_t budget;
  int sets;
};

// Grid (set, request). Keeps min(budget, T) tokens: all keys above the budget-th largest key K*,
// then keys equal to K* by ascending index; writes them ascending as physical indices.
template <typename Key>
__global__ void __launch_bounds__(kTopKThreads) TopKKernel(const TopKParams p) {
  using Scan = cub::BlockScan<int, kTopKThreads>;
  __shared__ typename Scan::TempStorage scan_storage;
  __shared__ unsigned hist[256];
  __shared__ unsigned suffix[256];
  __shared__ unsigned warp_totals[kTopKThreads / 32];
  __shared__ Key s_prefix;
  __shared__ int64_t s_remaining;
  __shared__ int s_digit;
  __shared__ unsigned s_above;

  const int s = blockIdx.x;
  const int r = blockIdx.y;
  const KvRoundRequest req = p.requests[r];
  const int64_t T = DecodeTokens(req, p.max_tokens);
  const int64_t keep = p.budget < T ? p.budget : T;
  if (s == 0 && threadIdx.x == 0) p.kept_count[r] = static_cast<int32_t>(keep);
  int32_t* out = p.kept + (static_cast<size_t>(r) * p.sets + s) * p.budget;
  int32_t* holes = p.holes + (static_cast<size_t>(r) * p.sets + s) * p.budget;
  int32_t* hole_count = p.hole_count + static_cast<size_t>(r) * p.sets + s;
  const Key* keys =
      static_cast<const Key*>(p.keys) + (static_cast<size_t>(r) * p.sets + s) * p.max_tokens;
  if (keep == T || keep == 0) {
    for (int64_t i = threadIdx.x; i < keep; i += kTopKThreads) {
      out[i] = static_cast<int32_t>(req.prompt_len + i);
    }
    if (threadIdx.x == 0) *hole_count = 0;
    return;
  }
  if (threadIdx.x == 0) {
    s_prefix = 0;
    s_remaining = keep;
  }
  Key mask = 0;
  for (int shift = static_cast<int>(sizeof(Key)) * 8 - 8; shift >= 0; shift -= 8) {
    hist[threadIdx.x] = 0;
    __syncthreads();
    const Key prefix = s_prefix;
    for (int64_t i = threadIdx.x; i < T; i += kTopKThreads) {
      const Key k = keys[i];
      if ((k & mask) == prefix) atomicAdd(&hist[(k >> shift) & 0xffu], 1u);
    }
    __syncthreads();
    // Suffix sums: suffix[b] = keys of this prefix with digit >= b. Thread b owns bin b: a
    // suffix scan within each warp (shuffles), then the totals of the warps above it.
    {
      const unsigned lane = threadIdx.x & 31;
      unsigned v = hist[threadIdx.x];
#pragma unroll
      for (int d = 1; d < 32; d <<= 1) {
        const unsigned up = __shfl_down_sync(0xffffffffu, v, d);
        if (lane + d < 32) v += up;
      }
      if (lane == 0) warp_totals[threadIdx.x >> 5] = v;
      __syncthreads();
      for (int w = (threadIdx.x >> 5) + 1; w < kTopKThreads / 32; ++w) v += warp_totals[w];
      suffix[threadIdx.x] = v;
      __syncthreads();
    }
    const int64_t remaining = s_remaining;
    {
      const unsigned above = threadIdx.x < 255 ? suffix[threadIdx.x + 1] : 0u;
      if (suffix[threadIdx.x] >= remaining && above < remaining) {
        s_digit = threadIdx.x;
        s_above = above;
      }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      s_prefix |= static_cast<Key>(s_digit) << shift;
      s_remaining -= s_above;
    }
    mask |= static_cast<Key>(0xff) << shift;
    __syncthreads();
  }
  const Key threshold = s_prefix;
  const int64_t ties = s_remaining;  // keys equal to the threshold to take, lowest index first
  // The kept set in ascending order, and the slots below `keep` that lose their token (the holes
  // fill-hole compaction fills with the kept tokens past `keep`).
  int64_t tie_base = 0, out_base = 0, hole_base = 0;
  for (int64_t base = 0; base < T; base += kTopKThreads) {
    const int64_t i = base + threadIdx.x;
    const Key k = i < T ? keys[i] : 0;
    const int equal = (i < T && k == threshold) ? 1 : 0;
    const int greater = (i < T && k > threshold) ? 1 : 0;
    int equal_before, equal_total;
    Scan(scan_storage).ExclusiveSum(equal, equal_before, equal_total);
    __syncthreads();
    const int take = greater || (equal && tie_base + equal_before < ties);
    int position, taken;
    Scan(scan_storage).ExclusiveSum(take, position, taken);
    __syncthreads();
    if (take) out[out_base + position] = static_cast<int32_t>(req.prompt_len + i);
    tie_base += equal_total;
    out_base += taken;
    if (base < keep) {  // block-uniform
      const int hole = (i < keep && !take) ? 1 : 0;
      int hole_index, hole_total;
      Scan(scan_storage).ExclusiveSum(hole, hole_index, hole_total);
      __syncthreads();
      if (hole) holes[hole_base + hole_index] = static_cast<int32_t>(req.prompt_len + i);
      hole_base += hole_total;
    }
  }
  if (threadIdx.x == 0) *hole_count = static_cast<int32_t>(hole_base);
}

struct CompactParams {
  PagedKvDevice kv;
  const KvRoundRequest* requests;
  const int32_t* kept;
  const int32_t* kept_count;
  int64_t kept_stride;
  int sets;
  KvCompactionOrder order;
  int page_shift;        // log2(page_tokens) when it is a power of two, else -1
  const int32_t* holes;  // null: the kernel finds the holes
  const int32_t* hole_count;
};

// One row move: byte offsets of the source and destination K rows from the layer's K pool base;
// the V rows sit at the same offsets in the V pool (or v_offset further in a combined pool).
struct Move {
  uint64_t src;
  uint64_t dst;
};

__device__ __forceinline__ uint64_t RowOffset(const PagedKvDevice& kv, int page_shift,
                                              const int32_t* block_table, int head, int64_t token) {
  // Token indices are below 2^31 (ValidateTriRound): 32-bit arithmetic, a shift when it can.
  const uint32_t t = static_cast<uint32_t>(token);
  const uint32_t P = static_cast<uint32_t>(kv.page_tokens);
  const uint32_t index = page_shift >= 0 ? t >> page_shift : t / P;
  const uint32_t slot = t - index * P;
  const int64_t page = block_table[index];
  return static_cast<uint64_t>(page) * kv.page_stride +
         static_cast<uint64_t>(head) * kv.head_stride +
         static_cast<uint64_t>(slot) * kv.token_stride;
}

// Copies the K and V rows of moves[0, n): every thread loads its vectors, the block syncs, then
// every thread stores them. Reads of the whole chunk finish before any write, so a chunk may
// write rows that other moves of the same chunk read.
__device__ __noinline__ void MoveChunk(const PagedKvDevice& kv, const KvPoolPair& pools,
                                       const Move* moves, int n) {
  // row_bytes / 16 is a power of two (head_dim 64 / 128 / 256, 1 or 2 bytes per element).
  const int plane_shift = __ffs(static_cast<int>(kv.row_bytes / 16)) - 1;
  const int plane_mask = (1 << plane_shift) - 1;
  const int total = n << (plane_shift + 1);
  auto* k_base = static_cast<uint8_t*>(pools.k);
  auto* v_base = kv.combined ? k_base + kv.v_offset : static_cast<uint8_t*>(pools.v);
  uint4 v[kVectorsPerThread];
#pragma unroll
  for (int k = 0; k < kVectorsPerThread; ++k) {
    const int idx = threadIdx.x + k * kCompactThreads;
    if (idx < total) {
      const int m = idx >> (plane_shift + 1);
      const uint8_t* base = (idx >> plane_shift) & 1 ? v_base : k_base;
      v[k] = reinterpret_cast<const uint4*>(base + moves[m].src)[idx & plane_mask];
    }
  }
  __syncthreads();
#pragma unroll
  for (int k = 0; k < kVectorsPerThread; ++k) {
    const int idx = threadIdx.x + k * kCompactThreads;
    if (idx < total) {
      const int m = idx >> (plane_shift + 1);
      uint8_t* base = (idx >> plane_shift) & 1 ? v_base : k_base;
      reinterpret_cast<uint4*>(base + moves[m].dst)[idx & plane_mask] = v[k];
    }
  }
  __syncthreads();
}

// Grid (layer * kv_heads + kv_head, request); dynamic shared memory: a bitmap of the kept range.
// Every move goes into one list in execution order (block scans place them), and the list runs in
// chunks whose reads all finish before their writes (MoveChunk). Order-preserving moves and tail
// moves have src >= dst and ascending sources, so a later chunk never reads a row an earlier chunk
// wrote (move i reads src_i >= prompt + i, past every earlier destination). Hole filling reads
// only rows at or past prompt + kept and writes only rows before it: the bitmap marks the kept
// slots inside the range, a block scan numbers the free ones, and free slot j takes the j-th kept
// token past the range. The tail comes last in the list: its destinations may be the sources of
// hole-filling moves, which then run before it or in the same chunk (reads first).
__global__ void __launch_bounds__(kCompactThreads) CompactionKernel(const CompactParams p) {
  using Scan = cub::BlockScan<int, kCompactThreads>;
  __shared__ typename Scan::TempStorage scan_storage;
  __shared__ Move moves[kMoveList];
  extern __shared__ uint32_t occupied[];  // bit q: slot prompt + q holds a kept token
  const int G = p.kv.kv_heads;
  const int l = blockIdx.x / G;
  const int g = blockIdx.x % G;
  const int r = blockIdx.y;
  const KvRoundRequest req = p.requests[r];
  const int64_t T = DecodeTokens(req, INT64_MAX);
  int64_t keep = p.kept_count[r];
  if (keep > T) keep = T;
  if (keep < 0) keep = 0;
  const int set = p.sets == 1 ? 0 : (p.sets == G ? g : static_cast<int>(blockIdx.x));
  const int32_t* kept = p.kept + (static_cast<size_t>(r) * p.sets + set) * p.kept_stride;
  const KvPoolPair pools = p.kv.layers[l];
  const int64_t prompt = req.prompt_len;
  const int vectors_per_move = static_cast<int>(2 * (p.kv.row_bytes / 16));
  int chunk = kCompactThreads * kVectorsPerThread / vectors_per_move;
  if (chunk > kCompactThreads) chunk = kCompactThreads;
  if (chunk < 1) chunk = 1;

  int count = 0;  // moves in the list; the same value in every thread
  auto flush = [&]() {
    __syncthreads();
    for (int first = 0; first < count; first += chunk) {
      MoveChunk(p.kv, pools, moves + first, count - first < chunk ? count - first : chunk);
    }
    count = 0;
  };
  // Appends one candidate move per thread (`has`), in thread order.
  auto append = [&](bool has, int64_t src, int64_t dst) {
    if (count + kCompactThreads > kMoveList) flush();
    int index, total;
    Scan(scan_storage).ExclusiveSum(has ? 1 : 0, index, total);
    if (has) {
      moves[count + index] = {RowOffset(p.kv, p.page_shift, req.block_table, g, src),
                              RowOffset(p.kv, p.page_shift, req.block_table, g, dst)};
    }
    count += total;
    __syncthreads();  // scan_storage is reused
  };
  if (p.order == KvCompactionOrder::kFillHoles && p.holes != nullptr) {
    // The selection listed the holes: the j-th hole takes kept[keep - holes + j].
    const size_t at = static_cast<size_t>(r) * p.sets + set;
    const int n = keep < T ? p.hole_count[at] : 0;
    const int32_t* holes = p.holes + at * p.kept_stride;
    const int64_t inside = keep - n;
    for (int c = 0; c < n; c += kCompactThreads) {
      if (count + kCompactThreads > kMoveList) flush();
      const int j = c + static_cast<int>(threadIdx.x);
      if (j < n) {
        moves[count + threadIdx.x] = {
            RowOffset(p.kv, p.page_shift, req.block_table, g, kept[inside + j]),
            RowOffset(p.kv, p.page_shift, req.block_table, g, holes[j])};
      }
      count += n - c < kCompactThreads ? n - c : kCompactThreads;
      __syncthreads();
    }
    const int64_t tail = req.protected_tail;
    if (keep < T) {
      for (int64_t c = 0; c < tail; c += kCompactThreads) {
        const int64_t j = c + threadIdx.x;
        append(j < tail, prompt + T + j, prompt + keep + j);
      }
    }
    flush();
    return;
  }
  const int words = static_cast<int>((keep + 31) / 32);
  for (int w = threadIdx.x; w < words; w += kCompactThreads) occupied[w] = 0;
  __syncthreads();
  // The kept tokens inside the range are a prefix of the ascending set: count and mark them.
  int inside = 0;
  for (int64_t c = 0; c < keep; c += kCompactThreads) {
    const int64_t i = c + threadIdx.x;
    const int64_t q = i < keep ? kept[i] - prompt : keep;
    if (q < keep) atomicOr(&occupied[q >> 5], 1u << (q & 31));
    inside += __syncthreads_count(q < keep);
  }
  if (p.order == KvCompactionOrder::kPreserveOrder) {
    for (int64_t c = 0; c < keep; c += kCompactThreads) {
      const int64_t i = c + threadIdx.x;
      const bool has = i < keep && kept[i] != prompt + i;
      append(has, has ? kept[i] : 0, prompt + i);
    }
  } else if (inside < keep) {
    int64_t holes_before = 0;
    for (int64_t c = 0; c < keep; c += kCompactThreads) {
      const int64_t q = c + threadIdx.x;
      const bool hole = q < keep && !((occupied[q >> 5] >> (q & 31)) & 1u);
      if (count + kCompactThreads > kMoveList) flush();
      int index, total;
      Scan(scan_storage).ExclusiveSum(hole ? 1 : 0, index, total);
      if (hole) {
        moves[count + index] = {
            RowOffset(p.kv, p.page_shift, req.block_table, g, kept[inside + holes_before + index]),
            RowOffset(p.kv, p.page_shift, req.block_table, g, prompt + q)};
      }
      count += total;
      holes_before += total;
      __syncthreads();
    }
  }
  const int64_t tail = req.protected_tail;
  if (keep < T) {
    for (int64_t c = 0; c < tail; c += kCompactThreads) {
      const int64_t j = c + threadIdx.x;
      append(j < tail, prompt + T + j, prompt + keep + j);
    }
  }
  flush();
}

}  // namespace

// log2(page_tokens) when it is a power of two, else -1.
int PageShift(int page_tokens) {
  for (int b = 0; b < 16; ++b) {
    if ((1 << b) == page_tokens) return b;
  }
  return -1;
}

int LaunchKvCompaction(const CompactionArgs& args, void* stream) {
  if (args.num_requests <= 0) return 0;
  CompactParams p{args.kv,          args.requests,  args.kept,  args.kept_count,
                  args.kept_stride, args.sets,      args.order, PageShift(args.kv.page_tokens),
                  args.holes,       args.hole_count};
  const dim3 grid(static_cast<unsigned>(args.kv.num_layers * args.kv.kv_heads),
                  static_cast<unsigned>(args.num_requests));
  const size_t bitmap = static_cast<size_t>((args.kept_stride + 31) / 32) * sizeof(uint32_t);
  CompactionKernel<<<grid, kCompactThreads, bitmap, static_cast<cudaStream_t>(stream)>>>(p);
  return static_cast<int>(cudaGetLastError());
}

int LaunchTriRound(const TriRoundArgs& a, void* stream_ptr) {
  if (a.num_requests <= 0) return 0;
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  const int F = a.kv.head_dim / 2;
  const int H = a.calibration.query_heads;
  const int L = a.kv.num_layers;
  const int G = a.kv.kv_heads;
  const int64_t cap = a.shape.max_decode_tokens;
  const bool tensor = a.kv.dtype != KvElement::kFp16 && H / G <= 8;
  // Partials: one per 128-token tile (CUDA cores) or kWarps per 1,024-token block (tensor cores).
  const int score_tiles = static_cast<int>((cap + kKvScoreTile - 1) / kKvScoreTile);
  const int blocks = (score_tiles + kTilesPerBlock - 1) / kTilesPerBlock;
  const int group_tokens = tensor ? kTilesPerBlock * kKvScoreTile : kKvScoreTile;
  const int partials_per_group = tensor ? kWarps : 1;
  const int tiles = tensor ? blocks * kWarps : score_tiles;
  const unsigned R = static_cast<unsigned>(a.num_requests);

  if (int err = LaunchRoundBands(a.requests, a.calibration.omega, F, a.shape.num_offsets,
                                 a.workspace.bands, R, stream);
      err != 0) {
    return err;
  }

  const int page_shift = PageShift(a.kv.page_tokens);
  const ScoreParams sp{
      a.kv, a.calibration, a.requests, a.workspace.bands, a.workspace.scores, a.workspace.partials,
      cap,  tiles,         page_shift};
  const dim3 score_grid(static_cast<unsigned>(blocks), static_cast<unsigned>(L * G), R);
  int err = LaunchRoundScores(sp, a.kv.dtype, H / G, a.kv.head_dim, score_grid, stream);
  if (err != 0) return err;

  const int rows = static_cast<int>(R) * L * H;
  RowStatsKernel<<<(rows + kWarps - 1) / kWarps, kScoreThreads, 0, stream>>>(
      a.requests, L * H, cap, tiles, group_tokens, partials_per_group, a.shape.normalize,
      a.workspace.partials, a.workspace.row_stats, rows);
  if (err = static_cast<int>(cudaGetLastError()); err != 0) return err;

  const AggregateParams ap{
      a.requests, a.workspace.scores, a.workspace.row_stats, a.workspace.keys, cap, L, H, G,
      a.sets,     a.shape.normalize};
  const unsigned token_blocks =
      static_cast<unsigned>((cap + kAggregateThreads - 1) / kAggregateThreads);
  const TopKParams tp{a.requests,
                      a.workspace.keys,
                      a.workspace.kept,
                      a.workspace.kept_count,
                      a.workspace.holes,
                      a.workspace.hole_count,
                      cap,
                      a.shape.budget,
                      a.sets};
  const dim3 topk_grid(static_cast<unsigned>(a.sets), R);
  switch (a.shape.mode) {
    case KvEvictionMode::kUnion:
      ClearKeysKernel<<<R * 4, 256, 0, stream>>>(reinterpret_cast<uint32_t*>(a.workspace.keys),
                                                 static_cast<uint64_t>(R) * cap);
      AggregateKernel<1><<<dim3(token_blocks, L, R), kAggregateThreads, 0, stream>>>(ap);
      TopKKernel<uint32_t><<<topk_grid, kTopKThreads, 0, stream>>>(tp);
      break;
    case KvEvictionMode::kPerHead:
      AggregateKernel<2><<<dim3(token_blocks, G, R), kAggregateThreads, 0, stream>>>(ap);
      TopKKernel<uint64_t><<<topk_grid, kTopKThreads, 0, stream>>>(tp);
      break;
    case KvEvictionMode::kPerLayerPerHead:
      AggregateKernel<3><<<dim3(token_blocks, L * G, R), kAggregateThreads, 0, stream>>>(ap);
      TopKKernel<uint32_t><<<topk_grid, kTopKThreads, 0, stream>>>(tp);
      break;
  }
  if (err = static_cast<int>(cudaGetLastError()); err != 0) return err;

  CompactionArgs ca;
  ca.kv = a.kv;
  ca.requests = a.requests;
  ca.num_requests = a.num_requests;
  ca.sets = a.sets;
  ca.kept = a.workspace.kept;
  ca.kept_count = a.workspace.kept_count;
  ca.kept_stride = a.shape.budget;
  ca.order = a.shape.order;
  ca.holes = a.workspace.holes;
  ca.hole_count = a.workspace.hole_count;
  return LaunchKvCompaction(ca, stream);
}

}  // namespace kvtier::kernels::internal
