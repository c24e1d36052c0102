// DataPlane: moves pages between an engine's registered pools and the store, in batches, with a
// result per item. Two implementations, chosen per engine at registration (the service's
// Engine::plane): HostDataPlane (shared-memory pools through the CPU codec, data_plane.cc) and
// GpuDataPlane (CUDA IPC pools through the fused kernels, data_plane_gpu.cc). The service
// validates, authenticates, translates protos and schedules; a data plane only moves pages, and
// knows neither gRPC nor the contract's messages. Thread-safe: one instance serves every engine of
// its kind, on any worker.
#ifndef KVTIER_DAEMON_DATAPLANE_DATA_PLANE_H_
#define KVTIER_DAEMON_DATAPLANE_DATA_PLANE_H_

#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/dataplane/engine_pages.h"
#include "daemon/index/block_record.h"
#include "daemon/store/block_store.h"

namespace kvtier::dataplane {

// Data-plane totals since the daemon started (the counters of StatsResponse).
struct DataPlaneTotals {
  std::atomic<uint64_t> hot_bytes_offloaded{0}, cold_bytes_offloaded{0};
  std::atomic<uint64_t> hot_bytes_onboarded{0}, cold_bytes_onboarded{0};
  std::atomic<uint64_t> dropped_offloads{0};
};

// The outcome of one item, in the contract's terms (kvtier.v1.ItemCode, same order; the service's
// proto_convert.h converts), so that Park and Resume read results without protos.
enum class ItemCode : uint8_t {
  kOk,
  kAlreadyStored,
  kNotFound,
  kInvalidArgument,
  kResourceExhausted,
  kNotAdmitted,
  kDataLoss,
  kUnavailable,
  kSkipped,
  kAborted,
  kFailedPrecondition,
  kInternal,
};
// The closest item code of a store status.
ItemCode ItemCodeFor(const absl::Status& status);

struct ItemResult {
  ItemCode code = ItemCode::kOk;
  std::string message;              // at most 1024 bytes; empty for kOk and kAlreadyStored
  std::optional<index::Tier> tier;  // the tier written to, held in or read from
  // The code of `status` and, unless it is OK or AlreadyExists, its message (cut to 1024 bytes).
  // The tier is left as it is.
  void Set(const absl::Status& status);
};

// One page of a batch: the block's hash (a hash the request gave malformed fails its item with
// that status, in the item's turn) and the engine's page (slot) index.
struct PageItem {
  absl::StatusOr<index::BlockHash> hash;
  uint32_t page_index = 0;
};

struct OffloadBatch {
  std::vector<PageItem> items;  // distinct hashes (a repeated one fails its item)
  bool durable = false;         // write the blocks through to disk
  bool wait_durable = false;    // and finish only once they are (implies durable)
  bool parked = false;          // pages of Park: stored silently (no events, not prefix-indexed)
};
struct OffloadResult {
  std::vector<ItemResult> results;  // one per item handled so far, in item order
  uint32_t stored_pages = 0;
  uint64_t hot_bytes_read = 0, cold_bytes_written = 0;
};

struct OnboardBatch {
  std::vector<PageItem> items;       // distinct destination pages (a repeated one fails its item)
  bool continue_after_miss = false;  // else the items after the first failure are kSkipped
};
struct OnboardResult {
  std::vector<ItemResult> results;  // one per item handled so far, in item order
  uint32_t onboarded_pages = 0;     // the leading kOk items, once every item is handled
  uint64_t cold_bytes_read = 0, hot_bytes_written = 0;
};
// The number of leading kOk results (the usable prefix of an onboard), which with
// continue_after_miss is fewer than all that succeeded.
uint32_t LeadingOk(const std::vector<ItemResult>& results);

// The hashes of one request's items, so that an item repeating an earlier item's hash fails
// (cache.proto: the hashes of one Offload are distinct). Not thread-safe; one per request.
class DistinctHashes {
 public:
  // OK the first time `hash` is added; InvalidArgument naming the hash and the earlier item
  // ("items[0]") when an earlier item had it.
  absl::Status Add(const index::BlockHash& hash, int item);

 private:
  absl::flat_hash_map<index::BlockHash, int> first_;
};

// Where an Offload or Onboard stands between two turns: the first item not yet done and, for
// Onboard, the pages already written and whether it stopped at a miss (later items: SKIPPED).
struct ItemProgress {
  int next = 0;
  DistinctHashes distinct;  // Offload: the hashes of the items done
  absl::flat_hash_set<uint32_t> destinations;
  bool stopped = false;
};

class DataPlane {
 public:
  static constexpr int kAllItems = std::numeric_limits<int>::max();

  virtual ~DataPlane() = default;
  DataPlane(const DataPlane&) = delete;
  DataPlane& operator=(const DataPlane&) = delete;

  // Each handles the items of `batch` in [progress->next, end) (all of them with a null
  // `progress` and kAllItems), appending their results and adding to the result's totals, and
  // sets progress->next to the first item left. After an Onboard's stop at a miss the rest are
  // kSkipped at once. The result is complete when progress->next == items.size(). Blocks on
  // encoding, decoding and the store (a worker's work). The GPU form does kernel passes of at
  // most 256 items, sealed on the host; a chunk (up to `end`) has at least one full pass.
  virtual void Offload(const EnginePages& engine, const OffloadBatch& batch, OffloadResult* result,
                       ItemProgress* progress, int end) = 0;
  virtual void Onboard(const EnginePages& engine, const OnboardBatch& batch, OnboardResult* result,
                       ItemProgress* progress, int end) = 0;

 protected:
  // Both borrowed; they must outlive the data plane.
  DataPlane(store::BlockStore* store, DataPlaneTotals* totals) : store_(store), totals_(totals) {}

  // The store's options for the blocks of an offload of `engine`.
  static store::PutOptions PutOptionsFor(const EnginePages& engine, const OffloadBatch& batch);
  // An offload item whose block is stored already (Reserve said AlreadyExists), for both paths:
  // ALREADY_STORED with the tier it is in; a durable offload makes that block durable (waiting
  // for it with wait_durable), and an item whose block went away meanwhile reports UNAVAILABLE.
  void OffloadStoredItem(const store::BlockKey& key, const store::PutOptions& put,
                         ItemResult* result) const;

  store::BlockStore* const store_;
  DataPlaneTotals* const totals_;
};

// Shared-memory pools (EnginePages::pools) through the engine's CPU codec.
std::unique_ptr<DataPlane> MakeHostDataPlane(store::BlockStore* store, DataPlaneTotals* totals);
// A CUDA IPC pool (EnginePages::device_pool) through the engine's GpuBlockCodec.
std::unique_ptr<DataPlane> MakeGpuDataPlane(store::BlockStore* store, DataPlaneTotals* totals);

}  // namespace kvtier::dataplane

#endif  // KVTIER_DAEMON_DATAPLANE_DATA_PLANE_H_
