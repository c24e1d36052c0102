// WatchEvents against a real kvtierd: a stream reports offloads (with engine, size and
// namespace), moves to disk and namespace clears with increasing sequence numbers of the daemon's
// incarnation; selectors and tenants filter; a client resumes after a sequence, learns what fell
// out of the replay window or came from another incarnation, bootstraps from a snapshot that
// lines up with the live events; SIGTERM ends streams with UNAVAILABLE.
#include <condition_variable>
#include <functional>
#include <mutex>
#include <set>

#include "tests/integration/daemon_fixture.h"

namespace kvtier::integration {
namespace {

using KvtierdEventsTest = DaemonFixture;

// A WatchEvents stream read on its own thread.
class Watcher {
 public:
  Watcher(v1::KvTier::Stub& stub, const v1::WatchEventsRequest& req) {
    ctx_.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    reader_ = stub.WatchEvents(&ctx_, req);
    thread_ = std::thread([this] {
      v1::WatchEventsResponse resp;
      while (reader_->Read(&resp)) {
        std::lock_guard<std::mutex> lock(mu_);
        for (const v1::Event& e : resp.events()) events_.push_back(e);
        cv_.notify_all();
      }
      grpc::Status st = reader_->Finish();
      std::lock_guard<std::mutex> lock(mu_);
      status_ = st;
      done_ = true;
      cv_.notify_all();
    });
  }
  ~Watcher() {
    ctx_.TryCancel();
    thread_.join();
  }

  // Waits up to 20 s until `pred` holds for the events so far (or the stream ends).
  bool WaitFor(const std::function<bool(const std::vector<v1::Event>&)>& pred) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(20), [&] { return pred(events_) || done_; }) &&
           pred(events_);
  }
  bool WaitForCount(size_t n) {
    return WaitFor([n](const auto& events) { return events.size() >= n; });
  }
  // Waits for the stream's end; its status.
  grpc::Status Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::seconds(20), [&] { return done_; });
    return done_ ? status_ : grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "still running");
  }
  std::vector<v1::Event> events() {
    std::lock_guard<std::mutex> lock(mu_);
    return events_;
  }

 private:
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReader<v1::WatchEventsResponse>> reader_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<v1::Event> events_;
  grpc::Status status_;
  bool done_ = false;
};

v1::WatchEventsRequest After(uint64_t sequence, uint64_t incarnation = 0) {
  v1::WatchEventsRequest req;
  req.set_start(v1::WATCH_START_AFTER_SEQUENCE);
  req.set_after_sequence(sequence);
  req.set_incarnation_id(incarnation);
  return req;
}

uint64_t Incarnation(v1::KvTier::Stub& stub) {
  grpc::ClientContext ctx;
  v1::HelloResponse resp;
  EXPECT_TRUE(stub.Hello(DaemonFixture::Context(&ctx), v1::HelloRequest(), &resp).ok());
  return resp.incarnation_id();
}

// Every hash of the BlockStored events (of `cause`, any when unspecified) in `events`.
std::set<std::string> StoredHashes(const std::vector<v1::Event>& events,
                                   v1::StoreCause cause = v1::STORE_CAUSE_UNSPECIFIED) {
  std::set<std::string> out;
  for (const v1::Event& e : events) {
    if (!e.has_block_stored()) continue;
    if (cause != v1::STORE_CAUSE_UNSPECIFIED && e.block_stored().cause() != cause) continue;
    out.insert(e.block_stored().block_hashes().begin(), e.block_stored().block_hashes().end());
  }
  return out;
}

std::set<std::string> ChainHashes(uint64_t chain, uint32_t n) {
  std::set<std::string> out;
  for (uint32_t i = 0; i < n; ++i) out.insert(Hash(chain, i));
  return out;
}

