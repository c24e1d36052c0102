// ParkTable: Park, Resume and Release of paused requests through the engine's data plane.
#include "daemon/service/park_table.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "common/coding.h"
#include "common/digest.h"
#include "common/quote.h"
#include "common/status_macros.h"
#include "daemon/dataplane/data_plane.h"

namespace kvtier::service {
namespace {

// The status of a Park whose page `i` failed with `r` (nothing is parked then).
absl::Status ParkFailure(size_t i, const dataplane::ItemResult& r) {
  absl::StatusCode code = absl::StatusCode::kInternal;
  switch (r.code) {
    case dataplane::ItemCode::kInvalidArgument:
      code = absl::StatusCode::kInvalidArgument;
      break;
    case dataplane::ItemCode::kResourceExhausted:
      code = absl::StatusCode::kResourceExhausted;
      break;
    case dataplane::ItemCode::kUnavailable:
      code = absl::StatusCode::kUnavailable;
      break;
    case dataplane::ItemCode::kFailedPrecondition:
      code = absl::StatusCode::kFailedPrecondition;
      break;
    default:
      break;
  }
  return absl::Status(code,
                      absl::StrFormat("page_indices[%d]: %s (nothing was parked)", i, r.message));
}

}  // namespace

index::BlockHash ParkTable::Hash(absl::string_view engine_id, absl::string_view request_id,
                                 uint64_t position) {
  std::string text = "kvtier-park-v1";
  for (absl::string_view part : {engine_id, request_id}) {
    PutFixed32(&text, static_cast<uint32_t>(part.size()));
    text.append(part.data(), part.size());
  }
  PutFixed64(&text, position);
  return Sha256(text);
}

uint64_t ParkTable::DropBlocks(store::NamespaceId ns, const std::vector<index::BlockHash>& hashes,
                               uint64_t block_bytes) {
  uint64_t freed = 0;
  for (const index::BlockHash& h : hashes) {
    absl::StatusOr<bool> removed = store_->Remove({ns, h});
    if (removed.ok() && *removed) freed += block_bytes;
  }
  return freed;
}

ParkTable::Record ParkTable::Erase(Map::iterator it) {
  Record record = std::move(it->second);
  records_.erase(it);
  auto count = per_tenant_.find(record.tenant);
  if (count != per_tenant_.end() && --count->second == 0) per_tenant_.erase(count);
  return record;
}

absl::Status ParkTable::CheckRoom(const std::string& tenant) const {
  if (records_.size() >= limits_.max_requests) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("%d requests are parked (engines.max_parked_requests)", records_.size()));
  }
  auto count = per_tenant_.find(tenant);
  if (count != per_tenant_.end() && count->second >= limits_.max_requests_per_tenant) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "this tenant has %d parked requests (engines.max_parked_requests_per_tenant)",
        count->second));
  }
  return absl::OkStatus();
}

