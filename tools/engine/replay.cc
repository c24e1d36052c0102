// Replay: the engine loop over the sessions, and RunEngine, which sets up the pool and the
// methods around it. Pages restored by OnRequestStart are checked against the content model,
// pages restored by OnToolCallResume against a snapshot taken at the pause.
#include "tools/engine/replay.h"

#include <algorithm>
#include <cstdio>
#include <queue>
#include <tuple>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/annotate.h"
#include "tools/engine/kv_pool.h"

namespace kvtier::engine {
namespace {

struct Live {
  size_t node = 0;  // the daemon (and its pool and methods) serving the session
  RequestState state;
  std::vector<uint64_t> digests;               // prefix digest per token of state.tokens
  std::vector<std::vector<uint8_t>> snapshot;  // pages at the last pause
};

class Replay {
 public:
  // One pool and method chain per node of the fleet; session i is served by node i % nodes.
  // With `router` (borrowed for the replay), a session goes to the node it names instead.
  Replay(std::vector<KvPool*> pools, std::vector<CompressionManager*> methods,
         const CodecCheck& check, uint32_t page_tokens, PrefixRouter* router)
      : pools_(std::move(pools)),
        methods_(std::move(methods)),
        check_(check),
        page_tokens_(page_tokens),
        router_(router) {
    report_.sessions_per_node.assign(pools_.size(), 0);
  }

  absl::Status Run(const std::vector<Session>& sessions, bool quiet);
  const Report& report() const { return report_; }

 private:
  void Hook(const absl::Status& st, const char* hook) {
    if (st.ok()) return;
    ++report_.hook_errors;
    if (report_.first_error.empty()) report_.first_error = absl::StrCat(hook, ": ", st.ToString());
  }
  absl::Status AppendTokens(Live& live, const std::vector<uint32_t>& tokens);
  absl::Status EnsurePages(Live& live, int64_t tokens);
  void FreePages(Live& live);
  // True when `actual` is what the codec gives back for `original` (one or two round trips:
  // the second for pages that went through the cache twice, e.g. resumed then offloaded).
  bool Matches(const std::vector<uint8_t>& actual, const std::vector<uint8_t>& original);
  absl::Status StartTurn(const Session& s, size_t turn, Live& live);
  // The node for session number `index` (its first turn).
  absl::StatusOr<size_t> Route(const Session& s, size_t index);

  KvPool& pool(const Live& live) { return *pools_[live.node]; }
  CompressionManager& methods(const Live& live) { return *methods_[live.node]; }

