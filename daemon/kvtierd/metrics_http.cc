// The metrics endpoint: Prometheus text rendering and a poll-based HTTP listener.
#include "daemon/kvtierd/metrics_http.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"
#include "daemon/io/posix_file.h"
#include "daemon/kvtierd/tcp_listen.h"

namespace kvtier::kvtierd {
namespace {

constexpr const char* kTierNames[] = {"gpu", "host", "disk"};
// grpc::StatusCode names, by value.
constexpr const char* kGrpcCodeNames[service::RpcMetrics::kCodes] = {
    "OK",        "CANCELLED",      "UNKNOWN",           "INVALID_ARGUMENT",   "DEADLINE_EXCEEDED",
    "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED",   "OUT_OF_RANGE",   "UNIMPLEMENTED",     "INTERNAL",           "UNAVAILABLE",
    "DATA_LOSS", "UNAUTHENTICATED"};

class Writer {
 public:
  void Family(const char* name, const char* type, const char* help) {
    absl::StrAppend(&out_, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
  }
  void Sample(const char* name, const std::string& labels, double value) {
    absl::StrAppend(&out_, name, labels.empty() ? "" : absl::StrCat("{", labels, "}"), " ",
                    absl::StrFormat("%.17g", value), "\n");
  }
  void Counter(const char* name, const char* help, uint64_t value) {
    Family(name, "counter", help);
    Sample(name, "", static_cast<double>(value));
  }
  void Gauge(const char* name, const char* help, double value) {
    Family(name, "gauge", help);
    Sample(name, "", value);
  }
  void PerTier(const char* name, const char* type, const char* help, const store::StoreStats& stats,
               uint64_t store::TierStats::*field) {
    Family(name, type, help);
    for (int t = 0; t < 3; ++t) {
      Sample(name, absl::StrFormat("tier=\"%s\"", kTierNames[t]),
             static_cast<double>(stats.tiers[t].*field));
    }
  }
  void Histogram(const char* name, const char* help, const LatencyHistogram::Snapshot& h) {
    Family(name, "histogram", help);
    HistogramSeries(name, "", h);
  }
  // One labeled series of a histogram family (`labels`: `a="x",b="y"` or empty).
  void HistogramSeries(const char* name, const std::string& labels,
                       const LatencyHistogram::Snapshot& h) {
    const std::string sep = labels.empty() ? "" : ",";
    const std::string braces = labels.empty() ? "" : absl::StrCat("{", labels, "}");
    uint64_t cumulative = 0;
    for (size_t i = 0; i < LatencyHistogram::kBuckets; ++i) {
      cumulative += h.counts[i];
      const uint64_t bound = LatencyHistogram::Snapshot::UpperBoundUs(i);
      const std::string le =
          bound == UINT64_MAX ? "+Inf" : absl::StrFormat("%.6g", static_cast<double>(bound) / 1e6);
      absl::StrAppend(&out_, name, "_bucket{", labels, sep, "le=\"", le, "\"} ", cumulative, "\n");
    }
    absl::StrAppend(&out_, name, "_sum", braces, " ",
                    absl::StrFormat("%.6f", static_cast<double>(h.sum_us) / 1e6), "\n", name,
                    "_count", braces, " ", cumulative, "\n");
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

}  // namespace

std::string RenderMetrics(const store::StoreStats& s, const ServiceGauges& service, bool ready) {
  Writer w;
  w.Gauge("kvtier_ready", "1 while the daemon accepts new work, 0 while draining.", ready ? 1 : 0);
  w.Gauge("kvtier_engines", "Engines registered now.", static_cast<double>(service.engines));
  w.Gauge("kvtier_event_streams", "WatchEvents streams open now.",
          static_cast<double>(service.event_streams));
  w.Counter("kvtier_events_total", "Cache events reported by the store (one per block).",
            service.store_events);
  const service::KvTierService::Traffic& t = service.traffic;
  w.Counter("kvtier_offloaded_hot_bytes_total",
            "Hot bytes read from engines by Offload and Park (before encoding).",
            t.hot_bytes_offloaded);
  w.Counter("kvtier_offloaded_cold_bytes_total",
            "Cold block bytes those offloads and parks produced (hot / cold: compression ratio).",
            t.cold_bytes_offloaded);
  w.Counter("kvtier_onboarded_hot_bytes_total",
            "Hot bytes written into engines by Onboard and Resume (after decoding).",
            t.hot_bytes_onboarded);
  w.Counter("kvtier_onboarded_cold_bytes_total", "Cold block bytes read for those onboards.",
            t.cold_bytes_onboarded);
  w.Counter("kvtier_dropped_offloads_total",
            "Offload items not stored (admission declined or no capacity).", t.dropped_offloads);
  w.Gauge("kvtier_parked_requests", "Requests parked now (all engines).",
          static_cast<double>(t.parked_requests));
  w.PerTier("kvtier_tier_capacity_bytes", "gauge", "Capacity of each tier in bytes.", s,
            &store::TierStats::capacity_bytes);
  w.PerTier("kvtier_tier_used_bytes", "gauge", "Bytes of allocated slots in each tier.", s,
            &store::TierStats::used_bytes);
  w.PerTier("kvtier_tier_blocks", "gauge", "Blocks (GPU tier: pages) held by each tier.", s,
            &store::TierStats::blocks);
  w.PerTier("kvtier_tier_hits_total", "counter", "Reads served by each tier.", s,
            &store::TierStats::hits);
  w.PerTier("kvtier_tier_written_bytes_total", "counter",
            "Bytes written into each tier (GPU tier: hot page bytes).", s,
            &store::TierStats::bytes_in);
  w.PerTier("kvtier_tier_read_bytes_total", "counter",
            "Bytes read from each tier (GPU tier: hot page bytes).", s,
            &store::TierStats::bytes_out);
  w.Counter("kvtier_misses_total", "Reads of blocks the cache does not hold.", s.misses);
  w.Counter("kvtier_puts_total", "Blocks stored.", s.puts);
  w.Counter("kvtier_duplicate_puts_total", "Stores of blocks already held (kept as they were).",
            s.duplicate_puts);
  w.Counter("kvtier_put_rejected_total", "Stores refused for lack of room or quota.",
            s.put_rejected);
  w.Family("kvtier_evictions_total", "counter",
           "Blocks that left a tier, by source tier and destination (a tier, or drop).");
  w.Sample("kvtier_evictions_total", "from=\"gpu\",to=\"host\"",
           static_cast<double>(s.evictions_gpu_to_host));
  w.Sample("kvtier_evictions_total", "from=\"gpu\",to=\"drop\"",
           static_cast<double>(s.evictions_gpu_dropped));
  w.Sample("kvtier_evictions_total", "from=\"host\",to=\"disk\"",
           static_cast<double>(s.evictions_host_to_disk));
  w.Sample("kvtier_evictions_total", "from=\"host\",to=\"drop\"",
           static_cast<double>(s.evictions_host_dropped));
  w.Sample("kvtier_evictions_total", "from=\"host\",to=\"disk_copy\"",
           static_cast<double>(s.evictions_host_copy_freed));
  w.Sample("kvtier_evictions_total", "from=\"disk\",to=\"drop\"",
           static_cast<double>(s.evictions_disk_dropped));
  w.Counter("kvtier_quota_evictions_total", "Blocks removed to keep a namespace within its quota.",
            s.evictions_quota);
  w.Counter("kvtier_removed_blocks_total", "Blocks removed on request (Remove, Clear).", s.removed);
  w.Counter("kvtier_checksum_failures_total",
            "Blocks that failed verification when read back (dropped, never returned).",
            s.checksum_failures);
  w.Counter("kvtier_io_errors_total", "Disk reads or writes that failed.", s.io_errors);
  w.Gauge("kvtier_pinned_blocks", "Blocks pinned by readers now.",
          static_cast<double>(s.pinned_blocks));
  w.Gauge("kvtier_migrating_blocks", "Blocks being moved between tiers now.",
          static_cast<double>(s.migrating_blocks));
  w.Gauge("kvtier_index_unsynced_writes", "Index changes not yet durable.",
          static_cast<double>(s.unsynced_index_writes));
  w.Gauge("kvtier_quarantined_slots",
          "Freed slots waiting for the deletion of their index record to be durable.",
          static_cast<double>(s.quarantined_slots));
  w.Counter("kvtier_index_commit_failures_total", "Index writes that failed (and were retried).",
            s.index_commit_failures);
  w.Gauge("kvtier_index_blocks", "Blocks in the in-memory index.",
          static_cast<double>(s.indexed_blocks));
  w.Gauge("kvtier_index_memory_bytes", "Estimated memory of the in-memory index.",
          static_cast<double>(s.index_memory_bytes));
  w.Histogram("kvtier_read_latency_seconds", "Latency of block reads (Acquire).", s.read_latency);
  w.Histogram("kvtier_put_latency_seconds", "Latency of block stores (Commit).", s.put_latency);
  // Per RPC: calls by final status, and the latency of unary calls (start of the call to its
  // status being sent).
  w.Family("kvtier_rpc_handled_total", "counter", "gRPC calls completed, by method and status.");
  for (const service::RpcMetrics::Method& m : service.rpcs) {
    for (int c = 0; c < service::RpcMetrics::kCodes; ++c) {
      if (m.codes[c] == 0) continue;
      w.Sample("kvtier_rpc_handled_total",
               absl::StrFormat("service=\"%s\",method=\"%s\",code=\"%s\"", m.service, m.method,
                               kGrpcCodeNames[c]),
               static_cast<double>(m.codes[c]));
    }
  }
  w.Family("kvtier_rpc_duration_seconds", "histogram",
           "Latency of unary gRPC calls, by method (from the start of the call to its status).");
  for (const service::RpcMetrics::Method& m : service.rpcs) {
    if (m.latency.count == 0) continue;
    w.HistogramSeries("kvtier_rpc_duration_seconds",
                      absl::StrFormat("service=\"%s\",method=\"%s\"", m.service, m.method),
                      m.latency);
  }
  return w.Take();
}

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& listen, store::BlockStore* store, service::KvTierService* service) {
  absl::StatusOr<int> fd = ListenTcp("metrics.listen", listen);
  if (!fd.ok()) return fd.status();
  std::unique_ptr<MetricsHttpServer> server(new MetricsHttpServer());
  server->listen_fd_ = *fd;
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  getsockname(server->listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len);
  char text[INET6_ADDRSTRLEN] = {};
  uint16_t bound_port = 0;
  if (bound.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&bound);
    inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof(text));
    bound_port = ntohs(a->sin6_port);
    server->address_ = absl::StrFormat("[%s]:%d", text, bound_port);
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&bound);
    inet_ntop(AF_INET, &a->sin_addr, text, sizeof(text));
    bound_port = ntohs(a->sin_port);
    server->address_ = absl::StrFormat("%s:%d", text, bound_port);
  }
  if (pipe2(server->wake_fd_, O_CLOEXEC) != 0) {
    close(server->listen_fd_);
    return absl::InternalError(absl::StrCat("metrics: pipe: ", io::ErrnoText(errno)));
  }
  server->store_ = store;
  server->service_ = service;
  server->thread_ = std::thread([raw = server.get()] { raw->Loop(); });
  return server;
}

