// EngineRegistry: registration limits, leases and the active count of each engine.
#include "daemon/service/engine_registry.h"

#include <utility>

#include "absl/strings/str_format.h"
#include "common/quote.h"
#include "common/status_macros.h"
#include "daemon/service/request_limits.h"

namespace kvtier::service {

// ---- EngineRegistry ----

absl::Status EngineRegistry::Add(std::shared_ptr<Engine> engine) {
  absl::MutexLock lock(&mu_);
  if (engines_.size() >= limits_.max_engines) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("%d engines are registered (server.max_engines)", engines_.size()));
  }
  uint32_t of_tenant = 0;
  for (const auto& [id, other] : engines_) {
    if (other->tenant == engine->tenant) {
      ++of_tenant;
      continue;
    }
    // One tenant's pool file is never another's: a hard link (or a second path) to a file that
    // an engine of another tenant registered is refused.
    for (const std::unique_ptr<dataplane::HostPool>& mine : engine->pools) {
      if (mine == nullptr) continue;
      for (const std::unique_ptr<dataplane::HostPool>& theirs : other->pools) {
        if (theirs != nullptr && theirs->dev() == mine->dev() && theirs->ino() == mine->ino()) {
          return absl::PermissionDeniedError(absl::StrFormat(
              "pool file %s is registered by an engine of another tenant", mine->path()));
        }
      }
    }
  }
  if (of_tenant >= limits_.max_engines_per_tenant) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "this tenant has %d engines registered (server.max_engines_per_tenant)", of_tenant));
  }
  engine->expires = absl::Now() + engine->lease;
  const std::string id = engine->id;
  engines_[id] = std::move(engine);
  return absl::OkStatus();
}

EngineRef EngineRegistry::Enter(const std::string& engine_id, const std::string* tenant) {
  std::shared_ptr<Engine> engine;
  {
    absl::MutexLock lock(&mu_);
    auto it = engines_.find(engine_id);
    if (it == engines_.end()) return EngineRef();
    if (tenant != nullptr && it->second->tenant != *tenant) return EngineRef();  // no renewal
    it->second->expires = absl::Now() + it->second->lease;
    ++it->second->active;
    engine = it->second;
  }
  // The hold: a pointer to the engine whose deleter leaves it (and keeps it alive until then).
  Engine* raw = engine.get();
  return EngineRef(std::shared_ptr<const Engine>(
      raw, [this, engine = std::move(engine)](const Engine*) { Leave(engine.get()); }));
}

absl::StatusOr<EngineRef> EngineRegistry::EnterChecked(const std::string& engine_id,
                                                       const std::string* tenant) {
  KVTIER_RETURN_IF_ERROR(CheckEngineId(engine_id));
  EngineRef engine = Enter(engine_id, tenant);
  if (engine) return engine;
  bool other_tenant = false;
  {
    absl::MutexLock lock(&mu_);
    other_tenant = engines_.contains(engine_id);
  }
  if (other_tenant) {
    return absl::PermissionDeniedError(
        absl::StrFormat("engine %s belongs to another tenant", Quoted(engine_id)));
  }
  return absl::NotFoundError(absl::StrFormat(
      "engine %s is not registered (unregistered, lease expired, or daemon restarted)",
      Quoted(engine_id)));
}

void EngineRegistry::Leave(Engine* engine) {
  absl::MutexLock lock(&mu_);
  if (--engine->active == 0) idle_cv_.SignalAll();
}

std::shared_ptr<Engine> EngineRegistry::Take(const std::string& engine_id, bool only_if_expired) {
  absl::MutexLock lock(&mu_);
  auto it = engines_.find(engine_id);
  if (it == engines_.end()) return nullptr;
  // The lease thread's list may be stale: a KeepAlive since then keeps the engine.
  if (only_if_expired && it->second->expires >= absl::Now()) return nullptr;
  std::shared_ptr<Engine> engine = std::move(it->second);
  engines_.erase(it);
  while (engine->active > 0) idle_cv_.Wait(&mu_);
  return engine;
}

std::vector<std::string> EngineRegistry::Expired(absl::Time now) const {
  std::vector<std::string> expired;
  absl::MutexLock lock(&mu_);
  for (const auto& [id, engine] : engines_) {
    if (engine->expires < now) expired.push_back(id);
  }
  return expired;
}

absl::Time EngineRegistry::ExpiresOf(const Engine& engine) const {
  absl::MutexLock lock(&mu_);
  return engine.expires;
}

size_t EngineRegistry::size() const {
  absl::MutexLock lock(&mu_);
  return engines_.size();
}

void EngineRegistry::ForEach(absl::FunctionRef<void(const Engine&)> fn) const {
  absl::MutexLock lock(&mu_);
  for (const auto& [id, engine] : engines_) fn(*engine);
}

}  // namespace kvtier::service
