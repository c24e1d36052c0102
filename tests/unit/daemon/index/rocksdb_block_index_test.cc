// Tests of RocksDbBlockIndex on real RocksDB files in a temporary directory: atomic batches,
// MultiGet, ordered scans, namespaces and meta, persistence across reopen for each sync policy,
// the open-time checks (lock, format version, foreign databases) and decode-error accounting. The
// test reaches into the files with RocksDB directly only to forge what the interface cannot write.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/coding.h"
#include "daemon/index/block_index.h"
#include "daemon/index/block_record.h"
#include "gtest/gtest.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"
#include "tests/unit/daemon/index/index_test_util.h"

namespace kvtier::index {
namespace {

using ::kvtier::index::testing::KeyFor;
using ::kvtier::index::testing::RecordFor;
using ::kvtier::index::testing::TempDir;

std::unique_ptr<BlockIndex> OpenOrDie(const std::string& path,
                                      SyncPolicy policy = SyncPolicy::kBatch) {
  RocksDbIndexOptions options;
  options.path = path;
  options.sync_policy = policy;
  options.block_cache_bytes = 8 << 20;
  absl::StatusOr<std::unique_ptr<BlockIndex>> index = OpenRocksDbBlockIndex(options);
  EXPECT_TRUE(index.ok()) << index.status();
  return index.ok() ? *std::move(index) : nullptr;
}

absl::Status OpenStatus(const std::string& path) {
  RocksDbIndexOptions options;
  options.path = path;
  return OpenRocksDbBlockIndex(options).status();
}

IndexBatch PutsOf(uint64_t first, uint64_t count) {
  IndexBatch batch;
  for (uint64_t id = first; id < first + count; ++id)
    batch.puts.push_back({KeyFor(id), RecordFor(id)});
  return batch;
}

// Every block, in scan order.
std::vector<std::pair<BlockKey, BlockRecord>> Scan(BlockIndex& index) {
  std::vector<std::pair<BlockKey, BlockRecord>> out;
  absl::Status status = index.ForEachBlock([&](const BlockKey& key, const BlockRecord& record) {
    out.push_back({key, record});
    return true;
  });
  EXPECT_TRUE(status.ok()) << status;
  return out;
}

// The expected scan of the ids in `ids`: sorted by encoded key.
std::vector<std::pair<BlockKey, BlockRecord>> ExpectedScan(const std::vector<uint64_t>& ids) {
  std::vector<std::pair<BlockKey, BlockRecord>> out;
  for (uint64_t id : ids) out.push_back({KeyFor(id), RecordFor(id)});
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return EncodeBlockKey(a.first) < EncodeBlockKey(b.first);
  });
  return out;
}

std::map<NamespaceId, std::string> Namespaces(BlockIndex& index) {
  std::map<NamespaceId, std::string> out;
  std::vector<NamespaceId> order;
  absl::Status status = index.ForEachNamespace([&](NamespaceId id, absl::string_view record) {
    order.push_back(id);
    out[id] = std::string(record);
  });
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_TRUE(std::is_sorted(order.begin(), order.end()));
  return out;
}

// Opens the database at `path` with RocksDB itself (all its column families, creating `create`
// when missing) and puts `value` under `key` in `family`.
void RawPut(const std::string& path, const std::string& family, const std::string& key,
            const std::string& value, bool create = false) {
  rocksdb::DBOptions options;
  options.create_if_missing = create;
  options.create_missing_column_families = create;
  std::vector<std::string> names;
  if (!rocksdb::DB::ListColumnFamilies(options, path, &names).ok()) {
    names = {rocksdb::kDefaultColumnFamilyName};
  }
  if (std::find(names.begin(), names.end(), family) == names.end()) names.push_back(family);
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  for (const std::string& name : names)
    descriptors.emplace_back(name, rocksdb::ColumnFamilyOptions());
  rocksdb::DB* db = nullptr;
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::Status status = rocksdb::DB::Open(options, path, descriptors, &handles, &db);
  ASSERT_TRUE(status.ok()) << status.ToString();
  rocksdb::ColumnFamilyHandle* target =
      handles[std::find(names.begin(), names.end(), family) - names.begin()];
  status = db->Put(rocksdb::WriteOptions(), target, key, value);
  EXPECT_TRUE(status.ok()) << status.ToString();
  for (rocksdb::ColumnFamilyHandle* handle : handles)
    EXPECT_TRUE(db->DestroyColumnFamilyHandle(handle).ok());
  EXPECT_TRUE(db->Close().ok());
  delete db;
}

