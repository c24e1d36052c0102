// KvTierAdminService: Clear, Verify, Drain.
#include "daemon/service/admin_service.h"

#include <chrono>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "daemon/service/proto_convert.h"
#include "kvtier/v1/namespace.pb.h"

namespace kvtier::service {
namespace {

// OK when the caller may use the admin service (always, with authentication off).
absl::Status CheckAdmin(const KvTierService& service, grpc::CallbackServerContext* ctx) {
  absl::StatusOr<std::string> caller = service.Caller(ctx);
  if (!caller.ok()) return caller.status();
  if (!service.IsAdmin(*caller)) {
    return absl::PermissionDeniedError(
        absl::StrFormat("tenant '%s' may not use the admin service (auth.admin_tenants)", *caller));
  }
  return absl::OkStatus();
}

// The registered namespaces the selector names. InvalidArgument without a selector.
absl::StatusOr<std::vector<store::NamespaceId>> Select(const store::BlockStore& store,
                                                       const v1::NamespaceSelector& selector) {
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

}  // namespace

grpc::ServerUnaryReactor* KvTierAdminService::Clear(grpc::CallbackServerContext* ctx,
                                                    const v1::ClearRequest* req,
                                                    v1::ClearResponse* resp) {
  if (absl::Status st = CheckAdmin(*service_, ctx); !st.ok()) return FinishWith(ctx, st);
  if (req->tier() != v1::TIER_UNSPECIFIED) {
    return FinishWith(ctx, absl::UnimplementedError("clearing one tier only is not served yet"));
  }
  absl::StatusOr<std::vector<store::NamespaceId>> ids = Select(*store_, req->namespaces());
  if (!ids.ok()) return FinishWith(ctx, ids.status());
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  service_->RunOnWorker(reactor, [this, ids = std::move(*ids), resp]() -> absl::Status {
    for (store::NamespaceId id : ids) {
      absl::StatusOr<uint64_t> removed = store_->ClearNamespace(id);
      if (!removed.ok()) return removed.status();
      resp->set_removed_blocks(resp->removed_blocks() + *removed);
      resp->set_cleared_namespaces(resp->cleared_namespaces() + 1);
      KVTIER_LOG(kInfo, "admin: cleared namespace ", absl::StrFormat("%016x", id), " (", *removed,
                 " blocks)");
    }
    return absl::OkStatus();
  });
  return reactor;
}

grpc::ServerUnaryReactor* KvTierAdminService::Verify(grpc::CallbackServerContext* ctx,
                                                     const v1::VerifyRequest* req,
                                                     v1::VerifyResponse* resp) {
  if (absl::Status st = CheckAdmin(*service_, ctx); !st.ok()) return FinishWith(ctx, st);
  if (req->tier() != v1::TIER_UNSPECIFIED || req->has_namespaces() || req->report_only() ||
      req->max_blocks() != 0) {
    return FinishWith(ctx,
                      absl::UnimplementedError(
                          "this version verifies every block of every tier and removes corrupt "
                          "ones; tier, namespaces, report_only and max_blocks are not served yet"));
  }
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  service_->RunOnWorker(reactor, [this, resp]() -> absl::Status {
    absl::StatusOr<store::BlockStore::VerifyReport> report = store_->Verify();
    if (!report.ok()) return report.status();
    resp->set_checked_blocks(report->blocks);
    resp->set_checked_bytes(report->bytes);
    resp->set_corrupt_blocks(report->failed);
    resp->set_removed_blocks(report->failed);
    resp->set_complete(true);
    SetDuration(absl::Seconds(report->seconds), resp->mutable_elapsed());
    KVTIER_LOG(kInfo, "admin: verified ", report->blocks, " blocks, ", report->failed,
               " corrupt (removed)");
    return absl::OkStatus();
  });
  return reactor;
}

grpc::ServerUnaryReactor* KvTierAdminService::Drain(grpc::CallbackServerContext* ctx,
                                                    const v1::DrainRequest* req,
                                                    v1::DrainResponse* resp) {
  if (absl::Status st = CheckAdmin(*service_, ctx); !st.ok()) return FinishWith(ctx, st);
  if (req->cancel()) {
    service_->EndDrain();
    KVTIER_LOG(kInfo, "admin: drain cancelled; accepting work again");
    resp->set_drained(false);
    resp->set_registered_engines(static_cast<uint32_t>(service_->engine_count()));
    return FinishWith(ctx, absl::OkStatus());
  }
  service_->BeginDrain();
  KVTIER_LOG(kInfo, "admin: draining",
             req->flush_to_disk() ? " (writing the host tier to disk)" : "");
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
        absl::Status st = service_->WaitIdle(wait)
                              ? absl::OkStatus()
                              : absl::DeadlineExceededError(
                                    "in-flight requests are still running; draining continues");
        const uint64_t before = store_->Stats().evictions_host_to_disk;
        if (st.ok()) st = flush ? store_->DemoteAll() : store_->Flush();
        resp->set_flushed_blocks(store_->Stats().evictions_host_to_disk - before);
        resp->set_drained(st.ok());
        resp->set_registered_engines(static_cast<uint32_t>(service_->engine_count()));
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
