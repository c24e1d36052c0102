// Fairness between engines in kvtierd (the service's FairScheduler): a small request of one
// engine is served while another engine's 4096-page batch is still running; a batch done in
// turns keeps the results in item order, the stop at the first miss and the check for a repeated
// destination of one done at once; an admin Drain waits for every turn of a running batch; a call
// cancelled while it waits for a worker still does not run and releases its engine. Behaviour,
// not speed: every ordering is observed through RPCs (what a Lookup sees), never by a clock.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>

#include "tests/integration/daemon_fixture.h"

namespace kvtier::integration {
namespace {

using FairnessTest = DaemonFixture;

constexpr uint32_t kBatch = 4096;  // the most items one request may carry

// Pages [0, n) of `engine`: 16 pages of N(0, 1) values from `seed`, repeated.
void FillPages(TestEngine& engine, uint32_t n, uint64_t seed) {
  for (uint32_t i = 0; i < n; ++i) {
    if (i < 16) {
      engine.Fill(i, seed + i);
    } else {
      std::memcpy(engine.page(i), engine.page(i % 16), engine.page_bytes());
    }
  }
}

// An Offload in flight on the client's callback API.
class AsyncOffload {
 public:
  // Offloads pages [0, pages) of `engine_id` under chain `chain`.
  AsyncOffload(v1::KvTier::Stub& stub, const std::string& engine_id, uint64_t chain,
               uint32_t pages) {
    req_.set_engine_id(engine_id);
    for (uint32_t i = 0; i < pages; ++i) {
      v1::OffloadItem* item = req_.add_items();
      item->set_block_hash(Hash(chain, i));
      item->set_page_index(i);
    }
    ctx_.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
    stub.async()->Offload(&ctx_, &req_, &resp_, [this](grpc::Status st) {
      std::lock_guard<std::mutex> lock(mu_);
      status_ = std::move(st);
      done_ = true;
      cv_.notify_all();
    });
  }
  ~AsyncOffload() { Wait(); }

  bool done() {
    std::lock_guard<std::mutex> lock(mu_);
    return done_;
  }
  // Waits for the response; its status.
  grpc::Status Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return done_; });
    return status_;
  }
  const v1::OffloadResponse& response() const { return resp_; }

 private:
  grpc::ClientContext ctx_;
  v1::OffloadRequest req_;
  v1::OffloadResponse resp_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  grpc::Status status_;
};

// Waits (polling Lookup, 20 s at most) until the first block of `chain` is visible: a batch
// offloading it has begun its first turn. False when `batch` ended first or the time ran out.
bool WaitUntilRunning(v1::KvTier::Stub& stub, const std::string& engine_id, uint64_t chain,
                      AsyncOffload& batch) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    if (Lookup(stub, engine_id, chain, 1).hit_pages() == 1) return !batch.done();
    if (batch.done()) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

TEST_F(FairnessTest, AnotherEnginesSmallRequestFinishesWhileALargeBatchRuns) {
  // One worker: before the scheduler, the one-page Onboard waited behind the whole batch.
  StartDaemon({"--set=server.workers=1"});
  TestEngine bulk(dir_->File("pool-bulk"), kBatch);
  FillPages(bulk, kBatch, 1);
  TestEngine small(dir_->File("pool-small"), 4);
  small.Fill(0, 7);
  const v1::RegisterEngineResponse bulk_reg = Register(*stub_, bulk.Request());
  const v1::RegisterEngineResponse small_reg = Register(*stub_, small.Request());
  ASSERT_EQ(Offload(*stub_, small_reg.engine_id(), 2, 0, 1).stored_pages(), 1u);

  AsyncOffload batch(*stub_, bulk_reg.engine_id(), 1, kBatch);
  ASSERT_TRUE(WaitUntilRunning(*stub_, bulk_reg.engine_id(), 1, batch))
      << "the batch did not start, or ended before the small request was sent";
  const v1::OnboardResponse one = Onboard(*stub_, small_reg.engine_id(), 2, 1, 1);
  // Right after the small request's answer: how far the other engine's batch has come.
  const uint32_t batch_visible = Lookup(*stub_, bulk_reg.engine_id(), 1, kBatch).hit_pages();
  const bool batch_answered = batch.done();
  EXPECT_EQ(one.onboarded_pages(), 1u);
  EXPECT_TRUE(small.Bytes(1) == small.RoundTrip(0));
  EXPECT_LT(batch_visible, kBatch) << "the one-page Onboard waited for the other engine's batch";
  EXPECT_FALSE(batch_answered) << "the other engine's batch was answered first";

  const grpc::Status st = batch.Wait();
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(batch.response().stored_pages(), kBatch);
  EXPECT_EQ(Lookup(*stub_, bulk_reg.engine_id(), 1, kBatch).hit_pages(), kBatch);
}

