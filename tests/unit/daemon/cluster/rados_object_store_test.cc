#include "daemon/cluster/rados_object_store.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/ceph_cluster.h"
#include "tests/testing/cold_blocks.h"

namespace kvtier::cluster {
namespace {

using ::kvtier::testing::CephCluster;
using ::kvtier::testing::MakeTestBlock;
using ::kvtier::testing::TestHash;

class RadosObjectStoreTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!CephCluster::BinariesPresent()) return;
    const auto t0 = std::chrono::steady_clock::now();
    absl::StatusOr<std::unique_ptr<CephCluster>> c = CephCluster::Start(1);
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = c->release();
    std::fprintf(stderr, "ceph cluster started in %.1f s\n",
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override {
    SKIP_IF_NO_CEPH();
    ASSERT_NE(cluster_, nullptr);
    store_ = Open();
  }

  static std::unique_ptr<RadosObjectStore> Open() {
    ClusterOptions o;
    o.conf_path = cluster_->conf_path();
    o.keyring = cluster_->keyring_path();
    o.client_id = cluster_->client_id();
    o.pool = cluster_->pool();
    o.osd_op_timeout = absl::Seconds(5);
    absl::StatusOr<std::unique_ptr<RadosObjectStore>> s = RadosObjectStore::Connect(o);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *std::move(s) : nullptr;
  }
  static BlockKey Key(uint64_t ns, uint64_t id) { return BlockKey{ns, TestHash(id)}; }
  static BlockAttrs Attrs() {
    BlockAttrs a;
    a.writer_node = "node-a";
    a.created_unix_micros = 1;
    return a;
  }
  absl::Time Soon() { return absl::Now() + absl::Seconds(20); }

  static CephCluster* cluster_;
  std::unique_ptr<RadosObjectStore> store_;
};
CephCluster* RadosObjectStoreTest::cluster_ = nullptr;

TEST_F(RadosObjectStoreTest, PutGetRoundTrip) {
  const std::vector<uint8_t> block = MakeTestBlock(1, 4096);
  ASSERT_TRUE(store_->Put("t1", Key(7, 1), block, Attrs()).ok());
  auto got = store_->Get("t1", {Key(7, 1)}, Soon());
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_TRUE((*got)[0].has_value());
  EXPECT_EQ((*got)[0]->ToVector(), block);
  EXPECT_EQ(store_->counters().get_hits.load(), 1u);
}

TEST_F(RadosObjectStoreTest, ExclusiveCreateTwiceIsOneObject) {
  const std::vector<uint8_t> block = MakeTestBlock(2, 4096);
  ASSERT_TRUE(store_->Put("t2", Key(7, 2), block, Attrs()).ok());
  std::unique_ptr<RadosObjectStore> other = Open();
  const absl::Status st = other->Put("t2", Key(7, 2), block, Attrs());
  EXPECT_TRUE(absl::IsAlreadyExists(st)) << st;
  EXPECT_EQ(other->counters().put_already_exists.load(), 1u);
  auto list = store_->List("t2");
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].name, ObjectName(Key(7, 2)));
  EXPECT_EQ((*list)[0].size, block.size());
}

TEST_F(RadosObjectStoreTest, CorruptedObjectIsAMiss) {
  std::vector<uint8_t> block = MakeTestBlock(3, 4096);
  ASSERT_TRUE(store_->Put("t3", Key(7, 3), block, Attrs()).ok());
  block[block.size() - 1] ^= 0xff;  // payload byte: the checksum no longer matches
  ASSERT_TRUE(store_->WriteRawForTest("t3", ObjectName(Key(7, 3)), block).ok());
  auto got = store_->Get("t3", {Key(7, 3)}, Soon());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_FALSE((*got)[0].has_value());
  EXPECT_EQ(store_->counters().verify_failures.load(), 1u);
}

