// The compression framework's plumbing: CompressionManager's default (no-op) hooks, the registry
// of methods by algorithm name, and the chain of several methods.
//
// The registry is one process-wide map behind a mutex, created on first use with the built-in
// methods in it, so that the built-ins are there whatever the order of static initialisation and
// a registration from another thread (a plugin loaded late) is safe. A factory runs outside the
// lock: building a method may block on files or on the daemon.
#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "client/src/compression_methods.h"
#include "kvtier/compression.h"

namespace kvtier {

absl::Status CompressionManager::OnRequestStart(RequestState&) { return absl::OkStatus(); }
absl::Status CompressionManager::OnPrefillChunkEnd(RequestState&, int64_t) {
  return absl::OkStatus();
}
absl::Status CompressionManager::OnContextEnd(RequestState&) { return absl::OkStatus(); }
absl::Status CompressionManager::OnGenerationStepBegin(std::span<RequestState* const>) {
  return absl::OkStatus();
}
absl::Status CompressionManager::OnGenerationStepEnd(std::span<RequestState* const>) {
  return absl::OkStatus();
}
absl::Status CompressionManager::OnToolCallPause(RequestState&) { return absl::OkStatus(); }
absl::Status CompressionManager::OnToolCallResume(RequestState&) { return absl::OkStatus(); }
absl::Status CompressionManager::OnRequestFinish(RequestState&) { return absl::OkStatus(); }
std::map<std::string, uint64_t> CompressionManager::Counters() const { return {}; }

namespace {

class MethodRegistry {
 public:
  MethodRegistry() {
    factories_.emplace(compression_internal::kTriAttentionName,
                       compression_internal::CreateTriAttentionMethod);
    factories_.emplace(compression_internal::kColdPageName,
                       compression_internal::CreateColdPageMethod);
  }

  absl::Status Add(std::string algorithm, CompressionMethodFactory factory) {
    if (algorithm.empty()) {
      return absl::InvalidArgumentError("compression method: the algorithm name is empty");
    }
    if (!factory) {
      return absl::InvalidArgumentError(
          absl::StrCat("compression method '", algorithm, "': the factory is empty"));
    }
    absl::MutexLock lock(&mu_);
    if (factories_.contains(algorithm)) {
      return absl::AlreadyExistsError(
          absl::StrCat("compression method '", algorithm, "' is already registered"));
    }
    factories_.emplace(std::move(algorithm), std::move(factory));
    return absl::OkStatus();
  }

  std::vector<std::string> Names() const {
    absl::MutexLock lock(&mu_);
    std::vector<std::string> names;
    for (const auto& [name, factory] : factories_) names.push_back(name);
    return names;  // std::map: sorted
  }

  // The factory for `algorithm`, or null.
  CompressionMethodFactory Find(const std::string& algorithm) const {
    absl::MutexLock lock(&mu_);
    auto it = factories_.find(algorithm);
    return it == factories_.end() ? nullptr : it->second;
  }

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, CompressionMethodFactory> factories_ ABSL_GUARDED_BY(mu_);
};

MethodRegistry& Registry() {
  static MethodRegistry* registry = new MethodRegistry();  // never destroyed
  return *registry;
}

// Methods called in order; see ChainCompressionMethods.
class CompressionChain : public CompressionManager {
 public:
  explicit CompressionChain(std::vector<std::unique_ptr<CompressionManager>> methods)
      : methods_(std::move(methods)) {
    std::vector<std::string> names;
    for (const auto& m : methods_) names.emplace_back(m->name());
    name_ = absl::StrJoin(names, "+");
  }

  std::string_view name() const override { return name_; }

  absl::Status OnRequestStart(RequestState& request) override {
    return Each([&](CompressionManager& m) { return m.OnRequestStart(request); });
  }
  absl::Status OnPrefillChunkEnd(RequestState& request, int64_t chunk_end) override {
    return Each([&](CompressionManager& m) { return m.OnPrefillChunkEnd(request, chunk_end); });
  }
  absl::Status OnContextEnd(RequestState& request) override {
    return Each([&](CompressionManager& m) { return m.OnContextEnd(request); });
  }
  absl::Status OnGenerationStepBegin(std::span<RequestState* const> requests) override {
    return Each([&](CompressionManager& m) { return m.OnGenerationStepBegin(requests); });
  }
  absl::Status OnGenerationStepEnd(std::span<RequestState* const> requests) override {
    return Each([&](CompressionManager& m) { return m.OnGenerationStepEnd(requests); });
  }
  absl::Status OnToolCallPause(RequestState& request) override {
    return Each([&](CompressionManager& m) { return m.OnToolCallPause(request); });
  }
  absl::Status OnToolCallResume(RequestState& request) override {
    return Each([&](CompressionManager& m) { return m.OnToolCallResume(request); });
  }
  absl::Status OnRequestFinish(RequestState& request) override {
    absl::Status first;
    for (const auto& m : methods_) first.Update(m->OnRequestFinish(request));
    return first;
  }

  std::map<std::string, uint64_t> Counters() const override {
    std::map<std::string, uint64_t> sum;
    for (const auto& m : methods_) {
      for (const auto& [name, value] : m->Counters()) sum[name] += value;
    }
    return sum;
  }

 private:
  template <typename Hook>
  absl::Status Each(Hook hook) {
    for (const auto& m : methods_) {
      absl::Status status = hook(*m);
      if (!status.ok()) return status;
    }
    return absl::OkStatus();
  }

  std::vector<std::unique_ptr<CompressionManager>> methods_;
  std::string name_;
};

}  // namespace

absl::Status RegisterCompressionMethod(std::string algorithm, CompressionMethodFactory factory) {
  return Registry().Add(std::move(algorithm), std::move(factory));
}

std::vector<std::string> CompressionMethodNames() { return Registry().Names(); }

absl::StatusOr<std::unique_ptr<CompressionManager>> CreateCompressionMethod(
    const CompressionConfig& config, const EngineContext& engine) {
  const CompressionMethodFactory factory = Registry().Find(config.algorithm);
  if (!factory) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown compression algorithm '", config.algorithm,
                     "' (known: ", absl::StrJoin(CompressionMethodNames(), ", "), ")"));
  }
  absl::StatusOr<std::unique_ptr<CompressionManager>> method = factory(config, engine);
  if (method.ok() && *method == nullptr) {
    return absl::InternalError(absl::StrCat("compression method '", config.algorithm,
                                            "': the factory returned no method"));
  }
  return method;
}

std::unique_ptr<CompressionManager> ChainCompressionMethods(
    std::vector<std::unique_ptr<CompressionManager>> methods) {
  methods.erase(std::remove(methods.begin(), methods.end(), nullptr), methods.end());
  return std::make_unique<CompressionChain>(std::move(methods));
}

}  // namespace kvtier
