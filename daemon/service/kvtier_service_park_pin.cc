// KvTierService: the handlers of Park, Resume and Release (ParkTable) and of Pin and Unpin
// (PinTable): they validate the requests and translate them; the tables do the work. The rest
// of the service is in kvtier_service.cc.

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/types/span.h"
#include "daemon/service/kvtier_service.h"
#include "daemon/service/proto_convert.h"
#include "daemon/service/request_limits.h"

namespace kvtier::service {

// ---- Park, Resume, Release ----

grpc::ServerUnaryReactor* KvTierService::Park(grpc::CallbackServerContext* ctx,
                                              const v1::ParkRequest* req, v1::ParkResponse* resp) {
  if (state_->dispatcher().draining())
    return FinishWith(ctx, absl::UnavailableError("the daemon is draining"));
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
    if (state_->dispatcher().draining())
      return absl::UnavailableError("the daemon is draining");  // see Offload
    ParkTable::ParkArgs args;
    args.request_id = req->request_id();
    args.page_indices = absl::MakeConstSpan(req->page_indices().data(), req->page_indices_size());
    args.num_tokens = req->num_tokens();
    args.user_data = req->user_data();
    args.append = req->append();
    if (req->has_ttl()) args.ttl = DurationFromProto(req->ttl());
    absl::StatusOr<ParkTable::Parked> parked = state_->parks().Park(engine, args);
    if (!parked.ok()) return parked.status();
    resp->set_parked_pages(parked->pages);
    resp->set_cold_bytes(parked->cold_bytes);
    SetTime(parked->expires, resp->mutable_expires_at());
    resp->set_tier(v1::TIER_HOST);
    return absl::OkStatus();
  });
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
    ParkTable::ResumeArgs args;
    args.request_id = req->request_id();
    args.first_page = req->first_page();
    args.page_indices = absl::MakeConstSpan(req->page_indices().data(), req->page_indices_size());
    args.keep_parked = req->keep_parked();
    absl::StatusOr<ParkTable::Resumed> resumed = state_->parks().Resume(engine, args);
    if (!resumed.ok()) return resumed.status();
    resp->set_resumed_pages(resumed->resumed_pages);
    resp->set_parked_pages(resumed->parked_pages);
    resp->set_num_tokens(resumed->num_tokens);
    resp->set_user_data(resumed->user_data);
    if (resumed->released) resp->set_released(true);
    return absl::OkStatus();
  });
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
    const std::vector<std::string> ids(req->request_ids().begin(), req->request_ids().end());
    for (const std::optional<uint64_t>& freed : state_->parks().Release(engine.id, ids)) {
      v1::ItemResult* result = resp->add_results();
      if (!freed.has_value()) {
        result->set_code(v1::ITEM_CODE_NOT_FOUND);
        continue;
      }
      resp->set_freed_bytes(resp->freed_bytes() + *freed);
    }
    return absl::OkStatus();
  });
}

// ---- Pin, Unpin ----

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
    std::vector<dataplane::ItemResult> results;
    SetTime(state_->pins().Pin(engine, hashes, ttl, &results), resp->mutable_expires_at());
    for (const dataplane::ItemResult& r : results) ItemResultToProto(r, resp->add_results());
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
      if (!state_->pins().Unpin(engine.id, *h)) {
        result->set_code(v1::ITEM_CODE_FAILED_PRECONDITION);
        result->set_message("this engine holds no pin on the block");
      }
    }
    return absl::OkStatus();
  });
}

}  // namespace kvtier::service
