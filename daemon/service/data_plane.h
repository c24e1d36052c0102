// DataPlane: moves pages between an engine's registered pools and the store, in batches, with a
// result per item. Two implementations, chosen per engine at registration (Engine::plane):
// HostDataPlane (shared-memory pools through the CPU codec, data_plane.cc) and GpuDataPlane (CUDA
// IPC pools through the fused kernels, data_plane_gpu.cc). The service validates, authenticates
// and schedules; a data plane only moves pages. Thread-safe: one instance serves every engine of
// its kind, on any worker.
#ifndef KVTIER_DAEMON_SERVICE_DATA_PLANE_H_
#define KVTIER_DAEMON_SERVICE_DATA_PLANE_H_

#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>

#include "absl/container/flat_hash_set.h"
#include "daemon/service/request_limits.h"
#include "daemon/store/block_store.h"
#include "kvtier/v1/cache.pb.h"

namespace kvtier::service {

struct Engine;

// Data-plane totals since the daemon started (the counters of StatsResponse).
struct DataPlaneTotals {
  std::atomic<uint64_t> hot_bytes_offloaded{0}, cold_bytes_offloaded{0};
  std::atomic<uint64_t> hot_bytes_onboarded{0}, cold_bytes_onboarded{0};
  std::atomic<uint64_t> dropped_offloads{0};
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

  // Each handles the items of `req` in [progress->next, end) (all of them with a null `progress`
  // and kAllItems), appending their results and adding to the response's totals, and sets
  // progress->next to the first item left. After an Onboard's stop at a miss the rest are SKIPPED
  // at once. The response is complete when progress->next == items_size(). Blocks on encoding,
  // decoding and the store (a worker's work). `parked`: pages of Park, stored silently (no
  // events; they are not prefix-indexed). The GPU form does kernel passes of at most 256 items,
  // sealed on the host; a chunk (up to `end`) has at least one full pass.
  virtual void Offload(const Engine& engine, const v1::OffloadRequest& req,
                       v1::OffloadResponse* resp, bool parked, ItemProgress* progress, int end) = 0;
  virtual void Onboard(const Engine& engine, const v1::OnboardRequest& req,
                       v1::OnboardResponse* resp, ItemProgress* progress, int end) = 0;

 protected:
  // Both borrowed; they must outlive the data plane.
  DataPlane(store::BlockStore* store, DataPlaneTotals* totals) : store_(store), totals_(totals) {}

  // The store's options for the blocks of an offload of `engine`.
  static store::PutOptions PutOptionsFor(const Engine& engine, const v1::OffloadRequest& req,
                                         bool parked);
  // An offload item whose block is stored already (Reserve said AlreadyExists), for both paths:
  // ALREADY_STORED with the tier it is in; a durable offload makes that block durable (waiting
  // for it with wait_durable), and an item whose block went away meanwhile reports UNAVAILABLE.
  void OffloadStoredItem(const store::BlockKey& key, const store::PutOptions& put,
                         v1::ItemResult* result) const;

  store::BlockStore* const store_;
  DataPlaneTotals* const totals_;
};

// Shared-memory pools (Engine::pools) through the engine's CPU codec.
std::unique_ptr<DataPlane> MakeHostDataPlane(store::BlockStore* store, DataPlaneTotals* totals);
// A CUDA IPC pool (Engine::device_pool) through the engine's GpuBlockCodec.
std::unique_ptr<DataPlane> MakeGpuDataPlane(store::BlockStore* store, DataPlaneTotals* totals);

}  // namespace kvtier::service

#endif  // KVTIER_DAEMON_SERVICE_DATA_PLANE_H_
