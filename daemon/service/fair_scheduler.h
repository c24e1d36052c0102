// FairScheduler: kvtierd's worker threads, shared between flows (one flow per engine, one for
// admin work) so that one engine's large batch cannot hold the others. Each flow has a FIFO of
// tasks; the flows take turns round-robin, and a task runs for one turn (a chunk of its work),
// then either ends or asks for another turn, which it gets after the other flows' turns, ahead of
// the tasks its own flow queued after it. A flow that had nothing queued goes ahead of the flows
// that already had turns, for one turn. Thread-safe.
#ifndef KVTIER_DAEMON_SERVICE_FAIR_SCHEDULER_H_
#define KVTIER_DAEMON_SERVICE_FAIR_SCHEDULER_H_

#include <cstddef>
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
  // A task runs on one worker thread at a time; tasks of one flow may run on several at once.
  using Task = std::function<bool()>;

  // Starts `threads` workers (at least one).
  explicit FairScheduler(uint32_t threads);
  // Runs every queued task to its end (with the turns it asks for), then joins the workers.
  // REQUIRES: no Submit from another thread once destruction begins.
  ~FairScheduler();

  FairScheduler(const FairScheduler&) = delete;
  FairScheduler& operator=(const FairScheduler&) = delete;

  // Queues `task` at the back of `flow`'s FIFO (any string names a flow; one with nothing queued
  // is created). Never blocks on running tasks; may be called from a task.
  void Submit(absl::string_view flow, Task task);

  // Tasks queued and not running, in all flows.
  size_t queued() const;

 private:
  struct Flow {
    std::string name;
    std::deque<Task> tasks;
    bool fresh = false;  // in fresh_ (else in turns_)
  };
  // Queues `task` in `flow`'s FIFO: a new one at the back, a task asking for another turn
  // (`again`) at the front. A flow that had nothing queued is created and joins the back of
  // fresh_ (a new task) or of turns_ (a task that had a turn).
  void Enqueue(absl::string_view flow, Task task, bool again) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool WorkOrStop() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || queued_ > 0; }
  void WorkerLoop();

  mutable absl::Mutex mu_;
  // The flows with queued tasks (a flow is dropped when its FIFO empties), each in exactly one of
  // fresh_ (flows that had nothing queued: served first, one turn each) and turns_ (flows that
  // had a turn and still have tasks, served round-robin when fresh_ is empty).
  absl::flat_hash_map<std::string, std::unique_ptr<Flow>> flows_ ABSL_GUARDED_BY(mu_);
  std::deque<Flow*> fresh_ ABSL_GUARDED_BY(mu_);
  std::deque<Flow*> turns_ ABSL_GUARDED_BY(mu_);
  size_t queued_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace kvtier::service

#endif  // KVTIER_DAEMON_SERVICE_FAIR_SCHEDULER_H_
