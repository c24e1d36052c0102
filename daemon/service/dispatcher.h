// Dispatcher: runs the services' work on the workers (a FairScheduler: one flow per engine, one
// for registrations, one for admin work), counts the requests in flight so that a drain can wait
// for them, and holds the drain switch. Shared by KvTierService and KvTierAdminService through
// ServiceState. Thread-safe. Lock order: mu_ is a leaf (held only to count).
#ifndef KVTIER_DAEMON_SERVICE_DISPATCHER_H_
#define KVTIER_DAEMON_SERVICE_DISPATCHER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/service/fair_scheduler.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/server_callback.h"

namespace kvtier::service {

class Dispatcher {
 public:
  // `default_deadline`: the deadline of a unary call that set none, applied while it waits for a
  // worker (zero: none).
  Dispatcher(uint32_t worker_threads, absl::Duration default_deadline);
  ~Dispatcher();  // Stop()
  Dispatcher(const Dispatcher&) = delete;
  Dispatcher& operator=(const Dispatcher&) = delete;

  // New registrations, offloads and parks fail with UNAVAILABLE from now on.
  void BeginDrain() { draining_ = true; }
  void EndDrain() { draining_ = false; }
  bool draining() const { return draining_; }
  // Waits until no request is in flight, or `timeout` passes; true when idle.
  bool WaitIdle(absl::Duration timeout) ABSL_LOCKS_EXCLUDED(mu_);
  // Counts work done off the workers (Unregister's waits) as in flight, until Done.
  void AddInFlight() ABSL_LOCKS_EXCLUDED(mu_);
  void DoneInFlight() ABSL_LOCKS_EXCLUDED(mu_);
  // Joins the workers after the work queued and running; nothing may be submitted afterwards.
  // The daemon calls it before the services that queued work are destroyed.
  void Stop();

  // Runs `work` on a worker (counted as in flight), in the turns of `flow` (an engine's id; ""
  // for admin work), then finishes the RPC with its status. Work whose call was cancelled, or
  // whose deadline (the client's, else default_deadline from now) passed while it waited for a
  // worker, does not run (CANCELLED or DEADLINE_EXCEEDED). Either way `work` is destroyed, and
  // the request stops counting as in flight, before the call finishes: what it captured (an
  // EngineRef) is released by the time the client has its answer. Never blocks.
  void RunOnWorker(grpc::CallbackServerContext* ctx, grpc::ServerUnaryReactor* reactor,
                   std::function<absl::Status()> work, absl::string_view flow = "")
      ABSL_LOCKS_EXCLUDED(mu_);
  // The same for work done in turns: `turn` runs once per turn of `flow` (FairScheduler) and
  // returns nullopt while work remains, or the request's status after its last chunk. The
  // deadline and cancellation are checked before the first turn only: a request that started
  // runs to its end (and is in flight until then). Never blocks.
  void RunTurnsOnWorker(grpc::CallbackServerContext* ctx, grpc::ServerUnaryReactor* reactor,
                        absl::string_view flow, std::function<std::optional<absl::Status>()> turn)
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const absl::Duration default_deadline_;
  std::atomic<bool> draining_{false};
  absl::Mutex mu_;
  absl::CondVar idle_cv_;  // in_flight_ reached zero
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  std::unique_ptr<FairScheduler> workers_;  // null once stopped
};

}  // namespace kvtier::service

#endif  // KVTIER_DAEMON_SERVICE_DISPATCHER_H_
