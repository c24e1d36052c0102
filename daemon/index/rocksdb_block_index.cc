// RocksDbBlockIndex: the BlockIndex on RocksDB (column families "blocks", "namespaces", "meta").
// OpenRocksDbBlockIndex is the only entry point; the class lives in this file. Thread-safe: RocksDB
// is, and the only other state is atomic counters. Over 800 lines because the class is one
// RocksDB client: options, open and repair, the batched reads and writes, and recovery's scans
// share the column-family handles and the write options, and nothing outside it includes RocksDB.
//
// Design and tuning, for ~1-100M records of 40-byte keys and 62-byte values (~10 GB at most):
//  - Reads are point lookups, batched (MultiGet of a prompt's block chain), many of them misses:
//    full (not partitioned) Bloom filters of 10 bits/key on whole keys (~1% false positives, and
//    the batched MultiGet path needs full filters), a hash index inside data blocks, and a bloom on
//    the memtable. No optimize_filters_for_hits: misses are the common case and must stay cheap.
//  - Memory is bounded by one LRU cache of block_cache_bytes shared by all column families; index
//    and filter blocks live in it (high-priority pool, L0 pinned) instead of beside it, so a large
//    index cannot grow without limit. Scans (recovery) bypass the cache and read ahead 2 MiB.
//  - No compression: the hash bytes (64 of ~100 per record) are random, shared key prefixes are
//    already delta-encoded by the block format, and the daemon's CPU is better spent elsewhere.
//  - Level compaction with dynamic level sizes (space amplification ~1.1), 64 MiB memtables and
//    files, two background jobs, 512 open files (enough for ~30 GB of tables).
//  - WAL always on. kAlways syncs every write (group commit amortises concurrent writers); kBatch
//    leaves syncing to Sync(). max_total_wal_size makes the rarely written "namespaces" and "meta"
//    column families flush, so that they do not pin old WAL files. Shutdown syncs the WAL (unless
//    kNone) and does not skip memtable flushes (avoid_flush_during_shutdown=false).
//  - The format version sits in "meta" under kIndexFormatMetaKey, written (synced) at creation;
//    an index without it is adopted only when it holds no record (creation was interrupted).
//    Format 1 (4-byte namespace ids) is migrated to format 2 at open: block keys first, in
//    batches that each delete old keys and put new ones, then the namespace keys, then the
//    version. Old keys are recognised by their length, so a migration cut short by a crash
//    resumes where it stopped (the id mapping comes from the namespace keys, moved last).
//  - A full drive must never reach RocksDB: Debian's build aborts on the next use of a writer that
//    saw a failed write (even Close and Resume). So the index refuses writes itself while its
//    StateDrive is short of space, RocksDB writes through a file system whose writes wait for
//    space instead of failing (space_waiting_file_system.h), preallocation is off
//    (allow_fallocate: a whole log's preallocation fails outright on a nearly full drive), and
//    recovery does not flush the log into a table (avoid_flush_during_recovery), so an existing
//    index opens with a few kilobytes free. With less than min_free at open it opens read-only,
//    which writes nothing, and Health() reopens it for writing once space has returned; every
//    operation holds mu_ shared, the reopen holds it exclusively.
//  - Close skips the final log sync while the drive is short, and when a write is still waiting
//    for space the database is left open (the process is exiting): closing would wait for that
//    write, or abort. RocksDB recovers a database that was not closed like one after a crash.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/errno_text.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "daemon/index/block_index.h"
#include "daemon/index/block_record.h"
#include "daemon/index/space_waiting_file_system.h"
#include "daemon/index/state_drive.h"
#include "rocksdb/cache.h"
#include "rocksdb/db.h"
#include "rocksdb/env.h"
#include "rocksdb/filter_policy.h"
#include "rocksdb/iterator.h"
#include "rocksdb/options.h"
#include "rocksdb/slice.h"
#include "rocksdb/snapshot.h"
#include "rocksdb/status.h"
#include "rocksdb/table.h"
#include "rocksdb/write_batch.h"

