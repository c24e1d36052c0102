// EventLog: sequence numbers, merging until a reader sees an event, the retained window and the
// lost ranges it reports, the barrier, listeners (told on the notifier thread, removable from
// their own call) and closing.
#include "daemon/service/event_log.h"

#include <atomic>
#include <chrono>
#include <thread>

#include "gtest/gtest.h"

namespace kvtier::service {
namespace {

store::StoreEvent Stored(index::NamespaceId ns, uint8_t id, absl::string_view origin = "e1") {
  store::StoreEvent e;
  e.kind = store::StoreEventKind::kStored;
  e.ns = ns;
  e.hash[0] = id;
  e.tier = index::Tier::kHost;
  e.block_bytes = 100;
  e.origin = origin;
  return e;
}

store::StoreEvent Moved(index::NamespaceId ns, uint8_t id) {
  store::StoreEvent e;
  e.kind = store::StoreEventKind::kMoved;
  e.ns = ns;
  e.hash[0] = id;
  e.tier = index::Tier::kHost;
  e.to_tier = index::Tier::kDisk;
  return e;
}

TEST(EventLogTest, MergesUntilReadAndNeverChangesWhatWasRead) {
  EventLog log(42, 100);
  EXPECT_EQ(log.incarnation(), 42u);
  EXPECT_EQ(log.last_sequence(), 0u);
  EXPECT_TRUE(log.Read(0, 10).events.empty());
  log.OnEvent(Stored(1, 1));
  log.OnEvent(Stored(1, 2));
  log.OnEvent(Stored(1, 3, "e2"));  // another origin: a new event
  log.OnEvent(Stored(2, 4, "e2"));  // another namespace: a new event
  log.OnEvent(Stored(2, 5, "e2"));
  EXPECT_EQ(log.last_sequence(), 3u);
  EventLog::Batch b = log.Read(0, 10);
  ASSERT_EQ(b.events.size(), 3u);
  EXPECT_EQ(b.events[0]->sequence, 1u);
  EXPECT_EQ(b.events[0]->hashes.size(), 2u);
  EXPECT_EQ(b.events[1]->hashes.size(), 1u);
  EXPECT_EQ(b.events[2]->hashes.size(), 2u);
  EXPECT_EQ(b.events[2]->origin, "e2");
  EXPECT_EQ(b.lost_last, 0u);
  // The last event was read: a matching event starts a new one.
  log.OnEvent(Stored(2, 6, "e2"));
  EXPECT_EQ(b.events[2]->hashes.size(), 2u);
  EXPECT_EQ(log.last_sequence(), 4u);
  b = log.Read(3, 10);
  ASSERT_EQ(b.events.size(), 1u);
  EXPECT_EQ(b.events[0]->sequence, 4u);
  // The barrier closes the last event too.
  log.OnEvent(Moved(2, 6));
  EXPECT_EQ(log.Barrier(), 5u);
  log.OnEvent(Moved(2, 7));
  EXPECT_EQ(log.last_sequence(), 6u);
  // Merging stops at the hash limit.
  for (size_t i = 0; i < EventLog::kMaxHashesPerEvent + 1; ++i) log.OnEvent(Stored(3, 9));
  b = log.Read(6, 10);
  ASSERT_EQ(b.events.size(), 2u);
  EXPECT_EQ(b.events[0]->hashes.size(), EventLog::kMaxHashesPerEvent);
  EXPECT_EQ(b.events[1]->hashes.size(), 1u);
  EXPECT_EQ(log.logged_store_events(), 8u + EventLog::kMaxHashesPerEvent + 1);
}

TEST(EventLogTest, ReportsWhatFellOutOfTheWindow) {
  EventLog log(1, 4);
  for (uint8_t i = 0; i < 10; ++i) {
    log.OnEvent(i % 2 ? Moved(1, i) : Stored(1, i));  // alternate kinds: no merging
  }
  EXPECT_EQ(log.last_sequence(), 10u);
  EventLog::Batch b = log.Read(0, 2);
  EXPECT_EQ(b.lost_first, 1u);
  EXPECT_EQ(b.lost_last, 6u);
  ASSERT_EQ(b.events.size(), 2u);
  EXPECT_EQ(b.events[0]->sequence, 7u);
  b = log.Read(8, 100);
  EXPECT_EQ(b.lost_last, 0u);
  ASSERT_EQ(b.events.size(), 2u);
  EXPECT_EQ(b.events[1]->sequence, 10u);
  EXPECT_TRUE(log.Read(10, 100).events.empty());
}

class CountingListener : public EventLog::Listener {
 public:
  explicit CountingListener(EventLog* log, bool remove_itself = false)
      : log_(log), remove_itself_(remove_itself) {}
  void OnEventsAvailable() override {
    calls_++;
    if (remove_itself_) log_->RemoveListener(this);  // must not deadlock
  }
  int calls() const { return calls_.load(); }

 private:
  EventLog* log_;
  bool remove_itself_;
  std::atomic<int> calls_{0};
};

bool WaitFor(const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

TEST(EventLogTest, ListenersAreToldAndMayLeaveFromTheirOwnCall) {
  EventLog log(1, 16);
  CountingListener stays(&log), leaves(&log, /*remove_itself=*/true);
  log.AddListener(&stays);
  log.AddListener(&leaves);
  EXPECT_EQ(log.listener_count(), 2u);
  log.OnEvent(Stored(1, 1));
  ASSERT_TRUE(WaitFor([&] { return stays.calls() >= 1 && leaves.calls() == 1; }));
  EXPECT_EQ(log.listener_count(), 1u);
  log.OnEvent(Moved(1, 1));
  ASSERT_TRUE(WaitFor([&] { return stays.calls() >= 2; }));
  EXPECT_EQ(leaves.calls(), 1);
  EXPECT_FALSE(log.closed());
  log.Close();
  EXPECT_TRUE(log.closed());
  ASSERT_TRUE(WaitFor([&] { return stays.calls() >= 3; }));
  log.RemoveListener(&stays);
  EXPECT_EQ(log.listener_count(), 0u);
}

}  // namespace
}  // namespace kvtier::service
