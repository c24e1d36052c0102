// Logged store events as KV events. A router keeps, per medium, the blocks it was told about; the
// log reports only the fastest tier that holds a block, so each block is announced in one medium
// at a time and a kMoved event moves it: BlockStored in the new medium goes first, so that a
// router never sees the block absent while it stays readable.
#include "daemon/kvevents/event_translation.h"

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

}  // namespace

void TranslateLoggedEvent(const service::LoggedEvent& logged, uint32_t block_size,
                          std::vector<KvEvent>* out) {
  // The cluster tier's blocks are the fleet's, not this node's (docs/KV_EVENTS.md).
  if (logged.shared_tier) return;
  switch (logged.kind) {
    case store::StoreEventKind::kStored: {
      KvEvent e = WithHashes(KvEventKind::kBlockStored, logged, logged.tier);
      e.block_size = block_size;
      out->push_back(std::move(e));
      return;
    }
    case store::StoreEventKind::kRemoved:
      out->push_back(WithHashes(KvEventKind::kBlockRemoved, logged, logged.tier));
      return;
    case store::StoreEventKind::kMoved: {
      KvEvent stored = WithHashes(KvEventKind::kBlockStored, logged, logged.to_tier);
      stored.block_size = block_size;
      out->push_back(std::move(stored));
      out->push_back(WithHashes(KvEventKind::kBlockRemoved, logged, logged.tier));
      return;
    }
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