namespace kvtier::index {
namespace {

constexpr char kBlocksFamily[] = "blocks";
constexpr char kNamespacesFamily[] = "namespaces";
constexpr char kMetaFamily[] = "meta";
constexpr std::array<const char*, 3> kIndexFamilies = {kBlocksFamily, kNamespacesFamily,
                                                       kMetaFamily};

constexpr size_t kScanReadaheadBytes = 2 << 20;
constexpr size_t kMigrationBatch = 4096;
// Creating an index writes its manifest, options and a first log: a few kilobytes. Below this, a
// new index is not attempted (RocksDB would meet the full drive while it opens).
constexpr uint64_t kCreateMinFreeBytes = 4ull << 20;
constexpr char kOwnerLockName[] = "kvtier-owner.lock";

absl::string_view ToView(const rocksdb::Slice& slice) {
  return absl::string_view(slice.data(), slice.size());
}

rocksdb::Slice ToSlice(absl::string_view view) { return rocksdb::Slice(view.data(), view.size()); }

// Converts a failed RocksDB status: DataLoss for corruption, ResourceExhausted for a full disk,
// Internal otherwise; the message names the operation, the path and RocksDB's own message.
absl::Status FromRocksDb(const rocksdb::Status& status, absl::string_view operation,
                         absl::string_view path) {
  std::string message = absl::StrCat("RocksDB ", operation, " failed for the index at ", path, ": ",
                                     status.ToString());
  if (status.IsCorruption()) return absl::DataLossError(message);
  if (status.IsNoSpace()) return absl::ResourceExhaustedError(message);
  return absl::InternalError(message);
}

// RocksDB reports a LOCK file held by another process ("IO error: While lock file: PATH/LOCK:
// Resource temporarily unavailable") or by another open in this process ("IO error: lock hold by
// current process, ...: PATH/LOCK: No locks available"). The path itself may contain "lock".
bool IsLockHeld(const rocksdb::Status& status) {
  if (!status.IsIOError()) return false;
  const std::string text = status.ToString();
  return absl::StrContains(text, "While lock file: ") ||
         absl::StrContains(text, "lock hold by current process");
}

struct Tuning {
  rocksdb::DBOptions db;
  rocksdb::ColumnFamilyOptions blocks;  // the large, point-looked-up family
  rocksdb::ColumnFamilyOptions small;   // "namespaces", "meta" and "default"
};

Tuning MakeTuning(const RocksDbIndexOptions& options) {
  Tuning t;
  rocksdb::DBOptions& db = t.db;
  db.create_if_missing = options.create_if_missing;
  db.max_background_jobs = 2;
  db.max_open_files = 512;
  db.avoid_flush_during_shutdown = false;
  db.max_total_wal_size = 128ull << 20;
  db.wal_recovery_mode = rocksdb::WALRecoveryMode::kPointInTimeRecovery;
  db.bytes_per_sync = 1 << 20;
  db.keep_log_file_num = 4;
  db.max_log_file_size = 8 << 20;
  db.allow_fallocate = false;
  db.avoid_flush_during_recovery = true;

  rocksdb::BlockBasedTableOptions table;
  if (options.block_cache_bytes == 0) {
    table.no_block_cache = true;
  } else {
    rocksdb::LRUCacheOptions cache;
    cache.capacity = static_cast<size_t>(options.block_cache_bytes);
    cache.high_pri_pool_ratio = 0.5;
    table.block_cache = rocksdb::NewLRUCache(cache);
    table.cache_index_and_filter_blocks = true;
    table.cache_index_and_filter_blocks_with_high_priority = true;
    table.pin_l0_filter_and_index_blocks_in_cache = true;
  }
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  table.whole_key_filtering = true;
  table.optimize_filters_for_memory = true;
  table.data_block_index_type = rocksdb::BlockBasedTableOptions::kDataBlockBinaryAndHash;
  table.data_block_hash_table_util_ratio = 0.75;
  std::shared_ptr<rocksdb::TableFactory> table_factory(rocksdb::NewBlockBasedTableFactory(table));

  rocksdb::ColumnFamilyOptions& blocks = t.blocks;
  blocks.table_factory = table_factory;
  blocks.compaction_style = rocksdb::kCompactionStyleLevel;
  blocks.level_compaction_dynamic_level_bytes = true;
  blocks.write_buffer_size = 64 << 20;
  blocks.max_write_buffer_number = 2;
  blocks.target_file_size_base = 64 << 20;
  blocks.max_bytes_for_level_base = 256 << 20;
  blocks.compression = rocksdb::kNoCompression;
  blocks.bottommost_compression = rocksdb::kNoCompression;
  blocks.memtable_whole_key_filtering = true;
  blocks.memtable_prefix_bloom_size_ratio = 0.02;

  rocksdb::ColumnFamilyOptions& small = t.small;
  small.table_factory = table_factory;
  small.compaction_style = rocksdb::kCompactionStyleLevel;
  small.write_buffer_size = 4 << 20;
  small.compression = rocksdb::kNoCompression;
  small.bottommost_compression = rocksdb::kNoCompression;
  return t;
}

// The open database: RocksDB, its family handles, and whether it was opened read-only.
struct OpenDb {
  std::unique_ptr<rocksdb::DB> db;
  // Every family the database holds (RocksDB opens them all); released before db is closed.
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::ColumnFamilyHandle* blocks = nullptr;      // borrowed from handles
  rocksdb::ColumnFamilyHandle* namespaces = nullptr;  // borrowed from handles
  rocksdb::ColumnFamilyHandle* meta = nullptr;        // borrowed from handles
  bool read_only = false;

