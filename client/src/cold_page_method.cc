// The "quantization_for_cold_page" compression method: the after-request and tool-call stages
// through kvtierd. At request start the method looks the prompt's full pages up by their block
// hashes and onboards the hits into the request's pages (the daemon dequantizes on the way in); at
// request finish it offloads the pages whose KV is still the plain KV of their tokens (the daemon
// quantizes on the way out, with the codec named by quant + rope_precision); around a tool call it
// parks the request's pages and resumes them into fresh ones.
//
// The method owns a kvtier::Client and one registered engine (unregistered at destruction); the
// Client renews the lease. Calls are synchronous: the hooks run where the engine's scheduler has
// nothing reading or writing the request's pages, and a hook returns when the daemon has answered
// (Offload and Park return once the pages are read, WriteAck's default). With device pools the
// engine must have finished its GPU work on the pages before it calls a hook. Offload skips the
// leading pages that came from the cache, and after a TriAttention round (compacted) only the full
// prompt pages are offloaded: the rest no longer hold the KV of their tokens. A request that
// finishes while parked offloads nothing; its parked state is released.
//
// Counters (atomics, readable from any thread): cold_page_lookups, cold_page_lookup_hit_pages,
// cold_page_onboarded_pages, cold_page_onboarded_bytes (hot bytes written),
// cold_page_offloaded_pages (pages stored), cold_page_offload_hot_bytes,
// cold_page_offload_cold_bytes, cold_page_parked_pages, cold_page_parked_cold_bytes,
// cold_page_resumed_pages, cold_page_released_requests.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/src/compression_methods.h"
#include "common/annotate.h"
#include "kvtier/block_hasher.h"
#include "kvtier/client.h"
#include "kvtier/compression.h"

namespace kvtier::compression_internal {
namespace {

absl::Status Invalid(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("quantization_for_cold_page: ", what));
}

// Prefixes the method's name and what it was doing to a status from the daemon or the Client.
absl::Status Failed(const absl::Status& status, absl::string_view what) {
  return Annotate(status, absl::StrCat("quantization_for_cold_page: ", what));
}

// The codec RegisterEngine asks for: "raw", "nvfp4", "nvfp4+rope", "nvfp4x2", "nvfp4x2+rope".
std::string CodecOf(const CompressionConfig& config) {
  if (config.quant == "raw") return "raw";
  return config.rope_precision == "lossless" ? absl::StrCat(config.quant, "+rope") : config.quant;
}

std::string OptionOr(const CompressionConfig& config, const char* key, std::string fallback) {
  auto it = config.options.find(key);
  return it == config.options.end() ? std::move(fallback) : it->second;
}

// Pages of `request.block_table`, the first `count` of them, as daemon page indices.
absl::StatusOr<std::vector<uint32_t>> PageIndices(const RequestState& request, size_t first,
                                                  size_t count) {
  if (request.block_table.size() < first + count) {
    return Invalid(absl::StrCat("request ", request.id, ": block table of ",
                                request.block_table.size(), " pages, ", first + count, " needed"));
  }
  std::vector<uint32_t> pages;
  pages.reserve(count);
  for (size_t i = first; i < first + count; ++i) {
    if (request.block_table[i] < 0) {
      return Invalid(absl::StrCat("request ", request.id, ": page ", request.block_table[i],
                                  " at block table entry ", i));
    }
    pages.push_back(static_cast<uint32_t>(request.block_table[i]));
  }
  return pages;
}

class ColdPageMethod : public CompressionManager {
 public:
  ColdPageMethod(std::unique_ptr<Client> client, Engine engine, BlockHasher hasher, bool durable)
      : client_(std::move(client)),
        engine_(std::move(engine)),
        hasher_(std::move(hasher)),
        durable_(durable) {}

  ~ColdPageMethod() override {
    for (const auto& [id, parked] : parked_)
      (void)client_->Release(engine_.engine_id, {parked.name});
    (void)client_->Unregister(engine_.engine_id);
  }

  std::string_view name() const override { return kColdPageName; }

