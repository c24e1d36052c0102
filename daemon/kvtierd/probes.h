// The daemon's probes: what /healthz (alive: restart the daemon when not) and /readyz (accepts
// work) answer. ReadinessInputs is the state readiness judges, gathered in one place
// (DaemonProbes::Gather); NotReadyReasons is the rule on that state. DaemonProbes is
// thread-safe: the HTTP server's threads call it concurrently.
#ifndef KVTIER_DAEMON_KVTIERD_PROBES_H_
#define KVTIER_DAEMON_KVTIERD_PROBES_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/kvtierd/systemd_watchdog.h"
#include "daemon/service/kvtier_service.h"
#include "daemon/store/block_store.h"
#include "grpcpp/server.h"
#include "kvtier/v1/service.grpc.pb.h"

namespace kvtier::kvtierd {

// What /readyz judges. A new condition is a field here, filled in DaemonProbes::Gather and
// judged in NotReadyReasons.
struct ReadinessInputs {
  bool draining = false;                  // SIGTERM or an admin Drain: new work is refused
  absl::Status index = absl::OkStatus();  // StoreHealthCheck: whether index commits succeed
  // Whether the index takes writes (IndexHealth::ToStatus: a full state drive, a lost index
  // directory, an index open read-only).
  absl::Status index_writable = absl::OkStatus();
  uint64_t host_capacity_bytes = 0;  // every block passes through the host tier
};

// One line per reason the daemon does not accept work, in the order of ReadinessInputs:
// "draining", "index not writable: <why>" (the index's health first, else failing commits), "no
// host tier (capacity 0 bytes)". Empty when it does.
std::vector<std::string> NotReadyReasons(const ReadinessInputs& in);

class DaemonProbes {
 public:
  struct Options {
    // How long /healthz waits for the in-process Hello.
    absl::Duration hello_deadline = absl::Seconds(1);
    // StoreHealthCheck runs at most this often; calls in between reuse its verdict, so that its
    // "commits failed since the previous check" always spans at least this long (the store
    // retries a failed commit every 100 ms) and concurrent probes and scrapes share one check.
    absl::Duration index_check_interval = absl::Seconds(1);
  };

  // Borrows `store`, `service` and `server` (which serves `service`); all three must outlive
  // the probes. Blocks on the store's lock (StoreHealthCheck's baseline).
  DaemonProbes(store::BlockStore* store, service::KvTierService* service, grpc::Server* server,
               Options options);
  DaemonProbes(store::BlockStore* store, service::KvTierService* service, grpc::Server* server)
      : DaemonProbes(store, service, server, Options()) {}

  // /healthz: OK when the store answers Stats() and the gRPC server answers KvTier.Hello on an
  // in-process channel within hello_deadline (so its threads take calls); Unavailable naming
  // what failed otherwise, or once StopCheckingServer was called. Blocks on the store's lock and
  // up to hello_deadline on the call.
  absl::Status CheckAlive();

  // Call before the gRPC server shuts down (a call on the in-process channel of a server that
  // shut down crashes gRPC 1.51): CheckAlive reports Unavailable from now on without calling
  // it. Blocks until a Hello in progress returns.
  void StopCheckingServer();

  // /readyz: NotReadyReasons(Gather()); empty when the daemon accepts work. Blocks on the
  // store's lock.
  std::vector<std::string> NotReady();

  // The state readiness judges, read now (the index's health: see index_check_interval).
  // Blocks on the store's lock.
  ReadinessInputs Gather();

 private:
  store::BlockStore* store_;
  service::KvTierService* service_;
  Options options_;
  std::unique_ptr<v1::KvTier::Stub> stub_;  // on the server's in-process channel
  absl::Mutex server_mu_;                   // held shared by each Hello
  bool server_stopping_ ABSL_GUARDED_BY(server_mu_) = false;
  absl::Mutex mu_;
  StoreHealthCheck index_check_ ABSL_GUARDED_BY(mu_);
  absl::Time index_checked_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Status index_status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvtier::kvtierd

#endif  // KVTIER_DAEMON_KVTIERD_PROBES_H_
