// kvtier::Client: an engine's connection to kvtierd. Hello, RegisterEngine (layout, codec, pools)
// with automatic lease renewal, the cache calls (Lookup, Offload, Onboard), the tool-call calls
// (Park, Resume, Release), Pin / Unpin, Stats and the event stream. Every call exists in three
// forms: synchronous (blocks until the answer), with a callback, and with a std::future; the
// asynchronous forms never block the caller. Errors are absl::Status with the server's code and
// message. A Client is thread-safe; callbacks run on a library thread and must not block for long.
#ifndef KVTIER_CLIENT_INCLUDE_KVTIER_CLIENT_H_
#define KVTIER_CLIENT_INCLUDE_KVTIER_CLIENT_H_

#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "kvtier/layout.h"
#include "kvtier/pools.h"
#include "kvtier/types.h"
#include "kvtier/version.h"

namespace kvtier {

// The version of the library loaded at run time, "0.1.0" (its build's KVTIER_VERSION_STRING;
// compare with the KVTIER_VERSION_STRING of the headers compiled against, kvtier/version.h).
std::string_view LibraryVersion();

struct ClientOptions {
  // The daemon's Unix socket. Default: $KVTIER_SOCKET when set, else /run/kvtier/kvtier.sock.
  std::string socket_path;
  // A gRPC target instead of socket_path ("unix:/path", "127.0.0.1:50051").
  std::string target;
  // Added to "libkvtier/<version>" in Hello, e.g. "vllm-connector/0.3".
  std::string client_name;
  // Tenant token, sent as "authorization: Bearer <token>" when the daemon authenticates.
  std::string token;
  // Deadline of each call.
  absl::Duration rpc_timeout = absl::Seconds(30);
  // How long Connect waits for the daemon to answer Hello.
  absl::Duration connect_timeout = absl::Seconds(10);
  // Renew the lease of every engine this client registered, about every lease / 3.
  bool keep_alive = true;
};

struct ServerInfo {
  uint32_t api_version = 0;
  std::string server_version;
  uint64_t incarnation_id = 0;
  std::string node_name;
  std::vector<Tier> tiers;
  std::vector<std::string> codecs;  // "raw", "nvfp4", "nvfp4x2"
  bool cuda = false;
  bool cuda_ipc_pools = false;
  bool shared_memory_pools = false;
  bool persistent_host_tier = false;
  bool authentication = false;
  bool draining = false;
  uint32_t max_items_per_request = 0;
  std::vector<std::string> features;
};

struct EngineOptions {
  std::string engine_name;           // for logs and kvtierctl
  std::string tenant;                // "" = the authenticated tenant or "default"
  std::string model;                 // required
  std::string partition;             // e.g. "tp0"; "" = unsharded
  std::optional<PageLayout> layout;  // required
  std::string codec;  // "raw", "nvfp4", "nvfp4+rope", "nvfp4x2"; "" = the daemon's default
  uint32_t codec_alignment_bytes = 0;               // 0 = 4096
  std::vector<PoolRegistration> pools;              // one per layout pool
  absl::Duration lease_ttl = absl::ZeroDuration();  // zero = the daemon's default (30 s)
};

// A registered engine: what RegisterEngine returned.
struct Engine {
  std::string engine_id;
  uint64_t namespace_id = 0;
  std::string hash_root;  // 32 bytes: BlockHasher's root
  std::string codec;      // the effective codec
  uint64_t hot_page_bytes = 0;
  uint64_t cold_block_bytes = 0;
  absl::Duration lease_ttl;
  uint64_t incarnation_id = 0;
};

// A page to offload or onboard: the block's hash and the slot in every pool of the layout.
struct PageRef {
  std::string block_hash;  // 1 to 32 bytes
  uint32_t page_index = 0;
  // Offload only: the page's tokens (at most the layout's tokens_per_page), which a daemon with
  // KV events on publishes with the block (OffloadItem.token_ids); empty: none.
  std::vector<uint32_t> token_ids = {};
};

struct LookupResult {
  uint32_t hit_pages = 0;   // leading hashes present in some tier
  std::vector<Tier> tiers;  // tier of each hit
  std::optional<absl::Time> pin_expires_at;
};

struct OffloadOptions {
  bool durable = false;  // write through to the disk tier
  Priority priority = Priority::kDefault;
  WriteAck ack = WriteAck::kDefault;
};

struct OffloadResult {
  std::vector<ItemResult> results;  // one per page, in order
  uint32_t stored_pages = 0;
  uint64_t hot_bytes_read = 0;
  uint64_t cold_bytes_written = 0;
};

struct OnboardResult {
  std::vector<ItemResult> results;  // one per page; tier = where the block was read from
  uint32_t onboarded_pages = 0;     // leading OK items: the usable prefix
  uint64_t cold_bytes_read = 0;
  uint64_t hot_bytes_written = 0;
};

struct ParkOptions {
  bool append = false;
  uint64_t num_tokens = 0;
  std::string user_data;                      // returned by Resume, at most 4096 bytes by default
  absl::Duration ttl = absl::ZeroDuration();  // zero = 10 min
  Priority priority = Priority::kDefault;     // default high
  WriteAck ack = WriteAck::kDefault;
};

struct ParkResult {
  uint32_t parked_pages = 0;
  uint64_t cold_bytes = 0;
  absl::Time expires_at;
  Tier tier = Tier::kUnspecified;
};

struct ResumeResult {
  uint32_t resumed_pages = 0;
  uint32_t parked_pages = 0;
  uint64_t num_tokens = 0;
  std::string user_data;
  bool released = false;
};

struct ReleaseResult {
  std::vector<ItemResult> results;  // kOk or kNotFound per request id
  uint64_t freed_bytes = 0;
};

struct PinResult {
  std::vector<ItemResult> results;
  std::optional<absl::Time> expires_at;
};

struct TierStats {
  Tier tier = Tier::kUnspecified;
  uint64_t capacity_bytes = 0;
  uint64_t used_bytes = 0;
  uint64_t blocks = 0;
  uint64_t pinned_blocks = 0;
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t bytes_in = 0;
  uint64_t bytes_out = 0;
  uint64_t evicted_blocks = 0;
  uint64_t checksum_failures = 0;
};

struct NamespaceStats {
  uint64_t namespace_id = 0;
  std::string tenant, model, partition;
  std::vector<TierStats> tiers;  // blocks and used_bytes only
  uint32_t engines = 0;
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t parked_requests = 0;
};

struct Stats {
  uint64_t incarnation_id = 0;
  absl::Duration uptime;
  std::vector<TierStats> tiers;
  uint64_t hot_bytes_offloaded = 0;
  uint64_t cold_bytes_offloaded = 0;
  uint64_t hot_bytes_onboarded = 0;
  uint64_t cold_bytes_onboarded = 0;
  uint64_t dropped_offloads = 0;
  uint64_t parked_requests = 0;
  uint32_t registered_engines = 0;
  bool draining = false;
  std::vector<NamespaceStats> namespaces;  // with include_namespaces
};

// One event of the daemon's stream (kvtier.v1.Event), flattened.
struct Event {
  enum class Kind {
    kBlockStored,
    kBlockRemoved,
    kBlockMoved,
    kNamespaceCleared,
    kEventsLost,
    kSnapshotComplete
  };
  Kind kind = Kind::kBlockStored;
  uint64_t sequence = 0;
  uint64_t namespace_id = 0;
  std::vector<std::string> block_hashes;  // stored, removed, moved
  Tier tier = Tier::kUnspecified;         // stored, removed, cleared; moved: the destination
  Tier from_tier = Tier::kUnspecified;    // moved
  uint64_t count = 0;  // cleared: removed blocks; lost: lost events; snapshot: blocks
};

struct WatchOptions {
  bool snapshot = false;      // first every stored block, then new events
  uint64_t namespace_id = 0;  // 0 = every namespace the caller may see
};

// A running event stream; destroying it cancels the stream and waits for its thread.
class EventWatch {
 public:
  virtual ~EventWatch() = default;
  virtual void Cancel() = 0;
};

template <typename T>
using Callback = std::function<void(absl::StatusOr<T>)>;

// Wider than the house's 15 public methods on purpose: it is the engine's one view of the
// contract, one method (in its three forms) per RPC, so that an engine needs nothing else; for the
// same reason its implementation (client.cc, near 1,000 lines) is one file of RPC plumbing.
class Client {
 public:
  // Connects and says Hello. For a Unix socket, Unavailable at once when nothing listens at the
  // path (the message names the path and the system's reason: no such file, connection refused,
  // permission denied) and InvalidArgument when the path is empty or too long for a socket;
  // Unavailable when no daemon answers Hello within connect_timeout (the message names the
  // socket or target); FailedPrecondition when the API versions do not overlap. Blocks until
  // Hello is answered or connect_timeout has passed.
  static absl::StatusOr<std::unique_ptr<Client>> Connect(const ClientOptions& options = {});
  virtual ~Client() = default;

