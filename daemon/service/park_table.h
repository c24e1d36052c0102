// ParkTable: the paused requests of engines (Park, Resume, Release). A request's pages go through
// its engine's data plane under hashes derived from (engine id, request id, position), stored
// silently, so that no prefix lookup meets them and no event reports them; the table keeps the
// request's record (hashes, num_tokens, user_data, expiry) in memory. A request belongs to the
// engine that parked it. Park is all or nothing; Resume decodes any range of the parked pages and
// releases them after the last. Proto-free: the service's handlers validate and translate.
// Thread-safe. Lock order: serial_ (held across the data plane and the store, on purpose: Park,
// Resume and Release change a record around store I/O) before mu_ (never held across store
// I/O), before the engine registry's and the store's (leaves).
#ifndef KVTIER_DAEMON_SERVICE_PARK_TABLE_H_
#define KVTIER_DAEMON_SERVICE_PARK_TABLE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "daemon/index/block_record.h"
#include "daemon/service/engine_registry.h"
#include "daemon/store/block_store.h"

namespace kvtier::service {

class ParkTable {
 public:
  struct Limits {
    uint32_t max_requests = 65536;
    uint32_t max_requests_per_tenant = 16384;
    absl::Duration default_ttl = absl::Minutes(10);  // also the renewal of a kept Resume
    absl::Duration max_ttl = absl::Hours(1);
  };
  // `store` is borrowed and must outlive the table.
  ParkTable(store::BlockStore* store, Limits limits) : store_(store), limits_(limits) {}
  ParkTable(const ParkTable&) = delete;
  ParkTable& operator=(const ParkTable&) = delete;

  struct ParkArgs {
    absl::string_view request_id;
    absl::Span<const uint32_t> page_indices;  // the engine's pages, in KV order
    uint64_t num_tokens = 0;
    absl::string_view user_data;
    bool append = false;                // add pages to a parked request
    std::optional<absl::Duration> ttl;  // clamped to [1 s, max_ttl]; default_ttl when unset
  };
  struct Parked {
    uint32_t pages = 0;  // the request's, after this park
    uint64_t cold_bytes = 0;
    absl::Time expires;
  };
  // Stores the pages through engine.plane. AlreadyExists (without append) or NotFound (append)
  // for the request's state, ResourceExhausted past the limits, and the failed page's status
  // (naming page_indices[i]; nothing is parked then).
  absl::StatusOr<Parked> Park(const Engine& engine, const ParkArgs& args)
      ABSL_LOCKS_EXCLUDED(serial_, mu_);

  struct ResumeArgs {
    absl::string_view request_id;
    uint32_t first_page = 0;                  // the first parked page to decode
    absl::Span<const uint32_t> page_indices;  // where the pages go
    bool keep_parked = false;                 // else a resume reaching the last page releases
  };
  struct Resumed {
    uint32_t resumed_pages = 0;
    uint32_t parked_pages = 0;
    uint64_t num_tokens = 0;
    std::string user_data;
    bool released = false;
  };
  // Decodes the pages through engine.plane. NotFound for a request not parked, InvalidArgument
  // for a range beyond it or a bad page, Unavailable for a transient failure, DataLoss for a
  // parked block evicted or damaged (the engine recomputes).
  absl::StatusOr<Resumed> Resume(const Engine& engine, const ResumeArgs& args)
      ABSL_LOCKS_EXCLUDED(serial_, mu_);
  // Releases the engine's requests `request_ids`: per id, the bytes freed, or nullopt when nothing
  // was parked under it.
  std::vector<std::optional<uint64_t>> Release(const std::string& engine_id,
                                               absl::Span<const std::string> request_ids)
      ABSL_LOCKS_EXCLUDED(serial_, mu_);

  // Release every request of the engine, every expired one, or every one of engines in
  // `namespaces` (admin Clear with include_parked); each returns how many.
  uint32_t ReleaseEngine(const std::string& engine_id) ABSL_LOCKS_EXCLUDED(mu_);
  uint32_t ReleaseExpired(absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);
  uint32_t ReleaseIn(absl::Span<const store::NamespaceId> namespaces) ABSL_LOCKS_EXCLUDED(mu_);

  // Parked requests: all of them, one tenant's, and per namespace and per engine (Stats).
  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);
  uint32_t CountOfTenant(const std::string& tenant) const ABSL_LOCKS_EXCLUDED(mu_);
  struct Counts {
    absl::flat_hash_map<store::NamespaceId, uint64_t> per_namespace;
    absl::flat_hash_map<std::string, uint64_t> per_engine;
  };
  Counts CountByNamespaceAndEngine() const ABSL_LOCKS_EXCLUDED(mu_);

  // The hash of a parked page: SHA-256 of (engine id, request id, position), tagged.
  static index::BlockHash Hash(absl::string_view engine_id, absl::string_view request_id,
                               uint64_t position);

 private:
  struct Record {
    std::string engine_id;
    std::string tenant;
    store::NamespaceId ns = 0;
    std::vector<index::BlockHash> hashes;  // in KV order
    uint64_t num_tokens = 0;
    std::string user_data;
    uint64_t block_bytes = 0;
    absl::Time expires;
  };
  using Key = std::pair<std::string, std::string>;  // (engine id, request id)
  using Map = absl::flat_hash_map<Key, Record>;

  // Removes the blocks of `hashes`; returns the bytes freed. Takes no lock of the table.
  uint64_t DropBlocks(store::NamespaceId ns, const std::vector<index::BlockHash>& hashes,
                      uint64_t block_bytes);
  // Releases the requests `match` selects (their blocks too); returns how many.
  uint32_t ReleaseWhere(absl::FunctionRef<bool(const Record&)> match) ABSL_LOCKS_EXCLUDED(mu_);
  // Takes a record out of records_ (and its tenant's count).
  Record Erase(Map::iterator it) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // ResourceExhausted when `tenant` may not park one more request.
  absl::Status CheckRoom(const std::string& tenant) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  store::BlockStore* const store_;
  const Limits limits_;
  // Serializes Park, Resume and Release (they change records_ around store I/O).
  absl::Mutex serial_ ABSL_ACQUIRED_BEFORE(mu_);
  mutable absl::Mutex mu_;
  Map records_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, uint32_t> per_tenant_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvtier::service

#endif  // KVTIER_DAEMON_SERVICE_PARK_TABLE_H_
