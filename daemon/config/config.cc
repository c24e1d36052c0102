// kvtierd's configuration: the embedded default, YAML overlays and validation.
#include "daemon/config/config.h"

#include <cctype>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/file_reading.h"
#include "daemon/config/host_port.h"
#include "yaml-cpp/yaml.h"

namespace kvtier::kvtierd {
namespace {

// Every field kvtierd knows, with its default and what it means. Keep docs/CONFIG.md in step.
constexpr absl::string_view kDefaultConfig =
    R"(# kvtierd configuration. Every field is optional; this is the default.
# Sizes are bytes, or a number with KiB, MiB, GiB or TiB ("64GiB"); "auto" where allowed.

server:
  # Unix socket the gRPC services listen on. Its directory is created when missing.
  socket: /run/kvtier/kvtier.sock
  # Threads that run offloads, onboards and other blocking work (1 to 256).
  workers: 4
  # The workers take turns between engines, round-robin: an Offload or Onboard does this many
  # pages per turn (1 to 65536), then waits for the other engines' turns before its next chunk.
  chunk_pages: 64
  # Largest serialized request accepted (4 KiB to 64 MiB); larger ones fail RESOURCE_EXHAUSTED.
  max_request_bytes: 4MiB
  # Most items (pages, hashes) in one request (1 to 65536).
  max_items_per_request: 4096
  # Most engines registered at once (1 to 65536), and by one tenant (1 to max_engines).
  max_engines: 1024
  max_engines_per_tenant: 256
  # On SIGTERM: how long in-flight requests may take before they are cancelled (0 to 3600).
  shutdown_grace_seconds: 10
  # Deadline of a unary RPC whose client sets none (0 to 86400 seconds; 0: none): a request still
  # waiting for a worker past it fails DEADLINE_EXCEEDED. A client's own deadline is kept.
  default_deadline_seconds: 60

tcp:
  # host:port of a second gRPC listener, for clients on other hosts ("[::1]:50051" for IPv6, quoted
  # in YAML; port 0 picks a free port). The port is written to <state_dir>/tcp.port. "": off.
  listen: ""
  tls:
    # PEM server certificate chain and its private key (absolute paths, read at start); required
    # when listen is set, unless insecure is true.
    cert_file: ""
    key_file: ""
    # PEM CA bundle; when set, clients must present a certificate signed by it (mutual TLS).
    client_ca_file: ""
  # Plain-text TCP instead of TLS, for tests only: refused unless listen's host is 127.0.0.1,
  # [::1] or localhost.
  insecure: false

# Where the index (RocksDB) and, by default, the disk tier live. Created when missing.
state_dir: /var/lib/kvtier

pools:
  # Directories engines' host pools (shared-memory files) may be in. Absolute paths.
  allowed_dirs: [/dev/shm]

engines:
  # Codec of engines that do not ask for one: raw, nvfp4, nvfp4x2, optionally +rope.
  default_codec: nvfp4
  # Engine lease when the engine does not ask for one, and the range requests are clamped to.
  lease_seconds: 30
  min_lease_seconds: 1
  max_lease_seconds: 600
  # Most requests parked at once (Park, around a tool call), and by one tenant (1 to 1048576).
  max_parked_requests: 65536
  max_parked_requests_per_tenant: 16384

host:
  # Host tier size. auto: a quarter of the memory limit (cgroup memory.max or MemTotal), at most
  # 64 GiB, rounded down to whole chunks.
  capacity: auto
  # Allocation unit; the largest block the daemon stores is min(host.chunk, disk.chunk).
  chunk: 64MiB
  # Pinning: auto (CUDA if a GPU is usable, else mlock if RLIMIT_MEMLOCK allows, else none), cuda,
  # mlock, none.
  pin: auto
  # Keep the host tier across daemon restarts in /dev/shm/<shm_name>.
  persistent: false
  shm_name: kvtier-host

gpu:
  # GPU tier size (daemon-owned device memory for hot pages); 0: none. Needs CUDA.
  capacity: 0
  device: 0

disk:
  # Directories of the disk tier (one preallocated file each). Empty: <state_dir>/disk.
  dirs: []
  # Disk tier size, all directories together. auto: a quarter of the free space of the first
  # directory's file system (the tier's own files counted as free, so restarts agree), at most
  # 256 GiB, rounded down to whole chunks. 0: no disk tier.
  capacity: auto
  chunk: 256MiB
  # io_uring queue depth per file (1 to 4096).
  queue_depth: 64
  # Which blocks leaving the host tier are written to disk: all, or reused-or-durable.
  admission: all

cluster:
  # The fleet's shared tier: a Ceph RADOS pool every node's kvtierd shares (docs/CLUSTER.md).
  # Empty: no cluster tier.
  pool: ""
  # The cluster's ceph.conf (monitors, cephx); "" when mon_host says where the monitors are.
  ceph_conf: /etc/ceph/ceph.conf
  # Monitor addresses, overriding the conf's (for example "[v2:10.0.0.1:3300]"); "": the conf's.
  mon_host: ""
  # The cephx user (client.<user>) and its keyring (absolute path; "": the conf's).
  user: kvtier
  keyring: ""
  # The key namespace ids and hash roots are derived from (32 bytes). Every node sharing a pool
  # needs the same file, or no node finds another's blocks; the pool remembers the first node's
  # key and a node with another stays degraded. "": <state_dir>/hash-root.key (this node's own).
  key_file: ""
  # Which blocks write-behind copies into the pool: all (every block stored), disk (blocks the
  # node writes to its disk tier, and durable ones) or durable (blocks offloaded as durable).
  admission: all
  # Blocks waiting for write-behind (1 to 1048576); more are dropped and counted, never waited for.
  queue_depth: 4096
  # Write-behind operations in flight (1 to 256).
  write_threads: 4
  # Longest wait of one RADOS operation; a cluster slower than this counts as degraded.
  op_timeout_seconds: 5
  # Longest wait of a Lookup for the cluster, and of an Onboard for its fetch (also bounded by
  # the call's deadline).
  lookup_timeout_ms: 250
  fetch_timeout_ms: 2000
  # How often a degraded cluster tier (unreachable, failing, slow) is tried again.
  probe_interval_seconds: 2
  # Bytes of blocks the pool may hold (one copy each, before replication). Above high_watermark
  # of it, one node at a time (the holder of the pool's eviction lease) removes the least
  # recently used blocks down to low_watermark, every sweep_interval_seconds. 0: no eviction
  # (the pool's quota is the only bound).
  capacity: 0
  high_watermark: 0.9
  low_watermark: 0.8
  sweep_interval_seconds: 30

index:
  # When index writes are synced: none, batch (group commit every few ms), always.
  sync: batch
  # Below this much free space on the drive holding the index, the daemon stops writing to the
  # index: durable offloads fail with RESOURCE_EXHAUSTED and nothing new goes to the disk tier
  # (blocks stay in host memory) until space returns; /readyz and kvtier_index_writable say so.
  min_free: 256MiB
  # Space kept preallocated beside the index and given up when the drive fills anyway, so that
  # index writes already under way can finish. 0: none.
  reserve: 64MiB

events:
  # Cache events kept for WatchEvents clients that resume after a sequence (1 to 16777216); a
  # client further behind gets EventsLost. One event holds up to 4096 block hashes.
  retain: 65536

metrics:
  # host:port of the HTTP listener for /metrics, /healthz and /readyz; "" turns it off.
  listen: 127.0.0.1:9464

log:
  # Lowest level logged: info, warning, error. SIGHUP reloads it.
  level: info
  # Line format on stderr: text (one human-readable line per event) or json (one JSON object per
  # line: time, level, component, source, message, fields; docs/OPERATIONS.md, Logs). SIGHUP
  # reloads it.
  format: text

auth:
  # File of tenant tokens, one "<tenant> sha256:<hex of the token's SHA-256>" per line. Empty:
  # authentication off (the request's tenant field picks the tenant). On: every RPC needs
  # "authorization: Bearer <token>" metadata, and the token decides the tenant.
  tokens_file: ""
  # Tenants that may use the admin service (Clear, Verify, Drain) when authentication is on.
  admin_tenants: [admin]

kv_events:
  # Publish the cache's blocks as vLLM KV events over ZeroMQ, for KV-aware routers (llm-d,
  # Dynamo; docs/KV_EVENTS.md). Off by default.
  enabled: false
  # ZeroMQ endpoint of the PUB socket (tcp://, ipc:// or inproc://). One with "*" or "::" in it,
  # or an ipc:// or inproc:// one, is bound; any other is connected (to a relay that binds).
  endpoint: "tcp://*:5557"
  # Endpoint the ROUTER socket that replays buffered batches binds ("tcp://*:5558"); "": off.
  replay_endpoint: ""
  # First frame of every message; llm-d expects "kv@<pod-ip>:<port>@<model-name>".
  topic: ""
  # How events are written: map (a map with a "type" field, engines' current form) or array (a
  # list with the tag first, older engines' form, for routers that only read that).
  encoding: map
  # Batches kept for replay (1 to 1048576), and at most 256 MiB of them.
  replay_buffer: 10000
  # Messages queued per subscriber (1 to 10000000); a batch that does not fit is dropped,
  # counted, and left for replay.
  send_hwm: 100000
  # Tenants whose namespaces are published; []: every namespace.
  tenants: []
  # Tokens per block written in BlockStored events for a namespace no engine offloaded into since
  # the start (0 to 1048576; 0: unknown); else the engine layout's tokens_per_page.
  block_size: 0
  # Blocks whose token ids (OffloadItem.token_ids) are kept for BlockStored events, the oldest
  # going first (1 to 16777216; 4 bytes a token, about 4 MiB for 16-token pages).
  token_table_blocks: 65536
  # Milliseconds the publisher lets the store log, once woken, before it reads the log and
  # publishes (0 to 1000; 0: at once): one batch per interval instead of some per offload.
  batch_interval_ms: 10
)";

std::string Where(const YAML::Node& node) {
  const YAML::Mark mark = node.Mark();
  if (mark.line < 0) return "";
  return absl::StrFormat(" (line %d)", mark.line + 1);
}

// The fields of `user` that `reference` has, with every other one reported in `errors` (with
// `where` before it): unknown keys, maps given where a value is expected, values where a map is.
// Null when `user` is not a map.
YAML::Node KnownFields(const YAML::Node& reference, const YAML::Node& user,
                       const std::string& prefix, const std::string& where,
                       std::vector<std::string>* errors) {
  if (!user.IsMap()) {
    errors->push_back(absl::StrFormat("%s%s must be a map of fields%s", where,
                                      prefix.empty() ? "the configuration" : prefix, Where(user)));
    return YAML::Node();
  }
  YAML::Node known(YAML::NodeType::Map);
  for (const auto& kv : user) {
    const std::string key = kv.first.as<std::string>();
    const std::string path = prefix.empty() ? key : absl::StrCat(prefix, ".", key);
    const YAML::Node ref = reference[key];
    if (!ref) {
      errors->push_back(absl::StrFormat("%sunknown field '%s'%s", where, path, Where(kv.first)));
    } else if (ref.IsMap()) {
      YAML::Node inner = KnownFields(ref, kv.second, path, where, errors);
      if (!inner.IsNull()) known[key] = inner;
    } else if (kv.second.IsMap()) {
      errors->push_back(absl::StrFormat("%sfield '%s' takes a value, not a map%s", where, path,
                                        Where(kv.second)));
    } else {
      known[key] = kv.second;
    }
  }
  return known;
}

void Merge(YAML::Node base, const YAML::Node& over) {
  for (const auto& kv : over) {
    const std::string key = kv.first.as<std::string>();
    if (kv.second.IsMap() && base[key].IsMap()) {
      Merge(base[key], kv.second);
    } else {
      base[key] = kv.second;
    }
  }
}

// Reads fields of the merged configuration. Every failure is kept (one per field: the first),
// so that one run reports them all.
class Reader {
 public:
  Reader(const YAML::Node& root, std::vector<std::string>* errors) : root_(root), errors_(errors) {}
  // True when `path` failed (a later check of the same field would only repeat the first error).
  bool failed(const std::string& path) const { return failed_.contains(path); }

