// KvTierService: Park, Resume and Release of paused requests, and Pin and Unpin of blocks; the
// rest of the service is in kvtier_service.cc.

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/coding.h"
#include "common/digest.h"
#include "common/quote.h"
#include "common/status_macros.h"
#include "daemon/service/kvtier_service.h"
#include "daemon/service/proto_convert.h"
#include "daemon/service/request_limits.h"

namespace kvtier::service {

// ---- Park, Resume, Release ----

index::BlockHash KvTierService::ParkHash(const std::string& engine_id,
                                         const std::string& request_id, uint64_t position) {
  std::string text = "kvtier-park-v1";
  for (const std::string* part : {&engine_id, &request_id}) {
    PutFixed32(&text, static_cast<uint32_t>(part->size()));
    text.append(*part);
  }
  PutFixed64(&text, position);
  return Sha256(text);
}

uint64_t KvTierService::DropParked(const Parked& parked) {
  uint64_t freed = 0;
  for (const index::BlockHash& h : parked.hashes) {
    absl::StatusOr<bool> removed = store_->Remove({parked.ns, h});
    if (removed.ok() && *removed) freed += parked.block_bytes;
  }
  return freed;
}

KvTierService::Parked KvTierService::EraseParked(decltype(parked_)::iterator it) {
  Parked parked = std::move(it->second);
  parked_.erase(it);
  auto count = parked_per_tenant_.find(parked.tenant);
  if (count != parked_per_tenant_.end() && --count->second == 0) parked_per_tenant_.erase(count);
  return parked;
}

absl::Status KvTierService::CheckParkRoom(const std::string& tenant) const {
  if (parked_.size() >= options_.max_parked_requests) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("%d requests are parked (engines.max_parked_requests)", parked_.size()));
  }
  auto count = parked_per_tenant_.find(tenant);
  if (count != parked_per_tenant_.end() &&
      count->second >= options_.max_parked_requests_per_tenant) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "this tenant has %d parked requests (engines.max_parked_requests_per_tenant)",
        count->second));
  }
  return absl::OkStatus();
}

uint32_t KvTierService::ReleaseParkedWhere(absl::FunctionRef<bool(const Parked&)> match) {
  std::vector<Parked> dropped;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = parked_.begin(); it != parked_.end();) {
      if (match(it->second)) {
        dropped.push_back(EraseParked(it++));
      } else {
        ++it;
      }
    }
  }
  for (const Parked& p : dropped) DropParked(p);
  return static_cast<uint32_t>(dropped.size());
}

uint32_t KvTierService::ReleaseParked(const std::string& engine_id, absl::Time now) {
  return ReleaseParkedWhere([&](const Parked& p) {
    return engine_id.empty() ? p.expires < now : p.engine_id == engine_id;
  });
}

uint32_t KvTierService::ReleaseParkedIn(const std::vector<store::NamespaceId>& namespaces) {
  return ReleaseParkedWhere([&](const Parked& p) {
    return std::find(namespaces.begin(), namespaces.end(), p.ns) != namespaces.end();
  });
}

grpc::ServerUnaryReactor* KvTierService::Park(grpc::CallbackServerContext* ctx,
                                              const v1::ParkRequest* req, v1::ParkResponse* resp) {
  if (draining_) return FinishWith(ctx, absl::UnavailableError("the daemon is draining"));
  if (absl::Status st = CheckRequestId("request_id", req->request_id()); !st.ok()) {
    return FinishWith(ctx, st);
  }
  if (absl::Status st = CheckWriteOptions(req->priority(), req->ack()); !st.ok()) {
    return FinishWith(ctx, st);
  }
  if (req->page_indices_size() == 0 ||
      req->page_indices_size() > static_cast<int>(options_.max_items_per_request)) {
    return FinishWith(ctx, absl::InvalidArgumentError(absl::StrFormat(
                               "page_indices has %d entries (1 to %d)", req->page_indices_size(),
                               options_.max_items_per_request)));
  }
  if (req->user_data().size() > options_.max_park_user_data_bytes) {
    return FinishWith(ctx, absl::InvalidArgumentError(absl::StrFormat(
                               "user_data has %d bytes (at most %d)", req->user_data().size(),
                               options_.max_park_user_data_bytes)));
  }
  return OnEngineWorker(ctx, req->engine_id(), [this, req, resp](const Engine& engine) {
    if (draining_) return absl::UnavailableError("the daemon is draining");  // see Offload
    return DoPark(engine, *req, resp);
  });
}

