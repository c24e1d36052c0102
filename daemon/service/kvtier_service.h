// KvTierService: the engine-facing gRPC service (kvtier.v1.KvTier, callback API) over a
// BlockStore. Registration maps an engine's pools; RegisterEngine (after its checks), Offload,
// Onboard, Park, Resume and Release run on the workers (a FairScheduler: each engine is a flow,
// registrations are one, and Offload and Onboard batches are done in chunks of
// options.chunk_pages, one per turn) so that gRPC's threads never block on opening files,
// encoding, decoding or disk reads, and one engine's batch cannot hold the others. Lookup, Pin
// and the other metadata RPCs run on gRPC's threads: they never queue behind data movement. Engines
// hold leases; an engine whose lease expires is unregistered as Unregister does. This first version
// serves host pools (shared-memory files) through the CPU codec and GPU pools (CUDA IPC, flat
// layouts) through the fused kernels. Park/Resume/Release keep a paused request's pages; Pin/Unpin
// (and Lookup's pin_ttl) hold blocks for a lease; WatchEvents streams the EventLog.
#ifndef KVTIER_DAEMON_SERVICE_KVTIER_SERVICE_H_
#define KVTIER_DAEMON_SERVICE_KVTIER_SERVICE_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "codec/codec.h"
#include "daemon/dataplane/data_plane.h"
#include "daemon/dataplane/gpu_pages.h"
#include "daemon/dataplane/host_pool.h"
#include "daemon/service/auth.h"
#include "daemon/service/engine_registry.h"
#include "daemon/service/event_log.h"
#include "daemon/service/park_table.h"
#include "daemon/service/peer_credentials.h"
#include "daemon/service/pin_table.h"
#include "daemon/service/request_limits.h"
#include "daemon/service/rpc_metrics.h"
#include "daemon/service/service_options.h"
#include "daemon/service/service_state.h"
#include "daemon/store/block_store.h"
#include "kvtier/v1/namespace.pb.h"
#include "kvtier/v1/service.grpc.pb.h"

namespace kvtier::service {

// Its public methods are the contract's 14 RPCs (gRPC's override points) and 7 of its own; the
// state behind them is in ServiceState's classes, so the count is the contract's, not a concern's.
class KvTierService final : public v1::KvTier::CallbackService {
 public:
  // `state` (the engines, parked requests, pins and workers it shares with the admin service) is
  // borrowed and must outlive the service.
  KvTierService(store::BlockStore* store, ServiceOptions options, ServiceState* state);
  // Stops the lease thread, waits for Unregister's waits, then stops the shared workers
  // (Dispatcher::Stop: no work of this service runs after it is gone).
  ~KvTierService() override;

  bool draining() const { return state_->dispatcher().draining(); }
  uint64_t incarnation() const { return incarnation_; }
  const EventLog* events() const { return options_.events; }
  // The shared (cluster) tier; null when there is none.
  store::SharedTier* shared_tier() const { return options_.shared_tier; }
  size_t engine_count() const;
  // Data-plane totals since the daemon started (the counters of StatsResponse), for /metrics.
  struct Traffic {
    uint64_t hot_bytes_offloaded = 0, cold_bytes_offloaded = 0;
    uint64_t hot_bytes_onboarded = 0, cold_bytes_onboarded = 0;
    uint64_t dropped_offloads = 0;
    uint64_t parked_requests = 0;  // gauge
  };
  Traffic traffic() const;
  // Calls and latencies per RPC (fed by MakeRpcMetricsInterceptor, which kvtierd installs).
  RpcMetrics& rpc_metrics() { return rpc_metrics_; }
  const RpcMetrics& rpc_metrics() const { return rpc_metrics_; }