TEST_F(FairnessTest, OnboardInTurnsKeepsOrderStopsAtTheFirstMissAndRefusesARepeatedPage) {
  // One item per turn and two workers: every item of a request is a turn of its own.
  StartDaemon({"--set=server.workers=2", "--set=server.worker_turn_ms=0"});
  TestEngine engine(dir_->File("pool-a"), 128);
  for (uint32_t i = 0; i < 64; ++i) engine.Fill(i, 500 + i);
  const v1::RegisterEngineResponse reg = Register(*stub_, engine.Request());
  ASSERT_EQ(Offload(*stub_, reg.engine_id(), 3, 0, 64).stored_pages(), 64u);
  const std::vector<uint8_t> zeros(engine.page_bytes(), 0);

  // Chain 3 into pages 64..127; item 40 names a block that is not cached.
  v1::OnboardRequest req;
  req.set_engine_id(reg.engine_id());
  for (uint32_t i = 0; i < 64; ++i) {
    v1::OnboardItem* item = req.add_items();
    item->set_block_hash(i == 40 ? Hash(99, 0) : Hash(3, i));
    item->set_page_index(64 + i);
  }
  {
    grpc::ClientContext ctx;
    v1::OnboardResponse resp;
    ASSERT_TRUE(stub_->Onboard(Context(&ctx), req, &resp).ok());
    ASSERT_EQ(resp.results_size(), 64);
    for (int i = 0; i < 64; ++i) {
      const v1::ItemCode want = i < 40    ? v1::ITEM_CODE_OK
                                : i == 40 ? v1::ITEM_CODE_NOT_FOUND
                                          : v1::ITEM_CODE_SKIPPED;
      EXPECT_EQ(resp.results(i).code(), want) << "item " << i;
    }
    EXPECT_EQ(resp.onboarded_pages(), 40u);
    EXPECT_EQ(resp.hot_bytes_written(), 40 * engine.page_bytes());
    for (uint32_t i = 0; i < 64; ++i) {
      if (i < 40) {
        EXPECT_TRUE(engine.Bytes(64 + i) == engine.RoundTrip(i)) << "page " << 64 + i;
      } else {
        EXPECT_TRUE(engine.Bytes(64 + i) == zeros) << "page " << 64 + i << " was written";
      }
    }
  }

  // Past the miss, with item 50 aimed at item 10's page (written 40 turns earlier).
  req.set_continue_after_miss(true);
  req.mutable_items(50)->set_page_index(64 + 10);
  {
    grpc::ClientContext ctx;
    v1::OnboardResponse resp;
    ASSERT_TRUE(stub_->Onboard(Context(&ctx), req, &resp).ok());
    ASSERT_EQ(resp.results_size(), 64);
    for (int i = 0; i < 64; ++i) {
      const v1::ItemCode want = i == 40   ? v1::ITEM_CODE_NOT_FOUND
                                : i == 50 ? v1::ITEM_CODE_INVALID_ARGUMENT
                                          : v1::ITEM_CODE_OK;
      EXPECT_EQ(resp.results(i).code(), want) << "item " << i;
    }
    EXPECT_NE(resp.results(50).message().find("destination of an earlier item"), std::string::npos)
        << resp.results(50).message();
    EXPECT_EQ(resp.onboarded_pages(), 40u);  // the leading run of OK items
    EXPECT_TRUE(engine.Bytes(64 + 10) == engine.RoundTrip(10)) << "item 50 overwrote item 10";
    for (uint32_t i = 41; i < 64; ++i) {
      if (i == 50) continue;
      EXPECT_TRUE(engine.Bytes(64 + i) == engine.RoundTrip(i)) << "page " << 64 + i;
    }
  }
}

