// RocksDbBlockIndex: the BlockIndex on RocksDB (column families "blocks", "namespaces", "meta").
// OpenRocksDbBlockIndex is the only entry point; the class lives in this file. Thread-safe: RocksDB
// is, and the only other state is atomic counters.
//
// Design and tuning, for ~1-100M records of 36-byte keys and 62-byte values (~10 GB at most):
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

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "daemon/index/block_index.h"
#include "daemon/index/block_record.h"
#include "rocksdb/cache.h"
#include "rocksdb/db.h"
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

class RocksDbBlockIndex final : public BlockIndex {
 public:
  // Takes ownership of `db` and of every handle in `handles`, which must include the three index
  // families.
  RocksDbBlockIndex(std::string path, SyncPolicy sync_policy, rocksdb::DB* db,
                    std::vector<rocksdb::ColumnFamilyHandle*> handles)
      : path_(std::move(path)), sync_policy_(sync_policy), db_(db), handles_(std::move(handles)) {
    write_options_.sync = sync_policy_ == SyncPolicy::kAlways;
    for (rocksdb::ColumnFamilyHandle* handle : handles_) {
      if (handle->GetName() == kBlocksFamily) blocks_ = handle;
      if (handle->GetName() == kNamespacesFamily) namespaces_ = handle;
      if (handle->GetName() == kMetaFamily) meta_ = handle;
    }
  }

  RocksDbBlockIndex(const RocksDbBlockIndex&) = delete;
  RocksDbBlockIndex& operator=(const RocksDbBlockIndex&) = delete;

  ~RocksDbBlockIndex() override {
    if (sync_policy_ != SyncPolicy::kNone) {
      rocksdb::Status status = db_->FlushWAL(/*sync=*/true);
      if (!status.ok()) {
        KVTIER_LOG(kError, "index at ", path_, ": WAL sync at close failed: ", status.ToString());
      }
    }
    for (rocksdb::ColumnFamilyHandle* handle : handles_) {
      rocksdb::Status status = db_->DestroyColumnFamilyHandle(handle);
      if (!status.ok()) {
        KVTIER_LOG(kError, "index at ", path_,
                   ": releasing column family failed: ", status.ToString());
      }
    }
    rocksdb::Status status = db_->Close();
    if (!status.ok()) {
      KVTIER_LOG(kError, "index at ", path_, ": close failed: ", status.ToString());
    }
  }

