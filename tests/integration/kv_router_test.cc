// The KV-aware router (tools/router/kv_router.py) against two real kvtierd processes that publish
// KV events over real ZeroMQ sockets: on a scripted case the router names the node holding the
// longer prefix (and, reading no events, cannot), and on a small agentic workload the example
// engine with prefix routing serves strictly more prompt tokens from cache than round-robin over
// the same kind of fleet.
#include <signal.h>
#include <sys/wait.h>

#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "kvtier/block_hasher.h"
#include "kvtier/client.h"
#include "tests/integration/daemon_fixture.h"
#include "tools/engine/kv_pool.h"
#include "tools/engine/replay.h"
#include "tools/engine/router_process.h"
#include "tools/engine/routing.h"
#include "tools/engine/trace.h"

namespace kvtier::integration {
namespace {

using engine::RoutePolicy;

constexpr size_t kNodes = 2;

PageLayout Layout() { return PageLayout::Gqa({2, 1, 64, 64, DType::kBf16, 0, 0}).value(); }

class KvRouterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pools_ = std::make_unique<kvtier::testing::TempDir>(kvtier::testing::TempDir::Create().value());
  }
  void TearDown() override { StopFleet(); }

  // Two fresh kvtierd nodes with kv_events on ipc:// endpoints in their own directories.
  void StartFleet() {
    StopFleet();
    for (size_t n = 0; n < kNodes; ++n) {
      dirs_.push_back(
          std::make_unique<kvtier::testing::TempDir>(kvtier::testing::TempDir::Create().value()));
      const kvtier::testing::TempDir& d = *dirs_.back();
      const std::vector<std::string> args = {
          KvtierdPath(),
          "--state-dir=" + d.File("state"),
          "--socket=" + d.File("kvtier.sock"),
          "--set=host.capacity=64MiB",
          "--set=host.chunk=4MiB",
          "--set=host.pin=none",
          "--set=disk.capacity=0",
          "--set=pools.allowed_dirs=[" + pools_->path() + "]",
          "--set=metrics.listen=\"\"",
          "--set=kv_events.enabled=true",
          "--set=kv_events.endpoint=ipc://" + d.File("kv.pub"),
          "--set=kv_events.replay_endpoint=ipc://" + d.File("kv.replay")};
      absl::StatusOr<KvtierdChild> child = SpawnKvtierd(args, Socket(n), d.File("kvtierd.log"));
      ASSERT_TRUE(child.ok()) << child.status();
      pids_.push_back(child->pid);
    }
  }
  void StopFleet() {
    for (const pid_t pid : pids_) {
      kill(pid, SIGTERM);
      waitpid(pid, nullptr, 0);
    }
    pids_.clear();
    dirs_.clear();
  }
  std::string Socket(size_t n) const { return dirs_[n]->File("kvtier.sock"); }
  std::string RouterCommand(const std::string& extra = "") const {
    std::string cmd = absl::StrCat("exec '", KV_ROUTER, "'", extra);
    for (const auto& d : dirs_) {
      absl::StrAppend(&cmd, " --node 'ipc://", d->File("kv.pub"), ",ipc://", d->File("kv.replay"),
                      "'");
    }
    return cmd;
  }

  engine::EngineRunOptions EngineOptions(RoutePolicy policy, const std::string& router_extra) {
    engine::EngineRunOptions o;
    for (size_t n = 0; n < kNodes; ++n) o.sockets.push_back(Socket(n));
    o.layout = Layout();
    o.pool_dir = pools_->path();
    o.model = "kv-router-test";
    o.quiet = true;
    o.route = policy;
    if (policy == RoutePolicy::kPrefix) o.router_command = RouterCommand(router_extra);
    CompressionConfig c;
    c.algorithm = "quantization_for_cold_page";
    c.quant = "raw";
    o.configs.push_back(c);
    engine::SyntheticOptions s;
    s.sessions = 16;
    s.system_prompts = 4;
    s.system_prompt_tokens = 512;
    s.first_message_tokens = 128;
    s.min_tool_result_tokens = 20;
    s.max_tool_result_tokens = 200;
    s.min_output_tokens = 5;
    s.max_output_tokens = 40;
    s.max_turns = 3;
    o.sessions = engine::SyntheticAgenticTrace(s);
    return o;
  }

