// ClusterSweeper: keeps a cluster tier's pool under a configured capacity. RADOS has no expiry, so
// one node at a time, the holder of the pool's eviction lease (a cls_lock on kvtier.evict-lease,
// renewed while it sweeps and left to expire when the node dies), lists every block object with
// its last use (the kvtier.read attribute, set by uses; the write time until the first) and, above
// the high watermark, removes the least recently used ones until the pool is under the low one.
// Each removal is one operation guarded by the last use the listing saw, so a block read after the
// listing stays, and a block removed during a read is that read's miss. Thread-safe.
#ifndef KVTIER_DAEMON_CLUSTER_CLUSTER_SWEEPER_H_
#define KVTIER_DAEMON_CLUSTER_CLUSTER_SWEEPER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/cluster/rados_object_store.h"

namespace kvtier::cluster {

struct SweeperOptions {
  uint64_t capacity_bytes = 0;  // bytes of block objects the pool may hold (one copy each)
  double high_watermark = 0.9;  // a sweep starts above high * capacity ...
  double low_watermark = 0.8;   // ... and removes down to low * capacity
  absl::Duration interval = absl::Seconds(30);
  std::string cookie;                   // this node's name for the lease (unique per process)
  size_t max_listed = size_t{1} << 22;  // objects one sweep looks at
  // Called (on the sweeper's thread) for each block it removed. May be empty.
  std::function<void(const BlockObject&)> removed;
};

struct SweeperStats {
  uint64_t sweeps = 0;      // sweeps this node ran as the lease holder
  uint64_t lease_busy = 0;  // sweeps skipped because another node holds the lease
  uint64_t removed = 0, removed_bytes = 0;
  uint64_t spared = 0;        // chosen, but used after the listing: kept
  uint64_t already_gone = 0;  // chosen, but removed by someone else first
  uint64_t errors = 0;
  // The pool as this node's last sweep listed it (0 until it held the lease once).
  uint64_t used_bytes = 0, objects = 0;
};

class ClusterSweeper {
 public:
  // `objects` gives the connected object store, or null while the tier cannot be used (the
  // sweep then waits). Starts the thread.
  ClusterSweeper(std::function<RadosObjectStore*()> objects, SweeperOptions options);
  ~ClusterSweeper();  // stops the thread after its current sweep
  ClusterSweeper(const ClusterSweeper&) = delete;
  ClusterSweeper& operator=(const ClusterSweeper&) = delete;

  SweeperStats Stats() const;

 private:
  void Loop();
  void SweepOnce(RadosObjectStore& objects);

  const std::function<RadosObjectStore*()> objects_;
  const SweeperOptions options_;
  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  SweeperStats stats_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace kvtier::cluster

#endif  // KVTIER_DAEMON_CLUSTER_CLUSTER_SWEEPER_H_