  grpc::ServerUnaryReactor* Hello(grpc::CallbackServerContext* ctx, const v1::HelloRequest* req,
                                  v1::HelloResponse* resp) override;
  grpc::ServerUnaryReactor* RegisterEngine(grpc::CallbackServerContext* ctx,
                                           const v1::RegisterEngineRequest* req,
                                           v1::RegisterEngineResponse* resp) override;
  grpc::ServerUnaryReactor* Unregister(grpc::CallbackServerContext* ctx,
                                       const v1::UnregisterRequest* req,
                                       v1::UnregisterResponse* resp) override;
  grpc::ServerUnaryReactor* KeepAlive(grpc::CallbackServerContext* ctx,
                                      const v1::KeepAliveRequest* req,
                                      v1::KeepAliveResponse* resp) override;
  grpc::ServerUnaryReactor* Lookup(grpc::CallbackServerContext* ctx, const v1::LookupRequest* req,
                                   v1::LookupResponse* resp) override;
  grpc::ServerUnaryReactor* Offload(grpc::CallbackServerContext* ctx, const v1::OffloadRequest* req,
                                    v1::OffloadResponse* resp) override;
  grpc::ServerUnaryReactor* Onboard(grpc::CallbackServerContext* ctx, const v1::OnboardRequest* req,
                                    v1::OnboardResponse* resp) override;
  grpc::ServerUnaryReactor* Stats(grpc::CallbackServerContext* ctx, const v1::StatsRequest* req,
                                  v1::StatsResponse* resp) override;
  grpc::ServerUnaryReactor* Park(grpc::CallbackServerContext* ctx, const v1::ParkRequest* req,
                                 v1::ParkResponse* resp) override;
  grpc::ServerUnaryReactor* Resume(grpc::CallbackServerContext* ctx, const v1::ResumeRequest* req,
                                   v1::ResumeResponse* resp) override;
  grpc::ServerUnaryReactor* Pin(grpc::CallbackServerContext* ctx, const v1::PinRequest* req,
                                v1::PinResponse* resp) override;
  grpc::ServerUnaryReactor* Unpin(grpc::CallbackServerContext* ctx, const v1::UnpinRequest* req,
                                  v1::UnpinResponse* resp) override;
  grpc::ServerUnaryReactor* Release(grpc::CallbackServerContext* ctx, const v1::ReleaseRequest* req,
                                    v1::ReleaseResponse* resp) override;
  // watch_events.cc. A stream per subscriber, ended with UNAVAILABLE when the log closes.
  grpc::ServerWriteReactor<v1::WatchEventsResponse>* WatchEvents(
      grpc::CallbackServerContext* ctx, const v1::WatchEventsRequest* req) override;

 private:
  // The caller's tenant when authentication is on; "" when it is off (ServiceState::Caller).
  absl::StatusOr<std::string> Caller(grpc::CallbackServerContext* ctx) const {
    return state_->Caller(ctx);
  }
  bool IsAdmin(const std::string& tenant) const { return state_->IsAdmin(tenant); }
  // Enters the engine `engine_id` for the caller of `ctx` (EngineRegistry::EnterChecked):
  // Unauthenticated without a valid token (authentication on), NotFound for an unknown engine,
  // PermissionDenied for another tenant's engine.
  absl::StatusOr<EngineRef> EnterFor(grpc::CallbackServerContext* ctx,
                                     const std::string& engine_id);
  // The prologue of every handler that works on one engine, in three forms. Each enters the
  // caller's engine (EnterFor), finishing the call with EnterFor's status when that fails, and
  // leaves it when the work is done:
  // on gRPC's thread, finishing the call with `work`'s status;
  grpc::ServerUnaryReactor* WithEngine(grpc::CallbackServerContext* ctx,
                                       const std::string& engine_id,
                                       absl::FunctionRef<absl::Status(const Engine&)> work);
  // on a worker, in the engine's flow (Dispatcher::RunOnWorker);
  grpc::ServerUnaryReactor* OnEngineWorker(grpc::CallbackServerContext* ctx,
                                           const std::string& engine_id,
                                           std::function<absl::Status(const Engine&)> work);
  // on a worker, once per turn of the engine's flow (Dispatcher::RunTurnsOnWorker).
  grpc::ServerUnaryReactor* OnEngineTurns(
      grpc::CallbackServerContext* ctx, const std::string& engine_id,
      std::function<std::optional<absl::Status>(const Engine&)> turn);
  // Offload's first turn: InvalidArgument naming the item when one has more token ids than the
  // engine's tokens_per_page; else records the items' tokens and the block size in
  // options_.tokens (when set), before any block is stored and its event logged.
  absl::Status RecordOffloadTokens(const Engine& engine, const v1::OffloadRequest& req) const;
  // Onboard's first turn with a shared tier: fetches the batch's blocks the node lacks from it
  // into the store (SharedTier::Fetch), so that the data plane finds them in the host tier.
  void FetchFromSharedTier(const Engine& engine, const dataplane::OnboardBatch& batch,
                           absl::Time deadline);
  // RegisterEngine's work after the checks on gRPC's thread (the caller authenticated as
  // `caller`, "" without authentication; `peer` gRPC's address of the call): the layout and
  // codec, the pools opened and mapped, the namespace record written, the engine added. On a
  // worker: it opens files and CUDA IPC handles and writes the index.
  absl::Status DoRegister(const v1::RegisterEngineRequest& request, const std::string& caller,
                          const std::string& peer, v1::RegisterEngineResponse* resp);
  // Removes the engine, waits until no request works on its pools, releases its parked requests
  // and its pins (returns how many of each).
  // With only_if_expired, an engine whose lease was renewed meanwhile stays.
  std::pair<uint32_t, uint32_t> Remove(const std::string& engine_id, const char* why,
                                       bool only_if_expired = false) ABSL_LOCKS_EXCLUDED(mu_);
  // Removes the engines whose lease expired, then expired parked requests and pins, every
  // lease_check_interval until the service stops.
  void LeaseLoop() ABSL_LOCKS_EXCLUDED(mu_);