  // Releases the handles and closes the database; errors are logged.
  void Close(absl::string_view path) {
    if (db == nullptr) return;
    for (rocksdb::ColumnFamilyHandle* handle : handles) {
      rocksdb::Status status = db->DestroyColumnFamilyHandle(handle);
      if (!status.ok()) {
        KVTIER_LOG(kError, "index at ", path,
                   ": releasing column family failed: ", status.ToString());
      }
    }
    handles.clear();
    rocksdb::Status status = db->Close();
    if (!status.ok()) KVTIER_LOG(kError, "index at ", path, ": close failed: ", status.ToString());
    db.reset();
  }
};

// Opens the database at `path` with the index's families (creating them when `create`).
absl::StatusOr<OpenDb> OpenDatabase(const std::string& path, const Tuning& tuning, bool create,
                                    bool read_only) {
  std::vector<std::string> families;
  if (!create) {
    rocksdb::Status status = rocksdb::DB::ListColumnFamilies(tuning.db, path, &families);
    if (!status.ok()) return FromRocksDb(status, "listing the column families", path);
    for (const char* family : kIndexFamilies) {
      if (std::find(families.begin(), families.end(), family) == families.end()) {
        return absl::FailedPreconditionError(
            absl::StrCat(path, " holds a RocksDB database without column family '", family,
                         "': not a kvtier index"));
      }
    }
  } else {
    families = {rocksdb::kDefaultColumnFamilyName, kBlocksFamily, kNamespacesFamily, kMetaFamily};
  }
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  for (const std::string& family : families) {
    descriptors.emplace_back(family, family == kBlocksFamily ? tuning.blocks : tuning.small);
  }
  rocksdb::DBOptions db_options = tuning.db;
  db_options.create_missing_column_families = create;
  rocksdb::DB* db = nullptr;
  OpenDb out;
  out.read_only = read_only;
  rocksdb::Status status =
      read_only ? rocksdb::DB::OpenForReadOnly(db_options, path, descriptors, &out.handles, &db)
                : rocksdb::DB::Open(db_options, path, descriptors, &out.handles, &db);
  if (!status.ok()) {
    if (IsLockHeld(status)) {
      return absl::UnavailableError(absl::StrCat("another kvtierd holds the index at ", path,
                                                 " (RocksDB: ", status.ToString(), ")"));
    }
    return FromRocksDb(status, read_only ? "read-only open" : "open", path);
  }
  out.db.reset(db);
  for (rocksdb::ColumnFamilyHandle* handle : out.handles) {
    if (handle->GetName() == kBlocksFamily) out.blocks = handle;
    if (handle->GetName() == kNamespacesFamily) out.namespaces = handle;
    if (handle->GetName() == kMetaFamily) out.meta = handle;
  }
  return out;
}

class RocksDbBlockIndex final : public BlockIndex {
 public:
  RocksDbBlockIndex(RocksDbIndexOptions options, std::unique_ptr<StateDrive> drive)
      : path_(options.path),
        options_(std::move(options)),
        sync_policy_(options_.sync_policy),
        drive_(std::move(drive)),
        fs_(NewSpaceWaitingFileSystem(drive_.get())),
        env_(rocksdb::NewCompositeEnv(fs_)),
        tuning_(MakeTuning(options_)) {
    write_options_.sync = sync_policy_ == SyncPolicy::kAlways;
    tuning_.db.env = env_.get();
  }

  RocksDbBlockIndex(const RocksDbBlockIndex&) = delete;
  RocksDbBlockIndex& operator=(const RocksDbBlockIndex&) = delete;

  ~RocksDbBlockIndex() override {
    absl::MutexLock lock(&mu_);
    absl::Cleanup unlock = [this] {
      if (lock_fd_ >= 0) close(lock_fd_);
    };
    if (db_.db == nullptr) return;
    if (drive_->stalled()) {
      // A write inside RocksDB waits for space: closing would wait for it (or, given up, abort).
      KVTIER_LOG(kError, "index at ", path_,
                 ": a write still waits for space on a full drive; the index is left unclosed "
                 "(its unsynced writes were never acknowledged as durable; the next start "
                 "recovers it from its log)");
      for (rocksdb::ColumnFamilyHandle*& handle : db_.handles) handle = nullptr;
      (void)db_.db.release();
      return;
    }
    const DriveCondition drive = drive_->Check(/*force=*/true);
    if (sync_policy_ != SyncPolicy::kNone && !db_.read_only && drive.state != DriveState::kShort) {
      rocksdb::Status status = db_.db->FlushWAL(/*sync=*/true);
      if (!status.ok()) {
        KVTIER_LOG(kError, "index at ", path_, ": WAL sync at close failed: ", status.ToString());
      }
    }
    db_.Close(path_);
  }