absl::StatusOr<ParkTable::Parked> ParkTable::Park(const Engine& engine, const ParkArgs& args) {
  absl::MutexLock serial(&serial_);
  const Key key(engine.id, std::string(args.request_id));
  uint64_t first = 0;
  {
    absl::MutexLock lock(&mu_);
    auto it = records_.find(key);
    if (it != records_.end() && !args.append) {
      return absl::AlreadyExistsError(absl::StrFormat(
          "request %s is already parked (set append to add pages)", Quoted(args.request_id)));
    }
    if (it == records_.end() && args.append) {
      return absl::NotFoundError(
          absl::StrFormat("append: nothing is parked under request %s", Quoted(args.request_id)));
    }
    if (it == records_.end()) KVTIER_RETURN_IF_ERROR(CheckRoom(engine.tenant));
    if (it != records_.end()) first = it->second.hashes.size();
  }
  // The pages go through the ordinary offload path under derived hashes, all or nothing.
  const uint64_t block_bytes = engine.codec->block_bytes();
  dataplane::OffloadBatch batch;
  batch.parked = true;
  std::vector<index::BlockHash> hashes;
  for (size_t i = 0; i < args.page_indices.size(); ++i) {
    hashes.push_back(Hash(engine.id, args.request_id, first + i));
    batch.items.push_back(dataplane::PageItem{hashes.back(), args.page_indices[i]});
  }
  dataplane::OffloadResult result;
  engine.plane->Offload(engine, batch, &result, /*progress=*/nullptr,
                        dataplane::DataPlane::kAllItems);
  for (size_t i = 0; i < result.results.size(); ++i) {
    const dataplane::ItemResult& r = result.results[i];
    if (r.code == dataplane::ItemCode::kOk || r.code == dataplane::ItemCode::kAlreadyStored)
      continue;
    DropBlocks(engine.ns, hashes, block_bytes);  // all or nothing
    return ParkFailure(i, r);
  }
  absl::Duration ttl = args.ttl.value_or(limits_.default_ttl);
  ttl = std::clamp(ttl, absl::Seconds(1), limits_.max_ttl);
  absl::MutexLock lock(&mu_);
  auto existing = records_.find(key);
  if (args.append && (existing == records_.end() || existing->second.hashes.size() != first)) {
    // Expired (or released) while the pages were written: do not start a new request with them.
    mu_.Unlock();
    DropBlocks(engine.ns, hashes, block_bytes);
    mu_.Lock();
    return absl::NotFoundError(absl::StrFormat(
        "request %s expired or was released while pages were appended", Quoted(args.request_id)));
  }
  if (existing == records_.end()) {
    // Checked again: other parks may have taken the last slots while the pages were written.
    if (absl::Status room = CheckRoom(engine.tenant); !room.ok()) {
      mu_.Unlock();
      DropBlocks(engine.ns, hashes, block_bytes);
      mu_.Lock();
      return room;
    }
    ++per_tenant_[engine.tenant];
  }
  Record& record = records_[key];
  record.engine_id = engine.id;
  record.tenant = engine.tenant;
  record.ns = engine.ns;
  record.block_bytes = block_bytes;
  record.hashes.insert(record.hashes.end(), hashes.begin(), hashes.end());
  record.num_tokens = args.num_tokens;
  if (!args.user_data.empty() || !args.append) record.user_data = std::string(args.user_data);
  record.expires = absl::Now() + ttl;
  Parked parked;
  parked.pages = static_cast<uint32_t>(record.hashes.size());
  parked.cold_bytes = record.hashes.size() * record.block_bytes;
  parked.expires = record.expires;
  return parked;
}

