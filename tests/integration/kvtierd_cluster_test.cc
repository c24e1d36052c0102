// Two kvtierd processes ("nodes", each with its own state directory, socket and engine) sharing
// one pool of a real Ceph cluster started by the test (tests/testing/ceph_cluster.h): what node A
// offloads reaches the pool behind its back and node B finds and onboards it, byte for byte, also
// after A died by SIGKILL; another tenant sees none of it; a damaged object is a miss and a
// counter, never bytes; with the OSD gone the nodes keep serving from their own tiers within
// their deadlines and the tier comes back by itself.
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tests/integration/daemon_fixture.h"
#include "tests/testing/ceph_cluster.h"
#include "tools/engine/replay.h"
#include "tools/engine/trace.h"

namespace kvtier::integration {
namespace {

using kvtier::testing::CephCluster;
using kvtier::testing::TempDir;

constexpr uint32_t kPages = 8;

// Polls `done` every 50 ms for up to `seconds`; true when it held.
template <typename F>
bool WaitFor(F done, double seconds = 20) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return done();
}

// One kvtierd with its own directory, and an engine of one tenant and codec on it.
struct Node {
  std::unique_ptr<TempDir> dir;
  pid_t pid = 0;
  int metrics_port = 0;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::KvTier::Stub> stub;

  std::string Socket() const { return dir->File("kvtier.sock"); }
  std::string Log() const {
    std::ifstream in(dir->File("kvtierd.log"));
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  void Kill() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      pid = 0;
    }
  }
  ~Node() { Kill(); }

  v1::StatsResponse Stats() const {
    grpc::ClientContext ctx;
    v1::StatsResponse resp;
    const grpc::Status st = stub->Stats(DaemonFixture::Context(&ctx), v1::StatsRequest(), &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp;
  }
};

v1::LookupResponse LookupChain(v1::KvTier::Stub& stub, const std::string& engine, uint64_t chain,
                               uint32_t pages, grpc::Status* status = nullptr,
                               std::chrono::milliseconds deadline = std::chrono::seconds(20)) {
  v1::LookupRequest req;
  req.set_engine_id(engine);
  for (uint32_t i = 0; i < pages; ++i) req.add_block_hashes(Hash(chain, i));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + deadline);
  v1::LookupResponse resp;
  const grpc::Status st = stub.Lookup(&ctx, req, &resp);
  if (status != nullptr) {
    *status = st;
  } else {
    EXPECT_TRUE(st.ok()) << st.error_message();
  }
  return resp;
}

v1::OnboardResponse OnboardChain(v1::KvTier::Stub& stub, const std::string& engine, uint64_t chain,
                                 uint32_t first_page, uint32_t pages) {
  v1::OnboardRequest req;
  req.set_engine_id(engine);
  req.set_continue_after_miss(true);
  for (uint32_t i = 0; i < pages; ++i) {
    v1::OnboardItem* item = req.add_items();
    item->set_block_hash(Hash(chain, i));
    item->set_page_index(first_page + i);
  }
  grpc::ClientContext ctx;
  v1::OnboardResponse resp;
  const grpc::Status st = stub.Onboard(DaemonFixture::Context(&ctx), req, &resp);
  EXPECT_TRUE(st.ok()) << st.error_message();
  return resp;
}

class ClusterTierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_IF_NO_CEPH();
    absl::StatusOr<std::unique_ptr<CephCluster>> c = CephCluster::Start(1);
    ASSERT_TRUE(c.ok()) << c.status();
    ceph_ = std::move(*c);
    shared_ = std::make_unique<TempDir>(TempDir::Create().value());
    // The fleet's key: one file every node reads.
    std::ofstream(shared_->File("fleet.key")) << std::string(32, 'k');
  }

  std::unique_ptr<Node> StartNode(const std::vector<std::string>& extra = {}, bool cluster = true) {
    auto node = std::make_unique<Node>();
    node->dir = std::make_unique<TempDir>(TempDir::Create().value());
    node->metrics_port = FreePort();
    std::vector<std::string> args = {
        KvtierdPath(),
        "--state-dir=" + node->dir->File("state"),
        "--socket=" + node->Socket(),
        "--set=host.capacity=64MiB",
        "--set=host.chunk=4MiB",
        "--set=host.pin=none",
        "--set=disk.capacity=64MiB",
        "--set=disk.chunk=4MiB",
        "--set=pools.allowed_dirs=[" + node->dir->path() + "," + shared_->path() + "]",
        "--set=metrics.listen=127.0.0.1:" + std::to_string(node->metrics_port),
        "--set=server.workers=4",
    };
    const std::vector<std::string> cluster_args = {
        "--set=cluster.pool=" + ceph_->pool(),
        "--set=cluster.ceph_conf=" + ceph_->conf_path(),
        "--set=cluster.keyring=" + ceph_->keyring_path(),
        "--set=cluster.user=" + ceph_->client_id(),
        "--set=cluster.key_file=" + shared_->File("fleet.key"),
        "--set=cluster.op_timeout_seconds=3",
        "--set=cluster.probe_interval_seconds=0.5",
    };
    if (cluster) args.insert(args.end(), cluster_args.begin(), cluster_args.end());
    args.insert(args.end(), extra.begin(), extra.end());
    absl::StatusOr<KvtierdChild> child =
        SpawnKvtierd(args, node->Socket(), node->dir->File("kvtierd.log"));
    EXPECT_TRUE(child.ok()) << child.status() << "\n" << node->Log();
    if (!child.ok()) return nullptr;
    node->pid = child->pid;
    node->channel = child->channel;
    node->stub = v1::KvTier::NewStub(node->channel);
    return node;
  }

  // Waits until `node` has written (or found already stored) at least `blocks` blocks.
  static bool WaitWrittenBehind(const Node& node, uint64_t blocks) {
    return WaitFor([&] {
      const v1::ClusterStats c = node.Stats().cluster();
      return c.written() + c.already_stored() >= blocks && c.queue_depth() == 0;
    });
  }

  std::unique_ptr<CephCluster> ceph_;
  std::unique_ptr<TempDir> shared_;
};

