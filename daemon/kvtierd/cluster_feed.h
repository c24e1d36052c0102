// ClusterFeed: hands the store's events, as the event log holds them, to the shared tier's
// write-behind (SharedTier::Offer): a block stored by an engine (or a durable one), a GPU-tier
// page once the background thread has encoded it into the host tier (a hot page has no cold
// block before), a block written to the disk tier. Blocks the shared tier itself put into the
// store (origin "cluster") and recovered ones are not offered back. Reads the log on its
// notifier thread and never blocks it (Offer does not). Offers the log dropped before the feed
// read them are counted (SharedTier::CountLostOffers).
#ifndef KVTIER_DAEMON_KVTIERD_CLUSTER_FEED_H_
#define KVTIER_DAEMON_KVTIERD_CLUSTER_FEED_H_

#include <cstdint>

#include "absl/synchronization/mutex.h"
#include "daemon/service/event_log.h"
#include "daemon/store/shared_tier.h"

namespace kvtier::kvtierd {

class ClusterFeed final : public service::EventLog::Listener {
 public:
  // Starts with the events logged after now. Borrows both, which must outlive the feed.
  ClusterFeed(service::EventLog* log, store::SharedTier* tier);
  ~ClusterFeed() override;  // stops listening (waits for a call in progress)
  ClusterFeed(const ClusterFeed&) = delete;
  ClusterFeed& operator=(const ClusterFeed&) = delete;

  void OnEventsAvailable() override;

 private:
  service::EventLog* const log_;
  store::SharedTier* const tier_;
  absl::Mutex mu_;  // one reader of the log at a time
  uint64_t after_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kvtier::kvtierd

#endif  // KVTIER_DAEMON_KVTIERD_CLUSTER_FEED_H_