absl::StatusOr<ParkTable::Resumed> ParkTable::Resume(const Engine& engine, const ResumeArgs& args) {
  absl::MutexLock serial(&serial_);
  const Key key(engine.id, std::string(args.request_id));
  Record record;
  {
    absl::MutexLock lock(&mu_);
    auto it = records_.find(key);
    if (it == records_.end()) {
      return absl::NotFoundError(
          absl::StrFormat("nothing is parked under request %s (never parked, released or expired)",
                          Quoted(args.request_id)));
    }
    record = it->second;
  }
  const uint64_t end = uint64_t{args.first_page} + args.page_indices.size();
  if (end > record.hashes.size()) {
    return absl::InvalidArgumentError(absl::StrFormat("pages [%d, %d) asked for; %d are parked",
                                                      args.first_page, end, record.hashes.size()));
  }
  dataplane::OnboardBatch batch;
  for (size_t i = 0; i < args.page_indices.size(); ++i) {
    batch.items.push_back(
        dataplane::PageItem{record.hashes[args.first_page + i], args.page_indices[i]});
  }
  dataplane::OnboardResult result;
  engine.plane->Onboard(engine, batch, &result, /*progress=*/nullptr,
                        dataplane::DataPlane::kAllItems);
  for (size_t i = 0; i < result.results.size(); ++i) {
    const dataplane::ItemResult& r = result.results[i];
    if (r.code == dataplane::ItemCode::kOk) continue;
    if (r.code == dataplane::ItemCode::kInvalidArgument) {
      return absl::InvalidArgumentError(absl::StrFormat("page_indices[%d]: %s", i, r.message));
    }
    if (r.code == dataplane::ItemCode::kUnavailable) {  // transient (no staging memory): retry
      return absl::UnavailableError(absl::StrFormat("page_indices[%d]: %s", i, r.message));
    }
    // A parked block that is gone (evicted) or failed its checksum: the engine recomputes.
    return absl::DataLossError(absl::StrFormat(
        "parked page %d of request %s is lost (%s); recompute it", args.first_page + i,
        Quoted(args.request_id), r.code == dataplane::ItemCode::kNotFound ? "evicted" : r.message));
  }
  Resumed resumed;
  resumed.resumed_pages = result.onboarded_pages;
  resumed.parked_pages = static_cast<uint32_t>(record.hashes.size());
  resumed.num_tokens = record.num_tokens;
  resumed.user_data = record.user_data;
  if (!args.keep_parked && end == record.hashes.size()) {
    {
      absl::MutexLock lock(&mu_);
      auto it = records_.find(key);
      if (it != records_.end()) Erase(it);
    }
    DropBlocks(record.ns, record.hashes, record.block_bytes);
    resumed.released = true;
  } else {
    absl::MutexLock lock(&mu_);
    auto it = records_.find(key);
    if (it != records_.end()) it->second.expires = absl::Now() + limits_.default_ttl;
  }
  return resumed;
}

std::vector<std::optional<uint64_t>> ParkTable::Release(const std::string& engine_id,
                                                        absl::Span<const std::string> request_ids) {
  absl::MutexLock serial(&serial_);
  std::vector<std::optional<uint64_t>> freed;
  for (const std::string& id : request_ids) {
    std::optional<Record> record;
    {
      absl::MutexLock lock(&mu_);
      auto it = records_.find(Key(engine_id, id));
      if (it != records_.end()) record = Erase(it);
    }
    if (!record.has_value()) {
      freed.push_back(std::nullopt);
      continue;
    }
    freed.push_back(DropBlocks(record->ns, record->hashes, record->block_bytes));
  }
  return freed;
}

uint32_t ParkTable::ReleaseWhere(absl::FunctionRef<bool(const Record&)> match) {
  std::vector<Record> dropped;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = records_.begin(); it != records_.end();) {
      if (match(it->second)) {
        dropped.push_back(Erase(it++));
      } else {
        ++it;
      }
    }
  }
  for (const Record& r : dropped) DropBlocks(r.ns, r.hashes, r.block_bytes);
  return static_cast<uint32_t>(dropped.size());
}

uint32_t ParkTable::ReleaseEngine(const std::string& engine_id) {
  return ReleaseWhere([&](const Record& r) { return r.engine_id == engine_id; });
}

uint32_t ParkTable::ReleaseExpired(absl::Time now) {
  return ReleaseWhere([&](const Record& r) { return r.expires < now; });
}

uint32_t ParkTable::ReleaseIn(absl::Span<const store::NamespaceId> namespaces) {
  return ReleaseWhere([&](const Record& r) {
    return std::find(namespaces.begin(), namespaces.end(), r.ns) != namespaces.end();
  });
}

size_t ParkTable::size() const {
  absl::MutexLock lock(&mu_);
  return records_.size();
}

uint32_t ParkTable::CountOfTenant(const std::string& tenant) const {
  absl::MutexLock lock(&mu_);
  auto count = per_tenant_.find(tenant);
  return count == per_tenant_.end() ? 0 : count->second;
}

ParkTable::Counts ParkTable::CountByNamespaceAndEngine() const {
  Counts counts;
  absl::MutexLock lock(&mu_);
  for (const auto& [key, record] : records_) {
    ++counts.per_namespace[record.ns];
    ++counts.per_engine[record.engine_id];
  }
  return counts;
}

}  // namespace kvtier::service