TEST_F(FairnessTest, OffloadInTurnsAnswersEveryItemInOrder) {
  StartDaemon({"--set=server.worker_turn_ms=0"});
  TestEngine engine(dir_->File("pool-a"), 32);
  for (uint32_t i = 0; i < 32; ++i) engine.Fill(i, 900 + i);
  const v1::RegisterEngineResponse reg = Register(*stub_, engine.Request());
  ASSERT_EQ(Offload(*stub_, reg.engine_id(), 4, 0, 8).stored_pages(), 8u);

  // Items 0..7 are stored already; item 5 has a 33-byte hash, item 9 a page out of range.
  v1::OffloadRequest req;
  req.set_engine_id(reg.engine_id());
  for (uint32_t i = 0; i < 32; ++i) {
    v1::OffloadItem* item = req.add_items();
    item->set_block_hash(i == 5 ? std::string(33, 'x') : Hash(4, i));
    item->set_page_index(i == 9 ? 1000 : i);
  }
  grpc::ClientContext ctx;
  v1::OffloadResponse resp;
  ASSERT_TRUE(stub_->Offload(Context(&ctx), req, &resp).ok());
  ASSERT_EQ(resp.results_size(), 32);
  for (int i = 0; i < 32; ++i) {
    const v1::ItemCode want = (i == 5 || i == 9) ? v1::ITEM_CODE_INVALID_ARGUMENT
                              : i < 8            ? v1::ITEM_CODE_ALREADY_STORED
                                                 : v1::ITEM_CODE_OK;
    EXPECT_EQ(resp.results(i).code(), want) << "item " << i << ": " << resp.results(i).message();
  }
  EXPECT_EQ(resp.stored_pages(), 23u);
  EXPECT_EQ(resp.hot_bytes_read(), 23 * engine.page_bytes());
  // Each stored block holds its own page.
  TestEngine reader(dir_->File("pool-b"), 32);
  const v1::RegisterEngineResponse reader_reg = Register(*stub_, reader.Request());
  v1::OnboardRequest back;
  back.set_engine_id(reader_reg.engine_id());
  back.set_continue_after_miss(true);
  for (uint32_t i = 10; i < 32; ++i) {
    v1::OnboardItem* item = back.add_items();
    item->set_block_hash(Hash(4, i));
    item->set_page_index(i);
  }
  grpc::ClientContext back_ctx;
  v1::OnboardResponse back_resp;
  ASSERT_TRUE(stub_->Onboard(Context(&back_ctx), back, &back_resp).ok());
  EXPECT_EQ(back_resp.onboarded_pages(), 22u);
  for (uint32_t i = 10; i < 32; ++i) {
    EXPECT_TRUE(reader.Bytes(i) == engine.RoundTrip(i)) << "page " << i;
  }
}

TEST_F(FairnessTest, DrainWaitsForEveryTurnOfARunningBatch) {
  // One worker and one item per turn: the batch needs 4096 turns.
  StartDaemon({"--set=server.workers=1", "--set=server.worker_turn_ms=0"});
  TestEngine engine(dir_->File("pool-a"), kBatch);
  FillPages(engine, kBatch, 3);
  const v1::RegisterEngineResponse reg = Register(*stub_, engine.Request());
  AsyncOffload batch(*stub_, reg.engine_id(), 6, kBatch);
  ASSERT_TRUE(WaitUntilRunning(*stub_, reg.engine_id(), 6, batch))
      << "the batch did not start, or ended before the drain";

  auto admin = v1::KvTierAdmin::NewStub(channel_);
  grpc::ClientContext ctx;
  v1::DrainRequest drain;
  v1::DrainResponse drained;
  const grpc::Status st = admin->Drain(Context(&ctx), drain, &drained);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_TRUE(drained.drained());
  // Drained: every turn of the batch has run.
  EXPECT_EQ(Lookup(*stub_, reg.engine_id(), 6, kBatch).hit_pages(), kBatch);
  const grpc::Status offloaded = batch.Wait();
  ASSERT_TRUE(offloaded.ok()) << offloaded.error_message();
  EXPECT_EQ(batch.response().stored_pages(), kBatch);
}

TEST_F(FairnessTest, ACallCancelledWhileItWaitsDoesNotRunAndReleasesItsEngine) {
  // One worker, turns of up to a second: a call of the engine whose two batches hold the worker
  // waits for them, and its own deadline passes first.
  StartDaemon({"--set=server.workers=1", "--set=server.worker_turn_ms=1000"});
  TestEngine engine(dir_->File("pool-a"), kBatch);
  FillPages(engine, kBatch, 5);
  const v1::RegisterEngineResponse reg = Register(*stub_, engine.Request());
  AsyncOffload first(*stub_, reg.engine_id(), 7, kBatch);
  AsyncOffload second(*stub_, reg.engine_id(), 8, kBatch);
  ASSERT_TRUE(WaitUntilRunning(*stub_, reg.engine_id(), 7, first) ||
              WaitUntilRunning(*stub_, reg.engine_id(), 8, second))
      << "the batches did not start, or ended before the small call was sent";
  v1::OffloadRequest req;
  req.set_engine_id(reg.engine_id());
  v1::OffloadItem* item = req.add_items();
  item->set_block_hash(Hash(9, 0));
  item->set_page_index(0);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(20));
  v1::OffloadResponse resp;
  const grpc::Status st = stub_->Offload(&ctx, req, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << st.error_message();
  EXPECT_TRUE(first.Wait().ok());
  EXPECT_TRUE(second.Wait().ok());
  EXPECT_EQ(Lookup(*stub_, reg.engine_id(), 9, 1).hit_pages(), 0u) << "the cancelled call ran";
  grpc::ClientContext unreg_ctx;
  unreg_ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::UnregisterRequest unreg;
  unreg.set_engine_id(reg.engine_id());
  v1::UnregisterResponse unreg_resp;
  const grpc::Status gone = stub_->Unregister(&unreg_ctx, unreg, &unreg_resp);
  EXPECT_TRUE(gone.ok()) << "the skipped call still holds its engine: " << gone.error_message();
}

}  // namespace
}  // namespace kvtier::integration