  absl::Status OnRequestStart(RequestState& request) override {
    request.cached_tokens = 0;
    const int64_t tokens_per_page = hasher_.tokens_per_page();
    const int64_t prompt = std::min<int64_t>(request.prompt_len, request.tokens.size());
    if (prompt < 1) return absl::OkStatus();
    // Leave at least the last prompt token to compute: the engine needs its logits.
    const size_t pages =
        std::min<size_t>((prompt - 1) / tokens_per_page, request.block_table.size());
    if (pages == 0) return absl::OkStatus();
    absl::StatusOr<std::vector<std::string>> hashes =
        hasher_.Hash(std::span<const uint32_t>(request.tokens.data(), pages * tokens_per_page));
    if (!hashes.ok()) return Failed(hashes.status(), "hashing the prompt");
    absl::StatusOr<LookupResult> lookup = client_->Lookup(engine_.engine_id, *hashes);
    if (!lookup.ok()) return Failed(lookup.status(), "Lookup");
    lookups_.fetch_add(1, std::memory_order_relaxed);
    lookup_hit_pages_.fetch_add(lookup->hit_pages, std::memory_order_relaxed);
    const size_t hits = std::min<size_t>(lookup->hit_pages, pages);
    if (hits == 0) return absl::OkStatus();
    absl::StatusOr<std::vector<uint32_t>> indices = PageIndices(request, 0, hits);
    if (!indices.ok()) return indices.status();
    std::vector<PageRef> refs;
    refs.reserve(hits);
    for (size_t i = 0; i < hits; ++i) refs.push_back({(*hashes)[i], (*indices)[i]});
    absl::StatusOr<OnboardResult> onboard = client_->Onboard(engine_.engine_id, refs);
    if (!onboard.ok()) return Failed(onboard.status(), "Onboard");
    onboarded_pages_.fetch_add(onboard->onboarded_pages, std::memory_order_relaxed);
    onboarded_bytes_.fetch_add(onboard->hot_bytes_written, std::memory_order_relaxed);
    request.cached_tokens = int64_t{onboard->onboarded_pages} * tokens_per_page;
    in_cache_[request.id] = onboard->onboarded_pages;
    return absl::OkStatus();
  }

  // Stage 2: the prompt's full pages go to the cache as soon as they exist, so concurrent
  // requests that share the prefix (an agent's system prompt) hit it before this one ends.
  absl::Status OnContextEnd(RequestState& request) override {
    return OffloadExactPages(request, request.prompt_len);
  }

  absl::Status OnToolCallPause(RequestState& request) override {
    const std::string key = ParkKey(request);
    const size_t pages = PagesCovering(request.num_tokens);
    absl::StatusOr<std::vector<uint32_t>> indices = PageIndices(request, 0, pages);
    if (!indices.ok()) return indices.status();
    if (pages == 0) return absl::OkStatus();
    // The Client splits a Park above the server's item limit and keeps it all-or-nothing.
    ParkOptions options;
    options.num_tokens = static_cast<uint64_t>(request.num_tokens);
    absl::StatusOr<ParkResult> park = client_->Park(engine_.engine_id, key, *indices, options);
    if (!park.ok()) return Failed(park.status(), absl::StrCat("Park '", key, "'"));
    const uint64_t parked_pages = park->parked_pages;
    parked_cold_bytes_.fetch_add(park->cold_bytes, std::memory_order_relaxed);
    parked_pages_.fetch_add(parked_pages, std::memory_order_relaxed);
    parked_[request.id] = Parked{key, parked_pages};
    return absl::OkStatus();
  }

  absl::Status OnToolCallResume(RequestState& request) override {
    auto it = parked_.find(request.id);
    if (it == parked_.end()) return absl::OkStatus();  // nothing parked: the pause had no pages
    const Parked parked = it->second;
    absl::StatusOr<std::vector<uint32_t>> indices = PageIndices(request, 0, parked.pages);
    if (!indices.ok()) return indices.status();
    absl::StatusOr<ResumeResult> resume = client_->Resume(engine_.engine_id, parked.name, *indices);
    if (!resume.ok()) {
      // The engine recomputes the request: drop the parked state (expired already when
      // NotFound), so that its next pause can park under the same key.
      if (!absl::IsNotFound(resume.status())) {
        (void)client_->Release(engine_.engine_id, {parked.name});
      }
      parked_.erase(it);
      return Failed(resume.status(), absl::StrCat("Resume '", parked.name, "'"));
    }
    resumed_pages_.fetch_add(resume->resumed_pages, std::memory_order_relaxed);
    const uint64_t num_tokens = resume->num_tokens;
    parked_.erase(it);
    request.num_tokens = static_cast<int64_t>(num_tokens);
    request.cached_tokens = request.num_tokens;  // the whole KV is back
    return absl::OkStatus();
  }

