// kvtierd: store + gRPC server + signals + systemd notifications.
#include "daemon/kvtierd/daemon.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/time/time.h"
#include "common/build_info/build_info.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "daemon/cluster/cluster_tier.h"
#include "daemon/io/posix_file.h"
#include "daemon/io/uring_block_file.h"
#include "daemon/kvevents/kv_event_publisher.h"
#include "daemon/kvtierd/cluster_feed.h"
#include "daemon/kvtierd/config_modes.h"
#include "daemon/kvtierd/metrics_http.h"
#include "daemon/kvtierd/probes.h"
#include "daemon/kvtierd/startup_checks.h"
#include "daemon/kvtierd/systemd_notify.h"
#include "daemon/kvtierd/systemd_watchdog.h"
#include "daemon/kvtierd/unix_listener.h"
#include "daemon/service/admin_service.h"
#include "daemon/service/kvtier_service.h"
#include "daemon/store/block_store.h"
#include "grpc/support/log.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "kvtier/v1/namespace.pb.h"

namespace kvtier::kvtierd {
namespace {

LogSeverity ParseLevel(const std::string& level) {
  if (level == "warning") return LogSeverity::kWarning;
  if (level == "error") return LogSeverity::kError;
  return LogSeverity::kInfo;
}

LogFormat ParseFormat(const std::string& format) {
  return format == "json" ? LogFormat::kJson : LogFormat::kText;
}

// gRPC's own messages (a port it cannot bind, a TLS handshake it refuses) go through the daemon's
// logger, so that they have its format too (one JSON object per line with log.format json). gRPC
// filters them by GRPC_VERBOSITY (default: errors only) before this is called.
void ForwardGrpcLog(gpr_log_func_args* args) {
  const LogSeverity severity =
      args->severity == GPR_LOG_SEVERITY_ERROR ? LogSeverity::kError : LogSeverity::kInfo;
  EmitLog(severity, args->file != nullptr ? args->file : "grpc", args->line,
          args->message != nullptr ? args->message : "", {}, "grpc");
}

absl::Status MakeDirs(const std::string& path, const char* what) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrFormat("cannot create the %s directory %s: %s", what, path, ec.message()));
  }
  return absl::OkStatus();
}

// The state directory: created 0700; one that exists loses write permission for group and
// others, so that nobody but the daemon's user can replace what it holds.
absl::Status PrepareStateDir(const std::string& path) {
  KVTIER_RETURN_IF_ERROR(MakeDirs(path, "state"));
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return absl::FailedPreconditionError(
        absl::StrFormat("cannot stat the state directory %s: %s", path, io::ErrnoText(errno)));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrFormat("state_dir %s is not a directory", path));
  }
  if ((st.st_mode & 022) != 0 && chmod(path.c_str(), st.st_mode & 07755 & ~022) != 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "the state directory %s is writable by group or others and its mode cannot be changed: "
        "%s",
        path, io::ErrnoText(errno)));
  }
  return absl::OkStatus();
}

// Takes <state_dir>/kvtierd.lock (flock) for the life of the process, before anything in the
// state directory, the socket or the host arena is touched: two daemons on one state directory
// would destroy each other's files. FailedPrecondition naming the other daemon's pid otherwise.
absl::StatusOr<int> LockStateDir(const std::string& state_dir) {
  const std::string path = state_dir + "/kvtierd.lock";
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrFormat("cannot open %s: %s", path, io::ErrnoText(errno)));
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char pid[32] = {};
    (void)!pread(fd, pid, sizeof(pid) - 1, 0);
    close(fd);
    if (err == EWOULDBLOCK) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "another kvtierd (pid %s) uses the state directory %s; stop it first, or give this one "
          "its own state_dir",
          absl::StripAsciiWhitespace(pid), state_dir));
    }
    return absl::FailedPreconditionError(
        absl::StrFormat("cannot lock %s: %s", path, io::ErrnoText(err)));
  }
  const std::string text = absl::StrCat(getpid(), "\n");
  if (ftruncate(fd, 0) != 0 || pwrite(fd, text.data(), text.size(), 0) < 0) {
    KVTIER_LOG(kWarning, "cannot write the pid into ", path, ": ", io::ErrnoText(errno));
  }
  return fd;
}

