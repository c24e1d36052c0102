#include "daemon/kvtierd/cluster_feed.h"

namespace kvtier::kvtierd {

ClusterFeed::ClusterFeed(service::EventLog* log, store::SharedTier* tier)
    : log_(log), tier_(tier), after_(log->last_sequence()) {
  log_->AddListener(this);
}

ClusterFeed::~ClusterFeed() { log_->RemoveListener(this); }

void ClusterFeed::OnEventsAvailable() {
  absl::MutexLock lock(&mu_);
  for (;;) {
    service::EventLog::Batch batch = log_->Read(after_, 256);
    if (batch.lost_last != 0) {
      // Whole events lost: their block counts are unknown, each counts as one.
      tier_->CountLostOffers(batch.lost_last - batch.lost_first + 1);
    }
    if (batch.events.empty()) return;
    for (const auto& e : batch.events) {
      after_ = e->sequence;
      if (e->origin == "cluster") continue;
      switch (e->kind) {
        case store::StoreEventKind::kStored:
          if (e->stored_by != store::StoredBy::kPut || e->tier == index::Tier::kGpu) break;
          tier_->Offer(
              e->ns, e->hashes,
              e->durable ? store::SharedOffer::kStoredDurable : store::SharedOffer::kStored);
          break;
        case store::StoreEventKind::kMoved:
          if (e->tier == index::Tier::kGpu && e->to_tier == index::Tier::kHost) {
            tier_->Offer(e->ns, e->hashes, store::SharedOffer::kStored);
          } else if (e->to_tier == index::Tier::kDisk) {
            tier_->Offer(e->ns, e->hashes, store::SharedOffer::kReachedDisk);
          }
          break;
        case store::StoreEventKind::kRemoved:
        case store::StoreEventKind::kCleared:
          break;
      }
    }
  }
}

}  // namespace kvtier::kvtierd
