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
#include "daemon/index/state_drive.h"

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
  uint64_t decode_errors = 0;   // stored values that failed to decode
  uint64_t refused_writes = 0;  // writes refused while the index was not writable
};

// Whether the index takes writes now, and why not.
struct IndexHealth {
  DriveState drive = DriveState::kWritable;  // the directory and the file system under it
  bool read_only = false;  // opened read-only (the drive was short at open) and not reopened yet
  bool stalled = false;    // a write inside RocksDB waits for space right now
  uint64_t free_bytes = 0;
  uint64_t min_free_bytes = 0;
  std::string reason;  // empty when writable
  bool writable() const { return drive == DriveState::kWritable && !read_only; }
  // OK when writable; ResourceExhausted when short of space (or read-only for that reason),
  // FailedPrecondition when the directory is lost, with the reason.
  absl::Status ToStatus() const;
};

class BlockIndex {
 public:
  virtual ~BlockIndex() = default;

  // Applies `batch` atomically; syncs when the policy is kAlways. Refused without touching
  // RocksDB while the index is not writable (Health(): ResourceExhausted when its drive is short
  // of space or it is open read-only, FailedPrecondition when its directory is gone). Other errors
  // carry RocksDB's message and the path: DataLoss on corruption, Internal otherwise. An empty
  // batch succeeds without touching the disk. Blocks; a write that meets a full drive inside
  // RocksDB waits for space (see state_drive.h).
  virtual absl::Status Write(const IndexBatch& batch) = 0;

  // Makes every earlier Write() (and namespace / meta change) durable: a WAL sync, whatever the
  // policy, then a check that the directory is still there and writable (FailedPrecondition
  // otherwise: the synced log is no longer where a restart looks). Same error codes as Write().
  // Blocks.
  virtual absl::Status Sync() = 0;

  // Looks up many keys at once (RocksDB MultiGet). One entry per key, nullopt where absent. A
  // stored value that does not decode is reported as absent and counted in decode_errors, so one
  // bad entry cannot hide the others. Internal when RocksDB fails. Blocks.
  virtual absl::StatusOr<std::vector<std::optional<BlockRecord>>> MultiGet(
      absl::Span<const BlockKey> keys) = 0;

  // Calls `fn` for every block record in key order (recovery), on a consistent snapshot taken at
  // the call: writes made meanwhile (by `fn` too, which may call this index) are not seen. `fn`
  // runs under the index's lock (shared): it must not wait for a lock that another thread holds
  // while it calls the index. Records
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

  // Whether writes are taken now (reads always are). Reads the drive again at most every 100 ms;
  // an index opened read-only because its drive was short is reopened for writing here once the
  // drive has room again (that call takes a few milliseconds). Thread-safe; does not block on
  // writes.
  virtual IndexHealth Health() = 0;

  virtual SyncPolicy sync_policy() const = 0;
  virtual IndexStats stats() const = 0;
};

// The format version of the index, stored in the meta column family when the index is created.
inline constexpr char kIndexFormatMetaKey[] = "kvtier.index.format";
// Format 2: 64-bit namespace ids (40-byte block keys). Format 1 (32-bit ids) is migrated at open.
inline constexpr char kIndexFormatVersion[] = "2";
inline constexpr char kLegacyIndexFormatVersion[] = "1";

struct RocksDbIndexOptions {
  std::string path;  // a directory; created (mode 0700) when missing
  SyncPolicy sync_policy = SyncPolicy::kBatch;
  uint64_t block_cache_bytes = 64ull << 20;  // shared by the column families; 0: no cache
  bool create_if_missing = true;
  // Writes are refused while the drive holding the index has less than this free (see
  // state_drive.h); a reserve of reserve_bytes is kept preallocated in the directory.
  uint64_t min_free_bytes = 256ull << 20;
  uint64_t reserve_bytes = 64ull << 20;
  // Format 1 kept 32-bit namespace ids. Opening such an index migrates it to format 2 (in place,
  // resumable after a crash), asking this function for the new id of each namespace: its old id
  // and its stored record. Null: the old ids are kept.
  std::function<NamespaceId(NamespaceId legacy_id, absl::string_view record)> migrate_namespace_id;
  // Free bytes of the drive (tests); statvfs when empty.
  std::function<uint64_t()> free_bytes;
};

// Opens (or creates, with parent directories) the index at options.path. An existing index whose
// drive has less than min_free_bytes free is opened read-only (no write of any kind; Health() says
// so) and reopened for writing once space returns. Returns
//  - NotFound when there is no index and create_if_missing is false;
//  - ResourceExhausted when there is no index and its drive is too full to create one, or a
//    format-1 index needs migrating and its drive is short;
//  - FailedPrecondition when the directory holds an index of another format version (both named),
//    or a RocksDB database that is not a kvtier index;
//  - Unavailable when another process (or another open in this one) holds the index's lock: the
//    message says another kvtierd holds the index at PATH;
//  - Internal (DataLoss on corruption) with RocksDB's message and the path when RocksDB refuses.
// The index is closed, and the WAL synced unless the policy is kNone, when the returned object is
// destroyed. Blocks.
absl::StatusOr<std::unique_ptr<BlockIndex>> OpenRocksDbBlockIndex(
    const RocksDbIndexOptions& options);

// What RepairRocksDbBlockIndex did.
struct IndexRepair {
  bool repaired = false;  // RocksDB's repair salvaged the index and it opens again
  std::string moved_to;   // else the damaged directory was moved here; the next open starts empty
  std::string detail;     // RocksDB's repair status, or why the repaired index did not open
};
// For an index that does not open (a truncated CURRENT or MANIFEST, damaged tables): RocksDB's
// RepairDB rebuilds the manifest from the tables and logs that remain (records in lost files are
// gone; the store drops entries that no longer match a block when it recovers), then the index
// must open as OpenRocksDbBlockIndex would. When it still does not, the directory is renamed to
// "<path>.damaged-<unix seconds>", so that the next open creates an empty index (the disk tier's
// blocks are then forgotten and their space reused). Unavailable when the index is in use;
// NotFound when there is none; FailedPrecondition when it cannot be moved. Blocks.
absl::StatusOr<IndexRepair> RepairRocksDbBlockIndex(const RocksDbIndexOptions& options);

}  // namespace kvtier::index

#endif  // KVTIER_DAEMON_INDEX_BLOCK_INDEX_H_