  // The workload over a fresh fleet.
  engine::EngineRunResult Run(RoutePolicy policy, const std::string& router_extra = "") {
    StartFleet();
    absl::StatusOr<engine::EngineRunResult> r =
        engine::RunEngine(EngineOptions(policy, router_extra));
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return {};
    EXPECT_EQ(r->report.hook_errors, 0u) << r->report.first_error;
    EXPECT_EQ(r->mismatches(), 0u);
    EXPECT_EQ(r->report.sessions, 16u);
    return *std::move(r);
  }

  std::unique_ptr<kvtier::testing::TempDir> pools_;
  std::vector<std::unique_ptr<kvtier::testing::TempDir>> dirs_;
  std::vector<pid_t> pids_;
};

// A chain of `pages` 32-byte keys (as BlockHasher makes them: SHA-256 links) and their 64-bit
// event hashes.
std::vector<std::string> Chain(const std::string& root, size_t pages) {
  BlockHasher hasher = BlockHasher::Create(root, 64).value();
  std::vector<uint32_t> tokens(pages * 64);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>(i * 7 + 3);
  return hasher.Hash(tokens).value();
}

std::vector<uint64_t> EventHashes(const std::vector<std::string>& keys, size_t count) {
  std::vector<uint64_t> out;
  for (size_t i = 0; i < count; ++i) out.push_back(engine::KvEventBlockHash(keys[i]));
  return out;
}

TEST_F(KvRouterTest, RoutesToTheNodeWithTheLongerPrefix) {
  ASSERT_NO_FATAL_FAILURE(StartFleet());
  const std::vector<std::string> keys = Chain(std::string(32, 'r'), 6);
  // Node 0 holds the chain's first 2 blocks, node 1 its first 5.
  std::vector<std::unique_ptr<engine::KvPool>> pools;
  std::vector<std::unique_ptr<Client>> clients;
  std::vector<std::string> engine_ids;
  for (size_t n = 0; n < kNodes; ++n) {
    pools.push_back(engine::KvPool::Create(Layout(), 8, -1, pools_->path()).value());
    ClientOptions co;
    co.socket_path = Socket(n);
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(co);
    ASSERT_TRUE(client.ok()) << client.status();
    kvtier::EngineOptions eo;
    eo.model = "kv-router-test";
    eo.layout = Layout();
    eo.codec = "raw";
    eo.pools = {pools.back()->Registration()};
    absl::StatusOr<Engine> engine = (*client)->RegisterEngine(eo);
    ASSERT_TRUE(engine.ok()) << engine.status();
    std::vector<PageRef> refs;
    for (size_t i = 0; i < (n == 0 ? 2u : 5u); ++i) {
      const int32_t slot = pools.back()->Allocate().value();
      refs.push_back({keys[i], static_cast<uint32_t>(slot)});
    }
    absl::StatusOr<OffloadResult> stored = (*client)->Offload(engine->engine_id, refs);
    ASSERT_TRUE(stored.ok()) << stored.status();
    ASSERT_EQ(stored->stored_pages, refs.size());
    clients.push_back(*std::move(client));
    engine_ids.push_back(engine->engine_id);
  }
  // The router starts after the blocks were published: it learns them by replay (a late join).
  auto router = engine::RouterProcess::Start(RouterCommand());
  ASSERT_TRUE(router.ok()) << router.status();
  absl::StatusOr<engine::RouteAnswer> a = (*router)->Route(EventHashes(keys, 6), kNodes);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->node, 1u);
  EXPECT_EQ(a->matched_pages, 5u);
  // Both hold the first 2: a tie, which goes to the node given fewer sessions (node 0).
  a = (*router)->Route(EventHashes(keys, 2), kNodes);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->node, 0u);
  EXPECT_EQ(a->matched_pages, 2u);
  // A chain nobody holds: a tie at 0 pages; both nodes have one session, so node 0.
  a = (*router)->Route(EventHashes(Chain(std::string(32, 'x'), 3), 3), kNodes);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->matched_pages, 0u);
  EXPECT_EQ(a->node, 0u);
  absl::StatusOr<std::string> stats = (*router)->Ask("stats");
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_NE(stats->find("blocks=2,5"), std::string::npos) << *stats;
  // Blocks stored while the router runs reach it on the live stream: node 0 gets links 2 to 5
  // and so the whole chain, one longer than node 1's.
  std::vector<PageRef> refs;
  for (size_t i = 2; i < 6; ++i) {
    refs.push_back({keys[i], static_cast<uint32_t>(pools[0]->Allocate().value())});
  }
  absl::StatusOr<OffloadResult> stored = clients[0]->Offload(engine_ids[0], refs);
  ASSERT_TRUE(stored.ok()) << stored.status();
  ASSERT_EQ(stored->stored_pages, 4u);
  // The publisher sends what the log gathered every kv_events.batch_interval_ms: wait until the
  // router has the new blocks (it applies what arrived before each query).
  for (const absl::Time until = absl::Now() + absl::Seconds(10);;) {
    stats = (*router)->Ask("stats");
    ASSERT_TRUE(stats.ok()) << stats.status();
    if (stats->find("blocks=6,5") != std::string::npos) break;
    ASSERT_LT(absl::Now(), until) << "the router never saw node 0's new blocks: " << *stats;
    absl::SleepFor(absl::Milliseconds(20));
  }
  a = (*router)->Route(EventHashes(keys, 6), kNodes);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->node, 0u);
  EXPECT_EQ(a->matched_pages, 6u);

  // The control: a router that reads the streams but applies no event cannot tell the nodes
  // apart, so the longer prefix is not found.
  auto blind = engine::RouterProcess::Start(RouterCommand(" --ignore-events"));
  ASSERT_TRUE(blind.ok()) << blind.status();
  a = (*blind)->Route(EventHashes(keys, 6), kNodes);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->matched_pages, 0u);
  EXPECT_EQ(a->node, 0u);
}

