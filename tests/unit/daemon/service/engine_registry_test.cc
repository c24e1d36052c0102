// EngineRegistry and EngineRef: registration limits, the pool-file check between tenants, leases,
// tenant isolation of Enter, and the holds that Take waits for (every copy of a ref, every
// request), alone and from several threads. No test depends on timing: a Take that must wait is
// observed to have removed the engine and not returned while a hold exists.
#include "daemon/service/engine_registry.h"

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/testing/temp_dir.h"
#include "tests/unit/daemon/service/engine_fixture.h"

namespace kvtier::service {
namespace {

using ::kvtier::service::testing::MakeEngine;

class EngineRegistryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::make_unique<kvtier::testing::TempDir>(kvtier::testing::TempDir::Create().value());
  }

  // An engine `id` of `tenant` with a pool file of its own (or `pool_file` when given).
  std::shared_ptr<Engine> NewEngine(const std::string& id, const std::string& tenant,
                                    std::string pool_file = "") {
    if (pool_file.empty()) pool_file = "pool-" + id;
    absl::StatusOr<std::shared_ptr<Engine>> engine =
        MakeEngine(*dir_, id, tenant, /*ns=*/1, /*plane=*/nullptr, pool_file);
    EXPECT_TRUE(engine.ok()) << engine.status();
    return engine.ok() ? *engine : nullptr;
  }

  // Runs Take(id) on a thread of its own; `Done()` says it returned.
  class TakeThread {
   public:
    TakeThread(EngineRegistry& registry, std::string id)
        : thread_([this, &registry, id = std::move(id)] {
            taken_ = registry.Take(id, /*only_if_expired=*/false);
            done_.Notify();
          }) {}
    ~TakeThread() {
      if (thread_.joinable()) thread_.join();
    }
    bool Done() const { return done_.HasBeenNotified(); }
    std::shared_ptr<Engine> Join() {
      thread_.join();
      return taken_;
    }

   private:
    std::shared_ptr<Engine> taken_;
    absl::Notification done_;
    std::thread thread_;
  };

  // Waits until Take has removed `id` (it removes, then waits for the holds).
  static void AwaitRemoved(const EngineRegistry& registry, size_t size_after) {
    while (registry.size() != size_after) std::this_thread::yield();
  }

  std::unique_ptr<kvtier::testing::TempDir> dir_;
};