  YAML::Node Get(const std::string& path) {
    YAML::Node node = YAML::Clone(root_);
    for (absl::string_view part : absl::StrSplit(path, '.')) {
      node.reset(node[std::string(part)]);  // reset: assignment would overwrite the node's value
    }
    return node;
  }
  void Fail(const std::string& path, const std::string& what) {
    if (failed_.insert(path).second) {
      errors_->push_back(absl::StrFormat("field '%s': %s", path, what));
    }
  }
  std::string String(const std::string& path) {
    YAML::Node n = Get(path);
    if (!n.IsScalar()) {
      if (n.IsNull()) return "";
      Fail(path, "must be a string");
      return "";
    }
    return n.as<std::string>();
  }
  bool Bool(const std::string& path) {
    const std::string s = String(path);
    if (s == "true" || s == "yes" || s == "on") return true;
    if (s == "false" || s == "no" || s == "off") return false;
    Fail(path, absl::StrFormat("'%s' is not true or false", s));
    return false;
  }
  uint64_t Uint(const std::string& path, uint64_t min, uint64_t max) {
    const std::string s = String(path);
    uint64_t v = 0;
    if (!absl::SimpleAtoi(s, &v)) {
      Fail(path, absl::StrFormat("'%s' is not a whole number", s));
      return 0;
    }
    if (v < min || v > max) Fail(path, absl::StrFormat("%d is outside [%d, %d]", v, min, max));
    return v;
  }
  double Double(const std::string& path, double min, double max) {
    const std::string s = String(path);
    double v = 0;
    if (!absl::SimpleAtod(s, &v)) {
      Fail(path, absl::StrFormat("'%s' is not a number", s));
      return 0;
    }
    if (!(v >= min && v <= max)) Fail(path, absl::StrFormat("%g is outside [%g, %g]", v, min, max));
    return v;
  }
  // 0 for "auto" when allowed.
  uint64_t Bytes(const std::string& path, bool auto_allowed) {
    const std::string s = String(path);
    if (auto_allowed && s == "auto") return 0;
    absl::StatusOr<uint64_t> v = ParseBytes(path, s);
    if (!v.ok()) {
      if (failed_.insert(path).second) errors_->emplace_back(v.status().message());
      return 0;
    }
    if (auto_allowed && *v == 0) return UINT64_MAX;  // explicit 0 (no tier); see callers
    return *v;
  }
  std::vector<std::string> Paths(const std::string& path) {
    YAML::Node n = Get(path);
    std::vector<std::string> out;
    if (!n.IsSequence()) {
      Fail(path, "must be a list of paths");
      return out;
    }
    for (size_t i = 0; i < n.size(); ++i) {
      const std::string p = n[i].IsScalar() ? n[i].as<std::string>() : "";
      if (p.empty() || p[0] != '/') {
        Fail(path, absl::StrFormat("entry %d ('%s') is not an absolute path", i, p));
      }
      out.push_back(p);
    }
    return out;
  }

