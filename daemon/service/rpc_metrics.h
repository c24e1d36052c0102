// Per-RPC metrics of kvtierd's gRPC server, recorded by a server interceptor so that no handler
// has to remember: for every call, its method and final status code; for unary calls, also its
// latency from the start of the call to the sending of its status. /metrics exports them as
// kvtier_rpc_handled_total{service,method,code} and kvtier_rpc_duration_seconds{service,method}.
#ifndef KVTIER_DAEMON_SERVICE_RPC_METRICS_H_
#define KVTIER_DAEMON_SERVICE_RPC_METRICS_H_

#include <grpcpp/support/server_interceptor.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "common/histogram.h"

namespace kvtier::service {

class RpcMetrics {
 public:
  static constexpr int kCodes = 17;  // grpc::StatusCode OK ... UNAUTHENTICATED
  // Distinct methods kept apart; calls to further ones (names a client made up, answered
  // UNIMPLEMENTED) are counted under service "other", method "other".
  static constexpr size_t kMaxMethods = 64;

  struct Method {
    std::string service;                   // the full proto service name, "kvtier.v1.KvTier"
    std::string method;                    // "Lookup"
    LatencyHistogram::Snapshot latency;    // microseconds; unary calls only
    std::array<uint64_t, kCodes> codes{};  // calls by final status code
  };

  // `full_method` is gRPC's "/package.Service/Method"; `micros` < 0: no latency (streaming).
  void Record(const std::string& full_method, int code, int64_t micros);
  // Every method called so far, by service and method name.
  std::vector<Method> Read() const;

 private:
  struct Entry {
    std::string service, method;
    LatencyHistogram latency;
    std::array<std::atomic<uint64_t>, kCodes> codes{};
  };
  Entry* Find(const std::string& full_method);

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<Entry>> entries_ ABSL_GUARDED_BY(mu_);
  Entry other_{"other", "other", {}, {}};
};

// The interceptor factory to give grpc::ServerBuilder::experimental().SetInterceptorCreators;
// `metrics` must outlive the server.
std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> MakeRpcMetricsInterceptor(
    RpcMetrics* metrics);

}  // namespace kvtier::service

#endif  // KVTIER_DAEMON_SERVICE_RPC_METRICS_H_
