// DataPlane's shared parts and HostDataPlane: offload and onboard of shared-memory pools
// through the engine's CPU codec, straight into a reserved host slot (Reserve/Commit) and out of a
// pinned block.
#include "daemon/dataplane/data_plane.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/digest.h"
#include "common/status_macros.h"

namespace kvtier::dataplane {
namespace {

// FailedPrecondition when a page of a host pool could not be read or written (HostPool::
// CheckFaults): checked after every page, so no zeros from a lost page are stored or reported
// as onboarded.
absl::Status CheckPoolFaults(const EnginePages& engine) {
  for (const std::unique_ptr<HostPool>& pool : engine.pools) {
    if (pool != nullptr) KVTIER_RETURN_IF_ERROR(pool->CheckFaults());
  }
  return absl::OkStatus();
}

// FailedPrecondition when a host pool's file shrank since registration or lost a page.
absl::Status CheckPools(const EnginePages& engine) {
  for (const std::unique_ptr<HostPool>& pool : engine.pools) {
    if (pool != nullptr) KVTIER_RETURN_IF_ERROR(pool->CheckIntact());
  }
  return absl::OkStatus();
}

// True when the engine's pools are intact (CheckPools); otherwise every item not yet handled
// fails with the reason and the batch is done (false).
bool PoolsIntactOrFailRest(const EnginePages& engine, int size, std::vector<ItemResult>* results,
                           ItemProgress* progress) {
  const absl::Status intact = CheckPools(engine);
  if (intact.ok()) return true;
  for (int i = progress->next; i < size; ++i) results->emplace_back().Set(intact);
  progress->next = size;
  return false;
}

class HostDataPlane final : public DataPlane {
 public:
  HostDataPlane(store::BlockStore* store, DataPlaneTotals* totals) : DataPlane(store, totals) {}
  void Offload(const EnginePages& engine, const OffloadBatch& batch, OffloadResult* out,
               ItemProgress* progress, int end) override;
  void Onboard(const EnginePages& engine, const OnboardBatch& batch, OnboardResult* out,
               ItemProgress* progress, int end) override;
};

void HostDataPlane::Offload(const EnginePages& engine, const OffloadBatch& batch,
                            OffloadResult* out, ItemProgress* progress, int end) {
  ItemProgress whole;
  if (progress == nullptr) progress = &whole;
  const int first = progress->next;
  const int size = static_cast<int>(batch.items.size());
  if (!PoolsIntactOrFailRest(engine, size, &out->results, progress)) return;
  const store::PutOptions put = PutOptionsFor(engine, batch);
  uint32_t stored = 0;
  DistinctHashes& distinct = progress->distinct;  // kept across turns
  const uint64_t hot_before = out->hot_bytes_read, cold_before = out->cold_bytes_written;
  int i = first;
  for (; i < std::min(end, size); ++i) {  // the rest in a later turn
    const PageItem& item = batch.items[i];
    ItemResult& result = out->results.emplace_back();
    if (!item.hash.ok()) {
      result.Set(item.hash.status());
      continue;
    }
    const index::BlockHash& hash = *item.hash;
    if (absl::Status repeated = distinct.Add(hash, i); !repeated.ok()) {
      result.Set(repeated);
      continue;
    }
    if (absl::Status page = engine.CheckPage(item.page_index); !page.ok()) {
      result.Set(page);
      continue;
    }
    const store::BlockKey key{engine.ns, hash};
    absl::StatusOr<store::Reservation> reservation =
        store_->Reserve(key, engine.codec->block_bytes());
    if (absl::IsAlreadyExists(reservation.status())) {
      OffloadStoredItem(key, put, &result);
      continue;
    }
    if (!reservation.ok()) {
      result.Set(reservation.status());
      continue;
    }
    absl::Status st = engine.codec->Encode(engine.View(item.page_index), reservation->bytes());
    // A page that lost its backing read as zeros: never stored (the reservation is dropped).
    if (st.ok()) st = CheckPoolFaults(engine);
    if (st.ok()) st = store_->Commit(std::move(*reservation), put);
    result.Set(st);
    if (!st.ok()) continue;
    result.tier = index::Tier::kHost;
    ++stored;
    out->hot_bytes_read += engine.hot_page_bytes;
    out->cold_bytes_written += engine.codec->block_bytes();
  }
  progress->next = i;
  out->stored_pages += stored;
  totals_->hot_bytes_offloaded += out->hot_bytes_read - hot_before;
  totals_->cold_bytes_offloaded += out->cold_bytes_written - cold_before;
  totals_->dropped_offloads += static_cast<uint64_t>(i - first) - stored;
}

void HostDataPlane::Onboard(const EnginePages& engine, const OnboardBatch& batch,
                            OnboardResult* out, ItemProgress* progress, int end) {
  ItemProgress whole;
  if (progress == nullptr) progress = &whole;
  const int first = progress->next;
  const int size = static_cast<int>(batch.items.size());
  if (!PoolsIntactOrFailRest(engine, size, &out->results, progress)) {
    out->onboarded_pages = LeadingOk(out->results);
    return;
  }
  // Kept across turns: a page written by an earlier turn is still taken, a stop still holds.
  absl::flat_hash_set<uint32_t>& destinations = progress->destinations;
  bool& stopped = progress->stopped;
  const uint64_t hot_before = out->hot_bytes_written, cold_before = out->cold_bytes_read;
  int i = first;
  for (; i < size; ++i) {
    if (i >= end && !stopped) break;  // the rest in a later turn (after a stop: all SKIPPED)
    const PageItem& item = batch.items[i];
    ItemResult& result = out->results.emplace_back();
    if (stopped) {
      result.code = ItemCode::kSkipped;
      continue;
    }
    absl::Status invalid;
    if (!item.hash.ok()) {
      invalid = item.hash.status();
    } else if (!engine.CheckPage(item.page_index).ok()) {
      invalid = engine.CheckPage(item.page_index);
    } else if (!destinations.insert(item.page_index).second) {
      invalid = absl::InvalidArgumentError(absl::StrFormat(
          "page index %d is the destination of an earlier item of this request", item.page_index));
    }
    if (!invalid.ok()) {
      result.Set(invalid);
      stopped = !batch.continue_after_miss;
      continue;
    }
    absl::StatusOr<std::optional<store::PinnedBlock>> pinned =
        store_->Acquire({engine.ns, *item.hash});
    absl::Status st = pinned.status();
    if (st.ok() && !pinned->has_value()) st = absl::NotFoundError("block not in the cache");
    if (st.ok()) {
      st = engine.codec->Decode((*pinned)->bytes(), engine.MutableView(item.page_index));
      if (st.ok()) st = CheckPoolFaults(engine);  // the page did not reach the engine's file
      if (st.ok()) result.tier = (*pinned)->served_from();
    }
    result.Set(st);
    if (!st.ok()) {
      if (absl::IsNotFound(st)) result.message.clear();
      stopped = !batch.continue_after_miss;
      continue;
    }
    out->cold_bytes_read += (*pinned)->bytes().size();
    out->hot_bytes_written += engine.hot_page_bytes;
  }
  progress->next = i;
  if (i == size) out->onboarded_pages = LeadingOk(out->results);
  totals_->hot_bytes_onboarded += out->hot_bytes_written - hot_before;
  totals_->cold_bytes_onboarded += out->cold_bytes_read - cold_before;
}

}  // namespace

ItemCode ItemCodeFor(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return ItemCode::kOk;
    case absl::StatusCode::kAlreadyExists:
      return ItemCode::kAlreadyStored;
    case absl::StatusCode::kNotFound:
      return ItemCode::kNotFound;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return ItemCode::kInvalidArgument;
    case absl::StatusCode::kResourceExhausted:
      return ItemCode::kResourceExhausted;
    case absl::StatusCode::kDataLoss:
      return ItemCode::kDataLoss;
    case absl::StatusCode::kUnavailable:
      return ItemCode::kUnavailable;
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kCancelled:
    case absl::StatusCode::kAborted:
      return ItemCode::kAborted;
    case absl::StatusCode::kFailedPrecondition:
      return ItemCode::kFailedPrecondition;
    default:
      return ItemCode::kInternal;
  }
}

