// DaemonProbes and the readiness rule. The rule: each reason on its own line, in order, none when
// ready. The probes on a real BlockStore and a real gRPC server (in-process channel only): alive
// while both answer, not when Hello fails or once the server stops; not ready while
// the service drains, and ready again when the drain is cancelled.
#include "daemon/kvtierd/probes.h"

#include <sys/stat.h>

#include <memory>

#include "daemon/service/admin_service.h"
#include "gmock/gmock.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"
#include "tests/testing/temp_dir.h"

namespace kvtier::kvtierd {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

TEST(NotReadyReasonsTest, ReadyWithAHostTierAndNothingWrong) {
  ReadinessInputs in;
  in.host_capacity_bytes = 1 << 20;
  EXPECT_THAT(NotReadyReasons(in), IsEmpty());
}

TEST(NotReadyReasonsTest, EachReasonOnItsOwnLineInOrder) {
  ReadinessInputs in;
  in.draining = true;
  in.index = absl::UnavailableError("3 index commits failed since the last check");
  in.host_capacity_bytes = 0;
  EXPECT_THAT(
      NotReadyReasons(in),
      ElementsAre("draining", "index not writable: 3 index commits failed since the last check",
                  "no host tier (capacity 0 bytes)"));
  in.draining = false;
  in.host_capacity_bytes = 4096;
  EXPECT_THAT(NotReadyReasons(in),
              ElementsAre("index not writable: 3 index commits failed since the last check"));
}

class DaemonProbesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::make_unique<kvtier::testing::TempDir>(kvtier::testing::TempDir::Create().value());
    ASSERT_EQ(mkdir(dir_->File("disk").c_str(), 0700), 0);
    store::BlockStoreOptions o;
    o.host.capacity_bytes = 16ull << 20;
    o.host.pin = store::HostPinMode::kNone;
    o.host_chunk_bytes = 1ull << 20;
    o.max_block_bytes = 1ull << 20;
    o.disk.dirs = {dir_->File("disk")};
    o.disk.capacity_bytes = 8ull << 20;
    o.disk.chunk_bytes = 1ull << 20;
    o.index_path = dir_->File("index");
    store_ = store::BlockStore::Open(o).value();
    service::ServiceOptions so;
    so.pool_dirs = {dir_->path()};
    so.worker_threads = 1;
    state_ = std::make_unique<service::ServiceState>(store_.get(), so);
    service_ = std::make_unique<service::KvTierService>(store_.get(), so, state_.get());
    grpc::ServerBuilder builder;  // no port: the in-process channel only
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    probes_ = std::make_unique<DaemonProbes>(store_.get(), service_.get(), server_.get());
  }
  void TearDown() override {
    probes_.reset();
    if (server_ != nullptr) server_->Shutdown();
    server_.reset();
    service_.reset();
    state_.reset();
    store_.reset();
  }

  std::unique_ptr<kvtier::testing::TempDir> dir_;
  std::unique_ptr<store::BlockStore> store_;
  std::unique_ptr<service::ServiceState> state_;
  std::unique_ptr<service::KvTierService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<DaemonProbes> probes_;
};

TEST_F(DaemonProbesTest, AliveAndReadyWhileTheStoreAndTheServerAnswer) {
  EXPECT_TRUE(probes_->CheckAlive().ok()) << probes_->CheckAlive();
  EXPECT_THAT(probes_->NotReady(), IsEmpty());
  const ReadinessInputs in = probes_->Gather();
  EXPECT_FALSE(in.draining);
  EXPECT_TRUE(in.index.ok());
  EXPECT_EQ(in.host_capacity_bytes, 16ull << 20);
}

TEST_F(DaemonProbesTest, NotAliveWhenTheServerDoesNotAnswerHello) {
  // A server with the admin service only: Hello is UNIMPLEMENTED there.
  service::KvTierAdminService admin(store_.get(), state_.get());
  grpc::ServerBuilder builder;
  builder.RegisterService(&admin);
  std::unique_ptr<grpc::Server> bare = builder.BuildAndStart();
  ASSERT_NE(bare, nullptr);
  {
    DaemonProbes probes(store_.get(), service_.get(), bare.get());
    const absl::Status alive = probes.CheckAlive();
    EXPECT_EQ(alive.code(), absl::StatusCode::kUnavailable) << alive;
    EXPECT_THAT(alive.message(), HasSubstr("did not answer Hello"));
    probes.StopCheckingServer();
  }
  bare->Shutdown();
}

TEST_F(DaemonProbesTest, NotAliveOnceTheGrpcServerStops) {
  probes_->StopCheckingServer();
  server_->Shutdown();
  const absl::Status alive = probes_->CheckAlive();
  EXPECT_EQ(alive.code(), absl::StatusCode::kUnavailable) << alive;
  EXPECT_THAT(alive.message(), HasSubstr("shutting down"));
  EXPECT_THAT(probes_->NotReady(), IsEmpty());  // readiness does not call the server
}

TEST_F(DaemonProbesTest, NotReadyWhileDrainingButAlive) {
  state_->dispatcher().BeginDrain();
  EXPECT_THAT(probes_->NotReady(), ElementsAre("draining"));
  EXPECT_TRUE(probes_->CheckAlive().ok()) << probes_->CheckAlive();
  state_->dispatcher().EndDrain();
  EXPECT_THAT(probes_->NotReady(), IsEmpty());
}

}  // namespace
}  // namespace kvtier::kvtierd