  // A request that ends while parked (cancelled during its tool call) has no pages to offload:
  // its parked state is released.
  absl::Status OnRequestFinish(RequestState& request) override {
    auto it = parked_.find(request.id);
    if (it == parked_.end()) {
      const absl::Status st = OffloadExactPages(request, request.num_tokens);
      in_cache_.erase(request.id);
      return st;
    }
    in_cache_.erase(request.id);
    const std::string key = it->second.name;
    parked_.erase(it);
    absl::StatusOr<ReleaseResult> release = client_->Release(engine_.engine_id, {key});
    if (!release.ok()) return Failed(release.status(), absl::StrCat("Release '", key, "'"));
    released_requests_.fetch_add(1, std::memory_order_relaxed);
    return absl::OkStatus();
  }

  std::map<std::string, uint64_t> Counters() const override {
    auto get = [](const std::atomic<uint64_t>& c) { return c.load(std::memory_order_relaxed); };
    return {{"cold_page_lookups", get(lookups_)},
            {"cold_page_lookup_hit_pages", get(lookup_hit_pages_)},
            {"cold_page_onboarded_pages", get(onboarded_pages_)},
            {"cold_page_onboarded_bytes", get(onboarded_bytes_)},
            {"cold_page_offloaded_pages", get(offloaded_pages_)},
            {"cold_page_offload_hot_bytes", get(offload_hot_bytes_)},
            {"cold_page_offload_cold_bytes", get(offload_cold_bytes_)},
            {"cold_page_parked_pages", get(parked_pages_)},
            {"cold_page_parked_cold_bytes", get(parked_cold_bytes_)},
            {"cold_page_resumed_pages", get(resumed_pages_)},
            {"cold_page_released_requests", get(released_requests_)}};
  }

 private:
  struct Parked {
    std::string name;
    uint64_t pages = 0;
  };

  static std::string ParkKey(const RequestState& request) {
    return request.name.empty() ? absl::StrCat(request.id) : request.name;
  }

  size_t PagesCovering(int64_t tokens) const {
    const int64_t per_page = hasher_.tokens_per_page();
    return tokens <= 0 ? 0 : static_cast<size_t>((tokens + per_page - 1) / per_page);
  }

  // Offloads the full pages whose KV is exact, among the first `limit` tokens: every full page of
  // the tokens in the cache, or only the full prompt pages after a compaction, less the leading
  // pages that are already in the cache (onboarded at the start, or offloaded at context end).
  absl::Status OffloadExactPages(const RequestState& request, int64_t limit) {
    const int64_t tokens_per_page = hasher_.tokens_per_page();
    int64_t exact =
        std::min<int64_t>({limit, request.num_tokens, static_cast<int64_t>(request.tokens.size())});
    if (request.compacted) exact = std::min(exact, request.prompt_len);
    const size_t pages =
        std::min<size_t>(std::max<int64_t>(exact, 0) / tokens_per_page, request.block_table.size());
    size_t& in_cache = in_cache_[request.id];
    const size_t cached = in_cache;
    if (pages <= cached) return absl::OkStatus();
    absl::StatusOr<std::vector<std::string>> hashes =
        hasher_.Hash(std::span<const uint32_t>(request.tokens.data(), pages * tokens_per_page));
    if (!hashes.ok()) return Failed(hashes.status(), "hashing the request");
    absl::StatusOr<std::vector<uint32_t>> indices = PageIndices(request, 0, pages);
    if (!indices.ok()) return indices.status();
    std::vector<PageRef> refs;
    refs.reserve(pages - cached);
    for (size_t i = cached; i < pages; ++i) {
      // The page's tokens go along, for a daemon that publishes KV events.
      const auto first = request.tokens.begin() + static_cast<int64_t>(i) * tokens_per_page;
      refs.push_back({(*hashes)[i], (*indices)[i], {first, first + tokens_per_page}});
    }
    OffloadOptions options;
    options.durable = durable_;
    absl::StatusOr<OffloadResult> offload = client_->Offload(engine_.engine_id, refs, options);
    if (!offload.ok()) return Failed(offload.status(), "Offload");
    in_cache = pages;
    offloaded_pages_.fetch_add(offload->stored_pages, std::memory_order_relaxed);
    offload_hot_bytes_.fetch_add(offload->hot_bytes_read, std::memory_order_relaxed);
    offload_cold_bytes_.fetch_add(offload->cold_bytes_written, std::memory_order_relaxed);
    return absl::OkStatus();
  }