  // Opens the database (read-only when the drive is short and the index exists), then checks
  // its format, writing it into a new index and migrating a format-1 index.
  absl::Status Start(bool exists) {
    // RocksDB locks a database opened for writing only; this lock covers read-only opens too.
    const std::string lock_path = path_ + "/" + kOwnerLockName;
    lock_fd_ = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (lock_fd_ < 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot open ", lock_path, ": ", ErrnoText(errno)));
    }
    if (flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      if (err == EWOULDBLOCK) {
        return absl::UnavailableError(absl::StrCat("another kvtierd holds the index at ", path_,
                                                   " (", lock_path, " is locked)"));
      }
      return absl::FailedPreconditionError(
          absl::StrCat("cannot lock ", lock_path, ": ", ErrnoText(err)));
    }
    const DriveCondition drive = drive_->Check(/*force=*/true);
    if (drive.state == DriveState::kLost) return drive.ToStatus();
    const bool read_only = exists && drive.state != DriveState::kWritable;
    if (!exists && drive.free_bytes < kCreateMinFreeBytes) {
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot create the index at ", path_, ": its drive has ", drive.free_bytes,
                       " bytes free (at least ", kCreateMinFreeBytes, " are needed)"));
    }
    absl::MutexLock lock(&mu_);
    KVTIER_ASSIGN_OR_RETURN(db_, OpenDatabase(path_, tuning_, !exists, read_only));
    if (read_only) {
      KVTIER_LOG(kWarning, "index at ", path_, " opened read-only: ", drive.reason,
                 "; it is reopened for writing when space returns");
    }
    return CheckFormat();
  }

  absl::Status Write(const IndexBatch& batch) override {
    if (batch.empty()) {
      writes_.fetch_add(1, std::memory_order_relaxed);
      return absl::OkStatus();
    }
    rocksdb::WriteBatch write_batch;
    absl::ReaderMutexLock lock(&mu_);
    KVTIER_RETURN_IF_ERROR(WriteGate());
    for (const BlockKey& key : batch.deletes) {
      rocksdb::Status status = write_batch.Delete(db_.blocks, EncodeBlockKey(key));
      if (!status.ok()) return FromRocksDb(status, "batch delete", path_);
    }
    for (const auto& [key, record] : batch.puts) {
      rocksdb::Status status =
          write_batch.Put(db_.blocks, EncodeBlockKey(key), EncodeBlockRecord(record));
      if (!status.ok()) return FromRocksDb(status, "batch put", path_);
    }
    rocksdb::Status status = db_.db->Write(write_options_, &write_batch);
    if (!status.ok()) return FromRocksDb(status, "write", path_);
    if (write_options_.sync) KVTIER_RETURN_IF_ERROR(CheckStillThere());
    writes_.fetch_add(1, std::memory_order_relaxed);
    puts_.fetch_add(batch.puts.size(), std::memory_order_relaxed);
    deletes_.fetch_add(batch.deletes.size(), std::memory_order_relaxed);
    CountWriteSync();
    return absl::OkStatus();
  }

  absl::Status Sync() override {
    absl::ReaderMutexLock lock(&mu_);
    if (db_.read_only) return absl::OkStatus();  // nothing was written
    const DriveCondition drive = drive_->Check();
    if (drive.state == DriveState::kLost) return drive.ToStatus();
    rocksdb::Status status = db_.db->FlushWAL(/*sync=*/true);
    if (!status.ok()) return FromRocksDb(status, "WAL sync", path_);
    KVTIER_RETURN_IF_ERROR(CheckStillThere());
    syncs_.fetch_add(1, std::memory_order_relaxed);
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<std::optional<BlockRecord>>> MultiGet(
      absl::Span<const BlockKey> keys) override {
    const size_t n = keys.size();
    std::vector<std::optional<BlockRecord>> result(n);
    if (n == 0) return result;
    std::vector<std::string> encoded;
    encoded.reserve(n);
    std::vector<rocksdb::Slice> slices;
    slices.reserve(n);
    for (const BlockKey& key : keys) {
      encoded.push_back(EncodeBlockKey(key));
      slices.emplace_back(encoded.back());
    }
    std::vector<rocksdb::PinnableSlice> values(n);
    std::vector<rocksdb::Status> statuses(n);
    absl::ReaderMutexLock lock(&mu_);
    db_.db->MultiGet(rocksdb::ReadOptions(), db_.blocks, n, slices.data(), values.data(),
                     statuses.data());
    multiget_keys_.fetch_add(n, std::memory_order_relaxed);
    DecodeErrorSummary errors;
    for (size_t i = 0; i < n; ++i) {
      if (statuses[i].IsNotFound()) continue;
      if (!statuses[i].ok()) return FromRocksDb(statuses[i], "MultiGet", path_);
      absl::StatusOr<BlockRecord> record = DecodeBlockRecord(ToView(values[i]));
      if (!record.ok()) {
        errors.Add(keys[i], record.status());
        continue;
      }
      result[i] = *std::move(record);
    }
    errors.Report(*this, "MultiGet");
    return result;
  }

  absl::Status ForEachBlock(
      const std::function<bool(const BlockKey&, const BlockRecord&)>& fn) override {
    absl::ReaderMutexLock lock(&mu_);
    rocksdb::ManagedSnapshot snapshot(db_.db.get());
    std::unique_ptr<rocksdb::Iterator> it(db_.db->NewIterator(ScanOptions(snapshot), db_.blocks));
    DecodeErrorSummary errors;
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      absl::StatusOr<BlockKey> key = DecodeBlockKey(ToView(it->key()));
      if (!key.ok()) {
        errors.Add(std::nullopt, key.status());
        continue;
      }
      absl::StatusOr<BlockRecord> record = DecodeBlockRecord(ToView(it->value()));
      if (!record.ok()) {
        errors.Add(*key, record.status());
        continue;
      }
      if (!fn(*key, *record)) break;
    }
    errors.Report(*this, "block scan");
    if (!it->status().ok()) return FromRocksDb(it->status(), "block scan", path_);
    return absl::OkStatus();
  }