MetricsHttpServer::~MetricsHttpServer() {
  if (thread_.joinable()) {
    const char byte = 0;
    (void)!write(wake_fd_[1], &byte, 1);
    thread_.join();
  }
  for (int fd : {listen_fd_, wake_fd_[0], wake_fd_[1]}) {
    if (fd >= 0) close(fd);
  }
}

void MetricsHttpServer::Loop() {
  while (true) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_[0], POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      KVTIER_LOG(kError, "metrics: poll: ", io::ErrnoText(errno));
      return;
    }
    if (fds[1].revents != 0) return;
    if ((fds[0].revents & POLLIN) == 0) continue;
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    Serve(fd);
    close(fd);
  }
}

void MetricsHttpServer::Serve(int fd) {
  timeval timeout{2, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  // One deadline for the whole request: a slow client must not hold the only thread.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  std::string request;
  char buf[2048];
  while (request.find("\r\n\r\n") == std::string::npos && request.size() < 8192) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) return;
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    request.append(buf, static_cast<size_t>(n));
  }
  const size_t sp1 = request.find(' ');
  const size_t sp2 = sp1 == std::string::npos ? sp1 : request.find(' ', sp1 + 1);
  std::string method = sp1 == std::string::npos ? "" : request.substr(0, sp1);
  std::string path = sp2 == std::string::npos ? "" : request.substr(sp1 + 1, sp2 - sp1 - 1);
  const size_t query = path.find('?');
  if (query != std::string::npos) path.resize(query);
  int code = 200;
  std::string type = "text/plain; charset=utf-8";
  std::string body;
  if (method != "GET" && method != "HEAD") {
    code = 405;
    body = "only GET\n";
  } else if (path == "/metrics") {
    type = "text/plain; version=0.0.4; charset=utf-8";
    ServiceGauges gauges;
    gauges.engines = service_->engine_count();
    gauges.traffic = service_->traffic();
    gauges.rpcs = service_->rpc_metrics().Read();
    if (const service::EventLog* events = service_->events(); events != nullptr) {
      gauges.event_streams = events->listener_count();
      gauges.store_events = events->logged_store_events();
    }
    body = RenderMetrics(store_->Stats(), gauges, ready_);
  } else if (path == "/healthz") {
    body = "ok\n";
  } else if (path == "/readyz") {
    code = ready_ ? 200 : 503;
    body = ready_ ? "ready\n" : "draining\n";
  } else {
    code = 404;
    body = "not found: /metrics, /healthz, /readyz\n";
  }
  const char* reason = code == 200   ? "OK"
                       : code == 404 ? "Not Found"
                       : code == 405 ? "Method Not Allowed"
                                     : "Service Unavailable";
  std::string response = absl::StrFormat(
      "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n", code,
      reason, type, body.size());
  if (method != "HEAD") response += body;
  size_t sent = 0;
  while (sent < response.size()) {
    const ssize_t n = send(fd, response.data() + sent, response.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
}

}  // namespace kvtier::kvtierd