TEST_F(RadosObjectStoreTest, WrongHashObjectIsAMiss) {
  // A valid block of key 4 stored under key 5's name: its xattrs name key 4.
  ASSERT_TRUE(store_->Put("t4", Key(7, 4), MakeTestBlock(4, 4096), Attrs()).ok());
  auto raw = cluster_->Rados({"-N", "t4", "get", ObjectName(Key(7, 4)), "/dev/null"});
  ASSERT_TRUE(raw.ok()) << raw.status();
  ASSERT_TRUE(store_->WriteRawForTest("t4", ObjectName(Key(7, 5)), MakeTestBlock(4, 4096)).ok());
  auto got = store_->Get("t4", {Key(7, 5)}, Soon());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_FALSE((*got)[0].has_value());
  EXPECT_EQ(store_->counters().verify_failures.load(), 1u);
}

// The identity a block's kvtier.id starts with: the namespace id (8 bytes, big-endian), the hash.
std::string Identity(const BlockKey& key) {
  std::string id;
  for (int shift = 56; shift >= 0; shift -= 8) id.push_back(static_cast<char>(key.ns >> shift));
  id.append(reinterpret_cast<const char*>(key.hash.data()), key.hash.size());
  return id;
}

TEST_F(RadosObjectStoreTest, APutSetsOneAttributeTheIdentityAndTheWritersRecord) {
  // Every attribute a write sets costs the OSD work on every write: one.
  ASSERT_TRUE(store_->Put("t10", Key(7, 10), MakeTestBlock(10, 4096), Attrs()).ok());
  const std::string name = ObjectName(Key(7, 10));
  absl::StatusOr<std::string> attrs = cluster_->Rados({"-N", "t10", "listxattr", name});
  ASSERT_TRUE(attrs.ok()) << attrs.status();
  EXPECT_EQ(*attrs, "kvtier.id\n");
  absl::StatusOr<std::string> id = cluster_->Rados({"-N", "t10", "getxattr", name, "kvtier.id"});
  ASSERT_TRUE(id.ok()) << id.status();
  // The identity, then codec 4, layout 8, checksum 4, created 8, then the writer's name.
  ASSERT_EQ(id->size(), 40u + 24u + 6u);
  EXPECT_EQ(id->substr(0, 40), Identity(Key(7, 10)));
  EXPECT_EQ(id->substr(64), "node-a");
}

TEST_F(RadosObjectStoreTest, AnObjectWithAnotherBlocksIdentityIsAMiss) {
  // Key 11's object, attribute and all, copied under key 12's name.
  ASSERT_TRUE(store_->Put("t11", Key(7, 11), MakeTestBlock(11, 4096), Attrs()).ok());
  ASSERT_TRUE(cluster_
                  ->Rados({"-N", "t11", "--target-nspace", "t11", "cp", ObjectName(Key(7, 11)),
                           ObjectName(Key(7, 12))})
                  .ok());
  auto got = store_->Get("t11", {Key(7, 12), Key(7, 11)}, Soon());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_FALSE((*got)[0].has_value());
  EXPECT_TRUE((*got)[1].has_value());
  EXPECT_EQ(store_->counters().verify_failures.load(), 1u);
}

TEST_F(RadosObjectStoreTest, AnObjectOfTheEarlierLayoutIsRead) {
  // Before one attribute, kvtier.id held the 40-byte identity alone.
  const std::vector<uint8_t> block = MakeTestBlock(13, 4096);
  ASSERT_TRUE(store_->Put("t13", Key(7, 13), block, Attrs()).ok());
  ASSERT_TRUE(cluster_
                  ->Rados({"-N", "t13", "setxattr", ObjectName(Key(7, 13)), "kvtier.id"},
                          Identity(Key(7, 13)))
                  .ok());
  auto got = store_->Get("t13", {Key(7, 13)}, Soon());
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_TRUE((*got)[0].has_value());
  EXPECT_EQ((*got)[0]->ToVector(), block);
  // A shorter identity is another block's.
  ASSERT_TRUE(cluster_
                  ->Rados({"-N", "t13", "setxattr", ObjectName(Key(7, 13)), "kvtier.id"},
                          Identity(Key(7, 13)).substr(0, 39))
                  .ok());
  got = store_->Get("t13", {Key(7, 13)}, Soon());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_FALSE((*got)[0].has_value());
}