 private:
  YAML::Node root_;
  std::vector<std::string>* errors_;
  absl::flat_hash_set<std::string> failed_;
};

// The contents of the PEM file `path`, which must hold `marker` (part of the line that starts
// the block it needs; `what` names that block). The message of an error names the path and says
// why, with the errno text; a FIFO, socket, device or directory is refused without being read.
absl::StatusOr<std::string> ReadPem(const std::string& path, absl::string_view marker,
                                    absl::string_view what) {
  constexpr uint64_t kMaxBytes = 1 << 20;
  absl::StatusOr<std::string> contents = ReadRegularFile(path, kMaxBytes, "");
  if (!contents.ok()) return absl::InvalidArgumentError(contents.status().message());
  const std::string& text = *contents;
  if (!absl::StrContains(text, marker)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s is not a PEM %s (no '%s' in it)", path, what, marker));
  }
  if (absl::StrContains(text, "ENCRYPTED PRIVATE KEY-----") ||
      absl::StrContains(text, "Proc-Type: 4,ENCRYPTED")) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s is encrypted; kvtierd needs an unencrypted PEM key", path));
  }
  return text;
}

// kv_events.*: the endpoints' transports, the encoding and the sizes.
void ReadKvEvents(Reader& r, Config::KvEvents* k) {
  k->enabled = r.Bool("kv_events.enabled");
  auto check_endpoint = [&r](const char* field, const std::string& endpoint) {
    if (!absl::StartsWith(endpoint, "tcp://") && !absl::StartsWith(endpoint, "ipc://") &&
        !absl::StartsWith(endpoint, "inproc://")) {
      r.Fail(field, absl::StrFormat("'%s' is not a ZeroMQ endpoint (tcp://host:port, ipc://path "
                                    "or inproc://name)",
                                    endpoint));
    } else if (endpoint.size() == endpoint.find("://") + 3) {
      r.Fail(field, absl::StrFormat("'%s' names no address after the transport", endpoint));
    }
  };
  k->endpoint = r.String("kv_events.endpoint");
  check_endpoint("kv_events.endpoint", k->endpoint);
  k->replay_endpoint = r.String("kv_events.replay_endpoint");
  if (!k->replay_endpoint.empty()) {
    check_endpoint("kv_events.replay_endpoint", k->replay_endpoint);
    if (k->replay_endpoint == k->endpoint) {
      r.Fail("kv_events.replay_endpoint", "must differ from kv_events.endpoint");
    }
  }
  k->topic = r.String("kv_events.topic");
  k->encoding = r.String("kv_events.encoding");
  if (k->encoding != "array" && k->encoding != "map") {
    r.Fail("kv_events.encoding", absl::StrFormat("'%s' is not array or map", k->encoding));
  }
  k->replay_buffer = static_cast<uint32_t>(r.Uint("kv_events.replay_buffer", 1, 1u << 20));
  k->send_hwm = static_cast<uint32_t>(r.Uint("kv_events.send_hwm", 1, 10000000));
  k->block_size = static_cast<uint32_t>(r.Uint("kv_events.block_size", 0, 1u << 20));
  k->token_table_blocks =
      static_cast<uint32_t>(r.Uint("kv_events.token_table_blocks", 1, 1u << 24));
  k->batch_interval_ms = static_cast<uint32_t>(r.Uint("kv_events.batch_interval_ms", 0, 1000));
  YAML::Node tenants = r.Get("kv_events.tenants");
  if (!tenants.IsSequence()) {
    r.Fail("kv_events.tenants", "must be a list of tenant names");
    return;
  }
  for (size_t i = 0; i < tenants.size(); ++i) {
    const std::string t = tenants[i].IsScalar() ? tenants[i].as<std::string>() : "";
    if (t.empty()) r.Fail("kv_events.tenants", absl::StrFormat("entry %d is not a tenant name", i));
    k->tenants.push_back(t);
  }
}

}  // namespace

