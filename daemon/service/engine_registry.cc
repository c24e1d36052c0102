// EngineRegistry: registration limits, leases and the holds of each engine.
//
// A request's hold is a count in its engine (Engine::holds), not a shared_ptr control block per
// request: Enter raises it under the registry's mutex (which Take's removal from engines_ also
// holds, so no request enters an engine being taken), a copy of a ref raises it without the
// mutex (its source holds one already, so Take cannot have returned), and each ref leaving
// lowers it. Copies count as holds of their own; the engine is idle when the count is zero,
// which is what "copies share one hold" promises. Leaving takes the mutex only while a Take
// waits: Take raises takers_ and then reads `holds`, Leave lowers `holds` and then reads
// takers_, both sequentially consistent, so at least one sees the other (Take sees zero, or
// Leave sees a Take and signals it under the mutex, which Take holds until it waits, so the
// signal is not lost). takers_ is the registry's, not the engine's: once `holds` is zero a Take
// may return and the engine be destroyed, so Leave touches only the registry after lowering it.
// The raw Engine* in a ref stays valid because Take is the only way out of the registry and
// returns the engine only once no hold is left.
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

EngineRef::EngineRef(const EngineRef& other) : registry_(other.registry_), engine_(other.engine_) {
  if (engine_ != nullptr) engine_->holds.fetch_add(1, std::memory_order_relaxed);
}

void EngineRef::reset() {
  if (engine_ == nullptr) return;
  registry_->Leave(std::exchange(engine_, nullptr));
  registry_ = nullptr;
}

EngineRef EngineRegistry::Enter(const std::string& engine_id, const std::string* tenant) {
  absl::MutexLock lock(&mu_);
  auto it = engines_.find(engine_id);
  if (it == engines_.end()) return EngineRef();
  Engine* engine = it->second.get();
  if (tenant != nullptr && engine->tenant != *tenant) return EngineRef();  // no renewal
  engine->expires = absl::Now() + engine->lease;
  engine->holds.fetch_add(1, std::memory_order_relaxed);
  return EngineRef(this, engine);
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
  // Once `holds` reaches zero a waiting Take may return and its caller destroy the engine: only
  // the registry is touched after it.
  if (engine->holds.fetch_sub(1, std::memory_order_seq_cst) != 1) return;
  if (takers_.load(std::memory_order_seq_cst) == 0) return;
  absl::MutexLock lock(&mu_);
  idle_cv_.SignalAll();
}

std::shared_ptr<Engine> EngineRegistry::Take(const std::string& engine_id, bool only_if_expired) {
  absl::MutexLock lock(&mu_);
  auto it = engines_.find(engine_id);
  if (it == engines_.end()) return nullptr;
  // The lease thread's list may be stale: a KeepAlive since then keeps the engine.
  if (only_if_expired && it->second->expires >= absl::Now()) return nullptr;
  std::shared_ptr<Engine> engine = std::move(it->second);
  engines_.erase(it);
  takers_.fetch_add(1, std::memory_order_seq_cst);
  while (engine->holds.load(std::memory_order_seq_cst) > 0) idle_cv_.Wait(&mu_);
  takers_.fetch_sub(1, std::memory_order_relaxed);
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
