// PinTable: the blocks engines hold in the cache for a while (Pin, Lookup with pin_ttl, Unpin):
// one store hold (BlockStore::Hold, a reader's pin without a read) per (engine, block), extended
// by pinning again, dropped by Unpin, at expiry (the service's lease thread) and with the engine.
// Proto-free: results are the data plane's ItemResult. Thread-safe. Lock order: mu_ is taken
// alone; it is never held while the store is called (holds are taken before it is locked and
// released after it is unlocked), so any lock but mu_ may be held when calling in.
#ifndef KVTIER_DAEMON_SERVICE_PIN_TABLE_H_
#define KVTIER_DAEMON_SERVICE_PIN_TABLE_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "daemon/dataplane/data_plane.h"
#include "daemon/index/block_record.h"
#include "daemon/service/engine_registry.h"
#include "daemon/store/block_store.h"

namespace kvtier::service {

class PinTable {
 public:
  struct Limits {
    absl::Duration default_ttl = absl::Seconds(30);
    absl::Duration max_ttl = absl::Minutes(10);
  };
  // `store` is borrowed and must outlive the table.
  PinTable(store::BlockStore* store, Limits limits) : store_(store), limits_(limits) {}
  PinTable(const PinTable&) = delete;
  PinTable& operator=(const PinTable&) = delete;

  // Pins `hashes` of the engine's namespace for `ttl` (default_ttl when not positive, at most
  // max_ttl), extending pins it holds already; appends one result per hash to `results` (kOk
  // with the tier, or kNotFound without a message). Returns when the pins expire.
  absl::Time Pin(const Engine& engine, absl::Span<const index::BlockHash> hashes,
                 absl::Duration ttl, std::vector<dataplane::ItemResult>* results)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Drops the engine's pin of `hash`; false when it held none.
  bool Unpin(const std::string& engine_id, const index::BlockHash& hash) ABSL_LOCKS_EXCLUDED(mu_);
  // Drop every pin of the engine, or every pin that expired before `now`; each returns how many.
  uint32_t DropEngine(const std::string& engine_id) ABSL_LOCKS_EXCLUDED(mu_);
  uint32_t DropExpired(absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);
  // Pins per engine id (Stats).
  absl::flat_hash_map<std::string, uint64_t> CountByEngine() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct HeldPin {
    store::PinnedBlock hold;
    absl::Time expires;
  };
  using Key = std::pair<std::string, index::BlockHash>;  // (engine id, block hash)
  using Map = absl::flat_hash_map<Key, HeldPin>;

  // Takes the pins `match` selects out of pins_; the caller destroys them after unlocking.
  template <typename Match>
  std::vector<HeldPin> TakeWhere(Match match) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  store::BlockStore* const store_;
  const Limits limits_;
  mutable absl::Mutex mu_;
  Map pins_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvtier::service

#endif  // KVTIER_DAEMON_SERVICE_PIN_TABLE_H_
