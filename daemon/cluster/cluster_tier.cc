#include "daemon/cluster/cluster_tier.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "codec/cold_block.h"
#include "common/logging.h"

namespace kvtier::cluster {
namespace {

// Reads a fetch keeps in flight (each into a buffer of at most the engine's block size).
constexpr size_t kFetchWindow = 64;

}  // namespace

ClusterTier::ClusterTier(const ClusterOptions& cluster, store::BlockStore* store,
                         ClusterTierOptions options)
    : cluster_(cluster), store_(store), options_(std::move(options)) {
  stats_.queue_capacity = options_.queue_capacity;
  degraded_reason_ = "not connected yet";
  degraded_since_ = absl::Now();
}

absl::StatusOr<std::unique_ptr<ClusterTier>> ClusterTier::Create(const ClusterOptions& cluster,
                                                                 store::BlockStore* store,
                                                                 ClusterTierOptions options) {
  if (store == nullptr) return absl::InvalidArgumentError("a cluster tier needs a block store");
  if (cluster.pool.empty()) return absl::InvalidArgumentError("cluster tier: no pool");
  if (options.queue_capacity == 0 || options.write_threads == 0 || options.write_threads > 256) {
    return absl::InvalidArgumentError(
        "cluster tier: queue capacity must be positive and write threads 1 to 256");
  }
  if (!options.rados_namespace_of) {
    return absl::InvalidArgumentError("cluster tier: rados_namespace_of is required");
  }
  std::unique_ptr<ClusterTier> tier(new ClusterTier(cluster, store, std::move(options)));
  // The first connection is tried at once, so that a reachable cluster serves from the start.
  if (absl::Status st = tier->Connect(); !st.ok()) {
    absl::MutexLock lock(&tier->mu_);
    tier->degraded_reason_ = absl::StrCat("not connected: ", st.ToString());
    KVTIER_LOG(kWarning, "cluster tier: ", tier->degraded_reason_, " (retried every ",
               absl::FormatDuration(tier->options_.probe_interval),
               "; local tiers serve meanwhile)");
  }
  for (uint32_t i = 0; i < tier->options_.write_threads; ++i) {
    tier->writers_.emplace_back([t = tier.get()] { t->WriterLoop(); });
  }
  tier->prober_ = std::thread([t = tier.get()] { t->ProberLoop(); });
  if (tier->options_.sweeper.capacity_bytes > 0) {
    SweeperOptions sweeper = tier->options_.sweeper;
    if (store::StoreEventSink* events = tier->options_.events; events != nullptr) {
      sweeper.removed = [events](const BlockObject& o) {
        const std::optional<BlockKey> key = ParseObjectName(o.name);
        if (!key.has_value()) return;
        store::StoreEvent e;
        e.kind = store::StoreEventKind::kRemoved;
        e.shared_tier = true;
        e.removed_by = store::RemovedBy::kEvicted;
        e.ns = key->ns;
        e.hash = key->hash;
        events->OnEvent(e);
      };
    }
    tier->sweeper_ = std::make_unique<ClusterSweeper>(
        [t = tier.get()]() -> RadosObjectStore* {
          return t->degraded() ? nullptr : t->objects_.load();
        },
        std::move(sweeper));
  }
  return tier;
}

absl::Status ClusterTier::Connect() {
  absl::StatusOr<std::unique_ptr<RadosObjectStore>> connected = RadosObjectStore::Connect(cluster_);
  if (!connected.ok()) return connected.status();
  if (!options_.key_fingerprint.empty()) {
    absl::StatusOr<std::string> fleet =
        (*connected)->ClaimValue("", "kvtier.fleet", options_.key_fingerprint);
    if (!fleet.ok()) return fleet.status();
    if (*fleet != options_.key_fingerprint) {
      return absl::FailedPreconditionError(
          absl::StrCat("pool ", cluster_.pool, " belongs to a fleet with another key (fingerprint ",
                       *fleet, ", this node's ", options_.key_fingerprint,
                       "): every node sharing a pool needs the same cluster.key_file"));
    }
  }
  owned_ = std::move(*connected);
  objects_.store(owned_.get());
  absl::MutexLock lock(&mu_);
  degraded_reason_.clear();
  KVTIER_LOG(kInfo, "cluster tier: connected to pool ", cluster_.pool, " as client.",
             cluster_.client_id);
  return absl::OkStatus();
}

ClusterTier::~ClusterTier() {
  sweeper_.reset();
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  for (std::thread& t : writers_) t.join();
  prober_.join();
}

bool ClusterTier::Admits(store::SharedOffer why) const {
  switch (options_.admission) {
    case ClusterAdmission::kAll:
      return true;
    case ClusterAdmission::kDisk:
      return why != store::SharedOffer::kStored;
    case ClusterAdmission::kDurable:
      return why == store::SharedOffer::kStoredDurable;
  }
  return false;
}

bool ClusterTier::degraded() const {
  absl::MutexLock lock(&mu_);
  return !degraded_reason_.empty();
}

void ClusterTier::Degrade(const absl::Status& status, absl::string_view what) {
  absl::MutexLock lock(&mu_);
  if (status.code() == absl::StatusCode::kResourceExhausted) {
    // A full pool stops writes, not reads.
    if (absl::Now() >= writes_paused_until_) {
      KVTIER_LOG(kWarning, "cluster tier: the pool is full (", status.message(),
                 "); write-behind pauses for ", absl::FormatDuration(options_.full_backoff));
    }
    writes_paused_until_ = absl::Now() + options_.full_backoff;
    return;
  }
  if (!degraded_reason_.empty()) return;
  degraded_reason_ = absl::StrCat(what, ": ", status.ToString());
  degraded_since_ = absl::Now();
  ++stats_.degraded_episodes;
  KVTIER_LOG(kWarning, "cluster tier degraded (local tiers keep serving; retried every ",
             absl::FormatDuration(options_.probe_interval), "): ", degraded_reason_);
}

std::optional<std::string> ClusterTier::RadosNamespace(index::NamespaceId ns) {
  {
    absl::MutexLock lock(&mu_);
    auto it = rados_ns_.find(ns);
    if (it != rados_ns_.end()) return it->second;
  }
  std::optional<std::string> derived = options_.rados_namespace_of(ns);
  if (derived.has_value()) {
    absl::MutexLock lock(&mu_);
    rados_ns_.emplace(ns, *derived);
  }
  return derived;
}

void ClusterTier::Offer(index::NamespaceId ns, absl::Span<const index::BlockHash> hashes,
                        store::SharedOffer why) {
  if (!Admits(why)) return;
  absl::MutexLock lock(&mu_);
  for (const index::BlockHash& h : hashes) {
    if (!degraded_reason_.empty()) {
      ++stats_.dropped_degraded;
    } else if (absl::Now() < writes_paused_until_) {
      ++stats_.dropped_full;
    } else {
      Enqueue(index::BlockKey{ns, h}, /*touch=*/false);
    }
  }
}

void ClusterTier::Enqueue(const index::BlockKey& key, bool touch) {
  if (queue_.size() >= options_.queue_capacity) {
    if (!touch) ++stats_.dropped_queue_full;
    return;
  }
  queue_.push_back(Job{key, touch});
  if (!touch) ++stats_.offered;
}

void ClusterTier::CountLostOffers(uint64_t blocks) {
  absl::MutexLock lock(&mu_);
  stats_.dropped_lost_events += blocks;
}

void ClusterTier::WriterLoop() {
  for (;;) {
    Job job;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](ClusterTier* t)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(t->mu_) { return t->stop_ || !t->queue_.empty(); },
          this));
      if (stop_) return;
      job = queue_.front();
      queue_.pop_front();
      ++in_flight_;
    }
    if (job.touch) {
      TouchOne(job.key);
    } else {
      WriteOne(job.key);
    }
    absl::MutexLock lock(&mu_);
    --in_flight_;
  }
}

