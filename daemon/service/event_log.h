// EventLog: kvtierd's log of cache events, fed by the BlockStore (as its StoreEventSink) and read
// by the WatchEvents streams. Events get sequence numbers from 1 in each incarnation; the last
// `capacity` events are kept for replay. Consecutive store events of the same kind, namespace,
// tier and cause merge into one logged event (up to 4096 hashes) until a reader sees it. A
// notifier thread tells listeners (the streams) when events arrive. Thread-safe.
#ifndef KVTIER_DAEMON_SERVICE_EVENT_LOG_H_
#define KVTIER_DAEMON_SERVICE_EVENT_LOG_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/store/store_events.h"

namespace kvtier::service {

// One logged event: a store event, or several merged (one hash each).
struct LoggedEvent {
  uint64_t sequence = 0;
  absl::Time time;
  store::StoreEventKind kind = store::StoreEventKind::kStored;
  index::NamespaceId ns = 0;
  index::Tier tier = index::Tier::kHost;
  index::Tier to_tier = index::Tier::kHost;
  store::StoredBy stored_by = store::StoredBy::kPut;
  store::RemovedBy removed_by = store::RemovedBy::kEvicted;
  bool durable = false;
  uint64_t block_bytes = 0;
  std::string origin;
  uint64_t count = 0;
  std::vector<index::BlockHash> hashes;
  bool shared_tier = false;  // StoreEvent::shared_tier: the cluster tier's, tier unused
};

class EventLog final : public store::StoreEventSink {
 public:
  static constexpr size_t kMaxHashesPerEvent = 4096;

  // Keeps the last `capacity` (at least 1) logged events.
  EventLog(uint64_t incarnation, size_t capacity);
  ~EventLog() override;  // stops the notifier. REQUIRES: no listener left.

  uint64_t incarnation() const { return incarnation_; }

  // StoreEventSink. Called under the store's lock; takes the log's lock (order: store, log).
  void OnEvent(const store::StoreEvent& event) override;
  uint64_t Barrier() override;

  // Sequence of the last logged event (0: none yet).
  uint64_t last_sequence() const;

  // Up to `max_events` logged events with sequences above `after`, in order. Events older than
  // the retained window are reported as lost_first..lost_last (both 0 when none were lost); the
  // events that follow start at the oldest retained one. Returned events never change.
  struct Batch {
    std::vector<std::shared_ptr<const LoggedEvent>> events;
    uint64_t lost_first = 0;
    uint64_t lost_last = 0;
  };
  Batch Read(uint64_t after, size_t max_events);

  // Told (on the notifier thread, without the log's lock) when events were logged or the log
  // closed. Borrowed until RemoveListener, which waits for a running call to end unless it is
  // made from that call.
  class Listener {
   public:
    virtual ~Listener() = default;
    virtual void OnEventsAvailable() = 0;
  };
  void AddListener(Listener* listener);
  void RemoveListener(Listener* listener);
  size_t listener_count() const;

  // From now on closed() is true and every listener is told once more (the streams end). Used
  // at shutdown.
  void Close();
  bool closed() const;

  uint64_t logged_store_events() const;  // store events received (before merging)

 private:
  void NotifierLoop();

  const uint64_t incarnation_;
  const size_t capacity_;

  mutable absl::Mutex mu_;
  std::deque<std::shared_ptr<LoggedEvent>> ring_ ABSL_GUARDED_BY(mu_);
  uint64_t next_sequence_ ABSL_GUARDED_BY(mu_) = 1;
  bool tail_open_ ABSL_GUARDED_BY(mu_) = false;  // ring_.back() may still take merges
  uint64_t store_events_ ABSL_GUARDED_BY(mu_) = 0;
  bool notify_ ABSL_GUARDED_BY(mu_) = false;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_set<Listener*> listeners_ ABSL_GUARDED_BY(mu_);
  Listener* calling_ ABSL_GUARDED_BY(mu_) = nullptr;  // the listener the notifier is calling
  std::thread notifier_;
};

}  // namespace kvtier::service

#endif  // KVTIER_DAEMON_SERVICE_EVENT_LOG_H_