  // Checks the format version, writing it into an index that holds no record yet.
  absl::Status CheckOrWriteFormat() {
    KVTIER_ASSIGN_OR_RETURN(std::optional<std::string> version, GetMeta(kIndexFormatMetaKey));
    if (version.has_value()) {
      if (*version == kIndexFormatVersion) return absl::OkStatus();
      return absl::FailedPreconditionError(
          absl::StrCat("the index at ", path_, " has format version '", absl::CHexEscape(*version),
                       "', this kvtierd reads format version '", kIndexFormatVersion, "'"));
    }
    for (rocksdb::ColumnFamilyHandle* family : {blocks_, namespaces_, meta_}) {
      std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), family));
      it->SeekToFirst();
      if (!it->status().ok()) return FromRocksDb(it->status(), "scan", path_);
      if (it->Valid()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "the index at ", path_, " holds records in column family '", family->GetName(),
            "' but no format version ('", kIndexFormatMetaKey, "' is missing)"));
      }
    }
    rocksdb::WriteOptions synced;
    synced.sync = true;
    rocksdb::Status status =
        db_->Put(synced, meta_, kIndexFormatMetaKey, ToSlice(kIndexFormatVersion));
    if (!status.ok()) return FromRocksDb(status, "writing the format version", path_);
    KVTIER_LOG(kInfo, "created index at ", path_, " (format version ", kIndexFormatVersion, ")");
    return absl::OkStatus();
  }

  absl::Status Write(const IndexBatch& batch) override {
    if (batch.empty()) {
      writes_.fetch_add(1, std::memory_order_relaxed);
      return absl::OkStatus();
    }
    rocksdb::WriteBatch write_batch;
    for (const BlockKey& key : batch.deletes) {
      rocksdb::Status status = write_batch.Delete(blocks_, EncodeBlockKey(key));
      if (!status.ok()) return FromRocksDb(status, "batch delete", path_);
    }
    for (const auto& [key, record] : batch.puts) {
      rocksdb::Status status =
          write_batch.Put(blocks_, EncodeBlockKey(key), EncodeBlockRecord(record));
      if (!status.ok()) return FromRocksDb(status, "batch put", path_);
    }
    rocksdb::Status status = db_->Write(write_options_, &write_batch);
    if (!status.ok()) return FromRocksDb(status, "write", path_);
    writes_.fetch_add(1, std::memory_order_relaxed);
    puts_.fetch_add(batch.puts.size(), std::memory_order_relaxed);
    deletes_.fetch_add(batch.deletes.size(), std::memory_order_relaxed);
    CountWriteSync();
    return absl::OkStatus();
  }

  absl::Status Sync() override {
    rocksdb::Status status = db_->FlushWAL(/*sync=*/true);
    if (!status.ok()) return FromRocksDb(status, "WAL sync", path_);
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
    db_->MultiGet(rocksdb::ReadOptions(), blocks_, n, slices.data(), values.data(),
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
    rocksdb::ManagedSnapshot snapshot(db_.get());
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ScanOptions(snapshot), blocks_));
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
    rocksdb::Status status =
        db_->Put(write_options_, namespaces_, EncodeNamespaceId(id), ToSlice(record));
    if (!status.ok()) return FromRocksDb(status, "namespace put", path_);
    CountWriteSync();
    return absl::OkStatus();
  }

  absl::Status DeleteNamespace(NamespaceId id) override {
    rocksdb::Status status = db_->Delete(write_options_, namespaces_, EncodeNamespaceId(id));
    if (!status.ok()) return FromRocksDb(status, "namespace delete", path_);
    CountWriteSync();
    return absl::OkStatus();
  }

  absl::Status ForEachNamespace(
      const std::function<void(NamespaceId, absl::string_view)>& fn) override {
    rocksdb::ManagedSnapshot snapshot(db_.get());
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ScanOptions(snapshot), namespaces_));
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
    rocksdb::Status status = db_->Put(write_options_, meta_, ToSlice(key), ToSlice(value));
    if (!status.ok()) return FromRocksDb(status, "meta put", path_);
    CountWriteSync();
    return absl::OkStatus();
  }

  absl::StatusOr<std::optional<std::string>> GetMeta(absl::string_view key) override {
    rocksdb::PinnableSlice value;
    rocksdb::Status status = db_->Get(rocksdb::ReadOptions(), meta_, ToSlice(key), &value);
    if (status.IsNotFound()) return std::optional<std::string>();
    if (!status.ok()) return FromRocksDb(status, "meta get", path_);
    return std::optional<std::string>(value.ToString());
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

  const std::string path_;
  const SyncPolicy sync_policy_;
  rocksdb::WriteOptions write_options_;
  std::unique_ptr<rocksdb::DB> db_;
  // Every family the database holds (RocksDB opens them all); released before db_ is closed.
  std::vector<rocksdb::ColumnFamilyHandle*> handles_;
  rocksdb::ColumnFamilyHandle* blocks_ = nullptr;      // borrowed from handles_
  rocksdb::ColumnFamilyHandle* namespaces_ = nullptr;  // borrowed from handles_
  rocksdb::ColumnFamilyHandle* meta_ = nullptr;        // borrowed from handles_

  std::atomic<uint64_t> writes_{0};
  std::atomic<uint64_t> syncs_{0};
  std::atomic<uint64_t> puts_{0};
  std::atomic<uint64_t> deletes_{0};
  std::atomic<uint64_t> multiget_keys_{0};
  std::atomic<uint64_t> decode_errors_{0};
};

}  // namespace

absl::StatusOr<std::unique_ptr<BlockIndex>> OpenRocksDbBlockIndex(
    const RocksDbIndexOptions& options) {
  const std::string& path = options.path;
  if (path.empty()) return absl::InvalidArgumentError("index path is empty");

  std::error_code error;
  const bool exists = std::filesystem::exists(std::filesystem::path(path) / "CURRENT", error);
  if (error) {
    return absl::InternalError(
        absl::StrCat("cannot inspect the index directory ", path, ": ", error.message()));
  }
  if (!exists) {
    if (!options.create_if_missing) {
      return absl::NotFoundError(
          absl::StrCat("no index at ", path, " (and create_if_missing is false)"));
    }
    std::filesystem::create_directories(path, error);
    if (error) {
      return absl::InternalError(
          absl::StrCat("cannot create the index directory ", path, ": ", error.message()));
    }
  }

  Tuning tuning = MakeTuning(options);
  std::vector<std::string> families;
  if (exists) {
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
    tuning.db.create_missing_column_families = true;
  }
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  for (const std::string& family : families) {
    descriptors.emplace_back(family, family == kBlocksFamily ? tuning.blocks : tuning.small);
  }

  rocksdb::DB* db = nullptr;
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::Status status = rocksdb::DB::Open(tuning.db, path, descriptors, &handles, &db);
  if (!status.ok()) {
    if (IsLockHeld(status)) {
      return absl::UnavailableError(absl::StrCat("another kvtierd holds the index at ", path,
                                                 " (RocksDB: ", status.ToString(), ")"));
    }
    return FromRocksDb(status, "open", path);
  }
  auto index =
      std::make_unique<RocksDbBlockIndex>(path, options.sync_policy, db, std::move(handles));
  KVTIER_RETURN_IF_ERROR(index->CheckOrWriteFormat());
  return index;
}

}  // namespace kvtier::index
