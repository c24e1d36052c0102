// BlockStore's operator paths: Clear, Evict, Verify, Snapshot, Remove, DemoteAll, FlushToDisk.
#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "daemon/store/block_store.h"
#include "daemon/store/block_store_internal.h"
#include "daemon/store/scrubber.h"

namespace kvtier::store {

using internal::Entry;
using internal::State;

absl::StatusOr<BlockStore::ClearReport> BlockStore::ClearNamespace(NamespaceId id,
                                                                   bool include_silent) {
  State& s = *state_;
  absl::MutexLock lock(&s.mu);
  ClearReport report;
  NamespaceState* ns = s.namespaces.Find(id);
  if (ns == nullptr) return report;
  // Least recently used first; Detach unlinks only the entry it is given.
  Entry* e = ns->lru.back();
  while (e != nullptr) {
    Entry* prev = NsLru::Prev(e);
    if (include_silent || !e->silent) {
      for (const StorageTier* tier : s.tiers) {
        if (e->CopyIn(tier->id())) report.bytes += internal::CopyBytes(s, *e, tier->id());
      }
      internal::Detach(s, e, RemovedBy::kSilent);
      ++report.blocks;
    }
    e = prev;
  }
  // Blocks still being written (reserved, not committed) are not in the namespace's list: they
  // survive the clear and become visible when committed.
  s.counters.removed += report.blocks;
  StoreEvent event;
  event.kind = StoreEventKind::kCleared;
  event.ns = id;
  event.count = report.blocks;
  if (s.events != nullptr) s.events->OnEvent(event);
  return report;
}

BlockStore::NamespaceUsage BlockStore::UsageOf(NamespaceId id) const {
  const State& s = *state_;
  NamespaceUsage usage;
  absl::MutexLock lock(&s.mu);
  const NamespaceState* ns = s.namespaces.Find(id);
  if (ns == nullptr) return usage;
  usage.hits = ns->hits;
  usage.misses = ns->misses;
  usage.last_access_ms = ns->last_access_ms;
  for (Entry* e = ns->lru.front(); e != nullptr; e = NsLru::Next(e)) {
    if (e->writing() || e->removed()) continue;
    for (const StorageTier* tier : s.tiers) {
      if (!e->CopyIn(tier->id())) continue;
      ++usage.blocks[static_cast<int>(tier->id())];
      usage.bytes[static_cast<int>(tier->id())] += internal::CopyBytes(s, *e, tier->id());
    }
  }
  return usage;
}

absl::StatusOr<BlockStore::VerifyReport> BlockStore::Verify() { return Verify(VerifyOptions()); }

absl::StatusOr<BlockStore::VerifyReport> BlockStore::Verify(const VerifyOptions& options) {
  // The host copy in place, the disk copy by a read; neither counts as a read.
  Scrubber scrubber(*state_,
                    [this](const BlockKey& key, Tier tier, bool keep_corrupt, std::string* failure,
                           bool* io_error) -> absl::StatusOr<std::optional<uint64_t>> {
                      ReadMode mode;
                      mode.touch = false;
                      mode.verify_host = true;
                      mode.force_disk = tier == Tier::kDisk;
                      mode.keep_corrupt = keep_corrupt;
                      mode.failure = failure;
                      mode.io_error = io_error;
                      KVTIER_ASSIGN_OR_RETURN(std::optional<PinnedBlock> pinned,
                                              AcquireImpl(key, mode));
                      if (!pinned.has_value()) return std::optional<uint64_t>();
                      return std::optional<uint64_t>(pinned->bytes().size());
                    });
  return scrubber.Run(options);
}

std::vector<BlockStore::BlockSummary> BlockStore::Snapshot(absl::Span<const NamespaceId> namespaces,
                                                           uint64_t* event_position) const {
  const State& s = *state_;
  std::vector<BlockSummary> out;
  absl::MutexLock lock(&s.mu);
  *event_position = s.events != nullptr ? s.events->Barrier() : 0;
  auto add = [&](const Entry& e) {
    if (e.writing() || e.removed() || e.silent) return;
    out.push_back({e.key.ns, e.key.hash, internal::FastestTier(e), e.rec.size,
                   (e.rec.flags & index::kBlockFlagDurable) != 0});
  };
  if (namespaces.empty()) {
    out.reserve(s.map.size());
    for (const auto& [key, e] : s.map) add(*e);
    return out;
  }
  for (NamespaceId id : namespaces) {
    const NamespaceState* ns = s.namespaces.Find(id);
    if (ns == nullptr) continue;
    for (Entry* e = ns->lru.front(); e != nullptr; e = NsLru::Next(e)) add(*e);
  }
  return out;
}

absl::StatusOr<bool> BlockStore::Remove(const BlockKey& key, RemovedBy why) {
  State& s = *state_;
  absl::MutexLock lock(&s.mu);
  auto it = s.map.find(key);
  if (it == s.map.end() || it->second->writing()) return false;
  internal::Detach(s, it->second.get(), why);
  ++s.counters.removed;
  return true;
}

absl::Status BlockStore::DemoteAll() {
  {
    absl::MutexLock lock(&state_->mu);
    state_->demote_all = true;
    state_->work_cv.Signal();
  }
  return Flush();
}

absl::Status BlockStore::FlushToDisk() {
  State& s = *state_;
  if (s.gpu != nullptr) {
    {
      absl::MutexLock lock(&s.mu);
      s.demote_gpu_all = true;
      s.work_cv.Signal();
    }
    KVTIER_RETURN_IF_ERROR(Flush());
  }
  {
    absl::MutexLock lock(&s.mu);
    if (s.disk->file_count() > 0) {
      // Least recently used first: when the disk cannot take them all, the later writes push the
      // earlier ones out, and the most recently used stay.
      for (Entry* e = s.host_lru.back(); e != nullptr; e = HostLru::Prev(e)) {
        const bool admitted =
            options_.admission == DiskAdmission::kAll ||
            (e->rec.flags & (index::kBlockFlagReused | index::kBlockFlagDurable)) != 0;
        if (e->removed() || e->writing() || e->migrating() || e->disk.has_value() ||
            e->queued_write_through || !admitted) {
          continue;
        }
        e->durable_result.reset();
        e->queued_write_through = true;
        s.write_through.push_back(e);
      }
      s.work_cv.Signal();
    }
  }
  return Flush();
}

namespace {

enum class EvictOutcome { kNotInTier, kBusy, kDropped, kDemoted };

// Takes one block out of `tier` (nullopt: out of the cache). REQUIRES: s.mu held, e in the map.
EvictOutcome EvictOne(State& s, Entry* e, std::optional<Tier> tier, bool drop)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) {
  if (e->writing()) return EvictOutcome::kNotInTier;
  if (!tier.has_value()) {
    if (e->pins > 0 || e->migrating()) return EvictOutcome::kBusy;
    internal::Detach(s, e, RemovedBy::kRemoved);
    return EvictOutcome::kDropped;
  }
  const bool in_tier = *tier == Tier::kGpu    ? e->gpu.has_value()
                       : *tier == Tier::kHost ? e->host.has_value() && !e->gpu.has_value()
                                              : e->disk.has_value();
  if (!in_tier) return EvictOutcome::kNotInTier;
  if (e->pins > 0 || e->migrating()) return EvictOutcome::kBusy;
  switch (*tier) {
    case Tier::kGpu:
      if (e->host.has_value()) {
        internal::FreeGpuCopy(s, e);
        return EvictOutcome::kDemoted;
      }
      if (drop) break;
      // The background thread encodes it into the host tier: least recently used first.
      s.gpu_lru.MoveToBack(e);
      {
        const uint64_t target = std::min(s.gpu_evict_target.value_or(s.gpu_used), s.gpu_used);
        s.gpu_evict_target = target - std::min(target, e->hot->page_bytes());
      }
      s.work_cv.Signal();
      return EvictOutcome::kDemoted;
    case Tier::kHost:
      if (e->disk.has_value()) {
        if (e->put_seq > s.committed_seq) return EvictOutcome::kBusy;  // record not durable yet
        internal::FreeHostCopy(s, e);
        return EvictOutcome::kDemoted;
      }
      if (drop || s.disk->file_count() == 0) break;  // the last tier: it leaves the cache
      // Written to disk by the background thread, then its host copy is freed.
      e->evict_host_after_write = true;
      if (!e->queued_write_through) {
        e->queued_write_through = true;
        s.write_through.push_back(e);
      }
      s.work_cv.Signal();
      return EvictOutcome::kDemoted;
    case Tier::kDisk:
      if (e->host.has_value()) {
        internal::DropDiskCopy(s, e, s.host_tier->persistent());
        return EvictOutcome::kDropped;
      }
      break;
  }
  internal::Detach(s, e, RemovedBy::kRemoved);
  return EvictOutcome::kDropped;
}

}  // namespace