TEST_F(ClusterTierTest, SecondNodeServesWhatTheFirstWroteBehindAndTenantsStayApart) {
  std::unique_ptr<Node> a = StartNode();
  std::unique_ptr<Node> b = StartNode();
  ASSERT_TRUE(a && b);
  // Each node's engine of tenant "alpha", once with raw and once with nvfp4 (two namespaces).
  for (const std::string codec : {"raw", "nvfp4"}) {
    SCOPED_TRACE(codec);
    TestEngine writer(a->dir->File("pool-" + codec), kPages);
    TestEngine reader(b->dir->File("pool-" + codec), kPages);
    const v1::RegisterEngineResponse ra = Register(*a->stub, writer.Request("alpha", codec));
    const v1::RegisterEngineResponse rb = Register(*b->stub, reader.Request("alpha", codec));
    ASSERT_EQ(ra.namespace_id(), rb.namespace_id()) << "one key, one namespace id on every node";
    const uint64_t chain = codec == "raw" ? 1 : 2;
    for (uint32_t i = 0; i < kPages; ++i) writer.Fill(i, chain * 100 + i);
    const uint64_t before = a->Stats().cluster().written();
    EXPECT_EQ(Offload(*a->stub, ra.engine_id(), chain, 0, kPages).stored_pages(), kPages);
    ASSERT_TRUE(WaitWrittenBehind(*a, before + kPages)) << a->Log();

    const v1::LookupResponse look = LookupChain(*b->stub, rb.engine_id(), chain, kPages);
    ASSERT_EQ(look.hit_pages(), kPages) << b->Log();
    for (int i = 0; i < look.tiers_size(); ++i) EXPECT_EQ(look.tiers(i), v1::TIER_CLUSTER);
    const v1::OnboardResponse on = OnboardChain(*b->stub, rb.engine_id(), chain, 0, kPages);
    for (uint32_t i = 0; i < kPages; ++i) {
      ASSERT_EQ(on.results(i).code(), v1::ITEM_CODE_OK) << on.results(i).message();
      // raw: the engine's bytes; nvfp4: exactly what the CPU codec's round trip gives.
      EXPECT_TRUE(reader.Bytes(i) == (codec == "raw" ? writer.Bytes(i) : writer.RoundTrip(i)))
          << "page " << i;
    }
    // Fetched into B's host tier: the next lookup is local.
    const v1::LookupResponse again = LookupChain(*b->stub, rb.engine_id(), chain, kPages);
    EXPECT_EQ(again.hit_pages(), kPages);
    EXPECT_EQ(again.tiers(0), v1::TIER_HOST);
  }
  EXPECT_EQ(b->Stats().cluster().fetched(), 2 * kPages);
  {
    // Only leading blocks count: a tail whose first block the cluster lacks is a miss, whatever
    // follows (A's blocks of chain 3, written below, are not in the pool yet either way).
    TestEngine probe(b->dir->File("pool-probe"), kPages);
    const v1::RegisterEngineResponse rp = Register(*b->stub, probe.Request("alpha", "raw"));
    v1::LookupRequest req;
    req.set_engine_id(rp.engine_id());
    req.add_block_hashes(Hash(99, 0));
    for (uint32_t i = 1; i < kPages; ++i) req.add_block_hashes(Hash(1, i));
    grpc::ClientContext ctx;
    v1::LookupResponse resp;
    ASSERT_TRUE(b->stub->Lookup(DaemonFixture::Context(&ctx), req, &resp).ok());
    EXPECT_EQ(resp.hit_pages(), 0u);
  }

  // A dies; what it wrote behind stays readable from B.
  TestEngine writer(a->dir->File("pool-3"), kPages);
  const v1::RegisterEngineResponse ra = Register(*a->stub, writer.Request("alpha", "raw"));
  for (uint32_t i = 0; i < kPages; ++i) writer.Fill(i, 300 + i);
  const uint64_t before = a->Stats().cluster().written();
  EXPECT_EQ(Offload(*a->stub, ra.engine_id(), 3, 0, kPages).stored_pages(), kPages);
  ASSERT_TRUE(WaitWrittenBehind(*a, before + kPages));
  a->Kill();
  TestEngine reader(b->dir->File("pool-3"), kPages);
  const v1::RegisterEngineResponse rb = Register(*b->stub, reader.Request("alpha", "raw"));
  const v1::OnboardResponse on = OnboardChain(*b->stub, rb.engine_id(), 3, 0, kPages);
  for (uint32_t i = 0; i < kPages; ++i) {
    ASSERT_EQ(on.results(i).code(), v1::ITEM_CODE_OK) << on.results(i).message();
    EXPECT_TRUE(reader.Bytes(i) == writer.Bytes(i)) << "page " << i;
  }

  // Tenant "beta", same model and layout, on B: another namespace, and nothing of alpha's.
  TestEngine other(b->dir->File("pool-beta"), kPages);
  const v1::RegisterEngineResponse rc = Register(*b->stub, other.Request("beta", "raw"));
  EXPECT_NE(rc.namespace_id(), rb.namespace_id());
  EXPECT_EQ(LookupChain(*b->stub, rc.engine_id(), 1, kPages).hit_pages(), 0u);
  const v1::OnboardResponse none = OnboardChain(*b->stub, rc.engine_id(), 1, 0, kPages);
  for (uint32_t i = 0; i < kPages; ++i) {
    EXPECT_EQ(none.results(i).code(), v1::ITEM_CODE_NOT_FOUND);
  }
  // The pool holds alpha's blocks in one RADOS namespace, not named after the tenant.
  absl::StatusOr<std::string> listed = ceph_->Rados({"ls", "--all"});
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(listed->find("alpha"), std::string::npos) << *listed;
  EXPECT_NE(listed->find("t-"), std::string::npos) << *listed;
}

