// RadosObjectStore: the shared cluster tier's blocks as immutable RADOS objects (docs/CLUSTER.md).
// The only module that includes librados. Thread-safe: librados' cluster handle and io context
// are thread-safe, and counters are atomics.
#ifndef KVTIER_DAEMON_CLUSTER_RADOS_OBJECT_STORE_H_
#define KVTIER_DAEMON_CLUSTER_RADOS_OBJECT_STORE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "daemon/index/block_record.h"

namespace kvtier::cluster {

struct ClusterOptions {
  std::string conf_path;            // a ceph.conf; may be empty when mon_host is set
  std::string mon_host;             // overrides the conf's
  std::string keyring;              // path of the client's keyring
  std::string client_id = "admin";  // client.<id>
  std::string pool;
  // Bounds on every librados call, so that none blocks forever on an unreachable cluster.
  absl::Duration osd_op_timeout = absl::Seconds(10);
  absl::Duration mon_op_timeout = absl::Seconds(10);
  absl::Duration mount_timeout = absl::Seconds(10);
  // How long the client waits on a monitor or OSD session before it reconnects; kept below the
  // op timeouts (a client whose objecter timeout exceeds them never recovers after an OSD
  // restart).
  absl::Duration objecter_timeout = absl::Seconds(2);
  // The largest object Get reads; larger objects are misses (verify failures).
  uint32_t max_block_bytes = 4 << 20;
};

struct BlockKey {
  index::NamespaceId ns = 0;
  index::BlockHash hash{};
};

// What the writer records next to a block (in its kvtier.id xattr, docs/CLUSTER.md).
struct BlockAttrs {
  uint32_t codec = 0;
  uint64_t layout_fingerprint = 0;
  uint32_t payload_checksum = 0;
  std::string writer_node;
  int64_t created_unix_micros = 0;
};

// One block of a PutMany; `block` is borrowed for the call.
struct PutRequest {
  BlockKey key;
  absl::Span<const uint8_t> block;
  BlockAttrs attrs;
};

struct ObjectInfo {
  std::string name;
  uint64_t size = 0;
  int64_t mtime_unix = 0;  // RADOS mtime: the write time (blocks are immutable)
};

// A block's object as the sweeper lists it (ListBlocks).
struct BlockObject {
  std::string rados_ns;
  std::string name;
  uint64_t size = 0;
  int64_t last_use_unix_micros = 0;  // the last use (Touch), else the write
  bool use_recorded = false;         // kvtier.read is set (else the mtime stood in: never used)
};

struct PoolUsage {
  uint64_t bytes_used = 0;
  uint64_t objects = 0;
};

// Monotonic counters; the daemon turns them into metrics.
struct ClusterCounters {
  std::atomic<uint64_t> puts{0}, put_already_exists{0}, gets{0}, get_hits{0}, get_misses{0},
      verify_failures{0}, errors{0}, timeouts{0};
  // Writes whose block librados still held osd_op_timeout + objecter_timeout after the op ended
  // (RadosObjectStore::Put returns anyway).
  std::atomic<uint64_t> writes_unreleased{0};
  // Reads librados holds now (a gauge: counted when submitted, uncounted by the read's completion
  // callback on librados' thread) and the most it held at once since the store connected.
  std::atomic<uint64_t> reads_in_flight{0}, reads_in_flight_peak{0};
};

// The verified bytes of a block read by Get, in the buffer librados received them into (no
// copy). Move-only; empty when default-constructed.
class ObjectBytes {
 public:
  ObjectBytes();
  ~ObjectBytes();
  ObjectBytes(ObjectBytes&& other) noexcept;
  ObjectBytes& operator=(ObjectBytes&& other) noexcept;
  ObjectBytes(const ObjectBytes&) = delete;
  ObjectBytes& operator=(const ObjectBytes&) = delete;

  absl::Span<const uint8_t> bytes() const { return bytes_; }
  size_t size() const { return bytes_.size(); }
  std::vector<uint8_t> ToVector() const { return {bytes_.begin(), bytes_.end()}; }

 private:
  friend class RadosObjectStore;
  struct Buffer;  // librados' buffer list, which the header does not include
  std::unique_ptr<Buffer> buffer_;
  absl::Span<const uint8_t> bytes_;
};

// What GetWindowed hands over per key as its read answers: the key's index in `keys` and its
// verified bytes (ownership passes), or nullopt for a miss. Returns false to stop: no read starts
// after it; those already in flight are still awaited and delivered.
using GetResultFn = absl::FunctionRef<bool(size_t index, std::optional<ObjectBytes> bytes)>;

// The object name of a block: 16 lower-hex digits of the namespace id, '.', 64 of the hash.
std::string ObjectName(const BlockKey& key);
// The key a block's object name stands for; nullopt for any other name.
std::optional<BlockKey> ParseObjectName(absl::string_view name);

class RadosObjectStore {
 public:
  // Connects (bounded by mount_timeout) and opens the pool. Unavailable when the cluster cannot be
  // reached, NotFound when the pool does not exist.
  static absl::StatusOr<std::unique_ptr<RadosObjectStore>> Connect(const ClusterOptions& options);
  ~RadosObjectStore();
  RadosObjectStore(const RadosObjectStore&) = delete;
  RadosObjectStore& operator=(const RadosObjectStore&) = delete;