TEST_F(EngineRegistryTest, AddEnforcesBothLimitsNamingThem) {
  EngineRegistry registry({/*max_engines=*/3, /*max_engines_per_tenant=*/2});
  ASSERT_TRUE(registry.Add(NewEngine("a1", "alice")).ok());
  ASSERT_TRUE(registry.Add(NewEngine("a2", "alice")).ok());
  absl::Status third = registry.Add(NewEngine("a3", "alice"));
  EXPECT_EQ(third.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(third.message(),
            "this tenant has 2 engines registered (server.max_engines_per_tenant)");
  ASSERT_TRUE(registry.Add(NewEngine("b1", "bob")).ok());
  absl::Status full = registry.Add(NewEngine("c1", "carol"));
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(full.message(), "3 engines are registered (server.max_engines)");
  EXPECT_EQ(registry.size(), 3u);

  // Taking one makes room again, for its tenant too.
  ASSERT_NE(registry.Take("a1", /*only_if_expired=*/false), nullptr);
  EXPECT_TRUE(registry.Add(NewEngine("a3", "alice")).ok());
}

TEST_F(EngineRegistryTest, PoolFileOfAnotherTenantIsRefused) {
  EngineRegistry registry({});
  ASSERT_TRUE(registry.Add(NewEngine("a1", "alice", "shared-pool")).ok());
  // The same file (mapped again) for another tenant: refused, naming the file.
  absl::Status other = registry.Add(NewEngine("b1", "bob", "shared-pool"));
  EXPECT_EQ(other.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(other.message(), "pool file " + dir_->File("shared-pool") +
                                 " is registered by an engine of another tenant");
  // A hard link to it is the same file.
  ASSERT_EQ(link(dir_->File("shared-pool").c_str(), dir_->File("linked-pool").c_str()), 0);
  EXPECT_EQ(registry.Add(NewEngine("b2", "bob", "linked-pool")).code(),
            absl::StatusCode::kPermissionDenied);
  // The same tenant may register it again (an engine restarted next to its old registration).
  EXPECT_TRUE(registry.Add(NewEngine("a2", "alice", "shared-pool")).ok());
  EXPECT_EQ(registry.size(), 2u);
}

TEST_F(EngineRegistryTest, EnterIsScopedToTheTenantAndRenewsOnlyItsLease) {
  EngineRegistry registry({});
  ASSERT_TRUE(registry.Add(NewEngine("a1", "alice")).ok());
  const std::string alice = "alice", bob = "bob";

  EngineRef any = registry.Enter("a1");
  ASSERT_TRUE(any);
  EXPECT_EQ(any->id, "a1");
  EXPECT_EQ((*any).tenant, "alice");
  const absl::Time renewed = registry.ExpiresOf(*any);

  // Another tenant sees nothing and renews nothing.
  EXPECT_FALSE(registry.Enter("a1", &bob));
  EXPECT_EQ(registry.ExpiresOf(*any), renewed);
  EXPECT_TRUE(registry.Enter("a1", &alice));
  EXPECT_GE(registry.ExpiresOf(*any), renewed);
  EXPECT_FALSE(registry.Enter("nope"));

  // EnterChecked says why.
  absl::StatusOr<EngineRef> checked = registry.EnterChecked("a1", &bob);
  EXPECT_EQ(checked.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(checked.status().message(), "engine 'a1' belongs to another tenant");
  checked = registry.EnterChecked("nope", &alice);
  EXPECT_EQ(checked.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(checked.status().message(),
            "engine 'nope' is not registered (unregistered, lease expired, or daemon restarted)");
  EXPECT_EQ(registry.EnterChecked("", &alice).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.EnterChecked(std::string(65, 'x'), &alice).status().code(),
            absl::StatusCode::kInvalidArgument);
  checked = registry.EnterChecked("a1", &alice);
  ASSERT_TRUE(checked.ok()) << checked.status();
  EXPECT_EQ((*checked)->id, "a1");
}

TEST_F(EngineRegistryTest, ExpiredAndTakeOnlyIfExpiredFollowTheLease) {
  EngineRegistry registry({});
  std::shared_ptr<Engine> fresh = NewEngine("fresh", "alice");
  std::shared_ptr<Engine> stale = NewEngine("stale", "alice");
  stale->lease = absl::Seconds(-60);  // expired as it is added
  ASSERT_TRUE(registry.Add(fresh).ok());
  ASSERT_TRUE(registry.Add(stale).ok());
  const absl::Time fresh_expires = registry.ExpiresOf(*fresh);
  EXPECT_EQ(registry.Expired(absl::Now()), std::vector<std::string>{"stale"});
  EXPECT_EQ(registry.Expired(fresh_expires).size(), 1u);  // expiry is strictly before `now`
  EXPECT_EQ(registry.Expired(fresh_expires + absl::Nanoseconds(1)).size(), 2u);

  // A lease that is still running keeps the engine.
  EXPECT_EQ(registry.Take("fresh", /*only_if_expired=*/true), nullptr);
  EXPECT_EQ(registry.size(), 2u);
  EXPECT_EQ(registry.Take("stale", /*only_if_expired=*/true), stale);
  EXPECT_EQ(registry.Take("stale", /*only_if_expired=*/false), nullptr);
  EXPECT_EQ(registry.Take("fresh", /*only_if_expired=*/false), fresh);
  EXPECT_EQ(registry.size(), 0u);
}

TEST_F(EngineRegistryTest, EmptyAndMovedRefsHoldNothing) {
  EngineRegistry registry({});
  EngineRef empty;
  EXPECT_FALSE(empty);
  empty.reset();
  EngineRef copy_of_empty = empty;
  EXPECT_FALSE(copy_of_empty);

  ASSERT_TRUE(registry.Add(NewEngine("a1", "alice")).ok());
  EngineRef ref = registry.Enter("a1");
  EngineRef moved = std::move(ref);
  EXPECT_TRUE(moved);
  EXPECT_FALSE(ref);  // NOLINT(bugprone-use-after-move): a moved-from ref is empty
  moved.reset();
  EXPECT_FALSE(moved);
  moved.reset();  // twice is harmless
  // Nothing holds the engine: Take returns at once, on this thread.
  EXPECT_NE(registry.Take("a1", /*only_if_expired=*/false), nullptr);
}

TEST_F(EngineRegistryTest, TakeWaitsForTheLastCopyOfARef) {
  EngineRegistry registry({});
  ASSERT_TRUE(registry.Add(NewEngine("a1", "alice")).ok());
  ASSERT_TRUE(registry.Add(NewEngine("a2", "alice")).ok());
  EngineRef ref = registry.Enter("a1");
  ASSERT_TRUE(ref);
  // A copyable callback holding the ref, copied again: the hold lasts until the last copy goes.
  std::function<std::string()> callback = [ref] { return ref->id; };
  std::function<std::string()> copied = callback;
  EngineRef assigned;
  assigned = ref;
  ref.reset();
  callback = nullptr;

  TakeThread take(registry, "a1");
  AwaitRemoved(registry, 1);
  EXPECT_FALSE(registry.Enter("a1")) << "an engine being taken admits no new request";
  EXPECT_TRUE(registry.Enter("a2")) << "other engines are not held up";
  EXPECT_EQ(copied(), "a1");  // still usable while Take waits
  assigned.reset();
  EXPECT_FALSE(take.Done()) << "Take returned while a copy of the ref existed";
  copied = nullptr;
  std::shared_ptr<Engine> taken = take.Join();
  ASSERT_NE(taken, nullptr);
  EXPECT_EQ(taken->id, "a1");
}

TEST_F(EngineRegistryTest, TakeWaitsForEveryRequest) {
  EngineRegistry registry({});
  ASSERT_TRUE(registry.Add(NewEngine("a1", "alice")).ok());
  std::vector<EngineRef> requests;
  for (int i = 0; i < 3; ++i) requests.push_back(registry.Enter("a1"));
  TakeThread take(registry, "a1");
  AwaitRemoved(registry, 0);
  while (requests.size() > 1) {
    requests.pop_back();
    EXPECT_FALSE(take.Done()) << requests.size() << " requests still hold the engine";
  }
  requests.clear();
  EXPECT_NE(take.Join(), nullptr);
}

// Requests on several threads enter, copy and leave engines while other threads take and add
// them again: every Take returns only once no hold of its engine is left, and no hold ever sees
// an engine that a Take returned.
TEST_F(EngineRegistryTest, ConcurrentRequestsAndTakes) {
  constexpr int kEngines = 4;
  constexpr int kRequesters = 4;
  constexpr int kRounds = 200;
  EngineRegistry registry({});
  std::vector<std::shared_ptr<Engine>> engines;
  for (int e = 0; e < kEngines; ++e) {
    engines.push_back(NewEngine("e" + std::to_string(e), "alice"));
    ASSERT_TRUE(registry.Add(engines.back()).ok());
  }
  // Holds known to the test per engine: raised after Enter, lowered before the ref goes.
  std::vector<std::atomic<int>> live(kEngines);
  std::vector<std::atomic<bool>> taken(kEngines);
  std::atomic<bool> stop{false};
  std::atomic<int> violations{0};

  std::vector<std::thread> requesters;
  for (int t = 0; t < kRequesters; ++t) {
    requesters.emplace_back([&, t] {
      for (uint64_t i = t; !stop.load(); ++i) {
        const int e = static_cast<int>(i % kEngines);
        EngineRef ref = registry.Enter("e" + std::to_string(e));
        if (!ref) continue;
        live[e].fetch_add(1);
        if (taken[e].load()) violations.fetch_add(1);  // entered an engine that was returned
        EngineRef copy = ref;
        ref.reset();
        if (copy->id != "e" + std::to_string(e)) violations.fetch_add(1);
        live[e].fetch_sub(1);
      }
    });
  }
  std::vector<std::thread> takers;
  for (int e = 0; e < kEngines; ++e) {
    takers.emplace_back([&, e] {
      const std::string id = "e" + std::to_string(e);
      for (int round = 0; round < kRounds; ++round) {
        std::shared_ptr<Engine> engine = registry.Take(id, /*only_if_expired=*/false);
        if (engine == nullptr) {
          violations.fetch_add(1);
          continue;
        }
        taken[e].store(true);
        if (live[e].load() != 0) violations.fetch_add(1);  // returned under a hold
        taken[e].store(false);
        if (!registry.Add(std::move(engine)).ok()) violations.fetch_add(1);
      }
    });
  }
  for (std::thread& t : takers) t.join();
  stop.store(true);
  for (std::thread& t : requesters) t.join();
  EXPECT_EQ(violations.load(), 0);
  EXPECT_EQ(registry.size(), static_cast<size_t>(kEngines));
}

}  // namespace
}  // namespace kvtier::service