TEST_F(ClusterTierTest, DamagedObjectIsAMissAndACounterNeverBytes) {
  std::unique_ptr<Node> a = StartNode();
  std::unique_ptr<Node> b = StartNode();
  ASSERT_TRUE(a && b);
  TestEngine writer(a->dir->File("pool"), kPages);
  TestEngine reader(b->dir->File("pool"), kPages);
  const v1::RegisterEngineResponse ra = Register(*a->stub, writer.Request("alpha", "raw"));
  const v1::RegisterEngineResponse rb = Register(*b->stub, reader.Request("alpha", "raw"));
  for (uint32_t i = 0; i < kPages; ++i) writer.Fill(i, 700 + i);
  EXPECT_EQ(Offload(*a->stub, ra.engine_id(), 7, 0, kPages).stored_pages(), kPages);
  ASSERT_TRUE(WaitWrittenBehind(*a, kPages));
  // Overwrite block 2's object with garbage of the same size (`rados put`, as an operator or a
  // bug might).
  const std::string name =
      absl::StrFormat("%016x.", ra.namespace_id()) + absl::BytesToHexString(Hash(7, 2));
  absl::StatusOr<std::string> listed = ceph_->Rados({"ls", "--all"});
  ASSERT_TRUE(listed.ok()) << listed.status();
  std::string rados_ns;
  for (absl::string_view line : absl::StrSplit(*listed, '\n')) {
    std::vector<std::string> parts = absl::StrSplit(line, '\t');
    if (parts.size() == 2 && parts[1] == name) rados_ns = parts[0];
  }
  ASSERT_FALSE(rados_ns.empty()) << name << " not in\n" << *listed;
  const std::string garbage = shared_->File("garbage");
  std::ofstream(garbage) << std::string(writer.page_bytes() + 4096, 'x');
  ASSERT_TRUE(ceph_->Rados({"-N", rados_ns, "put", name, garbage}).ok());

  reader.Fill(2, 9999);  // what the page held before: must stay
  const std::vector<uint8_t> untouched = reader.Bytes(2);
  const v1::OnboardResponse on = OnboardChain(*b->stub, rb.engine_id(), 7, 0, kPages);
  for (uint32_t i = 0; i < kPages; ++i) {
    if (i == 2) {
      EXPECT_EQ(on.results(i).code(), v1::ITEM_CODE_NOT_FOUND) << on.results(i).message();
      EXPECT_TRUE(reader.Bytes(i) == untouched) << "a damaged object's bytes reached the engine";
    } else {
      EXPECT_EQ(on.results(i).code(), v1::ITEM_CODE_OK) << on.results(i).message();
      EXPECT_TRUE(reader.Bytes(i) == writer.Bytes(i)) << "page " << i;
    }
  }
  EXPECT_EQ(b->Stats().cluster().verify_failures(), 1u);
  const std::string metrics = HttpGet(b->metrics_port, "/metrics");
  EXPECT_NE(metrics.find("kvtier_cluster_verify_failures_total 1\n"), std::string::npos);
  // Every read completed (none is held), and the fetch had several in flight at once.
  EXPECT_NE(metrics.find("kvtier_cluster_reads_in_flight 0\n"), std::string::npos);
  const std::string sample = "\nkvtier_cluster_reads_in_flight_peak ";
  const size_t peak = metrics.find(sample);
  ASSERT_NE(peak, std::string::npos);
  EXPECT_GT(std::stoi(metrics.substr(peak + sample.size())), 1) << metrics.substr(peak, 48);
  EXPECT_NE(metrics.find("kvtier_event_streams 0\n"), std::string::npos)
      << "the write-behind feed is no WatchEvents stream";
}

