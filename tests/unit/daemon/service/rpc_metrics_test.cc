// RpcMetrics: calls counted by method and code, latencies of unary calls only, names split into
// service and method, and made-up method names beyond the limit folded into "other".
#include "daemon/service/rpc_metrics.h"

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace kvtier::service {
namespace {

const RpcMetrics::Method* Find(const std::vector<RpcMetrics::Method>& all, const std::string& s,
                               const std::string& m) {
  for (const RpcMetrics::Method& x : all) {
    if (x.service == s && x.method == m) return &x;
  }
  return nullptr;
}

TEST(RpcMetricsTest, CountsCallsByMethodAndCode) {
  RpcMetrics metrics;
  EXPECT_TRUE(metrics.Read().empty());
  metrics.Record("/kvtier.v1.KvTier/Lookup", 0, 10);
  metrics.Record("/kvtier.v1.KvTier/Lookup", 0, 300);
  metrics.Record("/kvtier.v1.KvTier/Lookup", 5, 7);        // NOT_FOUND
  metrics.Record("/kvtier.v1.KvTier/WatchEvents", 1, -1);  // a stream: no latency
  metrics.Record("/kvtier.v1.KvTierAdmin/Verify", 99, 1);  // out of range: UNKNOWN
  const std::vector<RpcMetrics::Method> all = metrics.Read();
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].method, "Lookup");  // sorted by service, then method
  EXPECT_EQ(all[1].method, "WatchEvents");
  EXPECT_EQ(all[2].service, "kvtier.v1.KvTierAdmin");
  const RpcMetrics::Method* lookup = Find(all, "kvtier.v1.KvTier", "Lookup");
  ASSERT_NE(lookup, nullptr);
  EXPECT_EQ(lookup->codes[0], 2u);
  EXPECT_EQ(lookup->codes[5], 1u);
  EXPECT_EQ(lookup->latency.count, 3u);
  EXPECT_EQ(lookup->latency.sum_us, 317u);
  const RpcMetrics::Method* watch = Find(all, "kvtier.v1.KvTier", "WatchEvents");
  ASSERT_NE(watch, nullptr);
  EXPECT_EQ(watch->codes[1], 1u);
  EXPECT_EQ(watch->latency.count, 0u);
  EXPECT_EQ(Find(all, "kvtier.v1.KvTierAdmin", "Verify")->codes[2], 1u);
}

TEST(RpcMetricsTest, MadeUpMethodsBeyondTheLimitAreOther) {
  RpcMetrics metrics;
  for (size_t i = 0; i < RpcMetrics::kMaxMethods + 10; ++i) {
    metrics.Record(absl::StrCat("/x.Y/M", i), 12, 1);  // UNIMPLEMENTED
  }
  metrics.Record("not a method", 12, 1);
  const std::vector<RpcMetrics::Method> all = metrics.Read();
  EXPECT_EQ(all.size(), RpcMetrics::kMaxMethods + 1);
  const RpcMetrics::Method* other = Find(all, "other", "other");
  ASSERT_NE(other, nullptr);
  EXPECT_EQ(other->codes[12], 11u);
}

TEST(RpcMetricsTest, ConcurrentRecordsAllCount) {
  RpcMetrics metrics;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&metrics, t] {
      for (int i = 0; i < 10000; ++i) {
        metrics.Record(absl::StrCat("/kvtier.v1.KvTier/M", (i + t) % 8), 0, i % 100);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  uint64_t calls = 0, samples = 0;
  for (const RpcMetrics::Method& m : metrics.Read()) {
    calls += m.codes[0];
    samples += m.latency.count;
  }
  EXPECT_EQ(calls, 40000u);
  EXPECT_EQ(samples, 40000u);
}

}  // namespace
}  // namespace kvtier::service
