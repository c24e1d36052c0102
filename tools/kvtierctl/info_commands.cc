// kvtierctl status, stats and namespaces: read-only views of the daemon's Stats.
#include <cstdio>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tools/kvtierctl/kvtierctl.h"

namespace kvtier::ctl {
namespace {

// Reads of the node's own tiers: each tier's hits plus the slowest one's misses
// (TierStats.misses). The cluster tier's row counts fetches into the host tier, whose reads the
// host row counts again, so it is left out.
uint64_t TotalReads(const kvtier::v1::StatsResponse& stats) {
  uint64_t reads = 0;
  for (const kvtier::v1::TierStats& t : stats.tiers()) {
    if (t.tier() != kvtier::v1::TIER_CLUSTER) reads += t.hits() + t.misses();
  }
  return reads;
}

double Fraction(uint64_t part, uint64_t whole) {
  return whole == 0 ? 0.0 : static_cast<double>(part) / static_cast<double>(whole);
}

void PrintTiers(const kvtier::v1::StatsResponse& stats) {
  const uint64_t reads = TotalReads(stats);
  Table table({"tier", "capacity", "used", "used%", "blocks", "pinned", "hits", "hit rate",
               "bytes in", "bytes out", "evicted", "bad"});
  for (const kvtier::v1::TierStats& t : stats.tiers()) {
    table.Add({TierName(t.tier()), Bytes(t.capacity_bytes()), Bytes(t.used_bytes()),
               Percent(t.used_bytes(), t.capacity_bytes()), absl::StrCat(t.blocks()),
               absl::StrCat(t.pinned_blocks()), absl::StrCat(t.hits()), Percent(t.hits(), reads),
               Bytes(t.bytes_in()), Bytes(t.bytes_out()), absl::StrCat(t.evicted_blocks()),
               absl::StrCat(t.checksum_failures())});
  }
  table.Print();
}

void PrintTraffic(const kvtier::v1::StatsResponse& stats) {
  uint64_t misses = 0;
  for (const kvtier::v1::TierStats& t : stats.tiers()) {
    if (t.tier() != kvtier::v1::TIER_CLUSTER) misses += t.misses();
  }
  std::printf("offloaded  %s hot as %s cold (%s); %llu offload items not stored\n",
              Bytes(stats.hot_bytes_offloaded()).c_str(),
              Bytes(stats.cold_bytes_offloaded()).c_str(),
              Ratio(stats.hot_bytes_offloaded(), stats.cold_bytes_offloaded()).c_str(),
              static_cast<unsigned long long>(stats.dropped_offloads()));
  std::printf("onboarded  %s cold into %s hot (%s)\n", Bytes(stats.cold_bytes_onboarded()).c_str(),
              Bytes(stats.hot_bytes_onboarded()).c_str(),
              Ratio(stats.hot_bytes_onboarded(), stats.cold_bytes_onboarded()).c_str());
  std::printf("reads      %llu hits, %llu misses (hit rate %s); %llu parked requests\n",
              static_cast<unsigned long long>(TotalReads(stats) - misses),
              static_cast<unsigned long long>(misses),
              Percent(TotalReads(stats) - misses, TotalReads(stats)).c_str(),
              static_cast<unsigned long long>(stats.parked_requests()));
  if (!stats.has_cluster()) return;
  const kvtier::v1::ClusterStats& c = stats.cluster();
  std::printf(
      "cluster    %s; write-behind queue %llu of %llu, %llu written, %llu already stored, "
      "%llu dropped, %llu errors; %llu fetched, %llu absent, %llu failed verification\n",
      c.degraded()             ? absl::StrCat("DEGRADED (", c.degraded_reason(), ")").c_str()
      : c.writes_paused_full() ? "pool full (writes paused)"
                               : "healthy",
      static_cast<unsigned long long>(c.queue_depth()),
      static_cast<unsigned long long>(c.queue_capacity()),
      static_cast<unsigned long long>(c.written()),
      static_cast<unsigned long long>(c.already_stored()),
      static_cast<unsigned long long>(c.dropped_queue_full() + c.dropped_degraded() +
                                      c.dropped_pool_full() + c.dropped_gone() +
                                      c.dropped_lost_events()),
      static_cast<unsigned long long>(c.write_errors() + c.read_errors()),
      static_cast<unsigned long long>(c.fetched()),
      static_cast<unsigned long long>(c.fetch_misses()),
      static_cast<unsigned long long>(c.verify_failures()));
}

std::string NamespaceLabel(const kvtier::v1::Namespace& ns) {
  return absl::StrFormat("tenant %s, model %s%s, codec %s", ns.tenant(), ns.model(),
                         ns.partition().empty() ? "" : ", partition " + ns.partition(),
                         CodecName(ns.codec()));
}

void PrintNamespace(const kvtier::v1::NamespaceStats& ns) {
  std::printf("namespace %s: %s\n", NamespaceHex(ns.namespace_id()).c_str(),
              NamespaceLabel(ns.ns()).c_str());
  std::printf("  engines %u, parked requests %llu, quota %s, last access %s\n", ns.engines(),
              static_cast<unsigned long long>(ns.parked_requests()),
              ns.quota_bytes() == 0 ? "none" : Bytes(ns.quota_bytes()).c_str(),
              ns.has_last_access() ? ToJson(ns.last_access()).get<std::string>().c_str() : "never");
  std::printf("  reads %llu hits, %llu misses (hit rate %s)\n",
              static_cast<unsigned long long>(ns.hits()),
              static_cast<unsigned long long>(ns.misses()),
              Percent(ns.hits(), ns.hits() + ns.misses()).c_str());
  Table table({"tier", "blocks", "used"});
  for (const kvtier::v1::TierUsage& t : ns.tiers()) {
    table.Add({TierName(t.tier()), absl::StrCat(t.blocks()), Bytes(t.used_bytes())});
  }
  table.Print("  ");
}

// Stats as JSON with derived figures: each tier's hit_rate, the namespaces' hit_rate, and the
// compression ratios of offloads and onboards.
Json StatsJson(const kvtier::v1::StatsResponse& stats) {
  Json json = ToJson(stats);
  const uint64_t reads = TotalReads(stats);
  for (int i = 0; i < stats.tiers_size(); ++i) {
    json["tiers"][i]["hit_rate"] = Fraction(stats.tiers(i).hits(), reads);
  }
  for (int i = 0; i < stats.namespaces_size(); ++i) {
    const kvtier::v1::NamespaceStats& ns = stats.namespaces(i);
    json["namespaces"][i]["hit_rate"] = Fraction(ns.hits(), ns.hits() + ns.misses());
  }
  json["offload_compression_ratio"] =
      Fraction(stats.hot_bytes_offloaded(), stats.cold_bytes_offloaded());
  json["onboard_compression_ratio"] =
      Fraction(stats.hot_bytes_onboarded(), stats.cold_bytes_onboarded());
  return json;
}

int FetchStats(Connection& conn, const kvtier::v1::StatsRequest& req,
               kvtier::v1::StatsResponse* stats) {
  auto ctx = conn.Context();
  grpc::Status st = conn.stub().Stats(ctx.get(), req, stats);
  return st.ok() ? kExitOk : conn.Fail("Stats", st);
}

}  // namespace

int RunStatus(const Invocation& inv) {
  int rc = kExitOk;
  std::unique_ptr<Connection> conn = Connection::Open(inv, 5, &rc);
  if (conn == nullptr) return rc;
  kvtier::v1::HelloResponse hello;
  {
    auto ctx = conn->Context();
    kvtier::v1::HelloRequest req;
    req.set_client_name("kvtierctl/0.1.0");
    grpc::Status st = conn->stub().Hello(ctx.get(), req, &hello);
    if (!st.ok()) return conn->Fail("Hello", st);
  }
  kvtier::v1::StatsRequest req;
  req.set_include_namespaces(true);
  req.set_include_engines(true);
  kvtier::v1::StatsResponse stats;
  if (int rc = FetchStats(*conn, req, &stats); rc != kExitOk) return rc;
  if (inv.json()) {
    Json json = Json::object();
    json["address"] = conn->address();
    json["hello"] = ToJson(hello);
    json["stats"] = StatsJson(stats);
    PrintJson(json);
    return kExitOk;
  }
  std::printf("kvtierd %s on %s (%s), API v%u, incarnation %s\n", hello.server_version().c_str(),
              hello.node_name().c_str(), conn->address().c_str(), hello.api_version(),
              NamespaceHex(hello.incarnation_id()).c_str());
  std::printf(
      "up %s, %s, CUDA %s, authentication %s, %u engines, %d namespaces, %llu parked "
      "requests\n",
      Seconds(stats.uptime()).c_str(), hello.draining() ? "DRAINING" : "serving",
      hello.capabilities().cuda() ? "yes" : "no",
      hello.capabilities().authentication() ? "on" : "off", stats.registered_engines(),
      stats.namespaces_size(), static_cast<unsigned long long>(stats.parked_requests()));
  for (const kvtier::v1::EngineInfo& e : stats.engines()) {
    std::printf("  engine %s (%s) namespace %s, %u pools\n", e.engine_id().c_str(),
                e.engine_name().c_str(), NamespaceHex(e.namespace_id()).c_str(), e.pools());
  }
  std::printf("\n");
  PrintTiers(stats);
  return kExitOk;
}

int RunStats(const Invocation& inv) {
  kvtier::v1::StatsRequest req;
  if (int rc = ParseNamespaceSelector(inv, false, req.mutable_namespaces()); rc != kExitOk) {
    return rc;
  }
  const bool selected =
      req.namespaces().selector_case() != kvtier::v1::NamespaceSelector::SELECTOR_NOT_SET;
  req.set_include_namespaces(selected || inv.Has("namespaces"));
  req.set_include_engines(inv.Has("engines"));
  int rc = kExitOk;
  std::unique_ptr<Connection> conn = Connection::Open(inv, 5, &rc);
  if (conn == nullptr) return rc;
  kvtier::v1::StatsResponse stats;
  if (int rc = FetchStats(*conn, req, &stats); rc != kExitOk) return rc;
  if (inv.json()) {
    PrintJson(StatsJson(stats));
    return kExitOk;
  }
  if (selected && stats.namespaces().empty()) {
    std::cerr << "kvtierctl: no namespace matches (kvtierctl namespaces lists them)\n";
    return kExitFailed;
  }
  PrintTiers(stats);
  std::printf("\n");
  PrintTraffic(stats);
  for (const kvtier::v1::NamespaceStats& ns : stats.namespaces()) {
    std::printf("\n");
    PrintNamespace(ns);
  }
  if (!stats.engines().empty()) std::printf("\n");
  for (const kvtier::v1::EngineInfo& e : stats.engines()) {
    const std::string pid = e.pid() > 0 ? std::to_string(e.pid()) : "-";
    std::printf(
        "engine %s (%s) namespace %s, pid %s, peer %s, %u pools, %llu parked, %llu pinned\n",
        e.engine_id().c_str(), e.engine_name().c_str(), NamespaceHex(e.namespace_id()).c_str(),
        pid.c_str(), e.peer().empty() ? "-" : e.peer().c_str(), e.pools(),
        static_cast<unsigned long long>(e.parked_requests()),
        static_cast<unsigned long long>(e.pinned_blocks()));
  }
  return kExitOk;
}

int RunNamespaces(const Invocation& inv) {
  kvtier::v1::StatsRequest req;
  if (int rc = ParseNamespaceSelector(inv, false, req.mutable_namespaces()); rc != kExitOk) {
    return rc;
  }
  req.set_include_namespaces(true);
  int rc = kExitOk;
  std::unique_ptr<Connection> conn = Connection::Open(inv, 5, &rc);
  if (conn == nullptr) return rc;
  kvtier::v1::StatsResponse stats;
  if (int rc = FetchStats(*conn, req, &stats); rc != kExitOk) return rc;
  if (inv.json()) {
    Json json = Json::object();
    json["namespaces"] = StatsJson(stats)["namespaces"];
    PrintJson(json);
    return kExitOk;
  }
  if (stats.namespaces().empty()) {
    std::printf("no namespaces\n");
    return kExitOk;
  }
  std::vector<std::string> header = {"namespace", "tenant", "model", "partition", "codec"};
  for (const kvtier::v1::TierStats& t : stats.tiers()) {
    if (t.tier() == kvtier::v1::TIER_CLUSTER) continue;  // namespaces' usage is local
    header.push_back(std::string(TierName(t.tier())) + " blocks");
    header.push_back(std::string(TierName(t.tier())) + " used");
  }
  header.insert(header.end(), {"engines", "parked", "hit rate"});
  Table table(header);
  for (const kvtier::v1::NamespaceStats& ns : stats.namespaces()) {
    std::vector<std::string> row = {
        NamespaceHex(ns.namespace_id()), ns.ns().tenant(), ns.ns().model(),
        ns.ns().partition().empty() ? "-" : ns.ns().partition(), CodecName(ns.ns().codec())};
    for (const kvtier::v1::TierUsage& t : ns.tiers()) {
      row.push_back(absl::StrCat(t.blocks()));
      row.push_back(Bytes(t.used_bytes()));
    }
    row.push_back(absl::StrCat(ns.engines()));
    row.push_back(absl::StrCat(ns.parked_requests()));
    row.push_back(Percent(ns.hits(), ns.hits() + ns.misses()));
    table.Add(std::move(row));
  }
  table.Print();
  return kExitOk;
}

}  // namespace kvtier::ctl
