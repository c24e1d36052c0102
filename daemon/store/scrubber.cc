#include "daemon/store/scrubber.h"

#include <chrono>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "common/status_macros.h"

namespace kvtier::store {
namespace {

// A tier whose copies are stored cold blocks that can be read back and verified.
bool HoldsBlocks(Tier tier) { return tier != Tier::kGpu; }

}  // namespace

std::vector<BlockKey> Scrubber::Select(const BlockStore::VerifyOptions& options) {
  using internal::Entry;
  std::vector<BlockKey> keys;
  absl::MutexLock lock(&s_.mu);
  auto wanted = [&](const Entry& e) {
    return !e.writing() && !e.gpu.has_value() &&
           (!options.tier.has_value() || e.CopyIn(*options.tier).has_value());
  };
  if (options.namespaces.empty()) {
    keys.reserve(s_.map.size());
    for (const auto& [key, e] : s_.map) {
      if (wanted(*e)) keys.push_back(key);
    }
    return keys;
  }
  for (NamespaceId id : options.namespaces) {
    const NamespaceState* ns = s_.namespaces.Find(id);
    if (ns == nullptr) continue;
    for (Entry* e = ns->lru.front(); e != nullptr; e = NsLru::Next(e)) {
      if (wanted(*e)) keys.push_back(e->key);
    }
  }
  return keys;
}

absl::StatusOr<BlockStore::VerifyReport> Scrubber::Run(const BlockStore::VerifyOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  BlockStore::VerifyReport report;
  for (const BlockKey& key : Select(options)) {
    if (options.max_blocks > 0 && report.blocks >= options.max_blocks) {
      report.complete = false;
      break;
    }
    // The tiers holding a copy now (it may have moved since Select); at most one per tier, so
    // no allocation per block.
    absl::InlinedVector<Tier, index::kTierCount> held;
    {
      absl::MutexLock lock(&s_.mu);
      auto it = s_.map.find(key);
      if (it == s_.map.end()) continue;  // removed meanwhile
      for (const StorageTier* tier : s_.tiers) {
        if (HoldsBlocks(tier->id()) && it->second->CopyIn(tier->id()).has_value()) {
          held.push_back(tier->id());
        }
      }
    }
    ++report.blocks;
    for (Tier tier : held) {
      if (options.tier.has_value() && *options.tier != tier) continue;
      std::string failure;
      bool io_error = false;
      KVTIER_ASSIGN_OR_RETURN(std::optional<uint64_t> bytes,
                              read_(key, tier, options.report_only, &failure, &io_error));
      if (bytes.has_value()) {
        report.bytes += *bytes;
        continue;
      }
      if (failure.empty()) break;  // removed meanwhile
      ++(io_error ? report.missing : report.failed);
      if (!options.report_only) ++report.removed;
      if (report.failures.size() < options.max_reported) {
        report.failures.push_back({key, tier, std::move(failure)});
      }
      break;  // one failure per block
    }
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace kvtier::store