TEST_F(RadosObjectStoreTest, ANeverUsedBlockIsListedAtItsWriteAndSparedWhenUsedSince) {
  const absl::Time before = absl::Now();
  ASSERT_TRUE(store_->Put("t14", Key(7, 14), MakeTestBlock(14, 4096), Attrs()).ok());
  ASSERT_TRUE(store_->Put("t14", Key(7, 15), MakeTestBlock(15, 4096), Attrs()).ok());
  const absl::Time after = absl::Now();
  auto listed = store_->ListBlocks(1000);
  ASSERT_TRUE(listed.ok()) << listed.status();
  std::vector<BlockObject> mine;
  for (const BlockObject& o : *listed) {
    if (o.rados_ns == "t14") mine.push_back(o);
  }
  ASSERT_EQ(mine.size(), 2u);
  std::sort(mine.begin(), mine.end(),
            [](const BlockObject& a, const BlockObject& b) { return a.name < b.name; });
  for (const BlockObject& o : mine) {
    EXPECT_FALSE(o.use_recorded) << o.name;
    // The write's time, to the microsecond (the OSD's clock is this machine's).
    EXPECT_GE(o.last_use_unix_micros, absl::ToUnixMicros(before) - 1000) << o.name;
    EXPECT_LE(o.last_use_unix_micros, absl::ToUnixMicros(after) + 1000) << o.name;
  }
  const BlockObject& used = mine[0].name == ObjectName(Key(7, 14)) ? mine[0] : mine[1];
  const BlockObject& unused = mine[0].name == ObjectName(Key(7, 14)) ? mine[1] : mine[0];
  // Used after the listing: the removal the listing planned spares it.
  ASSERT_TRUE(store_->Touch("t14", Key(7, 14), absl::ToUnixMicros(absl::Now())).ok());
  const absl::Status spared = store_->RemoveUnlessUsed(used);
  EXPECT_TRUE(absl::IsFailedPrecondition(spared)) << spared;
  EXPECT_TRUE(store_->RemoveUnlessUsed(unused).ok());
  auto ex = store_->Exists("t14", {Key(7, 14), Key(7, 15)}, Soon());
  ASSERT_TRUE(ex.ok()) << ex.status();
  EXPECT_TRUE((*ex)[0]);
  EXPECT_FALSE((*ex)[1]);
}

TEST_F(RadosObjectStoreTest, NamespacesIsolate) {
  ASSERT_TRUE(store_->Put("tenant-a", Key(7, 6), MakeTestBlock(6, 4096), Attrs()).ok());
  auto got = store_->Get("tenant-b", {Key(7, 6)}, Soon());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_FALSE((*got)[0].has_value());
  auto ex = store_->Exists("tenant-b", {Key(7, 6)}, Soon());
  ASSERT_TRUE(ex.ok()) << ex.status();
  EXPECT_FALSE((*ex)[0]);
  ex = store_->Exists("tenant-a", {Key(7, 6)}, Soon());
  ASSERT_TRUE(ex.ok()) << ex.status();
  EXPECT_TRUE((*ex)[0]);
}

