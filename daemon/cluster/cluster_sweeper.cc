#include "daemon/cluster/cluster_sweeper.h"

#include <algorithm>
#include <vector>

#include "common/logging.h"

namespace kvtier::cluster {
namespace {

// Removals between two renewals of the lease.
constexpr uint64_t kRenewEvery = 64;

}  // namespace

ClusterSweeper::ClusterSweeper(std::function<RadosObjectStore*()> objects, SweeperOptions options)
    : objects_(std::move(objects)), options_(std::move(options)) {
  thread_ = std::thread([this] { Loop(); });
}

ClusterSweeper::~ClusterSweeper() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

SweeperStats ClusterSweeper::Stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void ClusterSweeper::Loop() {
  absl::MutexLock lock(&mu_);
  for (;;) {
    if (mu_.AwaitWithTimeout(absl::Condition(&stop_), options_.interval)) return;
    mu_.Unlock();
    if (RadosObjectStore* objects = objects_(); objects != nullptr) SweepOnce(*objects);
    mu_.Lock();
  }
}

void ClusterSweeper::SweepOnce(RadosObjectStore& objects) {
  // The lease outlives a few missed renewals, and expires soon after its holder is gone.
  const absl::Duration lease = std::max(3 * options_.interval, absl::Seconds(10));
  auto count = [this](uint64_t SweeperStats::*field, uint64_t n = 1) {
    absl::MutexLock lock(&mu_);
    stats_.*field += n;
  };
  if (absl::Status st = objects.AcquireLease("", options_.cookie, lease); !st.ok()) {
    count(absl::IsFailedPrecondition(st) ? &SweeperStats::lease_busy : &SweeperStats::errors);
    return;
  }
  count(&SweeperStats::sweeps);
  absl::StatusOr<std::vector<BlockObject>> listed = objects.ListBlocks(options_.max_listed);
  if (!listed.ok()) {
    KVTIER_LOG_FIRST(kWarning,
                     "cluster sweeper: cannot list the pool: ", listed.status().ToString());
    return count(&SweeperStats::errors);
  }
  uint64_t used = 0;
  for (const BlockObject& o : *listed) used += o.size;
  {
    absl::MutexLock lock(&mu_);
    stats_.used_bytes = used;
    stats_.objects = listed->size();
  }
  const double capacity = static_cast<double>(options_.capacity_bytes);
  if (static_cast<double>(used) <= options_.high_watermark * capacity) return;
  std::sort(listed->begin(), listed->end(), [](const BlockObject& a, const BlockObject& b) {
    return a.last_use_unix_micros < b.last_use_unix_micros;
  });
  const uint64_t before = used;
  uint64_t removed = 0, removed_bytes = 0, spared = 0, gone = 0, objects_left = listed->size();
  for (const BlockObject& o : *listed) {
    if (static_cast<double>(used) <= options_.low_watermark * capacity) break;
    if (removed > 0 && removed % kRenewEvery == 0 &&
        !objects.AcquireLease("", options_.cookie, lease).ok()) {
      break;  // another node took over: it sweeps from here
    }
    const absl::Status st = objects.RemoveUnlessUsed(o);
    if (st.ok()) {
      ++removed;
      removed_bytes += o.size;
      used -= o.size;
      --objects_left;
    } else if (absl::IsFailedPrecondition(st)) {
      ++spared;
    } else if (absl::IsNotFound(st)) {
      ++gone;
      used -= o.size;
      --objects_left;
    } else {
      count(&SweeperStats::errors);
      break;
    }
  }
  absl::MutexLock lock(&mu_);
  stats_.removed += removed;
  stats_.removed_bytes += removed_bytes;
  stats_.spared += spared;
  stats_.already_gone += gone;
  stats_.used_bytes = used;
  stats_.objects = objects_left;
  KVTIER_LOG(kInfo, "cluster sweeper: pool at ", before, " of ", options_.capacity_bytes,
             " bytes; removed ", removed, " least recently used blocks (", removed_bytes,
             " bytes), kept ", spared, " read meanwhile; now ", used, " bytes");
}

}  // namespace kvtier::cluster
