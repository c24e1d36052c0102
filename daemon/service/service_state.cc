// ServiceState: the parts the engine and admin services share.
#include "daemon/service/service_state.h"

namespace kvtier::service {

ServiceState::ServiceState(store::BlockStore* store, const ServiceOptions& options)
    : auth_(options.auth),
      registry_({options.max_engines, options.max_engines_per_tenant}),
      parks_(store, {options.max_parked_requests, options.max_parked_requests_per_tenant,
                     options.default_park_ttl, options.max_park_ttl}),
      pins_(store, {options.default_pin_ttl, options.max_pin_ttl}),
      dispatcher_(options.worker_threads, options.default_deadline) {}

absl::StatusOr<std::string> ServiceState::Caller(grpc::CallbackServerContext* ctx) const {
  if (auth_ == nullptr) return std::string();
  return auth_->Authenticate(*ctx);
}

}  // namespace kvtier::service
