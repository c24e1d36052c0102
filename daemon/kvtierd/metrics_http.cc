// The metrics endpoint: Prometheus text rendering and the HTTP server around it.
//
// The server is libmicrohttpd's event loop (epoll, two threads), not a thread per connection or
// a pool of threads that each keep one connection: a client that connects and sends nothing, or
// half a request, holds a socket and 32 KiB of the library's memory, never a thread, so probes
// are answered while any number of such clients wait (up to the connection limits below). Each
// response closes its connection (probes and scrapes send one request), and a connection
// without traffic for kIdleTimeoutSeconds is closed. Two threads, because /healthz may wait up
// to a second for the gRPC server, and the other thread answers meanwhile.
#include "daemon/kvtierd/metrics_http.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>

#include "absl/base/const_init.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/build_info/build_info.h"
#include "common/logging.h"
#include "daemon/io/posix_file.h"
#include "daemon/kvtierd/tcp_listen.h"

namespace kvtier::kvtierd {
namespace {

// The event loop's threads.
constexpr unsigned int kThreads = 2;
// Connections open at once, in all and from one address: past them a new one is closed at once.
// The per-address bound keeps one client from taking every slot of the kubelet's probes.
constexpr unsigned int kMaxConnections = 256;
constexpr unsigned int kMaxConnectionsPerAddress = 32;
// A connection that sends and receives nothing for this long is closed.
constexpr unsigned int kIdleTimeoutSeconds = 5;
constexpr int kListenBacklog = 64;

// `text` as one line of a response body.
std::string OneLine(absl::string_view text) {
  return absl::StrCat(absl::StrReplaceAll(text, {{"\r", " "}, {"\n", " "}}), "\n");
}

// The library's messages, at most one a minute: clients that connect and leave without a
// complete request (port scans, TCP checks, timed-out probes) make it log every time.
void OnLibraryMessage(void* /*cls*/, const char* format, va_list args) {
  ABSL_CONST_INIT static absl::Mutex mu(absl::kConstInit);
  static absl::Time last = absl::InfinitePast();
  static uint64_t suppressed = 0;
  char text[512];
  vsnprintf(text, sizeof(text), format, args);
  std::string line(text);
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
  uint64_t dropped = 0;
  {
    absl::MutexLock lock(&mu);
    const absl::Time now = absl::Now();
    if (now - last < absl::Minutes(1)) {
      ++suppressed;
      return;
    }
    last = now;
    dropped = suppressed;
    suppressed = 0;
  }
  KVTIER_LOG(kWarning, "metrics http: ", line,
             dropped > 0 ? absl::StrCat(" (", dropped, " earlier messages not logged)") : "");
}

// Answers one request as soon as its headers are in (a body, which no endpoint takes, is
// discarded and the connection closed).
MHD_Result OnRequest(void* cls, MHD_Connection* connection, const char* url, const char* method,
                     const char* /*version*/, const char* /*upload_data*/,
                     size_t* /*upload_data_size*/, void** /*request_state*/) {
  const MetricsHttpServer::Response r = static_cast<MetricsHttpServer*>(cls)->Answer(method, url);
  MHD_Response* response = MHD_create_response_from_buffer(
      r.body.size(), const_cast<char*>(r.body.data()), MHD_RESPMEM_MUST_COPY);
  if (response == nullptr) return MHD_NO;
  MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, r.type);
  MHD_add_response_header(response, MHD_HTTP_HEADER_CONNECTION, "close");
  if (r.code == MHD_HTTP_METHOD_NOT_ALLOWED) {
    MHD_add_response_header(response, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
  }
  const MHD_Result queued = MHD_queue_response(connection, r.code, response);
  MHD_destroy_response(response);
  return queued;
}

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

  // `value` as a label value: backslash, double quote and newline escaped, as the text format
  // requires.
  static std::string LabelValue(absl::string_view value) {
    return absl::StrReplaceAll(value, {{"\\", "\\\\"}, {"\"", "\\\""}, {"\n", "\\n"}});
  }

