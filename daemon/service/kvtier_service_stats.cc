// KvTierService: Stats (per-tier figures, namespaces, engines) and the traffic totals /metrics
// reads.
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"
#include "daemon/service/kvtier_service.h"
#include "daemon/service/proto_convert.h"
#include "daemon/service/request_limits.h"
#include "kvtier/v1/namespace.pb.h"

namespace kvtier::service {

namespace {

// The cluster tier's row of the tier table and its own message.
void SharedTierStatsToProto(const store::SharedTierStats& c, v1::StatsResponse* resp) {
  v1::TierStats* row = resp->add_tiers();
  row->set_tier(v1::TIER_CLUSTER);
  row->set_capacity_bytes(c.capacity_bytes);
  row->set_used_bytes(c.used_bytes);
  row->set_blocks(c.objects);
  row->set_evicted_blocks(c.evicted);
  row->set_hits(c.fetched);
  row->set_misses(c.fetch_misses);
  row->set_bytes_in(c.written_bytes);
  row->set_bytes_out(c.fetched_bytes);
  row->set_checksum_failures(c.verify_failures);
  v1::ClusterStats* out = resp->mutable_cluster();
  out->set_degraded(c.degraded);
  out->set_degraded_reason(c.degraded_reason);
  if (c.degraded)
    SetTime(absl::FromUnixSeconds(c.degraded_since_unix), out->mutable_degraded_since());
  out->set_degraded_episodes(c.degraded_episodes);
  out->set_writes_paused_full(c.writes_paused_full);
  out->set_queue_depth(c.queue_depth);
  out->set_queue_capacity(c.queue_capacity);
  out->set_offered(c.offered);
  out->set_written(c.written);
  out->set_already_stored(c.already);
  out->set_dropped_queue_full(c.dropped_queue_full);
  out->set_dropped_degraded(c.dropped_degraded);
  out->set_dropped_pool_full(c.dropped_full);
  out->set_dropped_gone(c.dropped_gone);
  out->set_dropped_lost_events(c.dropped_lost_events);
  out->set_write_errors(c.write_errors);
  out->set_lookups(c.lookups);
  out->set_lookup_blocks(c.lookup_blocks);
  out->set_lookup_timeouts(c.lookup_timeouts);
  out->set_fetched(c.fetched);
  out->set_fetch_misses(c.fetch_misses);
  out->set_verify_failures(c.verify_failures);
  out->set_read_errors(c.read_errors);
  out->set_skipped_degraded(c.skipped_degraded);
  out->set_capacity_bytes(c.capacity_bytes);
  out->set_used_bytes(c.used_bytes);
  out->set_objects(c.objects);
  out->set_sweeps(c.sweeps);
  out->set_sweeps_lease_busy(c.lease_busy);
  out->set_evicted(c.evicted);
  out->set_evicted_bytes(c.evicted_bytes);
  out->set_evict_spared(c.evict_spared);
}

}  // namespace

KvTierService::Traffic KvTierService::traffic() const {
  Traffic t;
  t.hot_bytes_offloaded = totals_.hot_bytes_offloaded;
  t.cold_bytes_offloaded = totals_.cold_bytes_offloaded;
  t.hot_bytes_onboarded = totals_.hot_bytes_onboarded;
  t.cold_bytes_onboarded = totals_.cold_bytes_onboarded;
  t.dropped_offloads = totals_.dropped_offloads;
  t.parked_requests = state_->parks().size();
  return t;
}

grpc::ServerUnaryReactor* KvTierService::Stats(grpc::CallbackServerContext* ctx,
                                               const v1::StatsRequest* req,
                                               v1::StatsResponse* resp) {
  absl::StatusOr<std::string> caller = Caller(ctx);
  if (!caller.ok()) return FinishWith(ctx, caller.status());
  if (absl::Status st = CheckSelector(req->namespaces()); !st.ok()) return FinishWith(ctx, st);
  // With authentication on, a tenant sees its own engines and namespaces, and of the tiers their
  // sizes and its own blocks in them.
  const bool filtered = options_.auth != nullptr && !options_.auth->IsAdmin(*caller);
  const store::StoreStats stats = store_->Stats();
  resp->set_incarnation_id(incarnation_);
  const absl::Time now = absl::Now();
  SetTime(now, resp->mutable_collected_at());
  SetDuration(now - started_, resp->mutable_uptime());
  constexpr index::Tier kTiers[] = {index::Tier::kGpu, index::Tier::kHost, index::Tier::kDisk};
  // A tenant that is not an admin sees the tiers' sizes and its own use of them, never the
  // node's totals: those would show other tenants' blocks and traffic.
  store::BlockStore::NamespaceUsage own;
  if (filtered) {
    for (const auto& [id, record] : store_->Namespaces()) {
      v1::Namespace described;
      if (!described.ParseFromString(record.first) || described.tenant() != *caller) continue;
      const store::BlockStore::NamespaceUsage usage = store_->UsageOf(id);
      for (int t = 0; t < index::kTierCount; ++t) {
        own.blocks[t] += usage.blocks[t];
        own.bytes[t] += usage.bytes[t];
      }
      own.hits += usage.hits;
      own.misses += usage.misses;
    }
  }
  for (index::Tier t : kTiers) {
    const store::TierStats& ts = stats.tiers[static_cast<int>(t)];
    if (ts.capacity_bytes == 0) continue;
    v1::TierStats* out = resp->add_tiers();
    out->set_tier(TierToProto(t));
    out->set_capacity_bytes(ts.capacity_bytes);
    if (filtered) {
      out->set_used_bytes(own.bytes[static_cast<int>(t)]);
      out->set_blocks(own.blocks[static_cast<int>(t)]);
      if (t == index::Tier::kDisk) out->set_misses(own.misses);
      continue;
    }
    out->set_used_bytes(ts.used_bytes);
    out->set_blocks(ts.blocks);
    out->set_hits(ts.hits);
    out->set_bytes_in(ts.bytes_in);
    out->set_bytes_out(ts.bytes_out);
    uint64_t evicted = 0;
    switch (t) {
      case index::Tier::kGpu:
        evicted = stats.evictions_gpu_to_host + stats.evictions_gpu_dropped;
        break;
      case index::Tier::kHost:
        evicted = stats.evictions_host_to_disk + stats.evictions_host_dropped +
                  stats.evictions_host_copy_freed;
        break;
      case index::Tier::kDisk:
        evicted = stats.evictions_disk_dropped;
        break;
    }
    out->set_evicted_blocks(evicted);
    out->set_checksum_failures(ts.checksum_failures);
    if (t == index::Tier::kDisk) out->set_misses(stats.misses);  // a miss of the last tier
    if (t == index::Tier::kHost) out->set_pinned_blocks(stats.pinned_blocks);
  }
  if (options_.shared_tier != nullptr && !filtered) {
    SharedTierStatsToProto(options_.shared_tier->Stats(), resp);
  }
  if (!filtered) {
    resp->set_hot_bytes_offloaded(totals_.hot_bytes_offloaded);
    resp->set_cold_bytes_offloaded(totals_.cold_bytes_offloaded);
    resp->set_hot_bytes_onboarded(totals_.hot_bytes_onboarded);
    resp->set_cold_bytes_onboarded(totals_.cold_bytes_onboarded);
    resp->set_dropped_offloads(totals_.dropped_offloads);
  }
  resp->set_draining(state_->dispatcher().draining());
  resp->set_parked_requests(filtered ? state_->parks().CountOfTenant(*caller)
                                     : static_cast<uint32_t>(state_->parks().size()));
  absl::flat_hash_map<uint64_t, uint32_t> engines_per_ns;
  const ParkTable::Counts parked_counts = state_->parks().CountByNamespaceAndEngine();
  const absl::flat_hash_map<store::NamespaceId, uint64_t>& parked_per_ns =
      parked_counts.per_namespace;
  const absl::flat_hash_map<std::string, uint64_t>& parked_per_engine = parked_counts.per_engine;
  absl::flat_hash_map<std::string, uint64_t> pins_per_engine;
  if (req->include_engines()) pins_per_engine = state_->pins().CountByEngine();
  uint32_t visible_engines = 0;
  state_->registry().ForEach([&](const Engine& engine) {
    ++engines_per_ns[engine.ns];
    if (!filtered || engine.tenant == *caller) ++visible_engines;
    if (!req->include_engines() || (filtered && engine.tenant != *caller)) return;
    v1::EngineInfo* info = resp->add_engines();
    info->set_engine_id(engine.id);
    info->set_engine_name(engine.name);
    info->set_namespace_id(engine.ns);
    SetTime(engine.registered, info->mutable_registered_at());
    SetTime(engine.expires, info->mutable_lease_expires_at());  // ForEach holds the lock
    info->set_pools(static_cast<uint32_t>(engine.pools.size()) +
                    (engine.device_pool != nullptr ? 1 : 0));
    info->set_peer(engine.peer);
    info->set_pid(engine.pid);
    auto parked = parked_per_engine.find(engine.id);
    info->set_parked_requests(parked == parked_per_engine.end() ? 0 : parked->second);
    auto pins = pins_per_engine.find(engine.id);
    info->set_pinned_blocks(pins == pins_per_engine.end() ? 0 : pins->second);
  });
  resp->set_registered_engines(visible_engines);
  if (req->include_namespaces()) {
    const v1::NamespaceSelector& selector = req->namespaces();
    const v1::NamespaceMatch& match = selector.match();  // empty unless the selector is a match
    for (const auto& [id, record] : store_->Namespaces()) {
      v1::Namespace described;
      if (!described.ParseFromString(record.first)) continue;
      if (filtered && described.tenant() != *caller) continue;
      if (selector.selector_case() == v1::NamespaceSelector::kNamespaceId &&
          id != selector.namespace_id()) {
        continue;
      }
      if ((!match.tenant().empty() && match.tenant() != described.tenant()) ||
          (!match.model().empty() && match.model() != described.model()) ||
          (!match.partition().empty() && match.partition() != described.partition())) {
        continue;
      }
      v1::NamespaceStats* ns = resp->add_namespaces();
      ns->set_namespace_id(id);
      *ns->mutable_ns() = described;
      ns->set_quota_bytes(record.second);
      absl::StatusOr<DerivedNamespace> derived =
          DeriveNamespace(described, options_.hash_root_key, options_.auth != nullptr);
      if (derived.ok()) ns->set_hash_root(derived->hash_root);
      auto it = engines_per_ns.find(id);
      ns->set_engines(it == engines_per_ns.end() ? 0 : it->second);
      auto parked = parked_per_ns.find(id);
      ns->set_parked_requests(parked == parked_per_ns.end() ? 0 : parked->second);
      const store::BlockStore::NamespaceUsage usage = store_->UsageOf(id);
      for (index::Tier t : kTiers) {
        if (stats.tiers[static_cast<int>(t)].capacity_bytes == 0) continue;
        v1::TierUsage* tier = ns->add_tiers();
        tier->set_tier(TierToProto(t));
        tier->set_blocks(usage.blocks[static_cast<int>(t)]);
        tier->set_used_bytes(usage.bytes[static_cast<int>(t)]);
      }
      ns->set_hits(usage.hits);
      ns->set_misses(usage.misses);
      if (usage.last_access_ms != 0) {
        SetTime(absl::FromUnixMillis(static_cast<int64_t>(usage.last_access_ms)),
                ns->mutable_last_access());
      }
    }
    if (selector.selector_case() == v1::NamespaceSelector::kNamespaceId &&
        resp->namespaces().empty()) {
      // Another tenant's namespace looks unknown.
      return FinishWith(ctx, absl::NotFoundError(absl::StrFormat("namespace %016x is unknown",
                                                                 selector.namespace_id())));
    }
  }
  return FinishWith(ctx, absl::OkStatus());
}

}  // namespace kvtier::service
