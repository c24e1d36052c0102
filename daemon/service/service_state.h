// ServiceState: what the engine service (KvTierService) and the admin service
// (KvTierAdminService) share, owned by the daemon: the callers' authentication, the registered
// engines, the parked requests, the pins, and the workers with the drain switch (Dispatcher).
// Neither service reaches into the other. Thread-safe (each part is). Lock order: see
// docs/ARCHITECTURE.md, "Lock order"; the parts' own mutexes never nest across parts except
// ParkTable's over the registry's and the store's (leaves).
#ifndef KVTIER_DAEMON_SERVICE_SERVICE_STATE_H_
#define KVTIER_DAEMON_SERVICE_SERVICE_STATE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "daemon/service/auth.h"
#include "daemon/service/dispatcher.h"
#include "daemon/service/engine_registry.h"
#include "daemon/service/park_table.h"
#include "daemon/service/pin_table.h"
#include "daemon/service/service_options.h"
#include "daemon/store/block_store.h"
#include "grpcpp/server_context.h"

namespace kvtier::service {

class ServiceState {
 public:
  // `store` is borrowed and must outlive the state. REQUIRES: destroyed before the store (the
  // pins hold store blocks) and after the services that use it.
  ServiceState(store::BlockStore* store, const ServiceOptions& options);
  ServiceState(const ServiceState&) = delete;
  ServiceState& operator=(const ServiceState&) = delete;

  // The caller's tenant when authentication is on; "" when it is off. Unauthenticated otherwise.
  absl::StatusOr<std::string> Caller(grpc::CallbackServerContext* ctx) const;
  bool authentication() const { return auth_ != nullptr; }
  // Always true with authentication off.
  bool IsAdmin(const std::string& tenant) const {
    return auth_ == nullptr || auth_->IsAdmin(tenant);
  }

  EngineRegistry& registry() { return registry_; }
  const EngineRegistry& registry() const { return registry_; }
  ParkTable& parks() { return parks_; }
  const ParkTable& parks() const { return parks_; }
  PinTable& pins() { return pins_; }
  const PinTable& pins() const { return pins_; }
  Dispatcher& dispatcher() { return dispatcher_; }
  const Dispatcher& dispatcher() const { return dispatcher_; }

 private:
  const std::shared_ptr<const TokenAuth> auth_;
  // Before the dispatcher: queued work holds EngineRefs and uses the tables until the workers
  // are joined (the dispatcher is destroyed first).
  EngineRegistry registry_;
  ParkTable parks_;
  PinTable pins_;
  Dispatcher dispatcher_;
};

}  // namespace kvtier::service

#endif  // KVTIER_DAEMON_SERVICE_SERVICE_STATE_H_
