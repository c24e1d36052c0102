// BlockStore's index writer: internal::CommitPending applies the queued index changes (the
// Demoter calls it from the background thread, the only writer of the index), and
// internal::DropDiskCopy, shared by the Demoter's disk eviction and admin Evict.
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "common/logging.h"
#include "daemon/store/block_store_internal.h"

namespace kvtier::store {
namespace internal {
namespace {

// Writes the namespace records and meta entries that waited for the index to take writes.
// REQUIRES: s.mu held; releases it during the writes. Returns the first error.
absl::Status WriteUnsaved(State& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) {
  if (s.unsaved_namespaces.empty() && s.unsaved_meta.empty()) return absl::OkStatus();
  auto namespaces = std::move(s.unsaved_namespaces);
  auto meta = std::move(s.unsaved_meta);
  s.unsaved_namespaces.clear();
  s.unsaved_meta.clear();
  s.mu.Unlock();
  absl::Status st;
  std::vector<NamespaceId> written;
  size_t meta_written = 0;
  // Meta first: the persistent host tier's incarnation must be recorded before its records.
  for (const auto& [key, value] : meta) {
    if (st.ok()) st = s.index->PutMeta(key, value);
    if (st.ok()) ++meta_written;
  }
  for (const auto& [id, record] : namespaces) {
    if (st.ok()) st = s.index->PutNamespace(id, record);
    if (st.ok()) written.push_back(id);
  }
  s.mu.Lock();
  for (NamespaceId id : written) namespaces.erase(id);
  for (auto& [id, record] : namespaces) s.unsaved_namespaces.try_emplace(id, std::move(record));
  s.unsaved_meta.insert(s.unsaved_meta.begin(), meta.begin() + meta_written, meta.end());
  return st;
}

}  // namespace

void DropDiskCopy(State& s, Entry* e, bool persistent_host) {
  if (!e->host.has_value()) {
    internal::Detach(s, e, RemovedBy::kEvicted);
    return;
  }
  s.disk_lru.Remove(e);
  e->delete_seq = internal::QueueDelete(s, e->key);
  internal::Quarantine(s, *s.disk, *e->disk, e->slot_size, e->delete_seq);
  e->disk.reset();
  e->indexed = false;
  if (persistent_host) {
    internal::QueuePut(s, *e);  // the record now points at the host copy
    e->indexed = true;
  }
}

void CommitPending(State& s, index::SyncPolicy policy) {
  if (s.pending.empty() && s.unsaved_namespaces.empty() && s.unsaved_meta.empty()) return;
  absl::Status unsaved = WriteUnsaved(s);
  // The last change of each key wins; a batch then holds each key once, so the order in which
  // the index applies puts and deletes does not matter.
  absl::flat_hash_map<BlockKey, size_t> last;
  for (size_t i = 0; i < s.pending.size(); ++i) last[s.pending[i].first] = i;
  index::IndexBatch batch;
  for (size_t i = 0; i < s.pending.size(); ++i) {
    auto& [key, record] = s.pending[i];
    if (last[key] != i) continue;
    if (record.has_value()) {
      batch.puts.emplace_back(key, *record);
    } else {
      batch.deletes.push_back(key);
    }
  }
  s.pending.clear();
  const uint64_t seq = s.queued_seq;
  absl::Status st = unsaved;
  if (st.ok()) {
    s.mu.Unlock();
    st = s.index->Write(batch);
    if (st.ok() && policy == index::SyncPolicy::kBatch) st = s.index->Sync();
    s.mu.Lock();
  }
  s.last_commit_error = st;
  if (!st.ok()) {
    // Nothing counts as committed: the changes go back in front of what was queued meanwhile,
    // quarantined slots stay quarantined, and host copies stay until a retry succeeds. Logged
    // once per run of failures (a full drive refuses every commit until space returns).
    if (s.failed_commits_in_a_row++ == 0) {
      KVTIER_LOG(kError, "store: index commit of ", batch.puts.size(), " puts and ",
                 batch.deletes.size(),
                 " deletes failed (retried until it succeeds): ", st.message());
    }
    ++s.commit_failures;
    std::vector<std::pair<BlockKey, std::optional<index::BlockRecord>>> again;
    again.reserve(batch.puts.size() + batch.deletes.size() + s.pending.size());
    for (const BlockKey& key : batch.deletes) again.emplace_back(key, std::nullopt);
    for (auto& [key, record] : batch.puts) again.emplace_back(key, record);
    for (auto& op : s.pending) again.push_back(std::move(op));
    s.pending = std::move(again);
    s.changed_cv.SignalAll();
    return;
  }
  if (s.failed_commits_in_a_row > 0) {
    KVTIER_LOG(kInfo, "store: index commits succeed again after ", s.failed_commits_in_a_row,
               " failed attempts");
    s.failed_commits_in_a_row = 0;
  }
  s.committed_seq = seq;
  internal::ReleaseQuarantine(s);
  s.changed_cv.SignalAll();
}

}  // namespace internal
}  // namespace kvtier::store
