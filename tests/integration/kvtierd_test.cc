// kvtierd as a process: engines register host pools over gRPC on a Unix socket, offload pages,
// look up chains and onboard pages back, and the bytes are checked against the CPU codec. Two
// engine processes of a tenant share prefixes and other tenants see none; bad requests are
// rejected with precise statuses and change nothing; a client that dies leaves the daemon healthy
// and its registration released when the lease runs out; SIGTERM under load loses no block
// acknowledged as durable; metrics and probes answer over HTTP.
#include <sys/stat.h>

#include <atomic>

#include "daemon/service/auth.h"
#include "kernels/device.h"

#include "tests/integration/daemon_fixture.h"

namespace kvtier::integration {
namespace {

using KvtierdTest = DaemonFixture;

TEST_F(KvtierdTest, OffloadLookupOnboardRoundTrip) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  TestEngine engine(dir_->File("pool-a"), 32);
  for (uint32_t i = 0; i < 8; ++i) engine.Fill(i, 100 + i);
  const v1::RegisterEngineResponse reg = Register(*stub_, engine.Request());
  EXPECT_FALSE(reg.engine_id().empty());
  EXPECT_EQ(reg.hash_root().size(), 32u);
  EXPECT_EQ(reg.hot_page_bytes(), engine.page_bytes());
  EXPECT_GT(reg.cold_block_bytes(), 0u);

  const v1::OffloadResponse off = Offload(*stub_, reg.engine_id(), 1, 0, 8);
  EXPECT_EQ(off.stored_pages(), 8u);
  EXPECT_EQ(off.hot_bytes_read(), 8 * engine.page_bytes());
  for (const v1::ItemResult& r : off.results()) {
    EXPECT_EQ(r.code(), v1::ITEM_CODE_OK) << r.message();
    EXPECT_EQ(r.tier(), v1::TIER_HOST);
  }
  const v1::LookupResponse look = Lookup(*stub_, reg.engine_id(), 1, 10);
  EXPECT_EQ(look.hit_pages(), 8u);
  ASSERT_EQ(look.tiers_size(), 8);
  EXPECT_EQ(look.tiers(0), v1::TIER_HOST);

  const v1::OnboardResponse on = Onboard(*stub_, reg.engine_id(), 1, 8, 16);
  EXPECT_EQ(on.onboarded_pages(), 8u);
  for (uint32_t i = 0; i < 8; ++i) {
    EXPECT_EQ(on.results(i).code(), v1::ITEM_CODE_OK) << on.results(i).message();
    EXPECT_TRUE(engine.Bytes(16 + i) == engine.RoundTrip(i)) << "page " << i;
  }
  // A second offload of the same hashes keeps the stored blocks.
  const v1::OffloadResponse again = Offload(*stub_, reg.engine_id(), 1, 0, 2);
  EXPECT_EQ(again.results(0).code(), v1::ITEM_CODE_ALREADY_STORED);
  EXPECT_EQ(again.stored_pages(), 0u);
  // A miss stops an onboard unless continue_after_miss.
  const v1::OnboardResponse miss = Onboard(*stub_, reg.engine_id(), 2, 3, 24);
  EXPECT_EQ(miss.results(0).code(), v1::ITEM_CODE_NOT_FOUND);
  EXPECT_EQ(miss.results(1).code(), v1::ITEM_CODE_SKIPPED);

