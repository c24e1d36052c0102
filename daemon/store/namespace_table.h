// NamespaceTable: the namespaces the store knows, and their books: each one's registered record
// and quota, the slot bytes its blocks hold (what the quota limits), its visible blocks in LRU
// order (what a quota eviction, a clear and the admin walks follow), and its read counters.
// Evicting to make room is the store's policy (BlockStore::MakeNamespaceRoom); this class only
// keeps the accounts. A namespace, once seen, stays (with its counters) until the store closes.
// Not thread-safe: the store guards it with its mutex.
#ifndef KVTIER_DAEMON_STORE_NAMESPACE_TABLE_H_
#define KVTIER_DAEMON_STORE_NAMESPACE_TABLE_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "daemon/store/block_store_entry.h"

namespace kvtier::store {

struct NamespaceState {
  std::string record;
  uint64_t quota = 0;  // 0: none
  bool registered = false;
  uint64_t used = 0;            // slot bytes of its blocks (reserved ones included)
  NsLru lru;                    // its visible blocks, most recently used first
  uint64_t hits = 0;            // touching reads served (every tier)
  uint64_t misses = 0;          // touching reads of blocks it does not hold
  uint64_t last_access_ms = 0;  // last store or touching read; 0: never
};

class NamespaceTable {
 public:
  using Entry = BlockStore::Entry;

  // Its state; nullptr when the store has never seen it.
  NamespaceState* Find(NamespaceId id);
  const NamespaceState* Find(NamespaceId id) const;
  // Its state, created (unregistered, no quota, holding nothing) when new.
  NamespaceState& GetOrCreate(NamespaceId id) { return map_[id]; }
  // Sets its record and quota (PutNamespace, recovery); blocks and counters stay.
  void Register(NamespaceId id, absl::string_view record, uint64_t quota);
  // Every registered namespace, by id: (record, quota).
  std::vector<std::pair<NamespaceId, std::pair<std::string, uint64_t>>> Registered() const;

  // A block of `slot_bytes` reserved in namespace `id`: counted against its quota from now on.
  void Charge(NamespaceId id, uint64_t slot_bytes) { map_[id].used += slot_bytes; }
  // A block that became visible joins the front of its namespace's LRU list.
  void Link(Entry* e) { map_[e->key.ns].lru.PushFront(e); }
  // A touching read of a visible block: to the front of its namespace's list.
  void Touch(Entry* e) { map_[e->key.ns].lru.MoveToFront(e); }
  // A detached block leaves its namespace's list (when it was in it) and its bytes are uncharged.
  void Release(Entry* e);
  // The namespace was stored into or read at `now_ms`.
  void MarkAccessed(NamespaceId id, uint64_t now_ms) { map_[id].last_access_ms = now_ms; }
  // Counts a touching read of namespace `id` (one never seen is not created); a hit is an access.
  void CountRead(NamespaceId id, bool hit, uint64_t now_ms);

  // Whether `slot_bytes` more fit the namespace's quota (always, without a quota).
  static bool Fits(const NamespaceState& ns, uint64_t slot_bytes) {
    return ns.quota == 0 || ns.used + slot_bytes <= ns.quota;
  }

 private:
  absl::flat_hash_map<NamespaceId, NamespaceState> map_;
};

}  // namespace kvtier::store

#endif  // KVTIER_DAEMON_STORE_NAMESPACE_TABLE_H_
