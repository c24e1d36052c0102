// PinTable: store holds per (engine, block) with an expiry.
#include "daemon/service/pin_table.h"

#include <algorithm>
#include <optional>
#include <utility>

namespace kvtier::service {

absl::Time PinTable::Pin(const Engine& engine, absl::Span<const index::BlockHash> hashes,
                         absl::Duration ttl, std::vector<dataplane::ItemResult>* results) {
  if (ttl <= absl::ZeroDuration()) ttl = limits_.default_ttl;
  ttl = std::min(ttl, limits_.max_ttl);
  const absl::Time expires = absl::Now() + ttl;
  for (const index::BlockHash& h : hashes) {
    dataplane::ItemResult& result = results->emplace_back();
    const Key key(engine.id, h);
    {
      absl::MutexLock lock(&mu_);
      auto it = pins_.find(key);
      if (it != pins_.end()) {  // pinned already: extend, do not stack
        it->second.expires = std::max(it->second.expires, expires);
        result.tier = it->second.hold.served_from();
        continue;
      }
    }
    absl::StatusOr<std::optional<store::PinnedBlock>> hold = store_->Hold({engine.ns, h});
    if (!hold.ok() || !hold->has_value()) {
      result.Set(hold.ok() ? absl::NotFoundError("") : hold.status());
      result.message.clear();
      continue;
    }
    result.tier = (*hold)->served_from();
    absl::MutexLock lock(&mu_);
    auto it = pins_.find(key);
    if (it != pins_.end()) {
      // Pinned by a concurrent call meanwhile: extend its pin. This call's hold is released
      // when `hold` goes, after the lock (never under mu_, which the store must not be called
      // under).
      it->second.expires = std::max(it->second.expires, expires);
      continue;
    }
    pins_.emplace(key, HeldPin{std::move(**hold), expires});
  }
  return expires;
}

template <typename Match>
std::vector<PinTable::HeldPin> PinTable::TakeWhere(Match match) {
  std::vector<HeldPin> taken;
  for (auto it = pins_.begin(); it != pins_.end();) {
    if (match(*it)) {
      taken.push_back(std::move(it->second));
      pins_.erase(it++);
    } else {
      ++it;
    }
  }
  return taken;
}

bool PinTable::Unpin(const std::string& engine_id, const index::BlockHash& hash) {
  std::optional<HeldPin> dropped;  // declared first: released after mu_ (the store's lock)
  absl::MutexLock lock(&mu_);
  auto it = pins_.find(Key(engine_id, hash));
  if (it == pins_.end()) return false;
  dropped.emplace(std::move(it->second));
  pins_.erase(it);
  return true;
}

uint32_t PinTable::DropEngine(const std::string& engine_id) {
  std::vector<HeldPin> dropped;  // released outside mu_
  {
    absl::MutexLock lock(&mu_);
    dropped = TakeWhere([&](const Map::value_type& pin) { return pin.first.first == engine_id; });
  }
  return static_cast<uint32_t>(dropped.size());
}

uint32_t PinTable::DropExpired(absl::Time now) {
  std::vector<HeldPin> dropped;  // released outside mu_
  {
    absl::MutexLock lock(&mu_);
    dropped = TakeWhere([&](const Map::value_type& pin) { return pin.second.expires < now; });
  }
  return static_cast<uint32_t>(dropped.size());
}

absl::flat_hash_map<std::string, uint64_t> PinTable::CountByEngine() const {
  absl::flat_hash_map<std::string, uint64_t> counts;
  absl::MutexLock lock(&mu_);
  for (const auto& [key, pin] : pins_) ++counts[key.first];
  return counts;
}

}  // namespace kvtier::service
