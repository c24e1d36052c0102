// KvTierAdminService: the operator service (kvtier.v1.KvTierAdmin) over the store and the state
// it shares with the engine service (ServiceState: authentication, engines, parked requests,
// workers): Evict (by count, bytes or hash, from a tier or the cache), Clear (namespaces by id, by
// tenant/model/partition, or all; one tier or every tier), Verify (a scrub of every stored block),
// Drain (stop taking writes, finish in-flight work, optionally write the host tier to disk) and
// its cancel. Blocking work runs on the shared workers (Dispatcher).
#ifndef KVTIER_DAEMON_SERVICE_ADMIN_SERVICE_H_
#define KVTIER_DAEMON_SERVICE_ADMIN_SERVICE_H_

#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "daemon/service/service_state.h"
#include "daemon/store/block_store.h"
#include "kvtier/v1/service.grpc.pb.h"

namespace kvtier::service {

class KvTierAdminService final : public v1::KvTierAdmin::CallbackService {
 public:
  // Both borrowed; they must outlive the service.
  KvTierAdminService(store::BlockStore* store, ServiceState* state)
      : store_(store), state_(state) {}
  ~KvTierAdminService();  // joins the threads of Drain calls

  grpc::ServerUnaryReactor* Evict(grpc::CallbackServerContext* ctx, const v1::EvictRequest* req,
                                  v1::EvictResponse* resp) override;
  grpc::ServerUnaryReactor* Clear(grpc::CallbackServerContext* ctx, const v1::ClearRequest* req,
                                  v1::ClearResponse* resp) override;
  grpc::ServerUnaryReactor* Verify(grpc::CallbackServerContext* ctx, const v1::VerifyRequest* req,
                                   v1::VerifyResponse* resp) override;
  grpc::ServerUnaryReactor* Drain(grpc::CallbackServerContext* ctx, const v1::DrainRequest* req,
                                  v1::DrainResponse* resp) override;

 private:
  store::BlockStore* store_;
  ServiceState* state_;
  absl::Mutex mu_;
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvtier::service

#endif  // KVTIER_DAEMON_SERVICE_ADMIN_SERVICE_H_
