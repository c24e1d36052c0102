// MetricsHttpServer: the HTTP/1.1 endpoint for Prometheus and probes. GET /metrics returns the
// store's and the service's counters in the Prometheus text format (names in docs/METRICS.md),
// /healthz and /readyz what DaemonProbes says (daemon/kvtierd/probes.h). An event loop
// (libmicrohttpd, two threads) serves every connection, so idle or slow clients hold no thread
// and a probe is answered while they stay open; one request per connection. Answer runs on
// both threads at once.
#ifndef KVTIER_DAEMON_KVTIERD_METRICS_HTTP_H_
#define KVTIER_DAEMON_KVTIERD_METRICS_HTTP_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/kvevents/kv_event_publisher.h"
#include "daemon/kvtierd/probes.h"
#include "daemon/kvtierd/process_stats.h"
#include "daemon/service/kvtier_service.h"
#include "daemon/store/block_store.h"

struct MHD_Daemon;

namespace kvtier::kvtierd {

// The KV-events publisher's counters (kv_events.enabled).
struct KvEventGauges {
  uint64_t published = 0, dropped = 0, lost = 0;
};

// The Prometheus text exposition of the store's and service's state.
struct ServiceGauges {
  size_t engines = 0;
  size_t event_streams = 0;
  uint64_t store_events = 0;
  service::KvTierService::Traffic traffic;
  std::vector<service::RpcMetrics::Method> rpcs;
  std::optional<KvEventGauges> kv_events;         // absent: kv_events off
  std::optional<store::SharedTierStats> cluster;  // when a cluster tier is configured
};
// With kvtier_build_info (build_info::Get()) and, when `process` is set, the standard process_*
// metrics.
std::string RenderMetrics(const store::StoreStats& stats, const ServiceGauges& service, bool ready,
                          const std::optional<ProcessStats>& process = std::nullopt);

class MetricsHttpServer {
 public:
  // Listens on "host:port" (port 0: any free port; address() says which) and serves until
  // destroyed. InvalidArgument for a malformed address, Unavailable when it cannot bind (the
  // message names the address), Internal when the HTTP library does not start. Borrows `store`,
  // `service`, `probes` and `kv_events` (null: off), which must outlive the server.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      const std::string& listen, store::BlockStore* store, service::KvTierService* service,
      DaemonProbes* probes, const kvevents::KvEventPublisher* kv_events = nullptr);
  // Closes the listener and every connection; waits for the requests being answered.
  ~MetricsHttpServer();

  const std::string& address() const { return address_; }

  // What the server answers to `method` on `path` (without its query string): GET or HEAD of
  // /metrics, /healthz, /readyz; 404 for another path, 405 for another method. Blocks as
  // DaemonProbes does (the store's lock, up to its hello_deadline).
  struct Response {
    unsigned int code = 200;
    const char* type = "text/plain; charset=utf-8";
    std::string body;
  };
  Response Answer(const std::string& method, const std::string& path);

 private:
  MetricsHttpServer() = default;

  MHD_Daemon* daemon_ = nullptr;
  std::string address_;
  store::BlockStore* store_ = nullptr;
  service::KvTierService* service_ = nullptr;
  DaemonProbes* probes_ = nullptr;
  const kvevents::KvEventPublisher* kv_events_ = nullptr;
};

}  // namespace kvtier::kvtierd

#endif  // KVTIER_DAEMON_KVTIERD_METRICS_HTTP_H_
