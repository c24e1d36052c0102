// StoreStats: a snapshot of the store's counters and gauges, the numbers kvtierd exports as
// Prometheus metrics. Plain data; produced by BlockStore::Stats().
#ifndef KVTIER_DAEMON_STORE_STORE_STATS_H_
#define KVTIER_DAEMON_STORE_STORE_STATS_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "common/histogram.h"
#include "daemon/index/block_index.h"
#include "daemon/io/block_file.h"

namespace kvtier::store {

struct TierStats {
  uint64_t capacity_bytes = 0;
  uint64_t used_bytes = 0;  // bytes of allocated slots
  uint64_t blocks = 0;
  uint64_t hits = 0;               // reads served by this tier
  uint64_t bytes_in = 0;           // block bytes written into this tier (GPU tier: hot page bytes)
  uint64_t bytes_out = 0;          // block bytes read from this tier (GPU tier: hot page bytes)
  uint64_t checksum_failures = 0;  // copies in this tier that failed verification when read
};

struct StoreStats {
  std::array<TierStats, 3> tiers;   // indexed by index::Tier: gpu, host, disk
  uint64_t indexed_blocks = 0;      // entries in the in-memory index
  uint64_t index_memory_bytes = 0;  // its estimated size (table plus entries)
  uint64_t misses = 0;
  uint64_t puts = 0;
  uint64_t duplicate_puts = 0;
  uint64_t put_rejected = 0;           // no room or over quota
  uint64_t evictions_gpu_to_host = 0;  // hot pages encoded into the host tier
  uint64_t evictions_gpu_dropped = 0;  // hot pages dropped because their encode failed
  uint64_t evictions_host_to_disk = 0;
  uint64_t evictions_host_dropped = 0;     // left host without going to disk (not admitted/full)
  uint64_t evictions_host_copy_freed = 0;  // host copy freed, disk copy kept
  uint64_t evictions_disk_dropped = 0;
  uint64_t blocks_written_to_disk = 0;  // disk copies made: demotions, durable puts, flushes
  uint64_t evictions_quota = 0;         // removed to bring a namespace under its quota
  uint64_t removed = 0;                 // Remove() and ClearNamespace()
  uint64_t checksum_failures = 0;       // blocks that failed verification when read (all tiers)
  uint64_t io_errors = 0;               // disk reads or writes that failed
  uint64_t pinned_blocks = 0;           // gauge
  uint64_t migrating_blocks = 0;        // gauge: disk writes in flight
  uint64_t unsynced_index_writes = 0;   // gauge
  uint64_t quarantined_slots = 0;      // gauge: freed disk (and persistent host) slots awaiting the
                                       // commit of their index record's deletion
  uint64_t index_commit_failures = 0;  // index writes that failed (they are retried)
  index::IndexHealth index_health;     // whether the index takes writes now, and why not
  LatencyHistogram::Snapshot read_latency;  // Acquire, microseconds
  LatencyHistogram::Snapshot put_latency;   // Put/Commit, microseconds
  std::vector<io::BlockFileStats> disk_files;
  index::IndexStats index;
};

}  // namespace kvtier::store

#endif  // KVTIER_DAEMON_STORE_STORE_STATS_H_
