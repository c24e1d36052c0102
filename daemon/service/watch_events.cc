// KvTierService::WatchEvents: one EventStream (a gRPC write reactor) per subscriber, reading the
// EventLog from its own cursor. A stream writes one response at a time; when it has nothing to
// send it waits for the log's notifier. It never holds its lock while calling into gRPC (a
// write's completion or the stream's end may run inline in StartWrite or Finish, and OnDone
// deletes the stream), and it touches nothing of itself after StartWrite or Finish. A slow
// reader is never waited for: the log keeps its window and the reader gets EventsLost when it
// falls behind it.
#include <algorithm>
#include <optional>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"
#include "daemon/service/event_log.h"
#include "daemon/service/grpc_status.h"
#include "daemon/service/kvtier_service.h"
#include "daemon/service/proto_convert.h"
#include "daemon/service/request_limits.h"
#include "kvtier/v1/namespace.pb.h"

namespace kvtier::service {
namespace {

constexpr size_t kDefaultBatchEvents = 256;
constexpr size_t kMaxBatchEvents = 4096;
// A response stops growing past this many bytes (clients' default receive limit is 4 MiB).
constexpr size_t kResponseBudgetBytes = 1u << 20;

v1::StoreCause StoreCauseToProto(store::StoredBy by) {
  return by == store::StoredBy::kRecovery ? v1::STORE_CAUSE_RECOVERY : v1::STORE_CAUSE_OFFLOAD;
}

v1::RemoveCause RemoveCauseToProto(store::RemovedBy by) {
  switch (by) {
    case store::RemovedBy::kRemoved:
      return v1::REMOVE_CAUSE_ADMIN_EVICT;
    case store::RemovedBy::kCorrupt:
      return v1::REMOVE_CAUSE_CORRUPT;
    default:
      return v1::REMOVE_CAUSE_EVICTED;
  }
}

template <typename M>
void AddHashes(const std::vector<index::BlockHash>& hashes, M* out) {
  for (const index::BlockHash& h : hashes) {
    out->add_block_hashes(reinterpret_cast<const char*>(h.data()), h.size());
  }
}

void EventToProto(const LoggedEvent& e, uint64_t incarnation, const v1::Namespace& ns,
                  v1::Event* out) {
  out->set_sequence(e.sequence);
  out->set_incarnation_id(incarnation);
  SetTime(e.time, out->mutable_time());
  out->set_namespace_id(e.ns);
  *out->mutable_ns() = ns;
  switch (e.kind) {
    case store::StoreEventKind::kStored: {
      v1::BlockStored* m = out->mutable_block_stored();
      AddHashes(e.hashes, m);
      m->set_tier(e.shared_tier ? v1::TIER_CLUSTER : TierToProto(e.tier));
      m->set_cause(StoreCauseToProto(e.stored_by));
      m->set_durable(e.durable);
      m->set_engine_id(e.origin);
      m->set_block_bytes(e.block_bytes);
      break;
    }
    case store::StoreEventKind::kRemoved: {
      v1::BlockRemoved* m = out->mutable_block_removed();
      AddHashes(e.hashes, m);
      m->set_tier(e.shared_tier ? v1::TIER_CLUSTER : TierToProto(e.tier));
      m->set_cause(RemoveCauseToProto(e.removed_by));
      break;
    }
    case store::StoreEventKind::kMoved: {
      v1::BlockMoved* m = out->mutable_block_moved();
      AddHashes(e.hashes, m);
      m->set_from_tier(TierToProto(e.tier));
      m->set_to_tier(TierToProto(e.to_tier));
      break;
    }
    case store::StoreEventKind::kCleared:
      out->mutable_namespace_cleared()->set_tier(v1::TIER_UNSPECIFIED);
      out->mutable_namespace_cleared()->set_removed_blocks(e.count);
      break;
  }
}

// Which namespaces a stream carries: the selector, within what the caller may see.
class NamespaceFilter {
 public:
  NamespaceFilter(const store::BlockStore* store, v1::NamespaceSelector selector,
                  std::optional<std::string> tenant)
      : store_(store), selector_(std::move(selector)), tenant_(std::move(tenant)) {}

