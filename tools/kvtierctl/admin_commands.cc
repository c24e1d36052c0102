// kvtierctl evict, clear, verify and drain: the KvTierAdmin service.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/digest.h"
#include "daemon/config/config.h"
#include "tools/kvtierctl/kvtierctl.h"

namespace kvtier::ctl {
namespace {

constexpr double kAdminTimeoutSeconds = 600;

std::string Elapsed(const google::protobuf::Duration& d) { return Seconds(d); }

}  // namespace

int RunEvict(const Invocation& inv) {
  kvtier::v1::EvictRequest req;
  if (int rc = ParseNamespaceSelector(inv, true, req.mutable_namespaces()); rc != kExitOk) {
    return rc;
  }
  kvtier::v1::Tier tier;
  if (int rc = ParseTier(inv, {"gpu", "host", "disk"}, &tier); rc != kExitOk) return rc;
  req.set_tier(tier);
  req.set_drop(inv.Has("drop"));
  const int amounts = static_cast<int>(inv.Has("bytes")) + static_cast<int>(inv.Has("blocks")) +
                      static_cast<int>(inv.Has("hashes"));
  if (amounts != 1) return UsageError(inv, "evict needs one of --bytes, --blocks or --hashes");
  if (auto bytes = inv.Get("bytes")) {
    absl::StatusOr<uint64_t> n = kvtierd::ParseBytes("--bytes", *bytes);
    if (!n.ok() || *n == 0) {
      return UsageError(inv,
                        n.ok() ? "--bytes must be above 0" : std::string(n.status().message()));
    }
    req.set_byte_count(*n);
  } else if (inv.Has("blocks")) {
    uint64_t n = 0;
    if (int rc = ParseCount(inv, "blocks", &n); rc != kExitOk) return rc;
    req.set_block_count(n);
  } else {
    if (!req.namespaces().has_namespace_id()) {
      return UsageError(inv, "--hashes evicts blocks of one namespace: give --namespace=HEX");
    }
    std::vector<std::string> hashes;
    std::vector<std::string> texts = absl::StrSplit(*inv.Get("hashes"), ',', absl::SkipEmpty());
    if (int rc = ParseHashes(inv, texts, &hashes); rc != kExitOk) return rc;
    if (hashes.empty()) return UsageError(inv, "--hashes needs at least one hash");
    for (std::string& h : hashes) req.mutable_hashes()->add_hashes(std::move(h));
  }
  int rc = kExitOk;
  std::unique_ptr<Connection> conn = Connection::Open(inv, kAdminTimeoutSeconds, &rc);
  if (conn == nullptr) return rc;
  kvtier::v1::EvictResponse resp;
  auto ctx = conn->Context();
  grpc::Status st = conn->admin().Evict(ctx.get(), req, &resp);
  if (!st.ok()) return conn->Fail("Evict", st);
  if (inv.json()) {
    PrintJson(ToJson(resp));
    return kExitOk;
  }
  std::printf(
      "evicted %llu blocks (%s) from %s: %llu demoted to a slower tier, %llu dropped; "
      "%llu pinned blocks skipped\n",
      static_cast<unsigned long long>(resp.evicted_blocks()), Bytes(resp.evicted_bytes()).c_str(),
      tier == kvtier::v1::TIER_UNSPECIFIED ? "the cache" : TierName(tier),
      static_cast<unsigned long long>(resp.demoted_blocks()),
      static_cast<unsigned long long>(resp.evicted_blocks() - resp.demoted_blocks()),
      static_cast<unsigned long long>(resp.skipped_pinned_blocks()));
  for (int i = 0; i < resp.results_size(); ++i) {
    const kvtier::v1::ItemResult& r = resp.results(i);
    if (r.code() == kvtier::v1::ITEM_CODE_OK) continue;
    std::printf("  %s: %s %s\n", LowerHex(req.hashes().hashes(i)).c_str(),
                kvtier::v1::ItemCode_Name(r.code()).c_str(), r.message().c_str());
  }
  return kExitOk;
}

int RunClear(const Invocation& inv) {
  kvtier::v1::ClearRequest req;
  if (int rc = ParseNamespaceSelector(inv, true, req.mutable_namespaces()); rc != kExitOk) {
    return rc;
  }
  kvtier::v1::Tier tier;
  if (int rc = ParseTier(inv, {"gpu", "host", "disk"}, &tier); rc != kExitOk) return rc;
  req.set_tier(tier);
  req.set_include_parked(inv.Has("include-parked"));
  int rc = kExitOk;
  std::unique_ptr<Connection> conn = Connection::Open(inv, kAdminTimeoutSeconds, &rc);
  if (conn == nullptr) return rc;
  kvtier::v1::ClearResponse resp;
  auto ctx = conn->Context();
  grpc::Status st = conn->admin().Clear(ctx.get(), req, &resp);
  if (!st.ok()) return conn->Fail("Clear", st);
  if (inv.json()) {
    PrintJson(ToJson(resp));
    return kExitOk;
  }
  std::printf("cleared %u namespaces: %llu blocks removed (%s), %llu parked requests released\n",
              resp.cleared_namespaces(), static_cast<unsigned long long>(resp.removed_blocks()),
              Bytes(resp.removed_bytes()).c_str(),
              static_cast<unsigned long long>(resp.released_parked_requests()));
  return kExitOk;
}

// Verify runs one Verify call per (tier, namespace) holding blocks, so that it can report progress
// against the block counts Stats gives, and sums the answers.
int RunVerify(const Invocation& inv) {
  kvtier::v1::StatsRequest sreq;
  if (int rc = ParseNamespaceSelector(inv, false, sreq.mutable_namespaces()); rc != kExitOk) {
    return rc;
  }
  sreq.set_include_namespaces(true);
  kvtier::v1::Tier only;
  if (int rc = ParseTier(inv, {"host", "disk"}, &only); rc != kExitOk) return rc;
  uint64_t max_blocks = 0;
  if (int rc = ParseCount(inv, "max-blocks", &max_blocks); rc != kExitOk) return rc;
  const bool progress = !inv.Has("quiet");
  const bool tty = isatty(STDERR_FILENO) != 0;
  int rc = kExitOk;
  std::unique_ptr<Connection> conn = Connection::Open(inv, kAdminTimeoutSeconds, &rc);
  if (conn == nullptr) return rc;
  const auto start = std::chrono::steady_clock::now();
  kvtier::v1::StatsResponse stats;
  {
    auto ctx = conn->Context();
    grpc::Status st = conn->stub().Stats(ctx.get(), sreq, &stats);
    if (!st.ok()) return conn->Fail("Stats", st);
  }
  struct Step {
    kvtier::v1::Tier tier;
    uint64_t ns;
    uint64_t blocks;
  };
  std::vector<Step> steps;
  uint64_t total = 0;
  for (kvtier::v1::Tier tier : {kvtier::v1::TIER_HOST, kvtier::v1::TIER_DISK}) {
    if (only != kvtier::v1::TIER_UNSPECIFIED && tier != only) continue;
    for (const kvtier::v1::NamespaceStats& ns : stats.namespaces()) {
      for (const kvtier::v1::TierUsage& usage : ns.tiers()) {
        if (usage.tier() != tier || usage.blocks() == 0) continue;
        steps.push_back({tier, ns.namespace_id(), usage.blocks()});
        total += usage.blocks();
      }
    }
  }
  if (steps.empty()) {
    // Nothing to check as far as Stats shows; one call still lets the daemon judge the request
    // (a tenant without admin rights is refused, a namespace cleared since is NOT_FOUND).
    steps.push_back({only, 0, 0});
  }
  kvtier::v1::VerifyResponse sum;
  bool complete = true;
  for (size_t i = 0; i < steps.size(); ++i) {
    const Step& step = steps[i];
    if (max_blocks != 0 && sum.checked_blocks() >= max_blocks) {
      complete = false;
      break;
    }
    if (progress && step.ns != 0) {
      std::fprintf(stderr,
                   "%sverify: %zu/%zu %s namespace %s, %llu of ~%llu blocks checked, %llu "
                   "bad%s",
                   tty ? "\r" : "", i + 1, steps.size(), TierName(step.tier),
                   NamespaceHex(step.ns).c_str(),
                   static_cast<unsigned long long>(sum.checked_blocks()),
                   static_cast<unsigned long long>(total),
                   static_cast<unsigned long long>(sum.corrupt_blocks() + sum.missing_blocks()),
                   tty ? "   " : "\n");
    }
    kvtier::v1::VerifyRequest req;
    req.set_tier(step.tier);
    if (step.ns != 0) {
      req.mutable_namespaces()->set_namespace_id(step.ns);
    } else if (sreq.namespaces().selector_case() !=
               kvtier::v1::NamespaceSelector::SELECTOR_NOT_SET) {
      *req.mutable_namespaces() = sreq.namespaces();
    }
    req.set_scrub(!inv.Has("headers-only"));
    req.set_report_only(inv.Has("report-only"));
    if (max_blocks != 0) req.set_max_blocks(max_blocks - sum.checked_blocks());
    req.set_max_reported(1000);
    kvtier::v1::VerifyResponse resp;
    auto ctx = conn->Context();
    grpc::Status st = conn->admin().Verify(ctx.get(), req, &resp);
    if (!st.ok() && st.error_code() == grpc::StatusCode::NOT_FOUND && step.ns != 0) {
      continue;  // cleared since Stats
    }
    if (!st.ok()) {
      if (progress && tty) std::fprintf(stderr, "\n");
      return conn->Fail("Verify", st);
    }
    sum.set_checked_blocks(sum.checked_blocks() + resp.checked_blocks());
    sum.set_checked_bytes(sum.checked_bytes() + resp.checked_bytes());
    sum.set_corrupt_blocks(sum.corrupt_blocks() + resp.corrupt_blocks());
    sum.set_missing_blocks(sum.missing_blocks() + resp.missing_blocks());
    sum.set_removed_blocks(sum.removed_blocks() + resp.removed_blocks());
    for (const kvtier::v1::CorruptBlock& c : resp.corrupt()) *sum.add_corrupt() = c;
    if (!resp.complete()) {
      complete = false;
      if (max_blocks == 0 || sum.checked_blocks() < max_blocks) break;  // the deadline
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  sum.set_complete(complete);
  sum.mutable_elapsed()->set_seconds(static_cast<int64_t>(seconds));
  sum.mutable_elapsed()->set_nanos(
      static_cast<int32_t>((seconds - static_cast<double>(static_cast<int64_t>(seconds))) * 1e9));
  if (progress) {
    std::fprintf(stderr, "%sverify: done, %llu blocks checked%s\n", tty ? "\r" : "",
                 static_cast<unsigned long long>(sum.checked_blocks()), tty ? "        " : "");
  }
  const bool bad = sum.corrupt_blocks() + sum.missing_blocks() != 0;
  const bool timed_out = !complete && (max_blocks == 0 || sum.checked_blocks() < max_blocks);
  if (inv.json()) {
    Json json = ToJson(sum);
    json["passes"] = steps.size();  // Verify calls: one per (tier, namespace)
    json["stopped_by"] = complete ? "" : timed_out ? "deadline" : "max_blocks";
    PrintJson(json);
  } else {
    std::printf("verified %llu blocks (%s) in %s%s: %llu corrupt, %llu unreadable, %llu removed\n",
                static_cast<unsigned long long>(sum.checked_blocks()),
                Bytes(sum.checked_bytes()).c_str(), Elapsed(sum.elapsed()).c_str(),
                complete    ? ""
                : timed_out ? " (stopped by --timeout: incomplete)"
                            : " (stopped at --max-blocks)",
                static_cast<unsigned long long>(sum.corrupt_blocks()),
                static_cast<unsigned long long>(sum.missing_blocks()),
                static_cast<unsigned long long>(sum.removed_blocks()));
    for (const kvtier::v1::CorruptBlock& c : sum.corrupt()) {
      std::printf("  namespace %s block %s (%s): %s\n", NamespaceHex(c.namespace_id()).c_str(),
                  LowerHex(c.block_hash()).c_str(), TierName(c.tier()), c.message().c_str());
    }
  }
  if (bad) return kExitCorrupt;
  return timed_out ? kExitTimeout : kExitOk;
}

int RunDrain(const Invocation& inv) {
  kvtier::v1::DrainRequest req;
  req.set_flush_to_disk(inv.Has("flush-to-disk"));
  req.set_cancel(inv.Has("cancel"));
  if (req.cancel() && req.flush_to_disk()) {
    return UsageError(inv, "--cancel and --flush-to-disk exclude each other");
  }
  int rc = kExitOk;
  std::unique_ptr<Connection> conn = Connection::Open(inv, kAdminTimeoutSeconds, &rc);
  if (conn == nullptr) return rc;
  kvtier::v1::DrainResponse resp;
  auto ctx = conn->Context();
  grpc::Status st = conn->admin().Drain(ctx.get(), req, &resp);
  if (!st.ok()) {
    if (st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      std::cerr << "kvtierctl: still draining after " << conn->timeout_s()
                << " s; kvtierd goes on draining: run kvtierctl drain again to wait\n";
      return kExitTimeout;
    }
    return conn->Fail("Drain", st);
  }
  if (inv.json()) {
    PrintJson(ToJson(resp));
    return kExitOk;
  }
  if (req.cancel()) {
    std::printf("drain cancelled: accepting work again (%u engines registered)\n",
                resp.registered_engines());
    return kExitOk;
  }
  std::printf(
      "drained in %s: %llu in-flight operations completed, %llu blocks written to disk, "
      "%u engines still registered\n",
      Elapsed(resp.elapsed()).c_str(), static_cast<unsigned long long>(resp.completed_operations()),
      static_cast<unsigned long long>(resp.flushed_blocks()), resp.registered_engines());
  return kExitOk;
}

}  // namespace kvtier::ctl