  // The end (exclusive item index) of the chunk that starts at item `next`: options.chunk_pages
  // items on, at least one.
  int ChunkEnd(int next) const {
    return next + static_cast<int>(std::clamp<uint32_t>(options_.chunk_pages, 1, 1u << 20));
  }

  store::BlockStore* store_;
  ServiceOptions options_;
  uint64_t incarnation_;
  absl::Time started_;
  // Data-plane totals for Stats, and the data planes (an engine's Engine::plane is one).
  dataplane::DataPlaneTotals totals_;
  std::unique_ptr<dataplane::DataPlane> host_plane_, gpu_plane_;
  RpcMetrics rpc_metrics_;
  std::atomic<uint64_t> next_engine_{1};
  ServiceState* const state_;

  // Lock order: mu_ is taken alone (never with the tables', the registry's or the dispatcher's
  // locks held, never across store I/O); it guards Unregister's waiters and the stop flag.
  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;

  // Unregister calls waiting for an engine's work (never on a worker: the work may be queued
  // behind them); each with a flag set when it is done, so finished ones are joined.
  std::vector<std::pair<std::thread, std::shared_ptr<std::atomic<bool>>>> waiters_
      ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<dev_t, ino_t>> forbidden_;  // of options_.forbidden_pool_files
  std::thread lease_thread_;
};

// The namespace id and hash root the server derives for a namespace tuple (tenant, model,
// partition, layout fingerprint, codec), from a tagged encoding of it: the id is the first 8 bytes
// of HMAC-SHA256 keyed with `id_key` (the daemon's key; little-endian, at least 2^32), the hash
// root SHA-256 of a second tag, `legacy_id` (the first 4 bytes of a plain SHA-256 of the tuple:
// the id of the first version, kept for the root so that engines' chains stay valid) and
// `root_secret` (the daemon's key and the tenant with authentication on, else empty).
struct DerivedNamespace {
  uint64_t id = 0;
  uint64_t legacy_id = 0;
  std::string hash_root;  // 32 bytes
};
DerivedNamespace DeriveNamespace(const std::string& tenant, const std::string& model,
                                 const std::string& partition, uint64_t layout_fingerprint,
                                 const codec::CodecSpec& codec, const std::string& id_key,
                                 const std::string& root_secret);
// The same from a stored namespace record; InvalidArgument when its codec does not convert.
absl::StatusOr<DerivedNamespace> DeriveNamespace(const v1::Namespace& ns, const std::string& key,
                                                 bool authentication);
// The hash root of the namespace whose legacy id is `legacy_id` (DeriveNamespace's second step).
std::string NamespaceHashRoot(uint64_t legacy_id, const std::string& secret);
// The RADOS namespace of a tenant's blocks in the cluster tier (docs/CLUSTER.md): "t-" and 32
// hex digits of an HMAC of the tenant under the fleet's key, so that names neither reveal the
// tenant nor can be computed without the key.
std::string ClusterNamespaceOf(const std::string& tenant, const std::string& key);
// The fingerprint of a fleet's key that the cluster tier records in its pool: 16 hex digits,
// which identify the key without revealing it.
std::string KeyFingerprint(const std::string& key);

}  // namespace kvtier::service

#endif  // KVTIER_DAEMON_SERVICE_KVTIER_SERVICE_H_