TEST_F(RadosObjectStoreTest, BatchedGetWithMisses) {
  std::vector<BlockKey> keys;
  for (uint64_t id = 100; id < 116; ++id) {
    keys.push_back(Key(9, id));
    if (id % 2 == 0) {
      ASSERT_TRUE(store_->Put("t5", keys.back(), MakeTestBlock(id, 2048), Attrs()).ok());
    }
  }
  auto got = store_->Get("t5", keys, Soon());
  ASSERT_TRUE(got.ok()) << got.status();
  for (uint64_t id = 100; id < 116; ++id) {
    const auto& v = (*got)[id - 100];
    if (id % 2 == 0) {
      ASSERT_TRUE(v.has_value()) << id;
      EXPECT_EQ(v->ToVector(), MakeTestBlock(id, 2048));
    } else {
      EXPECT_FALSE(v.has_value()) << id;
    }
  }
  EXPECT_EQ(store_->counters().get_hits.load(), 8u);
  EXPECT_EQ(store_->counters().get_misses.load(), 8u);
  EXPECT_EQ(store_->counters().verify_failures.load(), 0u);
  ASSERT_TRUE(store_->Remove("t5", Key(9, 100)).ok());
  EXPECT_TRUE(absl::IsNotFound(store_->Remove("t5", Key(9, 100))));
}

TEST_F(RadosObjectStoreTest, PutManyStoresEachAsPutWould) {
  ASSERT_TRUE(store_->Put("t8", Key(9, 200), MakeTestBlock(200, 2048), Attrs()).ok());
  std::vector<std::vector<uint8_t>> blocks;
  for (uint64_t id = 200; id < 212; ++id) blocks.push_back(MakeTestBlock(id, 2048));
  blocks[5][blocks[5].size() - 1] ^= 0xff;  // fails verification: never stored
  std::vector<PutRequest> requests;
  for (uint64_t id = 200; id < 212; ++id) {
    requests.push_back(PutRequest{Key(9, id), blocks[id - 200], Attrs()});
  }
  const std::vector<absl::Status> st = store_->PutMany("t8", requests);
  ASSERT_EQ(st.size(), requests.size());
  EXPECT_TRUE(absl::IsAlreadyExists(st[0])) << st[0];
  EXPECT_TRUE(absl::IsInvalidArgument(st[5])) << st[5];
  std::vector<BlockKey> keys;
  for (const PutRequest& r : requests) keys.push_back(r.key);
  auto got = store_->Get("t8", keys, Soon());
  ASSERT_TRUE(got.ok()) << got.status();
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i == 5) {
      EXPECT_FALSE((*got)[i].has_value());
      continue;
    }
    if (i != 0) {
      EXPECT_TRUE(st[i].ok()) << i << ": " << st[i];
    }
    ASSERT_TRUE((*got)[i].has_value()) << i;
    EXPECT_EQ((*got)[i]->ToVector(), MakeTestBlock(200 + i, 2048));
  }
  EXPECT_EQ(store_->counters().puts.load(), 12u);  // the Put and 11 of PutMany
  EXPECT_EQ(store_->counters().put_already_exists.load(), 1u);
}

// The keys of the windowed-read tests: blocks of distinct content (and size) per id, some
// absent, some corrupted after they were stored; the list ends with a few keys again.
struct WindowedKeys {
  std::vector<BlockKey> keys;
  std::vector<uint64_t> ids;  // per key
  static bool Absent(uint64_t id) { return id % 5 == 0; }
  static bool Corrupted(uint64_t id) { return id % 7 == 0 && !Absent(id); }
  static uint32_t Payload(uint64_t id) { return 1024 + 512 * static_cast<uint32_t>(id % 6); }
};