  // What Hello returned at Connect.
  virtual const ServerInfo& server() const = 0;
  // Says Hello again (e.g. to see `draining` or a new incarnation).
  virtual absl::StatusOr<ServerInfo> Hello() = 0;

  // Registers an engine; with ClientOptions.keep_alive its lease is renewed until Unregister or
  // the Client's destruction. InvalidArgument names the field (missing model, layout or pools);
  // the daemon's errors pass through (e.g. InvalidArgument for a pool outside pools.allowed_dirs).
  virtual absl::StatusOr<Engine> RegisterEngine(const EngineOptions& options) = 0;
  virtual absl::Status Unregister(const std::string& engine_id) = 0;
  virtual absl::Status KeepAlive(const std::string& engine_id) = 0;

  // The cache. Items beyond ServerInfo.max_items_per_request are split into several calls and the
  // results joined (a Lookup stops at the first call that misses).
  virtual absl::StatusOr<LookupResult> Lookup(const std::string& engine_id,
                                              const std::vector<std::string>& block_hashes,
                                              absl::Duration pin_ttl = absl::ZeroDuration()) = 0;
  virtual absl::StatusOr<OffloadResult> Offload(const std::string& engine_id,
                                                const std::vector<PageRef>& pages,
                                                const OffloadOptions& options = {}) = 0;
  // continue_after_miss false: the first item that fails ends the onboard (later ones kSkipped).
  virtual absl::StatusOr<OnboardResult> Onboard(const std::string& engine_id,
                                                const std::vector<PageRef>& pages,
                                                bool continue_after_miss = false) = 0;

