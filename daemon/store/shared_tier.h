// SharedTier: the key-addressed tier below the node's slot tiers (StorageTier: GPU, host, disk),
// shared by every node of a fleet. Its blocks are named by (namespace, hash), written once by
// whichever node had them first, and may be held by no local entry at all, so the store does not
// allocate in it and keeps no entry per block (docs/ARCHITECTURE.md, "Where a fourth tier goes").
// The policy reaches it at three points: write-behind (Offer), the missing tail of a chain's
// lookup (LookupTail) and the fetch of remote blocks into the store before an onboard (Fetch).
// The cluster tier on Ceph RADOS (daemon/cluster/cluster_tier.h) implements it.
//
// Every method is thread-safe and bounded: none waits past its deadline (or, for Offer, at all),
// and while the tier is degraded (unreachable, failing or slow) the reads return at once with
// nothing, so the node's own tiers keep serving.
#ifndef KVTIER_DAEMON_STORE_SHARED_TIER_H_
#define KVTIER_DAEMON_STORE_SHARED_TIER_H_

#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "absl/types/span.h"
#include "daemon/index/block_record.h"

namespace kvtier::store {

// Why a block is offered to the shared tier's write-behind; the tier's admission rule decides.
enum class SharedOffer : uint8_t {
  kStored = 0,         // it became visible in the node (Put, Commit, PutHot)
  kStoredDurable = 1,  // the same, stored as durable
  kReachedDisk = 2,    // the node wrote it to its disk tier (demotion or write-through)
};

// What the tier reports: for metrics, Stats and readiness.
struct SharedTierStats {
  bool degraded = false;
  std::string degraded_reason;       // empty when not degraded
  uint64_t degraded_since_unix = 0;  // seconds; 0 when not degraded
  uint64_t degraded_episodes = 0;
  bool writes_paused_full = false;  // the pool said it is full; writes resume after a backoff
  // Write-behind.
  uint64_t queue_depth = 0, queue_capacity = 0;
  uint64_t offered = 0;  // blocks the admission rule took
  uint64_t written = 0;  // objects created
  uint64_t already = 0;  // blocks another node (or an earlier write) had stored
  uint64_t written_bytes = 0;
  uint64_t dropped_queue_full = 0, dropped_degraded = 0, dropped_full = 0, dropped_gone = 0;
  uint64_t dropped_lost_events = 0;  // offers the node's event log no longer held
  uint64_t write_errors = 0;
  // Writes whose block the cluster client still held well after the write ended (a message
  // queued to an unresponsive OSD); the tier returned it anyway (docs/CLUSTER.md).
  uint64_t writes_unreleased = 0;
  // Reads.
  uint64_t lookups = 0;          // LookupTail calls that asked the tier
  uint64_t lookup_blocks = 0;    // blocks they found
  uint64_t lookup_timeouts = 0;  // calls that reached their deadline (counted as misses)
  uint64_t fetched = 0;          // blocks fetched into the store
  uint64_t fetched_bytes = 0;
  uint64_t fetch_misses = 0;      // asked for, absent
  uint64_t verify_failures = 0;   // present but not the block asked for, or damaged: a miss
  uint64_t read_errors = 0;       // failed or timed-out reads (counted as misses)
  uint64_t skipped_degraded = 0;  // reads not attempted because the tier was degraded
  // Reads the cluster client holds now, and the most it held at once since it connected.
  uint64_t reads_in_flight = 0, reads_in_flight_peak = 0;
  // Capacity (the sweeper keeps the pool under it; 0: no sweeper, the pool's quota is the bound),
  // and the pool as this node's last sweep listed it.
  uint64_t capacity_bytes = 0, used_bytes = 0, objects = 0;
  uint64_t sweeps = 0,
           lease_busy = 0;  // sweeps run as the lease holder; skipped (another holds it)
  uint64_t evicted = 0, evicted_bytes = 0;  // least recently used blocks removed by this node
  uint64_t evict_spared = 0;                // chosen, but read after the listing: kept
};

class SharedTier {
 public:
  virtual ~SharedTier() = default;

  // Offers blocks of `ns` for write-behind. Queued when the admission rule takes them, dropped
  // (counted) when the queue is full or the tier degraded. Never blocks; called in the store's
  // event order.
  virtual void Offer(index::NamespaceId ns, absl::Span<const index::BlockHash> hashes,
                     SharedOffer why) = 0;
  // Counts `blocks` offers lost before they were made (the event log dropped them).
  virtual void CountLostOffers(uint64_t blocks) = 0;

  // How many leading blocks of `chain` (hashes of `ns` that continue a prefix the node holds)
  // the tier holds. 0 at once while degraded; a deadline reached is a 0 (counted).
  virtual size_t LookupTail(index::NamespaceId ns, absl::Span<const index::BlockHash> chain,
                            absl::Time deadline) = 0;

  // Puts into the node's store the blocks of `hashes` (of `ns`) that the store does not hold
  // and the tier does, each read whole and verified (header, checksums, namespace, hash) before
  // it is stored; a block that fails is a miss (counted). `max_block_bytes` bounds what is read.
  // Returns how many it stored.
  virtual size_t Fetch(index::NamespaceId ns, absl::Span<const index::BlockHash> hashes,
                       uint64_t max_block_bytes, absl::Time deadline) = 0;

  virtual SharedTierStats Stats() const = 0;
};

}  // namespace kvtier::store

#endif  // KVTIER_DAEMON_STORE_SHARED_TIER_H_
