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

// An atomic group of changes. The deletes apply first, then the puts: a key both deleted and put
// ends up put; of several puts of one key the last wins.
struct IndexBatch {
  std::vector<std::pair<BlockKey, BlockRecord>> puts;
  std::vector<BlockKey> deletes;
  bool empty() const { return puts.empty() && deletes.empty(); }
};

struct IndexStats {
  uint64_t writes = 0;  // Write() calls that succeeded
  uint64_t syncs = 0;   // WAL syncs (Sync() and kAlways writes)
  uint64_t puts = 0;
  uint64_t deletes = 0;
  uint64_t multiget_keys = 0;
  uint64_t decode_errors = 0;  // stored values that failed to decode
};

class BlockIndex {
 public:
  virtual ~BlockIndex() = default;

  // Applies `batch` atomically; syncs when the policy is kAlways. Errors carry RocksDB's message
  // and the path: ResourceExhausted when the disk is full, DataLoss on corruption, Internal
  // otherwise. An empty batch succeeds without touching the disk. Blocks.
  virtual absl::Status Write(const IndexBatch& batch) = 0;

  // Makes every earlier Write() (and namespace / meta change) durable: a WAL sync, whatever the
  // policy. Same error codes as Write(). Blocks.
  virtual absl::Status Sync() = 0;

  // Looks up many keys at once (RocksDB MultiGet). One entry per key, nullopt where absent. A
  // stored value that does not decode is reported as absent and counted in decode_errors, so one
  // bad entry cannot hide the others. Internal when RocksDB fails. Blocks.
  virtual absl::StatusOr<std::vector<std::optional<BlockRecord>>> MultiGet(
      absl::Span<const BlockKey> keys) = 0;

  // Calls `fn` for every block record in key order (recovery), on a consistent snapshot taken at
  // the call: writes made meanwhile (by `fn` too, which may call this index) are not seen. Records
  // that fail to decode are skipped and counted; `fn` returning false stops the scan. Internal
  // when RocksDB fails. Blocks.
  virtual absl::Status ForEachBlock(
      const std::function<bool(const BlockKey&, const BlockRecord&)>& fn) = 0;

  // Namespace records: opaque bytes owned by the store, keyed by id; written with the sync policy
  // of Write(). ForEachNamespace visits them in id order on a snapshot; an undecodable id is
  // skipped and counted in decode_errors. RocksDB errors as in Write(). Blocks.
  virtual absl::Status PutNamespace(NamespaceId id, absl::string_view record) = 0;
  virtual absl::Status DeleteNamespace(NamespaceId id) = 0;
  virtual absl::Status ForEachNamespace(
      const std::function<void(NamespaceId, absl::string_view)>& fn) = 0;

  // Small metadata (host arena incarnation...), written with the sync policy of Write(). Get
  // returns nullopt when absent. The index keeps its format version under kIndexFormatMetaKey:
  // PutMeta of that key is InvalidArgument. RocksDB errors as in Write(). Blocks.
  virtual absl::Status PutMeta(absl::string_view key, absl::string_view value) = 0;
  virtual absl::StatusOr<std::optional<std::string>> GetMeta(absl::string_view key) = 0;

  virtual SyncPolicy sync_policy() const = 0;
  virtual IndexStats stats() const = 0;
};

// The format version of the index, stored in the meta column family when the index is created.
inline constexpr char kIndexFormatMetaKey[] = "kvtier.index.format";
inline constexpr char kIndexFormatVersion[] = "1";

struct RocksDbIndexOptions {
  std::string path;  // a directory; created when missing
  SyncPolicy sync_policy = SyncPolicy::kBatch;
  uint64_t block_cache_bytes = 64ull << 20;  // shared by the column families; 0: no cache
  bool create_if_missing = true;
};

// Opens (or creates, with parent directories) the index at options.path. Returns
//  - NotFound when there is no index and create_if_missing is false;
//  - FailedPrecondition when the directory holds an index of another format version (both named),
//    or a RocksDB database that is not a kvtier index;
//  - Unavailable when another process (or another open in this one) holds the index's lock: the
//    message says another kvtierd holds the index at PATH;
//  - Internal (DataLoss on corruption) with RocksDB's message and the path when RocksDB refuses.
// The index is closed, and the WAL synced unless the policy is kNone, when the returned object is
// destroyed. Blocks.
absl::StatusOr<std::unique_ptr<BlockIndex>> OpenRocksDbBlockIndex(
    const RocksDbIndexOptions& options);

}  // namespace kvtier::index

#endif  // KVTIER_DAEMON_INDEX_BLOCK_INDEX_H_
