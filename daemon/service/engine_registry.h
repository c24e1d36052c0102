// EngineRegistry: the engines registered with KvTierService, their leases, and the requests
// working on each. A request holds its engine through an EngineRef (entering renews the lease and
// counts the request as active; the last copy of the ref leaves); Take removes an engine and
// waits until no request works on its pools, so that they are unmapped only once unused.
// Thread-safe. Lock order: the registry's mutex is a leaf: no other lock is taken while it is
// held (ForEach's callback included), so any lock may be held when calling in.
#ifndef KVTIER_DAEMON_SERVICE_ENGINE_REGISTRY_H_
#define KVTIER_DAEMON_SERVICE_ENGINE_REGISTRY_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/dataplane/data_plane.h"
#include "daemon/dataplane/engine_pages.h"
#include "daemon/store/block_store.h"

namespace kvtier::service {

// One registered engine: what the data plane needs of it (dataplane::EnginePages, a base so that
// a data plane takes the engine itself) and the registration's bookkeeping. Immutable once
// registered, except for the fields the registry guards. Shared by the registry and the requests
// working on it.
struct Engine : dataplane::EnginePages {
  std::string name;
  std::string tenant;
  dataplane::DataPlane* plane = nullptr;  // the service's, for its kind of pools
  absl::Duration lease;
  absl::Time registered;
  std::string peer;  // gRPC's peer address of the RegisterEngine call
  int32_t pid = 0;   // its process (ServiceOptions::peers), 0 when unknown
  // Guarded by the registry's mutex (EngineRegistry::ExpiresOf and ForEach read it):
  absl::Time expires;
  // The holds of requests working on its pools (EngineRef copies); the registry's alone
  // (engine_registry.cc says how they pair with its mutex).
  std::atomic<int> holds{0};
};

class EngineRegistry;

// A request's hold on an engine (EngineRegistry::Enter): while any copy exists the engine counts
// the request as active, and Take waits. Copies share one hold, so that a ref captured by a
// copyable callback (std::function) is left when the callback's last copy is destroyed. An
// empty ref holds nothing. Allocates nothing: the hold is a count in the engine.
class EngineRef {
 public:
  EngineRef() = default;
  EngineRef(const EngineRef& other);
  EngineRef(EngineRef&& other) noexcept
      : registry_(std::exchange(other.registry_, nullptr)),
        engine_(std::exchange(other.engine_, nullptr)) {}
  EngineRef& operator=(EngineRef other) noexcept {
    std::swap(registry_, other.registry_);
    std::swap(engine_, other.engine_);
    return *this;
  }
  ~EngineRef() { reset(); }

  explicit operator bool() const { return engine_ != nullptr; }
  const Engine& operator*() const { return *engine_; }
  const Engine* operator->() const { return engine_; }
  // Leaves now (when this is the last copy).
  void reset();

 private:
  friend class EngineRegistry;
  // REQUIRES: the registry counted a hold of `engine` for this ref.
  EngineRef(EngineRegistry* registry, Engine* engine) : registry_(registry), engine_(engine) {}

  EngineRegistry* registry_ = nullptr;
  Engine* engine_ = nullptr;  // the registry's until Take returns it, which waits for this ref
};

class EngineRegistry {
 public:
  struct Limits {
    uint32_t max_engines = 1024;
    uint32_t max_engines_per_tenant = 256;
  };
  explicit EngineRegistry(Limits limits) : limits_(limits) {}
  // REQUIRES: no EngineRef outlives the registry.
  ~EngineRegistry() = default;
  EngineRegistry(const EngineRegistry&) = delete;
  EngineRegistry& operator=(const EngineRegistry&) = delete;

  // Registers `engine` (its id set, its lease from now). ResourceExhausted (naming the limit)
  // when max_engines or the tenant's max_engines_per_tenant are reached; PermissionDenied when
  // one of its host pool files is registered by an engine of another tenant.
  absl::Status Add(std::shared_ptr<Engine> engine) ABSL_LOCKS_EXCLUDED(mu_);
  // The engine, its lease renewed and the request counted as active; an empty ref when it is
  // unknown. With `tenant`, only an engine of that tenant (an empty ref otherwise, no renewal).
  EngineRef Enter(const std::string& engine_id, const std::string* tenant = nullptr)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Enter with statuses: InvalidArgument for a malformed id, NotFound for an unknown engine,
  // PermissionDenied for an engine of another tenant than `tenant`.
  absl::StatusOr<EngineRef> EnterChecked(const std::string& engine_id, const std::string* tenant)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Removes the engine and waits until no request works on it; returns it (nullptr when
  // unknown). With only_if_expired, an engine whose lease was renewed meanwhile stays (nullptr).
  // REQUIRES: the caller holds no EngineRef of it, and is not a worker that a request of the
  // engine may be queued behind.
  std::shared_ptr<Engine> Take(const std::string& engine_id, bool only_if_expired)
      ABSL_LOCKS_EXCLUDED(mu_);

  // The engines whose lease expired before `now`.
  std::vector<std::string> Expired(absl::Time now) const ABSL_LOCKS_EXCLUDED(mu_);
  absl::Time ExpiresOf(const Engine& engine) const ABSL_LOCKS_EXCLUDED(mu_);
  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);
  // Calls `fn` for every engine, under the registry's lock: `fn` takes no lock and does not
  // call the registry.
  void ForEach(absl::FunctionRef<void(const Engine&)> fn) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  friend class EngineRef;
  // Drops one hold of `engine`; wakes a Take waiting for it when that was the last.
  void Leave(Engine* engine) ABSL_LOCKS_EXCLUDED(mu_);

  const Limits limits_;
  mutable absl::Mutex mu_;
  absl::CondVar idle_cv_;       // the last hold of an engine being taken was dropped
  std::atomic<int> takers_{0};  // Takes waiting for holds (raised under mu_)
  absl::flat_hash_map<std::string, std::shared_ptr<Engine>> engines_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvtier::service

#endif  // KVTIER_DAEMON_SERVICE_ENGINE_REGISTRY_H_
