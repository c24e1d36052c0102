// The "quantization_for_cold_page" compression method against a real kvtierd: a first request
// misses and offloads its full pages at finish, a second request with the same prefix gets them
// back (byte for byte under the raw codec, as the codec's round trip under nvfp4+rope), a
// TriAttention-compacted request offloads only its prompt pages, a tool call's pages come back
// after a pause, the pages' tokens reach the daemon's KV events (read with kvtierctl watch
// --format=vllm), and the factory fails cleanly when no daemon is there. Label integration.
#include <cstring>
#include <future>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "codec/dtype.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvtier/compression.h"
#include "kvtier/layout.h"
#include "kvtier/pools.h"
#include "nlohmann/json.hpp"
#include "tests/integration/daemon_fixture.h"

namespace kvtier::integration {
namespace {

using ::testing::HasSubstr;

constexpr uint32_t kSlots = 64;
constexpr int kPage = 16;

class ColdPageMethodTest : public DaemonFixture {
 protected:
  static PageLayout MakeLayout() {
    GqaLayoutOptions o;
    o.num_layers = 2;
    o.kv_heads = 2;
    o.head_dim = 64;
    o.tokens_per_page = kPage;
    return PageLayout::Gqa(o).value();
  }

  // Starts the daemon (with `daemon_args`), creates the engine's pool and builds the method with
  // `yaml` (plus the daemon's socket).
  std::unique_ptr<CompressionManager> Build(const std::string& yaml,
                                            const std::vector<std::string>& daemon_args = {}) {
    StartDaemon(daemon_args);
    if (HasFatalFailure()) return nullptr;
    absl::StatusOr<std::vector<std::unique_ptr<SharedMemoryPool>>> pools =
        CreateSharedMemoryPools(layout_, dir_->path(), "engine", kSlots);
    EXPECT_TRUE(pools.ok()) << pools.status();
    if (!pools.ok()) return nullptr;
    pools_ = std::move(*pools);
    EngineContext engine;
    engine.model = "test-model";
    engine.layout = layout_;
    engine.slots = kSlots;
    for (const auto& p : pools_) {
      engine.pool_bases.push_back(p->data());
      engine.pool_registrations.push_back(p->Registration());
    }
    absl::StatusOr<CompressionConfig> config =
        ParseCompressionConfig(absl::StrCat(yaml, "\ndaemon_socket: ", Socket(), "\n"));
    EXPECT_TRUE(config.ok()) << config.status();
    if (!config.ok()) return nullptr;
    absl::StatusOr<std::unique_ptr<CompressionManager>> method =
        CreateCompressionMethod(*config, engine);
    EXPECT_TRUE(method.ok()) << method.status() << "\n" << Log();
    return method.ok() ? std::move(*method) : nullptr;
  }

  uint8_t* Page(int32_t i) const { return pools_[0]->slot(static_cast<uint32_t>(i)); }
  uint64_t PageBytes() const { return pools_[0]->slot_bytes(); }

  // Writes N(0, 1) values into the buffers of page `i` (what a prefill would leave there).
  void Fill(int32_t i, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (const BufferInfo& b : layout_.buffers()) {
      uint8_t* base = Page(i) + b.offset_bytes;
      for (uint64_t e = 0; e < b.data_bytes / 2; ++e) {
        codec::StoreFromFloat(codec::DType::kBf16, normal(rng), base, e);
      }
    }
  }
  std::vector<uint8_t> Bytes(int32_t i) const {
    return std::vector<uint8_t>(Page(i), Page(i) + PageBytes());
  }

  // What page `i` becomes after an encode and a decode with `codec` (the library's CPU codec).
  std::vector<uint8_t> RoundTrip(int32_t i, const std::string& codec) const {
    const codec::PageLayout& layout = layout_.internal();
    auto c = codec::Codec::Create(layout, codec::CodecSpec::Parse(codec).value()).value();
    std::vector<uint8_t> block(c->block_bytes());
    std::vector<uint8_t> result(PageBytes(), 0);
    codec::HotPageView in;
    codec::MutableHotPageView out;
    for (const codec::BufferSpec& b : layout.buffers) {
      in.base.push_back(Page(i) + b.offset_bytes);
      out.base.push_back(result.data() + b.offset_bytes);
    }
    EXPECT_TRUE(c->Encode(in, absl::MakeSpan(block)).ok());
    EXPECT_TRUE(c->Decode(block, out).ok());
    return result;
  }