absl::string_view DefaultConfigYaml() { return kDefaultConfig; }

std::vector<std::string> ConfigWarnings(const Config& config) {
  std::vector<std::string> out;
  auto check = [&](const char* tier, const char* chunk_field, uint64_t capacity, uint64_t chunk) {
    if (capacity == 0 || chunk == 0 || capacity / chunk >= kMinTierChunks) return;
    out.push_back(absl::StrFormat(
        "the %s tier holds %d chunk(s) of %d bytes and each chunk serves blocks of one size, so "
        "engines whose blocks differ in size (layouts, codecs) evict each other's; give it at "
        "least %d chunks (a smaller %s or a larger tier)",
        tier, capacity / chunk, chunk, kMinTierChunks, chunk_field));
  };
  check("host", "host.chunk", config.host_capacity, config.host_chunk);
  check("disk", "disk.chunk", config.disk_capacity, config.disk_chunk);
  return out;
}

absl::StatusOr<uint64_t> ParseBytes(absl::string_view field, absl::string_view text) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  const absl::string_view number = text.substr(0, digits);
  const absl::string_view unit = text.substr(digits);
  uint64_t value = 0;
  uint64_t scale = 0;
  if (unit.empty() || unit == "B") {
    scale = 1;
  } else if (unit == "KiB") {
    scale = 1ull << 10;
  } else if (unit == "MiB") {
    scale = 1ull << 20;
  } else if (unit == "GiB") {
    scale = 1ull << 30;
  } else if (unit == "TiB") {
    scale = 1ull << 40;
  }
  if (number.empty() || scale == 0 || !absl::SimpleAtoi(number, &value) ||
      value > UINT64_MAX / scale) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "field '%s': '%s' is not a size (bytes, or a number with KiB, MiB, GiB or TiB)", field,
        text));
  }
  return value * scale;
}