TEST_F(RadosObjectStoreTest, WindowedGetDeliversEveryKeyOnceWithinItsWindow) {
  WindowedKeys w;
  for (uint64_t id = 300; id < 380; ++id) {
    w.keys.push_back(Key(9, id));
    w.ids.push_back(id);
    if (WindowedKeys::Absent(id)) continue;
    std::vector<uint8_t> block = MakeTestBlock(id, WindowedKeys::Payload(id));
    ASSERT_TRUE(store_->Put("t9", w.keys.back(), block, Attrs()).ok());
    if (WindowedKeys::Corrupted(id)) {
      block[block.size() - 1] ^= 0xff;
      ASSERT_TRUE(store_->WriteRawForTest("t9", ObjectName(w.keys.back()), block).ok());
    }
  }
  for (uint64_t id : {301, 302, 300, 301}) {  // repeats: read once per occurrence
    w.keys.push_back(Key(9, id));
    w.ids.push_back(id);
  }
  for (size_t depth : {size_t{1}, size_t{3}, size_t{16}, size_t{500}}) {
    SCOPED_TRACE(depth);
    std::unique_ptr<RadosObjectStore> store = Open();  // its own in-flight gauge and peak
    std::vector<int> delivered(w.keys.size());
    size_t hits = 0, over_window = 0;
    const absl::Status st = store->GetWindowed(
        "t9", w.keys, depth, Soon(), [&](size_t i, std::optional<ObjectBytes> bytes) {
          if (store->counters().reads_in_flight.load() > depth) ++over_window;
          EXPECT_LT(i, w.keys.size());
          if (i >= w.keys.size()) return true;
          ++delivered[i];
          const uint64_t id = w.ids[i];
          if (WindowedKeys::Absent(id) || WindowedKeys::Corrupted(id)) {
            EXPECT_FALSE(bytes.has_value()) << "key " << i << " (id " << id << ")";
          } else {
            EXPECT_TRUE(bytes.has_value()) << "key " << i << " (id " << id << ")";
            if (bytes.has_value()) {
              ++hits;
              EXPECT_EQ(bytes->ToVector(), MakeTestBlock(id, WindowedKeys::Payload(id)))
                  << "key " << i << " (id " << id << ") delivered another block's bytes";
            }
          }
          return true;
        });
    ASSERT_TRUE(st.ok()) << st;
    for (size_t i = 0; i < w.keys.size(); ++i) {
      EXPECT_EQ(delivered[i], 1) << "key " << i << " (id " << w.ids[i] << ") delivered "
                                 << delivered[i] << " times";
    }
    EXPECT_EQ(over_window, 0u);
    const uint64_t peak = store->counters().reads_in_flight_peak.load();
    EXPECT_LE(peak, std::min(depth, w.keys.size()));
    if (depth > 1) {
      EXPECT_GE(peak, 2u);  // more than one read at a time
    }
    EXPECT_EQ(store->counters().reads_in_flight.load(), 0u);
    EXPECT_EQ(store->counters().gets.load(), w.keys.size());
    EXPECT_EQ(store->counters().get_hits.load(), hits);
    EXPECT_EQ(store->counters().get_misses.load(), w.keys.size() - hits);
  }
}

TEST_F(RadosObjectStoreTest, WindowedGetStopsWhenTheConsumerSaysSo) {
  std::vector<BlockKey> keys;
  for (uint64_t id = 400; id < 440; ++id) {
    keys.push_back(Key(9, id));
    ASSERT_TRUE(store_->Put("t10", keys.back(), MakeTestBlock(id, 1024), Attrs()).ok());
  }
  constexpr size_t kDepth = 4, kStopAt = 5;
  std::vector<int> delivered(keys.size());
  size_t n = 0;
  const absl::Status st =
      store_->GetWindowed("t10", keys, kDepth, Soon(), [&](size_t i, std::optional<ObjectBytes> b) {
        EXPECT_TRUE(b.has_value()) << i;
        if (b.has_value()) {
          EXPECT_EQ(b->ToVector(), MakeTestBlock(400 + i, 1024)) << i;
        }
        ++delivered[i];
        return ++n < kStopAt;
      });
  ASSERT_TRUE(st.ok()) << st;
  // The reads in flight when the consumer stopped are still delivered; no other starts.
  EXPECT_GE(n, kStopAt);
  EXPECT_LE(n, kStopAt + kDepth - 1);
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_LE(delivered[i], 1) << i;
    if (i >= kStopAt + kDepth - 1) {
      EXPECT_EQ(delivered[i], 0) << "key " << i << " read after stop";
    }
  }
  EXPECT_EQ(store_->counters().gets.load(), n);
  EXPECT_EQ(store_->counters().reads_in_flight.load(), 0u);
}

