#include "daemon/store/namespace_table.h"

#include <algorithm>

namespace kvtier::store {

NamespaceState* NamespaceTable::Find(NamespaceId id) {
  auto it = map_.find(id);
  return it == map_.end() ? nullptr : &it->second;
}

const NamespaceState* NamespaceTable::Find(NamespaceId id) const {
  auto it = map_.find(id);
  return it == map_.end() ? nullptr : &it->second;
}

void NamespaceTable::Register(NamespaceId id, absl::string_view record, uint64_t quota) {
  NamespaceState& ns = map_[id];
  ns.record = std::string(record);
  ns.quota = quota;
  ns.registered = true;
}

std::vector<std::pair<NamespaceId, std::pair<std::string, uint64_t>>> NamespaceTable::Registered()
    const {
  std::vector<std::pair<NamespaceId, std::pair<std::string, uint64_t>>> out;
  for (const auto& [id, ns] : map_) {
    if (ns.registered) out.push_back({id, {ns.record, ns.quota}});
  }
  std::sort(out.begin(), out.end());
  return out;
}

void NamespaceTable::Release(Entry* e) {
  NamespaceState* ns = Find(e->key.ns);
  if (ns == nullptr) return;
  ns->lru.Remove(e);
  ns->used -= e->slot_size;
}

void NamespaceTable::CountRead(NamespaceId id, bool hit, uint64_t now_ms) {
  NamespaceState* ns = Find(id);
  if (ns == nullptr) return;
  ++(hit ? ns->hits : ns->misses);
  if (hit) ns->last_access_ms = now_ms;
}

}  // namespace kvtier::store