  absl::Status PutNamespace(NamespaceId id, absl::string_view record) override {
    absl::ReaderMutexLock lock(&mu_);
    KVTIER_RETURN_IF_ERROR(WriteGate());
    rocksdb::Status status =
        db_.db->Put(write_options_, db_.namespaces, EncodeNamespaceId(id), ToSlice(record));
    if (!status.ok()) return FromRocksDb(status, "namespace put", path_);
    CountWriteSync();
    return absl::OkStatus();
  }

  absl::Status DeleteNamespace(NamespaceId id) override {
    absl::ReaderMutexLock lock(&mu_);
    KVTIER_RETURN_IF_ERROR(WriteGate());
    rocksdb::Status status = db_.db->Delete(write_options_, db_.namespaces, EncodeNamespaceId(id));
    if (!status.ok()) return FromRocksDb(status, "namespace delete", path_);
    CountWriteSync();
    return absl::OkStatus();
  }

  absl::Status ForEachNamespace(
      const std::function<void(NamespaceId, absl::string_view)>& fn) override {
    absl::ReaderMutexLock lock(&mu_);
    rocksdb::ManagedSnapshot snapshot(db_.db.get());
    std::unique_ptr<rocksdb::Iterator> it(
        db_.db->NewIterator(ScanOptions(snapshot), db_.namespaces));
    DecodeErrorSummary errors;
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      absl::StatusOr<NamespaceId> id = DecodeNamespaceId(ToView(it->key()));
      if (!id.ok()) {
        errors.Add(std::nullopt, id.status());
        continue;
      }
      fn(*id, ToView(it->value()));
    }
    errors.Report(*this, "namespace scan");
    if (!it->status().ok()) return FromRocksDb(it->status(), "namespace scan", path_);
    return absl::OkStatus();
  }

  absl::Status PutMeta(absl::string_view key, absl::string_view value) override {
    if (key == kIndexFormatMetaKey) {
      return absl::InvalidArgumentError(
          absl::StrCat("meta key '", key, "' is reserved by the index at ", path_));
    }
    absl::ReaderMutexLock lock(&mu_);
    KVTIER_RETURN_IF_ERROR(WriteGate());
    rocksdb::Status status = db_.db->Put(write_options_, db_.meta, ToSlice(key), ToSlice(value));
    if (!status.ok()) return FromRocksDb(status, "meta put", path_);
    CountWriteSync();
    return absl::OkStatus();
  }

  absl::StatusOr<std::optional<std::string>> GetMeta(absl::string_view key) override {
    absl::ReaderMutexLock lock(&mu_);
    return GetMetaLocked(key);
  }

  IndexHealth Health() override {
    DriveCondition drive = drive_->Check();
    bool read_only;
    {
      absl::ReaderMutexLock lock(&mu_);
      read_only = db_.read_only;
    }
    if (read_only && drive.state == DriveState::kWritable) {
      ReopenForWriting();
      drive = drive_->Check();
    }
    IndexHealth health;
    health.drive = drive.state;
    health.stalled = drive.stalled;
    health.free_bytes = drive.free_bytes;
    health.min_free_bytes = drive.min_free_bytes;
    health.reason = drive.reason;
    absl::ReaderMutexLock lock(&mu_);
    health.read_only = db_.read_only;
    if (health.read_only && health.reason.empty()) health.reason = reopen_error_;
    return health;
  }

  SyncPolicy sync_policy() const override { return sync_policy_; }

  IndexStats stats() const override {
    IndexStats s;
    s.writes = writes_.load(std::memory_order_relaxed);
    s.syncs = syncs_.load(std::memory_order_relaxed);
    s.puts = puts_.load(std::memory_order_relaxed);
    s.deletes = deletes_.load(std::memory_order_relaxed);
    s.multiget_keys = multiget_keys_.load(std::memory_order_relaxed);
    s.decode_errors = decode_errors_.load(std::memory_order_relaxed);
    s.refused_writes = refused_writes_.load(std::memory_order_relaxed);
    return s;
  }

 private:
  // Collects the undecodable entries of one call: counted in decode_errors and logged as one
  // line, so a damaged index cannot flood the log.
  class DecodeErrorSummary {
   public:
    void Add(const std::optional<BlockKey>& key, const absl::Status& status) {
      if (count_++ > 0) return;
      first_ = status.ToString();
      if (key.has_value()) {
        first_ =
            absl::StrCat("namespace ", key->ns, " hash ",
                         absl::BytesToHexString(absl::string_view(
                             reinterpret_cast<const char*>(key->hash.data()), key->hash.size())),
                         ": ", first_);
      }
    }
    void Report(RocksDbBlockIndex& index, absl::string_view operation) const {
      if (count_ == 0) return;
      index.decode_errors_.fetch_add(count_, std::memory_order_relaxed);
      KVTIER_LOG(kWarning, "index at ", index.path_, ": ", operation, " skipped ", count_,
                 " undecodable entries; first: ", first_);
    }

   private:
    uint64_t count_ = 0;
    std::string first_;
  };

  static rocksdb::ReadOptions ScanOptions(rocksdb::ManagedSnapshot& snapshot) {
    rocksdb::ReadOptions options;
    options.snapshot = snapshot.snapshot();
    options.fill_cache = false;
    options.readahead_size = kScanReadaheadBytes;
    return options;
  }

  void CountWriteSync() {
    if (write_options_.sync) syncs_.fetch_add(1, std::memory_order_relaxed);
  }

  // OK when a write may go to RocksDB now. REQUIRES: mu_ held (shared).
  absl::Status WriteGate() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    DriveCondition drive = drive_->Check();
    absl::Status st = drive.ToStatus();
    if (st.ok() && db_.read_only) {
      st = absl::ResourceExhaustedError(absl::StrCat(
          "the index at ", path_, " is open read-only (its drive was short of space at start)",
          reopen_error_.empty() ? "" : absl::StrCat("; reopening it failed: ", reopen_error_)));
    }
    if (!st.ok()) refused_writes_.fetch_add(1, std::memory_order_relaxed);
    return st;
  }

  // After a synced write: FailedPrecondition when the directory holding the log is gone.
  absl::Status CheckStillThere() { return drive_->CheckDirectory(); }

  absl::StatusOr<std::optional<std::string>> GetMetaLocked(absl::string_view key)
      ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    rocksdb::PinnableSlice value;
    rocksdb::Status status = db_.db->Get(rocksdb::ReadOptions(), db_.meta, ToSlice(key), &value);
    if (status.IsNotFound()) return std::optional<std::string>();
    if (!status.ok()) return FromRocksDb(status, "meta get", path_);
    return std::optional<std::string>(value.ToString());
  }

  // Replaces the read-only database by a writable one; on failure opens it read-only again and
  // keeps the reason for Health().
  void ReopenForWriting() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    if (!db_.read_only) return;
    db_.Close(path_);
    absl::StatusOr<OpenDb> reopened = OpenDatabase(path_, tuning_, false, /*read_only=*/false);
    absl::Status st = reopened.status();
    if (st.ok()) {
      db_ = *std::move(reopened);
      st = CheckFormat();
      if (st.ok()) {
        reopen_error_.clear();
        KVTIER_LOG(kInfo, "index at ", path_, ": its drive has room again; reopened for writing");
        return;
      }
      db_.Close(path_);
    }
    reopen_error_ = std::string(st.message());
    KVTIER_LOG(kError, "index at ", path_, ": reopening for writing failed: ", st.message(),
               "; it stays read-only");
    absl::StatusOr<OpenDb> again = OpenDatabase(path_, tuning_, false, /*read_only=*/true);
    if (again.ok()) {
      db_ = *std::move(again);
    } else {
      KVTIER_LOG(kError, "index at ", path_,
                 ": reopening read-only failed too: ", again.status().message());
    }
  }

  // Checks the format version: writes it into an index that holds no record yet, migrates
  // format 1. REQUIRES: mu_ held exclusively.
  absl::Status CheckFormat() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    KVTIER_ASSIGN_OR_RETURN(std::optional<std::string> version, GetMetaLocked(kIndexFormatMetaKey));
    if (version.has_value()) {
      if (*version == kIndexFormatVersion) return absl::OkStatus();
      if (*version == kLegacyIndexFormatVersion) return MigrateFromFormat1();
      return absl::FailedPreconditionError(
          absl::StrCat("the index at ", path_, " has format version '", absl::CHexEscape(*version),
                       "', this kvtierd reads format version '", kIndexFormatVersion, "'"));
    }
    for (rocksdb::ColumnFamilyHandle* family : {db_.blocks, db_.namespaces, db_.meta}) {
      std::unique_ptr<rocksdb::Iterator> it(db_.db->NewIterator(rocksdb::ReadOptions(), family));
      it->SeekToFirst();
      if (!it->status().ok()) return FromRocksDb(it->status(), "scan", path_);
      if (it->Valid()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "the index at ", path_, " holds records in column family '", family->GetName(),
            "' but no format version ('", kIndexFormatMetaKey, "' is missing)"));
      }
    }
    if (db_.read_only) {
      return absl::FailedPreconditionError(
          absl::StrCat("the index at ", path_, " is empty and has no format version"));
    }
    return WriteFormat();
  }

  absl::Status WriteFormat() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    rocksdb::WriteOptions synced;
    synced.sync = true;
    rocksdb::Status status =
        db_.db->Put(synced, db_.meta, kIndexFormatMetaKey, ToSlice(kIndexFormatVersion));
    if (!status.ok()) return FromRocksDb(status, "writing the format version", path_);
    KVTIER_LOG(kInfo, "index at ", path_, ": format version ", kIndexFormatVersion);
    return absl::OkStatus();
  }

  // Format 1 -> 2: 4-byte namespace ids become 8-byte ones (see the banner).
  absl::Status MigrateFromFormat1() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (db_.read_only) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the index at ", path_, " has format version 1 and must be migrated to ",
                       kIndexFormatVersion, ", which needs index.min_free free on its drive"));
    }
    rocksdb::WriteOptions synced;
    synced.sync = true;
    // The new id of each namespace, from the namespace keys of format 1 (moved last).
    absl::flat_hash_map<NamespaceId, NamespaceId> ids;
    std::vector<std::pair<std::string, std::string>> namespaces;  // old key, value
    {
      std::unique_ptr<rocksdb::Iterator> it(
          db_.db->NewIterator(rocksdb::ReadOptions(), db_.namespaces));
      for (it->SeekToFirst(); it->Valid(); it->Next()) {
        absl::StatusOr<NamespaceId> legacy = DecodeLegacyNamespaceId(ToView(it->key()));
        if (!legacy.ok()) continue;  // already migrated
        const NamespaceId id = options_.migrate_namespace_id
                                   ? options_.migrate_namespace_id(*legacy, ToView(it->value()))
                                   : *legacy;
        ids[*legacy] = id;
        namespaces.emplace_back(it->key().ToString(), it->value().ToString());
      }
      if (!it->status().ok()) return FromRocksDb(it->status(), "namespace scan", path_);
    }
    uint64_t moved = 0;
    {
      rocksdb::WriteBatch batch;
      std::unique_ptr<rocksdb::Iterator> it(
          db_.db->NewIterator(rocksdb::ReadOptions(), db_.blocks));
      for (it->SeekToFirst(); it->Valid(); it->Next()) {
        absl::StatusOr<BlockKey> key = DecodeLegacyBlockKey(ToView(it->key()));
        if (!key.ok()) continue;  // already migrated
        auto mapped = ids.find(key->ns);
        if (mapped != ids.end()) key->ns = mapped->second;
        batch.Delete(db_.blocks, it->key());
        batch.Put(db_.blocks, EncodeBlockKey(*key), it->value());
        if (batch.Count() >= 2 * kMigrationBatch) {
          rocksdb::Status status = db_.db->Write(synced, &batch);
          if (!status.ok()) return FromRocksDb(status, "migration write", path_);
          moved += batch.Count() / 2;
          batch.Clear();
        }
      }
      if (!it->status().ok()) return FromRocksDb(it->status(), "block scan", path_);
      moved += batch.Count() / 2;
      rocksdb::Status status = db_.db->Write(synced, &batch);
      if (!status.ok()) return FromRocksDb(status, "migration write", path_);
    }
    rocksdb::WriteBatch batch;
    for (const auto& [old_key, value] : namespaces) {
      absl::StatusOr<NamespaceId> legacy = DecodeLegacyNamespaceId(old_key);
      batch.Delete(db_.namespaces, old_key);
      batch.Put(db_.namespaces, EncodeNamespaceId(ids[*legacy]), value);
    }
    batch.Put(db_.meta, kIndexFormatMetaKey, ToSlice(kIndexFormatVersion));
    rocksdb::Status status = db_.db->Write(synced, &batch);
    if (!status.ok()) return FromRocksDb(status, "migration write", path_);
    KVTIER_LOG(kWarning, "index at ", path_, ": migrated from format ", kLegacyIndexFormatVersion,
               " to ", kIndexFormatVersion, " (64-bit namespace ids): ", namespaces.size(),
               " namespaces, ", moved, " block records");
    return absl::OkStatus();
  }

  const std::string path_;
  const RocksDbIndexOptions options_;
  const SyncPolicy sync_policy_;
  rocksdb::WriteOptions write_options_;
  std::unique_ptr<StateDrive> drive_;
  int lock_fd_ = -1;                         // flock'ed kOwnerLockName
  std::shared_ptr<rocksdb::FileSystem> fs_;  // writes through drive_
  std::unique_ptr<rocksdb::Env> env_;        // over fs_; outlives the database
  Tuning tuning_;

  // Shared by every operation on the database; exclusive while it is reopened.
  mutable absl::Mutex mu_;
  OpenDb db_ ABSL_GUARDED_BY(mu_);
  std::string reopen_error_ ABSL_GUARDED_BY(mu_);

  std::atomic<uint64_t> writes_{0};
  std::atomic<uint64_t> syncs_{0};
  std::atomic<uint64_t> puts_{0};
  std::atomic<uint64_t> deletes_{0};
  std::atomic<uint64_t> multiget_keys_{0};
  std::atomic<uint64_t> decode_errors_{0};
  std::atomic<uint64_t> refused_writes_{0};
};

}  // namespace

