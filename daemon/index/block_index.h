// BlockIndex: the durable record of which cold blocks exist and where (disk blocks, and host blocks
// when the host tier is persistent), plus namespace records and small metadata. RocksDbBlockIndex
// is the implementation (column families "blocks", "namespaces", "meta"). The in-memory view of
// resident blocks lives in the store, not here. Thread-safe.
#ifndef KVTIER_DAEMON_INDEX_BLOCK_INDEX_H_
#define KVTIER_DAEMON_INDEX_BLOCK_INDEX_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "daemon/index/block_record.h"

namespace kvtier::index {

// When a write reaches stable storage.
enum class SyncPolicy : uint8_t {
  kNone = 0,    // never synced by the index (the OS decides); survives a process crash only
  kBatch = 1,   // Write() does not sync; the caller groups writes and calls Sync()
  kAlways = 2,  // every Write() is synced before it returns
};

// An atomic group of changes.
struct IndexBatch {
  std::vector<std::pair<BlockKey, BlockRecord>> puts;
  std::vector<BlockKey> deletes;
  bool empty() const { return puts.empty() && deletes.empty(); }
};

struct IndexStats {
  uint64_t writes = 0;      // Write() calls that succeeded
  uint64_t syncs = 0;       // WAL syncs (Sync() and kAlways writes)
  uint64_t puts = 0;
  uint64_t deletes = 0;
  uint64_t multiget_keys = 0;
  uint64_t decode_errors = 0;  // stored values that failed to decode
};

class BlockIndex {
 public:
  virtual ~BlockIndex() = default;

  // Applies `batch` atomically; syncs when the policy is kAlways. Internal / IOError-derived
  // statuses carry RocksDB's message. Blocks.
  virtual absl::Status Write(const IndexBatch& batch) = 0;

  // Makes every earlier Write() durable (WAL sync). Blocks.
  virtual absl::Status Sync() = 0;

  // Looks up many keys at once (RocksDB MultiGet). One entry per key, nullopt where absent. A
  // stored value that does not decode is reported as absent and counted in decode_errors, so one
  // bad entry cannot hide the others. Internal when RocksDB fails. Blocks.
  virtual absl::StatusOr<std::vector<std::optional<BlockRecord>>> MultiGet(
      absl::Span<const BlockKey> keys) = 0;

  // Calls `fn` for every block record in key order (recovery). Records that fail to decode are
  // skipped and counted; `fn` returning false stops the scan. Blocks.
  virtual absl::Status ForEachBlock(
      const std::function<bool(const BlockKey&, const BlockRecord&)>& fn) = 0;

  // Namespace records: opaque bytes owned by the store, keyed by id.
  virtual absl::Status PutNamespace(NamespaceId id, absl::string_view record) = 0;
  virtual absl::Status DeleteNamespace(NamespaceId id) = 0;
  virtual absl::Status ForEachNamespace(
      const std::function<void(NamespaceId, absl::string_view)>& fn) = 0;

  // Small metadata (format version, host arena incarnation...). Get returns nullopt when absent.
  virtual absl::Status PutMeta(absl::string_view key, absl::string_view value) = 0;
  virtual absl::StatusOr<std::optional<std::string>> GetMeta(absl::string_view key) = 0;

  virtual SyncPolicy sync_policy() const = 0;
  virtual IndexStats stats() const = 0;
};

struct RocksDbIndexOptions {
  std::string path;                 // a directory; created when missing
  SyncPolicy sync_policy = SyncPolicy::kBatch;
  uint64_t block_cache_bytes = 64ull << 20;
  bool create_if_missing = true;
};

// Opens (or creates) the index at options.path. FailedPrecondition when the directory holds an
// index of another format version; Internal with RocksDB's message when RocksDB refuses (a lock
// held by another process names the path). Blocks.
absl::StatusOr<std::unique_ptr<BlockIndex>> OpenRocksDbBlockIndex(
    const RocksDbIndexOptions& options);

}  // namespace kvtier::index

#endif  // KVTIER_DAEMON_INDEX_BLOCK_INDEX_H_