// Blocks the node's WatchEvents stream (from the start of its incarnation, read for a second)
// reports stored in (first) and removed from (second) the cluster tier.
std::pair<uint64_t, uint64_t> ClusterEvents(const Node& node) {
  v1::WatchEventsRequest req;
  req.set_start(v1::WATCH_START_AFTER_SEQUENCE);
  req.set_after_sequence(0);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
  std::unique_ptr<grpc::ClientReader<v1::WatchEventsResponse>> reader =
      node.stub->WatchEvents(&ctx, req);
  std::pair<uint64_t, uint64_t> n{0, 0};
  v1::WatchEventsResponse resp;
  while (reader->Read(&resp)) {
    for (const v1::Event& e : resp.events()) {
      if (e.has_block_stored() && e.block_stored().tier() == v1::TIER_CLUSTER) {
        n.first += e.block_stored().block_hashes_size();
      }
      if (e.has_block_removed() && e.block_removed().tier() == v1::TIER_CLUSTER) {
        n.second += e.block_removed().block_hashes_size();
      }
    }
  }
  return n;
}

// The object names of the pool's blocks (rados ls --all).
std::set<std::string> PoolBlocks(CephCluster& ceph) {
  std::set<std::string> names;
  absl::StatusOr<std::string> listed = ceph.Rados({"ls", "--all"});
  EXPECT_TRUE(listed.ok()) << listed.status();
  if (!listed.ok()) return names;
  for (absl::string_view line : absl::StrSplit(*listed, '\n')) {
    std::vector<std::string> parts = absl::StrSplit(line, '\t');
    if (parts.size() == 2 && parts[1].size() == 81) names.insert(parts[1]);
  }
  return names;
}

std::string ObjectOf(uint64_t ns, uint64_t chain, uint64_t i) {
  return absl::StrFormat("%016x.", ns) + absl::BytesToHexString(Hash(chain, i));
}

