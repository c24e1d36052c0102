// Recovery: rebuilds the store's memory from the index at Open(). Disk entries are kept when they
// lie inside the disk files and do not overlap; host entries are kept only when the host arena is
// persistent and was reopened with the incarnation the index last recorded (else its memory is
// new and they are deleted). Recovered host blocks are verified on their first read; disk blocks
// are verified on every read. LRU order is rebuilt from the recorded last-access times.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "daemon/store/block_store_internal.h"

namespace kvtier::store {
namespace {

constexpr char kStoreFormatKey[] = "kvtier.store.format";
constexpr char kStoreFormat[] = "1";
constexpr char kHostIncarnationKey[] = "kvtier.store.host_incarnation";

}  // namespace

absl::Status BlockStore::Recover() {
  State& s = *state_;
  KVTIER_ASSIGN_OR_RETURN(std::optional<std::string> format, s.index->GetMeta(kStoreFormatKey));
  if (format.has_value() && *format != kStoreFormat) {
    return absl::FailedPreconditionError(
        absl::StrCat("index at ", options_.index_path, " holds store format ", *format,
                     "; this kvtierd reads format ", kStoreFormat));
  }
  if (!format.has_value()) KVTIER_RETURN_IF_ERROR(s.index->PutMeta(kStoreFormatKey, kStoreFormat));

  bool keep_host = false;
  if (s.host_tier->persistent() && s.host_tier->arena().reopened()) {
    KVTIER_ASSIGN_OR_RETURN(std::optional<std::string> recorded,
                            s.index->GetMeta(kHostIncarnationKey));
    uint64_t incarnation = 0;
    keep_host = recorded.has_value() && absl::SimpleAtoi(*recorded, &incarnation) &&
                incarnation == s.host_tier->arena().incarnation();
  }

  // Collected first: the index calls back under its own lock, which is taken after s.mu.
  struct Registered {
    NamespaceId id;
    std::string record;
    uint64_t quota;
  };
  std::vector<Registered> namespaces;
  KVTIER_RETURN_IF_ERROR(s.index->ForEachNamespace([&](NamespaceId id, absl::string_view bytes) {
    Registered ns{id, {}, 0};
    if (!DecodeNamespaceRecord(bytes, &ns.record, &ns.quota)) {
      KVTIER_LOG(kWarning, "store: namespace ", id, " has a malformed record; ignored");
      return;
    }
    namespaces.push_back(std::move(ns));
  }));
  {
    absl::MutexLock lock(&s.mu);
    for (const Registered& ns : namespaces) s.namespaces.Register(ns.id, ns.record, ns.quota);
  }

  std::vector<Entry*> recovered;
  index::IndexBatch drop;
  absl::MutexLock lock(&s.mu);
  KVTIER_RETURN_IF_ERROR(
      s.index->ForEachBlock([&](const BlockKey& key, const index::BlockRecord& rec) {
        auto e = std::make_unique<Entry>();
        e->key = key;
        e->rec = rec;
        e->slot_size = s.host_tier->SlotSize(rec.size);
        e->MoveTo(EntryState::kVisible);
        e->indexed = true;
        bool ok = rec.size > 0 && rec.size <= options_.max_block_bytes;
        // Copies in the disk tier are kept, in the host tier only when its memory survived;
        // anything else (a GPU page is never indexed) is dropped. The tier checks the slot.
        const bool kept = rec.tier == Tier::kDisk || (rec.tier == Tier::kHost && keep_host);
        StorageTier* tier = kept ? s.tier_by_id[static_cast<int>(rec.tier)] : nullptr;
        const TierSlot slot{rec.device, rec.offset};
        ok = ok && tier != nullptr && tier->MarkAllocated(slot, rec.size).ok();
        if (ok && rec.tier == Tier::kDisk) {
          e->disk = slot;
          ++recovery_.disk_blocks;
          recovery_.disk_bytes += rec.size;
        } else if (ok) {
          e->host = slot.offset;
          e->verify_on_read = true;
          ++recovery_.host_blocks;
          recovery_.host_bytes += rec.size;
        } else if (rec.tier == Tier::kHost && !keep_host) {
          ++recovery_.dropped_volatile;
        } else {
          ++recovery_.dropped_invalid;
        }
        if (!ok) {
          drop.deletes.push_back(key);
          return true;
        }
        recovered.push_back(e.get());
        s.map.emplace(key, std::move(e));
        return true;
      }));
  s.host_used = s.host_tier->used_bytes();
  // Least recently used first, so that pushing to the front leaves the most recent in front.
  std::sort(recovered.begin(), recovered.end(), [](const Entry* a, const Entry* b) {
    return a->rec.last_access_ms < b->rec.last_access_ms;
  });
  for (Entry* e : recovered) {
    if (e->host.has_value()) s.host_lru.PushFront(e);
    if (e->disk.has_value()) s.disk_lru.PushFront(e);
    s.namespaces.Link(e);
    s.namespaces.Charge(e->key.ns, e->slot_size);
  }
  for (Entry* e : recovered) {
    internal::EmitStored(s, *e, StoredBy::kRecovery, (e->rec.flags & index::kBlockFlagDurable) != 0,
                         "");
  }
  // Written now, or (the index open read-only on a full drive) by the background thread once it
  // takes writes again.
  if (s.index_writable) {
    if (!drop.empty()) KVTIER_RETURN_IF_ERROR(s.index->Write(drop));
    if (s.host_tier->persistent()) {
      KVTIER_RETURN_IF_ERROR(
          s.index->PutMeta(kHostIncarnationKey, absl::StrCat(s.host_tier->arena().incarnation())));
    }
    KVTIER_RETURN_IF_ERROR(s.index->Sync());
    return absl::OkStatus();
  }
  KVTIER_LOG(kWarning, "store: recovered without writing to the index (", s.index_status.message(),
             ")");
  for (const BlockKey& key : drop.deletes) internal::QueueDelete(s, key);
  if (s.host_tier->persistent()) {
    s.unsaved_meta.emplace_back(kHostIncarnationKey,
                                absl::StrCat(s.host_tier->arena().incarnation()));
  }
  return absl::OkStatus();
}

}  // namespace kvtier::store