void ClusterTier::WriteOne(const index::BlockKey& key) {
  auto count = [this](uint64_t store::SharedTierStats::*field, uint64_t n = 1) {
    absl::MutexLock lock(&mu_);
    stats_.*field += n;
  };
  {
    absl::MutexLock lock(&mu_);
    if (!degraded_reason_.empty()) {
      ++stats_.dropped_degraded;
      return;
    }
    if (absl::Now() < writes_paused_until_) {
      ++stats_.dropped_full;
      return;
    }
  }
  std::optional<std::string> rados_ns = RadosNamespace(key.ns);
  if (!rados_ns.has_value()) return count(&store::SharedTierStats::dropped_gone);
  // A copy the daemon makes for itself: not a read (no LRU touch, reuse flag or hit).
  absl::StatusOr<std::optional<store::PinnedBlock>> block = store_->AcquireUncounted(key);
  if (!block.ok() || !block->has_value()) return count(&store::SharedTierStats::dropped_gone);
  const absl::Span<const uint8_t> bytes = (*block)->bytes();
  absl::StatusOr<codec::ColdBlockHeader> header = codec::ParseColdBlockHeader(bytes);
  if (!header.ok()) return count(&store::SharedTierStats::dropped_gone);
  BlockAttrs attrs;
  attrs.codec = static_cast<uint32_t>(header->codec);
  attrs.layout_fingerprint = header->layout_fingerprint;
  attrs.payload_checksum = header->payload_crc32c;
  attrs.writer_node = options_.writer_node;
  attrs.created_unix_micros = absl::ToUnixMicros(absl::Now());
  const absl::Status put =
      objects_.load()->Put(*rados_ns, BlockKey{key.ns, key.hash}, bytes, attrs);
  if (put.ok()) {
    if (options_.events != nullptr) {
      store::StoreEvent e;
      e.kind = store::StoreEventKind::kStored;
      e.shared_tier = true;
      e.ns = key.ns;
      e.hash = key.hash;
      e.block_bytes = bytes.size();
      options_.events->OnEvent(e);
    }
    absl::MutexLock lock(&mu_);
    ++stats_.written;
    stats_.written_bytes += bytes.size();
  } else if (absl::IsAlreadyExists(put)) {
    count(&store::SharedTierStats::already);
    // Another node stored it, and this one has it again: a use, for the sweeper's order.
    TouchOne(key);
  } else {
    count(&store::SharedTierStats::write_errors);
    Degrade(put, "write-behind");
  }
}

