// Compaction as TensorRT-LLM's BatchedKVCacheCompaction does it (notes 4.2): per (layer, KV head)
// a move list of the kept ordinals, ascending, followed by the protected tail, written from the
// destination base prompt_len. Because the sources are strictly ascending and start at or after
// prompt_len, source i is never before destination i, so packing forward in order never
// overwrites a row that is still to be read and needs no scratch copy. Kept keys keep their
// original RoPE rotation (notes 3.4): rows are moved byte for byte, never rewritten.
// CompactionOrder::kFillHoles (vLLM's variant, notes 4.1) moves only the kept tokens that sit
// past prompt_len + kept into the evicted slots before it; it is what kernels/kv_round.cu does
// by default, and this is its reference.
#include "triattention/compaction.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace kvtier::triattention {
namespace {

size_t ExpectedSets(const KeptTokens& kept) {
  switch (kept.mode) {
    case EvictionMode::kUnion:
      return 1;
    case EvictionMode::kPerHead:
      return static_cast<size_t>(kept.kv_heads);
    case EvictionMode::kPerLayerPerHead:
      return static_cast<size_t>(kept.layers) * kept.kv_heads;
  }
  return 0;
}

absl::Status CheckKept(const KvCacheView& view, const KvRequestView& request,
                       const KeptTokens& kept) {
  if (kept.layers != static_cast<int>(view.layers.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kept tokens cover ", kept.layers, " layers, the kv view has ", view.layers.size()));
  }
  if (kept.kv_heads != view.num_kv_heads) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kept tokens cover ", kept.kv_heads, " kv heads, the kv view has ", view.num_kv_heads));
  }
  const size_t expected = ExpectedSets(kept);
  if (expected == 0 || kept.sets.size() != expected) {
    return absl::InvalidArgumentError(absl::StrCat("kept tokens hold ", kept.sets.size(),
                                                   " sets, mode ", static_cast<int>(kept.mode),
                                                   " needs ", expected));
  }
  if (kept.kept < 0 || kept.kept > request.DecodeTokens()) {
    return absl::InvalidArgumentError(absl::StrCat("kept count ", kept.kept, " outside [0, ",
                                                   request.DecodeTokens(), "] decode tokens"));
  }
  for (size_t s = 0; s < kept.sets.size(); ++s) {
    const std::vector<int64_t>& set = kept.sets[s];
    if (static_cast<int64_t>(set.size()) != kept.kept) {
      return absl::InvalidArgumentError(
          absl::StrCat("kept set ", s, " has ", set.size(), " tokens, not ", kept.kept));
    }
    for (size_t i = 0; i < set.size(); ++i) {
      if (set[i] < request.DecodeBegin() || set[i] >= request.DecodeEnd()) {
        return absl::InvalidArgumentError(
            absl::StrCat("kept set ", s, " token ", set[i], " outside the decode region [",
                         request.DecodeBegin(), ", ", request.DecodeEnd(), ")"));
      }
      if (i > 0 && set[i] <= set[i - 1]) {
        return absl::InvalidArgumentError(absl::StrCat(
            "kept set ", s, " is not strictly ascending at ", i, ": ", set[i - 1], ", ", set[i]));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CompactionResult> CompactRequest(const KvCacheView& view,
                                                const KvRequestView& request,
                                                const KeptTokens& kept, CompactionOrder order) {
  KVTIER_RETURN_IF_ERROR(ValidateKvCacheView(view));
  KVTIER_RETURN_IF_ERROR(ValidateKvRequest(view, request));
  if (view.memory != KvMemory::kHost) {
    return absl::FailedPreconditionError("CPU compaction needs a kv view of host memory");
  }
  if (order != CompactionOrder::kFillHoles && order != CompactionOrder::kPreserveOrder) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown compaction order ", static_cast<int>(order)));
  }
  KVTIER_RETURN_IF_ERROR(CheckKept(view, request, kept));
  const KvStrides strides = KvStridesOf(view);
  const int64_t tail_begin = request.DecodeEnd();
  for (int l = 0; l < kept.layers; ++l) {
    for (int g = 0; g < kept.kv_heads; ++g) {
      int64_t dst = request.prompt_len;
      auto move = [&](int64_t src) {
        if (src != dst) {
          for (bool value : {false, true}) {
            std::memcpy(KvRowAddress(view, strides, request, l, value, g, dst),
                        KvRowAddress(view, strides, request, l, value, g, src), strides.row_bytes);
          }
        }
        ++dst;
      };
      const std::vector<int64_t>& set = kept.For(l, g);
      if (order == CompactionOrder::kPreserveOrder) {
        for (int64_t src : set) move(src);
      } else {
        // Kept tokens inside [prompt_len, prompt_len + kept) stay; the i-th one past it fills
        // the i-th free slot inside it. Sources are past every destination: no overlap.
        const int64_t end = request.prompt_len + kept.kept;
        size_t mover =
            static_cast<size_t>(std::lower_bound(set.begin(), set.end(), end) - set.begin());
        size_t inside = 0;
        for (int64_t slot = request.prompt_len; slot < end; ++slot) {
          if (inside < set.size() && set[inside] == slot) {
            ++inside;
            continue;
          }
          dst = slot;
          move(set[mover++]);
        }
        dst = end;
      }
      for (int64_t src = tail_begin; src < request.length; ++src) move(src);
    }
  }
  CompactionResult result;
  result.new_length = request.prompt_len + kept.kept + request.protected_tail;
  const size_t pages_kept =
      static_cast<size_t>((result.new_length + view.page_tokens - 1) / view.page_tokens);
  for (size_t i = pages_kept; i < request.block_table.size(); ++i) {
    result.freed_pages.push_back(request.block_table[i]);
  }
  return result;
}

}  // namespace kvtier::triattention
