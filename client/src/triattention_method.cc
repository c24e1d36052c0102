// The "triattention" compression method: TriAttention eviction (triattention::Evictor) at the end
// of every generation step, over the engine's own pools described by a kvtier GQA PageLayout.
//
// A kvtier GQA layout keeps every layer's K and V buffers end to end in one slot of one pool, each
// buffer HND ([head][token][dim]). The Evictor's KvCacheView takes that as separate K and V pools
// per layer whose "pool" starts at the buffer's offset in slot 0, with pages one slot apart
// (page_stride_bytes = slot_bytes): no copy, no second description of the memory. The method keeps
// the set of requests it tracks, so a request that started before the method existed, or whose
// AddRequest failed, is carried without eviction rather than failing every step.
//
// Counters: "triattention_rounds" (rounds run), "triattention_evicted_tokens" (tokens removed),
// "triattention_freed_pages" (pages handed back to the engine), "triattention_requests" (tracked
// now).
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "client/src/compression_methods.h"
#include "codec/page_layout.h"
#include "common/annotate.h"
#include "kvtier/compression.h"
#include "kvtier/layout.h"
#include "triattention/evictor.h"
#include "triattention/kv_view.h"

namespace kvtier::compression_internal {
namespace {

namespace ta = ::kvtier::triattention;

absl::Status Invalid(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("triattention: ", what));
}

// The KvCacheView of the engine's pools. InvalidArgument naming the buffer or field when the
// layout is not GQA K/V pairs of one geometry, or the pools do not match it.
absl::StatusOr<ta::KvCacheView> ViewOfEngine(const EngineContext& engine) {
  if (!engine.layout.has_value()) return Invalid("the engine context has no layout");
  const PageLayout& public_layout = *engine.layout;
  if (public_layout.has_mla()) {
    return Invalid(
        "TriAttention does not apply to MLA layouts (the layout has MLA latent buffers; its "
        "scoring needs per-head RoPE keys): use quantization_for_cold_page alone for this model");
  }
  const codec::PageLayout& layout = public_layout.internal();
  struct LayerBuffers {
    const codec::BufferSpec* k = nullptr;
    const codec::BufferSpec* v = nullptr;
  };
  std::map<uint32_t, LayerBuffers> layers;
  const codec::BufferSpec* first = nullptr;
  for (const codec::BufferSpec& b : layout.buffers) {
    if (b.role != codec::BufferRole::kAttentionK && b.role != codec::BufferRole::kAttentionV) {
      return Invalid(absl::StrCat("buffer '", b.name, "' has role '", codec::BufferRoleName(b.role),
                                  "': TriAttention needs a GQA layout of K and V buffers only"));
    }
    if (first == nullptr) first = &b;
    if (b.dtype != first->dtype || b.heads != first->heads || b.head_dim != first->head_dim) {
      return Invalid(absl::StrCat("buffer '", b.name, "' (", codec::DTypeName(b.dtype), ", ",
                                  b.heads, " heads of ", b.head_dim, ") differs from '",
                                  first->name, "' (", codec::DTypeName(first->dtype), ", ",
                                  first->heads, " heads of ", first->head_dim, ")"));
    }
    if (b.Tokens(layout.tokens_per_page) != layout.tokens_per_page || b.RowStride() != b.head_dim) {
      return Invalid(absl::StrCat("buffer '", b.name, "' is not ", layout.tokens_per_page,
                                  " dense rows per head (tokens ", b.tokens, ", row_stride ",
                                  b.row_stride, ")"));
    }
    if (layout.pools[b.pool].slot_bytes != layout.pools[first->pool].slot_bytes) {
      return Invalid(absl::StrCat("buffer '", b.name, "' is in pool '", layout.pools[b.pool].name,
                                  "' whose slots differ from pool '",
                                  layout.pools[first->pool].name, "'"));
    }
    LayerBuffers& layer = layers[b.layer];
    const codec::BufferSpec*& slot = b.role == codec::BufferRole::kAttentionK ? layer.k : layer.v;
    if (slot != nullptr) {
      return Invalid(absl::StrCat("layer ", b.layer, " has two ", codec::BufferRoleName(b.role),
                                  " buffers ('", slot->name, "', '", b.name, "')"));
    }
    slot = &b;
  }
  if (first == nullptr) return Invalid("the layout has no buffers");
  if (engine.pool_bases.size() != layout.pools.size()) {
    return Invalid(absl::StrCat("the engine context has ", engine.pool_bases.size(),
                                " pool bases for the layout's ", layout.pools.size(), " pools"));
  }
  if (engine.slots == 0) return Invalid("the engine context has 0 slots");

  ta::KvCacheView view;
  for (const auto& [l, buffers] : layers) {
    if (buffers.k == nullptr || buffers.v == nullptr) {
      return Invalid(
          absl::StrCat("layer ", l, " has no ", buffers.k == nullptr ? "K" : "V", " buffer"));
    }
    ta::KvLayerPools pools;
    for (const codec::BufferSpec* b : {buffers.k, buffers.v}) {
      void* base = engine.pool_bases[b->pool];
      if (base == nullptr) {
        return Invalid(absl::StrCat("pool '", layout.pools[b->pool].name, "' has no base"));
      }
      (b == buffers.k ? pools.k : pools.v) = static_cast<uint8_t*>(base) + b->offset_bytes;
    }
    view.layers.push_back(pools);
  }
  view.num_pages = engine.slots;
  view.page_tokens = static_cast<int>(layout.tokens_per_page);
  view.num_kv_heads = static_cast<int>(first->heads);
  view.head_dim = static_cast<int>(first->head_dim);
  view.dtype = first->dtype;
  view.layout = ta::KvLayout::kHnd;
  view.pool_kind = ta::KvPoolKind::kSeparate;
  view.memory = engine.device_memory ? ta::KvMemory::kDevice : ta::KvMemory::kHost;
  view.page_stride_bytes = layout.pools[first->pool].slot_bytes;
  return view;
}

absl::StatusOr<ta::EvictorConfig> EvictorConfigOf(const CompressionConfig& config,
                                                  const EngineContext& engine) {
  ta::EvictorConfig evictor;
  evictor.budget = config.budget;
  evictor.beta = config.beta;
  absl::StatusOr<ta::EvictionMode> mode = ta::ParseEvictionMode(config.eviction_mode);
  if (!mode.ok()) return Invalid(std::string(mode.status().message()));
  evictor.mode = *mode;
  if (auto it = config.options.find("normalize_scores"); it != config.options.end()) {
    if (it->second == "true") {
      evictor.normalize = true;
    } else if (it->second == "false") {
      evictor.normalize = false;
    } else {
      return Invalid(absl::StrCat("normalize_scores '", it->second, "' is not true or false"));
    }
  }
  // A GPU round sizes its workspace for max_decode_tokens per request. Between rounds a request
  // grows by beta decode tokens, but an agent's request also grows by whole tool results (one
  // step that confirms thousands of tokens), so the default leaves room for such an append.
  int64_t max_append = 4096;
  if (auto it = config.options.find("max_append_tokens"); it != config.options.end()) {
    if (!absl::SimpleAtoi(it->second, &max_append) || max_append < 0) {
      return Invalid(
          absl::StrCat("max_append_tokens '", it->second, "' is not a non-negative integer"));
    }
  }
  evictor.max_decode_tokens = config.budget + 2 * config.beta + 64 + max_append;
  evictor.device = engine.device;
  return evictor;
}

class TriAttentionMethod : public CompressionManager {
 public:
  explicit TriAttentionMethod(std::unique_ptr<ta::Evictor> evictor)
      : evictor_(std::move(evictor)) {}

