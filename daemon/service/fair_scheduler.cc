// FairScheduler. Design:
//
// - Flows, not requests, take turns: an engine with ten queued requests gets the same share of the
//   workers as an engine with one, and a request that needs many turns (a 4096-page batch done
//   in chunks of server.chunk_pages) goes behind the other flows after each chunk. A worker is
//   then free again within about one chunk, whatever the others' batches.
// - Within a flow, requests keep their order of arrival: a task's next turn goes to the front of
//   its flow's FIFO, so an engine's own requests are served in the order they came, as without
//   the scheduler (with several workers, several of them at once); only the engines interleave.
// - Two lists of flows, like fq_codel's new and old flows: a flow that had nothing queued is
//   "fresh" and takes the next free worker ahead of the flows that already had turns, for one
//   turn; then it joins the round-robin list if it still has work. An engine's small request (a
//   one-page Onboard) then waits for the turns in progress, not for a turn of every busy engine.
//   A task asking for another turn never makes its flow fresh (a flow that became fresh while its
//   task ran is moved to the round-robin list), so a bulk flow cannot keep the priority; the
//   flows that had turns progress whenever no new request is waiting.
// - One mutex guards the lists and flows; tasks run without it. Workers wait on the mutex's
//   condition (absl::Mutex::Await), so Submit needs no separate condition variable.
#include "daemon/service/fair_scheduler.h"

#include <algorithm>
#include <utility>

namespace kvtier::service {

FairScheduler::FairScheduler(uint32_t threads) {
  for (uint32_t i = 0; i < std::max<uint32_t>(threads, 1); ++i) {
    threads_.emplace_back([this] { WorkerLoop(); });
  }
}

FairScheduler::~FairScheduler() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

void FairScheduler::Submit(absl::string_view flow, Task task) {
  absl::MutexLock lock(&mu_);
  Enqueue(flow, std::move(task), /*again=*/false);
}

size_t FairScheduler::queued() const {
  absl::MutexLock lock(&mu_);
  return queued_;
}

void FairScheduler::Enqueue(absl::string_view flow, Task task, bool again) {
  std::unique_ptr<Flow>& slot = flows_[flow];
  if (slot == nullptr) {
    slot = std::make_unique<Flow>();
    slot->name = std::string(flow);
    slot->fresh = !again;
    (again ? turns_ : fresh_).push_back(slot.get());
  } else if (again && slot->fresh) {
    fresh_.erase(std::find(fresh_.begin(), fresh_.end(), slot.get()));
    slot->fresh = false;
    turns_.push_back(slot.get());
  }
  if (again) {
    slot->tasks.push_front(std::move(task));
  } else {
    slot->tasks.push_back(std::move(task));
  }
  ++queued_;
}

void FairScheduler::WorkerLoop() {
  absl::MutexLock lock(&mu_);
  while (true) {
    mu_.Await(absl::Condition(this, &FairScheduler::WorkOrStop));
    // Stopping and nothing queued: done. A task still running on another worker that asks for
    // another turn is run by that worker, which is still in this loop.
    if (queued_ == 0) return;
    std::deque<Flow*>& list = fresh_.empty() ? turns_ : fresh_;
    Flow* flow = list.front();
    list.pop_front();
    Task task = std::move(flow->tasks.front());
    flow->tasks.pop_front();
    --queued_;
    std::string name = flow->name;
    if (flow->tasks.empty()) {
      flows_.erase(name);
    } else {
      flow->fresh = false;
      turns_.push_back(flow);
    }
    mu_.Unlock();
    const bool again = task();
    mu_.Lock();
    if (again) Enqueue(name, std::move(task), /*again=*/true);
  }
}

}  // namespace kvtier::service