  std::unique_ptr<Client> client_;
  Engine engine_;
  BlockHasher hasher_;
  bool durable_ = false;
  absl::flat_hash_map<uint64_t, Parked> parked_;  // by RequestState::id
  // Leading pages of each live request known to be in the cache, by RequestState::id.
  absl::flat_hash_map<uint64_t, size_t> in_cache_;

  std::atomic<uint64_t> lookups_{0};
  std::atomic<uint64_t> lookup_hit_pages_{0};
  std::atomic<uint64_t> onboarded_pages_{0};
  std::atomic<uint64_t> onboarded_bytes_{0};
  std::atomic<uint64_t> offloaded_pages_{0};
  std::atomic<uint64_t> offload_hot_bytes_{0};
  std::atomic<uint64_t> offload_cold_bytes_{0};
  std::atomic<uint64_t> parked_pages_{0};
  std::atomic<uint64_t> parked_cold_bytes_{0};
  std::atomic<uint64_t> resumed_pages_{0};
  std::atomic<uint64_t> released_requests_{0};
};

}  // namespace

absl::StatusOr<std::unique_ptr<CompressionManager>> CreateColdPageMethod(
    const CompressionConfig& config, const EngineContext& engine) {
  if (engine.model.empty()) return Invalid("the engine context has no model name");
  if (!engine.layout.has_value()) return Invalid("the engine context has no layout");
  if (engine.pool_registrations.size() != engine.layout->pools().size()) {
    return Invalid(absl::StrCat("the engine context has ", engine.pool_registrations.size(),
                                " pool registrations for the layout's ",
                                engine.layout->pools().size(), " pools"));
  }
  ClientOptions client_options;
  client_options.socket_path = config.daemon_socket;
  client_options.client_name = "compression/quantization_for_cold_page";
  client_options.token = OptionOr(config, "token", "");
  if (auto it = config.options.find("connect_timeout_ms"); it != config.options.end()) {
    int64_t ms = 0;
    if (!absl::SimpleAtoi(it->second, &ms) || ms < 1) {
      return Invalid(
          absl::StrCat("connect_timeout_ms '", it->second, "' is not a positive whole number"));
    }
    client_options.connect_timeout = absl::Milliseconds(ms);
  }
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(client_options);
  if (!client.ok()) return Failed(client.status(), "connecting to kvtierd");

  EngineOptions options;
  options.engine_name = OptionOr(config, "engine_name", absl::StrCat(engine.model, "/cold-page"));
  options.tenant = OptionOr(config, "tenant", "");
  options.partition = OptionOr(config, "partition", "");
  options.model = engine.model;
  options.layout = engine.layout;
  options.codec = CodecOf(config);
  options.pools = engine.pool_registrations;
  absl::StatusOr<Engine> registered = (*client)->RegisterEngine(options);
  if (!registered.ok()) {
    return Failed(registered.status(), absl::StrCat("RegisterEngine (codec ", options.codec, ")"));
  }
  absl::StatusOr<BlockHasher> hasher =
      BlockHasher::Create(registered->hash_root, engine.layout->tokens_per_page());
  if (!hasher.ok()) {
    (void)(*client)->Unregister(registered->engine_id);
    return Failed(hasher.status(), "the engine's hash root");
  }
  return std::make_unique<ColdPageMethod>(std::move(*client), std::move(*registered),
                                          std::move(*hasher), config.durable);
}

}  // namespace kvtier::compression_internal