  // Tool calls.
  virtual absl::StatusOr<ParkResult> Park(const std::string& engine_id,
                                          const std::string& request_id,
                                          const std::vector<uint32_t>& page_indices,
                                          const ParkOptions& options = {}) = 0;
  virtual absl::StatusOr<ResumeResult> Resume(const std::string& engine_id,
                                              const std::string& request_id,
                                              const std::vector<uint32_t>& page_indices,
                                              uint32_t first_page = 0,
                                              bool keep_parked = false) = 0;
  virtual absl::StatusOr<ReleaseResult> Release(const std::string& engine_id,
                                                const std::vector<std::string>& request_ids) = 0;

  virtual absl::StatusOr<PinResult> Pin(const std::string& engine_id,
                                        const std::vector<std::string>& block_hashes,
                                        absl::Duration ttl = absl::ZeroDuration()) = 0;
  virtual absl::StatusOr<PinResult> Unpin(const std::string& engine_id,
                                          const std::vector<std::string>& block_hashes) = 0;

  virtual absl::StatusOr<Stats> GetStats(bool include_namespaces = false) = 0;

  // The same calls with a callback (run once, on a library thread, with the result).
  virtual void LookupAsync(const std::string& engine_id, std::vector<std::string> block_hashes,
                           absl::Duration pin_ttl, Callback<LookupResult> done) = 0;
  virtual void OffloadAsync(const std::string& engine_id, std::vector<PageRef> pages,
                            const OffloadOptions& options, Callback<OffloadResult> done) = 0;
  virtual void OnboardAsync(const std::string& engine_id, std::vector<PageRef> pages,
                            bool continue_after_miss, Callback<OnboardResult> done) = 0;
  virtual void ParkAsync(const std::string& engine_id, const std::string& request_id,
                         std::vector<uint32_t> page_indices, const ParkOptions& options,
                         Callback<ParkResult> done) = 0;
  virtual void ResumeAsync(const std::string& engine_id, const std::string& request_id,
                           std::vector<uint32_t> page_indices, uint32_t first_page,
                           bool keep_parked, Callback<ResumeResult> done) = 0;

  // And with a future.
  std::future<absl::StatusOr<LookupResult>> LookupFuture(const std::string& engine_id,
                                                         std::vector<std::string> block_hashes,
                                                         absl::Duration pin_ttl = {});
  std::future<absl::StatusOr<OffloadResult>> OffloadFuture(const std::string& engine_id,
                                                           std::vector<PageRef> pages,
                                                           const OffloadOptions& options = {});
  std::future<absl::StatusOr<OnboardResult>> OnboardFuture(const std::string& engine_id,
                                                           std::vector<PageRef> pages,
                                                           bool continue_after_miss = false);
  std::future<absl::StatusOr<ParkResult>> ParkFuture(const std::string& engine_id,
                                                     const std::string& request_id,
                                                     std::vector<uint32_t> page_indices,
                                                     const ParkOptions& options = {});
  std::future<absl::StatusOr<ResumeResult>> ResumeFuture(const std::string& engine_id,
                                                         const std::string& request_id,
                                                         std::vector<uint32_t> page_indices,
                                                         uint32_t first_page = 0,
                                                         bool keep_parked = false);

  // Follows the daemon's events: `on_event` for each event in order, then `on_done` once with the
  // stream's end (Cancelled after Cancel). Both run on the watch's own thread.
  virtual absl::StatusOr<std::unique_ptr<EventWatch>> WatchEvents(
      const WatchOptions& options, std::function<void(const Event&)> on_event,
      std::function<void(absl::Status)> on_done = nullptr) = 0;
};

}  // namespace kvtier

#endif  // KVTIER_CLIENT_INCLUDE_KVTIER_CLIENT_H_
