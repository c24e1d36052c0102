// BlockStore's request paths: Reserve/Commit/Put, lookups, reads, removal, namespaces, stats.
//
// One mutex guards the in-memory state; no I/O, copy or checksum runs under it. A block's bytes
// are verified once when they enter (Commit) and on every read from disk, where the header
// checksum recorded at store time must also match, so a slot reused after a crash can never
// pass for the block that lived there before. All index writes are queued in the order the
// memory state changed and applied by the background thread (the Demoter, demoter.h); a
// caller who needs durability waits for the commit of its sequence number.
#include "daemon/store/block_store.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "codec/cold_block.h"
#include "common/coding.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "daemon/store/block_store_internal.h"
#include "kernels/device.h"

namespace kvtier::store {
namespace internal {

uint64_t NowMs(const BlockStoreOptions& options) {
  if (options.now_ms) return options.now_ms();
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

absl::StatusOr<const kernels::GpuBlockCodec*> HotCodecOf(const State& s, NamespaceId ns) {
  auto hot = s.hot.find(ns);
  if (hot == s.hot.end()) {
    return absl::FailedPreconditionError(
        absl::StrFormat("namespace %d has no hot-page layout (SetHotLayout)", ns));
  }
  return hot->second;
}

void CountNamespaceRead(State& s, NamespaceId ns, bool hit, uint64_t now_ms) {
  s.namespaces.CountRead(ns, hit, now_ms);
}

index::BlockRecord RecordFor(const State& s, const Entry& e) {
  index::BlockRecord r = e.rec;
  if (e.disk.has_value()) {
    r.tier = Tier::kDisk;
    r.device = e.disk->file;
    r.offset = e.disk->offset;
  } else {
    r.tier = Tier::kHost;
    r.device = 0;
    r.offset = *e.host;
  }
  (void)s;
  return r;
}

absl::Status IndexRefusal(const State& s) {
  if (!s.index_status.ok()) return s.index_status;
  return absl::ResourceExhaustedError("the index takes no writes now");
}

bool RefreshIndexHealth(State& s, bool force) {
  const absl::Time now = absl::Now();
  if (!force && now - s.index_checked < absl::Milliseconds(100)) return false;
  s.index_checked = now;
  s.mu.Unlock();  // Health() may reopen the index (a few milliseconds)
  const index::IndexHealth health = s.index->Health();
  s.mu.Lock();
  const bool was = s.index_writable;
  s.index_writable = health.writable();
  s.index_status = health.ToStatus();
  if (was != s.index_writable) s.changed_cv.SignalAll();  // durable waiters give up or go on
  return was != s.index_writable;
}

uint64_t QueuePut(State& s, const Entry& e) {
  s.pending.emplace_back(e.key, RecordFor(s, e));
  s.work_cv.Signal();
  return ++s.queued_seq;
}

uint64_t QueueDelete(State& s, const BlockKey& key) {
  s.pending.emplace_back(key, std::nullopt);
  s.work_cv.Signal();
  return ++s.queued_seq;
}

namespace {

void Emit(State& s, const StoreEvent& event) {
  if (s.events != nullptr) s.events->OnEvent(event);
}

// Reports that the fastest tier of a visible entry changes from `from` to FastestTier(*e).
void EmitMoved(State& s, const Entry& e, Tier from) {
  if (e.removed() || e.writing() || e.silent || s.events == nullptr) return;
  StoreEvent event;
  event.kind = StoreEventKind::kMoved;
  event.ns = e.key.ns;
  event.hash = e.key.hash;
  event.tier = from;
  event.to_tier = FastestTier(e);
  if (event.to_tier != from) Emit(s, event);
}

}  // namespace

void EmitStored(State& s, const Entry& e, StoredBy by, bool durable, absl::string_view origin) {
  if (e.silent || s.events == nullptr) return;
  StoreEvent event;
  event.kind = StoreEventKind::kStored;
  event.ns = e.key.ns;
  event.hash = e.key.hash;
  event.tier = FastestTier(e);
  event.stored_by = by;
  event.durable = durable;
  event.block_bytes = e.rec.size;
  event.origin = origin;
  Emit(s, event);
}

Entry* InsertWriting(State& s, const BlockKey& key, uint64_t size, uint64_t slot_size) {
  auto entry = std::make_unique<Entry>();
  Entry* e = entry.get();
  e->key = key;
  e->rec.size = static_cast<uint32_t>(size);
  e->slot_size = slot_size;
  s.map.emplace(key, std::move(entry));
  s.namespaces.Charge(key.ns, slot_size);
  return e;
}

void Publish(State& s, Entry* e, const PutOptions& options, uint64_t now_ms, Tier tier,
             uint64_t bytes_in, bool durable) {
  e->MoveTo(EntryState::kVisible);
  s.changed_cv.SignalAll();  // MakeDurable callers may wait for this commit
  e->rec.last_access_ms = now_ms;
  if (options.parent.has_value()) {
    e->rec.parent = *options.parent;
    e->rec.flags |= index::kBlockFlagHasParent;
  }
  e->silent = options.silent;
  if (tier == Tier::kGpu) {
    s.gpu_lru.PushFront(e);
  } else {
    s.host_lru.PushFront(e);
  }
  s.namespaces.Link(e);
  s.namespaces.MarkAccessed(e->key.ns, now_ms);
  EmitStored(s, *e, StoredBy::kPut, durable, options.origin);
  ++s.counters.puts;
  s.counters.bytes_in[static_cast<int>(tier)] += bytes_in;
}

void RecordLatency(LatencyHistogram& histogram, std::chrono::steady_clock::time_point start) {
  histogram.Record(static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                             std::chrono::steady_clock::now() - start)
                                             .count()));
}

void FreeHostCopy(State& s, Entry* e) {
  if (!e->host.has_value()) return;
  const Tier from = FastestTier(*e);
  absl::Status st = s.host_tier->slots().Free(*e->host, e->slot_size);
  if (!st.ok()) KVTIER_LOG(kError, "host tier: ", st.message());
  s.host_used = s.host_tier->used_bytes();
  e->host.reset();
  e->free_host_when_unpinned = false;
  s.host_lru.Remove(e);
  s.changed_cv.SignalAll();
  EmitMoved(s, *e, from);
}

void DropPin(State& s, Entry* e) {
  --e->pins;
  --s.pinned;
  if (e->pins == 0 && !e->removed()) {
    if (e->free_host_when_unpinned) FreeHostCopy(s, e);
    if (e->gpu.has_value() && e->host.has_value()) FreeGpuCopy(s, e);  // demoted while read
  }
  MaybeRelease(s, e);
  s.changed_cv.SignalAll();
}

void FreeGpuCopy(State& s, Entry* e) {
  if (!e->gpu.has_value()) return;
  const Tier from = FastestTier(*e);
  absl::Status st = s.gpu->slots().Free(*e->gpu, e->hot->page_bytes());
  if (!st.ok()) KVTIER_LOG(kError, "GPU tier: ", st.message());
  s.gpu_used = s.gpu->used_bytes();
  e->gpu.reset();
  s.gpu_lru.Remove(e);
  s.changed_cv.SignalAll();
  EmitMoved(s, *e, from);
}

std::optional<TierSlot> AllocateWaiting(State& s, StorageTier& tier, uint64_t size,
                                        uint32_t wait_ms, uint32_t& waiters, const Entry* e) {
  std::optional<TierSlot> slot = tier.Allocate(size);
  if (slot.has_value()) return slot;
  const absl::Time deadline = absl::Now() + absl::Milliseconds(wait_ms);
  ++waiters;
  s.work_cv.Signal();
  auto gone = [&] { return s.stop || (e != nullptr && e->removed()); };
  while (!slot.has_value() && !gone()) {
    // No signal here: the background thread keeps working while there are waiters, and waking
    // it on every change would make the two threads ping-pong over the mutex.
    const bool timed_out = s.changed_cv.WaitWithDeadline(&s.mu, deadline);
    slot = tier.Allocate(size);
    if (timed_out) break;
  }
  --waiters;
  if (slot.has_value() && gone()) {
    (void)tier.Free(*slot, size);
    return std::nullopt;
  }
  return slot;
}

void Detach(State& s, Entry* e, RemovedBy why) {
  if (why != RemovedBy::kSilent && !e->writing() && !e->silent && s.events != nullptr) {
    StoreEvent event;
    event.kind = StoreEventKind::kRemoved;
    event.ns = e->key.ns;
    event.hash = e->key.hash;
    event.tier = FastestTier(*e);
    event.removed_by = why;
    Emit(s, event);
  }
  auto it = s.map.find(e->key);
  s.retired.emplace(e, std::move(it->second));
  s.map.erase(it);
  e->MarkDetached();
  s.host_lru.Remove(e);
  s.gpu_lru.Remove(e);
  s.disk_lru.Remove(e);
  s.namespaces.Release(e);
  if (e->indexed) {
    e->delete_seq = QueueDelete(s, e->key);
    e->indexed = false;
  }
  MaybeRelease(s, e);
}

void MaybeRelease(State& s, Entry* e) {
  if (!e->removed() || e->pins > 0 || e->migrating()) return;
  if (e->host.has_value() && e->delete_seq > s.committed_seq && s.host_tier->persistent()) {
    // A persistent host slot named by a record: reusable once the deletion is committed, or a
    // restart could find the record pointing at another block's bytes.
    Quarantine(s, *s.host_tier, TierSlot{0, *e->host}, e->slot_size, e->delete_seq);
    s.host_lru.Remove(e);
    e->host.reset();
  }
  FreeHostCopy(s, e);
  FreeGpuCopy(s, e);
  if (e->disk.has_value()) {
    if (e->delete_seq > s.committed_seq) {
      // The slot may be reused only once the index no longer points at it durably.
      Quarantine(s, *s.disk, *e->disk, e->slot_size, e->delete_seq);
    } else {
      absl::Status st = s.disk->Free(*e->disk, e->slot_size);
      if (!st.ok()) KVTIER_LOG(kError, "disk tier: ", st.message());
    }
    e->disk.reset();
  }
  if (e->queued_write_through) {
    auto wt = std::find(s.write_through.begin(), s.write_through.end(), e);
    if (wt != s.write_through.end()) s.write_through.erase(wt);
  }
  s.retired.erase(e);
}

void Quarantine(State& s, StorageTier& tier, const TierSlot& slot, uint64_t size, uint64_t seq) {
  s.quarantine.push_back({&tier, slot, size, seq});
  s.quarantined_bytes[static_cast<int>(tier.id())] += tier.SlotSize(size);
}

void ReleaseQuarantine(State& s) {
  for (auto it = s.quarantine.begin(); it != s.quarantine.end();) {
    if (it->seq > s.committed_seq) {
      ++it;
      continue;
    }
    absl::Status st = it->tier->Free(it->slot, it->size);
    if (!st.ok()) KVTIER_LOG(kError, it->tier->name(), " tier: ", st.message());
    s.quarantined_bytes[static_cast<int>(it->tier->id())] -= it->tier->SlotSize(it->size);
    it = s.quarantine.erase(it);
  }
  s.host_used = s.host_tier->used_bytes();
}

}  // namespace internal

