// Logged store events as KV events. A router keeps, per medium, the blocks it was told about; the
// log reports only the fastest tier that holds a block, so each block is announced in one medium
// at a time and a kMoved event moves it: BlockStored in the new medium goes first, so that a
// router never sees the block absent while it stays readable.
#include "daemon/kvevents/event_translation.h"

#include <cstddef>
#include <utility>

#include "daemon/store/store_events.h"

namespace kvtier::kvevents {
namespace {

KvEvent WithHashes(KvEventKind kind, const service::LoggedEvent& logged, index::Tier tier) {
  KvEvent e;
  e.kind = kind;
  e.block_hashes.reserve(logged.hashes.size());
  for (const index::BlockHash& h : logged.hashes) e.block_hashes.push_back(ReduceBlockHash(h));
  e.medium = std::string(MediumOfTier(tier));
  return e;
}

// The BlockStored events of `logged`'s blocks in `tier`'s medium (TranslateLoggedEvent says how
// its blocks are grouped).
void AppendStored(const service::LoggedEvent& logged, index::Tier tier, uint32_t block_size,
                  const service::TokenTable* tokens, std::vector<KvEvent>* out) {
  if (tokens == nullptr) {
    KvEvent e = WithHashes(KvEventKind::kBlockStored, logged, tier);
    e.block_size = block_size;
    out->push_back(std::move(e));
    return;
  }
  const uint32_t recorded = tokens->BlockSizeOf(logged.ns);
  const uint32_t untokened_size = recorded != 0 ? recorded : block_size;
  const std::string medium(MediumOfTier(tier));
  // The event being filled: a run of full blocks with tokens, or of blocks without; `open` is
  // false after a partial block (its event takes no more).
  bool open = false, run_has_tokens = false;
  std::vector<service::TokenTable::Found> found;
  std::vector<uint32_t> token_ids;
  tokens->GetMany(logged.ns, logged.hashes, &found, &token_ids);
  for (size_t i = 0; i < logged.hashes.size(); ++i) {
    const index::BlockHash& h = logged.hashes[i];
    const service::TokenTable::Found& t = found[i];
    const bool has_tokens = t.count != 0;
    const bool full = has_tokens && t.count == t.block_size;
    const uint32_t size = has_tokens ? t.block_size : untokened_size;
    const bool alone = has_tokens && !full;
    if (!open || alone || run_has_tokens != has_tokens || out->back().block_size != size) {
      KvEvent e;
      e.kind = KvEventKind::kBlockStored;
      e.medium = medium;
      e.block_size = size;
      // At most the remaining blocks and their tokens (usually all of them: one event).
      e.block_hashes.reserve(logged.hashes.size() - i);
      if (has_tokens) e.token_ids.reserve(token_ids.size() - t.first);
      out->push_back(std::move(e));
      run_has_tokens = has_tokens;
    }
    KvEvent& e = out->back();
    e.block_hashes.push_back(ReduceBlockHash(h));
    if (has_tokens) {
      const auto begin = token_ids.begin() + static_cast<ptrdiff_t>(t.first);
      e.token_ids.insert(e.token_ids.end(), begin, begin + t.count);
    }
    open = !has_tokens || full;
  }
}

}  // namespace

void TranslateLoggedEvent(const service::LoggedEvent& logged, uint32_t block_size,
                          std::vector<KvEvent>* out, const service::TokenTable* tokens) {
  // The cluster tier's blocks are the fleet's, not this node's (docs/KV_EVENTS.md).
  if (logged.shared_tier) return;
  switch (logged.kind) {
    case store::StoreEventKind::kStored:
      AppendStored(logged, logged.tier, block_size, tokens, out);
      return;
    case store::StoreEventKind::kRemoved:
      out->push_back(WithHashes(KvEventKind::kBlockRemoved, logged, logged.tier));
      return;
    case store::StoreEventKind::kMoved:
      AppendStored(logged, logged.to_tier, block_size, tokens, out);
      out->push_back(WithHashes(KvEventKind::kBlockRemoved, logged, logged.tier));
      return;
    case store::StoreEventKind::kCleared: {
      KvEvent e;
      e.kind = KvEventKind::kAllBlocksCleared;
      out->push_back(std::move(e));
      return;
    }
  }
}

TenantFilter::TenantFilter(std::vector<std::string> tenants, TenantOfNamespace tenant_of)
    : tenants_(tenants.begin(), tenants.end()), tenant_of_(std::move(tenant_of)) {}

bool TenantFilter::Publishes(index::NamespaceId ns) {
  if (tenants_.empty()) return true;
  auto it = known_.find(ns);
  if (it != known_.end()) return it->second;
  const std::optional<std::string> tenant = tenant_of_ ? tenant_of_(ns) : std::nullopt;
  if (!tenant.has_value()) return false;
  const bool publishes = tenants_.contains(*tenant);
  known_.emplace(ns, publishes);
  return publishes;
}

}  // namespace kvtier::kvevents