  std::string_view name() const override { return kTriAttentionName; }

  absl::Status OnContextEnd(RequestState& request) override {
    absl::Status status = evictor_->AddRequest(request.id, request.prompt_len);
    if (!status.ok()) return status;
    tracked_.insert(request.id);
    requests_.store(tracked_.size(), std::memory_order_relaxed);
    return absl::OkStatus();
  }

  absl::Status OnGenerationStepEnd(std::span<RequestState* const> requests) override {
    // One Evictor call per CUDA stream (engines normally have one), in the order streams appear.
    std::vector<void*> streams;
    for (RequestState* r : requests) {
      if (!tracked_.contains(r->id)) continue;
      if (std::find(streams.begin(), streams.end(), r->stream) == streams.end()) {
        streams.push_back(r->stream);
      }
    }
    for (void* stream : streams) {
      std::vector<RequestState*> batch;
      std::vector<ta::StepRequest> steps;
      for (RequestState* r : requests) {
        if (!tracked_.contains(r->id) || r->stream != stream) continue;
        batch.push_back(r);
        ta::StepRequest step;
        step.id = r->id;
        step.new_tokens = r->new_tokens;
        step.kv.block_table = absl::MakeConstSpan(r->block_table);
        step.kv.length = r->num_tokens;
        step.kv.prompt_len = r->prompt_len;
        step.kv.protected_tail = r->protected_tail;
        steps.push_back(step);
      }
      absl::StatusOr<std::vector<ta::StepOutcome>> outcomes =
          evictor_->OnGenerationStepEnd(steps, stream);
      if (!outcomes.ok()) return outcomes.status();
      for (size_t i = 0; i < batch.size(); ++i) {
        RequestState& r = *batch[i];
        ta::StepOutcome& outcome = (*outcomes)[i];
        r.freed_pages = std::move(outcome.freed_pages);
        if (!outcome.evicted) continue;
        rounds_.fetch_add(1, std::memory_order_relaxed);
        evicted_tokens_.fetch_add(static_cast<uint64_t>(r.num_tokens - outcome.new_length),
                                  std::memory_order_relaxed);
        freed_pages_.fetch_add(r.freed_pages.size(), std::memory_order_relaxed);
        r.num_tokens = outcome.new_length;
        r.compacted = true;
      }
    }
    return absl::OkStatus();
  }

