// Fairness between engines in kvtierd (the service's FairScheduler): with one worker, a one-page
// Onboard (and a Lookup) of one engine is answered while another engine's 4096-page batch is
// still running, and the batches of two engines advance together; a batch done in chunks keeps
// the results in item order, the stop at the first miss, the refusal of a repeated destination
// and of a repeated hash across chunks; an admin Drain waits for every chunk of a running batch.
// Behaviour, not speed: every ordering is observed through RPCs (how many of a batch's blocks a
// Lookup sees, whether its answer came), never by a clock; the waits are generous functional
// timeouts.
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
// Room for a few 4096-page batches of 16 KiB pages without eviction (nvfp4: ~19 MiB each).
const char* const kRoomyHost = "--set=host.capacity=512MiB";

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

// Waits (polling Lookup, 60 s at most) until the first block of `chain` is visible: the batch
// offloading it has done its first chunk. False when the time ran out.
bool WaitUntilStarted(v1::KvTier::Stub& stub, const std::string& engine_id, uint64_t chain) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    if (Lookup(stub, engine_id, chain, 1).hit_pages() == 1) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

TEST_F(FairnessTest, AnotherEnginesOnePageOnboardFinishesWhileALargeBatchRuns) {
  // One worker and the default chunk: before the scheduler, the worker took requests in order of
  // arrival, and the one-page Onboard waited for the whole batch.
  ASSERT_NO_FATAL_FAILURE(StartDaemon({kRoomyHost, "--set=server.workers=1"}));
  TestEngine bulk(dir_->File("pool-bulk"), kBatch);
  FillPages(bulk, kBatch, 1);
  TestEngine small(dir_->File("pool-small"), 4);
  small.Fill(0, 7);
  const v1::RegisterEngineResponse bulk_reg = Register(*stub_, bulk.Request());
  const v1::RegisterEngineResponse small_reg = Register(*stub_, small.Request());
  ASSERT_EQ(Offload(*stub_, small_reg.engine_id(), 2, 0, 1).stored_pages(), 1u);

  AsyncOffload batch(*stub_, bulk_reg.engine_id(), 1, kBatch);
  ASSERT_TRUE(WaitUntilStarted(*stub_, bulk_reg.engine_id(), 1)) << "the batch did not start";
  ASSERT_FALSE(batch.done()) << "the batch ended before the small requests were sent";
  // The metadata lane: a Lookup never waits for the worker.
  EXPECT_EQ(Lookup(*stub_, small_reg.engine_id(), 2, 1).hit_pages(), 1u);
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

TEST_F(FairnessTest, TheBatchesOfTwoEnginesAdvanceTogether) {
  // One worker: the second engine's batch starts while the first one's is still running (the
  // chunks of the two take turns), not after it.
  ASSERT_NO_FATAL_FAILURE(StartDaemon({kRoomyHost, "--set=server.workers=1"}));
  TestEngine a(dir_->File("pool-a"), kBatch);
  TestEngine b(dir_->File("pool-b"), kBatch);
  FillPages(a, kBatch, 11);
  FillPages(b, kBatch, 12);
  const v1::RegisterEngineResponse a_reg = Register(*stub_, a.Request());
  const v1::RegisterEngineResponse b_reg = Register(*stub_, b.Request("", "raw"));

  AsyncOffload first(*stub_, a_reg.engine_id(), 21, kBatch);
  ASSERT_TRUE(WaitUntilStarted(*stub_, a_reg.engine_id(), 21)) << "the first batch did not start";
  ASSERT_FALSE(first.done()) << "the first batch ended before the second was sent";
  AsyncOffload second(*stub_, b_reg.engine_id(), 22, kBatch);
  ASSERT_TRUE(WaitUntilStarted(*stub_, b_reg.engine_id(), 22)) << "the second batch did not start";
  // The second batch has begun: the first one must not have been run to its end meanwhile.
  const uint32_t first_visible = Lookup(*stub_, a_reg.engine_id(), 21, kBatch).hit_pages();
  EXPECT_LT(first_visible, kBatch) << "the second engine's batch waited for the first one's";
  EXPECT_FALSE(first.done()) << "the second engine's batch waited for the first one's";

  ASSERT_TRUE(first.Wait().ok());
  ASSERT_TRUE(second.Wait().ok());
  EXPECT_EQ(first.response().stored_pages(), kBatch);
  EXPECT_EQ(second.response().stored_pages(), kBatch);
  EXPECT_EQ(Lookup(*stub_, a_reg.engine_id(), 21, kBatch).hit_pages(), kBatch);
  EXPECT_EQ(Lookup(*stub_, b_reg.engine_id(), 22, kBatch).hit_pages(), kBatch);
}

TEST_F(FairnessTest, OnboardInChunksKeepsOrderStopsAtTheFirstMissAndRefusesARepeatedPage) {
  // One item per chunk and two workers: every item of a request is a turn of its own.
  ASSERT_NO_FATAL_FAILURE(StartDaemon({"--set=server.workers=2", "--set=server.chunk_pages=1"}));
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

  // Past the miss, with item 50 aimed at item 10's page (written 40 chunks earlier).
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

TEST_F(FairnessTest, OffloadInChunksAnswersEveryItemInOrderAndRefusesARepeatedHash) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon({"--set=server.chunk_pages=1"}));
  TestEngine engine(dir_->File("pool-a"), 32);
  for (uint32_t i = 0; i < 32; ++i) engine.Fill(i, 900 + i);
  const v1::RegisterEngineResponse reg = Register(*stub_, engine.Request());
  ASSERT_EQ(Offload(*stub_, reg.engine_id(), 4, 0, 8).stored_pages(), 8u);

  // Items 0..7 are stored already; item 5 has a 33-byte hash, item 9 a page out of range, and
  // item 20 repeats item 12's hash (twelve chunks earlier).
  v1::OffloadRequest req;
  req.set_engine_id(reg.engine_id());
  for (uint32_t i = 0; i < 32; ++i) {
    v1::OffloadItem* item = req.add_items();
    item->set_block_hash(i == 5 ? std::string(33, 'x') : Hash(4, i == 20 ? 12 : i));
    item->set_page_index(i == 9 ? 1000 : i);
  }
  grpc::ClientContext ctx;
  v1::OffloadResponse resp;
  ASSERT_TRUE(stub_->Offload(Context(&ctx), req, &resp).ok());
  ASSERT_EQ(resp.results_size(), 32);
  for (int i = 0; i < 32; ++i) {
    const v1::ItemCode want = (i == 5 || i == 9 || i == 20) ? v1::ITEM_CODE_INVALID_ARGUMENT
                              : i < 8                       ? v1::ITEM_CODE_ALREADY_STORED
                                                            : v1::ITEM_CODE_OK;
    EXPECT_EQ(resp.results(i).code(), want) << "item " << i << ": " << resp.results(i).message();
  }
  EXPECT_NE(resp.results(20).message().find("items[12]"), std::string::npos)
      << resp.results(20).message();
  EXPECT_EQ(resp.stored_pages(), 22u);
  EXPECT_EQ(resp.hot_bytes_read(), 22 * engine.page_bytes());
  // Each stored block holds its own page (item 20's page was not stored under item 12's hash).
  TestEngine reader(dir_->File("pool-b"), 32);
  const v1::RegisterEngineResponse reader_reg = Register(*stub_, reader.Request());
  v1::OnboardRequest back;
  back.set_engine_id(reader_reg.engine_id());
  back.set_continue_after_miss(true);
  for (uint32_t i = 10; i < 32; ++i) {
    if (i == 20) continue;
    v1::OnboardItem* item = back.add_items();
    item->set_block_hash(Hash(4, i));
    item->set_page_index(i);
  }
  grpc::ClientContext back_ctx;
  v1::OnboardResponse back_resp;
  ASSERT_TRUE(stub_->Onboard(Context(&back_ctx), back, &back_resp).ok());
  EXPECT_EQ(back_resp.onboarded_pages(), 21u);
  for (uint32_t i = 10; i < 32; ++i) {
    if (i == 20) continue;
    EXPECT_TRUE(reader.Bytes(i) == engine.RoundTrip(i)) << "page " << i;
  }
}