absl::Status IndexHealth::ToStatus() const {
  if (drive == DriveState::kLost) return absl::FailedPreconditionError(reason);
  if (drive == DriveState::kShort || read_only) return absl::ResourceExhaustedError(reason);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<BlockIndex>> OpenRocksDbBlockIndex(
    const RocksDbIndexOptions& options) {
  const std::string& path = options.path;
  if (path.empty()) return absl::InvalidArgumentError("index path is empty");

  std::error_code error;
  const bool exists = std::filesystem::exists(std::filesystem::path(path) / "CURRENT", error);
  if (error) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot inspect the index directory ", path, ": ", error.message()));
  }
  if (!exists) {
    if (!options.create_if_missing) {
      return absl::NotFoundError(
          absl::StrCat("no index at ", path, " (and create_if_missing is false)"));
    }
    std::filesystem::create_directories(path, error);
    if (error) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot create the index directory ", path, ": ", error.message()));
    }
  }
  // The index is the daemon's alone, whatever the caller's umask.
  std::filesystem::permissions(path, std::filesystem::perms::owner_all,
                               std::filesystem::perm_options::replace, error);
  if (error) {
    KVTIER_LOG(kWarning, "index at ", path, ": cannot set mode 0700: ", error.message());
  }
  StateDriveOptions drive_options;
  drive_options.dir = path;
  drive_options.min_free_bytes = options.min_free_bytes;
  drive_options.reserve_bytes = options.reserve_bytes;
  drive_options.free_bytes = options.free_bytes;
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<StateDrive> drive, StateDrive::Open(drive_options));
  auto index = std::make_unique<RocksDbBlockIndex>(options, std::move(drive));
  KVTIER_RETURN_IF_ERROR(index->Start(exists));
  return index;
}