  // A call the daemon refuses: an engine it does not know.
  {
    grpc::ClientContext ctx;
    v1::LookupRequest req;
    req.set_engine_id("no-such-engine");
    v1::LookupResponse resp;
    EXPECT_EQ(stub_->Lookup(Context(&ctx), req, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
  }

  const std::string metrics = HttpGet(metrics_port_, "/metrics");
  EXPECT_NE(metrics.find("kvtier_puts_total 8\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("kvtier_engines 1\n"), std::string::npos);
  // Per-RPC metrics (the server interceptor): calls by method and code, unary latencies.
  const std::string svc = "service=\"kvtier.v1.KvTier\",method=";
  for (const std::string& line :
       {"kvtier_rpc_handled_total{" + svc + "\"RegisterEngine\",code=\"OK\"} 1\n",
        "kvtier_rpc_handled_total{" + svc + "\"Offload\",code=\"OK\"} 2\n",
        "kvtier_rpc_handled_total{" + svc + "\"Onboard\",code=\"OK\"} 2\n",
        "kvtier_rpc_handled_total{" + svc + "\"Lookup\",code=\"OK\"} 1\n",
        "kvtier_rpc_handled_total{" + svc + "\"Lookup\",code=\"NOT_FOUND\"} 1\n",
        "kvtier_rpc_duration_seconds_count{" + svc + "\"Lookup\"} 2\n",
        "kvtier_rpc_duration_seconds_count{" + svc + "\"Offload\"} 2\n",
        "kvtier_rpc_duration_seconds_bucket{" + svc + "\"Onboard\",le=\"+Inf\"} 2\n"}) {
    EXPECT_NE(metrics.find(line), std::string::npos) << line << " not in\n" << metrics;
  }
  int code = 0;
  EXPECT_EQ(HttpGet(metrics_port_, "/readyz", &code), "ready\n");
  EXPECT_EQ(code, 200);
  EXPECT_EQ(StopDaemon(SIGTERM), 0) << Log();
}

TEST_F(KvtierdTest, EnginesOfATenantSharePrefixesAndOtherTenantsSeeNone) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  // Engine A is another process (this binary, --offload-client): it registers pool-a, offloads
  // chain 5 and stays registered until told to go. A here only computes the expected pages.
  TestEngine a(dir_->File("pool-expected"), 16), b(dir_->File("pool-b"), 16),
      c(dir_->File("pool-c"), 16);
  for (uint32_t i = 0; i < 4; ++i) a.Fill(i, 7 + i);
  std::string self = "/proc/self/exe", flag = "--offload-client", socket = Socket(),
              dir = dir_->path();
  char* argv[] = {self.data(), flag.data(), socket.data(), dir.data(), nullptr};
  pid_t child = 0;
  ASSERT_EQ(posix_spawn(&child, "/proc/self/exe", nullptr, nullptr, argv, environ), 0);
  const std::string ns_file = dir_->File("engine-a-namespace");
  for (int i = 0; i < 200 && access(ns_file.c_str(), F_OK) != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  uint64_t ns_a = 0;
  std::ifstream(ns_file) >> ns_a;
  const v1::RegisterEngineResponse rb = Register(*stub_, b.Request());
  const v1::RegisterEngineResponse rc = Register(*stub_, c.Request("other-tenant"));
  EXPECT_EQ(ns_a, rb.namespace_id());
  EXPECT_NE(ns_a, rc.namespace_id());
  EXPECT_EQ(Lookup(*stub_, rb.engine_id(), 5, 4).hit_pages(), 4u);
  EXPECT_EQ(Onboard(*stub_, rb.engine_id(), 5, 4, 0).onboarded_pages(), 4u);
  for (uint32_t i = 0; i < 4; ++i) EXPECT_TRUE(b.Bytes(i) == a.RoundTrip(i)) << "page " << i;
  EXPECT_EQ(Lookup(*stub_, rc.engine_id(), 5, 4).hit_pages(), 0u);
  EXPECT_EQ(Onboard(*stub_, rc.engine_id(), 5, 1, 0).results(0).code(), v1::ITEM_CODE_NOT_FOUND);
  std::ofstream(dir_->File("engine-a-done")) << "done";
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "engine A's process failed";
}

TEST_F(KvtierdTest, BadRequestsGetPreciseStatusesAndChangeNothing) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  TestEngine engine(dir_->File("pool-a"), 8);
  engine.Fill(0, 1);
  const std::vector<uint8_t> before = engine.Bytes(0);
  const v1::RegisterEngineResponse reg = Register(*stub_, engine.Request());

  // Out-of-range page index and malformed hashes fail their items; nothing is stored.
  v1::OffloadRequest off;
  off.set_engine_id(reg.engine_id());
  off.add_items()->set_page_index(8);
  off.mutable_items(0)->set_block_hash(Hash(9, 0));
  off.add_items()->set_block_hash(std::string(33, 'x'));
  off.add_items()->set_block_hash("");
  {
    grpc::ClientContext ctx;
    v1::OffloadResponse resp;
    ASSERT_TRUE(stub_->Offload(Context(&ctx), off, &resp).ok());
    for (const v1::ItemResult& r : resp.results()) {
      EXPECT_EQ(r.code(), v1::ITEM_CODE_INVALID_ARGUMENT);
    }
    EXPECT_NE(resp.results(0).message().find("page index 8 out of range"), std::string::npos)
        << resp.results(0).message();
    EXPECT_EQ(resp.stored_pages(), 0u);
  }
  // An onboard into an out-of-range page does not write anything.
  {
    v1::OnboardRequest on;
    on.set_engine_id(reg.engine_id());
    on.add_items()->set_block_hash(Hash(9, 0));
    on.mutable_items(0)->set_page_index(1000);
    grpc::ClientContext ctx;
    v1::OnboardResponse resp;
    ASSERT_TRUE(stub_->Onboard(Context(&ctx), on, &resp).ok());
    EXPECT_EQ(resp.results(0).code(), v1::ITEM_CODE_INVALID_ARGUMENT);
  }
  EXPECT_TRUE(engine.Bytes(0) == before);
  EXPECT_EQ(Lookup(*stub_, reg.engine_id(), 9, 1).hit_pages(), 0u);

  auto expect_register = [&](v1::RegisterEngineRequest req, grpc::StatusCode code,
                             const std::string& words) {
    grpc::ClientContext ctx;
    v1::RegisterEngineResponse resp;
    grpc::Status st = stub_->RegisterEngine(Context(&ctx), req, &resp);
    EXPECT_EQ(st.error_code(), code) << st.error_message();
    EXPECT_NE(st.error_message().find(words), std::string::npos) << st.error_message();
  };
  v1::RegisterEngineRequest bad = engine.Request();
  bad.mutable_layout()->mutable_buffers(1)->set_head_dim(0);
  bad.mutable_layout()->set_fingerprint(0);
  expect_register(bad, grpc::StatusCode::INVALID_ARGUMENT, "head_dim");
  bad = engine.Request();
  bad.mutable_layout()->set_fingerprint(12345);
  expect_register(bad, grpc::StatusCode::FAILED_PRECONDITION, "fingerprint");
  bad = engine.Request();
  bad.mutable_pools(0)->mutable_shared_memory()->set_path("/etc/passwd");
  expect_register(bad, grpc::StatusCode::INVALID_ARGUMENT, "outside the directories");
  // A symlink inside an allowed directory that leads elsewhere is not followed.
  ASSERT_EQ(symlink(dir_->File("pool-a").c_str(), dir_->File("pool-link").c_str()), 0);
  bad = engine.Request();
  bad.mutable_pools(0)->mutable_shared_memory()->set_path(dir_->File("pool-link"));
  expect_register(bad, grpc::StatusCode::INVALID_ARGUMENT, "symlink");
  bad = engine.Request();
  bad.mutable_pools(0)->set_slots(1000);
  expect_register(bad, grpc::StatusCode::FAILED_PRECONDITION, "size_bytes");
  bad = engine.Request();
  bad.clear_model();
  expect_register(bad, grpc::StatusCode::INVALID_ARGUMENT, "model");
  bad = engine.Request();
  bad.mutable_pools(0)->mutable_cuda_ipc()->set_handle(std::string(64, '\0'));
  if (kernels::BuiltWithCuda()) {  // this daemon's host tier is not pinned with CUDA
    expect_register(bad, grpc::StatusCode::FAILED_PRECONDITION, "pinned with CUDA");
  } else {
    expect_register(bad, grpc::StatusCode::UNIMPLEMENTED, "without CUDA");
  }

  {
    v1::KeepAliveRequest req;
    req.set_engine_id("no-such-engine");
    grpc::ClientContext ctx;
    v1::KeepAliveResponse resp;
    EXPECT_EQ(stub_->KeepAlive(Context(&ctx), req, &resp).error_code(),
              grpc::StatusCode::NOT_FOUND);
  }
  {
    v1::LookupRequest req;
    req.set_engine_id(reg.engine_id());
    for (int i = 0; i < 4097; ++i) req.add_block_hashes(Hash(1, i));
    grpc::ClientContext ctx;
    v1::LookupResponse resp;
    grpc::Status st = stub_->Lookup(Context(&ctx), req, &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  }
  {
    v1::OffloadRequest req;
    req.set_engine_id(reg.engine_id());
    req.add_items()->set_block_hash(std::string(5u << 20, 'x'));  // over max_request_bytes
    grpc::ClientContext ctx;
    v1::OffloadResponse resp;
    EXPECT_EQ(stub_->Offload(Context(&ctx), req, &resp).error_code(),
              grpc::StatusCode::RESOURCE_EXHAUSTED);
  }
  {
    grpc::ClientContext ctx;
    v1::HelloRequest req;
    req.set_min_api_version(2);
    v1::HelloResponse resp;
    EXPECT_EQ(stub_->Hello(Context(&ctx), req, &resp).error_code(),
              grpc::StatusCode::FAILED_PRECONDITION);
  }
  // The daemon still serves.
  engine.Fill(1, 2);
  EXPECT_EQ(Offload(*stub_, reg.engine_id(), 10, 1, 1).stored_pages(), 1u);
}

TEST_F(KvtierdTest, AClientThatDiesLeavesTheDaemonHealthyAndIsReleased) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  // A child process (this binary, --dying-client) registers with a short lease, starts an
  // offload of many pages and kills itself while the daemon works on it.
  const std::string engine_file = dir_->File("engine-id");
  std::string self = "/proc/self/exe", flag = "--dying-client", socket = Socket(),
              dir = dir_->path();
  char* argv[] = {self.data(), flag.data(), socket.data(), dir.data(), nullptr};
  pid_t child = 0;
  ASSERT_EQ(posix_spawn(&child, "/proc/self/exe", nullptr, nullptr, argv, environ), 0);
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status)) << "child exited with " << WEXITSTATUS(status);
  std::string engine_id;
  std::ifstream(engine_file) >> engine_id;
  ASSERT_FALSE(engine_id.empty());
  // The lease (0.5 s) runs out and the registration is released. (Polled through the metrics:
  // any RPC naming the engine would renew its lease.)
  bool released = false;
  for (int i = 0; i < 100 && !released; ++i) {
    released = HttpGet(metrics_port_, "/metrics").find("kvtier_engines 0\n") != std::string::npos;
    if (!released) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  {
    v1::KeepAliveRequest req;
    req.set_engine_id(engine_id);
    grpc::ClientContext ctx;
    v1::KeepAliveResponse resp;
    EXPECT_EQ(stub_->KeepAlive(Context(&ctx), req, &resp).error_code(),
              grpc::StatusCode::NOT_FOUND);
  }
  EXPECT_TRUE(released) << "the dead client's engine is still registered";
  // Healthy: a new engine works, and the blocks that were stored are whole.
  TestEngine engine(dir_->File("pool-a"), 8);
  engine.Fill(0, 0);
  const v1::RegisterEngineResponse reg = Register(*stub_, engine.Request());
  const uint32_t stored = Lookup(*stub_, reg.engine_id(), 77, 256).hit_pages();
  if (stored > 0) {
    const v1::OnboardResponse on = Onboard(*stub_, reg.engine_id(), 77, 1, 1);
    EXPECT_EQ(on.results(0).code(), v1::ITEM_CODE_OK);
    TestEngine original(dir_->File("pool-check"), 1);
    original.Fill(0, 0);
    EXPECT_TRUE(engine.Bytes(1) == original.RoundTrip(0));
  }
  int code = 0;
  HttpGet(metrics_port_, "/healthz", &code);
  EXPECT_EQ(code, 200);
}

TEST_F(KvtierdTest, DurableOffloadOfStoredPagesMakesThemDurable) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  TestEngine engine(dir_->File("pool-a"), 8);
  for (uint32_t i = 0; i < 4; ++i) engine.Fill(i, 60 + i);
  const v1::RegisterEngineResponse reg = Register(*stub_, engine.Request());
  ASSERT_EQ(Offload(*stub_, reg.engine_id(), 5, 0, 4).stored_pages(), 4u);
  ASSERT_EQ(TierStatsOf(*stub_, v1::TIER_DISK).blocks(), 0u) << "stored in the host tier only";
  const v1::OffloadResponse again = Offload(*stub_, reg.engine_id(), 5, 0, 4, /*durable=*/true);
  for (const v1::ItemResult& r : again.results()) {
    EXPECT_EQ(r.code(), v1::ITEM_CODE_ALREADY_STORED) << r.message();
  }
  EXPECT_EQ(TierStatsOf(*stub_, v1::TIER_DISK).blocks(), 4u)
      << "a durable offload acknowledged with WRITE_ACK_DURABLE leaves the stored blocks on disk";
}

TEST_F(KvtierdTest, SigtermUnderLoadLosesNoDurableBlock) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  TestEngine engine(dir_->File("pool-a"), 64);
  for (uint32_t i = 0; i < 64; ++i) engine.Fill(i, 1000 + i);
  const v1::RegisterEngineResponse reg = Register(*stub_, engine.Request());
  // Durable offloads from several threads; SIGTERM arrives while they run.
  std::atomic<uint32_t> acknowledged_mask[4] = {};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      auto stub = v1::KvTier::NewStub(channel_);
      for (uint32_t i = 0; i < 16; ++i) {
        v1::OffloadRequest req;
        req.set_engine_id(reg.engine_id());
        req.set_durable(true);
        req.set_ack(v1::WRITE_ACK_DURABLE);
        v1::OffloadItem* item = req.add_items();
        item->set_block_hash(Hash(300 + t, i));
        item->set_page_index(t * 16 + i);
        grpc::ClientContext ctx;
        v1::OffloadResponse resp;
        if (stub->Offload(Context(&ctx), req, &resp).ok() &&
            resp.results(0).code() == v1::ITEM_CODE_OK) {
          acknowledged_mask[t] |= 1u << i;
        }
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_EQ(StopDaemon(SIGTERM), 0) << Log();
  for (std::thread& t : threads) t.join();
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  TestEngine reader(dir_->File("pool-b"), 64);
  const v1::RegisterEngineResponse reg2 = Register(*stub_, reader.Request());
  uint32_t acknowledged = 0;
  for (int t = 0; t < 4; ++t) {
    for (uint32_t i = 0; i < 16; ++i) {
      if ((acknowledged_mask[t] & (1u << i)) == 0) continue;
      ++acknowledged;
      v1::OnboardRequest req;
      req.set_engine_id(reg2.engine_id());
      v1::OnboardItem* item = req.add_items();
      item->set_block_hash(Hash(300 + t, i));
      item->set_page_index(t * 16 + i);
      grpc::ClientContext ctx;
      v1::OnboardResponse resp;
      ASSERT_TRUE(stub_->Onboard(Context(&ctx), req, &resp).ok());
      EXPECT_EQ(resp.results(0).code(), v1::ITEM_CODE_OK)
          << "durable block " << t << "/" << i << " lost: " << resp.results(0).message();
      EXPECT_TRUE(reader.Bytes(t * 16 + i) == engine.RoundTrip(t * 16 + i));
    }
  }
  EXPECT_GT(acknowledged, 0u) << "no offload finished before SIGTERM; the test proves nothing";
}

TEST_F(KvtierdTest, ConfigurationErrorsNameTheField) {
  auto run = [&](std::vector<std::string> extra, std::string* out) {
    std::vector<std::string> args = Args();
    args.insert(args.end(), extra.begin(), extra.end());
    std::string cmd;
    for (const std::string& a : args) cmd += "'" + a + "' ";
    cmd += "2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out->append(buf, n);
    const int status = pclose(p);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  std::string out;
  EXPECT_EQ(run({"--set=host.pin=bogus", "--check-config"}, &out), 1);
  EXPECT_NE(out.find("host.pin"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(run({"--set=host.colour=blue", "--check-config"}, &out), 1);
  EXPECT_NE(out.find("unknown field 'host.colour'"), std::string::npos) << out;
  out.clear();
  std::ofstream(dir_->File("bad.yaml")) << "index:\n  sync: sometimes\n";
  EXPECT_EQ(run({"--config=" + dir_->File("bad.yaml"), "--check-config"}, &out), 1);
  EXPECT_NE(out.find("index.sync"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(run({"--print-default-config"}, &out), 0);
  std::ofstream(dir_->File("default.yaml")) << out;
  out.clear();
  EXPECT_EQ(run({"--config=" + dir_->File("default.yaml"), "--check-config"}, &out), 0) << out;
  out.clear();
  EXPECT_EQ(run({"--no-such-flag"}, &out), 2);
}

TEST_F(KvtierdTest, KvtierctlReportsStatusAndStats) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  TestEngine engine(dir_->File("pool-a"), 8);
  for (uint32_t i = 0; i < 4; ++i) engine.Fill(i, i);
  const v1::RegisterEngineResponse reg = Register(*stub_, engine.Request());
  EXPECT_EQ(Offload(*stub_, reg.engine_id(), 1, 0, 4).stored_pages(), 4u);
  const std::string ctl = std::string(KVTIERCTL_PATH) + " --socket=" + Socket();
  std::string out;
  ASSERT_EQ(RunCommand(ctl + " status", &out), 0) << out;
  EXPECT_NE(out.find("kvtierd 0.1.0"), std::string::npos) << out;
  EXPECT_NE(out.find("1 engines"), std::string::npos) << out;
  EXPECT_NE(out.find(reg.engine_id()), std::string::npos) << out;
  out.clear();
  ASSERT_EQ(RunCommand(ctl + " stats", &out), 0) << out;
  EXPECT_NE(out.find("host"), std::string::npos) << out;
  EXPECT_NE(out.find("disk"), std::string::npos) << out;
  out.clear();
  ASSERT_EQ(RunCommand(ctl + " stats --json", &out), 0) << out;
  EXPECT_NE(out.find("\"registered_engines\": 1"), std::string::npos) << out;
  EXPECT_NE(out.find("\"TIER_HOST\""), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(RunCommand(std::string(KVTIERCTL_PATH) + " --socket=" + dir_->File("none.sock") +
                           " --timeout=1 status",
                       &out),
            1);
  EXPECT_NE(out.find("is kvtierd running"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(RunCommand(ctl + " frobnicate", &out), 2);
}

TEST_F(KvtierdTest, KvtierctlDrainsVerifiesAndClears) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  TestEngine engine(dir_->File("pool-a"), 8);
  for (uint32_t i = 0; i < 4; ++i) engine.Fill(i, i);
  const v1::RegisterEngineResponse reg = Register(*stub_, engine.Request());
  EXPECT_EQ(Offload(*stub_, reg.engine_id(), 1, 0, 4).stored_pages(), 4u);
  const std::string ctl = std::string(KVTIERCTL_PATH) + " --socket=" + Socket();
  std::string out;
  ASSERT_EQ(RunCommand(ctl + " drain --flush-to-disk", &out), 0) << out;
  EXPECT_NE(out.find("drained"), std::string::npos) << out;
  {
    v1::OffloadRequest req;
    req.set_engine_id(reg.engine_id());
    req.add_items()->set_block_hash(Hash(2, 0));
    grpc::ClientContext ctx;
    v1::OffloadResponse resp;
    EXPECT_EQ(stub_->Offload(Context(&ctx), req, &resp).error_code(), grpc::StatusCode::UNAVAILABLE)
        << "a draining daemon takes no writes";
  }
  EXPECT_EQ(Lookup(*stub_, reg.engine_id(), 1, 4).hit_pages(), 4u) << "lookups still work";
  {
    v1::StatsRequest req;
    grpc::ClientContext ctx;
    v1::StatsResponse resp;
    ASSERT_TRUE(stub_->Stats(Context(&ctx), req, &resp).ok());
    EXPECT_TRUE(resp.draining());
    bool on_disk = false;
    for (const v1::TierStats& t : resp.tiers())
      on_disk |= t.tier() == v1::TIER_DISK && t.blocks() == 4;
    EXPECT_TRUE(on_disk) << "--flush-to-disk writes the host tier to disk";
  }
  out.clear();
  ASSERT_EQ(RunCommand(ctl + " drain --cancel", &out), 0) << out;
  engine.Fill(5, 5);
  EXPECT_EQ(Offload(*stub_, reg.engine_id(), 3, 5, 1).stored_pages(), 1u);
  out.clear();
  ASSERT_EQ(RunCommand(ctl + " verify", &out), 0) << out;
  // Every copy is checked: 5 in the host tier, and the 4 the flush copied to disk.
  EXPECT_NE(out.find("verified 9 blocks"), std::string::npos) << out;
  EXPECT_NE(out.find("0 corrupt"), std::string::npos) << out;
  out.clear();
  ASSERT_EQ(RunCommand(ctl + " verify --tier=disk --max-blocks=2 --report-only", &out), 0) << out;
  EXPECT_NE(out.find("verified 2 blocks"), std::string::npos) << out;
  EXPECT_NE(out.find("stopped at --max-blocks"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(RunCommand(ctl + " verify --tier=gpu", &out), 2) << out;
  out.clear();
  EXPECT_EQ(RunCommand(ctl + " clear", &out), 2) << out;
  out.clear();
  ASSERT_EQ(RunCommand(ctl + " clear --model=test-model", &out), 0) << out;
  EXPECT_NE(out.find("cleared 1 namespaces: 5 blocks removed"), std::string::npos) << out;
  EXPECT_EQ(Lookup(*stub_, reg.engine_id(), 1, 4).hit_pages(), 0u);
  out.clear();
  EXPECT_EQ(RunCommand(ctl + " clear --namespace=123", &out), 1) << out;
  EXPECT_NE(out.find("unknown"), std::string::npos) << out;
}

// drain --flush-to-disk copies the host tier to disk: the blocks stay in host memory (so a
// cancelled drain, an aborted upgrade, still reads them from there), the disk holds them as well,
// no tier counts an eviction for the copies, and after a restart (the host tier is not
// persistent) they are read from disk, intact. The flush used to demote the blocks instead, and
// counted each as an eviction.
TEST_F(KvtierdTest, DrainFlushToDiskCopiesTheHostTierAndARestartReadsItFromDisk) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  TestEngine engine(dir_->File("pool-a"), 16);
  for (uint32_t i = 0; i < 6; ++i) engine.Fill(i, 40 + i);
  v1::RegisterEngineResponse reg = Register(*stub_, engine.Request("team-a"));
  ASSERT_EQ(Offload(*stub_, reg.engine_id(), 7, 0, 6).stored_pages(), 6u);
  auto tier = [&](v1::Tier which) {
    v1::StatsRequest req;
    grpc::ClientContext ctx;
    v1::StatsResponse resp;
    EXPECT_TRUE(stub_->Stats(Context(&ctx), req, &resp).ok());
    for (const v1::TierStats& t : resp.tiers()) {
      if (t.tier() == which) return t;
    }
    ADD_FAILURE() << "no tier " << which;
    return v1::TierStats();
  };
  ASSERT_EQ(tier(v1::TIER_HOST).blocks(), 6u);
  ASSERT_EQ(tier(v1::TIER_DISK).blocks(), 0u);

  const std::string ctl = std::string(KVTIERCTL_PATH) + " --socket=" + Socket();
  std::string out;
  ASSERT_EQ(RunCommand(ctl + " drain --flush-to-disk --json", &out), 0) << out;
  EXPECT_NE(out.find("\"flushed_blocks\": 6"), std::string::npos) << out;
  EXPECT_EQ(tier(v1::TIER_HOST).blocks(), 6u) << "the host copies stay";
  EXPECT_EQ(tier(v1::TIER_DISK).blocks(), 6u) << "and the disk holds the blocks too";
  EXPECT_EQ(tier(v1::TIER_HOST).evicted_blocks(), 0u);
  EXPECT_EQ(tier(v1::TIER_DISK).evicted_blocks(), 0u);
  {
    const std::string metrics = HttpGet(metrics_port_, "/metrics");
    size_t samples = 0;
    for (size_t at = metrics.find("\nkvtier_evictions_total{"); at != std::string::npos;
         at = metrics.find("\nkvtier_evictions_total{", at + 1)) {
      const std::string line = metrics.substr(at + 1, metrics.find('\n', at + 1) - at - 1);
      EXPECT_EQ(line.substr(line.rfind(' ')), " 0") << "a copy counted as an eviction: " << line;
      ++samples;
    }
    EXPECT_GT(samples, 0u) << metrics;
  }
  const v1::LookupResponse drained = Lookup(*stub_, reg.engine_id(), 7, 6);
  ASSERT_EQ(drained.tiers_size(), 6);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(drained.tiers(i), v1::TIER_HOST) << "block " << i;

  // An aborted upgrade: the drain is cancelled and the blocks are read from host memory.
  out.clear();
  ASSERT_EQ(RunCommand(ctl + " drain --cancel", &out), 0) << out;
  const v1::OnboardResponse from_host = Onboard(*stub_, reg.engine_id(), 7, 6, 8);
  EXPECT_EQ(from_host.onboarded_pages(), 6u);
  for (const v1::ItemResult& r : from_host.results()) EXPECT_EQ(r.tier(), v1::TIER_HOST);

  // The upgrade after all: a restart loses the host tier, and the disk serves every block.
  ASSERT_EQ(StopDaemon(SIGTERM), 0) << Log();
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  reg = Register(*stub_, engine.Request("team-a"));
  EXPECT_EQ(tier(v1::TIER_HOST).blocks(), 0u);
  EXPECT_EQ(tier(v1::TIER_DISK).blocks(), 6u);
  const v1::LookupResponse restarted = Lookup(*stub_, reg.engine_id(), 7, 6);
  ASSERT_EQ(restarted.tiers_size(), 6);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(restarted.tiers(i), v1::TIER_DISK) << "block " << i;
  const v1::OnboardResponse from_disk = Onboard(*stub_, reg.engine_id(), 7, 6, 8);
  EXPECT_EQ(from_disk.onboarded_pages(), 6u);
  for (uint32_t i = 0; i < 6; ++i) {
    EXPECT_EQ(from_disk.results(i).code(), v1::ITEM_CODE_OK) << from_disk.results(i).message();
    EXPECT_EQ(from_disk.results(i).tier(), v1::TIER_DISK);
    EXPECT_TRUE(engine.Bytes(8 + i) == engine.RoundTrip(i)) << "page " << i;
  }
  EXPECT_EQ(StopDaemon(SIGTERM), 0) << Log();
}

TEST_F(KvtierdTest, TenantTokensDecideTheNamespaceAndGuardEngines) {
  const std::string tokens = dir_->File("tokens");
  std::ofstream(tokens) << "# tenant tokens\n"
                        << "alice " << service::TokenAuth::HashToken("token-a") << "\n"
                        << "bob   " << service::TokenAuth::HashToken("token-b") << "  # bob\n"
                        << "admin " << service::TokenAuth::HashToken("token-admin") << "\n";
  ASSERT_NO_FATAL_FAILURE(StartDaemon({"--set=auth.tokens_file=" + tokens}));
  auto call = [](grpc::ClientContext* ctx, const std::string& token) {
    Context(ctx);
    if (!token.empty()) ctx->AddMetadata("authorization", "Bearer " + token);
    return ctx;
  };
  // With authentication on, a tenant's pools live in its subdirectory of an allowed directory.
  ASSERT_EQ(mkdir(dir_->File("alice").c_str(), 0700), 0);
  ASSERT_EQ(mkdir(dir_->File("bob").c_str(), 0700), 0);
  TestEngine a(dir_->File("alice/pool-a"), 8), b(dir_->File("bob/pool-b"), 8);
  TestEngine stray(dir_->File("pool-stray"), 8);
  for (uint32_t i = 0; i < 4; ++i) a.Fill(i, i);
  auto register_as = [&](TestEngine& e, const std::string& token, const std::string& tenant,
                         v1::RegisterEngineResponse* resp) {
    grpc::ClientContext ctx;
    return stub_->RegisterEngine(call(&ctx, token), e.Request(tenant), resp);
  };
  v1::RegisterEngineResponse ra, rb, unused;
  EXPECT_EQ(register_as(a, "", "", &unused).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(register_as(a, "wrong", "", &unused).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(register_as(a, "token-a", "bob", &unused).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(register_as(b, "token-a", "", &unused).error_code(), grpc::StatusCode::INVALID_ARGUMENT)
      << "alice may not map bob's pool";
  EXPECT_EQ(register_as(stray, "token-a", "", &unused).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT)
      << "a pool outside the tenant's subdirectory";
  ASSERT_TRUE(register_as(a, "token-a", "", &ra).ok());
  ASSERT_TRUE(register_as(b, "token-b", "", &rb).ok());
  EXPECT_EQ(ra.ns().tenant(), "alice");
  EXPECT_NE(ra.namespace_id(), rb.namespace_id());
  {
    v1::OffloadRequest req;
    req.set_engine_id(ra.engine_id());
    for (uint32_t i = 0; i < 4; ++i) {
      req.add_items()->set_block_hash(Hash(1, i));
      req.mutable_items(static_cast<int>(i))->set_page_index(i);
    }
    grpc::ClientContext ctx;
    v1::OffloadResponse resp;
    ASSERT_TRUE(stub_->Offload(call(&ctx, "token-a"), req, &resp).ok());
    EXPECT_EQ(resp.stored_pages(), 4u);
    grpc::ClientContext ctx2;
    EXPECT_EQ(stub_->Offload(call(&ctx2, "token-b"), req, &resp).error_code(),
              grpc::StatusCode::PERMISSION_DENIED)
        << "bob may not use alice's engine";
  }
  auto lookup = [&](const std::string& token, v1::LookupRequest req) {
    for (uint32_t i = 0; i < 4; ++i) req.add_block_hashes(Hash(1, i));
    grpc::ClientContext ctx;
    v1::LookupResponse resp;
    grpc::Status st = stub_->Lookup(call(&ctx, token), req, &resp);
    return std::make_pair(st.error_code(), resp.hit_pages());
  };
  v1::LookupRequest by_engine_a, by_engine_b, by_ns_a;
  by_engine_a.set_engine_id(ra.engine_id());
  by_engine_b.set_engine_id(rb.engine_id());
  by_ns_a.set_namespace_id(ra.namespace_id());
  EXPECT_EQ(lookup("token-a", by_engine_a), std::make_pair(grpc::StatusCode::OK, 4u));
  EXPECT_EQ(lookup("token-a", by_ns_a), std::make_pair(grpc::StatusCode::OK, 4u));
  EXPECT_EQ(lookup("token-b", by_engine_b), std::make_pair(grpc::StatusCode::OK, 0u));
  EXPECT_EQ(lookup("token-b", by_engine_a).first, grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(lookup("token-b", by_ns_a).first, grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(lookup("", by_engine_a).first, grpc::StatusCode::UNAUTHENTICATED);
  // The admin service needs an admin tenant.
  const std::string ctl = std::string(KVTIERCTL_PATH) + " --socket=" + Socket();
  std::ofstream(dir_->File("token-b")) << "token-b\n";
  std::ofstream(dir_->File("token-admin")) << "token-admin\n";
  std::string out;
  EXPECT_EQ(RunCommand(ctl + " --token-file=" + dir_->File("token-b") + " verify", &out), 1);
  EXPECT_NE(out.find("may not use the admin service"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(RunCommand(ctl + " --token-file=" + dir_->File("token-admin") + " verify", &out), 0)
      << out;
  out.clear();
  EXPECT_EQ(RunCommand(ctl + " status", &out), 1) << "no token: " << out;
}

TEST_F(KvtierdTest, ParkResumeAndReleaseAPausedRequest) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  TestEngine engine(dir_->File("pool-a"), 16);
  for (uint32_t i = 0; i < 4; ++i) engine.Fill(i, 40 + i);
  const v1::RegisterEngineResponse reg = Register(*stub_, engine.Request());
  auto park = [&](const std::string& id, std::vector<uint32_t> pages, bool append,
                  v1::ParkResponse* resp) {
    v1::ParkRequest req;
    req.set_engine_id(reg.engine_id());
    req.set_request_id(id);
    for (uint32_t p : pages) req.add_page_indices(p);
    req.set_append(append);
    req.set_num_tokens(61);
    if (!append) req.set_user_data("sampling-state");
    grpc::ClientContext ctx;
    return stub_->Park(Context(&ctx), req, resp);
  };
  v1::ParkResponse pr;
  ASSERT_TRUE(park("req-1", {0, 1, 2}, false, &pr).ok());
  EXPECT_EQ(pr.parked_pages(), 3u);
  EXPECT_EQ(park("req-1", {3}, false, &pr).error_code(), grpc::StatusCode::ALREADY_EXISTS);
  ASSERT_TRUE(park("req-1", {3}, true, &pr).ok());
  EXPECT_EQ(pr.parked_pages(), 4u);
  EXPECT_EQ(park("req-2", {3}, true, &pr).error_code(), grpc::StatusCode::NOT_FOUND);
  // All or nothing: one bad page index parks nothing.
  EXPECT_EQ(park("req-3", {0, 99}, false, &pr).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // Parked pages are not prefix blocks.
  EXPECT_EQ(Lookup(*stub_, reg.engine_id(), 1, 4).hit_pages(), 0u);

  auto resume = [&](const std::string& id, std::vector<uint32_t> pages, uint32_t first,
                    v1::ResumeResponse* resp) {
    v1::ResumeRequest req;
    req.set_engine_id(reg.engine_id());
    req.set_request_id(id);
    for (uint32_t p : pages) req.add_page_indices(p);
    req.set_first_page(first);
    grpc::ClientContext ctx;
    return stub_->Resume(Context(&ctx), req, resp);
  };
  v1::ResumeResponse rr;
  EXPECT_EQ(resume("req-3", {8}, 0, &rr).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(resume("req-1", {8, 9, 10, 11, 12}, 0, &rr).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT)
      << "more pages than parked";
  ASSERT_TRUE(resume("req-1", {8, 9}, 0, &rr).ok());  // the first half
  EXPECT_FALSE(rr.released());
  ASSERT_TRUE(resume("req-1", {10, 11}, 2, &rr).ok());  // the rest: released
  EXPECT_TRUE(rr.released());
  EXPECT_EQ(rr.parked_pages(), 4u);
  EXPECT_EQ(rr.num_tokens(), 61u);
  EXPECT_EQ(rr.user_data(), "sampling-state");
  for (uint32_t i = 0; i < 4; ++i) {
    EXPECT_TRUE(engine.Bytes(8 + i) == engine.RoundTrip(i)) << "parked page " << i;
  }
  EXPECT_EQ(resume("req-1", {8}, 0, &rr).error_code(), grpc::StatusCode::NOT_FOUND);

  ASSERT_TRUE(park("req-4", {0, 1}, false, &pr).ok());
  {
    v1::ReleaseRequest req;
    req.set_engine_id(reg.engine_id());
    req.add_request_ids("req-4");
    req.add_request_ids("req-4");
    grpc::ClientContext ctx;
    v1::ReleaseResponse resp;
    ASSERT_TRUE(stub_->Release(Context(&ctx), req, &resp).ok());
    EXPECT_EQ(resp.results(0).code(), v1::ITEM_CODE_OK);
    EXPECT_EQ(resp.results(1).code(), v1::ITEM_CODE_NOT_FOUND);
    EXPECT_GT(resp.freed_bytes(), 0u);
  }
  ASSERT_TRUE(park("req-5", {0}, false, &pr).ok());
  {
    v1::UnregisterRequest req;
    req.set_engine_id(reg.engine_id());
    grpc::ClientContext ctx;
    v1::UnregisterResponse resp;
    ASSERT_TRUE(stub_->Unregister(Context(&ctx), req, &resp).ok());
    EXPECT_EQ(resp.released_parked_requests(), 1u);
  }
}

TEST_F(KvtierdTest, PinsHoldBlocksForALease) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  TestEngine engine(dir_->File("pool-a"), 8);
  for (uint32_t i = 0; i < 4; ++i) engine.Fill(i, i);
  const v1::RegisterEngineResponse reg = Register(*stub_, engine.Request());
  EXPECT_EQ(Offload(*stub_, reg.engine_id(), 1, 0, 4).stored_pages(), 4u);
  auto pinned = [&] {
    v1::StatsRequest req;
    grpc::ClientContext ctx;
    v1::StatsResponse resp;
    EXPECT_TRUE(stub_->Stats(Context(&ctx), req, &resp).ok());
    for (const v1::TierStats& t : resp.tiers()) {
      if (t.tier() == v1::TIER_HOST) return t.pinned_blocks();
    }
    return uint64_t{0};
  };
  auto pin = [&](std::vector<uint32_t> blocks, v1::PinResponse* resp) {
    v1::PinRequest req;
    req.set_engine_id(reg.engine_id());
    for (uint32_t b : blocks) req.add_block_hashes(Hash(1, b));
    grpc::ClientContext ctx;
    return stub_->Pin(Context(&ctx), req, resp);
  };
  v1::PinResponse pr;
  ASSERT_TRUE(pin({0, 1, 2, 3, 9}, &pr).ok());
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(pr.results(i).code(), v1::ITEM_CODE_OK);
    EXPECT_EQ(pr.results(i).tier(), v1::TIER_HOST);
  }
  EXPECT_EQ(pr.results(4).code(), v1::ITEM_CODE_NOT_FOUND);
  EXPECT_EQ(pinned(), 4u);
  ASSERT_TRUE(pin({0, 1}, &pr).ok());
  EXPECT_EQ(pinned(), 4u) << "pinning again extends, it does not stack";
  {
    v1::UnpinRequest req;
    req.set_engine_id(reg.engine_id());
    req.add_block_hashes(Hash(1, 0));
    req.add_block_hashes(Hash(1, 0));
    grpc::ClientContext ctx;
    v1::UnpinResponse resp;
    ASSERT_TRUE(stub_->Unpin(Context(&ctx), req, &resp).ok());
    EXPECT_EQ(resp.results(0).code(), v1::ITEM_CODE_OK);
    EXPECT_EQ(resp.results(1).code(), v1::ITEM_CODE_FAILED_PRECONDITION);
  }
  EXPECT_EQ(pinned(), 3u);
  {
    v1::LookupRequest req;
    req.set_engine_id(reg.engine_id());
    for (uint32_t i = 0; i < 4; ++i) req.add_block_hashes(Hash(1, i));
    req.mutable_pin_ttl()->set_seconds(60);
    grpc::ClientContext ctx;
    v1::LookupResponse resp;
    ASSERT_TRUE(stub_->Lookup(Context(&ctx), req, &resp).ok());
    EXPECT_EQ(resp.hit_pages(), 4u);
    EXPECT_TRUE(resp.has_pin_expires_at());
  }
  EXPECT_EQ(pinned(), 4u);
  // One more pin; Unregister then drops every pin of the engine.
  {
    v1::PinRequest req;
    req.set_engine_id(reg.engine_id());
    req.add_block_hashes(Hash(1, 0));
    grpc::ClientContext ctx;
    v1::PinResponse resp;
    ASSERT_TRUE(stub_->Pin(Context(&ctx), req, &resp).ok());
  }
  {
    v1::UnregisterRequest req;
    req.set_engine_id(reg.engine_id());
    grpc::ClientContext ctx;
    v1::UnregisterResponse resp;
    ASSERT_TRUE(stub_->Unregister(Context(&ctx), req, &resp).ok());
    EXPECT_EQ(resp.released_pins(), 4u);  // the Lookup's four; the fifth extended one of them
  }
  EXPECT_EQ(pinned(), 0u) << "an engine's pins end with it";
}

TEST_F(KvtierdTest, WorkPastTheDefaultDeadlineFailsAndReleasesItsEngine) {
  // One worker, a 1 ms default deadline: a call without a deadline that waits behind long ones
  // fails DEADLINE_EXCEEDED without running, and its engine can still be unregistered.
  ASSERT_NO_FATAL_FAILURE(
      StartDaemon({"--set=server.workers=1", "--set=server.default_deadline_seconds=0.001"}));
  TestEngine engine(dir_->File("pool-a"), 64);
  for (uint32_t i = 0; i < 64; ++i) engine.Fill(i, i);
  const v1::RegisterEngineResponse reg = Register(*stub_, engine.Request());
  auto long_call = [&](uint64_t chain) {
    v1::OffloadRequest req;
    req.set_engine_id(reg.engine_id());
    for (uint32_t i = 0; i < 4096; ++i) {
      v1::OffloadItem* item = req.add_items();
      item->set_block_hash(Hash(chain, i));
      item->set_page_index(i % 64);
    }
    grpc::ClientContext ctx;
    v1::OffloadResponse resp;
    EXPECT_TRUE(stub_->Offload(Context(&ctx), req, &resp).ok());
  };
  std::thread long_call_a(long_call, 9);
  std::thread long_call_b(long_call, 10);
  // Time for the long calls to reach the daemon; the second one keeps the worker busy for long
  // after that, even on a loaded machine where the first one starts late.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  v1::OffloadRequest req;
  req.set_engine_id(reg.engine_id());
  v1::OffloadItem* item = req.add_items();
  item->set_block_hash(Hash(1, 0));
  item->set_page_index(0);
  grpc::ClientContext ctx;  // no deadline
  v1::OffloadResponse resp;
  const grpc::Status st = stub_->Offload(&ctx, req, &resp);
  long_call_a.join();
  long_call_b.join();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << st.error_message();
  EXPECT_NE(st.error_message().find("default deadline"), std::string::npos) << st.error_message();
  EXPECT_EQ(Lookup(*stub_, reg.engine_id(), 1, 1).hit_pages(), 0u);  // it did not run
  grpc::ClientContext unreg_ctx;
  unreg_ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::UnregisterRequest unreg;
  unreg.set_engine_id(reg.engine_id());
  v1::UnregisterResponse unreg_resp;
  const grpc::Status gone = stub_->Unregister(&unreg_ctx, unreg, &unreg_resp);
  EXPECT_TRUE(gone.ok()) << "the skipped call still holds its engine: " << gone.error_message();
}

// Engine A of EnginesOfATenantSharePrefixesAndOtherTenantsSeeNone, in its own process: registers
// pool-a, offloads chain 5 (4 pages), writes its namespace id, waits for engine-a-done, then
// unregisters. Exit status 0 when every step worked.
int OffloadClient(const std::string& socket, const std::string& dir) {
  auto channel = grpc::CreateChannel("unix:" + socket, grpc::InsecureChannelCredentials());
  auto stub = v1::KvTier::NewStub(channel);
  TestEngine engine(dir + "/pool-a", 16);
  for (uint32_t i = 0; i < 4; ++i) engine.Fill(i, 7 + i);
  grpc::ClientContext ctx;
  v1::RegisterEngineResponse reg;
  if (!stub->RegisterEngine(DaemonFixture::Context(&ctx), engine.Request(), &reg).ok()) return 3;
  if (Offload(*stub, reg.engine_id(), 5, 0, 4).stored_pages() != 4) return 4;
  std::ofstream(dir + "/engine-a-namespace.tmp") << reg.namespace_id();
  std::rename((dir + "/engine-a-namespace.tmp").c_str(), (dir + "/engine-a-namespace").c_str());
  for (int i = 0; i < 600 && access((dir + "/engine-a-done").c_str(), F_OK) != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  v1::UnregisterRequest unreg;
  unreg.set_engine_id(reg.engine_id());
  grpc::ClientContext uctx;
  v1::UnregisterResponse uresp;
  return stub->Unregister(DaemonFixture::Context(&uctx), unreg, &uresp).ok() ? 0 : 5;
}

// The child of AClientThatDiesLeavesTheDaemonHealthyAndIsReleased (a separate process: gRPC
// does not survive fork).
int DyingClient(const std::string& socket, const std::string& dir) {
  auto channel = grpc::CreateChannel("unix:" + socket, grpc::InsecureChannelCredentials());
  auto stub = v1::KvTier::NewStub(channel);
  TestEngine engine(dir + "/pool-child", 256);
  for (uint32_t i = 0; i < 256; ++i) engine.Fill(i, i);
  v1::RegisterEngineRequest req = engine.Request();
  req.mutable_lease_ttl()->set_nanos(500000000);
  grpc::ClientContext ctx;
  v1::RegisterEngineResponse reg;
  if (!stub->RegisterEngine(&ctx, req, &reg).ok()) return 3;
  std::ofstream(dir + "/engine-id") << reg.engine_id();
  v1::OffloadRequest off;
  off.set_engine_id(reg.engine_id());
  for (uint32_t i = 0; i < 256; ++i) {
    v1::OffloadItem* item = off.add_items();
    item->set_block_hash(Hash(77, i));
    item->set_page_index(i);
  }
  grpc::ClientContext octx;
  v1::OffloadResponse oresp;
  stub->async()->Offload(&octx, &off, &oresp, [](grpc::Status) {});
  std::this_thread::sleep_for(std::chrono::milliseconds(3));
  raise(SIGKILL);
  return 4;
}

}  // namespace
}  // namespace kvtier::integration

int main(int argc, char** argv) {
  if (argc == 4 && std::string(argv[1]) == "--dying-client") {
    return kvtier::integration::DyingClient(argv[2], argv[3]);
  }
  if (argc == 4 && std::string(argv[1]) == "--offload-client") {
    return kvtier::integration::OffloadClient(argv[2], argv[3]);
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
