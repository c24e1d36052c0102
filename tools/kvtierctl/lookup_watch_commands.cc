// kvtierctl lookup and watch: what the cache holds for a prefix, and its events as they happen.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/digest.h"
#include "kvtier/block_hasher.h"
#include "tools/kvtierctl/kvtierctl.h"

namespace kvtier::ctl {
namespace {

constexpr int kMaxLookupHashes = 4096;  // LookupRequest.block_hashes

constexpr uint64_t kMaxInputFileBytes = uint64_t{64} << 20;

// Token ids separated by whitespace or commas, optionally inside one JSON array.
bool ParseTokens(const std::string& path, const std::string& text, std::vector<uint32_t>* out) {
  std::string body = text;
  std::replace_if(
      body.begin(), body.end(), [](char c) { return c == '[' || c == ']' || c == ','; }, ' ');
  for (absl::string_view word :
       absl::StrSplit(body, absl::ByAnyChar(" \t\r\n"), absl::SkipEmpty())) {
    uint32_t token = 0;
    if (!absl::SimpleAtoi(word, &token)) {
      std::cerr << "kvtierctl: " << path << ": '" << word
                << "' is not a token id (decimal, 0 to 4294967295)\n";
      return false;
    }
    out->push_back(token);
  }
  return true;
}

}  // namespace

int RunLookup(const Invocation& inv) {
  const std::optional<std::string> ns_hex = inv.Get("namespace");
  if (!ns_hex.has_value()) return UsageError(inv, "lookup needs --namespace=HEX");
  kvtier::v1::NamespaceSelector selector;
  if (int rc = ParseNamespaceSelector(inv, true, &selector); rc != kExitOk) return rc;
  const int sources = static_cast<int>(!inv.positional.empty()) +
                      static_cast<int>(inv.Has("hash-file")) + static_cast<int>(inv.Has("tokens"));
  if (sources != 1) {
    return UsageError(inv, "lookup needs one of: hashes as arguments, --hash-file or --tokens");
  }
  if (inv.Has("tokens") != inv.Has("page-tokens")) {
    return UsageError(inv, "--tokens and --page-tokens go together");
  }
  uint64_t page_tokens = 0;
  if (int rc = ParseCount(inv, "page-tokens", &page_tokens); rc != kExitOk) return rc;
  std::vector<std::string> hashes;
  if (!inv.positional.empty()) {
    if (int rc = ParseHashes(inv, inv.positional, &hashes); rc != kExitOk) return rc;
  } else if (auto file = inv.Get("hash-file")) {
    std::string text;
    if (!ReadInputFile("--hash-file", *file, kMaxInputFileBytes, &text)) return kExitFailed;
    std::vector<std::string> lines =
        absl::StrSplit(text, absl::ByAnyChar(" \t\r\n"), absl::SkipEmpty());
    if (int rc = ParseHashes(inv, lines, &hashes); rc != kExitOk) return rc;
  }
  int rc = kExitOk;
  std::unique_ptr<Connection> conn = Connection::Open(inv, 5, &rc);
  if (conn == nullptr) return rc;
  std::vector<uint32_t> tokens;
  if (auto file = inv.Get("tokens")) {
    std::string text;
    if (!ReadInputFile("--tokens", *file, kMaxInputFileBytes, &text) ||
        !ParseTokens(*file, text, &tokens)) {
      return kExitFailed;
    }
    // The namespace's hash root, so that the chain is the one its engines compute.
    kvtier::v1::StatsRequest sreq;
    sreq.set_include_namespaces(true);
    *sreq.mutable_namespaces() = selector;
    kvtier::v1::StatsResponse stats;
    auto ctx = conn->Context();
    grpc::Status st = conn->stub().Stats(ctx.get(), sreq, &stats);
    if (!st.ok()) return conn->Fail("Stats", st);
    if (stats.namespaces().empty()) {
      std::cerr << "kvtierctl: namespace " << *ns_hex << " is unknown\n";
      return kExitFailed;
    }
    absl::StatusOr<BlockHasher> hasher = BlockHasher::Create(
        stats.namespaces(0).hash_root(), static_cast<uint32_t>(std::min<uint64_t>(
                                             page_tokens, std::numeric_limits<uint32_t>::max())));
    absl::StatusOr<std::vector<std::string>> chain =
        hasher.ok() ? hasher->Hash(tokens)
                    : absl::StatusOr<std::vector<std::string>>(hasher.status());
    if (!chain.ok()) {
      std::cerr << "kvtierctl: cannot hash the tokens: " << chain.status().message() << "\n";
      return kExitFailed;
    }
    hashes = std::move(*chain);
  }
  // Ask in chunks of the request limit; the prefix ends at the first miss.
  std::vector<kvtier::v1::Tier> tiers;
  for (size_t begin = 0; begin < hashes.size(); begin += kMaxLookupHashes) {
    const size_t end = std::min(hashes.size(), begin + kMaxLookupHashes);
    kvtier::v1::LookupRequest req;
    req.set_namespace_id(selector.namespace_id());
    for (size_t i = begin; i < end; ++i) req.add_block_hashes(hashes[i]);
    kvtier::v1::LookupResponse resp;
    auto ctx = conn->Context();
    grpc::Status st = conn->stub().Lookup(ctx.get(), req, &resp);
    if (!st.ok()) return conn->Fail("Lookup", st);
    for (int t : resp.tiers()) tiers.push_back(static_cast<kvtier::v1::Tier>(t));
    if (resp.hit_pages() < end - begin) break;
  }
  if (inv.json()) {
    Json json = Json::object();
    json["namespace_id"] = NamespaceHex(selector.namespace_id());
    json["pages"] = hashes.size();
    json["hit_pages"] = tiers.size();
    if (page_tokens != 0) {
      json["tokens"] = tokens.size();
      json["hit_tokens"] = tiers.size() * page_tokens;
    }
    Json list = Json::array();
    for (size_t i = 0; i < hashes.size(); ++i) {
      list.push_back({{"hash", LowerHex(hashes[i])},
                      {"tier", i < tiers.size() ? kvtier::v1::Tier_Name(tiers[i]) : "MISS"}});
    }
    json["blocks"] = std::move(list);
    PrintJson(json);
    return kExitOk;
  }
  uint64_t per_tier[4] = {};
  for (kvtier::v1::Tier t : tiers) ++per_tier[std::clamp(static_cast<int>(t), 0, 3)];
  std::printf("%zu of %zu pages cached", tiers.size(), hashes.size());
  if (page_tokens != 0) {
    std::printf(" (a prefix of %llu of %zu tokens)",
                static_cast<unsigned long long>(tiers.size() * page_tokens), tokens.size());
  }
  std::printf(": gpu %llu, host %llu, disk %llu\n", static_cast<unsigned long long>(per_tier[1]),
              static_cast<unsigned long long>(per_tier[2]),
              static_cast<unsigned long long>(per_tier[3]));
  Table table({"page", "block hash", "tier"});
  for (size_t i = 0; i < hashes.size() && i <= tiers.size(); ++i) {
    table.Add(
        {absl::StrCat(i), LowerHex(hashes[i]), i < tiers.size() ? TierName(tiers[i]) : "miss"});
  }
  table.Print("  ");
  return kExitOk;
}

namespace {

std::string DescribeEvent(const kvtier::v1::Event& e) {
  const std::string when = e.has_time() ? ToJson(e.time()).get<std::string>() : "-";
  std::string what;
  switch (e.kind_case()) {
    case kvtier::v1::Event::kBlockStored: {
      const auto& k = e.block_stored();
      what = absl::StrFormat("stored %d blocks in %s (%s%s%s)", k.block_hashes_size(),
                             TierName(k.tier()), kvtier::v1::StoreCause_Name(k.cause()),
                             k.engine_id().empty() ? "" : ", engine " + k.engine_id(),
                             k.durable() ? ", durable" : "");
      break;
    }
    case kvtier::v1::Event::kBlockRemoved: {
      const auto& k = e.block_removed();
      what = absl::StrFormat("removed %d blocks from %s (%s)", k.block_hashes_size(),
                             TierName(k.tier()), kvtier::v1::RemoveCause_Name(k.cause()));
      break;
    }
    case kvtier::v1::Event::kBlockMoved: {
      const auto& k = e.block_moved();
      what = absl::StrFormat("moved %d blocks %s -> %s", k.block_hashes_size(),
                             TierName(k.from_tier()), TierName(k.to_tier()));
      break;
    }
    case kvtier::v1::Event::kNamespaceCleared: {
      const auto& k = e.namespace_cleared();
      what = absl::StrFormat(
          "namespace cleared (%s): %d blocks removed",
          k.tier() == kvtier::v1::TIER_UNSPECIFIED ? "every tier" : TierName(k.tier()),
          k.removed_blocks());
      break;
    }
    case kvtier::v1::Event::kEventsLost: {
      const auto& k = e.events_lost();
      what = absl::StrFormat("EVENTS LOST %d..%d (%s): resync with --from=snapshot",
                             k.first_sequence(), k.last_sequence(),
                             kvtier::v1::LossReason_Name(k.reason()));
      break;
    }
    case kvtier::v1::Event::kSnapshotComplete:
      what = absl::StrFormat("snapshot complete: %d blocks", e.snapshot_complete().blocks());
      break;
    default:
      what = "unknown event";
  }
  return absl::StrFormat("%s seq %d ns %s %s", when, e.sequence(), NamespaceHex(e.namespace_id()),
                         what);
}

}  // namespace

int RunWatch(const Invocation& inv) {
  const std::string format = inv.Get("format").value_or("kvtier");
  if (format == "vllm") return RunWatchVllm(inv);
  if (format != "kvtier")
    return UsageError(inv, "--format is kvtier or vllm, not '" + format + "'");
  for (const char* flag : {"endpoint", "config", "topic"}) {
    if (inv.Has(flag)) return UsageError(inv, std::string("--") + flag + " needs --format=vllm");
  }
  kvtier::v1::WatchEventsRequest req;
  if (int rc = ParseNamespaceSelector(inv, false, req.mutable_namespaces()); rc != kExitOk) {
    return rc;
  }
  const std::string from = inv.Get("from").value_or("now");
  if (from == "now") {
    req.set_start(kvtier::v1::WATCH_START_NOW);
  } else if (from == "snapshot") {
    req.set_start(kvtier::v1::WATCH_START_SNAPSHOT);
  } else {
    uint64_t after = 0;
    if (!absl::SimpleAtoi(from, &after)) {
      return UsageError(inv, "--from is now, snapshot or an event sequence, not '" + from + "'");
    }
    req.set_start(kvtier::v1::WATCH_START_AFTER_SEQUENCE);
    req.set_after_sequence(after);
  }
  uint64_t count = 0;
  if (int rc = ParseCount(inv, "count", &count); rc != kExitOk) return rc;
  double duration = 0;
  if (auto text = inv.Get("duration")) {
    if (!absl::SimpleAtod(*text, &duration) || !(duration > 0)) {
      return UsageError(inv, "--duration needs a positive number of seconds, not '" + *text + "'");
    }
  }
  // Ctrl-C or SIGTERM ends the stream cleanly: a thread waits for them and cancels the call. They
  // are blocked before gRPC starts its threads, which inherit the mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  int rc = kExitOk;
  std::unique_ptr<Connection> conn = Connection::Open(inv, 5, &rc);
  if (conn == nullptr) return rc;
  auto ctx = conn->Context();
  // The stream has no deadline of its own: --duration, or none.
  ctx->set_deadline(duration > 0
                        ? std::chrono::system_clock::now() +
                              std::chrono::milliseconds(static_cast<int64_t>(duration * 1000))
                        : std::chrono::system_clock::time_point::max());
  std::atomic<bool> done{false}, interrupted{false};
  grpc::ClientContext* raw_ctx = ctx.get();
  std::thread waiter([&] {
    const timespec tick = {0, 100 * 1000 * 1000};
    while (!done.load()) {
      if (sigtimedwait(&stop_signals, nullptr, &tick) > 0) {
        interrupted = true;
        raw_ctx->TryCancel();
        return;
      }
    }
  });
  std::unique_ptr<grpc::ClientReader<kvtier::v1::WatchEventsResponse>> reader =
      conn->stub().WatchEvents(ctx.get(), req);
  kvtier::v1::WatchEventsResponse batch;
  uint64_t seen = 0;
  bool enough = false;
  while (!enough && reader->Read(&batch)) {
    for (const kvtier::v1::Event& e : batch.events()) {
      if (inv.json()) {
        std::cout << ToJson(e).dump() << "\n";
      } else {
        std::cout << DescribeEvent(e) << "\n";
      }
      if (count != 0 && ++seen >= count) {
        enough = true;
        break;
      }
    }
    std::cout.flush();
  }
  if (enough) ctx->TryCancel();
  grpc::Status st = reader->Finish();
  done = true;
  waiter.join();
  if (enough || interrupted) return kExitOk;
  if (st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED && duration > 0) return kExitOk;
  if (st.ok()) return kExitOk;
  return conn->Fail("WatchEvents", st);
}

}  // namespace kvtier::ctl
