// MetricsHttpServer: a small HTTP/1.1 listener for Prometheus and probes. GET /metrics returns the
// store's and the service's counters in the Prometheus text format (names in docs/METRICS.md),
// /healthz "ok" while the process serves, /readyz "ready" (503 once draining). One thread;
// one short request per connection.
#ifndef KVTIER_DAEMON_KVTIERD_METRICS_HTTP_H_
#define KVTIER_DAEMON_KVTIERD_METRICS_HTTP_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/service/kvtier_service.h"
#include "daemon/store/block_store.h"

namespace kvtier::kvtierd {

// The Prometheus text exposition of the store's and service's state.
struct ServiceGauges {
  size_t engines = 0;
  size_t event_streams = 0;
  uint64_t store_events = 0;
  service::KvTierService::Traffic traffic;
  std::vector<service::RpcMetrics::Method> rpcs;
};
std::string RenderMetrics(const store::StoreStats& stats, const ServiceGauges& service, bool ready);

class MetricsHttpServer {
 public:
  // Listens on "host:port" (port 0: any free port; address() says which). InvalidArgument for a
  // malformed address, Unavailable when it cannot bind (the message names the address).
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(const std::string& listen,
                                                                  store::BlockStore* store,
                                                                  service::KvTierService* service);
  ~MetricsHttpServer();  // stops the thread and closes the socket

  const std::string& address() const { return address_; }
  void SetReady(bool ready) { ready_ = ready; }

 private:
  MetricsHttpServer() = default;
  void Loop();
  void Serve(int fd);

  int listen_fd_ = -1;
  int wake_fd_[2] = {-1, -1};
  std::string address_;
  store::BlockStore* store_ = nullptr;
  service::KvTierService* service_ = nullptr;
  std::atomic<bool> ready_{true};
  std::thread thread_;
};

}  // namespace kvtier::kvtierd

#endif  // KVTIER_DAEMON_KVTIERD_METRICS_HTTP_H_