// The 32-byte key in `path` (cluster.key_file), which the operator created: FailedPrecondition
// naming the file when it cannot be read or holds anything else.
absl::StatusOr<std::string> LoadKey(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "cluster.key_file %s: %s (create it once with `head -c 32 /dev/urandom > %s` and give "
        "every node of the fleet the same file)",
        path, io::ErrnoText(errno), path));
  }
  std::string key(33, '\0');
  const ssize_t n = read(fd, key.data(), key.size());
  const int err = errno;
  close(fd);
  if (n < 0) {
    return absl::FailedPreconditionError(
        absl::StrFormat("cluster.key_file %s: %s", path, io::ErrnoText(err)));
  }
  if (n != 32) {
    return absl::FailedPreconditionError(
        absl::StrFormat("cluster.key_file %s holds %d bytes, not a 32-byte key", path, n));
  }
  key.resize(32);
  return key;
}

// 32 random bytes kept in `path` (mode 0600), created on first use: the daemon's hash-root key.
absl::StatusOr<std::string> LoadOrCreateKey(const std::string& path) {
  std::string key(32, '\0');
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    const ssize_t n = read(fd, key.data(), key.size());
    close(fd);
    if (n != static_cast<ssize_t>(key.size())) {
      return absl::DataLossError(absl::StrFormat("%s is not a 32-byte key", path));
    }
    return key;
  }
  if (errno != ENOENT) {
    return absl::FailedPreconditionError(
        absl::StrFormat("cannot read %s: %s", path, io::ErrnoText(errno)));
  }
  std::random_device rd;
  for (char& c : key) c = static_cast<char>(rd());
  fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0 || write(fd, key.data(), key.size()) != static_cast<ssize_t>(key.size()) ||
      fsync(fd) != 0) {
    const int err = errno;
    if (fd >= 0) close(fd);
    return absl::FailedPreconditionError(
        absl::StrFormat("cannot create %s: %s", path, io::ErrnoText(err)));
  }
  close(fd);
  return key;
}

// The cluster tier of `config` (cluster.*), on the fleet's `key`, reporting to `events`.
absl::StatusOr<std::unique_ptr<cluster::ClusterTier>> MakeClusterTier(
    const Config& config, const std::string& key, store::BlockStore* store,
    store::StoreEventSink* events) {
  cluster::ClusterOptions co;
  co.conf_path = config.cluster_ceph_conf;
  co.mon_host = config.cluster_mon_host;
  co.keyring = config.cluster_keyring;
  co.client_id = config.cluster_user;
  co.pool = config.cluster_pool;
  const absl::Duration op = absl::Seconds(config.cluster_op_timeout_seconds);
  co.osd_op_timeout = co.mon_op_timeout = co.mount_timeout = op;
  co.objecter_timeout = std::min(absl::Seconds(2), op / 2);
  co.max_block_bytes = static_cast<uint32_t>(
      std::min<uint64_t>(std::min(config.host_chunk, config.disk_chunk), 1u << 30));
  cluster::ClusterTierOptions to;
  to.admission = config.cluster_admission == "durable" ? cluster::ClusterAdmission::kDurable
                 : config.cluster_admission == "disk"  ? cluster::ClusterAdmission::kDisk
                                                       : cluster::ClusterAdmission::kAll;
  to.queue_capacity = config.cluster_queue_depth;
  to.write_threads = config.cluster_write_threads;
  to.lookup_timeout = absl::Milliseconds(config.cluster_lookup_timeout_ms);
  to.fetch_timeout = absl::Milliseconds(config.cluster_fetch_timeout_ms);
  to.probe_interval = absl::Seconds(config.cluster_probe_interval_seconds);
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  to.writer_node = host;
  to.key_fingerprint = service::KeyFingerprint(key);
  to.sweeper.capacity_bytes = config.cluster_capacity;
  to.sweeper.high_watermark = config.cluster_high_watermark;
  to.sweeper.low_watermark = config.cluster_low_watermark;
  to.sweeper.interval = absl::Seconds(config.cluster_sweep_interval_seconds);
  to.sweeper.cookie = absl::StrCat(host, ":", getpid());
  to.events = events;
  // A namespace's RADOS namespace comes from its tenant, which its record names.
  to.rados_namespace_of = [store, key](index::NamespaceId id) -> std::optional<std::string> {
    for (const auto& [ns, record] : store->Namespaces()) {
      if (ns != id) continue;
      v1::Namespace described;
      if (!described.ParseFromString(record.first)) return std::nullopt;
      return service::ClusterNamespaceOf(described.tenant(), key);
    }
    return std::nullopt;
  };
  return cluster::ClusterTier::Create(co, store, std::move(to));
}