using internal::Entry;
using internal::State;

std::string EncodeNamespaceRecord(absl::string_view record, uint64_t quota) {
  std::string out;
  out.reserve(8 + record.size());
  PutFixed64(&out, quota);
  out.append(record.data(), record.size());
  return out;
}

bool DecodeNamespaceRecord(absl::string_view bytes, std::string* record, uint64_t* quota) {
  if (bytes.size() < 8) return false;
  *quota = DecodeFixed64(bytes.data());
  record->assign(bytes.data() + 8, bytes.size() - 8);
  return true;
}

std::string RecoveryReport::ToString() const {
  return absl::StrFormat(
      "recovered %d disk blocks (%d bytes) and %d host blocks (%d bytes) in %.3f s (index %.3f, "
      "tiers %.3f, scan %.3f); dropped %d volatile and %d invalid entries",
      disk_blocks, disk_bytes, host_blocks, host_bytes, seconds, index_open_seconds,
      tiers_open_seconds, scan_seconds, dropped_volatile, dropped_invalid);
}

// ---- PinnedBlock / Reservation ----

PinnedBlock::PinnedBlock(PinnedBlock&& other) noexcept { *this = std::move(other); }

PinnedBlock& PinnedBlock::operator=(PinnedBlock&& other) noexcept {
  if (this != &other) {
    Release();
    store_ = std::exchange(other.store_, nullptr);
    entry_ = std::exchange(other.entry_, nullptr);
    staging_offset_ = std::exchange(other.staging_offset_, std::nullopt);
    staging_size_ = other.staging_size_;
    bytes_ = std::exchange(other.bytes_, {});
    served_from_ = other.served_from_;
  }
  return *this;
}