TEST(RocksDbBlockIndexTest, CreatesNestedDirectoryAndRecordsFormatVersion) {
  TempDir dir;
  const std::string path = dir.Sub("a/b/index");
  std::unique_ptr<BlockIndex> index = OpenOrDie(path);
  ASSERT_NE(index, nullptr);
  absl::StatusOr<std::optional<std::string>> version = index->GetMeta(kIndexFormatMetaKey);
  ASSERT_TRUE(version.ok()) << version.status();
  EXPECT_EQ(version->value_or("<absent>"), "2");
  EXPECT_TRUE(Scan(*index).empty());
}

TEST(RocksDbBlockIndexTest, MissingIndexWithoutCreateIsNotFound) {
  TempDir dir;
  RocksDbIndexOptions options;
  options.path = dir.Sub("none");
  options.create_if_missing = false;
  absl::Status status = OpenRocksDbBlockIndex(options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
  EXPECT_NE(status.message().find(options.path), absl::string_view::npos) << status;
}

TEST(RocksDbBlockIndexTest, WriteAppliesPutsAndDeletes) {
  TempDir dir;
  std::unique_ptr<BlockIndex> index = OpenOrDie(dir.path());
  ASSERT_NE(index, nullptr);
  ASSERT_TRUE(index->Write(PutsOf(0, 10)).ok());

  IndexBatch batch = PutsOf(10, 3);
  batch.deletes = {KeyFor(2), KeyFor(5), KeyFor(99)};  // 99 was never stored
  BlockRecord moved = RecordFor(7);
  moved.tier = Tier::kDisk;
  moved.offset = 123456;
  batch.puts.push_back({KeyFor(7), moved});
  ASSERT_TRUE(index->Write(batch).ok());

  std::vector<std::pair<BlockKey, BlockRecord>> scan = Scan(*index);
  // 7 is live with its new value.
  auto expected = ExpectedScan({0, 1, 3, 4, 6, 7, 8, 9, 10, 11, 12});
  for (auto& [key, record] : expected) {
    if (key == KeyFor(7)) record = moved;
  }
  EXPECT_EQ(scan, expected);
}

TEST(RocksDbBlockIndexTest, KeyBothDeletedAndPutInOneBatchEndsPut) {
  TempDir dir;
  std::unique_ptr<BlockIndex> index = OpenOrDie(dir.path());
  ASSERT_NE(index, nullptr);
  ASSERT_TRUE(index->Write(PutsOf(1, 1)).ok());
  IndexBatch batch;
  BlockRecord replacement = RecordFor(1);
  replacement.size = 1;
  batch.puts.push_back({KeyFor(1), replacement});
  batch.deletes.push_back(KeyFor(1));
  ASSERT_TRUE(index->Write(batch).ok());
  absl::StatusOr<std::vector<std::optional<BlockRecord>>> got = index->MultiGet({KeyFor(1)});
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_TRUE((*got)[0].has_value());
  EXPECT_EQ(*(*got)[0], replacement);
}

// A reader scanning while batches of 100 puts land sees whole batches only.
TEST(RocksDbBlockIndexTest, ScansSeeWholeBatches) {
  TempDir dir;
  std::unique_ptr<BlockIndex> index = OpenOrDie(dir.path());
  ASSERT_NE(index, nullptr);
  constexpr uint64_t kBatch = 100;
  constexpr uint64_t kBatches = 200;
  std::atomic<bool> done{false};
  std::thread writer([&] {
    for (uint64_t b = 0; b < kBatches; ++b) {
      absl::Status status = index->Write(PutsOf(b * kBatch, kBatch));
      EXPECT_TRUE(status.ok()) << status;
    }
    done = true;
  });
  int scans = 0;
  while (!done.load() || scans == 0) {
    size_t count = 0;
    ASSERT_TRUE(index
                    ->ForEachBlock([&](const BlockKey&, const BlockRecord&) {
                      ++count;
                      return true;
                    })
                    .ok());
    EXPECT_EQ(count % kBatch, 0u) << "a scan saw a partial batch: " << count << " records";
    ++scans;
  }
  writer.join();
  EXPECT_EQ(Scan(*index).size(), kBatch * kBatches);
}

TEST(RocksDbBlockIndexTest, MultiGetReturnsHitsAndMissesInOrder) {
  TempDir dir;
  std::unique_ptr<BlockIndex> index = OpenOrDie(dir.path());
  ASSERT_NE(index, nullptr);
  // Even ids are stored, odd ones are not.
  constexpr uint64_t kKeys = 10000;
  for (uint64_t first = 0; first < kKeys; first += 1000) {
    IndexBatch batch;
    for (uint64_t id = first; id < first + 1000; id += 2)
      batch.puts.push_back({KeyFor(id), RecordFor(id)});
    ASSERT_TRUE(index->Write(batch).ok());
  }
  std::vector<uint64_t> ids(kKeys);
  for (uint64_t i = 0; i < kKeys; ++i) ids[i] = i;
  std::shuffle(ids.begin(), ids.end(), std::mt19937_64(11));
  std::vector<BlockKey> keys;
  for (uint64_t id : ids) keys.push_back(KeyFor(id));

  auto check = [&](BlockIndex& idx) {
    absl::StatusOr<std::vector<std::optional<BlockRecord>>> got = idx.MultiGet(keys);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->size(), kKeys);
    for (size_t i = 0; i < kKeys; ++i) {
      if (ids[i] % 2 == 0) {
        ASSERT_TRUE((*got)[i].has_value()) << "id " << ids[i];
        ASSERT_EQ(*(*got)[i], RecordFor(ids[i]));
      } else {
        ASSERT_FALSE((*got)[i].has_value()) << "id " << ids[i];
      }
    }
  };
  check(*index);  // from the memtable
  index.reset();
  index = OpenOrDie(dir.path());
  ASSERT_NE(index, nullptr);
  check(*index);  // from table files

  absl::StatusOr<std::vector<std::optional<BlockRecord>>> none = index->MultiGet({});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST(RocksDbBlockIndexTest, ForEachBlockVisitsLiveSetInKeyOrderAndStops) {
  TempDir dir;
  std::unique_ptr<BlockIndex> index = OpenOrDie(dir.path());
  ASSERT_NE(index, nullptr);
  ASSERT_TRUE(index->Write(PutsOf(0, 300)).ok());
  IndexBatch deletes;
  std::vector<uint64_t> live;
  for (uint64_t id = 0; id < 300; ++id) {
    if (id % 3 == 0) {
      deletes.deletes.push_back(KeyFor(id));
    } else {
      live.push_back(id);
    }
  }
  ASSERT_TRUE(index->Write(deletes).ok());
  const auto expected = ExpectedScan(live);
  EXPECT_EQ(Scan(*index), expected);

  // Namespaces come out contiguous and ascending.
  std::vector<NamespaceId> namespaces;
  for (const auto& [key, record] : expected) namespaces.push_back(key.ns);
  EXPECT_TRUE(std::is_sorted(namespaces.begin(), namespaces.end()));

  int calls = 0;
  ASSERT_TRUE(index
                  ->ForEachBlock([&](const BlockKey& key, const BlockRecord&) {
                    EXPECT_EQ(key, expected[calls].first);
                    return ++calls < 5;
                  })
                  .ok());
  EXPECT_EQ(calls, 5);
}

TEST(RocksDbBlockIndexTest, NamespacesPutDeleteIterate) {
  TempDir dir;
  std::unique_ptr<BlockIndex> index = OpenOrDie(dir.path());
  ASSERT_NE(index, nullptr);
  EXPECT_TRUE(Namespaces(*index).empty());
  for (NamespaceId id : {3u, 1u, 0xffffffffu, 256u, 0u}) {
    ASSERT_TRUE(index->PutNamespace(id, absl::StrCat("ns-", id)).ok());
  }
  ASSERT_TRUE(index->PutNamespace(3, std::string("bin\0ary", 7)).ok());
  ASSERT_TRUE(index->DeleteNamespace(1).ok());
  ASSERT_TRUE(index->DeleteNamespace(12345).ok());  // absent: not an error
  const std::map<NamespaceId, std::string> expected = {
      {0, "ns-0"}, {3, std::string("bin\0ary", 7)}, {256, "ns-256"}, {0xffffffff, "ns-4294967295"}};
  EXPECT_EQ(Namespaces(*index), expected);
  index.reset();
  index = OpenOrDie(dir.path());
  ASSERT_NE(index, nullptr);
  EXPECT_EQ(Namespaces(*index), expected);
}

TEST(RocksDbBlockIndexTest, MetaPutGetAndReservedKey) {
  TempDir dir;
  std::unique_ptr<BlockIndex> index = OpenOrDie(dir.path());
  ASSERT_NE(index, nullptr);
  absl::StatusOr<std::optional<std::string>> absent = index->GetMeta("host.incarnation");
  ASSERT_TRUE(absent.ok());
  EXPECT_FALSE(absent->has_value());
  ASSERT_TRUE(index->PutMeta("host.incarnation", "41").ok());
  ASSERT_TRUE(index->PutMeta("host.incarnation", "42").ok());
  ASSERT_TRUE(index->PutMeta("empty", "").ok());
  EXPECT_EQ(index->GetMeta("host.incarnation").value(), std::optional<std::string>("42"));
  EXPECT_EQ(index->GetMeta("empty").value(), std::optional<std::string>(""));

  absl::Status reserved = index->PutMeta(kIndexFormatMetaKey, "2");
  EXPECT_EQ(reserved.code(), absl::StatusCode::kInvalidArgument) << reserved;
  EXPECT_EQ(index->GetMeta(kIndexFormatMetaKey).value(), std::optional<std::string>("2"));
}

// A format-1 index as the previous version wrote it: 4-byte namespace ids, 36-byte block keys.
// Creates a database at `path` with the index's column families and nothing in them (what an
// interrupted creation leaves, before the format version is written).
void CreateEmptyFamilies(const std::string& path) {
  rocksdb::DBOptions options;
  options.create_if_missing = true;
  options.create_missing_column_families = true;
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors = {
      {rocksdb::kDefaultColumnFamilyName, {}}, {"blocks", {}}, {"namespaces", {}}, {"meta", {}}};
  rocksdb::DB* db = nullptr;
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  ASSERT_TRUE(rocksdb::DB::Open(options, path, descriptors, &handles, &db).ok());
  for (rocksdb::ColumnFamilyHandle* handle : handles) {
    ASSERT_TRUE(db->DestroyColumnFamilyHandle(handle).ok());
  }
  ASSERT_TRUE(db->Close().ok());
  delete db;
}

std::string LegacyNamespaceKey(uint32_t id) {
  std::string out;
  PutBigEndian32(&out, id);
  return out;
}
std::string LegacyBlockKey(uint32_t ns, uint64_t id) {
  const BlockKey key = KeyFor(id);
  return LegacyNamespaceKey(ns) + std::string(key.hash.begin(), key.hash.end());
}

TEST(RocksDbBlockIndexTest, MigratesFormat1NamespaceIdsAndResumesAfterACrash) {
  TempDir dir;
  CreateEmptyFamilies(dir.path());
  RawPut(dir.path(), "meta", kIndexFormatMetaKey, "1");
  RawPut(dir.path(), "namespaces", LegacyNamespaceKey(7), "seven");
  RawPut(dir.path(), "namespaces", LegacyNamespaceKey(9), "nine");
  for (uint64_t id = 0; id < 10; ++id) {
    RawPut(dir.path(), "blocks", LegacyBlockKey(id < 5 ? 7 : 9, id),
           EncodeBlockRecord(RecordFor(id)));
  }
  // A migration cut short: block 3 already has its new key, its old one is gone.
  BlockKey moved = KeyFor(3);
  moved.ns = 0x100000007;
  RawPut(dir.path(), "blocks", EncodeBlockKey(moved), EncodeBlockRecord(RecordFor(3)));
  {
    rocksdb::DB* db = nullptr;
    rocksdb::DBOptions options;
    std::vector<std::string> names;
    ASSERT_TRUE(rocksdb::DB::ListColumnFamilies(options, dir.path(), &names).ok());
    std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
    for (const std::string& name : names)
      descriptors.emplace_back(name, rocksdb::ColumnFamilyOptions());
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    ASSERT_TRUE(rocksdb::DB::Open(options, dir.path(), descriptors, &handles, &db).ok());
    const size_t blocks = std::find(names.begin(), names.end(), "blocks") - names.begin();
    ASSERT_TRUE(db->Delete(rocksdb::WriteOptions(), handles[blocks], LegacyBlockKey(7, 3)).ok());
    for (rocksdb::ColumnFamilyHandle* handle : handles) {
      ASSERT_TRUE(db->DestroyColumnFamilyHandle(handle).ok());
    }
    ASSERT_TRUE(db->Close().ok());
    delete db;
  }
  RocksDbIndexOptions options;
  options.path = dir.path();
  std::vector<std::pair<NamespaceId, std::string>> asked;
  options.migrate_namespace_id = [&asked](NamespaceId legacy, absl::string_view record) {
    asked.emplace_back(legacy, std::string(record));
    return legacy == 7 ? NamespaceId{0x100000007} : NamespaceId{0x200000009};
  };
  absl::StatusOr<std::unique_ptr<BlockIndex>> index = OpenRocksDbBlockIndex(options);
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ((*index)->GetMeta(kIndexFormatMetaKey).value(), std::optional<std::string>("2"));
  EXPECT_EQ(asked, (std::vector<std::pair<NamespaceId, std::string>>{{7, "seven"}, {9, "nine"}}));
  EXPECT_EQ(Namespaces(**index),
            (std::map<NamespaceId, std::string>{{0x100000007, "seven"}, {0x200000009, "nine"}}));
  std::vector<std::pair<BlockKey, BlockRecord>> expected;
  for (uint64_t id = 0; id < 10; ++id) {
    BlockKey key = KeyFor(id);
    key.ns = id < 5 ? 0x100000007 : 0x200000009;
    expected.push_back({key, RecordFor(id)});
  }
  std::sort(expected.begin(), expected.end(), [](const auto& a, const auto& b) {
    return EncodeBlockKey(a.first) < EncodeBlockKey(b.first);
  });
  EXPECT_EQ(Scan(**index), expected);
  EXPECT_EQ((*index)->stats().decode_errors, 0u);
}

class ReopenTest : public ::testing::TestWithParam<SyncPolicy> {};

TEST_P(ReopenTest, CloseAndReopenKeepsEverything) {
  TempDir dir;
  std::vector<uint64_t> live;
  {
    std::unique_ptr<BlockIndex> index = OpenOrDie(dir.path(), GetParam());
    ASSERT_NE(index, nullptr);
    EXPECT_EQ(index->sync_policy(), GetParam());
    for (uint64_t b = 0; b < 20; ++b) ASSERT_TRUE(index->Write(PutsOf(b * 50, 50)).ok());
    IndexBatch deletes;
    for (uint64_t id = 0; id < 1000; ++id) {
      if (id % 10 == 0) {
        deletes.deletes.push_back(KeyFor(id));
      } else {
        live.push_back(id);
      }
    }
    ASSERT_TRUE(index->Write(deletes).ok());
    ASSERT_TRUE(index->PutNamespace(7, "seven").ok());
    ASSERT_TRUE(index->PutMeta("k", "v").ok());
  }
  for (int round = 0; round < 2; ++round) {
    std::unique_ptr<BlockIndex> index = OpenOrDie(dir.path(), GetParam());
    ASSERT_NE(index, nullptr);
    EXPECT_EQ(Scan(*index), ExpectedScan(live)) << "round " << round;
    EXPECT_EQ(Namespaces(*index), (std::map<NamespaceId, std::string>{{7, "seven"}}));
    EXPECT_EQ(index->GetMeta("k").value(), std::optional<std::string>("v"));
    EXPECT_EQ(index->stats().decode_errors, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(AllPolicies, ReopenTest,
                         ::testing::Values(SyncPolicy::kNone, SyncPolicy::kBatch,
                                           SyncPolicy::kAlways),
                         [](const ::testing::TestParamInfo<SyncPolicy>& info) {
                           switch (info.param) {
                             case SyncPolicy::kNone:
                               return std::string("None");
                             case SyncPolicy::kBatch:
                               return std::string("Batch");
                             case SyncPolicy::kAlways:
                               return std::string("Always");
                           }
                           return std::string("Unknown");
                         });

TEST(RocksDbBlockIndexTest, SecondOpenWhileOpenIsUnavailableAndNamesPath) {
  TempDir dir;
  std::unique_ptr<BlockIndex> first = OpenOrDie(dir.path());
  ASSERT_NE(first, nullptr);
  absl::Status second = OpenStatus(dir.path());
  EXPECT_EQ(second.code(), absl::StatusCode::kUnavailable) << second;
  EXPECT_NE(second.message().find(absl::StrCat("another kvtierd holds the index at ", dir.path())),
            absl::string_view::npos)
      << second;
  first.reset();
  EXPECT_TRUE(OpenStatus(dir.path()).ok());
}

TEST(RocksDbBlockIndexTest, OtherFormatVersionIsFailedPrecondition) {
  TempDir dir;
  {
    std::unique_ptr<BlockIndex> index = OpenOrDie(dir.path());
    ASSERT_NE(index, nullptr);
    ASSERT_TRUE(index->Write(PutsOf(0, 3)).ok());
  }
  RawPut(dir.path(), "meta", kIndexFormatMetaKey, "3");
  absl::Status status = OpenStatus(dir.path());
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_NE(status.message().find(dir.path()), absl::string_view::npos) << status;
  EXPECT_NE(status.message().find("format version '3'"), absl::string_view::npos) << status;
  EXPECT_NE(status.message().find("format version '2'"), absl::string_view::npos) << status;
}

TEST(RocksDbBlockIndexTest, ForeignDatabaseIsFailedPrecondition) {
  TempDir dir;
  RawPut(dir.path(), rocksdb::kDefaultColumnFamilyName, "some", "thing", /*create=*/true);
  absl::Status status = OpenStatus(dir.path());
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_NE(status.message().find("not a kvtier index"), absl::string_view::npos) << status;
}

TEST(RocksDbBlockIndexTest, RecordsWithoutFormatVersionAreFailedPrecondition) {
  TempDir dir;
  for (const char* family : {"blocks", "namespaces", "meta"}) {
    RawPut(dir.path(), family, "", "", /*create=*/true);  // creates the three families
  }
  // Families exist and "blocks" holds a record, but there is no format version.
  absl::Status status = OpenStatus(dir.path());
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_NE(status.message().find("no format version"), absl::string_view::npos) << status;
}

TEST(RocksDbBlockIndexTest, EmptyIndexWithoutFormatVersionIsAdopted) {
  // Simulates a creation interrupted before the format version was written: a database with the
  // three families and nothing in them.
  TempDir empty;
  CreateEmptyFamilies(empty.path());
  std::unique_ptr<BlockIndex> index = OpenOrDie(empty.path());
  ASSERT_NE(index, nullptr);
  EXPECT_EQ(index->GetMeta(kIndexFormatMetaKey).value(), std::optional<std::string>("2"));
}

TEST(RocksDbBlockIndexTest, UndecodableEntriesAreSkippedAndCounted) {
  TempDir dir;
  {
    std::unique_ptr<BlockIndex> index = OpenOrDie(dir.path());
    ASSERT_NE(index, nullptr);
    ASSERT_TRUE(index->Write(PutsOf(0, 10)).ok());
    ASSERT_TRUE(index->PutNamespace(5, "five").ok());
  }
  std::string bad_version = EncodeBlockRecord(RecordFor(4));
  bad_version[0] = 9;
  RawPut(dir.path(), "blocks", EncodeBlockKey(KeyFor(4)), bad_version);
  RawPut(dir.path(), "blocks", EncodeBlockKey(KeyFor(6)), "short");
  RawPut(dir.path(), "blocks", "not a 36-byte key", EncodeBlockRecord(RecordFor(0)));
  RawPut(dir.path(), "namespaces", "12345", "bad id");

  std::unique_ptr<BlockIndex> index = OpenOrDie(dir.path());
  ASSERT_NE(index, nullptr);
  std::vector<BlockKey> keys;
  for (uint64_t id = 0; id < 10; ++id) keys.push_back(KeyFor(id));
  absl::StatusOr<std::vector<std::optional<BlockRecord>>> got = index->MultiGet(keys);
  ASSERT_TRUE(got.ok()) << got.status();
  for (uint64_t id = 0; id < 10; ++id) {
    if (id == 4 || id == 6) {
      EXPECT_FALSE((*got)[id].has_value()) << id;
    } else {
      ASSERT_TRUE((*got)[id].has_value()) << id;
      EXPECT_EQ(*(*got)[id], RecordFor(id));
    }
  }
  EXPECT_EQ(index->stats().decode_errors, 2u);

  EXPECT_EQ(Scan(*index), ExpectedScan({0, 1, 2, 3, 5, 7, 8, 9}));
  EXPECT_EQ(index->stats().decode_errors, 5u);  // + two values and one key

  EXPECT_EQ(Namespaces(*index), (std::map<NamespaceId, std::string>{{5, "five"}}));
  EXPECT_EQ(index->stats().decode_errors, 6u);
}

TEST(RocksDbBlockIndexTest, StatsCountOperations) {
  TempDir dir;
  {
    std::unique_ptr<BlockIndex> index = OpenOrDie(dir.path(), SyncPolicy::kBatch);
    ASSERT_NE(index, nullptr);
    EXPECT_EQ(index->stats().writes, 0u);
    ASSERT_TRUE(index->Write(PutsOf(0, 5)).ok());
    IndexBatch batch = PutsOf(5, 2);
    batch.deletes = {KeyFor(0), KeyFor(1), KeyFor(2)};
    ASSERT_TRUE(index->Write(batch).ok());
    ASSERT_TRUE(index->MultiGet({KeyFor(0), KeyFor(3), KeyFor(100)}).ok());
    EXPECT_EQ(index->stats().syncs, 0u);  // kBatch: writes do not sync
    ASSERT_TRUE(index->Sync().ok());
    ASSERT_TRUE(index->Sync().ok());
    const IndexStats s = index->stats();
    EXPECT_EQ(s.writes, 2u);
    EXPECT_EQ(s.puts, 7u);
    EXPECT_EQ(s.deletes, 3u);
    EXPECT_EQ(s.multiget_keys, 3u);
    EXPECT_EQ(s.syncs, 2u);
    EXPECT_EQ(s.decode_errors, 0u);
  }
  {
    std::unique_ptr<BlockIndex> index = OpenOrDie(dir.path(), SyncPolicy::kAlways);
    ASSERT_NE(index, nullptr);
    ASSERT_TRUE(index->Write(PutsOf(10, 1)).ok());
    ASSERT_TRUE(index->Write(PutsOf(11, 1)).ok());
    ASSERT_TRUE(index->PutNamespace(1, "x").ok());
    EXPECT_EQ(index->stats().writes, 2u);
    EXPECT_EQ(index->stats().syncs, 3u);  // kAlways: every write syncs
  }
  {
    std::unique_ptr<BlockIndex> index = OpenOrDie(dir.path(), SyncPolicy::kNone);
    ASSERT_NE(index, nullptr);
    ASSERT_TRUE(index->Write(PutsOf(12, 1)).ok());
    EXPECT_EQ(index->stats().syncs, 0u);
    ASSERT_TRUE(index->Sync().ok());  // an explicit Sync works under every policy
    EXPECT_EQ(index->stats().syncs, 1u);
  }
}

}  // namespace
}  // namespace kvtier::index
