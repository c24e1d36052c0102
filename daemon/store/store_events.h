// Store events: what a BlockStore reports to an observer (kvtierd's event log, which feeds the
// WatchEvents streams) as blocks become visible, leave the cache, or change the fastest tier that
// holds them. See docs/ARCHITECTURE.md, "Events".
#ifndef KVTIER_DAEMON_STORE_STORE_EVENTS_H_
#define KVTIER_DAEMON_STORE_STORE_EVENTS_H_

#include <cstdint>

#include "absl/strings/string_view.h"
#include "daemon/index/block_record.h"

namespace kvtier::store {

enum class StoreEventKind : uint8_t {
  kStored = 0,   // a block became visible (tier)
  kRemoved = 1,  // a block left the cache (tier: the fastest tier that held it)
  kMoved = 2,    // the fastest tier holding a block changed (tier -> to_tier)
  kCleared = 3,  // every block of a namespace was removed (count)
};

enum class StoredBy : uint8_t {
  kPut = 0,       // Put, Commit or PutHot
  kRecovery = 1,  // found in the index when the store opened
};

enum class RemovedBy : uint8_t {
  kSilent = 0,   // not reported (a block that never became visible, or a namespace clear)
  kEvicted = 1,  // capacity, watermark or namespace quota
  kRemoved = 2,  // Remove() (admin evict, released parked pages)
  kCorrupt = 3,  // failed verification on read or verify
};

// One event. Views point into the store's memory and live only during the call.
struct StoreEvent {
  StoreEventKind kind = StoreEventKind::kStored;
  index::NamespaceId ns = 0;
  index::BlockHash hash{};  // not for kCleared
  index::Tier tier = index::Tier::kHost;
  index::Tier to_tier = index::Tier::kHost;    // kMoved
  StoredBy stored_by = StoredBy::kPut;         // kStored
  RemovedBy removed_by = RemovedBy::kEvicted;  // kRemoved
  bool durable = false;                        // kStored: stored with PutOptions::durable
  uint64_t block_bytes = 0;                    // kStored: cold-block size
  absl::string_view origin;                    // kStored: PutOptions::origin
  uint64_t count = 0;                          // kCleared: blocks removed
  // The event is the fleet's shared tier's (store::SharedTier: a block stored in or removed from
  // the cluster by this node), not the store's; `tier` is then unused.
  bool shared_tier = false;
};

// Receives a store's events (and the shared tier's, from its own threads). OnEvent is called
// with the store's lock held, in the order the changes happened, so it must be quick and must not
// call back into the store. Barrier is
// called with the same lock held by BlockStore::Snapshot: every event reported before it is
// covered by the snapshot and none after; it returns the position of the last event reported.
class StoreEventSink {
 public:
  virtual ~StoreEventSink() = default;
  virtual void OnEvent(const StoreEvent& event) = 0;
  virtual uint64_t Barrier() = 0;
};

}  // namespace kvtier::store

#endif  // KVTIER_DAEMON_STORE_STORE_EVENTS_H_