PinnedBlock::~PinnedBlock() { Release(); }

void PinnedBlock::Release() {
  if (store_ != nullptr) store_->Unpin(entry_, staging_offset_, staging_size_);
  store_ = nullptr;
  entry_ = nullptr;
  staging_offset_.reset();
  bytes_ = {};
}

Reservation::Reservation(Reservation&& other) noexcept { *this = std::move(other); }

Reservation& Reservation::operator=(Reservation&& other) noexcept {
  if (this != &other) {
    if (store_ != nullptr) store_->AbortReservation(entry_);
    store_ = std::exchange(other.store_, nullptr);
    entry_ = std::exchange(other.entry_, nullptr);
    key_ = other.key_;
    bytes_ = std::exchange(other.bytes_, {});
    tier_ = other.tier_;
  }
  return *this;
}

Reservation::~Reservation() {
  if (store_ != nullptr) store_->AbortReservation(entry_);
}

// ---- BlockStore ----

BlockStore::BlockStore(const BlockStoreOptions& options)
    : options_(options), state_(std::make_unique<State>()) {
  state_->events = options.events;
}

absl::StatusOr<std::unique_ptr<BlockStore>> BlockStore::Open(const BlockStoreOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  for (const Watermarks* w :
       {&options.gpu.watermarks, &options.host_watermarks, &options.disk_watermarks}) {
    if (!(w->low > 0 && w->low < w->high && w->high <= 1.0)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "watermarks must satisfy 0 < low < high <= 1 (got low %g, high %g)", w->low, w->high));
    }
  }
  if (options.max_block_bytes == 0 || options.max_block_bytes > options.host_chunk_bytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("max block size %d must be positive and at most the host chunk size %d",
                        options.max_block_bytes, options.host_chunk_bytes));
  }
  if (!options.disk.dirs.empty() && options.max_block_bytes > options.disk.chunk_bytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("max block size %d exceeds the disk chunk size %d", options.max_block_bytes,
                        options.disk.chunk_bytes));
  }
  if (options.index_path.empty()) {
    return absl::InvalidArgumentError("the store needs an index directory (index_path)");
  }
  if (options.demotion_batch == 0) {
    return absl::InvalidArgumentError("demotion_batch must be at least 1");
  }
  std::unique_ptr<BlockStore> store(new BlockStore(options));
  State& s = *store->state_;
  index::RocksDbIndexOptions index_options;
  index_options.path = options.index_path;
  index_options.sync_policy = options.sync;
  index_options.min_free_bytes = options.index_min_free_bytes;
  index_options.reserve_bytes = options.index_reserve_bytes;
  index_options.free_bytes = options.index_free_bytes;
  if (options.migrate_namespace_id) {
    index_options.migrate_namespace_id = [&options](NamespaceId legacy, absl::string_view bytes) {
      std::string record;
      uint64_t quota = 0;
      if (!DecodeNamespaceRecord(bytes, &record, &quota)) return legacy;
      return options.migrate_namespace_id(legacy, record);
    };
  }
  KVTIER_ASSIGN_OR_RETURN(s.index, index::OpenRocksDbBlockIndex(index_options));
  {
    absl::MutexLock lock(&s.mu);
    internal::RefreshIndexHealth(s, /*force=*/true);
  }
  const auto index_opened = std::chrono::steady_clock::now();
  store->recovery_.index_open_seconds = std::chrono::duration<double>(index_opened - start).count();
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<HostArena> arena, HostArena::Create(options.host));
  KVTIER_ASSIGN_OR_RETURN(s.host_tier,
                          HostTier::Create(std::move(arena), options.host_chunk_bytes));
  KVTIER_ASSIGN_OR_RETURN(s.disk, DiskTier::Create(options.disk, {s.host_tier->arena().span()}));
  if (options.gpu.capacity_bytes > 0) {
    KVTIER_ASSIGN_OR_RETURN(s.gpu, GpuTier::Create(options.gpu.device, options.gpu.capacity_bytes,
                                                   options.gpu.chunk_bytes));
    if (s.host_tier->arena().pin_mechanism() != "cuda") {
      return absl::FailedPreconditionError(absl::StrCat(
          "the GPU tier encodes pages straight into the host tier, which must then be pinned with "
          "CUDA (host pin mode auto or cuda); it is pinned with: ",
          s.host_tier->arena().pin_mechanism()));
    }
  }
  for (StorageTier* tier :
       {static_cast<StorageTier*>(s.gpu.get()), static_cast<StorageTier*>(s.host_tier.get()),
        static_cast<StorageTier*>(s.disk.get())}) {
    if (tier == nullptr) continue;
    s.tiers.push_back(tier);
    s.tier_by_id[static_cast<int>(tier->id())] = tier;
  }
  const auto tiers_opened = std::chrono::steady_clock::now();
  store->recovery_.tiers_open_seconds =
      std::chrono::duration<double>(tiers_opened - index_opened).count();
  KVTIER_RETURN_IF_ERROR(store->Recover());
  store->recovery_.scan_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - tiers_opened).count();
  store->recovery_.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  KVTIER_LOG(kInfo, "store: ", store->recovery_.ToString(), "; GPU tier ",
             s.gpu ? s.gpu->capacity_bytes() : 0, " bytes, host tier ", s.host_tier->arena().size(),
             " bytes (pinned: ", s.host_tier->arena().pin_mechanism(), "), disk tier ",
             s.disk->capacity_bytes(), " bytes in ", s.disk->file_count(), " files");
  // Each chunk serves blocks of one slot size: a tier of few chunks cannot hold several sizes.
  auto warn_chunks = [](const char* tier, const char* field, uint64_t capacity, uint64_t chunk) {
    if (capacity == 0 || chunk == 0 || capacity / chunk >= kMinTierChunks) return;
    KVTIER_LOG(kWarning, "store: the ", tier, " tier holds ", capacity / chunk, " chunk(s) of ",
               chunk,
               " bytes and each chunk serves blocks of one size, so engines whose blocks "
               "differ in size (layouts, codecs) evict each other's; give it at least ",
               kMinTierChunks, " chunks (a smaller ", field, " or a larger tier)");
  };
  warn_chunks("host", "host.chunk", s.host_tier->arena().size(), options.host_chunk_bytes);
  if (s.disk->capacity_bytes() > 0) {
    warn_chunks("disk", "disk.chunk", s.disk->capacity_bytes(), options.disk.chunk_bytes);
  }
  s.demoter = std::make_unique<Demoter>(s, Demoter::Policy::From(store->options_));
  s.demoter->Start();
  return store;
}

