// KvTierAdminService: Evict, Clear, Verify, Drain.
#include "daemon/service/admin_service.h"

#include <chrono>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "daemon/service/grpc_status.h"
#include "daemon/service/proto_convert.h"
#include "daemon/service/request_limits.h"
#include "kvtier/v1/namespace.pb.h"

namespace kvtier::service {
namespace {

// OK when the caller may use the admin service (always, with authentication off).
absl::Status CheckAdmin(const ServiceState& state, grpc::CallbackServerContext* ctx) {
  absl::StatusOr<std::string> caller = state.Caller(ctx);
  if (!caller.ok()) return caller.status();
  if (!state.IsAdmin(*caller)) {
    return absl::PermissionDeniedError(
        absl::StrFormat("tenant '%s' may not use the admin service (auth.admin_tenants)", *caller));
  }
  return absl::OkStatus();
}

// The registered namespaces the selector names. InvalidArgument without a selector, and for one
// CheckSelector refuses.
absl::StatusOr<std::vector<store::NamespaceId>> Select(const store::BlockStore& store,
                                                       const v1::NamespaceSelector& selector) {
  KVTIER_RETURN_IF_ERROR(CheckSelector(selector));
  std::vector<store::NamespaceId> out;
  const auto namespaces = store.Namespaces();
  switch (selector.selector_case()) {
    case v1::NamespaceSelector::kNamespaceId:
      for (const auto& [id, record] : namespaces) {
        if (id == selector.namespace_id()) out.push_back(id);
      }
      if (out.empty()) {
        return absl::NotFoundError(
            absl::StrFormat("namespace %016x is unknown", selector.namespace_id()));
      }
      return out;
    case v1::NamespaceSelector::kMatch: {
      const v1::NamespaceMatch& m = selector.match();
      for (const auto& [id, record] : namespaces) {
        v1::Namespace ns;
        if (!ns.ParseFromString(record.first)) continue;
        if ((!m.tenant().empty() && m.tenant() != ns.tenant()) ||
            (!m.model().empty() && m.model() != ns.model()) ||
            (!m.partition().empty() && m.partition() != ns.partition())) {
          continue;
        }
        out.push_back(id);
      }
      return out;
    }
    case v1::NamespaceSelector::kAll:
      if (!selector.all()) break;
      for (const auto& [id, record] : namespaces) out.push_back(id);
      return out;
    default:
      break;
  }
  return absl::InvalidArgumentError(
      "a namespace selector is required (namespace_id, match, or all = true)");
}

// The store tier a request names; nullopt for TIER_UNSPECIFIED. InvalidArgument otherwise.
absl::StatusOr<std::optional<index::Tier>> TierFromProto(v1::Tier tier) {
  switch (tier) {
    case v1::TIER_UNSPECIFIED:
      return std::optional<index::Tier>();
    case v1::TIER_GPU:
      return std::optional<index::Tier>(index::Tier::kGpu);
    case v1::TIER_HOST:
      return std::optional<index::Tier>(index::Tier::kHost);
    case v1::TIER_DISK:
      return std::optional<index::Tier>(index::Tier::kDisk);
    default:
      return absl::InvalidArgumentError(absl::StrFormat("unknown tier %d", tier));
  }
}

}  // namespace

grpc::ServerUnaryReactor* KvTierAdminService::Evict(grpc::CallbackServerContext* ctx,
                                                    const v1::EvictRequest* req,
                                                    v1::EvictResponse* resp) {
  if (absl::Status st = CheckAdmin(*state_, ctx); !st.ok()) return FinishWith(ctx, st);
  absl::StatusOr<std::optional<index::Tier>> tier = TierFromProto(req->tier());
  if (!tier.ok()) return FinishWith(ctx, tier.status());
  absl::StatusOr<std::vector<store::NamespaceId>> ids = Select(*store_, req->namespaces());
  if (!ids.ok()) return FinishWith(ctx, ids.status());
  store::BlockStore::EvictRequest evict;
  evict.namespaces = std::move(*ids);
  evict.tier = *tier;
  evict.drop = req->drop() || !tier->has_value();
  switch (req->amount_case()) {
    case v1::EvictRequest::kBlockCount:
      evict.max_blocks = req->block_count();
      break;
    case v1::EvictRequest::kByteCount:
      evict.max_bytes = req->byte_count();
      break;
    case v1::EvictRequest::kHashes:
      if (req->namespaces().selector_case() != v1::NamespaceSelector::kNamespaceId) {
        return FinishWith(
            ctx, absl::InvalidArgumentError("evicting by hash needs namespaces.namespace_id"));
      }
      if (req->hashes().hashes_size() == 0 || req->hashes().hashes_size() > 4096) {
        return FinishWith(
            ctx, absl::InvalidArgumentError(absl::StrFormat("hashes: %d given, 1 to 4096 allowed",
                                                            req->hashes().hashes_size())));
      }
      for (int i = 0; i < req->hashes().hashes_size(); ++i) {
        absl::StatusOr<index::BlockHash> hash = HashFromProto(req->hashes().hashes(i));
        if (!hash.ok()) {
          return FinishWith(ctx, absl::InvalidArgumentError(
                                     absl::StrCat("hashes[", i, "]: ", hash.status().message())));
        }
        evict.hashes.push_back(*hash);
      }
      break;
    default:
      break;
  }
  if (req->amount_case() == v1::EvictRequest::AMOUNT_NOT_SET ||
      (req->amount_case() == v1::EvictRequest::kBlockCount && req->block_count() == 0) ||
      (req->amount_case() == v1::EvictRequest::kByteCount && req->byte_count() == 0)) {
    return FinishWith(ctx, absl::InvalidArgumentError(
                               "an amount is required: block_count >= 1, byte_count >= 1 or "
                               "hashes"));
  }
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  state_->dispatcher().RunOnWorker(
      ctx, reactor, [this, evict = std::move(evict), resp]() -> absl::Status {
        absl::StatusOr<store::BlockStore::EvictReport> report = store_->Evict(evict);
        if (!report.ok()) return report.status();
        resp->set_evicted_blocks(report->evicted_blocks);
        resp->set_evicted_bytes(report->evicted_bytes);
        resp->set_demoted_blocks(report->demoted_blocks);
        resp->set_skipped_pinned_blocks(report->skipped_busy);
        for (const absl::Status& st : report->results) SetItemResult(st, resp->add_results());
        KVTIER_LOG(kInfo, "admin: evicted ", report->evicted_blocks, " blocks (",
                   report->demoted_blocks, " demoted, ", report->skipped_busy, " skipped as busy)");
        return absl::OkStatus();
      });
  return reactor;
}

grpc::ServerUnaryReactor* KvTierAdminService::Clear(grpc::CallbackServerContext* ctx,
                                                    const v1::ClearRequest* req,
                                                    v1::ClearResponse* resp) {
  if (absl::Status st = CheckAdmin(*state_, ctx); !st.ok()) return FinishWith(ctx, st);
  absl::StatusOr<std::optional<index::Tier>> tier = TierFromProto(req->tier());
  if (!tier.ok()) return FinishWith(ctx, tier.status());
  absl::StatusOr<std::vector<store::NamespaceId>> ids = Select(*store_, req->namespaces());
  if (!ids.ok()) return FinishWith(ctx, ids.status());
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  state_->dispatcher().RunOnWorker(
      ctx, reactor,
      [this, ids = std::move(*ids), tier = *tier, include_parked = req->include_parked(),
       resp]() -> absl::Status {
        // Parked requests go first when asked (their pages with them); otherwise their pages,
        // silent blocks, stay so that they can still be resumed.
        if (include_parked) resp->set_released_parked_requests(state_->parks().ReleaseIn(ids));
        if (tier.has_value()) {
          // One tier: its copies are dropped (blocks with another copy stay); events per block.
          store::BlockStore::EvictRequest evict;
          evict.namespaces = ids;
          evict.tier = tier;
          evict.max_blocks = UINT64_MAX;
          evict.drop = true;
          evict.keep_silent = true;
          absl::StatusOr<store::BlockStore::EvictReport> report = store_->Evict(evict);
          if (!report.ok()) return report.status();
          resp->set_cleared_namespaces(static_cast<uint32_t>(ids.size()));
          resp->set_removed_blocks(report->evicted_blocks);
          resp->set_removed_bytes(report->evicted_bytes);
          return absl::OkStatus();
        }
        for (store::NamespaceId id : ids) {
          absl::StatusOr<store::BlockStore::ClearReport> removed =
              store_->ClearNamespace(id, /*include_silent=*/false);
          if (!removed.ok()) return removed.status();
          resp->set_removed_blocks(resp->removed_blocks() + removed->blocks);
          resp->set_removed_bytes(resp->removed_bytes() + removed->bytes);
          resp->set_cleared_namespaces(resp->cleared_namespaces() + 1);
          KVTIER_LOG(kInfo, "admin: cleared namespace ", absl::StrFormat("%016x", id), " (",
                     removed->blocks, " blocks, ", removed->bytes, " bytes)");
        }
        return absl::OkStatus();
      });
  return reactor;
}

grpc::ServerUnaryReactor* KvTierAdminService::Verify(grpc::CallbackServerContext* ctx,
                                                     const v1::VerifyRequest* req,
                                                     v1::VerifyResponse* resp) {
  if (absl::Status st = CheckAdmin(*state_, ctx); !st.ok()) return FinishWith(ctx, st);
  absl::StatusOr<std::optional<index::Tier>> tier = TierFromProto(req->tier());
  if (!tier.ok()) return FinishWith(ctx, tier.status());
  if (*tier == index::Tier::kGpu) {
    return FinishWith(ctx, absl::InvalidArgumentError(
                               "the GPU tier holds hot pages without checksums: verify host or "
                               "disk (or leave tier unset for both)"));
  }
  if (req->max_reported() > 4096) {
    return FinishWith(ctx, absl::InvalidArgumentError(absl::StrFormat(
                               "max_reported %d is above 4096", req->max_reported())));
  }
  store::BlockStore::VerifyOptions options;
  options.tier = *tier;
  options.report_only = req->report_only();
  options.max_blocks = req->max_blocks();
  options.max_reported = req->max_reported() == 0 ? 100 : req->max_reported();
  // A selector with no member set reads as unset: every namespace.
  if (req->namespaces().selector_case() != v1::NamespaceSelector::SELECTOR_NOT_SET) {
    absl::StatusOr<std::vector<store::NamespaceId>> ids = Select(*store_, req->namespaces());
    if (!ids.ok()) return FinishWith(ctx, ids.status());
    if (ids->empty()) {
      return FinishWith(ctx, absl::NotFoundError("the namespace selector matches no namespace"));
    }
    options.namespaces = std::move(*ids);
  }
  // scrub = false would allow a header-only check; every check here reads the whole block and
  // verifies its payload checksum too (a disk block must be read whole anyway).
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  state_->dispatcher().RunOnWorker(ctx, reactor, [this, options, resp]() -> absl::Status {
    absl::StatusOr<store::BlockStore::VerifyReport> report = store_->Verify(options);
    if (!report.ok()) return report.status();
    resp->set_checked_blocks(report->blocks);
    resp->set_checked_bytes(report->bytes);
    resp->set_corrupt_blocks(report->failed);
    resp->set_missing_blocks(report->missing);
    resp->set_removed_blocks(report->removed);
    resp->set_complete(report->complete);
    SetDuration(absl::Seconds(report->seconds), resp->mutable_elapsed());
    for (const auto& f : report->failures) {
      v1::CorruptBlock* c = resp->add_corrupt();
      c->set_namespace_id(f.key.ns);
      c->set_block_hash(reinterpret_cast<const char*>(f.key.hash.data()), f.key.hash.size());
      c->set_tier(TierToProto(f.tier));
      c->set_message(f.message);
    }
    KVTIER_LOG(kInfo, "admin: verified ", report->blocks, " blocks: ", report->failed, " corrupt, ",
               report->missing, " unreadable, ", report->removed, " removed");
    return absl::OkStatus();
  });
  return reactor;
}

grpc::ServerUnaryReactor* KvTierAdminService::Drain(grpc::CallbackServerContext* ctx,
                                                    const v1::DrainRequest* req,
                                                    v1::DrainResponse* resp) {
  if (absl::Status st = CheckAdmin(*state_, ctx); !st.ok()) return FinishWith(ctx, st);
  if (req->cancel()) {
    state_->dispatcher().EndDrain();
    KVTIER_LOG(kInfo, "admin: drain cancelled; accepting work again");
    resp->set_drained(false);
    resp->set_registered_engines(static_cast<uint32_t>(state_->registry().size()));
    return FinishWith(ctx, absl::OkStatus());
  }
  state_->dispatcher().BeginDrain();
  KVTIER_LOG(kInfo, "admin: draining",
             req->flush_to_disk() ? " (copying the host tier to disk)" : "");
  // The wait for in-flight work must not run on the workers it waits for: a thread of its own.
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  absl::MutexLock lock(&mu_);
  threads_.emplace_back(
      [this, reactor, resp, flush = req->flush_to_disk(), deadline = ctx->deadline()] {
        const absl::Time start = absl::Now();
        // No deadline (time_point::max()) means wait as long as it takes.
        const auto now = std::chrono::system_clock::now();
        const absl::Duration wait = deadline - now > std::chrono::hours(24 * 365)
                                        ? absl::InfiniteDuration()
                                        : absl::FromChrono(deadline - now);
        absl::Status st = state_->dispatcher().WaitIdle(wait)
                              ? absl::OkStatus()
                              : absl::DeadlineExceededError(
                                    "in-flight requests are still running; draining continues");
        // flush_to_disk copies the host tier to disk and keeps it: a cancelled drain (an aborted
        // upgrade) still reads from host memory.
        const uint64_t before = store_->Stats().blocks_written_to_disk;
        if (st.ok()) st = flush ? store_->FlushToDisk() : store_->Flush();
        resp->set_flushed_blocks(store_->Stats().blocks_written_to_disk - before);
        resp->set_drained(st.ok());
        resp->set_registered_engines(static_cast<uint32_t>(state_->registry().size()));
        SetDuration(absl::Now() - start, resp->mutable_elapsed());
        reactor->Finish(ToGrpc(st));
      });
  return reactor;
}

KvTierAdminService::~KvTierAdminService() {
  absl::MutexLock lock(&mu_);
  for (std::thread& t : threads_) t.join();
}

}  // namespace kvtier::service