TEST_F(ClusterTierTest, TwoSweepersKeepThePoolUnderItsCapacityLeastRecentlyUsedFirst) {
  // Capacity for 50 blocks: a sweep starts above 45 and removes down to 40.
  const uint64_t block = codec::Codec::Create(TestLayout(), codec::CodecSpec::Parse("raw").value())
                             .value()
                             ->block_bytes();
  const std::vector<std::string> sweeper = {
      "--set=cluster.capacity=" + std::to_string(50 * block), "--set=cluster.high_watermark=0.9",
      "--set=cluster.low_watermark=0.8", "--set=cluster.sweep_interval_seconds=0.3"};
  // A writes and B reads without a capacity (no sweeper): a sweep while A's write-behind is
  // still writing its second 32 blocks would remove fewer than 24 and leave the pool between
  // the watermarks. The two sweepers, C and D, start once all 64 are in the pool.
  std::unique_ptr<Node> a = StartNode({});
  std::unique_ptr<Node> b = StartNode({});
  ASSERT_TRUE(a && b);
  TestEngine writer(a->dir->File("pool"), 64);
  TestEngine reader(b->dir->File("pool"), 64);
  const v1::RegisterEngineResponse ra = Register(*a->stub, writer.Request("alpha", "raw"));
  const v1::RegisterEngineResponse rb = Register(*b->stub, reader.Request("alpha", "raw"));
  const uint64_t ns = ra.namespace_id();
  for (uint32_t i = 0; i < 64; ++i) writer.Fill(i, 5000 + i);
  // 32 blocks (under the high watermark), then B reads the first 8: the most recently used.
  EXPECT_EQ(Offload(*a->stub, ra.engine_id(), 50, 0, 32).stored_pages(), 32u);
  ASSERT_TRUE(WaitWrittenBehind(*a, 32));
  const v1::OnboardResponse on = OnboardChain(*b->stub, rb.engine_id(), 50, 0, 8);
  for (int i = 0; i < 8; ++i) ASSERT_EQ(on.results(i).code(), v1::ITEM_CODE_OK);
  ASSERT_TRUE(WaitFor([&] { return b->Stats().cluster().queue_depth() == 0; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // later than any touch
  // 32 more: 64 blocks, over the high watermark; the sweep removes the 24 least recently used,
  // which are chain 50's blocks 8..31.
  EXPECT_EQ(Offload(*a->stub, ra.engine_id(), 51, 32, 32).stored_pages(), 32u);
  ASSERT_TRUE(WaitWrittenBehind(*a, 64));
  ASSERT_EQ(PoolBlocks(*ceph_).size(), 64u);
  std::unique_ptr<Node> c = StartNode(sweeper);
  std::unique_ptr<Node> d = StartNode(sweeper);
  ASSERT_TRUE(c && d);
  ASSERT_TRUE(WaitFor([&] { return PoolBlocks(*ceph_).size() <= 40; }, 30))
      << PoolBlocks(*ceph_).size() << " blocks\n"
      << c->Log() << d->Log();
  std::this_thread::sleep_for(std::chrono::seconds(1));  // further sweeps change nothing
  const std::set<std::string> left = PoolBlocks(*ceph_);
  EXPECT_EQ(left.size(), 40u);
  for (uint64_t i = 0; i < 8; ++i) EXPECT_TRUE(left.count(ObjectOf(ns, 50, i))) << "read " << i;
  for (uint64_t i = 8; i < 32; ++i) EXPECT_FALSE(left.count(ObjectOf(ns, 50, i))) << i;
  for (uint64_t i = 0; i < 32; ++i) EXPECT_TRUE(left.count(ObjectOf(ns, 51, i))) << "new " << i;
  // One node swept (the lease holder), the other found the lease taken; no block was removed
  // twice or by both.
  EXPECT_EQ(a->Stats().cluster().evicted() + b->Stats().cluster().evicted(), 0u);
  const v1::ClusterStats ca = c->Stats().cluster(), cb = d->Stats().cluster();
  EXPECT_EQ(ca.evicted() + cb.evicted(), 24u);
  EXPECT_TRUE((ca.sweeps() > 0 && cb.sweeps_lease_busy() > 0 && cb.sweeps() == 0) ||
              (cb.sweeps() > 0 && ca.sweeps_lease_busy() > 0 && ca.sweeps() == 0))
      << "c: " << ca.sweeps() << " sweeps, " << ca.sweeps_lease_busy()
      << " busy; d: " << cb.sweeps() << " sweeps, " << cb.sweeps_lease_busy() << " busy";
  const v1::ClusterStats& holder = ca.sweeps() > 0 ? ca : cb;
  EXPECT_EQ(holder.objects(), 40u);
  EXPECT_EQ(holder.used_bytes(), 40 * block);
  // Events: A reports the 64 objects it created, the sweeping node the 24 it removed.
  const std::pair<uint64_t, uint64_t> ea = ClusterEvents(*a), eb = ClusterEvents(*b);
  EXPECT_EQ(ea.first, 64u);
  EXPECT_EQ(eb.first, 0u) << "B fetched, it wrote nothing";
  EXPECT_EQ(ea.second + eb.second, 0u);
  // A node's event stream carries the namespaces it knows; C and D learn "alpha" from an engine
  // (the events were logged when the blocks went, and are read now).
  TestEngine c_engine(c->dir->File("pool"), 8);
  TestEngine d_engine(d->dir->File("pool"), 8);
  ASSERT_EQ(Register(*c->stub, c_engine.Request("alpha", "raw")).namespace_id(), ns);
  ASSERT_EQ(Register(*d->stub, d_engine.Request("alpha", "raw")).namespace_id(), ns);
  const std::pair<uint64_t, uint64_t> ec = ClusterEvents(*c), ed = ClusterEvents(*d);
  EXPECT_EQ(ec.first + ed.first, 0u);
  EXPECT_EQ(ec.second + ed.second, 24u);
  EXPECT_EQ((ca.sweeps() > 0 ? ec : ed).second, 24u);
  // A removed block is a miss on the node that lacks it, never an error.
  TestEngine late(b->dir->File("pool-late"), 32);
  const v1::RegisterEngineResponse rl = Register(*b->stub, late.Request("alpha", "raw"));
  const v1::OnboardResponse miss = OnboardChain(*b->stub, rl.engine_id(), 50, 0, 32);
  for (uint32_t i = 8; i < 32; ++i) EXPECT_EQ(miss.results(i).code(), v1::ITEM_CODE_NOT_FOUND);
}

// The example engine's agentic sessions over two nodes, session i on node i mod 2 (routing that
// knows nothing of caches): with the cluster tier a node finds the prefixes the other wrote, so
// more prompt tokens come from cache than with each node alone, and every page still checks.
TEST_F(ClusterTierTest, ExampleEngineFleetServesMorePromptTokensFromCache) {
  engine::SyntheticOptions synthetic;
  synthetic.sessions = 24;
  synthetic.system_prompts = 6;
  synthetic.system_prompt_tokens = 512;
  synthetic.first_message_tokens = 128;
  synthetic.min_tool_result_tokens = 20;
  synthetic.max_tool_result_tokens = 200;
  synthetic.min_output_tokens = 5;
  synthetic.max_output_tokens = 40;
  synthetic.max_turns = 3;
  auto run = [&](bool cluster) -> engine::EngineRunResult {
    std::unique_ptr<Node> a = StartNode({}, cluster);
    std::unique_ptr<Node> b = StartNode({}, cluster);
    EXPECT_TRUE(a && b);
    if (!a || !b) return {};
    engine::EngineRunOptions o;
    o.sockets = {a->Socket(), b->Socket()};
    o.sessions = engine::SyntheticAgenticTrace(synthetic);
    o.layout = PageLayout::Gqa({2, 1, 64, 64, DType::kBf16, 0, 0}).value();
    o.pool_dir = shared_->path();
    o.model = "fleet";
    o.quiet = true;
    CompressionConfig c;
    c.algorithm = "quantization_for_cold_page";
    c.quant = "nvfp4";
    o.configs.push_back(c);
    absl::StatusOr<engine::EngineRunResult> r = engine::RunEngine(o);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : engine::EngineRunResult{};
  };
  const engine::EngineRunResult alone = run(false);
  const engine::EngineRunResult fleet = run(true);
  for (const engine::EngineRunResult* r : {&alone, &fleet}) {
    EXPECT_GT(r->report.pages_checked, 0u);
    EXPECT_EQ(r->mismatches(), 0u);
    EXPECT_EQ(r->report.hook_errors, 0u) << r->report.first_error;
  }
  const double share_alone = static_cast<double>(alone.report.cached_tokens) /
                             static_cast<double>(std::max<uint64_t>(1, alone.report.prompt_tokens));
  const double share_fleet = static_cast<double>(fleet.report.cached_tokens) /
                             static_cast<double>(std::max<uint64_t>(1, fleet.report.prompt_tokens));
  std::printf(
      "fleet of 2, %llu prompt tokens: from cache %llu (%.1f%%) each node alone, %llu "
      "(%.1f%%) with the cluster tier\n",
      static_cast<unsigned long long>(fleet.report.prompt_tokens),
      static_cast<unsigned long long>(alone.report.cached_tokens), 100 * share_alone,
      static_cast<unsigned long long>(fleet.report.cached_tokens), 100 * share_fleet);
  EXPECT_EQ(alone.report.prompt_tokens, fleet.report.prompt_tokens);
  EXPECT_GT(fleet.report.cached_tokens, alone.report.cached_tokens);
}

// The pool at its quota (enforced from the mgr's pool statistics): write-behind pauses and
// counts what it drops, offloads go on, and reads of what the pool holds go on.
TEST_F(ClusterTierTest, PoolAtQuotaPausesWriteBehindAndKeepsReads) {
  if (!CephCluster::MgrPresent())
    GTEST_SKIP() << "ceph-mgr not installed (scripts/install-deps.sh)";
  ASSERT_TRUE(ceph_->StartMgr().ok());
  std::unique_ptr<Node> a = StartNode({"--set=cluster.write_threads=1"});
  std::unique_ptr<Node> b = StartNode();
  ASSERT_TRUE(a && b);
  TestEngine writer(a->dir->File("pool"), 64);
  TestEngine reader(b->dir->File("pool"), 64);
  const v1::RegisterEngineResponse ra = Register(*a->stub, writer.Request("alpha", "raw"));
  const v1::RegisterEngineResponse rb = Register(*b->stub, reader.Request("alpha", "raw"));
  for (uint32_t i = 0; i < 64; ++i) writer.Fill(i, 6000 + i);
  EXPECT_EQ(Offload(*a->stub, ra.engine_id(), 60, 0, 8).stored_pages(), 8u);
  ASSERT_TRUE(WaitWrittenBehind(*a, 8));
  // A quota below what the pool holds: full once the monitor has the pool's statistics.
  ASSERT_TRUE(ceph_->SetPoolQuota(64 * 1024).ok());
  ASSERT_TRUE(WaitFor(
      [&] {
        absl::StatusOr<std::string> df = ceph_->Ceph({"osd", "pool", "ls", "detail"});
        return df.ok() && df->find("full_quota") != std::string::npos;
      },
      30))
      << "the pool never became full";
  for (uint32_t round = 0; round < 4; ++round) {
    const auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(Offload(*a->stub, ra.engine_id(), 61 + round, 8 + 8 * round, 8).stored_pages(), 8u);
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  }
  ASSERT_TRUE(WaitFor(
      [&] {
        const v1::ClusterStats c = a->Stats().cluster();
        return c.queue_depth() == 0 && c.dropped_pool_full() + c.write_errors() > 0;
      },
      30))
      << a->Log();
  const v1::ClusterStats c = a->Stats().cluster();
  std::printf(
      "at quota: written %llu, dropped (pool full) %llu, write errors %llu, degraded %d "
      "(%s), paused %d\n",
      static_cast<unsigned long long>(c.written()),
      static_cast<unsigned long long>(c.dropped_pool_full()),
      static_cast<unsigned long long>(c.write_errors()), c.degraded(), c.degraded_reason().c_str(),
      c.writes_paused_full());
  EXPECT_GT(c.dropped_pool_full(), 0u);
  EXPECT_FALSE(c.degraded()) << c.degraded_reason();
  // What the pool holds is still served to the node that lacks it.
  const v1::OnboardResponse on = OnboardChain(*b->stub, rb.engine_id(), 60, 0, 8);
  for (uint32_t i = 0; i < 8; ++i) {
    EXPECT_EQ(on.results(i).code(), v1::ITEM_CODE_OK) << on.results(i).message();
  }
}

// Two OSDs, the pool replicated on both: one OSD killed with SIGKILL during write-behind and
// reads. Local service goes on within the deadlines, what was written before is still served
// from the other replica, and when the OSD returns (empty, backfilled) write-behind goes on.
TEST_F(ClusterTierTest, OsdKilledDuringWriteBehindAndReads) {
  absl::StatusOr<std::unique_ptr<CephCluster>> two = CephCluster::Start(2);
  ASSERT_TRUE(two.ok()) << two.status();
  ceph_ = std::move(*two);
  ASSERT_TRUE(ceph_->Ceph({"osd", "pool", "set", ceph_->pool(), "size", "2"}).ok());
  ASSERT_TRUE(ceph_->Ceph({"osd", "pool", "set", ceph_->pool(), "min_size", "1"}).ok());
  std::unique_ptr<Node> a = StartNode({"--set=cluster.lookup_timeout_ms=200"});
  std::unique_ptr<Node> b = StartNode({"--set=cluster.lookup_timeout_ms=200"});
  ASSERT_TRUE(a && b);
  TestEngine writer(a->dir->File("pool"), 64);
  const v1::RegisterEngineResponse ra = Register(*a->stub, writer.Request("alpha", "raw"));
  for (uint32_t i = 0; i < 64; ++i) writer.Fill(i, 7000 + i);
  EXPECT_EQ(Offload(*a->stub, ra.engine_id(), 70, 0, 16).stored_pages(), 16u);
  ASSERT_TRUE(WaitWrittenBehind(*a, 16));

  ASSERT_TRUE(ceph_->KillOsd(0).ok());
  // Offloads go on, each acknowledged at once, while write-behind and reads meet the dead OSD.
  for (uint32_t round = 0; round < 6; ++round) {
    const auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(Offload(*a->stub, ra.engine_id(), 71 + round, 16 + 8 * round, 8).stored_pages(), 8u);
    grpc::Status st;
    LookupChain(*a->stub, ra.engine_id(), 90 + round, 4, &st, std::chrono::milliseconds(1500));
    EXPECT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(LookupChain(*a->stub, ra.engine_id(), 70, 16).hit_pages(), 16u);
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(1500));
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  // What A wrote before the kill, from the surviving replica, once the tier answers again.
  TestEngine reader(b->dir->File("pool"), 16);
  const v1::RegisterEngineResponse rb = Register(*b->stub, reader.Request("alpha", "raw"));
  ASSERT_TRUE(WaitFor(
      [&] {
        return !b->Stats().cluster().degraded() &&
               LookupChain(*b->stub, rb.engine_id(), 70, 16).hit_pages() == 16;
      },
      60))
      << b->Log();
  const v1::OnboardResponse on = OnboardChain(*b->stub, rb.engine_id(), 70, 0, 16);
  for (uint32_t i = 0; i < 16; ++i) {
    ASSERT_EQ(on.results(i).code(), v1::ITEM_CODE_OK) << on.results(i).message();
    EXPECT_TRUE(reader.Bytes(i) == writer.Bytes(i)) << "page " << i;
  }
  const v1::ClusterStats during = a->Stats().cluster();
  std::printf(
      "OSD killed: node A wrote %llu, dropped %llu while degraded, %llu lookups timed out, "
      "%llu degraded episodes\n",
      static_cast<unsigned long long>(during.written()),
      static_cast<unsigned long long>(during.dropped_degraded()),
      static_cast<unsigned long long>(during.lookup_timeouts()),
      static_cast<unsigned long long>(during.degraded_episodes()));
  ASSERT_TRUE(ceph_->StartOsd(0).ok());
  ASSERT_TRUE(WaitFor([&] { return !a->Stats().cluster().degraded(); }, 60)) << a->Log();
  const uint64_t before = a->Stats().cluster().written();
  EXPECT_EQ(Offload(*a->stub, ra.engine_id(), 80, 0, 8).stored_pages(), 8u);
  EXPECT_TRUE(WaitWrittenBehind(*a, before + 8)) << a->Log();
}

TEST_F(ClusterTierTest, HungOsdDegradesWithinDeadlinesAndRecovers) {
  std::unique_ptr<Node> a = StartNode({"--set=cluster.lookup_timeout_ms=200"});
  ASSERT_TRUE(a);
  TestEngine engine(a->dir->File("pool"), 4 * kPages);
  const v1::RegisterEngineResponse r = Register(*a->stub, engine.Request("alpha", "raw"));
  for (uint32_t i = 0; i < 4 * kPages; ++i) engine.Fill(i, 800 + i);
  EXPECT_EQ(Offload(*a->stub, r.engine_id(), 8, 0, kPages).stored_pages(), kPages);
  ASSERT_TRUE(WaitWrittenBehind(*a, kPages));
  int code = 0;
  EXPECT_EQ(HttpGet(a->metrics_port, "/readyz", &code), "ready\n");

  // The OSD stops answering (a hang or a partition: the single-OSD cluster never marks it down).
  ASSERT_TRUE(ceph_->PauseOsd(0).ok());
  // Offloads are acknowledged as before, and lookups answer within their deadline: local hits in
  // full, a missing tail as a miss once the cluster does not answer in time.
  for (int round = 0; round < 5; ++round) {
    const auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(Offload(*a->stub, r.engine_id(), 10 + round, kPages, kPages).stored_pages(), kPages);
    grpc::Status st;
    const v1::LookupResponse look =
        LookupChain(*a->stub, r.engine_id(), 20 + round, 4, &st, std::chrono::milliseconds(1500));
    EXPECT_TRUE(st.ok()) << "round " << round << ": " << st.error_message();
    EXPECT_EQ(look.hit_pages(), 0u);
    EXPECT_EQ(LookupChain(*a->stub, r.engine_id(), 8, kPages).hit_pages(), kPages);
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(1500));
  }
  ASSERT_TRUE(WaitFor([&] { return a->Stats().cluster().degraded(); })) << a->Log();
  const std::string ready = HttpGet(a->metrics_port, "/readyz", &code);
  EXPECT_EQ(code, 200) << "a degraded cluster tier does not fail readiness";
  EXPECT_NE(ready.find("cluster tier degraded"), std::string::npos) << ready;
  // Degraded: lookups of a missing tail no longer wait for the cluster at all.
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(LookupChain(*a->stub, r.engine_id(), 40, 4).hit_pages(), 0u);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(150));
  EXPECT_GT(a->Stats().cluster().skipped_degraded(), 0u);

  ASSERT_TRUE(ceph_->ResumeOsd(0).ok());
  ASSERT_TRUE(WaitFor([&] { return !a->Stats().cluster().degraded(); }, 60)) << a->Log();
  // Write-behind resumes by itself, and the cluster answers lookups again.
  const uint64_t before = a->Stats().cluster().written();
  EXPECT_EQ(Offload(*a->stub, r.engine_id(), 30, 2 * kPages, kPages).stored_pages(), kPages);
  EXPECT_TRUE(WaitWrittenBehind(*a, before + kPages)) << a->Log();
  std::unique_ptr<Node> b = StartNode();
  ASSERT_TRUE(b);
  TestEngine reader(b->dir->File("pool"), kPages);
  const v1::RegisterEngineResponse rb = Register(*b->stub, reader.Request("alpha", "raw"));
  EXPECT_EQ(LookupChain(*b->stub, rb.engine_id(), 30, kPages).hit_pages(), kPages);
  EXPECT_EQ(LookupChain(*b->stub, rb.engine_id(), 8, kPages).hit_pages(), kPages)
      << "written before the hang, still there";
}

TEST_F(ClusterTierTest, NodeStartsWithoutMonitorAndJoinsWhenItReturns) {
  ASSERT_TRUE(ceph_->StopMon().ok());
  const auto start = std::chrono::steady_clock::now();
  std::unique_ptr<Node> a = StartNode({"--set=cluster.op_timeout_seconds=1"});
  ASSERT_TRUE(a) << "a node starts while its cluster is unreachable";
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(15));
  const v1::ClusterStats down = a->Stats().cluster();
  EXPECT_TRUE(down.degraded());
  EXPECT_NE(down.degraded_reason().find("not connected"), std::string::npos)
      << down.degraded_reason();
  TestEngine engine(a->dir->File("pool"), kPages);
  const v1::RegisterEngineResponse r = Register(*a->stub, engine.Request("alpha", "raw"));
  for (uint32_t i = 0; i < kPages; ++i) engine.Fill(i, 900 + i);
  EXPECT_EQ(Offload(*a->stub, r.engine_id(), 9, 0, kPages).stored_pages(), kPages);
  EXPECT_EQ(LookupChain(*a->stub, r.engine_id(), 9, kPages).hit_pages(), kPages);
  EXPECT_EQ(a->Stats().cluster().dropped_degraded(), kPages);

  ASSERT_TRUE(ceph_->StartMon().ok());
  ASSERT_TRUE(WaitFor([&] { return !a->Stats().cluster().degraded(); }, 60)) << a->Log();
  EXPECT_EQ(Offload(*a->stub, r.engine_id(), 19, 0, kPages).stored_pages(), kPages);
  EXPECT_TRUE(WaitWrittenBehind(*a, kPages)) << a->Log();
}

}  // namespace
}  // namespace kvtier::integration

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