BlockStore::~BlockStore() {
  State& s = *state_;
  {
    absl::MutexLock lock(&s.mu);
    s.stop = true;
    s.work_cv.SignalAll();
  }
  if (s.demoter != nullptr) s.demoter->Join();
  if (s.index == nullptr) return;             // Open failed before the index opened
  if (!s.index->Health().writable()) return;  // nothing was written that a sync would keep
  absl::Status st = s.index->Sync();
  if (!st.ok()) KVTIER_LOG(kError, "store: final index sync: ", st.message());
}

absl::Status BlockStore::PutNamespace(NamespaceId id, absl::string_view record,
                                      uint64_t quota_bytes) {
  const std::string encoded = EncodeNamespaceRecord(record, quota_bytes);
  absl::Status written = state_->index->PutNamespace(id, encoded);
  const bool deferred = !written.ok() && !state_->index->Health().writable();
  if (!written.ok() && !deferred) return written;
  absl::MutexLock lock(&state_->mu);
  if (deferred) {
    state_->unsaved_namespaces[id] = encoded;  // written by the next commit that can
  } else {
    state_->unsaved_namespaces.erase(id);
  }
  state_->namespaces.Register(id, record, quota_bytes);
  return absl::OkStatus();
}

std::vector<std::pair<NamespaceId, std::pair<std::string, uint64_t>>> BlockStore::Namespaces()
    const {
  absl::MutexLock lock(&state_->mu);
  return state_->namespaces.Registered();
}

