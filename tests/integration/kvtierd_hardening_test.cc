// kvtierd against hostile tenants, bad memory and damaged state, as a process: pool paths that
// climb into another tenant's directory or name a directory, pools that cannot be backed or lose
// their backing during a request (no SIGBUS may reach the daemon), namespace ids that nobody can
// compute without the daemon's key, per-tenant caps, what Stats shows a tenant, the modes of the
// files the daemon creates, a state drive that fills up (and a restart on it), and indexes that
// do not open. Tests that need a small file system mount a tmpfs (root only) and skip elsewhere.
#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "daemon/service/auth.h"
#include "tests/integration/daemon_fixture.h"
#include "tests/testing/small_file_system.h"

namespace kvtier::integration {
namespace {

using HardeningTest = DaemonFixture;
using kvtier::testing::SmallFileSystem;

constexpr uint64_t kMiB = 1 << 20;

grpc::ClientContext* As(grpc::ClientContext* ctx, const std::string& token) {
  DaemonFixture::Context(ctx);
  if (!token.empty()) ctx->AddMetadata("authorization", "Bearer " + token);
  return ctx;
}

grpc::Status RegisterAs(v1::KvTier::Stub& stub, const v1::RegisterEngineRequest& req,
                        const std::string& token, v1::RegisterEngineResponse* resp) {
  grpc::ClientContext ctx;
  return stub.RegisterEngine(As(&ctx, token), req, resp);
}

std::string WriteTokens(const std::string& path) {
  std::ofstream(path) << "alice " << service::TokenAuth::HashToken("token-a") << "\n"
                      << "bob " << service::TokenAuth::HashToken("token-b") << "\n"
                      << "admin " << service::TokenAuth::HashToken("token-admin") << "\n";
  return path;
}

// Polls `path` of the metrics listener until its status is `code`, for at most 10 s.
bool AwaitHttp(int port, const std::string& path, int code, std::string* body = nullptr) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    int got = 0;
    const std::string text = HttpGet(port, path, &got);
    if (got == code) {
      if (body != nullptr) *body = text;
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

TEST_F(HardeningTest, APoolPathThatLeavesTheTenantsDirectoryIsRefused) {
  ASSERT_NO_FATAL_FAILURE(
      StartDaemon({"--set=auth.tokens_file=" + WriteTokens(dir_->File("tokens"))}));
  ASSERT_EQ(mkdir(dir_->File("alice").c_str(), 0700), 0);
  ASSERT_EQ(mkdir(dir_->File("bob").c_str(), 0700), 0);
  TestEngine alice(dir_->File("alice/alice.kv"), 8);
  v1::RegisterEngineResponse ra, rb;
  ASSERT_TRUE(RegisterAs(*stub_, alice.Request(), "token-a", &ra).ok());
  // bob names alice's file through his own directory: the path starts with "<allowed>/bob/".
  v1::RegisterEngineRequest climb = alice.Request();
  climb.mutable_pools(0)->mutable_shared_memory()->set_path(dir_->File("bob/../alice/alice.kv"));
  grpc::Status st = RegisterAs(*stub_, climb, "token-b", &rb);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  EXPECT_NE(st.error_message().find("out of"), std::string::npos) << st.error_message();
  // A hard link to alice's registered pool inside bob's directory: the same file.
  ASSERT_EQ(link(dir_->File("alice/alice.kv").c_str(), dir_->File("bob/linked.kv").c_str()), 0);
  v1::RegisterEngineRequest linked = alice.Request();
  linked.mutable_pools(0)->mutable_shared_memory()->set_path(dir_->File("bob/linked.kv"));
  st = RegisterAs(*stub_, linked, "token-b", &rb);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << st.error_message();
  EXPECT_NE(st.error_message().find("another tenant"), std::string::npos) << st.error_message();
}

TEST_F(HardeningTest, APoolPathThatIsADirectoryIsInvalidArgument) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  TestEngine engine(dir_->File("pool"), 4);
  ASSERT_EQ(mkdir(dir_->File("a-directory").c_str(), 0700), 0);
  v1::RegisterEngineRequest req = engine.Request();
  req.mutable_pools(0)->mutable_shared_memory()->set_path(dir_->File("a-directory"));
  v1::RegisterEngineResponse resp;
  grpc::Status st = RegisterAs(*stub_, req, "", &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  EXPECT_NE(st.error_message().find("is a directory"), std::string::npos) << st.error_message();
}

TEST_F(HardeningTest, PoolMemoryThatCannotBeBackedNeverRaisesSigbusInTheDaemon) {
  absl::StatusOr<std::unique_ptr<SmallFileSystem>> fs = SmallFileSystem::Mount(2 * kMiB);
  if (!fs.ok()) GTEST_SKIP() << fs.status();
  ASSERT_NO_FATAL_FAILURE(StartDaemon({"--set=pools.allowed_dirs=[" + (*fs)->path() + "]"}));
  // A sparse pool larger than what the file system has left: refused at registration.
  {
    TestEngine sparse((*fs)->File("sparse.kv"), 16);  // 16 pages of 16 KiB, no page allocated
    (*fs)->Fill(64 << 10);
    v1::RegisterEngineResponse resp;
    grpc::Status st = RegisterAs(*stub_, sparse.Request(), "", &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
    EXPECT_NE(st.error_message().find("cannot be backed"), std::string::npos) << st.error_message();
    (*fs)->Unfill();
  }
  // A registered pool that loses a page: the engine punches a hole where an onboard will write
  // and the file system is full, so the daemon's write faults.
  TestEngine engine((*fs)->File("pool.kv"), 8);
  for (uint32_t i = 0; i < 4; ++i) engine.Fill(i, 40 + i);
  const v1::RegisterEngineResponse reg = Register(*stub_, engine.Request());
  ASSERT_EQ(Offload(*stub_, reg.engine_id(), 7, 0, 4).stored_pages(), 4u);
  {
    const int fd = open((*fs)->File("pool.kv").c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                        static_cast<off_t>(5 * engine.page_bytes()),
                        static_cast<off_t>(engine.page_bytes())),
              0);
    close(fd);
  }
  (*fs)->Fill(0);
  v1::OnboardRequest req;
  req.set_engine_id(reg.engine_id());
  v1::OnboardItem* item = req.add_items();
  item->set_block_hash(Hash(7, 0));
  item->set_page_index(5);
  grpc::ClientContext ctx;
  v1::OnboardResponse resp;
  grpc::Status st = stub_->Onboard(Context(&ctx), req, &resp);
  ASSERT_TRUE(st.ok()) << st.error_message() << "\n" << Log();
  ASSERT_EQ(resp.results_size(), 1);
  EXPECT_EQ(resp.results(0).code(), v1::ITEM_CODE_FAILED_PRECONDITION);
  EXPECT_NE(resp.results(0).message().find("lost memory"), std::string::npos)
      << resp.results(0).message();
  EXPECT_EQ(resp.onboarded_pages(), 0u);
  // The daemon lives on; the damaged registration keeps failing, a new one works.
  EXPECT_EQ(Lookup(*stub_, reg.engine_id(), 7, 4).hit_pages(), 4u);
  v1::OnboardResponse again = Onboard(*stub_, reg.engine_id(), 7, 1, 0);
  ASSERT_EQ(again.results_size(), 1);
  EXPECT_EQ(again.results(0).code(), v1::ITEM_CODE_FAILED_PRECONDITION);
  (*fs)->Unfill();
  const v1::RegisterEngineResponse fresh = Register(*stub_, engine.Request());
  EXPECT_EQ(Onboard(*stub_, fresh.engine_id(), 7, 4, 4).onboarded_pages(), 4u);
  EXPECT_EQ(engine.Bytes(4), engine.RoundTrip(0));
}

TEST_F(HardeningTest, NamespaceIdsAreKeyedWideAndStableAcrossRestarts) {
  TestEngine engine(dir_->File("pool"), 4);
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  const uint64_t first = Register(*stub_, engine.Request()).namespace_id();
  ASSERT_EQ(StopDaemon(), 0);
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  EXPECT_EQ(Register(*stub_, engine.Request()).namespace_id(), first) << "same key, same id";
  ASSERT_EQ(StopDaemon(), 0);
  // Another daemon (another state directory, so another key) derives another id for the same
  // tenant, model, partition, layout and codec: ids cannot be computed from public inputs.
  ASSERT_NO_FATAL_FAILURE(StartDaemon({"--state-dir=" + dir_->File("other-state")}));
  const uint64_t other = Register(*stub_, engine.Request()).namespace_id();
  EXPECT_NE(other, first);
  EXPECT_GE(first, uint64_t{1} << 32) << "64-bit ids";
  EXPECT_GE(other, uint64_t{1} << 32);
}

TEST_F(HardeningTest, OneTenantCannotTakeEveryEngineOrParkingSlot) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon(
      {"--set=server.max_engines=8", "--set=server.max_engines_per_tenant=2",
       "--set=engines.max_parked_requests=8", "--set=engines.max_parked_requests_per_tenant=1"}));
  TestEngine engine(dir_->File("pool"), 4), engine_b(dir_->File("pool-b"), 4);
  engine.Fill(0, 1);
  v1::RegisterEngineResponse a1, a2, a3, b1;
  ASSERT_TRUE(RegisterAs(*stub_, engine.Request("a"), "", &a1).ok());
  ASSERT_TRUE(RegisterAs(*stub_, engine.Request("a"), "", &a2).ok());
  grpc::Status st = RegisterAs(*stub_, engine.Request("a"), "", &a3);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  EXPECT_NE(st.error_message().find("max_engines_per_tenant"), std::string::npos)
      << st.error_message();
  ASSERT_TRUE(RegisterAs(*stub_, engine_b.Request("b"), "", &b1).ok()) << "b still has room";
  auto park = [&](const std::string& engine_id, const std::string& request_id) {
    v1::ParkRequest req;
    req.set_engine_id(engine_id);
    req.set_request_id(request_id);
    req.add_page_indices(0);
    grpc::ClientContext ctx;
    v1::ParkResponse resp;
    return stub_->Park(Context(&ctx), req, &resp);
  };
  EXPECT_TRUE(park(a1.engine_id(), "r1").ok());
  st = park(a2.engine_id(), "r2");
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  EXPECT_NE(st.error_message().find("max_parked_requests_per_tenant"), std::string::npos)
      << st.error_message();
  EXPECT_TRUE(park(b1.engine_id(), "r1").ok()) << "b still has room";
}

TEST_F(HardeningTest, WithAuthenticationStatsShowATenantOnlyItsOwnBlocks) {
  ASSERT_NO_FATAL_FAILURE(
      StartDaemon({"--set=auth.tokens_file=" + WriteTokens(dir_->File("tokens"))}));
  ASSERT_EQ(mkdir(dir_->File("alice").c_str(), 0700), 0);
  TestEngine alice(dir_->File("alice/pool"), 8);
  for (uint32_t i = 0; i < 4; ++i) alice.Fill(i, i);
  v1::RegisterEngineResponse ra;
  ASSERT_TRUE(RegisterAs(*stub_, alice.Request(), "token-a", &ra).ok());
  {
    v1::OffloadRequest req;
    req.set_engine_id(ra.engine_id());
    for (uint32_t i = 0; i < 4; ++i) {
      req.add_items()->set_block_hash(Hash(3, i));
      req.mutable_items(static_cast<int>(i))->set_page_index(i);
    }
    grpc::ClientContext ctx;
    v1::OffloadResponse resp;
    ASSERT_TRUE(stub_->Offload(As(&ctx, "token-a"), req, &resp).ok());
    ASSERT_EQ(resp.stored_pages(), 4u);
  }
  auto stats = [&](const std::string& token) {
    grpc::ClientContext ctx;
    v1::StatsRequest req;
    v1::StatsResponse resp;
    EXPECT_TRUE(stub_->Stats(As(&ctx, token), req, &resp).ok());
    return resp;
  };
  auto host_blocks = [](const v1::StatsResponse& r) {
    for (const v1::TierStats& t : r.tiers()) {
      if (t.tier() == v1::TIER_HOST) return t.blocks();
    }
    return uint64_t{0};
  };
  const v1::StatsResponse bob = stats("token-b");
  EXPECT_EQ(host_blocks(bob), 0u) << "bob must not see alice's blocks";
  EXPECT_EQ(bob.registered_engines(), 0u);
  EXPECT_EQ(bob.hot_bytes_offloaded(), 0u);
  for (const v1::TierStats& t : bob.tiers()) EXPECT_GT(t.capacity_bytes(), 0u);
  EXPECT_EQ(host_blocks(stats("token-a")), 4u);
  EXPECT_EQ(stats("token-a").registered_engines(), 1u);
  EXPECT_EQ(host_blocks(stats("token-admin")), 4u);
}

TEST_F(HardeningTest, FilesTheDaemonCreatesDoNotDependOnTheUmask) {
  const mode_t old = umask(0);
  ASSERT_NO_FATAL_FAILURE(StartDaemon({"--set=disk.capacity=32MiB"}));
  umask(old);
  TestEngine engine(dir_->File("pool"), 4);
  const v1::RegisterEngineResponse reg = Register(*stub_, engine.Request());
  Offload(*stub_, reg.engine_id(), 1, 0, 2, /*durable=*/true);
  auto mode = [](const std::string& path) {
    struct stat st;
    EXPECT_EQ(lstat(path.c_str(), &st), 0) << path;
    return st.st_mode & 07777;
  };
  const std::string state = dir_->File("state");
  EXPECT_EQ(mode(state) & 022, 0u) << "nobody else may replace the state";
  EXPECT_EQ(mode(state + "/index"), 0700u);
  EXPECT_EQ(mode(state + "/hash-root.key"), 0600u);
  for (const auto& entry : std::filesystem::directory_iterator(state + "/disk")) {
    EXPECT_EQ(mode(entry.path()) & 077, 0u) << entry.path() << ": cold blocks are the daemon's";
  }
  for (const auto& entry : std::filesystem::directory_iterator(state + "/index")) {
    EXPECT_EQ(mode(entry.path()) & 077, 0u) << entry.path();
  }
  EXPECT_EQ(mode(Socket()) & 0777, 0660u) << "the engines' group reaches the socket";
}

TEST_F(HardeningTest, AFullStateDriveKeepsTheDaemonServingAndAKilledOneRestartsOnIt) {
  absl::StatusOr<std::unique_ptr<SmallFileSystem>> fs = SmallFileSystem::Mount(48 * kMiB);
  if (!fs.ok()) GTEST_SKIP() << fs.status();
  const std::vector<std::string> flags = {"--state-dir=" + (*fs)->File("state"),
                                          "--set=disk.dirs=[" + dir_->File("disk") + "]",
                                          "--set=index.min_free=8MiB", "--set=index.reserve=1MiB"};
  ASSERT_EQ(mkdir(dir_->File("disk").c_str(), 0700), 0);
  ASSERT_NO_FATAL_FAILURE(StartDaemon(flags));
  TestEngine engine(dir_->File("pool"), 16);
  for (uint32_t i = 0; i < 16; ++i) engine.Fill(i, 100 + i);
  v1::RegisterEngineResponse reg = Register(*stub_, engine.Request());
  ASSERT_EQ(Offload(*stub_, reg.engine_id(), 1, 0, 4, /*durable=*/true).stored_pages(), 4u);
  (*fs)->Fill(2 * kMiB);
  std::string why;
  ASSERT_TRUE(AwaitHttp(metrics_port_, "/readyz", 503, &why)) << Log();
  EXPECT_NE(why.find("index not writable"), std::string::npos) << why;
  const std::string metrics = HttpGet(metrics_port_, "/metrics");
  EXPECT_NE(metrics.find("kvtier_index_writable 0"), std::string::npos);
  // Durable offloads get a precise status; volatile ones and reads go on.
  v1::OffloadResponse durable = Offload(*stub_, reg.engine_id(), 2, 4, 4, /*durable=*/true);
  EXPECT_EQ(durable.stored_pages(), 0u);
  ASSERT_EQ(durable.results_size(), 4);
  EXPECT_EQ(durable.results(0).code(), v1::ITEM_CODE_RESOURCE_EXHAUSTED);
  EXPECT_NE(durable.results(0).message().find("free"), std::string::npos)
      << durable.results(0).message();
  EXPECT_EQ(Offload(*stub_, reg.engine_id(), 3, 8, 4).stored_pages(), 4u);
  EXPECT_EQ(Onboard(*stub_, reg.engine_id(), 1, 4, 12).onboarded_pages(), 4u);
  // Killed while the drive is full: the restart opens the index read-only and serves from disk.
  StopDaemon(SIGKILL);
  ASSERT_NO_FATAL_FAILURE(StartDaemon(flags));
  reg = Register(*stub_, engine.Request());
  EXPECT_EQ(Lookup(*stub_, reg.engine_id(), 1, 4).hit_pages(), 4u);
  EXPECT_EQ(Onboard(*stub_, reg.engine_id(), 1, 4, 12).onboarded_pages(), 4u);
  EXPECT_EQ(engine.Bytes(12), engine.RoundTrip(0));
  // Space returns: durable offloads work again, without a restart.
  (*fs)->Unfill();
  ASSERT_TRUE(AwaitHttp(metrics_port_, "/readyz", 200)) << Log();
  EXPECT_EQ(Offload(*stub_, reg.engine_id(), 2, 4, 4, /*durable=*/true).stored_pages(), 4u);
  ASSERT_EQ(StopDaemon(), 0);
  ASSERT_NO_FATAL_FAILURE(StartDaemon(flags));
  reg = Register(*stub_, engine.Request());
  EXPECT_EQ(Lookup(*stub_, reg.engine_id(), 1, 4).hit_pages(), 4u);
  EXPECT_EQ(Lookup(*stub_, reg.engine_id(), 2, 4).hit_pages(), 4u);
}

TEST_F(HardeningTest, AnIndexThatDoesNotOpenExitsWithItsCauseAndCanBeRepaired) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  TestEngine engine(dir_->File("pool"), 4);
  engine.Fill(0, 9);
  v1::RegisterEngineResponse reg = Register(*stub_, engine.Request());
  ASSERT_EQ(Offload(*stub_, reg.engine_id(), 1, 0, 1, /*durable=*/true).stored_pages(), 1u);
  // A second daemon on the same state directory (another socket) is refused before it touches
  // anything.
  {
    std::string err;
    const int status =
        RunKvtierd({"--socket=" + dir_->File("second.sock"), "--set=metrics.listen="}, &err);
    EXPECT_EQ(status, 1) << err;
    EXPECT_NE(err.find("another kvtierd (pid " + std::to_string(pid_) + ")"), std::string::npos)
        << err;
  }
  ASSERT_EQ(StopDaemon(), 0);
  const std::string index = dir_->File("state/index");
  { std::ofstream(index + "/CURRENT", std::ios::trunc) << "MANIFEST-"; }  // truncated
  std::string err;
  int status = RunKvtierd({}, &err);
  EXPECT_EQ(status, 1) << "not a crash: " << err;
  EXPECT_NE(err.find(index), std::string::npos) << err;
  EXPECT_NE(err.find("--repair-index"), std::string::npos) << err;
  err.clear();
  status = RunKvtierd({"--repair-index"}, &err);
  EXPECT_EQ(status, 0) << err;
  EXPECT_NE(err.find(index), std::string::npos) << err;
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  reg = Register(*stub_, engine.Request());
  EXPECT_LE(Lookup(*stub_, reg.engine_id(), 1, 1).hit_pages(), 1u);  // serves, repaired or empty
  ASSERT_EQ(StopDaemon(), 0);
  // An index path that is a file.
  std::filesystem::remove_all(index);
  { std::ofstream(index) << "not a directory"; }
  err.clear();
  status = RunKvtierd({}, &err);
  EXPECT_EQ(status, 1) << err;
  EXPECT_NE(err.find(index), std::string::npos) << err;
}

}  // namespace
}  // namespace kvtier::integration