TEST_F(KvRouterTest, PrefixRoutingServesMoreFromCacheThanRoundRobin) {
  const engine::EngineRunResult rr = Run(RoutePolicy::kRoundRobin);
  const engine::EngineRunResult prefix = Run(RoutePolicy::kPrefix);
  const engine::EngineRunResult blind = Run(RoutePolicy::kPrefix, " --ignore-events");
  for (const auto& [name, r] : {std::pair{"round-robin", &rr}, std::pair{"prefix", &prefix},
                                std::pair{"prefix, events ignored", &blind}}) {
    std::printf("%-24s prompt %llu, from cache %llu, prefill %llu, sessions %s\n", name,
                static_cast<unsigned long long>(r->report.prompt_tokens),
                static_cast<unsigned long long>(r->report.cached_tokens),
                static_cast<unsigned long long>(r->report.prefill_tokens),
                absl::StrJoin(r->report.sessions_per_node, "/").c_str());
  }
  EXPECT_EQ(rr.report.prompt_tokens, prefix.report.prompt_tokens);
  EXPECT_GT(prefix.report.cached_tokens, rr.report.cached_tokens);
  EXPECT_LT(prefix.report.prefill_tokens, rr.report.prefill_tokens);
  // Not by piling every session on one node: ties go to the less loaded one, and each of the
  // four system prompts starts on the node with fewer sessions.
  ASSERT_EQ(prefix.report.sessions_per_node.size(), kNodes);
  for (const uint64_t n : prefix.report.sessions_per_node) EXPECT_GE(n, 4u);
  // The router found the engine's keys in the events (its hashes are the events' hashes).
  EXPECT_GT(prefix.report.routed_pages, 0u);
  EXPECT_EQ(rr.report.routed_pages, 0u);
  // Without events the router's ties go round the nodes: round-robin's figures exactly.
  EXPECT_EQ(blind.report.cached_tokens, rr.report.cached_tokens);
  EXPECT_EQ(blind.report.sessions_per_node, rr.report.sessions_per_node);
  EXPECT_NE(prefix.router_stats.find("lost=0"), std::string::npos) << prefix.router_stats;
}

}  // namespace
}  // namespace kvtier::integration