absl::StatusOr<Reservation> BlockStore::Reserve(const BlockKey& key, uint64_t size) {
  State& s = *state_;
  if (size == 0 || size > options_.max_block_bytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("block size %d is outside 1..%d bytes", size, options_.max_block_bytes));
  }
  const uint64_t slot_size = s.host_tier->SlotSize(size);
  absl::MutexLock lock(&s.mu);
  if (s.stop) return absl::UnavailableError("the store is shutting down");
  if (s.map.contains(key)) return absl::AlreadyExistsError("block is already stored");
  KVTIER_RETURN_IF_ERROR(MakeNamespaceRoom(key.ns, size, slot_size));
  std::optional<TierSlot> slot = internal::AllocateWaiting(
      s, *s.host_tier, size, options_.put_wait_ms, s.room_waiters, nullptr);
  if (!slot.has_value()) {
    ++s.counters.put_rejected;
    if (s.stop) return absl::UnavailableError("the store is shutting down");
    return absl::ResourceExhaustedError(absl::StrFormat(
        "host tier full: no room for a %d-byte block within %d ms (%d of %d bytes used, %d "
        "blocks pinned, %d being written to disk)",
        size, options_.put_wait_ms, s.host_tier->used_bytes(), s.host_tier->arena().size(),
        s.pinned, s.migrating));
  }
  if (s.map.contains(key)) {  // stored by another caller while this one waited
    (void)s.host_tier->Free(*slot, size);
    return absl::AlreadyExistsError("block is already stored");
  }
  s.host_used = s.host_tier->used_bytes();
  Entry* e = internal::InsertWriting(s, key, size, slot_size);
  e->host = slot->offset;
  if (s.host_used >
      options_.host_watermarks.high * static_cast<double>(s.host_tier->arena().size())) {
    s.work_cv.Signal();
  }
  Reservation r;
  r.store_ = this;
  r.entry_ = e;
  r.key_ = key;
  r.bytes_ = absl::Span<uint8_t>(s.host_tier->data() + slot->offset, size);
  r.tier_ = Tier::kHost;
  return r;
}