// The credentials of the tcp.listen port: TLS with the configured certificate (and, with a client
// CA, verified client certificates), or plain text where tcp.insecure allows it.
std::shared_ptr<grpc::ServerCredentials> TcpCredentials(const Config& c) {
  if (c.tcp_insecure) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions options(
      c.tcp_tls_client_ca_pem.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                      : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = c.tcp_tls_client_ca_pem;
  options.pem_key_cert_pairs.push_back({c.tcp_tls_key_pem, c.tcp_tls_cert_pem});
  return grpc::SslServerCredentials(options);
}

// Writes `port` to `path` (through a temporary file and a rename, so readers never see a part).
absl::Status WritePortFile(const std::string& path, int port) {
  const std::string tmp = path + ".tmp";
  const std::string text = absl::StrCat(port, "\n");
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0 || write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size()) ||
      close(fd) != 0 || rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    if (fd >= 0) unlink(tmp.c_str());
    return absl::FailedPreconditionError(
        absl::StrFormat("cannot write %s: %s", path, io::ErrnoText(err)));
  }
  return absl::OkStatus();
}

absl::StatusOr<store::BlockStoreOptions> StoreOptions(const Config& c) {
  store::BlockStoreOptions o;
  o.index_path = c.state_dir + "/index";
  o.sync = ToSyncPolicy(c.sync);
  o.index_min_free_bytes = c.index_min_free;
  o.index_reserve_bytes = c.index_reserve;
  o.host_chunk_bytes = c.host_chunk;
  o.host.pin = ToHostPinMode(c.host_pin);
  std::string note;
  absl::StatusOr<uint64_t> host = HostTierBytes(c, &note);
  if (!host.ok()) return host.status();
  if (!note.empty()) KVTIER_LOG(kInfo, note);
  o.host.capacity_bytes = *host;
  if (c.host_persistent) o.host.shm_name = c.host_shm_name;
  o.max_block_bytes = c.host_chunk;
  o.disk.dirs = DiskTierDirs(c);
  if (!o.disk.dirs.empty()) {
    for (const std::string& d : o.disk.dirs) {
      if (absl::Status st = MakeDirs(d, "disk tier"); !st.ok()) return st;
    }
    absl::StatusOr<uint64_t> disk = DiskTierBytes(c, &note);
    if (!disk.ok()) return disk.status();
    if (!note.empty()) KVTIER_LOG(kInfo, note);
    o.disk.capacity_bytes = *disk;
    o.disk.chunk_bytes = c.disk_chunk;
    o.disk.queue_depth = c.disk_queue_depth;
    o.max_block_bytes = std::min(c.host_chunk, c.disk_chunk);
  }
  o.admission = c.disk_admission == "all" ? store::DiskAdmission::kAll
                                          : store::DiskAdmission::kReusedOrDurable;
  o.gpu.capacity_bytes = c.gpu_capacity;
  o.gpu.device = c.gpu_device;
  return o;
}