void ItemResult::Set(const absl::Status& status) {
  code = ItemCodeFor(status);
  if (!status.ok() && !absl::IsAlreadyExists(status)) {
    message = std::string(status.message().substr(0, 1024));
  }
}

absl::Status DistinctHashes::Add(const index::BlockHash& hash, int item) {
  const auto [it, inserted] = first_.try_emplace(hash, item);
  if (inserted) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("block hash ", LowerHex(hash), " repeats items[",
                                                 it->second,
                                                 "]; the hashes of one request must be distinct"));
}

uint32_t LeadingOk(const std::vector<ItemResult>& results) {
  uint32_t n = 0;
  while (n < results.size() && results[n].code == ItemCode::kOk) ++n;
  return n;
}

store::PutOptions DataPlane::PutOptionsFor(const EnginePages& engine, const OffloadBatch& batch) {
  store::PutOptions put;
  put.durable = batch.durable || batch.wait_durable;
  put.wait_durable = batch.wait_durable;
  put.silent = batch.parked;
  put.origin = engine.id;
  return put;
}

void DataPlane::OffloadStoredItem(const store::BlockKey& key, const store::PutOptions& put,
                                  ItemResult* result) const {
  std::vector<index::Tier> tiers;
  store_->LookupChain(key.ns, {key.hash}, &tiers);
  result->code = ItemCode::kAlreadyStored;
  if (!tiers.empty()) result->tier = tiers[0];
  if (!put.durable) return;
  // Stored already, perhaps not durably: its bytes are those of this page (hashes name contents).
  absl::StatusOr<bool> present = store_->MakeDurable(key, put.wait_durable);
  if (!present.ok()) {
    result->Set(present.status());
  } else if (!*present) {
    result->Set(
        absl::UnavailableError("the stored block was removed while it was being made "
                               "durable; offload the page again"));
  }
}

std::unique_ptr<DataPlane> MakeHostDataPlane(store::BlockStore* store, DataPlaneTotals* totals) {
  return std::make_unique<HostDataPlane>(store, totals);
}

}  // namespace kvtier::dataplane