absl::Status BlockStore::MakeNamespaceRoom(NamespaceId id, uint64_t size, uint64_t slot_size) {
  State& s = *state_;
  NamespaceState& ns = s.namespaces.GetOrCreate(id);
  if (ns.quota > 0) {
    if (slot_size > ns.quota) {
      ++s.counters.put_rejected;
      return absl::ResourceExhaustedError(absl::StrFormat(
          "block of %d bytes exceeds namespace %d's quota of %d bytes", size, id, ns.quota));
    }
    // Evict inside the namespace, least recently used first, skipping blocks in use.
    Entry* e = ns.lru.back();
    while (!NamespaceTable::Fits(ns, slot_size) && e != nullptr) {
      Entry* prev = NsLru::Prev(e);
      if (e->pins == 0 && !e->migrating()) {
        internal::Detach(s, e, RemovedBy::kEvicted);
        ++s.counters.quota_evictions;
      }
      e = prev;
    }
    if (!NamespaceTable::Fits(ns, slot_size)) {
      ++s.counters.put_rejected;
      return absl::ResourceExhaustedError(absl::StrFormat(
          "namespace %d is over its quota of %d bytes (%d used by blocks being read or written)",
          id, ns.quota, ns.used));
    }
  }
  return absl::OkStatus();
}

void BlockStore::AbortReservation(void* raw) {
  State& s = *state_;
  Entry* e = static_cast<Entry*>(raw);
  absl::MutexLock lock(&s.mu);
  internal::Detach(s, e, RemovedBy::kSilent);
}