TEST_F(KvtierdEventsTest, AStreamReportsOffloadsMovesAndClears) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  const uint64_t incarnation = Incarnation(*stub_);
  Watcher watcher(*stub_, After(0, incarnation));  // everything of this incarnation
  TestEngine engine(dir_->File("pool-a"), 32);
  for (uint32_t i = 0; i < 8; ++i) engine.Fill(i, 100 + i);
  const v1::RegisterEngineResponse reg = Register(*stub_, engine.Request("team-a"));
  ASSERT_EQ(Offload(*stub_, reg.engine_id(), 1, 0, 8).stored_pages(), 8u);
  ASSERT_TRUE(watcher.WaitFor([](const auto& ev) { return StoredHashes(ev).size() == 8; }));
  const v1::Event stored = watcher.events().front();
  EXPECT_EQ(stored.incarnation_id(), incarnation);
  EXPECT_EQ(stored.sequence(), 1u);
  EXPECT_EQ(stored.namespace_id(), reg.namespace_id());
  EXPECT_EQ(stored.ns().tenant(), "team-a");
  EXPECT_EQ(stored.ns().model(), "test-model");
  EXPECT_GT(stored.time().seconds(), 0);
  EXPECT_EQ(stored.block_stored().tier(), v1::TIER_HOST);
  EXPECT_EQ(stored.block_stored().cause(), v1::STORE_CAUSE_OFFLOAD);
  EXPECT_EQ(stored.block_stored().engine_id(), reg.engine_id());
  EXPECT_EQ(stored.block_stored().block_bytes(), reg.cold_block_bytes());
  EXPECT_EQ(StoredHashes(watcher.events()), ChainHashes(1, 8));

  // Drain with flush_to_disk copies the blocks to disk and keeps them in the host tier: the
  // fastest tier holding each does not change, so no event is reported and lookups still say
  // host.
  auto admin = v1::KvTierAdmin::NewStub(channel_);
  {
    grpc::ClientContext ctx;
    v1::DrainRequest req;
    req.set_flush_to_disk(true);
    v1::DrainResponse resp;
    ASSERT_TRUE(admin->Drain(Context(&ctx), req, &resp).ok());
    EXPECT_EQ(resp.flushed_blocks(), 8u);
  }
  {
    const v1::LookupResponse look = Lookup(*stub_, reg.engine_id(), 1, 8);
    ASSERT_EQ(look.tiers_size(), 8);
    for (int i = 0; i < 8; ++i) EXPECT_EQ(look.tiers(i), v1::TIER_HOST);
  }
  // Evicting the host tier moves every block to disk (the copies are there already): the events
  // say so, and lookups agree.
  {
    grpc::ClientContext ctx;
    v1::EvictRequest req;
    req.mutable_namespaces()->set_namespace_id(reg.namespace_id());
    req.set_tier(v1::TIER_HOST);
    req.set_block_count(8);
    v1::EvictResponse resp;
    ASSERT_TRUE(admin->Evict(Context(&ctx), req, &resp).ok());
    EXPECT_EQ(resp.demoted_blocks(), 8u);
  }
  auto moved = [](const std::vector<v1::Event>& ev) {
    std::set<std::string> out;
    for (const v1::Event& e : ev) {
      if (!e.has_block_moved()) continue;
      EXPECT_EQ(e.block_moved().from_tier(), v1::TIER_HOST);
      EXPECT_EQ(e.block_moved().to_tier(), v1::TIER_DISK);
      out.insert(e.block_moved().block_hashes().begin(), e.block_moved().block_hashes().end());
    }
    return out;
  };
  ASSERT_TRUE(watcher.WaitFor([&](const auto& ev) { return moved(ev).size() == 8; }));
  EXPECT_EQ(moved(watcher.events()), ChainHashes(1, 8));
  const v1::LookupResponse look = Lookup(*stub_, reg.engine_id(), 1, 8);
  ASSERT_EQ(look.tiers_size(), 8);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(look.tiers(i), v1::TIER_DISK);

  // Clear: one NamespaceCleared with the count.
  {
    grpc::ClientContext ctx;
    v1::ClearRequest req;
    req.mutable_namespaces()->set_namespace_id(reg.namespace_id());
    v1::ClearResponse resp;
    ASSERT_TRUE(admin->Clear(Context(&ctx), req, &resp).ok());
    EXPECT_EQ(resp.removed_blocks(), 8u);
  }
  ASSERT_TRUE(watcher.WaitFor(
      [](const auto& ev) { return !ev.empty() && ev.back().has_namespace_cleared(); }));
  const std::vector<v1::Event> events = watcher.events();
  EXPECT_EQ(events.back().namespace_cleared().removed_blocks(), 8u);
  EXPECT_EQ(events.back().namespace_id(), reg.namespace_id());
  for (size_t i = 1; i < events.size(); ++i) {
    EXPECT_GT(events[i].sequence(), events[i - 1].sequence());
    EXPECT_EQ(events[i].incarnation_id(), incarnation);
  }
  EXPECT_EQ(StopDaemon(SIGTERM), 0) << Log();
}