 private:
  std::string out_;
};

void RenderClusterMetrics(const store::SharedTierStats& c, Writer& w) {
  w.Gauge("kvtier_cluster_degraded",
          "1 while the cluster tier is unreachable, failing or slow (local tiers serve).",
          c.degraded ? 1 : 0);
  w.Counter("kvtier_cluster_degraded_episodes_total", "Times the cluster tier became degraded.",
            c.degraded_episodes);
  w.Gauge("kvtier_cluster_writes_paused_full",
          "1 while cluster write-behind pauses because the pool is full.",
          c.writes_paused_full ? 1 : 0);
  w.Gauge("kvtier_cluster_queue_blocks", "Blocks queued or being written to the cluster tier.",
          static_cast<double>(c.queue_depth));
  w.Gauge("kvtier_cluster_queue_capacity_blocks", "Bound of the cluster write-behind queue.",
          static_cast<double>(c.queue_capacity));
  w.Counter("kvtier_cluster_offered_blocks_total", "Blocks queued for cluster write-behind.",
            c.offered);
  w.Counter("kvtier_cluster_written_blocks_total", "Objects this node created in the cluster.",
            c.written);
  w.Counter("kvtier_cluster_written_bytes_total", "Bytes of those objects.", c.written_bytes);
  w.Counter("kvtier_cluster_already_stored_blocks_total",
            "Write-behind blocks the cluster already held (written by any node).", c.already);
  w.Family("kvtier_cluster_dropped_blocks_total", "counter",
           "Write-behind blocks not written, by reason.");
  const std::pair<const char*, uint64_t> dropped[] = {{"queue_full", c.dropped_queue_full},
                                                      {"degraded", c.dropped_degraded},
                                                      {"pool_full", c.dropped_full},
                                                      {"gone", c.dropped_gone},
                                                      {"lost_events", c.dropped_lost_events}};
  for (const auto& [reason, n] : dropped) {
    w.Sample("kvtier_cluster_dropped_blocks_total", absl::StrFormat("reason=\"%s\"", reason),
             static_cast<double>(n));
  }
  w.Counter("kvtier_cluster_write_errors_total", "Failed cluster writes.", c.write_errors);
  w.Counter("kvtier_cluster_writes_unreleased_total",
            "Cluster writes whose block the RADOS client still held long after the write ended.",
            c.writes_unreleased);
  w.Counter("kvtier_cluster_lookups_total", "Lookups that asked the cluster tier.", c.lookups);
  w.Counter("kvtier_cluster_lookup_blocks_total", "Blocks those lookups found in the cluster.",
            c.lookup_blocks);
  w.Counter("kvtier_cluster_lookup_timeouts_total",
            "Cluster lookups that reached their deadline (answered as misses).", c.lookup_timeouts);
  w.Counter("kvtier_cluster_fetched_blocks_total", "Blocks fetched from the cluster tier.",
            c.fetched);
  w.Counter("kvtier_cluster_fetched_bytes_total", "Bytes of those blocks.", c.fetched_bytes);
  w.Counter("kvtier_cluster_fetch_misses_total", "Blocks asked of the cluster and absent.",
            c.fetch_misses);
  w.Counter("kvtier_cluster_verify_failures_total",
            "Cluster objects that failed verification (each a miss, never served).",
            c.verify_failures);
  w.Counter("kvtier_cluster_read_errors_total", "Failed or timed-out cluster reads.",
            c.read_errors);
  w.Gauge("kvtier_cluster_reads_in_flight", "Cluster reads the RADOS client holds now.",
          static_cast<double>(c.reads_in_flight));
  w.Gauge("kvtier_cluster_reads_in_flight_peak",
          "The most cluster reads the RADOS client held at once since it connected.",
          static_cast<double>(c.reads_in_flight_peak));
  w.Counter("kvtier_cluster_skipped_reads_total",
            "Cluster reads not attempted because the tier was degraded.", c.skipped_degraded);
  w.Gauge("kvtier_cluster_capacity_bytes", "cluster.capacity (0: no sweeper).",
          static_cast<double>(c.capacity_bytes));
  w.Gauge("kvtier_cluster_used_bytes", "Bytes of blocks in the pool at this node's last sweep.",
          static_cast<double>(c.used_bytes));
  w.Gauge("kvtier_cluster_objects", "Block objects in the pool at this node's last sweep.",
          static_cast<double>(c.objects));
  w.Counter("kvtier_cluster_sweeps_total", "Sweeps this node ran holding the eviction lease.",
            c.sweeps);
  w.Counter("kvtier_cluster_sweeps_lease_busy_total",
            "Sweeps skipped because another node held the eviction lease.", c.lease_busy);
  w.Counter("kvtier_cluster_evicted_blocks_total",
            "Least recently used blocks this node removed from the pool.", c.evicted);
  w.Counter("kvtier_cluster_evicted_bytes_total", "Bytes of those blocks.", c.evicted_bytes);
  w.Counter("kvtier_cluster_evict_spared_blocks_total",
            "Blocks chosen for removal but read after the listing, and kept.", c.evict_spared);
}

}  // namespace