absl::Status BlockStore::Commit(Reservation reservation, const PutOptions& options) {
  if (reservation.tier_ == Tier::kGpu) return CommitHot(std::move(reservation), options);
  State& s = *state_;
  const auto start = std::chrono::steady_clock::now();
  Entry* e = static_cast<Entry*>(reservation.entry_);
  // The header (and its own checksum) is checked in both cases; a block sealed by the caller had
  // its payload checksum computed just now, any other has it checked here.
  absl::StatusOr<codec::ColdBlockHeader> header = codec::ParseColdBlockHeader(reservation.bytes_);
  absl::StatusOr<uint32_t> checksum = !header.ok() ? absl::StatusOr<uint32_t>(header.status())
                                      : options.sealed_by_caller
                                          ? codec::StoredHeaderChecksum(reservation.bytes_)
                                          : codec::VerifyColdBlock(reservation.bytes_);
  if (!checksum.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a valid cold block: ", checksum.status().message()));
  }
  if (options.wait_durable && !options.durable) {
    return absl::InvalidArgumentError("wait_durable requires durable");
  }
  const uint8_t codec_id = static_cast<uint8_t>(header->codec);
  absl::MutexLock lock(&s.mu);
  reservation.store_ = nullptr;  // ownership of the entry moves to the map
  if (s.stop) {
    internal::Detach(s, e, RemovedBy::kSilent);
    return absl::UnavailableError("the store is shutting down");
  }
  if (options.wait_durable && !s.index_writable) internal::RefreshIndexHealth(s, /*force=*/true);
  if (options.wait_durable && !s.index_writable) {
    // Nothing can become durable now (a full drive, a lost index directory): say so at once,
    // and store nothing, as a refused put does.
    internal::Detach(s, e, RemovedBy::kSilent);
    ++s.counters.put_rejected;
    return internal::IndexRefusal(s);
  }
  e->rec.checksum = *checksum;
  e->rec.codec = codec_id;
  if (options.durable) e->rec.flags |= index::kBlockFlagDurable;
  internal::Publish(s, e, options, internal::NowMs(options_), Tier::kHost, e->rec.size,
                    options.durable);
  if (s.host_tier->persistent()) {
    internal::QueuePut(s, *e);
    e->indexed = true;
  }
  if (options.durable && !s.disk->file_count()) {
    e->durable_result = absl::FailedPreconditionError("durable block, but there is no disk tier");
  } else if (options.durable) {
    e->queued_write_through = true;
    s.write_through.push_back(e);
    s.work_cv.Signal();
  }
  internal::RecordLatency(s.put_latency, start);
  if (!options.wait_durable) return absl::OkStatus();
  ++e->pins;
  ++s.pinned;
  // Re-reading the index's health meanwhile: a write that waits for space inside the index
  // must not hold this caller until space returns.
  while (!e->durable_result.has_value() && !s.stop && s.index_writable) {
    s.changed_cv.WaitWithTimeout(&s.mu, absl::Milliseconds(100));
    internal::RefreshIndexHealth(s);
  }
  absl::Status result = e->durable_result.value_or(
      s.stop ? absl::UnavailableError("the store shut down before the block was durable")
             : internal::IndexRefusal(s));
  --e->pins;
  --s.pinned;
  internal::MaybeRelease(s, e);
  return result;
}

absl::Status BlockStore::Put(const BlockKey& key, absl::Span<const uint8_t> block,
                             const PutOptions& options) {
  for (int attempt = 0; attempt < 3; ++attempt) {
    absl::StatusOr<Reservation> r = Reserve(key, block.size());
    if (absl::IsAlreadyExists(r.status())) {
      ++state_->counters.duplicate_puts;
      if (!options.durable) return absl::OkStatus();
      // Already stored: a durable put must still make that block durable.
      absl::StatusOr<bool> present = MakeDurable(key, options.wait_durable);
      if (!present.ok() || *present) return present.status();
      continue;  // it went away meanwhile (aborted or removed): store it again
    }
    if (!r.ok()) return r.status();
    std::memcpy(r->bytes().data(), block.data(), block.size());
    return Commit(std::move(*r), options);
  }
  return absl::UnavailableError("the block was removed three times while being stored");
}

absl::StatusOr<bool> BlockStore::MakeDurable(const BlockKey& key, bool wait) {
  State& s = *state_;
  absl::MutexLock lock(&s.mu);
  Entry* e = nullptr;
  while (true) {
    auto it = s.map.find(key);
    if (it == s.map.end()) return false;
    e = it->second.get();
    if (!e->writing() || s.stop) break;
    s.changed_cv.Wait(&s.mu);  // another caller is storing it: wait for its commit or abort
  }
  if (s.stop) return absl::UnavailableError("the store is shutting down");
  if (s.disk->file_count() == 0) {
    return absl::FailedPreconditionError("durable block, but there is no disk tier");
  }
  e->rec.flags |= index::kBlockFlagDurable;
  auto durable = [&] {
    return e->disk.has_value() && !e->migrating() && e->put_seq <= s.committed_seq;
  };
  if (durable()) return true;
  if (!e->migrating() && !e->queued_write_through) {
    e->durable_result.reset();
    e->queued_write_through = true;
    s.write_through.push_back(e);
    s.work_cv.Signal();
  }
  if (!wait) return true;
  ++e->pins;
  ++s.pinned;
  while (!e->durable_result.has_value() && !durable() && !e->removed() && !s.stop &&
         s.index_writable) {
    s.changed_cv.WaitWithTimeout(&s.mu, absl::Milliseconds(100));
    internal::RefreshIndexHealth(s);  // as in Commit
  }
  absl::Status result = absl::OkStatus();
  if (e->durable_result.has_value() && !durable()) {
    result = *e->durable_result;
  } else if (!durable() && !e->removed()) {
    result = s.stop ? absl::UnavailableError("the store shut down before the block was durable")
                    : internal::IndexRefusal(s);
  }
  --e->pins;
  --s.pinned;
  internal::MaybeRelease(s, e);
  if (!result.ok()) return result;
  return true;
}

