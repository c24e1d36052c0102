// DataPlane's shared parts and HostDataPlane: offload and onboard of shared-memory pools
// through the engine's CPU codec, straight into a reserved host slot (Reserve/Commit) and out of a
// pinned block.
#include "daemon/service/data_plane.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "daemon/service/engine_registry.h"
#include "daemon/service/proto_convert.h"

namespace kvtier::service {
namespace {

// FailedPrecondition when a page of a host pool could not be read or written (HostPool::
// CheckFaults): checked after every page, so no zeros from a lost page are stored or reported
// as onboarded.
absl::Status CheckPoolFaults(const Engine& engine) {
  for (const std::unique_ptr<HostPool>& pool : engine.pools) {
    if (pool != nullptr) KVTIER_RETURN_IF_ERROR(pool->CheckFaults());
  }
  return absl::OkStatus();
}

// FailedPrecondition when a host pool's file shrank since registration or lost a page.
absl::Status CheckPools(const Engine& engine) {
  for (const std::unique_ptr<HostPool>& pool : engine.pools) {
    if (pool != nullptr) KVTIER_RETURN_IF_ERROR(pool->CheckIntact());
  }
  return absl::OkStatus();
}

class HostDataPlane final : public DataPlane {
 public:
  HostDataPlane(store::BlockStore* store, DataPlaneTotals* totals) : DataPlane(store, totals) {}
  void Offload(const Engine& engine, const v1::OffloadRequest& req, v1::OffloadResponse* resp,
               bool parked, ItemProgress* progress, int end) override;
  void Onboard(const Engine& engine, const v1::OnboardRequest& req, v1::OnboardResponse* resp,
               ItemProgress* progress, int end) override;
};

void HostDataPlane::Offload(const Engine& engine, const v1::OffloadRequest& req,
                            v1::OffloadResponse* resp, bool parked, ItemProgress* progress,
                            int end) {
  ItemProgress whole;
  if (progress == nullptr) progress = &whole;
  const int first = progress->next;
  if (absl::Status intact = CheckPools(engine); !intact.ok()) {
    for (int i = first; i < req.items_size(); ++i) SetItemResult(intact, resp->add_results());
    progress->next = req.items_size();
    return;
  }
  const store::PutOptions put = PutOptionsFor(engine, req, parked);
  uint32_t stored = 0;
  DistinctHashes& distinct = progress->distinct;  // kept across turns
  const uint64_t hot_before = resp->hot_bytes_read(), cold_before = resp->cold_bytes_written();
  int i = first;
  for (; i < std::min(end, req.items_size()); ++i) {  // the rest in a later turn
    const v1::OffloadItem& item = req.items(i);
    v1::ItemResult* result = resp->add_results();
    absl::StatusOr<index::BlockHash> hash = HashFromProto(item.block_hash());
    if (!hash.ok()) {
      SetItemResult(hash.status(), result);
      continue;
    }
    if (absl::Status repeated = distinct.Add(*hash, i); !repeated.ok()) {
      SetItemResult(repeated, result);
      continue;
    }
    if (absl::Status page = engine.CheckPage(item.page_index()); !page.ok()) {
      SetItemResult(page, result);
      continue;
    }
    const store::BlockKey key{engine.ns, *hash};
    absl::StatusOr<store::HostReservation> reservation =
        store_->Reserve(key, engine.codec->block_bytes());
    if (absl::IsAlreadyExists(reservation.status())) {
      OffloadStoredItem(key, put, result);
      continue;
    }
    if (!reservation.ok()) {
      SetItemResult(reservation.status(), result);
      continue;
    }
    absl::Status st = engine.codec->Encode(engine.View(item.page_index()), reservation->bytes());
    // A page that lost its backing read as zeros: never stored (the reservation is dropped).
    if (st.ok()) st = CheckPoolFaults(engine);
    if (st.ok()) st = store_->Commit(std::move(*reservation), put);
    SetItemResult(st, result);
    if (!st.ok()) continue;
    result->set_tier(v1::TIER_HOST);
    ++stored;
    resp->set_hot_bytes_read(resp->hot_bytes_read() + engine.hot_page_bytes);
    resp->set_cold_bytes_written(resp->cold_bytes_written() + engine.codec->block_bytes());
  }
  progress->next = i;
  resp->set_stored_pages(resp->stored_pages() + stored);
  totals_->hot_bytes_offloaded += resp->hot_bytes_read() - hot_before;
  totals_->cold_bytes_offloaded += resp->cold_bytes_written() - cold_before;
  totals_->dropped_offloads += static_cast<uint64_t>(i - first) - stored;
}

void HostDataPlane::Onboard(const Engine& engine, const v1::OnboardRequest& req,
                            v1::OnboardResponse* resp, ItemProgress* progress, int end) {
  ItemProgress whole;
  if (progress == nullptr) progress = &whole;
  const int first = progress->next;
  if (absl::Status intact = CheckPools(engine); !intact.ok()) {
    for (int i = first; i < req.items_size(); ++i) SetItemResult(intact, resp->add_results());
    progress->next = req.items_size();
    resp->set_onboarded_pages(LeadingOk(*resp));
    return;
  }
  // Kept across turns: a page written by an earlier turn is still taken, a stop still holds.
  absl::flat_hash_set<uint32_t>& destinations = progress->destinations;
  bool& stopped = progress->stopped;
  const uint64_t hot_before = resp->hot_bytes_written(), cold_before = resp->cold_bytes_read();
  int i = first;
  for (; i < req.items_size(); ++i) {
    if (i >= end && !stopped) break;  // the rest in a later turn (after a stop: all SKIPPED)
    const v1::OnboardItem& item = req.items(i);
    v1::ItemResult* result = resp->add_results();
    if (stopped) {
      result->set_code(v1::ITEM_CODE_SKIPPED);
      continue;
    }
    absl::Status invalid;
    absl::StatusOr<index::BlockHash> hash = HashFromProto(item.block_hash());
    if (!hash.ok()) {
      invalid = hash.status();
    } else if (!engine.CheckPage(item.page_index()).ok()) {
      invalid = engine.CheckPage(item.page_index());
    } else if (!destinations.insert(item.page_index()).second) {
      invalid = absl::InvalidArgumentError(
          absl::StrFormat("page index %d is the destination of an earlier item of this request",
                          item.page_index()));
    }
    if (!invalid.ok()) {
      SetItemResult(invalid, result);
      stopped = !req.continue_after_miss();
      continue;
    }
    absl::StatusOr<std::optional<store::PinnedBlock>> pinned = store_->Acquire({engine.ns, *hash});
    absl::Status st = pinned.status();
    if (st.ok() && !pinned->has_value()) st = absl::NotFoundError("block not in the cache");
    if (st.ok()) {
      st = engine.codec->Decode((*pinned)->bytes(), engine.MutableView(item.page_index()));
      if (st.ok()) st = CheckPoolFaults(engine);  // the page did not reach the engine's file
      if (st.ok()) result->set_tier(TierToProto((*pinned)->served_from()));
    }
    SetItemResult(st, result);
    if (!st.ok()) {
      if (absl::IsNotFound(st)) result->clear_message();
      stopped = !req.continue_after_miss();
      continue;
    }
    resp->set_cold_bytes_read(resp->cold_bytes_read() + (*pinned)->bytes().size());
    resp->set_hot_bytes_written(resp->hot_bytes_written() + engine.hot_page_bytes);
  }
  progress->next = i;
  if (i == req.items_size()) resp->set_onboarded_pages(LeadingOk(*resp));
  totals_->hot_bytes_onboarded += resp->hot_bytes_written() - hot_before;
  totals_->cold_bytes_onboarded += resp->cold_bytes_read() - cold_before;
}

}  // namespace

store::PutOptions DataPlane::PutOptionsFor(const Engine& engine, const v1::OffloadRequest& req,
                                           bool parked) {
  store::PutOptions put;
  // WRITE_ACK_DURABLE implies durable (cache.proto).
  put.durable = req.durable() || req.ack() == v1::WRITE_ACK_DURABLE;
  put.wait_durable = req.ack() == v1::WRITE_ACK_DURABLE;
  put.silent = parked;
  put.origin = engine.id;
  return put;
}

void DataPlane::OffloadStoredItem(const store::BlockKey& key, const store::PutOptions& put,
                                  v1::ItemResult* result) const {
  std::vector<index::Tier> tiers;
  store_->LookupChain(key.ns, {key.hash}, &tiers);
  result->set_code(v1::ITEM_CODE_ALREADY_STORED);
  if (!tiers.empty()) result->set_tier(TierToProto(tiers[0]));
  if (!put.durable) return;
  // Stored already, perhaps not durably: its bytes are those of this page (hashes name contents).
  absl::StatusOr<bool> present = store_->MakeDurable(key, put.wait_durable);
  if (!present.ok()) {
    SetItemResult(present.status(), result);
  } else if (!*present) {
    SetItemResult(absl::UnavailableError("the stored block was removed while it was being made "
                                         "durable; offload the page again"),
                  result);
  }
}

std::unique_ptr<DataPlane> MakeHostDataPlane(store::BlockStore* store, DataPlaneTotals* totals) {
  return std::make_unique<HostDataPlane>(store, totals);
}

}  // namespace kvtier::service