// The kv_events publisher over `events`, or null when kv_events is off. Its tenant filter reads
// the namespaces' records from `store`, and its BlockStored events the offloads' tokens from
// `tokens` (null when kv_events is off); both must outlive it.
absl::StatusOr<std::unique_ptr<kvevents::KvEventPublisher>> StartKvEvents(
    const Config::KvEvents& c, service::EventLog* events, const store::BlockStore* store,
    const service::TokenTable* tokens) {
  if (!c.enabled) return nullptr;
  kvevents::KvEventPublisherOptions o;
  o.endpoint = c.endpoint;
  o.replay_endpoint = c.replay_endpoint;
  o.topic = c.topic;
  KVTIER_ASSIGN_OR_RETURN(o.encoding, kvevents::ParseKvEventEncoding(c.encoding));
  o.replay_buffer = c.replay_buffer;
  o.send_hwm = static_cast<int>(c.send_hwm);
  o.tenants = c.tenants;
  o.block_size = c.block_size;
  o.batch_interval = absl::Milliseconds(c.batch_interval_ms);
  o.tokens = tokens;
  o.tenant_of = [store](index::NamespaceId id) -> std::optional<std::string> {
    for (const auto& [ns_id, record] : store->Namespaces()) {
      v1::Namespace ns;
      if (ns_id == id && ns.ParseFromString(record.first)) return ns.tenant();
    }
    return std::nullopt;
  };
  KVTIER_ASSIGN_OR_RETURN(auto publisher, kvevents::KvEventPublisher::Create(std::move(o), events));
  KVTIER_LOG(kInfo, "kv_events: publishing on ", publisher->endpoint(), " (", c.encoding,
             c.replay_endpoint.empty() ? "" : ", replay on ", publisher->replay_endpoint(),
             c.tenants.empty() ? "" : absl::StrCat(", tenants ", absl::StrJoin(c.tenants, ",")),
             ")");
  return publisher;
}

}  // namespace

void BlockShutdownSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

absl::StatusOr<std::string> RepairIndex(const Config& config) {
  umask(077);
  KVTIER_ASSIGN_OR_RETURN(const int lock, LockStateDir(config.state_dir));
  absl::Cleanup unlock = [lock] { close(lock); };
  index::RocksDbIndexOptions options;
  options.path = config.state_dir + "/index";
  options.sync_policy = ToSyncPolicy(config.sync);
  options.min_free_bytes = config.index_min_free;
  options.reserve_bytes = config.index_reserve;
  KVTIER_ASSIGN_OR_RETURN(index::IndexRepair repair, index::RepairRocksDbBlockIndex(options));
  if (repair.repaired) {
    return absl::StrCat("the index at ", options.path, " was repaired (", repair.detail,
                        "); start kvtierd as usual");
  }
  return absl::StrCat("the index at ", options.path, " could not be repaired (", repair.detail,
                      ") and was moved to ", repair.moved_to,
                      "; the next start creates an empty index (the disk tier starts empty)");
}

std::string VersionText() {
  const absl::Status ring = io::UringAvailable();
  return build_info::VersionText(
      "kvtierd", {{"kernel", ring.ok() ? std::string("grants io_uring rings")
                                       : absl::StrCat(ring.message(),
                                                      " (the disk tier uses a thread pool)")}});
}

