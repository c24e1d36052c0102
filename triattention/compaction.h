// In-place compaction of one request's paged KV cache after a TriAttention selection (CPU
// reference): the prompt stays where it is, the kept decode tokens move forward in order behind
// it (per layer and KV head when the mode keeps per-head sets), then the protected tail; the
// pages past the new length are handed back. Not thread-safe for one request: the caller must
// ensure nothing reads or writes that request's pages during the call.
#ifndef KVTIER_TRIATTENTION_COMPACTION_H_
#define KVTIER_TRIATTENTION_COMPACTION_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "triattention/kv_view.h"
#include "triattention/scoring.h"

namespace kvtier::triattention {

// Where compaction puts the kept decode tokens (the values of kernels::KvCompactionOrder).
enum class CompactionOrder : uint8_t {
  // Kept tokens already inside [prompt_len, prompt_len + kept) stay where they are; the kept
  // tokens past that range move, in ascending order, into the evicted slots inside it, in
  // ascending order (vLLM's "fill-hole" compaction). Moves about as many rows as were evicted.
  // The order of cached keys does not matter to attention or to the next round, since every key
  // keeps its RoPE rotation; the default here, in GpuRound and in the Evictor.
  kFillHoles = 1,
  // The kept tokens packed in their original order (TensorRT-LLM's move list); moves every row
  // after the first evicted one.
  kPreserveOrder = 2,
};

struct CompactionResult {
  // prompt_len + kept.kept + protected_tail: every (layer, KV head) holds this many tokens.
  int64_t new_length = 0;
  // block_table entries at indices >= ceil(new_length / page_tokens), in block-table order: the
  // pages the request no longer needs (their contents are unspecified).
  std::vector<int32_t> freed_pages;
};

// Moves, for every layer l and KV head g, the K and V rows of the tokens kept.For(l, g) into the
// physical positions [prompt_len, prompt_len + kept.kept) as `order` says (kPreserveOrder: the
// i-th kept token to prompt_len + i), and then the request's protected tail (the last
// protected_tail tokens) to prompt_len + kept.kept + j. Rows already in place are not
// copied; only rows of the request's own pages at positions >= prompt_len are written; tokens
// past the new length are left with unspecified contents. Blocks (plain memory copies).
// Returns InvalidArgument when `kept` does not fit the request: layers != view layers, kv_heads
// != num_kv_heads, a wrong set count for the mode, a set whose size is not kept.kept, that is not
// strictly ascending, or holds an index outside the decode region [prompt_len, length -
// protected_tail); FailedPrecondition for device memory; the errors of ValidateKvCacheView and
// ValidateKvRequest. On error nothing has been written. All arguments are borrowed for the call.
absl::StatusOr<CompactionResult> CompactRequest(
    const KvCacheView& view, const KvRequestView& request, const KeptTokens& kept,
    CompactionOrder order = CompactionOrder::kFillHoles);

}  // namespace kvtier::triattention

#endif  // KVTIER_TRIATTENTION_COMPACTION_H_
