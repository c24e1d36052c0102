// ClusterTier: the shared tier of a fleet on Ceph RADOS (docs/CLUSTER.md): the policy around a
// RadosObjectStore. Write-behind copies blocks the admission rule takes from the node's store
// into the pool on threads of its own, through a bounded queue; lookups of a chain's missing tail
// ask the pool which blocks exist in one batched operation; fetches read blocks whole, verified,
// into the node's store before an onboard serves them. Failures mark the tier degraded: reads
// then return at once with nothing and offers are dropped (counted) until a probe finds the
// cluster answering again. Thread-safe.
#ifndef KVTIER_DAEMON_CLUSTER_CLUSTER_TIER_H_
#define KVTIER_DAEMON_CLUSTER_CLUSTER_TIER_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/cluster/cluster_sweeper.h"
#include "daemon/cluster/rados_object_store.h"
#include "daemon/store/block_store.h"
#include "daemon/store/shared_tier.h"

namespace kvtier::cluster {

// Which blocks write-behind copies into the cluster (cluster.admission).
enum class ClusterAdmission : uint8_t {
  kDurable = 0,  // blocks stored as durable
  kDisk = 1,     // blocks the node writes to its disk tier (and durable ones)
  kAll = 2,      // every block the node stores
};

struct ClusterTierOptions {
  ClusterAdmission admission = ClusterAdmission::kAll;
  uint32_t queue_capacity = 4096;                           // blocks waiting for write-behind
  uint32_t write_threads = 4;                               // write-behind operations in flight
  absl::Duration lookup_timeout = absl::Milliseconds(250);  // a Lookup's wait for the cluster
  absl::Duration fetch_timeout = absl::Seconds(2);          // an Onboard's wait for its fetch
  absl::Duration probe_interval = absl::Seconds(2);         // how often a degraded tier retries
  absl::Duration full_backoff = absl::Seconds(10);          // writes pause this long on a full pool
  // Consecutive lookups that reach their deadline before the tier counts as slow (degraded).
  uint32_t slow_lookups = 3;
  std::string writer_node;      // recorded with each object (the host name)
  std::string key_fingerprint;  // identifies the node's key (see Create); empty: not checked
  // Cluster-wide eviction; capacity_bytes 0: none (the pool's quota is the only bound).
  SweeperOptions sweeper;
  // Receives a kStored event (shared_tier) for each object this node creates and a kRemoved one
  // for each block its sweeps remove; borrowed, must outlive the tier. Null: none.
  store::StoreEventSink* events = nullptr;
  // The RADOS namespace of a kvtier namespace (derived from its tenant); nullopt for a namespace
  // the node does not know, whose blocks are neither read nor written. Called without locks.
  std::function<std::optional<std::string>(index::NamespaceId)> rados_namespace_of;
};

class ClusterTier final : public store::SharedTier {
 public:
  // Starts the write-behind threads and the prober, which connects to the cluster (`cluster`)
  // and reconnects until it succeeds: until then the tier is degraded ("not connected: why"),
  // so a node whose cluster is down at start serves from its own tiers and joins later. On
  // connecting it checks the fleet's key: the first node to use the pool records
  // `key_fingerprint` in it (object kvtier.fleet), and a node with another key stays degraded
  // (its namespace ids would name none of the fleet's blocks). `store` is borrowed and must
  // outlive the tier. InvalidArgument for options out of range.
  static absl::StatusOr<std::unique_ptr<ClusterTier>> Create(const ClusterOptions& cluster,
                                                             store::BlockStore* store,
                                                             ClusterTierOptions options);
  // Stops the threads; queued blocks are dropped (they stay in the node's tiers).
  ~ClusterTier() override;
  ClusterTier(const ClusterTier&) = delete;
  ClusterTier& operator=(const ClusterTier&) = delete;

  void Offer(index::NamespaceId ns, absl::Span<const index::BlockHash> hashes,
             store::SharedOffer why) override;
  void CountLostOffers(uint64_t blocks) override;
  size_t LookupTail(index::NamespaceId ns, absl::Span<const index::BlockHash> chain,
                    absl::Time deadline) override;
  size_t Fetch(index::NamespaceId ns, absl::Span<const index::BlockHash> hashes,
               uint64_t max_block_bytes, absl::Time deadline) override;
  store::SharedTierStats Stats() const override;

  // Waits until the write-behind queue is empty and no write is in flight, or `timeout` passed;
  // true when it drained (tests, kvtierctl drain).
  bool WaitIdle(absl::Duration timeout);

  // The connected object store, or null while not connected.
  RadosObjectStore* objects() const { return objects_.load(); }

 private:
  ClusterTier(const ClusterOptions& cluster, store::BlockStore* store, ClusterTierOptions options);
  // Connects and checks the fleet's key; OK once connected.
  absl::Status Connect();
  bool Admits(store::SharedOffer why) const;
  std::optional<std::string> RadosNamespace(index::NamespaceId ns);
  // RadosNamespace for a read, or nullopt (counted as skipped) while the tier is degraded.
  std::optional<std::string> ReadableNamespace(index::NamespaceId ns);
  void WriterLoop();
  void WriteOne(const index::BlockKey& key);
  void ProberLoop();
  // Marks the tier degraded because `status` (of `what`) failed; logs the first failure.
  void Degrade(const absl::Status& status, absl::string_view what);
  bool degraded() const;

  const ClusterOptions cluster_;
  std::unique_ptr<RadosObjectStore> owned_;          // set once, by the prober
  std::atomic<RadosObjectStore*> objects_{nullptr};  // owned_, once it is set
  store::BlockStore* const store_;
  const ClusterTierOptions options_;

  mutable absl::Mutex mu_;
  // Write-behind's work: a block to write, or one to touch (a fetched block's use, for the
  // sweeper's order).
  struct Job {
    index::BlockKey key;
    bool touch = false;
  };
  void Enqueue(const index::BlockKey& key, bool touch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void TouchOne(const index::BlockKey& key);
  std::deque<Job> queue_ ABSL_GUARDED_BY(mu_);
  uint32_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::string degraded_reason_ ABSL_GUARDED_BY(mu_);  // empty: healthy
  absl::Time degraded_since_ ABSL_GUARDED_BY(mu_);
  absl::Time writes_paused_until_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  uint32_t slow_lookups_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t failed_probes_ ABSL_GUARDED_BY(mu_) = 0;  // since the tier became degraded
  absl::flat_hash_map<index::NamespaceId, std::string> rados_ns_ ABSL_GUARDED_BY(mu_);
  store::SharedTierStats stats_ ABSL_GUARDED_BY(mu_);

  std::vector<std::thread> writers_;
  std::thread prober_;
  std::unique_ptr<ClusterSweeper> sweeper_;  // when options_.sweeper.capacity_bytes > 0
};

}  // namespace kvtier::cluster

#endif  // KVTIER_DAEMON_CLUSTER_CLUSTER_TIER_H_