  // The namespace's description when the stream carries its events; nullptr otherwise.
  const v1::Namespace* Find(index::NamespaceId id) {
    auto it = cache_.find(id);
    if (it == cache_.end()) {
      Refresh();
      it = cache_.find(id);
      if (it == cache_.end()) it = cache_.emplace(id, std::nullopt).first;  // never registered
    }
    return it->second.has_value() ? &*it->second : nullptr;
  }

  // Every namespace the stream carries now.
  std::vector<index::NamespaceId> Current() {
    Refresh();
    std::vector<index::NamespaceId> out;
    for (const auto& [id, ns] : cache_) {
      if (ns.has_value()) out.push_back(id);
    }
    return out;
  }

 private:
  void Refresh() {
    for (const auto& [id, record] : store_->Namespaces()) {
      v1::Namespace ns;
      if (!ns.ParseFromString(record.first) || !Selected(id, ns)) {
        cache_[id] = std::nullopt;
      } else {
        cache_[id] = std::move(ns);
      }
    }
  }

  bool Selected(index::NamespaceId id, const v1::Namespace& ns) const {
    if (tenant_.has_value() && ns.tenant() != *tenant_) return false;
    switch (selector_.selector_case()) {
      case v1::NamespaceSelector::kNamespaceId:
        return selector_.namespace_id() == id;
      case v1::NamespaceSelector::kMatch: {
        const v1::NamespaceMatch& m = selector_.match();
        return (m.tenant().empty() || m.tenant() == ns.tenant()) &&
               (m.model().empty() || m.model() == ns.model()) &&
               (m.partition().empty() || m.partition() == ns.partition());
      }
      default:
        return true;
    }
  }

  const store::BlockStore* store_;
  const v1::NamespaceSelector selector_;
  const std::optional<std::string> tenant_;  // nullopt: every tenant
  absl::flat_hash_map<index::NamespaceId, std::optional<v1::Namespace>> cache_;
};

class EventStream final : public grpc::ServerWriteReactor<v1::WatchEventsResponse>,
                          public EventLog::Listener {
 public:
  EventStream(EventLog* log, const store::BlockStore* store, NamespaceFilter filter,
              size_t max_batch)
      : log_(log), store_(store), filter_(std::move(filter)), max_batch_(max_batch) {}

  // Sets where the stream starts; then starts it. Called once, on the RPC's thread.
  void Start(const v1::WatchEventsRequest& req) {
    {
      absl::MutexLock lock(&mu_);
      switch (req.start()) {
        case v1::WATCH_START_AFTER_SEQUENCE:
          if (req.incarnation_id() != 0 && req.incarnation_id() != log_->incarnation()) {
            v1::Event* lost = pending_.add_events();
            lost->set_incarnation_id(log_->incarnation());
            SetTime(absl::Now(), lost->mutable_time());
            lost->mutable_events_lost()->set_reason(v1::LOSS_REASON_INCARNATION_CHANGED);
            cursor_ = 0;
          } else {
            cursor_ = req.after_sequence();
          }
          replay_ = true;
          break;
        case v1::WATCH_START_SNAPSHOT: {
          std::vector<index::NamespaceId> ids = filter_.Current();
          if (ids.empty()) {
            cursor_ = log_->Barrier();  // closes the last event: later ones are new
          } else {
            snapshot_ = store_->Snapshot(ids, &cursor_);
          }
          std::sort(snapshot_.begin(), snapshot_.end(), [](const auto& a, const auto& b) {
            return std::tie(a.ns, a.tier, a.durable, a.bytes) <
                   std::tie(b.ns, b.tier, b.durable, b.bytes);
          });
          snapshot_time_ = absl::Now();
          in_snapshot_ = true;
          break;
        }
        default:
          cursor_ = log_->Barrier();  // closes the last event: later ones are new
          break;
      }
    }
    log_->AddListener(this);
    Pump();
  }

  void OnEventsAvailable() override { Pump(); }

  void OnWriteDone(bool ok) override {
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      if (!ok && !finish_.has_value()) finish_ = grpc::Status(grpc::StatusCode::CANCELLED, "");
    }
    Pump();
  }