  static std::vector<uint32_t> Tokens(uint32_t first, size_t n) {
    std::vector<uint32_t> t(n);
    for (size_t i = 0; i < n; ++i) t[i] = first + static_cast<uint32_t>(i) * 7;
    return t;
  }

  PageLayout layout_ = MakeLayout();
  std::vector<std::unique_ptr<SharedMemoryPool>> pools_;
};

TEST_F(ColdPageMethodTest, ASecondRequestWithTheSamePrefixGetsTheExactPagesBack) {
  std::unique_ptr<CompressionManager> method =
      Build("algorithm: quantization_for_cold_page\nquant: raw");
  ASSERT_NE(method, nullptr);

  // Request 1: a 40-token prompt in pages 0..2, 10 generated tokens (50 in the cache, 4 pages).
  RequestState first;
  first.id = 1;
  first.name = "req-1";
  first.tokens = Tokens(1000, 40);
  first.prompt_len = 40;
  first.block_table = {0, 1, 2};
  ASSERT_TRUE(method->OnRequestStart(first).ok());
  EXPECT_EQ(first.cached_tokens, 0);  // a miss
  for (int32_t p = 0; p < 4; ++p) Fill(p, 50 + p);
  const std::vector<uint32_t> generated = Tokens(5000, 10);
  first.tokens.insert(first.tokens.end(), generated.begin(), generated.end());
  first.block_table.push_back(3);
  first.num_tokens = 50;
  ASSERT_TRUE(method->OnRequestFinish(first).ok());
  std::map<std::string, uint64_t> counters = method->Counters();
  EXPECT_EQ(counters.at("cold_page_offloaded_pages"), 3u);  // 50 tokens: 3 full pages
  EXPECT_EQ(counters.at("cold_page_offload_hot_bytes"), 3 * layout_.hot_page_bytes());
  EXPECT_EQ(counters.at("cold_page_onboarded_pages"), 0u);

  // Request 2: the first 48 tokens of request 1 (its 3 full pages) then new ones: 58 tokens.
  RequestState second;
  second.id = 2;
  second.name = "req-2";
  second.tokens.assign(first.tokens.begin(), first.tokens.begin() + 48);
  const std::vector<uint32_t> fresh = Tokens(9000, 10);
  second.tokens.insert(second.tokens.end(), fresh.begin(), fresh.end());
  second.prompt_len = 58;
  second.block_table = {10, 11, 12, 13};
  ASSERT_TRUE(method->OnRequestStart(second).ok());
  EXPECT_EQ(second.cached_tokens, 48);
  for (int32_t p = 0; p < 3; ++p) {
    SCOPED_TRACE(p);
    EXPECT_EQ(Bytes(10 + p), Bytes(p));
  }
  counters = method->Counters();
  EXPECT_EQ(counters.at("cold_page_onboarded_pages"), 3u);
  EXPECT_EQ(counters.at("cold_page_onboarded_bytes"), 3 * layout_.hot_page_bytes());
  EXPECT_EQ(counters.at("cold_page_lookups"), 2u);

  // A prompt of exactly 48 tokens leaves its last page to compute: 2 pages come from the cache.
  RequestState exact;
  exact.id = 3;
  exact.tokens.assign(first.tokens.begin(), first.tokens.begin() + 48);
  exact.prompt_len = 48;
  exact.block_table = {20, 21, 22};
  ASSERT_TRUE(method->OnRequestStart(exact).ok());
  EXPECT_EQ(exact.cached_tokens, 32);

  // Request 2 finishes: its 3 cached pages are not offloaded again, only page 13 (tokens 48..63
  // written by the engine: 64 tokens in the cache).
  Fill(13, 77);
  const std::vector<uint32_t> more = Tokens(12000, 6);
  second.tokens.insert(second.tokens.end(), more.begin(), more.end());
  second.num_tokens = 64;
  ASSERT_TRUE(method->OnRequestFinish(second).ok());
  EXPECT_EQ(method->Counters().at("cold_page_offloaded_pages"), 4u);
}

// Offload sends each page's tokens (OffloadItem.token_ids): with kv_events on, the BlockStored
// events that kvtierctl watch --format=vllm prints carry them, a page of 16 tokens per block.
TEST_F(ColdPageMethodTest, OffloadedPagesCarryTheirTokensIntoKvEvents) {
  const std::string endpoint = "ipc://" + dir_->File("kv-events.sock");
  std::unique_ptr<CompressionManager> method =
      Build("algorithm: quantization_for_cold_page\nquant: raw",
            {"--set=kv_events.enabled=true", "--set=kv_events.endpoint=" + endpoint});
  ASSERT_NE(method, nullptr);
  std::string out;
  std::future<int> watch = std::async(std::launch::async, [&] {
    return RunCommand(std::string(KVTIERCTL_PATH) + " watch --format=vllm --endpoint=" + endpoint +
                          " --count=1 --duration=60 2>&1",
                      &out);
  });
  // Until kvtierctl is subscribed (ZeroMQ's slow joiner), requests of 32 fresh tokens (2 pages):
  // request r's tokens are Tokens(100000 r + 1, 32).
  int64_t requests = 0;
  while (watch.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready &&
         requests < 300) {
    RequestState r;
    r.id = ++requests;
    r.tokens = Tokens(static_cast<uint32_t>(100000 * r.id + 1), 32);
    r.prompt_len = 32;
    r.block_table = {0, 1};
    ASSERT_TRUE(method->OnRequestStart(r).ok());
    r.num_tokens = 32;
    ASSERT_TRUE(method->OnRequestFinish(r).ok());
  }
  ASSERT_EQ(watch.get(), 0) << out;
  const nlohmann::json e = nlohmann::json::parse(out, nullptr, false);
  ASSERT_TRUE(e.is_object()) << out;
  EXPECT_EQ(e["type"], "BlockStored") << out;
  EXPECT_EQ(e["block_size"], kPage) << out;
  const std::vector<uint32_t> tokens = e["token_ids"].get<std::vector<uint32_t>>();
  ASSERT_FALSE(tokens.empty()) << out;
  ASSERT_EQ(tokens.size(), kPage * e["block_hashes"].size()) << out;
  for (size_t page = 0; page < tokens.size() / kPage; ++page) {
    SCOPED_TRACE(page);
    // Each block's tokens are a page of one request's.
    const uint32_t first = tokens[page * kPage];
    const uint32_t request = (first - 1) / 100000;
    const std::vector<uint32_t> all = Tokens(100000 * request + 1, 32);
    const size_t offset = first == all[0] ? 0 : kPage;
    ASSERT_TRUE(request >= 1 && request <= requests) << out;
    EXPECT_EQ(
        std::vector<uint32_t>(tokens.begin() + page * kPage, tokens.begin() + (page + 1) * kPage),
        std::vector<uint32_t>(all.begin() + offset, all.begin() + offset + kPage));
  }
}

TEST_F(ColdPageMethodTest, ACompactedRequestOffloadsOnlyItsPromptPages) {
  std::unique_ptr<CompressionManager> method =
      Build("algorithm: quantization_for_cold_page\nquant: raw");
  ASSERT_NE(method, nullptr);
  RequestState r;
  r.id = 7;
  r.tokens = Tokens(300, 40);
  r.prompt_len = 40;
  r.block_table = {0, 1, 2, 3, 4, 5};
  ASSERT_TRUE(method->OnRequestStart(r).ok());
  for (int32_t p = 0; p < 6; ++p) Fill(p, 700 + p);
  const std::vector<uint32_t> generated = Tokens(800, 50);
  r.tokens.insert(r.tokens.end(), generated.begin(), generated.end());
  r.num_tokens = 90;
  r.compacted = true;  // a TriAttention round ran: only the 2 full prompt pages are exact
  ASSERT_TRUE(method->OnRequestFinish(r).ok());
  EXPECT_EQ(method->Counters().at("cold_page_offloaded_pages"), 2u);
}

TEST_F(ColdPageMethodTest, Nvfp4PagesComeBackAsTheCodecsRoundTrip) {
  std::unique_ptr<CompressionManager> method =
      Build("algorithm: quantization_for_cold_page\nquant: nvfp4\nrope_precision: lossless");
  ASSERT_NE(method, nullptr);
  RequestState first;
  first.id = 1;
  first.tokens = Tokens(1, 33);
  first.prompt_len = 33;
  first.block_table = {0, 1, 2};
  ASSERT_TRUE(method->OnRequestStart(first).ok());
  for (int32_t p = 0; p < 3; ++p) Fill(p, 10 + p);
  first.num_tokens = 33;
  ASSERT_TRUE(method->OnRequestFinish(first).ok());
  EXPECT_EQ(method->Counters().at("cold_page_offloaded_pages"), 2u);
  EXPECT_LT(method->Counters().at("cold_page_offload_cold_bytes"),
            method->Counters().at("cold_page_offload_hot_bytes"));

  RequestState second = first;
  second.id = 2;
  second.block_table = {30, 31, 32};
  ASSERT_TRUE(method->OnRequestStart(second).ok());
  EXPECT_EQ(second.cached_tokens, 32);
  for (int32_t p = 0; p < 2; ++p) {
    SCOPED_TRACE(p);
    EXPECT_NE(Bytes(30 + p), Bytes(p));                    // quantized...
    EXPECT_EQ(Bytes(30 + p), RoundTrip(p, "nvfp4+rope"));  // ...exactly as the codec does it
  }
}

TEST_F(ColdPageMethodTest, AToolCallPauseAndResumeRestoresThePages) {
  std::unique_ptr<CompressionManager> method =
      Build("algorithm: quantization_for_cold_page\nquant: raw");
  ASSERT_NE(method, nullptr);
  RequestState r;
  r.id = 42;
  r.name = "agent-turn-1";
  r.tokens = Tokens(100, 20);
  r.prompt_len = 20;
  r.block_table = {5, 6};
  r.num_tokens = 20;
  Fill(5, 1);
  Fill(6, 2);
  const std::vector<uint8_t> page5 = Bytes(5), page6 = Bytes(6);
  ASSERT_TRUE(method->OnToolCallPause(r).ok());
  EXPECT_EQ(method->Counters().at("cold_page_parked_pages"), 2u);
  // The engine frees and reuses the pages during the tool call.
  std::memset(Page(5), 0xAB, PageBytes());
  std::memset(Page(6), 0xAB, PageBytes());
  r.block_table = {40, 41};
  r.num_tokens = 0;
  ASSERT_TRUE(method->OnToolCallResume(r).ok());
  EXPECT_EQ(r.num_tokens, 20);
  EXPECT_EQ(Bytes(40), page5);
  EXPECT_EQ(Bytes(41), page6);
  EXPECT_EQ(method->Counters().at("cold_page_resumed_pages"), 2u);

  // Paused again and finished during the tool call: the parked state is released, nothing is
  // offloaded.
  ASSERT_TRUE(method->OnToolCallPause(r).ok());
  ASSERT_TRUE(method->OnRequestFinish(r).ok());
  EXPECT_EQ(method->Counters().at("cold_page_released_requests"), 1u);
  EXPECT_EQ(method->Counters().at("cold_page_offloaded_pages"), 0u);
  r.block_table = {50, 51};
  EXPECT_TRUE(method->OnToolCallResume(r).ok());  // nothing parked any more: a no-op
  EXPECT_EQ(method->Counters().at("cold_page_resumed_pages"), 2u);
}

TEST_F(ColdPageMethodTest, FactoryFailsWithoutADaemon) {
  absl::StatusOr<std::vector<std::unique_ptr<SharedMemoryPool>>> pools =
      CreateSharedMemoryPools(layout_, dir_->path(), "engine", kSlots);
  ASSERT_TRUE(pools.ok()) << pools.status();
  EngineContext engine;
  engine.model = "test-model";
  engine.layout = layout_;
  engine.slots = kSlots;
  engine.pool_bases.push_back((*pools)[0]->data());
  engine.pool_registrations.push_back((*pools)[0]->Registration());
  CompressionConfig config;
  config.algorithm = "quantization_for_cold_page";
  config.daemon_socket = dir_->File("nobody-listens.sock");
  config.options["connect_timeout_ms"] = "500";
  absl::StatusOr<std::unique_ptr<CompressionManager>> method =
      CreateCompressionMethod(config, engine);
  EXPECT_EQ(method.status().code(), absl::StatusCode::kUnavailable) << method.status();
  EXPECT_THAT(method.status().message(), HasSubstr("nobody-listens.sock"));

  engine.pool_registrations.clear();
  method = CreateCompressionMethod(config, engine);
  EXPECT_EQ(method.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(method.status().message(), HasSubstr("0 pool registrations"));
}

}  // namespace
}  // namespace kvtier::integration