std::string RenderMetrics(const store::StoreStats& s, const ServiceGauges& service, bool ready,
                          const std::optional<ProcessStats>& process) {
  Writer w;
  const build_info::BuildInfo& build = build_info::Get();
  w.Family("kvtier_build_info", "gauge",
           "Always 1; the labels say what kvtierd was built from and with (kvtierd --version).");
  w.Sample(
      "kvtier_build_info",
      absl::StrFormat("version=\"%s\",revision=\"%s\",cuda_archs=\"%s\",io_uring=\"%s\"",
                      Writer::LabelValue(build.version), Writer::LabelValue(build.revision),
                      Writer::LabelValue(build.cuda_archs.empty() ? "none" : build.cuda_archs),
                      Writer::LabelValue(build.liburing_version.empty()
                                             ? "none"
                                             : absl::StrCat("liburing ", build.liburing_version))),
      1);
  if (process.has_value()) {
    // The names, types and help texts of Prometheus' client libraries, so that dashboards and
    // alerts made for any process work unchanged.
    const ProcessStats& p = *process;
    w.Family("process_cpu_seconds_total", "counter",
             "Total user and system CPU time spent in seconds.");
    w.Sample("process_cpu_seconds_total", "", p.cpu_seconds);
    w.Gauge("process_resident_memory_bytes", "Resident memory size in bytes.",
            static_cast<double>(p.resident_bytes));
    w.Gauge("process_virtual_memory_bytes", "Virtual memory size in bytes.",
            static_cast<double>(p.virtual_bytes));
    w.Gauge("process_open_fds", "Number of open file descriptors.",
            static_cast<double>(p.open_fds));
    w.Gauge("process_max_fds", "Maximum number of open file descriptors.",
            static_cast<double>(p.max_fds));
    w.Gauge("process_start_time_seconds", "Start time of the process since unix epoch in seconds.",
            p.start_time_seconds);
  }
  w.Gauge("kvtier_ready", "1 while the daemon accepts new work, 0 while draining.", ready ? 1 : 0);
  w.Gauge("kvtier_engines", "Engines registered now.", static_cast<double>(service.engines));
  w.Gauge("kvtier_event_streams", "WatchEvents streams open now.",
          static_cast<double>(service.event_streams));
  w.Counter("kvtier_events_total", "Cache events reported by the store (one per block).",
            service.store_events);
  if (service.kv_events.has_value()) {
    w.Counter("kvtier_kv_events_published_total",
              "KV-event batches sent on the kv_events PUB socket.", service.kv_events->published);
    w.Counter("kvtier_kv_events_dropped_total",
              "KV-event batches dropped because a subscriber's queue was full (left for replay).",
              service.kv_events->dropped);
    w.Counter("kvtier_kv_events_lost_total",
              "Logged cache events the KV-event publisher did not read before the event log "
              "dropped them.",
              service.kv_events->lost);
  }
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
  if (service.cluster.has_value()) RenderClusterMetrics(*service.cluster, w);
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
  w.Gauge("kvtier_index_writable",
          "1 while the index takes writes; 0 while its drive is short of space, its directory is "
          "lost or it is open read-only (durable offloads fail, nothing new goes to disk).",
          s.index_health.writable() ? 1 : 0);
  w.Gauge("kvtier_index_read_only", "1 while the index is open read-only (its drive was full).",
          s.index_health.read_only ? 1 : 0);
  w.Gauge("kvtier_index_stalled", "1 while an index write waits for space on a full drive.",
          s.index_health.stalled ? 1 : 0);
  w.Gauge("kvtier_state_drive_free_bytes", "Free bytes of the drive holding the index.",
          static_cast<double>(s.index_health.free_bytes));
  w.Gauge("kvtier_state_drive_min_free_bytes",
          "index.min_free: below it the index takes no writes.",
          static_cast<double>(s.index_health.min_free_bytes));
  w.Counter("kvtier_index_refused_writes_total",
            "Index writes refused while the index was not writable.", s.index.refused_writes);
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
    const std::string& listen, store::BlockStore* store, service::KvTierService* service,
    DaemonProbes* probes, const kvevents::KvEventPublisher* kv_events) {
  absl::StatusOr<int> bound_fd = ListenTcp("metrics.listen", listen);
  if (!bound_fd.ok()) return bound_fd.status();
  const int listen_fd = *bound_fd;
  // Non-blocking, with a deeper backlog: the event loop's threads all accept on it.
  if (fcntl(listen_fd, F_SETFL, fcntl(listen_fd, F_GETFL) | O_NONBLOCK) != 0 ||
      ::listen(listen_fd, kListenBacklog) != 0) {
    const int err = errno;
    close(listen_fd);
    return absl::UnavailableError(
        absl::StrFormat("metrics.listen '%s': cannot listen: %s", listen, io::ErrnoText(err)));
  }
  std::unique_ptr<MetricsHttpServer> server(new MetricsHttpServer());
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  getsockname(listen_fd, reinterpret_cast<sockaddr*>(&bound), &len);
  char text[INET6_ADDRSTRLEN] = {};
  if (bound.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&bound);
    inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof(text));
    server->address_ = absl::StrFormat("[%s]:%d", text, ntohs(a->sin6_port));
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&bound);
    inet_ntop(AF_INET, &a->sin_addr, text, sizeof(text));
    server->address_ = absl::StrFormat("%s:%d", text, ntohs(a->sin_port));
  }
  server->store_ = store;
  server->service_ = service;
  server->probes_ = probes;
  server->kv_events_ = kv_events;
  // From here on the library owns the socket (MHD_stop_daemon closes it); a failed start leaves
  // it to us.
  server->daemon_ = MHD_start_daemon(
      MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ERROR_LOG, 0, nullptr, nullptr,
      &OnRequest, server.get(), MHD_OPTION_EXTERNAL_LOGGER, &OnLibraryMessage, nullptr,
      MHD_OPTION_LISTEN_SOCKET, listen_fd, MHD_OPTION_THREAD_POOL_SIZE, kThreads,
      MHD_OPTION_CONNECTION_LIMIT, kMaxConnections, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
      kMaxConnectionsPerAddress, MHD_OPTION_CONNECTION_TIMEOUT, kIdleTimeoutSeconds,
      MHD_OPTION_END);
  if (server->daemon_ == nullptr) {
    close(listen_fd);
    return absl::InternalError(absl::StrFormat(
        "metrics.listen '%s': the HTTP server did not start (see the log above)", listen));
  }
  return server;
}