TEST_F(KvtierdEventsTest, SelectorsChooseNamespaces) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  TestEngine a(dir_->File("pool-a"), 8), b(dir_->File("pool-b"), 8);
  const v1::RegisterEngineResponse ra = Register(*stub_, a.Request("team-a"));
  const v1::RegisterEngineResponse rb = Register(*stub_, b.Request("team-b"));
  v1::WatchEventsRequest only_a = After(0);
  only_a.mutable_namespaces()->set_namespace_id(ra.namespace_id());
  v1::WatchEventsRequest only_b = After(0);
  only_b.mutable_namespaces()->mutable_match()->set_tenant("team-b");
  Watcher wa(*stub_, only_a), wb(*stub_, only_b), all(*stub_, After(0));
  ASSERT_EQ(Offload(*stub_, ra.engine_id(), 1, 0, 4).stored_pages(), 4u);
  ASSERT_EQ(Offload(*stub_, rb.engine_id(), 2, 0, 3).stored_pages(), 3u);
  ASSERT_TRUE(all.WaitFor([](const auto& ev) { return StoredHashes(ev).size() == 7; }));
  ASSERT_TRUE(wa.WaitFor([](const auto& ev) { return StoredHashes(ev).size() >= 4; }));
  ASSERT_TRUE(wb.WaitFor([](const auto& ev) { return StoredHashes(ev).size() >= 3; }));
  EXPECT_EQ(StoredHashes(wa.events()), ChainHashes(1, 4));
  EXPECT_EQ(StoredHashes(wb.events()), ChainHashes(2, 3));
  for (const v1::Event& e : wb.events()) EXPECT_EQ(e.namespace_id(), rb.namespace_id());

  v1::WatchEventsRequest unknown;
  unknown.mutable_namespaces()->set_namespace_id(12345);
  Watcher bad(*stub_, unknown);
  EXPECT_EQ(bad.Wait().error_code(), grpc::StatusCode::NOT_FOUND);
  v1::WatchEventsRequest all_false;
  all_false.mutable_namespaces()->set_all(false);
  Watcher bad2(*stub_, all_false);
  EXPECT_EQ(bad2.Wait().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  v1::WatchEventsRequest too_big;
  too_big.set_max_batch_events(5000);
  Watcher bad3(*stub_, too_big);
  EXPECT_EQ(bad3.Wait().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(KvtierdEventsTest, ResumeReplayWindowIncarnationAndSnapshot) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon({"--set=events.retain=8"}));
  const uint64_t incarnation = Incarnation(*stub_);
  TestEngine a(dir_->File("pool-a"), 8), b(dir_->File("pool-b"), 8);
  const v1::RegisterEngineResponse ra = Register(*stub_, a.Request());
  const v1::RegisterEngineResponse rb = Register(*stub_, b.Request());
  ASSERT_EQ(ra.namespace_id(), rb.namespace_id());
  // Alternating engines: each offload is its own event (another engine_id), 20 in all.
  for (uint32_t round = 0; round < 10; ++round) {
    ASSERT_EQ(Offload(*stub_, ra.engine_id(), 100 + round, 0, 2).stored_pages(), 2u);
    ASSERT_EQ(Offload(*stub_, rb.engine_id(), 200 + round, 0, 2).stored_pages(), 2u);
  }
  // From the start: events 1..12 are gone, 13..20 follow.
  {
    Watcher w(*stub_, After(0, incarnation));
    ASSERT_TRUE(w.WaitForCount(9));
    const std::vector<v1::Event> ev = w.events();
    ASSERT_TRUE(ev[0].has_events_lost());
    EXPECT_EQ(ev[0].events_lost().reason(), v1::LOSS_REASON_REPLAY_WINDOW_EXCEEDED);
    EXPECT_EQ(ev[0].events_lost().first_sequence(), 1u);
    EXPECT_EQ(ev[0].events_lost().last_sequence(), 12u);
    for (size_t i = 1; i < 9; ++i) EXPECT_EQ(ev[i].sequence(), 12 + i);
    EXPECT_EQ(ev[8].block_stored().engine_id(), rb.engine_id());
  }
  // Resuming inside the window: exactly what came after.
  {
    Watcher w(*stub_, After(17, incarnation));
    ASSERT_TRUE(w.WaitForCount(3));
    const std::vector<v1::Event> ev = w.events();
    EXPECT_EQ(ev[0].sequence(), 18u);
    EXPECT_EQ(ev[2].sequence(), 20u);
    EXPECT_EQ(StoredHashes(ev).size(), 6u);
  }
  // Another incarnation's sequence is void: said first, then this incarnation's events.
  {
    Watcher w(*stub_, After(17, incarnation ^ 1));
    ASSERT_TRUE(w.WaitForCount(2));
    const std::vector<v1::Event> ev = w.events();
    ASSERT_TRUE(ev[0].has_events_lost());
    EXPECT_EQ(ev[0].events_lost().reason(), v1::LOSS_REASON_INCARNATION_CHANGED);
  }
  // A sequence beyond the last is an error.
  {
    Watcher w(*stub_, After(1000, incarnation));
    EXPECT_EQ(w.Wait().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  // A snapshot reports all 40 blocks, then completes at sequence 20, then live events follow.
  v1::WatchEventsRequest snap;
  snap.set_start(v1::WATCH_START_SNAPSHOT);
  snap.set_max_batch_events(1);
  Watcher w(*stub_, snap);
  ASSERT_TRUE(
      w.WaitFor([](const auto& ev) { return !ev.empty() && ev.back().has_snapshot_complete(); }));
  std::vector<v1::Event> ev = w.events();
  EXPECT_EQ(ev.back().sequence(), 20u);
  EXPECT_EQ(ev.back().snapshot_complete().blocks(), 40u);
  std::set<std::string> expected;
  for (uint32_t round = 0; round < 10; ++round) {
    for (uint64_t chain : {100 + round, 200 + round}) {
      for (const std::string& h : ChainHashes(chain, 2)) expected.insert(h);
    }
  }
  EXPECT_EQ(StoredHashes(ev, v1::STORE_CAUSE_SNAPSHOT), expected);
  for (size_t i = 0; i + 1 < ev.size(); ++i) EXPECT_EQ(ev[i].sequence(), 0u);
  ASSERT_EQ(Offload(*stub_, ra.engine_id(), 300, 0, 1).stored_pages(), 1u);
  ASSERT_TRUE(w.WaitFor([](const auto& ev) { return !ev.empty() && ev.back().sequence() == 21; }));
  EXPECT_EQ(w.events().back().block_stored().cause(), v1::STORE_CAUSE_OFFLOAD);
}

TEST_F(KvtierdEventsTest, AdminEvictMovesOrDropsAndSaysSo) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  TestEngine engine(dir_->File("pool-a"), 16);
  const v1::RegisterEngineResponse reg = Register(*stub_, engine.Request());
  ASSERT_EQ(Offload(*stub_, reg.engine_id(), 1, 0, 10).stored_pages(), 10u);
  Watcher w(*stub_, After(0));
  auto admin = v1::KvTierAdmin::NewStub(channel_);
  auto evict = [&](const v1::EvictRequest& req, v1::EvictResponse* resp) {
    grpc::ClientContext ctx;
    return admin->Evict(Context(&ctx), req, resp);
  };
  v1::EvictRequest req;
  v1::EvictResponse resp;
  EXPECT_EQ(evict(req, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);  // no selector
  req.mutable_namespaces()->set_namespace_id(reg.namespace_id());
  EXPECT_EQ(evict(req, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);  // no amount
  // Three least recently used blocks leave the host tier for disk.
  req.set_tier(v1::TIER_HOST);
  req.set_block_count(3);
  ASSERT_TRUE(evict(req, &resp).ok());
  EXPECT_EQ(resp.evicted_blocks(), 3u);
  EXPECT_EQ(resp.demoted_blocks(), 3u);
  // Two named blocks leave the cache; an unknown one is not found.
  v1::EvictRequest by_hash;
  by_hash.mutable_namespaces()->set_namespace_id(reg.namespace_id());
  for (uint32_t i : {8u, 9u}) by_hash.mutable_hashes()->add_hashes(Hash(1, i));
  by_hash.mutable_hashes()->add_hashes(Hash(7, 7));
  ASSERT_TRUE(evict(by_hash, &resp).ok());
  ASSERT_EQ(resp.results_size(), 3);
  EXPECT_EQ(resp.results(0).code(), v1::ITEM_CODE_OK);
  EXPECT_EQ(resp.results(2).code(), v1::ITEM_CODE_NOT_FOUND);
  EXPECT_EQ(resp.evicted_blocks(), 2u);
  ASSERT_TRUE(w.WaitFor([](const auto& ev) {
    size_t moved = 0, removed = 0;
    for (const v1::Event& e : ev) {
      if (e.has_block_moved()) moved += e.block_moved().block_hashes_size();
      if (e.has_block_removed()) removed += e.block_removed().block_hashes_size();
    }
    return moved == 3 && removed == 2;
  }));
  for (const v1::Event& e : w.events()) {
    if (e.has_block_removed()) {
      EXPECT_EQ(e.block_removed().cause(), v1::REMOVE_CAUSE_ADMIN_EVICT);
    }
  }
  const v1::LookupResponse look = Lookup(*stub_, reg.engine_id(), 1, 10);
  ASSERT_EQ(look.hit_pages(), 8u);
  EXPECT_EQ(look.tiers(0), v1::TIER_DISK);
  EXPECT_EQ(look.tiers(3), v1::TIER_HOST);
}

TEST_F(KvtierdEventsTest, ANowStreamSeesTheNextOffloadOfTheSameEngine) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  TestEngine engine(dir_->File("pool-a"), 8);
  const v1::RegisterEngineResponse reg = Register(*stub_, engine.Request());
  // No stream is open: the log's last event stays open for merging.
  ASSERT_EQ(Offload(*stub_, reg.engine_id(), 1, 0, 2).stored_pages(), 2u);
  Watcher w(*stub_, v1::WatchEventsRequest());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the stream has started
  ASSERT_EQ(Offload(*stub_, reg.engine_id(), 2, 0, 2).stored_pages(), 2u);
  ASSERT_TRUE(w.WaitFor([](const auto& ev) { return StoredHashes(ev).size() == 2; }));
  EXPECT_EQ(StoredHashes(w.events()), ChainHashes(2, 2));
}

TEST_F(KvtierdEventsTest, SigtermEndsStreamsWithUnavailable) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  Watcher w(*stub_, v1::WatchEventsRequest());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the stream is established
  EXPECT_EQ(StopDaemon(SIGTERM), 0) << Log();
  EXPECT_EQ(w.Wait().error_code(), grpc::StatusCode::UNAVAILABLE);
}

}  // namespace
}  // namespace kvtier::integration