absl::StatusOr<BlockStore::EvictReport> BlockStore::Evict(const EvictRequest& req) {
  const int amounts = (req.max_blocks > 0) + (req.max_bytes > 0) + !req.hashes.empty();
  if (amounts != 1) {
    return absl::InvalidArgumentError(
        "exactly one of a block count, a byte count or a list of hashes is required");
  }
  if (req.namespaces.empty()) return absl::InvalidArgumentError("no namespace to evict from");
  if (!req.hashes.empty() && req.namespaces.size() != 1) {
    return absl::InvalidArgumentError("evicting by hash needs exactly one namespace");
  }
  State& s = *state_;
  EvictReport report;
  absl::MutexLock lock(&s.mu);
  // Evicts `e` and counts it; `e` may be released (freed) by then.
  auto evict = [&](Entry* e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) {
    const uint64_t bytes = e->slot_size;
    const EvictOutcome outcome = EvictOne(s, e, req.tier, req.drop);
    if (outcome == EvictOutcome::kBusy) ++report.skipped_busy;
    if (outcome == EvictOutcome::kDropped || outcome == EvictOutcome::kDemoted) {
      ++report.evicted_blocks;
      report.evicted_bytes += bytes;
      if (outcome == EvictOutcome::kDemoted) ++report.demoted_blocks;
    }
    return outcome;
  };
  if (!req.hashes.empty()) {
    for (const BlockHash& hash : req.hashes) {
      auto it = s.map.find(BlockKey{req.namespaces[0], hash});
      if (it == s.map.end()) {
        report.results.push_back(absl::NotFoundError("not stored"));
        continue;
      }
      const EvictOutcome outcome = evict(it->second.get());
      if (outcome == EvictOutcome::kNotInTier) {
        report.results.push_back(absl::NotFoundError(
            req.tier.has_value() ? absl::StrCat("not in the ", index::TierName(*req.tier), " tier")
                                 : std::string("not stored yet (being written)")));
      } else if (outcome == EvictOutcome::kBusy) {
        report.results.push_back(
            absl::FailedPreconditionError("pinned, being read or moving between tiers"));
      } else {
        report.results.push_back(absl::OkStatus());
      }
    }
    return report;
  }
  for (NamespaceId id : req.namespaces) {
    const NamespaceState* ns = s.namespaces.Find(id);
    if (ns == nullptr) continue;
    // Least recently used first; Detach unlinks only the entry it is given.
    Entry* e = ns->lru.back();
    while (e != nullptr) {
      if ((req.max_blocks > 0 && report.evicted_blocks >= req.max_blocks) ||
          (req.max_bytes > 0 && report.evicted_bytes >= req.max_bytes)) {
        return report;
      }
      Entry* prev = NsLru::Prev(e);
      if (!(req.keep_silent && e->silent)) evict(e);
      e = prev;
    }
  }
  return report;
}

}  // namespace kvtier::store