  std::vector<KvPool*> pools_;
  std::vector<CompressionManager*> methods_;
  const CodecCheck& check_;
  uint32_t page_tokens_;
  PrefixRouter* router_;
  Report report_;
};

absl::StatusOr<size_t> Replay::Route(const Session& s, size_t index) {
  if (router_ == nullptr) return index % pools_.size();
  absl::StatusOr<RouteAnswer> answer = router_->Choose(s.turns[0].input);
  if (!answer.ok()) return answer.status();
  report_.routed_pages += answer->matched_pages;
  return answer->node;
}

bool Replay::Matches(const std::vector<uint8_t>& actual, const std::vector<uint8_t>& original) {
  if (check_.lossless()) return actual == original;
  absl::StatusOr<std::vector<uint8_t>> once = check_.RoundTrip(original);
  if (!once.ok()) return false;
  if (actual == *once) return true;
  absl::StatusOr<std::vector<uint8_t>> twice = check_.RoundTrip(*once);
  return twice.ok() && actual == *twice;
}

absl::Status Replay::EnsurePages(Live& live, int64_t tokens) {
  const size_t need = static_cast<size_t>((tokens + page_tokens_ - 1) / page_tokens_);
  while (live.state.block_table.size() < need) {
    absl::StatusOr<int32_t> slot = pool(live).Allocate();
    if (!slot.ok()) return slot.status();
    live.state.block_table.push_back(*slot);
  }
  return absl::OkStatus();
}

void Replay::FreePages(Live& live) {
  for (const int32_t p : live.state.block_table) pool(live).Free(p);
  live.state.block_table.clear();
}

// Writes the KV rows of `tokens` after the current end of the request's KV ("prefill").
absl::Status Replay::AppendTokens(Live& live, const std::vector<uint32_t>& tokens) {
  RequestState& st = live.state;
  if (absl::Status s = EnsurePages(live, st.num_tokens + static_cast<int64_t>(tokens.size()));
      !s.ok()) {
    return s;
  }
  size_t i = 0;
  while (i < tokens.size()) {
    const int64_t pos = st.num_tokens;
    const uint32_t in_page = static_cast<uint32_t>(pos % page_tokens_);
    const size_t n = std::min<size_t>(tokens.size() - i, page_tokens_ - in_page);
    std::vector<uint64_t> digests;
    for (size_t k = 0; k < n; ++k) {
      const uint64_t prev = live.digests.empty() ? kPrefixDigestSeed : live.digests.back();
      live.digests.push_back(NextPrefixDigest(prev, tokens[i + k]));
      st.tokens.push_back(tokens[i + k]);
      digests.push_back(live.digests.back());
    }
    if (absl::Status s =
            pool(live).WriteTokens(st.block_table[pos / page_tokens_], in_page, digests);
        !s.ok()) {
      return s;
    }
    st.num_tokens += static_cast<int64_t>(n);
    i += n;
  }
  return absl::OkStatus();
}

absl::Status Replay::StartTurn(const Session& s, size_t t, Live& live) {
  RequestState& st = live.state;
  const Turn& turn = s.turns[t];
  ++report_.turns;
  if (t == 0) {
    ++report_.sessions;
    st.id = s.id;
    st.name = absl::StrCat("session-", s.id);
    st.prompt_len = static_cast<int64_t>(turn.input.size());
    report_.prompt_tokens += turn.input.size();
    // The prompt's tokens and digests are known before any KV exists: the hooks hash them.
    uint64_t d = kPrefixDigestSeed;
    std::vector<uint64_t> digests;
    for (const uint32_t tok : turn.input) digests.push_back(d = NextPrefixDigest(d, tok));
    if (absl::Status e = EnsurePages(live, st.prompt_len); !e.ok()) return e;
    st.tokens = turn.input;
    st.cached_tokens = 0;
    Hook(methods(live).OnRequestStart(st), "OnRequestStart");
    const int64_t cached = std::clamp<int64_t>(st.cached_tokens, 0, st.prompt_len);
    const int64_t cached_pages = cached / page_tokens_;
    report_.cached_tokens += static_cast<uint64_t>(cached_pages * page_tokens_);
    for (int64_t p = 0; p < cached_pages; ++p) {
      absl::StatusOr<std::vector<uint8_t>> actual = pool(live).ReadPage(st.block_table[p]);
      if (!actual.ok()) return actual.status();
      const std::vector<uint8_t> expected = pool(live).ExpectedPage(
          std::span<const uint64_t>(digests).subspan(p * page_tokens_, page_tokens_));
      ++report_.pages_checked;
      if (!Matches(*actual, expected)) ++report_.page_mismatches;
    }
    // Prefill the rest of the prompt.
    st.tokens.clear();
    st.num_tokens = 0;
    live.digests.clear();
    const std::vector<uint32_t> cached_part(turn.input.begin(),
                                            turn.input.begin() + cached_pages * page_tokens_);
    for (size_t k = 0; k < cached_part.size(); ++k) {
      st.tokens.push_back(cached_part[k]);
      live.digests.push_back(digests[k]);
    }
    st.num_tokens = cached_pages * page_tokens_;
    const std::vector<uint32_t> rest(turn.input.begin() + cached_pages * page_tokens_,
                                     turn.input.end());
    if (absl::Status e = AppendTokens(live, rest); !e.ok()) return e;
    report_.prefill_tokens += rest.size();
    Hook(methods(live).OnPrefillChunkEnd(st, st.num_tokens), "OnPrefillChunkEnd");
    Hook(methods(live).OnContextEnd(st), "OnContextEnd");
  } else {
    // Back from a tool call: fresh pages, the method restores them, then the tool's result.
    ++report_.resumes;
    if (absl::Status e = EnsurePages(live, st.num_tokens); !e.ok()) return e;
    st.cached_tokens = 0;
    Hook(methods(live).OnToolCallResume(st), "OnToolCallResume");
    if (st.cached_tokens >= st.num_tokens) {
      for (size_t p = 0; p < live.snapshot.size() && p < st.block_table.size(); ++p) {
        absl::StatusOr<std::vector<uint8_t>> actual = pool(live).ReadPage(st.block_table[p]);
        if (!actual.ok()) return actual.status();
        ++report_.resumed_pages_checked;
        if (!Matches(*actual, live.snapshot[p])) ++report_.resume_mismatches;
      }
    } else {
      // Not restored: recompute the whole context (only possible for an uncompacted KV).
      const std::vector<uint32_t> all = st.tokens;
      FreePages(live);
      st.tokens.clear();
      live.digests.clear();
      st.num_tokens = 0;
      if (absl::Status e = AppendTokens(live, all); !e.ok()) return e;
      report_.recomputed_tokens += all.size();
    }
    live.snapshot.clear();
    const int64_t before = st.num_tokens;
    if (absl::Status e = AppendTokens(live, turn.input); !e.ok()) return e;
    report_.prefill_tokens += turn.input.size();
    st.new_tokens = st.num_tokens - before;
    RequestState* batch[] = {&st};
    Hook(methods(live).OnGenerationStepBegin(batch), "OnGenerationStepBegin");
    Hook(methods(live).OnGenerationStepEnd(batch), "OnGenerationStepEnd");
  }
  // Decode.
  const std::vector<uint32_t> out =
      GeneratedTokens(s.id, static_cast<uint32_t>(t), turn.output_tokens);
  for (const uint32_t tok : out) {
    RequestState* batch[] = {&st};
    Hook(methods(live).OnGenerationStepBegin(batch), "OnGenerationStepBegin");
    if (absl::Status e = AppendTokens(live, {tok}); !e.ok()) return e;
    ++report_.generated_tokens;
    st.new_tokens = 1;
    st.freed_pages.clear();
    const int64_t before = st.num_tokens;
    Hook(methods(live).OnGenerationStepEnd(batch), "OnGenerationStepEnd");
    if (st.num_tokens >= before && !st.freed_pages.empty()) {
      Hook(absl::InternalError("pages freed although the request did not shrink"),
           "OnGenerationStepEnd");
    }
    if (st.num_tokens < before) {
      report_.evicted_tokens += static_cast<uint64_t>(before - st.num_tokens);
      // Positions moved: later rows continue from the new length.
      st.tokens.resize(static_cast<size_t>(st.num_tokens));
      live.digests.resize(static_cast<size_t>(st.num_tokens));
      for (const int32_t p : st.freed_pages) {
        const auto it = std::find(st.block_table.begin(), st.block_table.end(), p);
        if (it == st.block_table.end()) {
          Hook(absl::InternalError(absl::StrCat("freed page ", p, " is not the request's")),
               "OnGenerationStepEnd");
          continue;
        }
        pool(live).Free(p);
        st.block_table.erase(it);
      }
    }
  }
  if (turn.tool_pause_ms > 0) {
    for (const int32_t p : st.block_table) {
      absl::StatusOr<std::vector<uint8_t>> page = pool(live).ReadPage(p);
      if (!page.ok()) return page.status();
      live.snapshot.push_back(*std::move(page));
    }
    Hook(methods(live).OnToolCallPause(st), "OnToolCallPause");
    FreePages(live);
    return absl::OkStatus();
  }
  Hook(methods(live).OnRequestFinish(st), "OnRequestFinish");
  FreePages(live);
  return absl::OkStatus();
}

absl::Status Replay::Run(const std::vector<Session>& sessions, bool quiet) {
  using Event = std::tuple<int64_t, size_t, size_t>;  // arrival, session, turn
  std::priority_queue<Event, std::vector<Event>, std::greater<>> queue;
  for (size_t i = 0; i < sessions.size(); ++i) {
    if (!sessions[i].turns.empty()) queue.emplace(sessions[i].turns[0].arrival_ms, i, 0);
  }
  std::map<size_t, Live> live;
  uint64_t done = 0;
  while (!queue.empty()) {
    const auto [when, i, t] = queue.top();
    queue.pop();
    Live& l = live[i];
    if (t == 0) {
      absl::StatusOr<size_t> node = Route(sessions[i], i);
      if (!node.ok()) return Annotate(node.status(), absl::StrCat("session ", sessions[i].id));
      l.node = *node;
      ++report_.sessions_per_node[l.node];
    }
    if (absl::Status st = StartTurn(sessions[i], t, l); !st.ok()) {
      return Annotate(st, absl::StrCat("session ", sessions[i].id, " turn ", t));
    }
    if (t + 1 < sessions[i].turns.size()) {
      queue.emplace(std::max(sessions[i].turns[t + 1].arrival_ms, when + 1), i, t + 1);
    } else {
      live.erase(i);
      ++done;
      if (!quiet && done % 50 == 0) {
        std::fprintf(stderr, "  %llu/%zu sessions\n", static_cast<unsigned long long>(done),
                     sessions.size());
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<EngineRunResult> RunEngine(const EngineRunOptions& options) {
  if (!options.layout.has_value()) return absl::InvalidArgumentError("engine: no layout");
  const PageLayout& layout = *options.layout;
  const uint32_t tokens_per_page = layout.tokens_per_page();
  const int device = options.device;
  uint64_t max_tokens = 0;
  for (const Session& s : options.sessions) {
    uint64_t n = 0;
    for (const Turn& t : s.turns) n += t.input.size() + t.output_tokens;
    max_tokens = std::max(max_tokens, n);
  }
  const uint32_t slots = static_cast<uint32_t>(max_tokens / tokens_per_page + 2);
  const std::vector<std::string> sockets =
      options.sockets.empty() ? std::vector<std::string>{options.socket} : options.sockets;
  EngineRunResult result;
  result.codec = "raw";  // what pages are checked against: the cold-page method's codec
  result.slots = slots;
  result.device_pool = device >= 0;
  // Per node: a pool, the compression methods (through the framework only), and a second
  // connection for the daemon's counters.
  std::vector<std::unique_ptr<KvPool>> pools;
  std::vector<std::unique_ptr<CompressionManager>> chains;
  std::vector<std::unique_ptr<Client>> stats_clients;
  std::vector<Stats> before;
  for (size_t n = 0; n < sockets.size(); ++n) {
    absl::StatusOr<std::unique_ptr<KvPool>> pool =
        KvPool::Create(layout, slots, device, options.pool_dir);
    if (!pool.ok()) return pool.status();
    EngineContext engine;
    engine.model = options.model;
    engine.layout = layout;
    engine.pool_bases = {(*pool)->base()};
    engine.slots = slots;
    engine.device_memory = device >= 0;
    engine.device = std::max(device, 0);
    engine.pool_registrations = {(*pool)->Registration()};
    result.page_bytes = (*pool)->page_bytes();
    std::vector<std::unique_ptr<CompressionManager>> methods;
    for (CompressionConfig c : options.configs) {
      if (c.algorithm == "quantization_for_cold_page") {
        if (c.daemon_socket.empty() || sockets.size() > 1) c.daemon_socket = sockets[n];
        result.codec = c.quant + (c.rope_precision == "lossless" ? "+rope" : "");
      }
      absl::StatusOr<std::unique_ptr<CompressionManager>> m = CreateCompressionMethod(c, engine);
      if (!m.ok()) return m.status();
      if (n == 0) result.methods.push_back(std::string((*m)->name()));
      methods.push_back(*std::move(m));
    }
    chains.push_back(ChainCompressionMethods(std::move(methods)));
    pools.push_back(*std::move(pool));
    ClientOptions co;
    co.socket_path = sockets[n];
    co.client_name = "kvtier-example-engine (stats)";
    co.keep_alive = false;
    absl::StatusOr<std::unique_ptr<Client>> stats_client = Client::Connect(co);
    if (!stats_client.ok()) return stats_client.status();
    absl::StatusOr<Stats> stats = (*stats_client)->GetStats();
    if (!stats.ok()) return stats.status();
    before.push_back(*std::move(stats));
    stats_clients.push_back(*std::move(stats_client));
  }
  absl::StatusOr<std::unique_ptr<CodecCheck>> check = CodecCheck::Create(layout, result.codec);
  if (!check.ok()) return check.status();

  if (!options.quiet) {
    std::fprintf(stderr,
                 "kvtier-example-engine: %zu sessions over %zu daemon(s); %s pool of %u pages x "
                 "%llu bytes; methods: %s; codec %s\n",
                 options.sessions.size(), sockets.size(), device >= 0 ? "GPU" : "host", slots,
                 static_cast<unsigned long long>(result.page_bytes),
                 absl::StrJoin(result.methods, ", ").c_str(), result.codec.c_str());
  }
  std::vector<KvPool*> pool_ptrs;
  std::vector<CompressionManager*> chain_ptrs;
  for (size_t n = 0; n < sockets.size(); ++n) {
    pool_ptrs.push_back(pools[n].get());
    chain_ptrs.push_back(chains[n].get());
  }
  std::unique_ptr<PrefixRouter> router;
  if (options.route == RoutePolicy::kPrefix) {
    const auto cold = std::find_if(
        options.configs.begin(), options.configs.end(),
        [](const CompressionConfig& c) { return c.algorithm == "quantization_for_cold_page"; });
    if (options.router_command.empty() || cold == options.configs.end()) {
      return absl::InvalidArgumentError(
          "prefix routing needs a router command and a quantization_for_cold_page config");
    }
    std::string root;
    for (size_t n = 0; n < sockets.size(); ++n) {
      absl::StatusOr<std::string> r =
          NamespaceHashRoot(*stats_clients[n], *cold, options.model, layout, options.pool_dir);
      if (!r.ok()) return r.status();
      if (n == 0) root = *r;
      if (*r != root) {
        return absl::FailedPreconditionError(absl::StrCat(
            "prefix routing: node ", n, " (", sockets[n],
            ") keys the namespace with another "
            "hash root than node 0 (authentication with different keys?): its events cannot be "
            "matched"));
      }
    }
    absl::StatusOr<BlockHasher> hasher = BlockHasher::Create(root, tokens_per_page);
    if (!hasher.ok()) return hasher.status();
    absl::StatusOr<std::unique_ptr<PrefixRouter>> created =
        PrefixRouter::Create(options.router_command, *std::move(hasher), sockets.size());
    if (!created.ok()) return created.status();
    router = *std::move(created);
  }
  Replay replay(pool_ptrs, chain_ptrs, **check, tokens_per_page, router.get());
  const absl::Status run = replay.Run(options.sessions, options.quiet);
  if (router != nullptr && run.ok()) {
    absl::StatusOr<std::string> stats = router->process().Ask("stats");
    if (!stats.ok()) return stats.status();
    result.router_stats = *stats;
    router.reset();
  }
  chains.clear();  // unregisters the methods' engines before the pools go away
  if (!run.ok()) return run;
  result.report = replay.report();
  for (size_t n = 0; n < sockets.size(); ++n) {
    absl::StatusOr<Stats> after = stats_clients[n]->GetStats();
    if (!after.ok()) return after.status();
    for (const TierStats& t : after->tiers) result.hits_by_tier[t.tier] += t.hits;
    for (const TierStats& t : before[n].tiers) result.hits_by_tier[t.tier] -= t.hits;
    result.hot_bytes_offloaded += after->hot_bytes_offloaded - before[n].hot_bytes_offloaded;
    result.cold_bytes_offloaded += after->cold_bytes_offloaded - before[n].cold_bytes_offloaded;
    result.hot_bytes_onboarded += after->hot_bytes_onboarded - before[n].hot_bytes_onboarded;
    result.cold_bytes_onboarded += after->cold_bytes_onboarded - before[n].cold_bytes_onboarded;
  }
  return result;
}

}  // namespace kvtier::engine