void ClusterTier::TouchOne(const index::BlockKey& key) {
  RadosObjectStore* objects = objects_.load();
  if (objects == nullptr || degraded()) return;
  std::optional<std::string> rados_ns = RadosNamespace(key.ns);
  if (!rados_ns.has_value()) return;
  // A block removed meanwhile (NotFound) needs nothing; other failures only cost its place in
  // the sweeper's order.
  objects->Touch(*rados_ns, BlockKey{key.ns, key.hash}, absl::ToUnixMicros(absl::Now()))
      .IgnoreError();
}

void ClusterTier::ProberLoop() {
  // An object nobody writes: a stat of it answers ENOENT from a healthy cluster.
  const BlockKey probe{0, index::BlockHash{}};
  absl::MutexLock lock(&mu_);
  for (;;) {
    mu_.AwaitWithTimeout(absl::Condition(&stop_), options_.probe_interval);
    if (stop_) return;
    if (degraded_reason_.empty()) continue;
    mu_.Unlock();
    RadosObjectStore* objects = objects_.load();
    absl::Status answered;
    if (objects == nullptr) {
      answered = Connect();
    } else {
      // As long as any operation may take: a cluster that answers within it is not down.
      answered = objects->Exists("", {probe}, absl::Now() + cluster_.osd_op_timeout).status();
    }
    mu_.Lock();
    if (!answered.ok() && ++failed_probes_ % 10 == 1) {
      KVTIER_LOG(kWarning, "cluster tier still degraded (", degraded_reason_,
                 "); the probe got: ", answered.ToString());
    }
    if (objects == nullptr && !answered.ok()) {
      degraded_reason_ = absl::StrCat("not connected: ", answered.ToString());
    }
    if (answered.ok() && !degraded_reason_.empty()) {
      KVTIER_LOG(kInfo, "cluster tier recovered after ",
                 absl::FormatDuration(absl::Trunc(absl::Now() - degraded_since_, absl::Seconds(1))),
                 " (", degraded_reason_, ")");
      degraded_reason_.clear();
      slow_lookups_ = 0;
      failed_probes_ = 0;
    }
  }
}

std::optional<std::string> ClusterTier::ReadableNamespace(index::NamespaceId ns) {
  if (degraded()) {
    absl::MutexLock lock(&mu_);
    ++stats_.skipped_degraded;
    return std::nullopt;
  }
  return RadosNamespace(ns);
}

size_t ClusterTier::LookupTail(index::NamespaceId ns, absl::Span<const index::BlockHash> chain,
                               absl::Time deadline) {
  if (chain.empty()) return 0;
  std::optional<std::string> rados_ns = ReadableNamespace(ns);
  if (!rados_ns.has_value()) return 0;
  std::vector<BlockKey> keys;
  keys.reserve(chain.size());
  for (const index::BlockHash& h : chain) keys.push_back(BlockKey{ns, h});
  deadline = std::min(deadline, absl::Now() + options_.lookup_timeout);
  // Only leading blocks count, so the first one goes alone: a tail the cluster does not start
  // (most lookups of a new prompt) costs one operation, not one per block. When it is there, the
  // rest goes in one batch.
  absl::StatusOr<std::vector<bool>> present =
      objects_.load()->Exists(*rados_ns, absl::MakeConstSpan(keys).first(1), deadline);
  if (present.ok() && (*present)[0] && keys.size() > 1) {
    absl::StatusOr<std::vector<bool>> rest =
        objects_.load()->Exists(*rados_ns, absl::MakeConstSpan(keys).subspan(1), deadline);
    if (rest.ok()) {
      present->insert(present->end(), rest->begin(), rest->end());
    } else {
      present = rest.status();
    }
  }
  if (!present.ok()) {
    bool slow = false;
    {
      absl::MutexLock lock(&mu_);
      ++stats_.lookups;
      if (absl::IsDeadlineExceeded(present.status())) {
        ++stats_.lookup_timeouts;
        slow = ++slow_lookups_ >= options_.slow_lookups;
      } else {
        ++stats_.read_errors;
      }
    }
    if (slow || !absl::IsDeadlineExceeded(present.status())) Degrade(present.status(), "lookup");
    return 0;
  }
  size_t n = 0;
  while (n < present->size() && (*present)[n]) ++n;
  absl::MutexLock lock(&mu_);
  slow_lookups_ = 0;
  ++stats_.lookups;
  stats_.lookup_blocks += n;
  return n;
}