absl::StatusOr<Config> LoadConfig(const std::string& file,
                                  const std::vector<std::string>& overrides) {
  constexpr uint64_t kMaxConfigBytes = uint64_t{16} << 20;
  const YAML::Node reference = YAML::Load(std::string(kDefaultConfig));
  YAML::Node root = YAML::Clone(reference);
  // Every error, in the order found; the file's own (it cannot be read) keeps its code when it is
  // the only one.
  std::vector<std::string> errors;
  absl::StatusCode single_code = absl::StatusCode::kInvalidArgument;
  if (!file.empty()) {
    absl::StatusOr<std::string> text = ReadRegularFile(file, kMaxConfigBytes, "config file");
    YAML::Node user;
    if (!text.ok()) {
      errors.emplace_back(text.status().message());
      single_code = text.status().code();
    } else {
      try {
        user = YAML::Load(*text);
      } catch (const YAML::Exception& e) {
        errors.push_back(absl::StrFormat("config file %s: %s", file, e.what()));
      }
    }
    if (user.IsDefined() && !user.IsNull()) {
      YAML::Node known =
          KnownFields(reference, user, "", absl::StrCat("config file ", file, ": "), &errors);
      if (!known.IsNull()) Merge(root, known);
    }
  }
  for (const std::string& o : overrides) {
    const size_t eq = o.find('=');
    if (eq == std::string::npos || eq == 0) {
      errors.push_back(absl::StrFormat("--set '%s': expected field.path=value", o));
      continue;
    }
    const std::string path = o.substr(0, eq);
    YAML::Node value;
    try {
      value = YAML::Load(o.substr(eq + 1));
    } catch (const YAML::Exception& e) {
      errors.push_back(absl::StrFormat("--set %s: %s", path, e.what()));
      continue;
    }
    // Build {a: {b: value}} and check it like a file.
    YAML::Node tree = value;
    const std::vector<std::string> parts = absl::StrSplit(path, '.');
    for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
      YAML::Node parent(YAML::NodeType::Map);
      parent[*it] = tree;
      tree.reset(parent);
    }
    YAML::Node known =
        KnownFields(reference, tree, "", absl::StrCat("--set ", path, ": "), &errors);
    if (!known.IsNull()) Merge(root, known);
  }
  Reader r(root, &errors);
  Config c;
  c.socket = r.String("server.socket");
  if (c.socket.empty() || c.socket.size() > 107) {
    r.Fail("server.socket", "must be a path of 1 to 107 bytes (the Unix socket limit)");
  }
  c.workers = static_cast<uint32_t>(r.Uint("server.workers", 1, 256));
  c.chunk_pages = static_cast<uint32_t>(r.Uint("server.chunk_pages", 1, 65536));
  const uint64_t request_bytes = r.Bytes("server.max_request_bytes", false);
  if (request_bytes < 4096 || request_bytes > (64u << 20)) {
    r.Fail("server.max_request_bytes", "must be within [4KiB, 64MiB]");
  }
  c.max_request_bytes = static_cast<uint32_t>(request_bytes);
  c.max_items_per_request = static_cast<uint32_t>(r.Uint("server.max_items_per_request", 1, 65536));
  c.max_engines = static_cast<uint32_t>(r.Uint("server.max_engines", 1, 65536));
  c.max_engines_per_tenant =
      static_cast<uint32_t>(r.Uint("server.max_engines_per_tenant", 1, 65536));
  if (c.max_engines_per_tenant > c.max_engines) {
    r.Fail("server.max_engines_per_tenant", "exceeds server.max_engines");
  }
  c.shutdown_grace_seconds = r.Double("server.shutdown_grace_seconds", 0, 3600);
  c.default_deadline = absl::Seconds(r.Double("server.default_deadline_seconds", 0, 86400));
  c.state_dir = r.String("state_dir");
  if (c.state_dir.empty() || c.state_dir[0] != '/') {
    r.Fail("state_dir", absl::StrFormat("'%s' is not an absolute path", c.state_dir));
  }
  c.pool_dirs = r.Paths("pools.allowed_dirs");
  if (c.pool_dirs.empty()) r.Fail("pools.allowed_dirs", "needs at least one directory");
  {
    absl::StatusOr<codec::CodecSpec> spec =
        codec::CodecSpec::Parse(r.String("engines.default_codec"));
    if (!spec.ok()) r.Fail("engines.default_codec", std::string(spec.status().message()));
    if (spec.ok()) c.default_codec = *spec;
  }
  c.lease_seconds = r.Double("engines.lease_seconds", 0.1, 86400);
  c.min_lease_seconds = r.Double("engines.min_lease_seconds", 0.1, 86400);
  c.max_lease_seconds = r.Double("engines.max_lease_seconds", 0.1, 86400);
  if (!r.failed("engines.min_lease_seconds") && !r.failed("engines.max_lease_seconds") &&
      c.min_lease_seconds > c.max_lease_seconds) {
    r.Fail("engines.min_lease_seconds", "exceeds engines.max_lease_seconds");
  }
  c.max_parked_requests = static_cast<uint32_t>(r.Uint("engines.max_parked_requests", 1, 1u << 20));
  c.max_parked_requests_per_tenant =
      static_cast<uint32_t>(r.Uint("engines.max_parked_requests_per_tenant", 1, 1u << 20));
  if (c.max_parked_requests_per_tenant > c.max_parked_requests) {
    r.Fail("engines.max_parked_requests_per_tenant", "exceeds engines.max_parked_requests");
  }
  c.host_capacity = r.Bytes("host.capacity", true);
  if (c.host_capacity == UINT64_MAX) r.Fail("host.capacity", "must be positive or auto");
  c.host_chunk = r.Bytes("host.chunk", false);
  if (c.host_chunk < (1u << 20) || c.host_chunk % 4096 != 0) {
    r.Fail("host.chunk", "must be at least 1MiB and a multiple of 4KiB");
  }
  const std::string pin = r.String("host.pin");
  if (pin == "auto") {
    c.host_pin = HostPin::kAuto;
  } else if (pin == "cuda") {
    c.host_pin = HostPin::kCuda;
  } else if (pin == "mlock") {
    c.host_pin = HostPin::kMlock;
  } else if (pin == "none") {
    c.host_pin = HostPin::kNone;
  } else {
    r.Fail("host.pin", absl::StrFormat("'%s' is not auto, cuda, mlock or none", pin));
  }
  c.host_persistent = r.Bool("host.persistent");
  c.host_shm_name = r.String("host.shm_name");
  if (c.host_shm_name.empty() || c.host_shm_name.find('/') != std::string::npos) {
    r.Fail("host.shm_name", "must be a non-empty file name without '/'");
  }
  c.gpu_capacity = r.Bytes("gpu.capacity", false);
  c.gpu_device = static_cast<int>(r.Uint("gpu.device", 0, 1024));
  c.disk_dirs = r.Paths("disk.dirs");
  c.disk_capacity = r.Bytes("disk.capacity", true);  // UINT64_MAX: explicit 0, no disk tier
  c.disk_chunk = r.Bytes("disk.chunk", false);
  if (c.disk_chunk < (1u << 20) || c.disk_chunk % 4096 != 0) {
    r.Fail("disk.chunk", "must be at least 1MiB and a multiple of 4KiB");
  }
  c.disk_queue_depth = static_cast<uint32_t>(r.Uint("disk.queue_depth", 1, 4096));
  c.disk_admission = r.String("disk.admission");
  if (c.disk_admission != "all" && c.disk_admission != "reused-or-durable") {
    r.Fail("disk.admission",
           absl::StrFormat("'%s' is not all or reused-or-durable", c.disk_admission));
  }
  c.cluster_pool = r.String("cluster.pool");
  c.cluster_ceph_conf = r.String("cluster.ceph_conf");
  c.cluster_mon_host = r.String("cluster.mon_host");
  c.cluster_user = r.String("cluster.user");
  c.cluster_keyring = r.String("cluster.keyring");
  c.cluster_key_file = r.String("cluster.key_file");
  for (const auto& [field, path] : {std::pair{"cluster.ceph_conf", &c.cluster_ceph_conf},
                                    std::pair{"cluster.keyring", &c.cluster_keyring},
                                    std::pair{"cluster.key_file", &c.cluster_key_file}}) {
    if (!path->empty() && (*path)[0] != '/') {
      r.Fail(field, absl::StrFormat("'%s' is not an absolute path", *path));
    }
  }
  if (!c.cluster_pool.empty() && c.cluster_ceph_conf.empty() && c.cluster_mon_host.empty()) {
    r.Fail("cluster.mon_host", "cluster.pool needs cluster.ceph_conf or cluster.mon_host");
  }
  if (c.cluster_user.empty()) r.Fail("cluster.user", "must not be empty");
  c.cluster_admission = r.String("cluster.admission");
  if (c.cluster_admission != "all" && c.cluster_admission != "disk" &&
      c.cluster_admission != "durable") {
    r.Fail("cluster.admission",
           absl::StrFormat("'%s' is not all, disk or durable", c.cluster_admission));
  }
  c.cluster_queue_depth = static_cast<uint32_t>(r.Uint("cluster.queue_depth", 1, 1u << 20));
  c.cluster_write_threads = static_cast<uint32_t>(r.Uint("cluster.write_threads", 1, 256));
  c.cluster_op_timeout_seconds = r.Double("cluster.op_timeout_seconds", 0.1, 600);
  c.cluster_lookup_timeout_ms =
      static_cast<uint32_t>(r.Uint("cluster.lookup_timeout_ms", 1, 600000));
  c.cluster_fetch_timeout_ms = static_cast<uint32_t>(r.Uint("cluster.fetch_timeout_ms", 1, 600000));
  c.cluster_probe_interval_seconds = r.Double("cluster.probe_interval_seconds", 0.1, 3600);
  c.cluster_capacity = r.Bytes("cluster.capacity", false);
  c.cluster_high_watermark = r.Double("cluster.high_watermark", 0.01, 1);
  c.cluster_low_watermark = r.Double("cluster.low_watermark", 0, 1);
  if (!r.failed("cluster.high_watermark") && !r.failed("cluster.low_watermark") &&
      c.cluster_low_watermark >= c.cluster_high_watermark) {
    r.Fail("cluster.low_watermark", "must be below cluster.high_watermark");
  }
  c.cluster_sweep_interval_seconds = r.Double("cluster.sweep_interval_seconds", 0.1, 86400);
  const std::string sync = r.String("index.sync");
  if (sync == "none") {
    c.sync = IndexSync::kNone;
  } else if (sync == "batch") {
    c.sync = IndexSync::kBatch;
  } else if (sync == "always") {
    c.sync = IndexSync::kAlways;
  } else {
    r.Fail("index.sync", absl::StrFormat("'%s' is not none, batch or always", sync));
  }
  c.index_min_free = r.Bytes("index.min_free", false);
  c.index_reserve = r.Bytes("index.reserve", false);
  c.metrics_listen = r.String("metrics.listen");
  std::string metrics_host;
  uint32_t metrics_port = 0;
  if (!c.metrics_listen.empty() && !SplitHostPort(c.metrics_listen, &metrics_host, &metrics_port,
                                                  /*allow_empty_host=*/true)) {
    r.Fail("metrics.listen",
           absl::StrFormat("'%s' is not host:port (IPv6: \"[::1]:9464\")", c.metrics_listen));
  }
  c.tcp_listen = r.String("tcp.listen");
  c.tcp_tls_cert_file = r.String("tcp.tls.cert_file");
  c.tcp_tls_key_file = r.String("tcp.tls.key_file");
  c.tcp_tls_client_ca_file = r.String("tcp.tls.client_ca_file");
  c.tcp_insecure = r.Bool("tcp.insecure");
  for (const auto& [field, path] :
       {std::pair{"tcp.tls.cert_file", &c.tcp_tls_cert_file},
        std::pair{"tcp.tls.key_file", &c.tcp_tls_key_file},
        std::pair{"tcp.tls.client_ca_file", &c.tcp_tls_client_ca_file}}) {
    if (!path->empty() && (*path)[0] != '/') {
      r.Fail(field, absl::StrFormat("'%s' is not an absolute path", *path));
    }
  }
  if (c.tcp_tls_cert_file.empty() != c.tcp_tls_key_file.empty()) {
    r.Fail(c.tcp_tls_cert_file.empty() ? "tcp.tls.cert_file" : "tcp.tls.key_file",
           "tcp.tls.cert_file and tcp.tls.key_file go together; one is set, the other is not");
  }
  if (!c.tcp_tls_client_ca_file.empty() && c.tcp_tls_cert_file.empty()) {
    r.Fail("tcp.tls.client_ca_file", "needs tcp.tls.cert_file and tcp.tls.key_file");
  }
  if (!c.tcp_listen.empty()) {
    std::string host;
    uint32_t port = 0;
    const bool tls = !c.tcp_tls_cert_file.empty();
    if (!SplitHostPort(c.tcp_listen, &host, &port)) {
      r.Fail("tcp.listen",
             absl::StrFormat("'%s' is not host:port (IPv6: \"[::1]:50051\")", c.tcp_listen));
    } else if (c.tcp_insecure && tls) {
      r.Fail("tcp.insecure", "true conflicts with tcp.tls.cert_file: TLS or plain text, not both");
    } else if (c.tcp_insecure && host != "127.0.0.1" && host != "[::1]" && host != "localhost") {
      r.Fail("tcp.insecure",
             absl::StrFormat("plain text is only allowed on 127.0.0.1, [::1] or localhost, not on "
                             "'%s'; use tcp.tls",
                             host));
    } else if (!c.tcp_insecure && !tls) {
      r.Fail("tcp.listen",
             "needs tcp.tls.cert_file and tcp.tls.key_file (or, for tests on a loopback address, "
             "tcp.insecure: true)");
    }
    // The files are read when their fields are sound (a bad path was reported already).
    if (tls && !r.failed("tcp.listen") && !r.failed("tcp.insecure")) {
      const struct {
        const char* field;
        const std::string* path;
        const char* marker;
        const char* what;
        std::string* pem;
      } files[] = {
          {"tcp.tls.cert_file", &c.tcp_tls_cert_file, "-----BEGIN CERTIFICATE-----", "certificate",
           &c.tcp_tls_cert_pem},
          {"tcp.tls.key_file", &c.tcp_tls_key_file, "PRIVATE KEY-----", "private key",
           &c.tcp_tls_key_pem},
          {"tcp.tls.client_ca_file", &c.tcp_tls_client_ca_file, "-----BEGIN CERTIFICATE-----",
           "CA certificate", &c.tcp_tls_client_ca_pem},
      };
      for (const auto& f : files) {
        if (f.path->empty() || r.failed(f.field)) continue;
        absl::StatusOr<std::string> pem = ReadPem(*f.path, f.marker, f.what);
        if (!pem.ok()) {
          r.Fail(f.field, std::string(pem.status().message()));
        } else {
          *f.pem = std::move(*pem);
        }
      }
    }
  }
  c.events_retain = static_cast<uint32_t>(r.Uint("events.retain", 1, 16u << 20));
  c.log_level = r.String("log.level");
  if (c.log_level != "info" && c.log_level != "warning" && c.log_level != "error") {
    r.Fail("log.level", absl::StrFormat("'%s' is not info, warning or error", c.log_level));
  }
  c.log_format = r.String("log.format");
  if (c.log_format != "text" && c.log_format != "json") {
    r.Fail("log.format", absl::StrFormat("'%s' is not text or json", c.log_format));
  }
  c.auth_tokens_file = r.String("auth.tokens_file");
  if (!c.auth_tokens_file.empty() && c.auth_tokens_file[0] != '/') {
    r.Fail("auth.tokens_file", absl::StrFormat("'%s' is not an absolute path", c.auth_tokens_file));
  }
  {
    YAML::Node admins = r.Get("auth.admin_tenants");
    if (!admins.IsSequence()) {
      r.Fail("auth.admin_tenants", "must be a list of tenant names");
    } else {
      for (size_t i = 0; i < admins.size(); ++i) {
        c.auth_admin_tenants.push_back(admins[i].IsScalar() ? admins[i].as<std::string>() : "");
      }
    }
  }
  ReadKvEvents(r, &c.kv_events);
  if (errors.empty()) return c;
  if (errors.size() == 1) return absl::Status(single_code, errors.front());
  return absl::InvalidArgumentError(absl::StrJoin(errors, "\n"));
}

}  // namespace kvtier::kvtierd