  // One compound op: exclusive create + write_full + one xattr (kvtier.id: the block's identity
  // and `attrs`). AlreadyExists when the object exists
  // (a block written twice is one object). ResourceExhausted when the pool is full or over quota.
  absl::Status Put(const std::string& rados_ns, const BlockKey& key,
                   absl::Span<const uint8_t> block, const BlockAttrs& attrs);

  // Put of every request at once: all in flight together, issued and awaited by the calling
  // thread (no thread per block). Per request the status Put would return; an op the cluster
  // does not answer within osd_op_timeout is DeadlineExceeded. Blocks until every request is
  // answered.
  std::vector<absl::Status> PutMany(const std::string& rados_ns,
                                    absl::Span<const PutRequest> requests);

  // Reads every key in parallel (GetWindowed with every read in flight at once); per key the
  // verified bytes or nullopt (a miss: absent, or failed verification, counted). An object larger
  // than `max_bytes` (0: options' max_block_bytes, and never above it) is a verification failure.
  // DeadlineExceeded when the deadline passed before all answered; Unavailable/other errors for
  // cluster failures.
  absl::StatusOr<std::vector<std::optional<ObjectBytes>>> Get(const std::string& rados_ns,
                                                              absl::Span<const BlockKey> keys,
                                                              absl::Time deadline,
                                                              uint64_t max_bytes = 0);

  // Reads the keys in their order, keeping up to `depth` reads in flight (0: all of them): as each
  // read answers, it is verified as Get verifies, handed to `on_result` on the calling thread,
  // and the next key's read starts. Each key is delivered at most once, and every key is
  // delivered unless the call stops early: OK when every key was delivered or `on_result` stopped
  // it; DeadlineExceeded when the deadline passed first (the reads in flight are cancelled and
  // not delivered); on a cluster failure (Unavailable, ...) no further read starts, those in
  // flight are still delivered, and the first failure is returned (the failed keys are not
  // delivered). `on_result` is borrowed for the call. Blocks until no read of the call is in
  // flight. A key repeated in `keys` is read once per occurrence.
  absl::Status GetWindowed(const std::string& rados_ns, absl::Span<const BlockKey> keys,
                           size_t depth, absl::Time deadline, GetResultFn on_result,
                           uint64_t max_bytes = 0);

  // Per key whether the object exists; same deadline semantics.
  absl::StatusOr<std::vector<bool>> Exists(const std::string& rados_ns,
                                           absl::Span<const BlockKey> keys, absl::Time deadline);

  // A small object of the pool's own (not a block): creates `name` in `rados_ns` holding
  // `value` unless it exists, and returns what it holds (`value`, or what another client wrote
  // first). For facts the first node of a fleet decides, such as the fleet's key fingerprint.
  absl::StatusOr<std::string> ClaimValue(const std::string& rados_ns, const std::string& name,
                                         const std::string& value);

  // Records a use of the block now (xattr kvtier.read), which keeps it from the sweeper's least
  // recently used end. NotFound when the object does not exist (it is not created).
  absl::Status Touch(const std::string& rados_ns, const BlockKey& key, int64_t unix_micros);

  // Every block object of the pool, all RADOS namespaces (the pool's own objects, such as the
  // lease and kvtier.fleet, are left out), at most `max`, with size and last use.
  absl::StatusOr<std::vector<BlockObject>> ListBlocks(size_t max);

  // Removes the object unless it was used after it was listed (its kvtier.read changed, or was
  // set where the listing found none):
  // FailedPrecondition then (it stays), NotFound when it is gone already. One operation, so a
  // read that touches the block and the removal never both win.
  absl::Status RemoveUnlessUsed(const BlockObject& object);

  // NotFound when absent.
  absl::Status Remove(const std::string& rados_ns, const BlockKey& key);

  absl::StatusOr<std::vector<ObjectInfo>> List(const std::string& rados_ns);
  absl::StatusOr<PoolUsage> Usage();

  // The eviction lease: an exclusive cls_lock on object "kvtier.evict-lease" in `rados_ns`, held
  // for `duration` (renew by calling again with the same cookie). Busy -> FailedPrecondition.
  absl::Status AcquireLease(const std::string& rados_ns, const std::string& cookie,
                            absl::Duration duration);
  absl::Status ReleaseLease(const std::string& rados_ns, const std::string& cookie);

  // Raw access for tests and repair: write `bytes` over an object, bypassing Put's checks.
  absl::Status WriteRawForTest(const std::string& rados_ns, const std::string& name,
                               absl::Span<const uint8_t> bytes);

  const ClusterCounters& counters() const { return counters_; }

 private:
  struct Handles;
  explicit RadosObjectStore(std::unique_ptr<Handles> h, ClusterOptions options);
  absl::Status Error(int r, const std::string& what);
  // How long a write waits for librados to let its block go after the op ended.
  absl::Duration ReleaseWait() const { return options_.osd_op_timeout + options_.objecter_timeout; }
  // Counts a Put's result `r` (0 or -errno) and turns it into Put's status.
  absl::Status PutStatus(int r, const std::string& rados_ns, const std::string& name);

  std::unique_ptr<Handles> h_;
  ClusterOptions options_;
  ClusterCounters counters_;
};

}  // namespace kvtier::cluster

#endif  // KVTIER_DAEMON_CLUSTER_RADOS_OBJECT_STORE_H_