  void OnCancel() override {
    {
      absl::MutexLock lock(&mu_);
      if (!finish_.has_value()) finish_ = grpc::Status(grpc::StatusCode::CANCELLED, "");
    }
    Pump();
  }

  void OnDone() override {
    log_->RemoveListener(this);
    delete this;
  }

 private:
  // Writes the next response or finishes the stream when it can. Touches nothing of *this after
  // StartWrite or Finish.
  void Pump() {
    mu_.Lock();
    if (writing_ || finished_) {
      mu_.Unlock();
      return;
    }
    if (!finish_.has_value() && log_->closed()) {
      finish_ = grpc::Status(grpc::StatusCode::UNAVAILABLE, "kvtierd is shutting down");
    }
    if (finish_.has_value()) {
      finished_ = true;
      const grpc::Status status = *finish_;
      mu_.Unlock();
      Finish(status);
      return;
    }
    response_.Clear();
    response_.Swap(&pending_);
    Fill();
    if (response_.events_size() == 0) {
      mu_.Unlock();
      return;  // the notifier calls again when events arrive
    }
    writing_ = true;
    mu_.Unlock();
    StartWrite(&response_);
  }

  bool Full() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return static_cast<size_t>(response_.events_size()) >= max_batch_ ||
           bytes_ >= kResponseBudgetBytes;
  }

  void Fill() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    bytes_ = 0;
    if (in_snapshot_) {
      FillSnapshot();
      if (in_snapshot_) return;
    }
    while (!Full()) {
      EventLog::Batch batch = log_->Read(cursor_, max_batch_);
      if (batch.lost_last != 0) {
        v1::Event* lost = response_.add_events();
        lost->set_sequence(batch.lost_last);
        lost->set_incarnation_id(log_->incarnation());
        SetTime(absl::Now(), lost->mutable_time());
        v1::EventsLost* m = lost->mutable_events_lost();
        m->set_first_sequence(batch.lost_first);
        m->set_last_sequence(batch.lost_last);
        m->set_reason(replay_ ? v1::LOSS_REASON_REPLAY_WINDOW_EXCEEDED
                              : v1::LOSS_REASON_SLOW_CONSUMER);
        KVTIER_LOG(kWarning, "WatchEvents: a stream lost events ", batch.lost_first, "..",
                   batch.lost_last, replay_ ? " (older than the replay window)" : " (slow reader)");
      }
      replay_ = false;
      if (batch.events.empty()) return;
      for (const auto& e : batch.events) {
        cursor_ = e->sequence;
        const v1::Namespace* ns = filter_.Find(e->ns);
        if (ns == nullptr) continue;
        EventToProto(*e, log_->incarnation(), *ns, response_.add_events());
        bytes_ += 96 + 34 * e->hashes.size();
        if (Full()) return;
      }
    }
  }

  // Snapshot events: consecutive blocks of one namespace, tier, durability and size share one
  // BlockStored event; then SnapshotComplete.
  void FillSnapshot() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    while (!Full() && next_ < snapshot_.size()) {
      const store::BlockStore::BlockSummary& first = snapshot_[next_];
      const v1::Namespace* ns = filter_.Find(first.ns);
      v1::Event* event = response_.add_events();
      event->set_incarnation_id(log_->incarnation());
      SetTime(snapshot_time_, event->mutable_time());
      event->set_namespace_id(first.ns);
      if (ns != nullptr) *event->mutable_ns() = *ns;
      v1::BlockStored* m = event->mutable_block_stored();
      m->set_tier(TierToProto(first.tier));
      m->set_cause(v1::STORE_CAUSE_SNAPSHOT);
      m->set_durable(first.durable);
      m->set_block_bytes(first.bytes);
      while (next_ < snapshot_.size() &&
             static_cast<size_t>(m->block_hashes_size()) < EventLog::kMaxHashesPerEvent) {
        const store::BlockStore::BlockSummary& b = snapshot_[next_];
        if (b.ns != first.ns || b.tier != first.tier || b.durable != first.durable ||
            b.bytes != first.bytes) {
          break;
        }
        m->add_block_hashes(reinterpret_cast<const char*>(b.hash.data()), b.hash.size());
        ++next_;
      }
      bytes_ += 96 + 34 * static_cast<size_t>(m->block_hashes_size());
    }
    if (next_ < snapshot_.size() || Full()) return;
    v1::Event* done = response_.add_events();
    done->set_sequence(cursor_);
    done->set_incarnation_id(log_->incarnation());
    SetTime(snapshot_time_, done->mutable_time());
    done->mutable_snapshot_complete()->set_blocks(snapshot_.size());
    in_snapshot_ = false;
    snapshot_.clear();
    snapshot_.shrink_to_fit();
  }

  EventLog* const log_;
  const store::BlockStore* const store_;
  absl::Mutex mu_;
  NamespaceFilter filter_ ABSL_GUARDED_BY(mu_);
  const size_t max_batch_;
  uint64_t cursor_ ABSL_GUARDED_BY(mu_) = 0;  // last sequence examined
  bool replay_ ABSL_GUARDED_BY(mu_) = false;  // the next read replays (AFTER_SEQUENCE)
  bool in_snapshot_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<store::BlockStore::BlockSummary> snapshot_ ABSL_GUARDED_BY(mu_);
  size_t next_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time snapshot_time_ ABSL_GUARDED_BY(mu_);
  v1::WatchEventsResponse pending_ ABSL_GUARDED_BY(mu_);  // events to send first
  v1::WatchEventsResponse response_;  // written by Pump under mu_, read by gRPC while writing_
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<grpc::Status> finish_ ABSL_GUARDED_BY(mu_);
};