absl::Status KvTierService::DoPark(const Engine& engine, const v1::ParkRequest& req,
                                   v1::ParkResponse* resp) {
  absl::MutexLock serial(&park_mu_);
  const auto key = std::make_pair(engine.id, req.request_id());
  uint64_t first = 0;
  {
    absl::MutexLock lock(&mu_);
    auto it = parked_.find(key);
    if (it != parked_.end() && !req.append()) {
      return absl::AlreadyExistsError(absl::StrFormat(
          "request %s is already parked (set append to add pages)", Quoted(req.request_id())));
    }
    if (it == parked_.end() && req.append()) {
      return absl::NotFoundError(
          absl::StrFormat("append: nothing is parked under request %s", Quoted(req.request_id())));
    }
    if (it == parked_.end()) KVTIER_RETURN_IF_ERROR(CheckParkRoom(engine.tenant));
    if (it != parked_.end()) first = it->second.hashes.size();
  }
  // The pages go through the ordinary offload path under derived hashes, all or nothing.
  OffloadBatch batch;
  batch.parked = true;
  std::vector<index::BlockHash> hashes;
  for (int i = 0; i < req.page_indices_size(); ++i) {
    hashes.push_back(ParkHash(engine.id, req.request_id(), first + i));
    batch.items.push_back(PageItem{hashes.back(), req.page_indices(i)});
  }
  OffloadResult result;
  engine.plane->Offload(engine, batch, &result, /*progress=*/nullptr, DataPlane::kAllItems);
  for (size_t i = 0; i < result.results.size(); ++i) {
    const ItemResult& r = result.results[i];
    if (r.code == ItemCode::kOk || r.code == ItemCode::kAlreadyStored) continue;
    Parked partial;
    partial.ns = engine.ns;
    partial.hashes = hashes;
    partial.block_bytes = engine.codec->block_bytes();
    DropParked(partial);  // all or nothing
    absl::StatusCode code = absl::StatusCode::kInternal;
    switch (r.code) {
      case ItemCode::kInvalidArgument:
        code = absl::StatusCode::kInvalidArgument;
        break;
      case ItemCode::kResourceExhausted:
        code = absl::StatusCode::kResourceExhausted;
        break;
      case ItemCode::kUnavailable:
        code = absl::StatusCode::kUnavailable;
        break;
      case ItemCode::kFailedPrecondition:
        code = absl::StatusCode::kFailedPrecondition;
        break;
      default:
        break;
    }
    return absl::Status(code,
                        absl::StrFormat("page_indices[%d]: %s (nothing was parked)", i, r.message));
  }
  absl::Duration ttl = req.has_ttl() ? DurationFromProto(req.ttl()) : options_.default_park_ttl;
  ttl = std::clamp(ttl, absl::Seconds(1), options_.max_park_ttl);
  absl::MutexLock lock(&mu_);
  auto existing = parked_.find(key);
  if (req.append() && (existing == parked_.end() || existing->second.hashes.size() != first)) {
    // Expired (or released) while the pages were written: do not start a new request with them.
    Parked orphan;
    orphan.ns = engine.ns;
    orphan.hashes = hashes;
    orphan.block_bytes = engine.codec->block_bytes();
    mu_.Unlock();
    DropParked(orphan);
    mu_.Lock();
    return absl::NotFoundError(absl::StrFormat(
        "request %s expired or was released while pages were appended", Quoted(req.request_id())));
  }
  if (existing == parked_.end()) {
    // Checked again: other parks may have taken the last slots while the pages were written.
    if (absl::Status room = CheckParkRoom(engine.tenant); !room.ok()) {
      Parked unwanted;
      unwanted.ns = engine.ns;
      unwanted.hashes = hashes;
      unwanted.block_bytes = engine.codec->block_bytes();
      mu_.Unlock();
      DropParked(unwanted);
      mu_.Lock();
      return room;
    }
    ++parked_per_tenant_[engine.tenant];
  }
  Parked& parked = parked_[key];
  parked.engine_id = engine.id;
  parked.tenant = engine.tenant;
  parked.ns = engine.ns;
  parked.block_bytes = engine.codec->block_bytes();
  parked.hashes.insert(parked.hashes.end(), hashes.begin(), hashes.end());
  parked.num_tokens = req.num_tokens();
  if (!req.user_data().empty() || !req.append()) parked.user_data = req.user_data();
  parked.expires = absl::Now() + ttl;
  resp->set_parked_pages(static_cast<uint32_t>(parked.hashes.size()));
  resp->set_cold_bytes(parked.hashes.size() * parked.block_bytes);
  SetTime(parked.expires, resp->mutable_expires_at());
  resp->set_tier(v1::TIER_HOST);
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* KvTierService::Resume(grpc::CallbackServerContext* ctx,
                                                const v1::ResumeRequest* req,
                                                v1::ResumeResponse* resp) {
  if (req->page_indices_size() > static_cast<int>(options_.max_items_per_request)) {
    return FinishWith(ctx, absl::InvalidArgumentError(absl::StrFormat(
                               "page_indices has %d entries (at most %d)", req->page_indices_size(),
                               options_.max_items_per_request)));
  }
  if (absl::Status st = CheckRequestId("request_id", req->request_id()); !st.ok()) {
    return FinishWith(ctx, st);
  }
  return OnEngineWorker(ctx, req->engine_id(), [this, req, resp](const Engine& engine) {
    return DoResume(engine, *req, resp);
  });
}

absl::Status KvTierService::DoResume(const Engine& engine, const v1::ResumeRequest& req,
                                     v1::ResumeResponse* resp) {
  absl::MutexLock serial(&park_mu_);
  const auto key = std::make_pair(engine.id, req.request_id());
  Parked parked;
  {
    absl::MutexLock lock(&mu_);
    auto it = parked_.find(key);
    if (it == parked_.end()) {
      return absl::NotFoundError(
          absl::StrFormat("nothing is parked under request %s (never parked, released or expired)",
                          Quoted(req.request_id())));
    }
    parked = it->second;
  }
  const uint64_t end = uint64_t{req.first_page()} + req.page_indices_size();
  if (end > parked.hashes.size()) {
    return absl::InvalidArgumentError(absl::StrFormat("pages [%d, %d) asked for; %d are parked",
                                                      req.first_page(), end, parked.hashes.size()));
  }
  OnboardBatch batch;
  for (int i = 0; i < req.page_indices_size(); ++i) {
    batch.items.push_back(PageItem{parked.hashes[req.first_page() + i], req.page_indices(i)});
  }
  OnboardResult result;
  engine.plane->Onboard(engine, batch, &result, /*progress=*/nullptr, DataPlane::kAllItems);
  for (size_t i = 0; i < result.results.size(); ++i) {
    const ItemResult& r = result.results[i];
    if (r.code == ItemCode::kOk) continue;
    if (r.code == ItemCode::kInvalidArgument) {
      return absl::InvalidArgumentError(absl::StrFormat("page_indices[%d]: %s", i, r.message));
    }
    if (r.code == ItemCode::kUnavailable) {  // transient (no staging memory): retry
      return absl::UnavailableError(absl::StrFormat("page_indices[%d]: %s", i, r.message));
    }
    // A parked block that is gone (evicted) or failed its checksum: the engine recomputes.
    return absl::DataLossError(absl::StrFormat(
        "parked page %d of request %s is lost (%s); recompute it", req.first_page() + i,
        Quoted(req.request_id()), r.code == ItemCode::kNotFound ? "evicted" : r.message));
  }
  resp->set_resumed_pages(result.onboarded_pages);
  resp->set_parked_pages(static_cast<uint32_t>(parked.hashes.size()));
  resp->set_num_tokens(parked.num_tokens);
  resp->set_user_data(parked.user_data);
  if (!req.keep_parked() && end == parked.hashes.size()) {
    {
      absl::MutexLock lock(&mu_);
      auto it = parked_.find(key);
      if (it != parked_.end()) EraseParked(it);
    }
    DropParked(parked);
    resp->set_released(true);
  } else {
    absl::MutexLock lock(&mu_);
    auto it = parked_.find(key);
    if (it != parked_.end()) it->second.expires = absl::Now() + options_.default_park_ttl;
  }
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* KvTierService::Release(grpc::CallbackServerContext* ctx,
                                                 const v1::ReleaseRequest* req,
                                                 v1::ReleaseResponse* resp) {
  if (req->request_ids_size() > static_cast<int>(options_.max_items_per_request)) {
    return FinishWith(ctx, absl::InvalidArgumentError(absl::StrFormat(
                               "%d request ids (at most %d)", req->request_ids_size(),
                               options_.max_items_per_request)));
  }
  for (int i = 0; i < req->request_ids_size(); ++i) {
    if (absl::Status st = CheckRequestId(absl::StrCat("request_ids[", i, "]"), req->request_ids(i));
        !st.ok()) {
      return FinishWith(ctx, st);
    }
  }
  return OnEngineWorker(ctx, req->engine_id(), [this, req, resp](const Engine& engine) {
    absl::MutexLock serial(&park_mu_);
    for (const std::string& id : req->request_ids()) {
      std::optional<Parked> parked;
      {
        absl::MutexLock lock(&mu_);
        auto it = parked_.find(std::make_pair(engine.id, id));
        if (it != parked_.end()) parked = EraseParked(it);
      }
      v1::ItemResult* result = resp->add_results();
      if (!parked.has_value()) {
        result->set_code(v1::ITEM_CODE_NOT_FOUND);
        continue;
      }
      resp->set_freed_bytes(resp->freed_bytes() + DropParked(*parked));
    }
    return absl::OkStatus();
  });
}

// ---- Pin, Unpin ----

absl::Time KvTierService::PinBlocks(const Engine& engine,
                                    const std::vector<index::BlockHash>& hashes, absl::Duration ttl,
                                    google::protobuf::RepeatedPtrField<v1::ItemResult>* out) {
  if (ttl <= absl::ZeroDuration()) ttl = options_.default_pin_ttl;
  ttl = std::min(ttl, options_.max_pin_ttl);
  const absl::Time expires = absl::Now() + ttl;
  for (const index::BlockHash& h : hashes) {
    v1::ItemResult* result = out->Add();
    const auto key = std::make_pair(engine.id, h);
    {
      absl::MutexLock lock(&mu_);
      auto it = pins_.find(key);
      if (it != pins_.end()) {  // pinned already: extend, do not stack
        it->second.expires = std::max(it->second.expires, expires);
        result->set_tier(TierToProto(it->second.hold.served_from()));
        continue;
      }
    }
    absl::StatusOr<std::optional<store::PinnedBlock>> hold = store_->Hold({engine.ns, h});
    if (!hold.ok() || !hold->has_value()) {
      SetItemResult(hold.ok() ? absl::NotFoundError("") : hold.status(), result);
      result->clear_message();
      continue;
    }
    result->set_tier(TierToProto((*hold)->served_from()));
    absl::MutexLock lock(&mu_);
    pins_.try_emplace(key, HeldPin{std::move(**hold), expires});
  }
  return expires;
}

uint32_t KvTierService::DropPins(const std::string& engine_id,
                                 const std::vector<index::BlockHash>* hashes, absl::Time now) {
  std::vector<HeldPin> dropped;  // released outside mu_ (the store takes its own lock)
  {
    absl::MutexLock lock(&mu_);
    if (hashes != nullptr) {
      for (const index::BlockHash& h : *hashes) {
        auto it = pins_.find(std::make_pair(engine_id, h));
        if (it == pins_.end()) continue;
        dropped.push_back(std::move(it->second));
        pins_.erase(it);
      }
    } else {
      for (auto it = pins_.begin(); it != pins_.end();) {
        const bool match =
            engine_id.empty() ? it->second.expires < now : it->first.first == engine_id;
        if (match) {
          dropped.push_back(std::move(it->second));
          pins_.erase(it++);
        } else {
          ++it;
        }
      }
    }
  }
  return static_cast<uint32_t>(dropped.size());
}

grpc::ServerUnaryReactor* KvTierService::Pin(grpc::CallbackServerContext* ctx,
                                             const v1::PinRequest* req, v1::PinResponse* resp) {
  if (req->block_hashes_size() > static_cast<int>(options_.max_items_per_request)) {
    return FinishWith(ctx, absl::InvalidArgumentError(absl::StrFormat(
                               "%d block hashes (at most %d per request)", req->block_hashes_size(),
                               options_.max_items_per_request)));
  }
  std::vector<index::BlockHash> hashes;
  for (int i = 0; i < req->block_hashes_size(); ++i) {
    absl::StatusOr<index::BlockHash> h = HashFromProto(req->block_hashes(i));
    if (!h.ok()) {
      return FinishWith(ctx, absl::InvalidArgumentError(
                                 absl::StrCat("block_hashes[", i, "]: ", h.status().message())));
    }
    hashes.push_back(*h);
  }
  const absl::Duration ttl =
      req->has_ttl() ? DurationFromProto(req->ttl()) : options_.default_pin_ttl;
  return WithEngine(ctx, req->engine_id(), [&](const Engine& engine) {
    SetTime(PinBlocks(engine, hashes, ttl, resp->mutable_results()), resp->mutable_expires_at());
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* KvTierService::Unpin(grpc::CallbackServerContext* ctx,
                                               const v1::UnpinRequest* req,
                                               v1::UnpinResponse* resp) {
  if (req->block_hashes_size() > static_cast<int>(options_.max_items_per_request)) {
    return FinishWith(ctx, absl::InvalidArgumentError(absl::StrFormat(
                               "%d block hashes (at most %d per request)", req->block_hashes_size(),
                               options_.max_items_per_request)));
  }
  return WithEngine(ctx, req->engine_id(), [&](const Engine& engine) {
    for (int i = 0; i < req->block_hashes_size(); ++i) {
      v1::ItemResult* result = resp->add_results();
      absl::StatusOr<index::BlockHash> h = HashFromProto(req->block_hashes(i));
      if (!h.ok()) {
        SetItemResult(h.status(), result);
        continue;
      }
      const std::vector<index::BlockHash> one = {*h};
      if (DropPins(engine.id, &one, absl::Now()) == 0) {
        result->set_code(v1::ITEM_CODE_FAILED_PRECONDITION);
        result->set_message("this engine holds no pin on the block");
      }
    }
    return absl::OkStatus();
  });
}

}  // namespace kvtier::service
