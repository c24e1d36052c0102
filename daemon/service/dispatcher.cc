// Dispatcher: work on the workers, requests in flight, the drain switch.
#include "daemon/service/dispatcher.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_format.h"
#include "daemon/service/grpc_status.h"

namespace kvtier::service {

Dispatcher::Dispatcher(uint32_t worker_threads, absl::Duration default_deadline)
    : default_deadline_(default_deadline),
      workers_(std::make_unique<FairScheduler>(worker_threads)) {}

Dispatcher::~Dispatcher() { Stop(); }

void Dispatcher::Stop() { workers_.reset(); }

bool Dispatcher::WaitIdle(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::MutexLock lock(&mu_);
  while (in_flight_ > 0) {
    if (idle_cv_.WaitWithDeadline(&mu_, deadline)) break;
  }
  return in_flight_ == 0;
}

void Dispatcher::AddInFlight() {
  absl::MutexLock lock(&mu_);
  ++in_flight_;
}

void Dispatcher::DoneInFlight() {
  absl::MutexLock lock(&mu_);
  if (--in_flight_ == 0) idle_cv_.SignalAll();
}

void Dispatcher::RunOnWorker(grpc::CallbackServerContext* ctx, grpc::ServerUnaryReactor* reactor,
                             std::function<absl::Status()> work, absl::string_view flow) {
  RunTurnsOnWorker(ctx, reactor, flow,
                   [work = std::move(work)]() -> std::optional<absl::Status> { return work(); });
}

void Dispatcher::RunTurnsOnWorker(grpc::CallbackServerContext* ctx,
                                  grpc::ServerUnaryReactor* reactor, absl::string_view flow,
                                  std::function<std::optional<absl::Status>()> turn) {
  AddInFlight();
  const absl::Time queued = absl::Now();
  // gRPC cancels a call whose own deadline passes; the default applies to calls without one.
  const bool client_deadline = ctx->deadline() != std::chrono::system_clock::time_point::max();
  workers_->Submit(flow, [this, ctx, reactor, queued, client_deadline, turn = std::move(turn),
                          started = false]() mutable {
    std::optional<absl::Status> status;
    if (!started) {
      const absl::Duration waited = absl::Now() - queued;
      if (ctx->IsCancelled()) {
        status = absl::CancelledError(absl::StrFormat(
            "the call was cancelled or its deadline passed while it waited %s for a worker",
            absl::FormatDuration(waited)));
      } else if (!client_deadline && default_deadline_ > absl::ZeroDuration() &&
                 waited > default_deadline_) {
        status = absl::DeadlineExceededError(absl::StrFormat(
            "waited %s for a worker, past the server's default deadline of %s (the call set none)",
            absl::FormatDuration(waited), absl::FormatDuration(default_deadline_)));
      }
      started = true;
    }
    if (!status.has_value()) status = turn();
    if (!status.has_value()) return true;  // another turn
    // What the work holds (its engine) is released, and the request no longer counts as in
    // flight, before the client hears of the result: a client that has its answer finds the
    // daemon idle (a drain, the in-flight gauge) if nothing else runs.
    turn = nullptr;
    DoneInFlight();
    reactor->Finish(ToGrpc(*status));
    return false;
  });
}

}  // namespace kvtier::service