TEST_F(RadosObjectStoreTest, LeaseIsExclusiveAndReacquirable) {
  std::unique_ptr<RadosObjectStore> other = Open();
  ASSERT_TRUE(store_->AcquireLease("t6", "node-a", absl::Seconds(30)).ok());
  ASSERT_TRUE(store_->AcquireLease("t6", "node-a", absl::Seconds(30)).ok());  // renewal
  absl::Status st = other->AcquireLease("t6", "node-b", absl::Seconds(30));
  EXPECT_TRUE(absl::IsFailedPrecondition(st)) << st;
  ASSERT_TRUE(store_->ReleaseLease("t6", "node-a").ok());
  ASSERT_TRUE(other->AcquireLease("t6", "node-b", absl::Seconds(1)).ok());
  // Expiry: node-b does not renew; after the duration node-a gets it.
  for (int i = 0; i < 100 && !st.ok(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    st = store_->AcquireLease("t6", "node-a", absl::Seconds(30));
  }
  EXPECT_TRUE(st.ok()) << st;
}

TEST_F(RadosObjectStoreTest, UsageAnswers) {
  auto u = store_->Usage();
  EXPECT_TRUE(u.ok()) << u.status();
}

// Last: stops the OSD, then restarts it.
TEST_F(RadosObjectStoreTest, ZDeadlineHonoredWhenOsdStopped) {
  ASSERT_TRUE(store_->Put("t7", Key(7, 70), MakeTestBlock(70, 4096), Attrs()).ok());
  ASSERT_TRUE(cluster_->StopOsd(0).ok());
  auto got = store_->Get("t7", {Key(7, 70), Key(7, 71)}, absl::Now() + absl::Seconds(2));
  EXPECT_TRUE(absl::IsDeadlineExceeded(got.status()) || absl::IsUnavailable(got.status()))
      << got.status();
  size_t delivered = 0;
  const std::vector<BlockKey> window_keys = {Key(7, 70), Key(7, 71), Key(7, 72), Key(7, 73)};
  const absl::Time t0 = absl::Now();
  const absl::Status windowed = store_->GetWindowed("t7", window_keys, 2, t0 + absl::Seconds(2),
                                                    [&](size_t, std::optional<ObjectBytes>) {
                                                      ++delivered;
                                                      return true;
                                                    });
  EXPECT_TRUE(absl::IsDeadlineExceeded(windowed) || absl::IsUnavailable(windowed)) << windowed;
  EXPECT_LT(absl::Now() - t0, absl::Seconds(4));
  EXPECT_EQ(delivered, 0u);
  EXPECT_EQ(store_->counters().reads_in_flight.load(), 0u);
  auto ex = store_->Exists("t7", {Key(7, 70)}, absl::Now() + absl::Seconds(2));
  EXPECT_TRUE(absl::IsDeadlineExceeded(ex.status()) || absl::IsUnavailable(ex.status()))
      << ex.status();
  const absl::Status put = store_->Put("t7", Key(7, 72), MakeTestBlock(72, 4096), Attrs());
  EXPECT_TRUE(absl::IsDeadlineExceeded(put) || absl::IsUnavailable(put)) << put;
  EXPECT_GE(store_->counters().timeouts.load(), 3u);
  ASSERT_TRUE(cluster_->StartOsd(0).ok());
}

// A pool at its quota (Put: ResourceExhausted at once, thanks to FULL_TRY) needs a ceph-mgr, which
// this binary's cluster does not start: integration.kvtierd_cluster_test
// (PoolAtQuotaPausesWriteBehindAndKeepsReads) starts one and checks it through kvtierd.

}  // namespace
}  // namespace kvtier::cluster
