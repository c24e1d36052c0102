// Liveness asks what a restart would fix: the store's lock is not held forever (Stats()
// returns) and the gRPC server takes calls. The call is Hello (no side effect, no registration
// needed) through the server's in-process channel: no socket and no credentials, but the same
// server threads and service object that engines reach. A draining daemon, or one whose index
// cannot commit, is still alive: that is readiness, which a restart would not fix. Hello goes
// through the RPC metrics interceptor like any call, so
// kvtier_rpc_handled_total{method="Hello"} counts the probes too.
#include "daemon/kvtierd/probes.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/channel_arguments.h"

namespace kvtier::kvtierd {

std::vector<std::string> NotReadyReasons(const ReadinessInputs& in) {
  std::vector<std::string> reasons;
  if (in.draining) reasons.push_back("draining");
  if (!in.index_writable.ok()) {
    reasons.push_back(absl::StrCat("index not writable: ", in.index_writable.message()));
  } else if (!in.index.ok()) {
    reasons.push_back(absl::StrCat("index not writable: ", in.index.message()));
  }
  if (in.host_capacity_bytes == 0) reasons.push_back("no host tier (capacity 0 bytes)");
  return reasons;
}

DaemonProbes::DaemonProbes(store::BlockStore* store, service::KvTierService* service,
                           grpc::Server* server, Options options)
    : store_(store),
      service_(service),
      options_(options),
      stub_(v1::KvTier::NewStub(server->InProcessChannel(grpc::ChannelArguments()))),
      index_check_(store) {}

absl::Status DaemonProbes::CheckAlive() {
  (void)store_->Stats();
  absl::ReaderMutexLock lock(&server_mu_);
  if (server_stopping_) return absl::UnavailableError("the gRPC server is shutting down");
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() +
                   absl::ToChronoMilliseconds(options_.hello_deadline));
  v1::HelloRequest req;
  v1::HelloResponse resp;
  const grpc::Status st = stub_->Hello(&ctx, req, &resp);
  if (!st.ok()) {
    return absl::UnavailableError(
        absl::StrFormat("the gRPC server did not answer Hello within %s: %s (%d)",
                        absl::FormatDuration(options_.hello_deadline), st.error_message(),
                        static_cast<int>(st.error_code())));
  }
  return absl::OkStatus();
}

void DaemonProbes::StopCheckingServer() {
  absl::MutexLock lock(&server_mu_);
  server_stopping_ = true;
}

ReadinessInputs DaemonProbes::Gather() {
  ReadinessInputs in;
  in.draining = service_->draining();
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = absl::Now();
    if (now - index_checked_at_ >= options_.index_check_interval) {
      index_status_ = index_check_.Check();
      index_checked_at_ = now;
    }
    in.index = index_status_;
  }
  const store::StoreStats stats = store_->Stats();
  in.host_capacity_bytes = stats.tiers[static_cast<int>(store::Tier::kHost)].capacity_bytes;
  in.index_writable = stats.index_health.ToStatus();
  return in;
}

std::vector<std::string> DaemonProbes::NotReady() { return NotReadyReasons(Gather()); }

}  // namespace kvtier::kvtierd