MetricsHttpServer::~MetricsHttpServer() {
  if (daemon_ != nullptr) MHD_stop_daemon(daemon_);
}

MetricsHttpServer::Response MetricsHttpServer::Answer(const std::string& method,
                                                      const std::string& path) {
  Response r;
  if (method != "GET" && method != "HEAD") {
    r.code = 405;
    r.body = "only GET\n";
  } else if (path == "/metrics") {
    r.type = "text/plain; version=0.0.4; charset=utf-8";
    ServiceGauges gauges;
    gauges.engines = service_->engine_count();
    gauges.traffic = service_->traffic();
    gauges.rpcs = service_->rpc_metrics().Read();
    if (const service::EventLog* events = service_->events(); events != nullptr) {
      // The kv_events publisher and the cluster tier's write-behind feed listen to the log
      // too; they are no WatchEvents streams.
      const size_t internal = (kv_events_ != nullptr && kv_events_->listening() ? 1 : 0) +
                              (service_->shared_tier() != nullptr ? 1 : 0);
      const size_t listeners = events->listener_count();
      gauges.event_streams = listeners > internal ? listeners - internal : 0;
      gauges.store_events = events->logged_store_events();
    }
    if (kv_events_ != nullptr) {
      const kvevents::KvEventPublisher::Counters c = kv_events_->counters();
      gauges.kv_events = KvEventGauges{c.published_batches, c.dropped_batches, c.lost_log_events};
    }
    if (store::SharedTier* cluster = service_->shared_tier(); cluster != nullptr) {
      gauges.cluster = cluster->Stats();
    }
    absl::StatusOr<ProcessStats> process = ReadProcessStats();
    if (!process.ok())
      KVTIER_LOG_FIRST(kWarning, "metrics: no process_* metrics: ", process.status().message());
    r.body = RenderMetrics(store_->Stats(), gauges, probes_->NotReady().empty(),
                           process.ok() ? std::optional<ProcessStats>(*process) : std::nullopt);
  } else if (path == "/healthz") {
    const absl::Status alive = probes_->CheckAlive();
    r.code = alive.ok() ? 200 : 503;
    r.body = alive.ok() ? "ok\n" : OneLine(alive.message());
  } else if (path == "/readyz") {
    const std::vector<std::string> reasons = probes_->NotReady();
    r.code = reasons.empty() ? 200 : 503;
    if (reasons.empty()) r.body = "ready\n";
    for (const std::string& reason : reasons) r.body += OneLine(reason);
    // A degraded cluster tier is said but does not fail readiness: the node serves from its own
    // tiers meanwhile.
    if (store::SharedTier* cluster = service_->shared_tier(); cluster != nullptr) {
      const store::SharedTierStats c = cluster->Stats();
      if (c.degraded) r.body += OneLine(absl::StrCat("cluster tier degraded: ", c.degraded_reason));
    }
  } else {
    r.code = 404;
    r.body = "not found: /metrics, /healthz, /readyz\n";
  }
  return r;
}

}  // namespace kvtier::kvtierd
