// EventLog. Merging: a store event joins the last logged event when that one is still open (no
// reader has taken it), has the same kind, namespace, tiers, cause, durability, size and origin,
// and holds fewer than kMaxHashesPerEvent hashes. Read() closes the last event, so a reader never
// sees an event change. The notifier thread exists so that the store's lock is never held while
// a stream builds or writes a response.
#include "daemon/service/event_log.h"

#include <algorithm>

#include "absl/time/clock.h"

namespace kvtier::service {
namespace {

bool Mergeable(const LoggedEvent& last, const store::StoreEvent& e) {
  return last.kind == e.kind && e.kind != store::StoreEventKind::kCleared && last.ns == e.ns &&
         last.tier == e.tier && last.to_tier == e.to_tier && last.stored_by == e.stored_by &&
         last.removed_by == e.removed_by && last.durable == e.durable &&
         last.block_bytes == e.block_bytes && last.origin == e.origin &&
         last.shared_tier == e.shared_tier && last.hashes.size() < EventLog::kMaxHashesPerEvent;
}

}  // namespace

EventLog::EventLog(uint64_t incarnation, size_t capacity)
    : incarnation_(incarnation), capacity_(std::max<size_t>(capacity, 1)) {
  notifier_ = std::thread([this] { NotifierLoop(); });
}

EventLog::~EventLog() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  notifier_.join();
}

void EventLog::OnEvent(const store::StoreEvent& e) {
  absl::MutexLock lock(&mu_);
  ++store_events_;
  if (tail_open_ && Mergeable(*ring_.back(), e)) {
    ring_.back()->hashes.push_back(e.hash);
    return;
  }
  auto logged = std::make_shared<LoggedEvent>();
  logged->sequence = next_sequence_++;
  logged->time = absl::Now();
  logged->kind = e.kind;
  logged->ns = e.ns;
  logged->tier = e.tier;
  logged->to_tier = e.to_tier;
  logged->stored_by = e.stored_by;
  logged->removed_by = e.removed_by;
  logged->durable = e.durable;
  logged->block_bytes = e.block_bytes;
  logged->origin = std::string(e.origin);
  logged->count = e.count;
  logged->shared_tier = e.shared_tier;
  if (e.kind != store::StoreEventKind::kCleared) logged->hashes.push_back(e.hash);
  ring_.push_back(std::move(logged));
  if (ring_.size() > capacity_) ring_.pop_front();
  tail_open_ = e.kind != store::StoreEventKind::kCleared;
  notify_ = true;
}

uint64_t EventLog::Barrier() {
  absl::MutexLock lock(&mu_);
  tail_open_ = false;
  return next_sequence_ - 1;
}

uint64_t EventLog::last_sequence() const {
  absl::MutexLock lock(&mu_);
  return next_sequence_ - 1;
}

EventLog::Batch EventLog::Read(uint64_t after, size_t max_events) {
  Batch batch;
  absl::MutexLock lock(&mu_);
  if (ring_.empty() || after >= next_sequence_ - 1) return batch;
  const uint64_t first = ring_.front()->sequence;
  if (after + 1 < first) {
    batch.lost_first = after + 1;
    batch.lost_last = first - 1;
    after = first - 1;
  }
  for (size_t i = after + 1 - first; i < ring_.size() && batch.events.size() < max_events; ++i) {
    batch.events.push_back(ring_[i]);
  }
  if (!batch.events.empty() && batch.events.back() == ring_.back()) tail_open_ = false;
  return batch;
}

void EventLog::AddListener(Listener* listener) {
  absl::MutexLock lock(&mu_);
  listeners_.insert(listener);
}

void EventLog::RemoveListener(Listener* listener) {
  absl::MutexLock lock(&mu_);
  listeners_.erase(listener);
  if (std::this_thread::get_id() == notifier_.get_id()) return;  // from inside its own call
  struct Removal {
    EventLog* log;
    Listener* listener;
  } removal{this, listener};
  mu_.Await(absl::Condition(
      +[](Removal* r) ABSL_NO_THREAD_SAFETY_ANALYSIS { return r->log->calling_ != r->listener; },
      &removal));
}

size_t EventLog::listener_count() const {
  absl::MutexLock lock(&mu_);
  return listeners_.size();
}

void EventLog::Close() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
  notify_ = true;
}

bool EventLog::closed() const {
  absl::MutexLock lock(&mu_);
  return closed_;
}

uint64_t EventLog::logged_store_events() const {
  absl::MutexLock lock(&mu_);
  return store_events_;
}

void EventLog::NotifierLoop() {
  absl::MutexLock lock(&mu_);
  while (true) {
    mu_.Await(absl::Condition(
        +[](EventLog* log) ABSL_NO_THREAD_SAFETY_ANALYSIS { return log->notify_ || log->stop_; },
        this));
    if (stop_) return;
    notify_ = false;
    std::vector<Listener*> listeners(listeners_.begin(), listeners_.end());
    for (Listener* listener : listeners) {
      if (!listeners_.contains(listener)) continue;  // removed meanwhile
      calling_ = listener;
      mu_.Unlock();
      listener->OnEventsAvailable();
      mu_.Lock();
      calling_ = nullptr;
    }
  }
}

}  // namespace kvtier::service
