// Prefix routing: the hashes the router is asked about are the ones the cold-page method looks
// up at request start (full pages, leaving the prompt's last token to compute), so the router's
// matched prefix is what the node's Lookup will find if nothing is evicted in between.
#include "tools/engine/routing.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/annotate.h"
#include "tools/engine/kv_pool.h"

namespace kvtier::engine {
namespace {

uint64_t BigEndian64(std::string_view bytes) {
  uint64_t v = 0;
  for (size_t i = 0; i < 8; ++i)
    v = (v << 8) | static_cast<uint8_t>(i < bytes.size() ? bytes[i] : 0);
  return v;
}

}  // namespace

uint64_t KvEventBlockHash(std::string_view key) {
  const bool short_key =
      key.size() <= 8 || std::all_of(key.begin() + 8, key.end(), [](char c) { return c == 0; });
  return short_key ? BigEndian64(key.substr(0, std::min<size_t>(key.size(), 8)))
                   : BigEndian64(key.substr(key.size() - 8));
}

absl::StatusOr<std::string> NamespaceHashRoot(Client& client, const CompressionConfig& cold_page,
                                              const std::string& model, const PageLayout& layout,
                                              const std::string& pool_dir) {
  absl::StatusOr<std::unique_ptr<KvPool>> pool = KvPool::Create(layout, 1, -1, pool_dir);
  if (!pool.ok()) return pool.status();
  auto option = [&cold_page](const char* key) {
    auto it = cold_page.options.find(key);
    return it == cold_page.options.end() ? std::string() : it->second;
  };
  EngineOptions options;
  options.engine_name = "kvtier-example-engine (routing: hash root)";
  options.tenant = option("tenant");
  options.partition = option("partition");
  options.model = model;
  options.layout = layout;
  // The cold-page method's codec name (its CodecOf).
  options.codec = cold_page.quant == "raw"                 ? "raw"
                  : cold_page.rope_precision == "lossless" ? cold_page.quant + "+rope"
                                                           : cold_page.quant;
  options.pools = {(*pool)->Registration()};
  absl::StatusOr<Engine> engine = client.RegisterEngine(options);
  if (!engine.ok()) return Annotate(engine.status(), "prefix routing: RegisterEngine");
  if (absl::Status st = client.Unregister(engine->engine_id); !st.ok()) {
    return Annotate(st, "prefix routing: Unregister");
  }
  return engine->hash_root;
}

absl::StatusOr<std::unique_ptr<PrefixRouter>> PrefixRouter::Create(const std::string& command,
                                                                   BlockHasher hasher,
                                                                   size_t nodes) {
  absl::StatusOr<std::unique_ptr<RouterProcess>> process = RouterProcess::Start(command);
  if (!process.ok()) return process.status();
  return std::unique_ptr<PrefixRouter>(
      new PrefixRouter(*std::move(process), std::move(hasher), nodes));
}

absl::StatusOr<RouteAnswer> PrefixRouter::Choose(std::span<const uint32_t> tokens) {
  const size_t per_page = hasher_.tokens_per_page();
  const size_t pages = tokens.empty() ? 0 : (tokens.size() - 1) / per_page;
  absl::StatusOr<std::vector<std::string>> keys = hasher_.Hash(tokens.first(pages * per_page));
  if (!keys.ok()) return keys.status();
  std::vector<uint64_t> hashes;
  hashes.reserve(keys->size());
  for (const std::string& k : *keys) hashes.push_back(KvEventBlockHash(k));
  return process_->Route(hashes, nodes_);
}

}  // namespace kvtier::engine