absl::Status Run(const Config& config, const ConfigSource& source) {
  SetMinLogSeverity(ParseLevel(config.log_level));
  SetLogFormat(ParseFormat(config.log_format));
  gpr_set_log_function(&ForwardGrpcLog);
  // systemd: readiness and watchdog notifications, and a socket-activated Unix socket.
  const SystemdNotifier notifier = SystemdNotifier::FromEnvironment();
  auto notify = [&notifier](const std::string& state) {
    if (absl::Status st = notifier.Notify(state); !st.ok()) {
      KVTIER_LOG(kWarning, "cannot notify systemd: ", st.message());
    }
  };
  absl::StatusOr<std::vector<int>> listen_fds = ListenFds();
  if (!listen_fds.ok()) return listen_fds.status();
  if (listen_fds->size() > 1) {
    for (int fd : *listen_fds) close(fd);
    return absl::FailedPreconditionError(absl::StrFormat(
        "socket activation passed %d sockets; kvtierd takes one (ListenStream= of the Unix "
        "socket; TCP goes through tcp.listen)",
        listen_fds->size()));
  }
  const int activated_fd = listen_fds->empty() ? -1 : listen_fds->front();
  // Files the daemon creates are its own (0600, directories 0700) whatever the caller's umask;
  // the socket is made 0660 explicitly (unix_listener.cc).
  umask(077);
  // The state directory's lock first: a second daemon on it is told so, before anything else.
  if (absl::Status st = PrepareStateDir(config.state_dir); !st.ok()) return st;
  absl::StatusOr<int> state_lock = LockStateDir(config.state_dir);
  if (!state_lock.ok()) return state_lock.status();
  absl::Cleanup unlock_state = [fd = *state_lock] { close(fd); };
  // What can be checked in milliseconds (ports, TLS pair, directories, sizes), before the store
  // takes its time over recovery and pinning.
  if (absl::Status st = CheckStartable(config, {.socket_activated = activated_fd >= 0}); !st.ok()) {
    if (activated_fd >= 0) close(activated_fd);
    return st;
  }
  if (activated_fd < 0) {
    const std::string socket_dir = std::filesystem::path(config.socket).parent_path().string();
    if (!socket_dir.empty()) {
      if (absl::Status st = MakeDirs(socket_dir, "socket"); !st.ok()) return st;
    }
    if (absl::Status st = ClearStaleSocket(config.socket); !st.ok()) return st;
  }
  const std::string port_file = config.state_dir + "/tcp.port";
  unlink(port_file.c_str());  // a previous run's port

  // The event log outlives the store that feeds it (recovery's events included).
  uint64_t incarnation = 0;
  std::random_device rd;
  while (incarnation == 0) incarnation = (uint64_t{rd()} << 32) | rd();
  service::EventLog events(incarnation, config.events_retain);
  // Offloads' token ids for the kv_events publisher; it outlives both.
  std::unique_ptr<service::TokenTable> tokens;
  if (config.kv_events.enabled)
    tokens = std::make_unique<service::TokenTable>(config.kv_events.token_table_blocks);

  // The daemon's key: namespace ids are keyed with it (and, with authentication, hash roots). A
  // fleet sharing a cluster tier shares one (cluster.key_file), which must exist.
  absl::StatusOr<std::string> key = config.cluster_key_file.empty()
                                        ? LoadOrCreateKey(config.state_dir + "/hash-root.key")
                                        : LoadKey(config.cluster_key_file);
  if (!key.ok()) return key.status();
  const bool authentication = !config.auth_tokens_file.empty();

  absl::StatusOr<store::BlockStoreOptions> store_options = StoreOptions(config);
  if (!store_options.ok()) return store_options.status();
  store_options->events = &events;
  store_options->migrate_namespace_id = [&key, authentication](store::NamespaceId legacy,
                                                               absl::string_view record) {
    v1::Namespace ns;
    if (!ns.ParseFromArray(record.data(), static_cast<int>(record.size()))) return legacy;
    absl::StatusOr<service::DerivedNamespace> derived =
        service::DeriveNamespace(ns, *key, authentication);
    // Only a namespace this daemon derived keeps its blocks under the new id.
    if (!derived.ok() || derived->legacy_id != legacy) return legacy;
    return derived->id;
  };
  notify("STATUS=opening the store (index recovery)");
  absl::StatusOr<std::unique_ptr<store::BlockStore>> store =
      store::BlockStore::Open(*store_options);
  if (!store.ok()) {
    if (absl::IsDataLoss(store.status()) || absl::IsInternal(store.status())) {
      return absl::Status(
          store.status().code(),
          absl::StrCat(store.status().message(),
                       "; if the index is damaged, `kvtierd --repair-index` (with the same "
                       "configuration) salvages it or sets it aside (docs/OPERATIONS.md, Failure "
                       "modes)"));
    }
    return store.status();
  }
  // kv_events: after the store (its tenant filter reads namespaces), before the log closes.
  absl::StatusOr<std::unique_ptr<kvevents::KvEventPublisher>> kv_events =
      StartKvEvents(config.kv_events, &events, store->get(), tokens.get());
  if (!kv_events.ok()) return kv_events.status();

  // The cluster tier, when configured: the first connection is tried here (bounded by
  // cluster.op_timeout_seconds), later ones by the tier's own thread, so an unreachable cluster
  // delays the start by at most that and fails nothing.
  std::unique_ptr<cluster::ClusterTier> cluster_tier;
  if (!config.cluster_pool.empty()) {
    absl::StatusOr<std::unique_ptr<cluster::ClusterTier>> created =
        MakeClusterTier(config, *key, store->get(), &events);
    if (!created.ok()) return created.status();
    cluster_tier = std::move(*created);
  }

  service::ServiceOptions so;
  so.shared_tier = cluster_tier.get();
  so.pool_dirs = config.pool_dirs;
  so.default_codec = config.default_codec;
  so.max_items_per_request = config.max_items_per_request;
  so.max_request_bytes = config.max_request_bytes;
  so.max_engines = config.max_engines;
  so.max_engines_per_tenant = config.max_engines_per_tenant;
  so.max_parked_requests = config.max_parked_requests;
  so.max_parked_requests_per_tenant = config.max_parked_requests_per_tenant;
  so.default_lease = absl::Seconds(config.lease_seconds);
  so.min_lease = absl::Seconds(config.min_lease_seconds);
  so.max_lease = absl::Seconds(config.max_lease_seconds);
  so.worker_threads = config.workers;
  so.chunk_pages = config.chunk_pages;
  so.default_deadline = config.default_deadline;
  so.events = &events;
  so.tokens = tokens.get();
  auto peers = std::make_shared<service::PeerCredentials>();  // filled by the Unix listener
  so.peers = peers;
  if (config.host_persistent) so.forbidden_pool_files.push_back("/dev/shm/" + config.host_shm_name);
  if (!config.auth_tokens_file.empty()) {
    absl::StatusOr<std::unique_ptr<service::TokenAuth>> auth =
        service::TokenAuth::Load(config.auth_tokens_file, config.auth_admin_tenants);
    if (!auth.ok()) return auth.status();
    KVTIER_LOG(kInfo, "authentication on: ", (*auth)->size(), " tokens from ",
               config.auth_tokens_file);
    so.auth = std::move(*auth);
  }
  so.hash_root_key = *key;
  so.version = std::string(build_info::Get().version);
  // The engines, parked requests, pins and workers both services share; released before the
  // store (pins hold its blocks), after the services.
  auto state = std::make_unique<service::ServiceState>(store->get(), so);
  auto service = std::make_unique<service::KvTierService>(store->get(), so, state.get());
  std::unique_ptr<ClusterFeed> cluster_feed;  // write-behind's source: the store's events
  if (cluster_tier != nullptr) {
    cluster_feed = std::make_unique<ClusterFeed>(&events, cluster_tier.get());
  }

  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  // The TCP port goes first: BuildAndStart stops at the first port it cannot bind, so a failed
  // start with no TCP port selected is the TCP listener's failure.
  int tcp_port = 0;
  if (!config.tcp_listen.empty()) {
    builder.AddListeningPort(config.tcp_listen, TcpCredentials(config), &tcp_port);
  }
  // The Unix socket: kvtierd accepts its connections itself (UnixListener), on a socket it binds
  // now or the one systemd passed.
  const bool socket_activated = activated_fd >= 0;
  int unix_fd = activated_fd;
  if (!socket_activated) {
    absl::StatusOr<int> bound = UnixListener::Bind(config.socket);
    if (!bound.ok()) return bound.status();
    unix_fd = *bound;
  }
  // Until the listener owns the fd: close it on a failed start. The socket file kvtierd bound is
  // removed on every way out of Run from here on, until the listener stops (then at once).
  auto drop_unix = [&]() { close(unix_fd); };
  bool socket_file_ours = !socket_activated;
  absl::Cleanup remove_socket_file = [&] {
    if (socket_file_ours) unlink(config.socket.c_str());
  };
  builder.RegisterService(service.get());
  auto admin = std::make_unique<service::KvTierAdminService>(store->get(), state.get());
  builder.RegisterService(admin.get());
  builder.SetMaxReceiveMessageSize(static_cast<int>(config.max_request_bytes));
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(service::MakeRpcMetricsInterceptor(&service->rpc_metrics()));
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr) drop_unix();
  if (server == nullptr && !config.tcp_listen.empty() && tcp_port == 0) {
    return absl::UnavailableError(absl::StrFormat(
        "tcp.listen: cannot listen on %s (address in use, not local or not resolvable%s; see the "
        "gRPC log above)",
        config.tcp_listen,
        config.tcp_insecure ? "" : ", or tcp.tls.cert_file and key_file refused as a pair"));
  }
  if (server == nullptr) {
    return absl::UnavailableError("cannot start the gRPC server (see the gRPC log above)");
  }
  std::unique_ptr<UnixListener> listener;
  {
    absl::StatusOr<std::unique_ptr<UnixListener>> l = UnixListener::Start(
        unix_fd, server.get(), peers.get(), socket_activated ? std::string() : config.socket);
    if (!l.ok()) {
      server->Shutdown();
      return l.status();
    }
    listener = std::move(*l);
  }
  if (socket_activated && listener->path() != config.socket) {
    KVTIER_LOG(kWarning, "the socket-activated socket ", listener->path(),
               " is not server.socket (", config.socket, "), where kvtierctl looks by default");
  }
  const std::string unix_address =
      socket_activated ? absl::StrCat(listener->path(), " (socket-activated)") : config.socket;
  std::string tcp_address;
  if (!config.tcp_listen.empty()) {
    tcp_address =
        absl::StrCat(config.tcp_listen.substr(0, config.tcp_listen.rfind(':')), ":", tcp_port);
    const char* mode = config.tcp_insecure                    ? "plain text"
                       : config.tcp_tls_client_ca_pem.empty() ? "tls"
                                                              : "tls, client certificates required";
    KVTIER_LOG(kInfo, "listening on tcp ", tcp_address, " (", mode, ")");
    if (config.auth_tokens_file.empty() && config.tcp_tls_client_ca_pem.empty()) {
      KVTIER_LOG(kWarning, "tcp ", tcp_address,
                 " has neither auth.tokens_file nor tcp.tls.client_ca_file: every client that "
                 "reaches it can use every tenant and the admin service");
    }
    if (absl::Status st = WritePortFile(port_file, tcp_port); !st.ok()) {
      server->Shutdown();
      return st;
    }
  }

  DaemonProbes probes(store->get(), service.get(), server.get());  // /healthz, /readyz
  std::unique_ptr<MetricsHttpServer> metrics;
  if (!config.metrics_listen.empty()) {
    absl::StatusOr<std::unique_ptr<MetricsHttpServer>> m = MetricsHttpServer::Start(
        config.metrics_listen, store->get(), service.get(), &probes, kv_events->get());
    if (!m.ok()) {
      server->Shutdown();
      return m.status();
    }
    metrics = std::move(*m);
  }
  const std::string serving = absl::StrCat(
      "unix:", unix_address, tcp_address.empty() ? "" : absl::StrCat(", tcp ", tcp_address),
      metrics ? absl::StrCat(", metrics on http://", metrics->address()) : "");
  // The start-up line: what runs (version, revision), with which configuration, and the tier
  // sizes the store really has (auto sizes resolved, rounded to whole chunks).
  {
    const store::StoreStats stats = (*store)->Stats();
    const build_info::BuildInfo& build = build_info::Get();
    KVTIER_LOG_FIELDS(
        kInfo,
        absl::StrCat("kvtierd ready: ", serving,
                     absl::StrFormat(", incarnation %016x", service->incarnation())),
        LogField("version", build.version), LogField("revision", build.revision),
        LogField("config", source.file.empty() ? std::string("built-in defaults") : source.file),
        LogField("socket", unix_address), LogField("tcp", tcp_address),
        LogField("metrics", metrics ? metrics->address() : std::string()),
        LogField("gpu_capacity_bytes",
                 stats.tiers[static_cast<int>(index::Tier::kGpu)].capacity_bytes),
        LogField("host_capacity_bytes",
                 stats.tiers[static_cast<int>(index::Tier::kHost)].capacity_bytes),
        LogField("disk_capacity_bytes",
                 stats.tiers[static_cast<int>(index::Tier::kDisk)].capacity_bytes),
        LogField("incarnation", absl::StrFormat("%016x", service->incarnation())),
        LogField("pid", static_cast<int64_t>(getpid())));
  }
  // Every listener is up: systemd may start the units ordered after this one.
  notify(absl::StrCat("READY=1\nSTATUS=serving on ", serving, "\nMAINPID=", getpid()));
  StoreHealthCheck health(store->get());
  std::unique_ptr<SystemdWatchdog> watchdog =
      SystemdWatchdog::Start(&notifier, [&health] { return health.Check(); });
  if (watchdog != nullptr) {
    KVTIER_LOG(kInfo, "systemd watchdog: pinging every ",
               absl::FormatDuration(*notifier.watchdog() / 2), " while the store is healthy");
  }

  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  while (true) {
    int sig = 0;
    if (sigwait(&set, &sig) != 0) continue;
    if (sig == SIGHUP) {
      timespec now{};
      clock_gettime(CLOCK_MONOTONIC, &now);
      notify(absl::StrCat("RELOADING=1\nMONOTONIC_USEC=",
                          int64_t{now.tv_sec} * 1000000 + now.tv_nsec / 1000));
      absl::StatusOr<Config> reloaded = LoadConfig(source.file, source.overrides);
      if (!reloaded.ok()) {
        KVTIER_LOG(kError, "SIGHUP: configuration not reloaded: ",
                   absl::StrReplaceAll(reloaded.status().message(), {{"\n", "; "}}));
        notify(absl::StrCat("READY=1\nSTATUS=serving on ", serving, "; the last reload failed: ",
                            absl::StrReplaceAll(reloaded.status().message(), {{"\n", "; "}})));
        continue;
      }
      SetMinLogSeverity(ParseLevel(reloaded->log_level));
      SetLogFormat(ParseFormat(reloaded->log_format));
      KVTIER_LOG(kWarning, "SIGHUP: reloaded log.level (", reloaded->log_level,
                 ") and log.format (", reloaded->log_format,
                 "); other fields take effect at the next start");
      notify(absl::StrCat("READY=1\nSTATUS=serving on ", serving));
      continue;
    }
    KVTIER_LOG(kInfo, "signal ", sig, ": draining and stopping");
    notify("STOPPING=1\nSTATUS=draining");
    break;
  }
  watchdog.reset();  // systemd does not watch a stopping service
  listener.reset();  // new connections are refused (systemd's socket: wait for the next start)
  // The file goes with the listening socket: a kvtierd starting while this one drains binds a new
  // one, which must not be removed when this one exits.
  if (socket_file_ours) unlink(config.socket.c_str());
  socket_file_ours = false;
  // Drain: refuse new work, let requests on the workers finish within the grace period, then shut
  // the server down at once (gRPC would otherwise wait out the deadline for idle connections).
  state->dispatcher().BeginDrain();
  if (!state->dispatcher().WaitIdle(absl::Seconds(config.shutdown_grace_seconds))) {
    KVTIER_LOG(kWarning, "requests still running after ", config.shutdown_grace_seconds,
               " s; cancelling them");
  }
  if (*kv_events != nullptr) (*kv_events)->Stop();  // before the log closes
  events.Close();                                   // WatchEvents streams end with UNAVAILABLE
  probes.StopCheckingServer();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(100));
  server->Wait();
  metrics.reset();
  admin.reset();    // joins its Drain threads
  service.reset();  // joins the workers: no request touches the store any more
  state.reset();    // unmaps the engines' pools, releases parked requests' records and pins
  cluster_feed.reset();
  cluster_tier.reset();  // stops write-behind (what is queued stays in the local tiers)
  const index::IndexHealth index_health = (*store)->Stats().index_health;
  if (index_health.stalled) {
    // An index write waits for space inside RocksDB: the store's thread cannot be joined, and
    // closing the index would wait for it. Nothing unsynced was acknowledged as durable; the next
    // start recovers the index from its log.
    KVTIER_LOG(kError, "kvtierd: stopping with an index write waiting for space (",
               index_health.reason, "); exiting without closing the index");
    if (!tcp_address.empty()) unlink(port_file.c_str());
    std::fflush(nullptr);
    std::_Exit(1);
  }
  absl::Status flushed = (*store)->Flush();
  store->reset();
  if (!tcp_address.empty()) unlink(port_file.c_str());
  if (!flushed.ok() && !index_health.writable()) {
    KVTIER_LOG(kWarning, "kvtierd: the index takes no writes (", index_health.reason,
               "); index changes queued since then are dropped (none was acknowledged as "
               "durable)");
  } else if (!flushed.ok()) {
    return flushed;
  }
  KVTIER_LOG(kInfo, "kvtierd stopped cleanly");
  return absl::OkStatus();
}

}  // namespace kvtier::kvtierd