absl::Status BlockStore::Flush() {
  State& s = *state_;
  absl::MutexLock lock(&s.mu);
  const uint64_t target = s.queued_seq;
  s.idle = false;
  s.work_cv.Signal();
  auto done = [&] { return s.stop || (s.idle && s.committed_seq >= target && s.pending.empty()); };
  const uint64_t failures = s.commit_failures;
  ++s.commit_waiters;
  // While the index takes no writes nothing commits: the refusal is the answer.
  while (!done() && s.commit_failures == failures && s.index_writable) {
    s.changed_cv.WaitWithTimeout(&s.mu, absl::Milliseconds(100));
    internal::RefreshIndexHealth(s);
  }
  --s.commit_waiters;
  if (s.stop) return absl::UnavailableError("the store is shutting down");
  if (s.commit_failures != failures) return s.last_commit_error;
  if (!done()) return internal::IndexRefusal(s);
  return absl::OkStatus();
}

bool BlockStore::HostTierDeviceAccessible() const {
  return state_->host_tier->arena().pin_mechanism() == "cuda";
}

StoreStats BlockStore::Stats() const {
  const State& s = *state_;
  StoreStats out;
  {
    absl::MutexLock lock(&s.mu);
    out.index_memory_bytes =
        s.map.capacity() * (sizeof(std::pair<const BlockKey, std::unique_ptr<Entry>>) + 1) +
        (s.map.size() + s.retired.size()) * sizeof(Entry);
    out.indexed_blocks = s.map.size();
    for (const StorageTier* tier : s.tiers) {
      TierStats& stats = out.tiers[static_cast<int>(tier->id())];
      stats.capacity_bytes = tier->capacity_bytes();
      stats.used_bytes = tier->used_bytes();
    }
    out.tiers[static_cast<int>(Tier::kGpu)].blocks = s.gpu ? s.gpu_lru.size() : 0;
    out.tiers[static_cast<int>(Tier::kHost)].blocks = s.host_lru.size();
    out.tiers[static_cast<int>(Tier::kDisk)].blocks = s.disk_lru.size();
    out.pinned_blocks = s.pinned;
    out.migrating_blocks = s.migrating;
    out.unsynced_index_writes = s.queued_seq - s.committed_seq;
    out.quarantined_slots = s.quarantine.size();
    out.index_commit_failures = s.commit_failures;
  }
  out.index_health = s.index->Health();
  const Counters& c = s.counters;
  for (int t = 0; t < 3; ++t) {
    out.tiers[t].hits = c.hits[t].load();
    out.tiers[t].bytes_in = c.bytes_in[t].load();
    out.tiers[t].bytes_out = c.bytes_out[t].load();
    out.tiers[t].checksum_failures = c.checksum_failures[t].load();
    out.checksum_failures += out.tiers[t].checksum_failures;
  }
  out.misses = c.misses;
  out.puts = c.puts;
  out.duplicate_puts = c.duplicate_puts;
  out.put_rejected = c.put_rejected;
  out.evictions_gpu_to_host = c.gpu_to_host;
  out.evictions_gpu_dropped = c.gpu_dropped;
  out.evictions_host_to_disk = c.host_to_disk;
  out.evictions_host_dropped = c.host_dropped;
  out.evictions_host_copy_freed = c.host_copy_freed;
  out.evictions_disk_dropped = c.disk_dropped;
  out.blocks_written_to_disk = c.disk_writes;
  out.evictions_quota = c.quota_evictions;
  out.removed = c.removed;
  out.io_errors = c.io_errors;
  out.read_latency = s.read_latency.Read();
  out.put_latency = s.put_latency.Read();
  for (size_t i = 0; i < s.disk->file_count(); ++i)
    out.disk_files.push_back(s.disk->file(i).stats());
  out.index = s.index->stats();
  return out;
}

}  // namespace kvtier::store