absl::StatusOr<IndexRepair> RepairRocksDbBlockIndex(const RocksDbIndexOptions& options) {
  const std::string& path = options.path;
  std::error_code error;
  if (!std::filesystem::is_directory(path, error)) {
    return absl::NotFoundError(absl::StrCat("no index directory at ", path));
  }
  // Not while a daemon uses it: the owner lock (and RocksDB's own LOCK).
  const std::string lock_path = path + "/" + kOwnerLockName;
  const int lock_fd = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (lock_fd >= 0 && flock(lock_fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK) {
    close(lock_fd);
    return absl::UnavailableError(
        absl::StrCat("another kvtierd holds the index at ", path, "; stop it before repairing"));
  }
  IndexRepair report;
  {
    Tuning tuning = MakeTuning(options);
    std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
    descriptors.emplace_back(rocksdb::kDefaultColumnFamilyName, tuning.small);
    descriptors.emplace_back(kBlocksFamily, tuning.blocks);
    descriptors.emplace_back(kNamespacesFamily, tuning.small);
    descriptors.emplace_back(kMetaFamily, tuning.small);
    rocksdb::Status status = rocksdb::RepairDB(path, tuning.db, descriptors, tuning.small);
    report.detail = absl::StrCat("RocksDB repair: ", status.ToString());
  }
  if (lock_fd >= 0) close(lock_fd);  // the open below takes it again
  absl::StatusOr<std::unique_ptr<BlockIndex>> reopened = OpenRocksDbBlockIndex(options);
  if (reopened.ok()) {
    report.repaired = true;
    KVTIER_LOG(kWarning, "index at ", path, " repaired (", report.detail,
               "); records in lost files are gone");
    return report;
  }
  absl::StrAppend(&report.detail,
                  "; the repaired index does not open: ", reopened.status().message());
  report.moved_to = absl::StrCat(path, ".damaged-", absl::ToUnixSeconds(absl::Now()));
  std::filesystem::rename(path, report.moved_to, error);
  if (error) {
    return absl::FailedPreconditionError(absl::StrCat("cannot move the damaged index ", path,
                                                      " to ", report.moved_to, ": ",
                                                      error.message(), " (", report.detail, ")"));
  }
  KVTIER_LOG(kError, "index at ", path, " could not be repaired (", report.detail, "); moved to ",
             report.moved_to,
             ": the next start creates an empty index and forgets the disk tier's blocks");
  return report;
}

}  // namespace kvtier::index
