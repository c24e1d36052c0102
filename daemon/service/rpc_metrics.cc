// RpcMetrics and the interceptor that feeds it.
#include "daemon/service/rpc_metrics.h"

#include <algorithm>
#include <chrono>

namespace kvtier::service {

RpcMetrics::Entry* RpcMetrics::Find(const std::string& full_method) {
  {
    absl::ReaderMutexLock lock(&mu_);
    if (auto it = entries_.find(full_method); it != entries_.end()) return it->second.get();
  }
  absl::MutexLock lock(&mu_);
  if (auto it = entries_.find(full_method); it != entries_.end()) return it->second.get();
  // "/package.Service/Method"; anything else (or one method too many) is "other".
  const size_t slash = full_method.rfind('/');
  if (entries_.size() >= kMaxMethods || full_method.size() < 4 || full_method[0] != '/' ||
      slash == 0 || slash + 1 >= full_method.size()) {
    return &other_;
  }
  auto entry = std::make_unique<Entry>();
  entry->service = full_method.substr(1, slash - 1);
  entry->method = full_method.substr(slash + 1);
  Entry* e = entry.get();
  entries_.emplace(full_method, std::move(entry));
  return e;
}

void RpcMetrics::Record(const std::string& full_method, int code, int64_t micros) {
  Entry* e = Find(full_method);
  e->codes[code >= 0 && code < kCodes ? code : 2 /* UNKNOWN */].fetch_add(
      1, std::memory_order_relaxed);
  if (micros >= 0) e->latency.Record(static_cast<uint64_t>(micros));
}

std::vector<RpcMetrics::Method> RpcMetrics::Read() const {
  std::vector<Method> out;
  auto add = [&](const Entry& e) {
    Method m;
    m.service = e.service;
    m.method = e.method;
    m.latency = e.latency.Read();
    uint64_t calls = 0;
    for (int c = 0; c < kCodes; ++c)
      calls += m.codes[c] = e.codes[c].load(std::memory_order_relaxed);
    if (calls > 0) out.push_back(std::move(m));
  };
  {
    absl::ReaderMutexLock lock(&mu_);
    for (const auto& [name, e] : entries_) add(*e);
  }
  add(other_);
  std::sort(out.begin(), out.end(), [](const Method& a, const Method& b) {
    return a.service != b.service ? a.service < b.service : a.method < b.method;
  });
  return out;
}

namespace {

using grpc::experimental::InterceptionHookPoints;

// One per call: created when the call starts, records when its status is sent.
class RpcMetricsInterceptor final : public grpc::experimental::Interceptor {
 public:
  RpcMetricsInterceptor(grpc::experimental::ServerRpcInfo* info, RpcMetrics* metrics)
      : metrics_(metrics),
        method_(info->method() != nullptr ? info->method() : ""),
        unary_(info->type() == grpc::experimental::ServerRpcInfo::Type::UNARY),
        start_(std::chrono::steady_clock::now()) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      const int64_t micros = unary_ ? std::chrono::duration_cast<std::chrono::microseconds>(
                                          std::chrono::steady_clock::now() - start_)
                                          .count()
                                    : -1;
      metrics_->Record(method_, static_cast<int>(methods->GetSendStatus().error_code()), micros);
    }
    methods->Proceed();
  }

 private:
  RpcMetrics* metrics_;
  std::string method_;
  bool unary_;
  std::chrono::steady_clock::time_point start_;
};

class RpcMetricsInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit RpcMetricsInterceptorFactory(RpcMetrics* metrics) : metrics_(metrics) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new RpcMetricsInterceptor(info, metrics_);
  }

 private:
  RpcMetrics* metrics_;
};

}  // namespace

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> MakeRpcMetricsInterceptor(
    RpcMetrics* metrics) {
  return std::make_unique<RpcMetricsInterceptorFactory>(metrics);
}

}  // namespace kvtier::service
