// KvCacheView and KvRequestView: how the TriAttention round finds the keys and values of one
// request in an engine's paged KV cache (per layer a K pool and a V pool, or one pool holding K
// then V in every page; HND or NHD order inside a page), with the byte strides derived from the
// geometry and the checks a view must pass. Views borrow the engine's memory; they are plain
// values, and the functions here are pure and thread-safe.
#ifndef KVTIER_TRIATTENTION_KV_VIEW_H_
#define KVTIER_TRIATTENTION_KV_VIEW_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "codec/dtype.h"

namespace kvtier::triattention {

// Order of one page of one pool (K or V plane), P = page_tokens, G = num_kv_heads, D = head_dim.
enum class KvLayout : uint8_t {
  kHnd = 1,  // [page][head][token][dim]: one head's tokens are contiguous (TensorRT-LLM V2)
  kNhd = 2,  // [page][token][head][dim]: one token's heads are contiguous (vLLM flash layout)
};

// Where V lives relative to K.
enum class KvPoolKind : uint8_t {
  kSeparate = 1,  // a K pool and a V pool per layer, each page one plane
  kCombined = 2,  // one pool per layer, each page [K plane][V plane] (TensorRT-LLM [page][2]...)
};

// Which memory the pool pointers address. The CPU round (scoring.h, compaction.h) needs kHost.
enum class KvMemory : uint8_t { kHost = 1, kDevice = 2 };

// The pools of one attention layer. With KvPoolKind::kCombined, `v` is null and V is the second
// plane of every page of `k`.
struct KvLayerPools {
  void* k = nullptr;
  void* v = nullptr;
};

// An engine's paged KV cache. The pointers are borrowed: the engine owns the pools and must keep
// them alive (and unmoved) while a view of them is used.
struct KvCacheView {
  std::vector<KvLayerPools> layers;          // one entry per attention layer
  int64_t num_pages = 0;                     // pages in every pool (page ids are 0..num_pages-1)
  int page_tokens = 0;                       // tokens per page, 16..256
  int num_kv_heads = 0;                      // G
  int head_dim = 0;                          // D: 64, 128 or 256
  codec::DType dtype = codec::DType::kBf16;  // kBf16, kFp16 or kFp8E4M3
  KvLayout layout = KvLayout::kHnd;
  KvPoolKind pool_kind = KvPoolKind::kSeparate;
  KvMemory memory = KvMemory::kHost;
  // Bytes between consecutive pages of a pool; 0: the page itself (one plane, two combined).
  // Larger for pools whose pages hold more than this layer, e.g. a kvtier layout with every
  // layer's K and V in one page; a multiple of 16.
  uint64_t page_stride_bytes = 0;
};

// Byte strides of a view (see KvStridesOf).
struct KvStrides {
  uint64_t row_bytes = 0;  // one (token, head) row: head_dim elements
  uint64_t token = 0;      // between consecutive tokens of a head in a page
  uint64_t head = 0;       // between consecutive heads of a token in a page
  uint64_t plane = 0;      // one K (or V) plane of a page: page_tokens * heads * row_bytes
  uint64_t page = 0;       // between consecutive pages of a pool: plane, or 2 * plane combined
  uint64_t v_in_page = 0;  // offset of the V plane in a page of a combined pool (else 0)
};

// Strides of `view`. REQUIRES: ValidateKvCacheView(view).ok().
KvStrides KvStridesOf(const KvCacheView& view);

// Checks the geometry of a view. InvalidArgument naming the field and its value: no layers, a
// null pool pointer (or a non-null `v` in a combined pool), num_pages < 1, page_tokens outside
// [16, 256], num_kv_heads < 1, head_dim not 64 / 128 / 256, a dtype other than BF16 / FP16 /
// FP8 E4M3, an unknown layout or pool kind, or a pool of more than 2^62 bytes.
absl::Status ValidateKvCacheView(const KvCacheView& view);

// One request's tokens in the cache: token i (physical index) sits in page
// block_table[i / page_tokens], slot i % page_tokens. Tokens [0, prompt_len) are the pinned
// prompt, [prompt_len, length - protected_tail) the decode region a round scores and evicts, and
// the last `protected_tail` tokens (KV already written for in-flight steps) are never scored and
// move unchanged behind the kept tokens. The block table is borrowed.
struct KvRequestView {
  absl::Span<const int32_t> block_table;
  int64_t length = 0;          // physical tokens in the cache, tail included
  int64_t prompt_len = 0;      // pinned prompt tokens
  int64_t protected_tail = 0;  // last tokens excluded from scoring

  int64_t DecodeBegin() const { return prompt_len; }
  int64_t DecodeEnd() const { return length - protected_tail; }
  int64_t DecodeTokens() const { return DecodeEnd() - DecodeBegin(); }
};

// Checks a request against a valid view. InvalidArgument naming the field and its value:
// prompt_len < 0, length < prompt_len, protected_tail outside [0, length - prompt_len], a block
// table shorter than ceil(length / page_tokens) pages, a page id outside [0, num_pages), or a
// page id listed twice.
absl::Status ValidateKvRequest(const KvCacheView& view, const KvRequestView& request);

// Address of the row of physical token `token` of `request`, KV head `head`, layer `layer`, in the
// K (value == false) or V plane. REQUIRES: a validated view and request, token < length.
inline uint8_t* KvRowAddress(const KvCacheView& view, const KvStrides& strides,
                             const KvRequestView& request, int layer, bool value, int head,
                             int64_t token) {
  const int64_t page = request.block_table[token / view.page_tokens];
  const int64_t slot = token % view.page_tokens;
  const KvLayerPools& pools = view.layers[layer];
  uint8_t* base =
      static_cast<uint8_t*>(value && view.pool_kind == KvPoolKind::kSeparate ? pools.v : pools.k);
  uint64_t offset = static_cast<uint64_t>(page) * strides.page +
                    static_cast<uint64_t>(head) * strides.head +
                    static_cast<uint64_t>(slot) * strides.token;
  if (value) offset += strides.v_in_page;
  return base + offset;
}

}  // namespace kvtier::triattention

#endif  // KVTIER_TRIATTENTION_KV_VIEW_H_
