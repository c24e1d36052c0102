// FairScheduler: kvtierd's worker threads, shared between flows (a flow per engine, one for admin
// work) so that one engine's large batch cannot hold the others. Each flow has a FIFO of tasks;
// flows take turns and a task runs for one turn, then either ends or asks for another turn, which
// it gets behind the tasks its flow queued meanwhile and after the other flows' turns. A large
// request is one task that does a part of its items per turn: its parts run in order, never two at
// once, while tasks of one flow may run in parallel on several workers. Thread-safe.
#ifndef KVTIER_DAEMON_SERVICE_FAIR_SCHEDULER_H_
#define KVTIER_DAEMON_SERVICE_FAIR_SCHEDULER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace kvtier::service {

class FairScheduler {
 public:
  // One turn of a task: returns true to run again in a later turn of its flow, false when done.
  // It runs on a worker thread, never on two at once.
  using Task = std::function<bool()>;

  // Starts `threads` workers (at least one).
  explicit FairScheduler(uint32_t threads);
  // Runs every queued task to its end (with the turns it asks for), then joins the workers.
  // REQUIRES: no Submit from another thread once destruction begins (tasks may still requeue).
  ~FairScheduler();

  FairScheduler(const FairScheduler&) = delete;
  FairScheduler& operator=(const FairScheduler&) = delete;

  // Queues `task` at the back of `flow`'s FIFO; the flow is created when it has none queued. Never
  // blocks on running tasks; may be called from a task.
  void Submit(absl::string_view flow, Task task);

  // Tasks queued and not running (all flows), for tests and metrics.
  size_t queued() const;

 private:
  struct Flow {
    std::string name;
    std::deque<Task> tasks;
  };
  // Queues `task` at the back of `flow`'s FIFO. A flow that had nothing queued joins the back of
  // fresh_ (`fresh`: a new request) or of turns_ (a task that asks for another turn).
  void Enqueue(absl::string_view flow, Task task, bool fresh) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool WorkOrStop() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || queued_ > 0; }
  void WorkerLoop();

  mutable absl::Mutex mu_;
  // Flows with queued tasks (a flow is dropped when its FIFO empties), each in exactly one of
  // fresh_ (flows that had nothing queued: their first task takes the next free worker) and
  // turns_ (flows that had a turn and still have tasks, served round-robin after fresh_).
  absl::flat_hash_map<std::string, std::unique_ptr<Flow>> flows_ ABSL_GUARDED_BY(mu_);
  std::deque<Flow*> fresh_ ABSL_GUARDED_BY(mu_);
  std::deque<Flow*> turns_ ABSL_GUARDED_BY(mu_);
  size_t queued_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace kvtier::service

#endif  // KVTIER_DAEMON_SERVICE_FAIR_SCHEDULER_H_