TEST_F(FairnessTest, DrainWaitsForEveryChunkOfARunningBatch) {
  // One worker and one item per chunk: the batch needs 4096 turns.
  ASSERT_NO_FATAL_FAILURE(
      StartDaemon({kRoomyHost, "--set=server.workers=1", "--set=server.chunk_pages=1"}));
  TestEngine engine(dir_->File("pool-a"), kBatch);
  FillPages(engine, kBatch, 3);
  const v1::RegisterEngineResponse reg = Register(*stub_, engine.Request());
  AsyncOffload batch(*stub_, reg.engine_id(), 6, kBatch);
  ASSERT_TRUE(WaitUntilStarted(*stub_, reg.engine_id(), 6)) << "the batch did not start";
  ASSERT_FALSE(batch.done()) << "the batch ended before the drain";

  auto admin = v1::KvTierAdmin::NewStub(channel_);
  grpc::ClientContext ctx;
  v1::DrainRequest drain;
  v1::DrainResponse drained;
  const grpc::Status st = admin->Drain(Context(&ctx), drain, &drained);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_TRUE(drained.drained());
  // Drained: every chunk of the batch has run.
  EXPECT_EQ(Lookup(*stub_, reg.engine_id(), 6, kBatch).hit_pages(), kBatch);
  const grpc::Status offloaded = batch.Wait();
  ASSERT_TRUE(offloaded.ok()) << offloaded.error_message();
  EXPECT_EQ(batch.response().stored_pages(), kBatch);
}

}  // namespace
}  // namespace kvtier::integration