size_t ClusterTier::Fetch(index::NamespaceId ns, absl::Span<const index::BlockHash> hashes,
                          uint64_t max_block_bytes, absl::Time deadline) {
  // The usual onboard finds every block at home: one pass of the store's index says so, and
  // the cluster is not asked (nor counted as skipped while degraded).
  const size_t local = store_->LookupChain(ns, hashes);
  if (local == hashes.size()) return 0;
  std::optional<std::string> rados_ns = ReadableNamespace(ns);
  if (!rados_ns.has_value()) return 0;
  // Only what the node lacks, once each.
  std::vector<BlockKey> keys;
  absl::flat_hash_set<index::BlockHash> seen;
  for (const index::BlockHash& h : hashes.subspan(local)) {
    if (!seen.insert(h).second) continue;
    if (store_->LookupChain(ns, absl::MakeConstSpan(&h, 1)) == 1) continue;
    keys.push_back(BlockKey{ns, h});
  }
  if (keys.empty()) return 0;
  deadline = std::min(deadline, absl::Now() + options_.fetch_timeout);
  size_t stored = 0;
  uint64_t stored_bytes = 0, misses = 0, rejected = 0;
  store::PutOptions put;
  put.origin = "cluster";  // the write-behind feed skips what came from the cluster
  // Up to kFetchWindow reads in flight, each block stored as its read answers: the blocks held at
  // once stay bounded, and a slow read holds up no other.
  const absl::Status got = objects_.load()->GetWindowed(
      *rados_ns, keys, kFetchWindow, deadline,
      [&](size_t i, std::optional<ObjectBytes> bytes) {
        if (!bytes.has_value()) {
          ++misses;
          return true;
        }
        const index::BlockKey key{keys[i].ns, keys[i].hash};
        const absl::Status st = store_->Put(key, bytes->bytes(), put);
        if (st.ok()) {
          ++stored;
          stored_bytes += bytes->size();
          absl::MutexLock lock(&mu_);
          Enqueue(key, /*touch=*/true);
        } else if (absl::IsInvalidArgument(st)) {
          ++rejected;  // the store's own verification refused it: a miss
        } else {
          KVTIER_LOG(kWarning,
                     "cluster tier: a fetched block could not be stored: ", st.ToString());
          ++misses;
        }
        return true;
      },
      max_block_bytes);
  if (!got.ok()) {
    {
      absl::MutexLock lock(&mu_);
      ++stats_.read_errors;
    }
    Degrade(got, "fetch");
  }
  absl::MutexLock lock(&mu_);
  stats_.fetched += stored;
  stats_.fetched_bytes += stored_bytes;
  stats_.fetch_misses += misses;
  stats_.verify_failures += rejected;
  return stored;
}

store::SharedTierStats ClusterTier::Stats() const {
  store::SharedTierStats s;
  {
    absl::MutexLock lock(&mu_);
    s = stats_;
    s.queue_depth = queue_.size() + in_flight_;
    s.degraded = !degraded_reason_.empty();
    s.degraded_reason = degraded_reason_;
    s.degraded_since_unix = s.degraded ? absl::ToUnixSeconds(degraded_since_) : 0;
    s.writes_paused_full = absl::Now() < writes_paused_until_;
  }
  if (RadosObjectStore* objects = objects_.load(); objects != nullptr) {
    s.verify_failures += objects->counters().verify_failures.load();
    s.writes_unreleased = objects->counters().writes_unreleased.load();
    s.reads_in_flight = objects->counters().reads_in_flight.load();
    s.reads_in_flight_peak = objects->counters().reads_in_flight_peak.load();
  }
  s.capacity_bytes = options_.sweeper.capacity_bytes;
  if (sweeper_ != nullptr) {
    const SweeperStats w = sweeper_->Stats();
    s.used_bytes = w.used_bytes;
    s.objects = w.objects;
    s.sweeps = w.sweeps;
    s.lease_busy = w.lease_busy;
    s.evicted = w.removed;
    s.evicted_bytes = w.removed_bytes;
    s.evict_spared = w.spared;
  }
  return s;
}

bool ClusterTier::WaitIdle(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(absl::Condition(
                                  +[](ClusterTier* t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(t->mu_) {
                                    return t->queue_.empty() && t->in_flight_ == 0;
                                  },
                                  this),
                              timeout);
}

}  // namespace kvtier::cluster