// A stream that ends at once with `status`.
class FailedStream final : public grpc::ServerWriteReactor<v1::WatchEventsResponse> {
 public:
  explicit FailedStream(const absl::Status& status) { Finish(ToGrpc(status)); }
  void OnDone() override { delete this; }
};

}  // namespace

grpc::ServerWriteReactor<v1::WatchEventsResponse>* KvTierService::WatchEvents(
    grpc::CallbackServerContext* ctx, const v1::WatchEventsRequest* req) {
  if (options_.events == nullptr) {
    return new FailedStream(
        absl::FailedPreconditionError("this server keeps no event log (WatchEvents is off)"));
  }
  absl::StatusOr<std::string> caller = Caller(ctx);
  if (!caller.ok()) return new FailedStream(caller.status());
  if (req->max_batch_events() > kMaxBatchEvents) {
    return new FailedStream(absl::InvalidArgumentError(absl::StrFormat(
        "max_batch_events %d is above %d", req->max_batch_events(), kMaxBatchEvents)));
  }
  if (req->start() < v1::WATCH_START_UNSPECIFIED || req->start() > v1::WATCH_START_SNAPSHOT) {
    return new FailedStream(
        absl::InvalidArgumentError(absl::StrFormat("unknown start %d", req->start())));
  }
  if (req->start() == v1::WATCH_START_AFTER_SEQUENCE &&
      (req->incarnation_id() == 0 || req->incarnation_id() == options_.events->incarnation()) &&
      req->after_sequence() > options_.events->last_sequence()) {
    return new FailedStream(absl::InvalidArgumentError(absl::StrFormat(
        "after_sequence %d is beyond the last event (%d) of incarnation %016x",
        req->after_sequence(), options_.events->last_sequence(), options_.events->incarnation())));
  }
  const v1::NamespaceSelector& selector = req->namespaces();
  if (absl::Status st = CheckSelector(selector); !st.ok()) return new FailedStream(st);
  std::optional<std::string> tenant;
  if (!IsAdmin(*caller)) tenant = *caller;
  NamespaceFilter filter(store_, selector, tenant);
  if (selector.selector_case() == v1::NamespaceSelector::kNamespaceId &&
      filter.Find(static_cast<index::NamespaceId>(selector.namespace_id())) == nullptr) {
    // Another tenant's namespace looks unknown.
    return new FailedStream(absl::NotFoundError(
        absl::StrFormat("namespace %016x is unknown", selector.namespace_id())));
  }
  const size_t max_batch =
      req->max_batch_events() == 0 ? kDefaultBatchEvents : req->max_batch_events();
  auto* stream = new EventStream(options_.events, store_, std::move(filter), max_batch);
  stream->Start(*req);
  return stream;
}

}  // namespace kvtier::service