  absl::Status OnRequestFinish(RequestState& request) override {
    tracked_.erase(request.id);
    requests_.store(tracked_.size(), std::memory_order_relaxed);
    absl::Status status = evictor_->RemoveRequest(request.id);
    return absl::IsNotFound(status) ? absl::OkStatus() : status;
  }

  std::map<std::string, uint64_t> Counters() const override {
    return {{"triattention_rounds", rounds_.load(std::memory_order_relaxed)},
            {"triattention_evicted_tokens", evicted_tokens_.load(std::memory_order_relaxed)},
            {"triattention_freed_pages", freed_pages_.load(std::memory_order_relaxed)},
            {"triattention_requests", requests_.load(std::memory_order_relaxed)}};
  }

 private:
  std::unique_ptr<ta::Evictor> evictor_;
  absl::flat_hash_set<uint64_t> tracked_;  // ids the Evictor knows (OnContextEnd succeeded)
  std::atomic<uint64_t> rounds_{0};
  std::atomic<uint64_t> evicted_tokens_{0};
  std::atomic<uint64_t> freed_pages_{0};
  std::atomic<uint64_t> requests_{0};
};

}  // namespace

absl::StatusOr<std::unique_ptr<CompressionManager>> CreateTriAttentionMethod(
    const CompressionConfig& config, const EngineContext& engine) {
  absl::StatusOr<ta::KvCacheView> view = ViewOfEngine(engine);
  if (!view.ok()) return view.status();
  if (config.calibration_path.empty()) {
    return Invalid("calibration_path is required (the official calibration tool's .pt file)");
  }
  if (config.model_config_path.empty()) {
    return Invalid("model_config_path is required (the model's config.json, for its RoPE)");
  }
  absl::StatusOr<ta::EvictorConfig> evictor_config = EvictorConfigOf(config, engine);
  if (!evictor_config.ok()) return evictor_config.status();
  absl::StatusOr<std::unique_ptr<ta::Evictor>> evictor = ta::Evictor::CreateFromFiles(
      *evictor_config, config.calibration_path, config.model_config_path, *view);
  if (!evictor.ok()) {
    return Annotate(evictor.status(), "triattention");
  }
  return std::make_unique<TriAttentionMethod>(std::move(*evictor));
}

}  // namespace kvtier::compression_internal
