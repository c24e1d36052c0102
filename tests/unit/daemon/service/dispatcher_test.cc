// Dispatcher through real gRPC calls (an in-process server on a Unix socket whose Hello handler
// hands its work to the dispatcher): the work's status reaches the client; requests in flight
// are counted until their call finishes; work is destroyed before the call finishes (what it
// captured is released); work whose call was cancelled, or whose default deadline passed while
// it waited for the worker, does not run; turns run until the last; Stop runs what was queued.
// One worker held by a gate call makes every order deterministic; the only waits are lower
// bounds (a queued call waits at least past the default deadline), never a speed.
#include "daemon/service/dispatcher.h"

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "kvtier/v1/service.grpc.pb.h"
#include "tests/testing/temp_dir.h"

namespace kvtier::service {
namespace {

// Hello's client_name picks what the work does: "gate" blocks the worker until Open(), "turns"
// takes three turns, anything else returns ABORTED naming it. Every piece of work holds a
// `Tracker`, whose destruction is counted.
class TestService final : public v1::KvTier::CallbackService {
 public:
  explicit TestService(Dispatcher* dispatcher) : dispatcher_(dispatcher) {}

  grpc::ServerUnaryReactor* Hello(grpc::CallbackServerContext* ctx, const v1::HelloRequest* req,
                                  v1::HelloResponse* /*resp*/) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    const std::string name = req->client_name();
    auto tracker = std::shared_ptr<int>(new int(0), [this](int* p) {
      delete p;
      destroyed_.fetch_add(1);
    });
    if (name == "cancelled") cancelled_ctx_.store(ctx);
    if (name == "turns") {
      dispatcher_->RunTurnsOnWorker(ctx, reactor, "flow", [this, tracker]() mutable {
        const int turn = turns_.fetch_add(1) + 1;
        if (turn < 3) return std::optional<absl::Status>();
        return std::optional<absl::Status>(absl::OkStatus());
      });
      return reactor;
    }
    dispatcher_->RunOnWorker(
        ctx, reactor,
        [this, name, tracker] {
          ran_.fetch_add(1);
          if (name == "gate") {
            gate_started_.Notify();
            gate_open_.WaitForNotification();
            return absl::OkStatus();
          }
          return absl::AbortedError("work of " + name);
        },
        name);
    submitted_.fetch_add(1);
    return reactor;
  }

  void AwaitGate() { gate_started_.WaitForNotification(); }
  void Open() {
    if (!gate_open_.HasBeenNotified()) gate_open_.Notify();
  }
  // Waits until `n` calls were handed to the dispatcher.
  void AwaitSubmitted(int n) const {
    while (submitted_.load() < n) std::this_thread::yield();
  }
  // Waits (up to 60 s) until the server has seen the "cancelled" call cancelled; false if not.
  bool AwaitServerCancelled() const {
    const absl::Time give_up = absl::Now() + absl::Seconds(60);
    while (absl::Now() < give_up) {
      grpc::CallbackServerContext* ctx = cancelled_ctx_.load();
      if (ctx != nullptr && ctx->IsCancelled()) return true;
      std::this_thread::yield();
    }
    return false;
  }
  int ran() const { return ran_.load(); }
  int turns() const { return turns_.load(); }
  int destroyed() const { return destroyed_.load(); }

 private:
  Dispatcher* const dispatcher_;
  absl::Notification gate_started_, gate_open_;
  // The "cancelled" call's context: it lives until its work finishes the call.
  std::atomic<grpc::CallbackServerContext*> cancelled_ctx_{nullptr};
  std::atomic<int> submitted_{0}, ran_{0}, turns_{0}, destroyed_{0};
};

class DispatcherTest : public ::testing::Test {
 protected:
  // One worker; `default_deadline` for calls that set none.
  void Start(absl::Duration default_deadline) {
    dir_ = std::make_unique<kvtier::testing::TempDir>(kvtier::testing::TempDir::Create().value());
    dispatcher_ = std::make_unique<Dispatcher>(1, default_deadline);
    service_ = std::make_unique<TestService>(dispatcher_.get());
    grpc::ServerBuilder builder;
    const std::string address = "unix:" + dir_->File("socket");
    builder.AddListeningPort(address, grpc::InsecureServerCredentials());
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    stub_ = v1::KvTier::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    if (service_ != nullptr) service_->Open();
    if (server_ != nullptr) server_->Shutdown();
    if (dispatcher_ != nullptr) dispatcher_->Stop();
    server_.reset();
  }

  grpc::Status Call(const std::string& name, std::optional<absl::Duration> deadline = {}) {
    grpc::ClientContext ctx;
    if (deadline.has_value()) ctx.set_deadline(absl::ToChronoTime(absl::Now() + *deadline));
    v1::HelloRequest req;
    req.set_client_name(name);
    v1::HelloResponse resp;
    return stub_->Hello(&ctx, req, &resp);
  }

  // Holds the only worker on a call of its own, on a thread of its own.
  std::thread StartGate() {
    std::thread gate([this] { EXPECT_TRUE(Call("gate").ok()); });
    service_->AwaitGate();
    return gate;
  }

  std::unique_ptr<kvtier::testing::TempDir> dir_;
  std::unique_ptr<Dispatcher> dispatcher_;
  std::unique_ptr<TestService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::KvTier::Stub> stub_;
};

TEST_F(DispatcherTest, TheWorksStatusReachesTheClientAfterItsWorkIsDestroyed) {
  Start(absl::ZeroDuration());
  grpc::Status status = Call("alpha");
  EXPECT_EQ(status.error_code(), grpc::StatusCode::ABORTED);
  EXPECT_EQ(status.error_message(), "work of alpha");
  // Destroyed before Finish: by the time the client has the answer, the capture is gone.
  EXPECT_EQ(service_->destroyed(), 1);
  EXPECT_TRUE(dispatcher_->WaitIdle(absl::ZeroDuration()));
}

TEST_F(DispatcherTest, RequestsAreInFlightUntilTheyFinish) {
  Start(absl::ZeroDuration());
  EXPECT_TRUE(dispatcher_->WaitIdle(absl::ZeroDuration()));
  std::thread gate = StartGate();
  EXPECT_FALSE(dispatcher_->WaitIdle(absl::ZeroDuration()));
  dispatcher_->AddInFlight();  // work done off the workers counts too
  service_->Open();
  gate.join();
  EXPECT_FALSE(dispatcher_->WaitIdle(absl::ZeroDuration()));
  dispatcher_->DoneInFlight();
  EXPECT_TRUE(dispatcher_->WaitIdle(absl::Seconds(60)));
}

TEST_F(DispatcherTest, WorkPastTheDefaultDeadlineDoesNotRun) {
  Start(absl::Milliseconds(1));
  std::thread gate = StartGate();
  grpc::Status queued;
  std::thread caller([&] { queued = Call("late"); });  // no deadline of its own
  // Queued behind the gate, the call waits for longer than the default deadline.
  service_->AwaitSubmitted(2);
  absl::SleepFor(absl::Milliseconds(20));
  service_->Open();
  gate.join();
  caller.join();
  EXPECT_EQ(queued.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_NE(queued.error_message().find("past the server's default deadline of 1ms (the call set "
                                        "none)"),
            std::string::npos)
      << queued.error_message();
  EXPECT_EQ(service_->ran(), 1) << "only the gate ran";
  EXPECT_EQ(service_->destroyed(), 2);
  EXPECT_TRUE(dispatcher_->WaitIdle(absl::Seconds(60)));
}

TEST_F(DispatcherTest, ACallCancelledWhileQueuedDoesNotRun) {
  Start(absl::ZeroDuration());
  std::thread gate = StartGate();
  // The client's own deadline passes while the call waits: gRPC cancels it.
  grpc::Status status = Call("cancelled", absl::Milliseconds(50));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  // The client gives up on its own clock; the server learns of it a moment later.
  ASSERT_TRUE(service_->AwaitServerCancelled());
  service_->Open();
  gate.join();
  EXPECT_TRUE(dispatcher_->WaitIdle(absl::Seconds(60)));
  EXPECT_EQ(service_->ran(), 1) << "only the gate ran";
  EXPECT_EQ(service_->destroyed(), 2);
}

TEST_F(DispatcherTest, TurnsRunUntilTheLast) {
  Start(absl::ZeroDuration());
  EXPECT_TRUE(Call("turns").ok());
  EXPECT_EQ(service_->turns(), 3);
  EXPECT_EQ(service_->destroyed(), 1);
}

TEST_F(DispatcherTest, DrainSwitch) {
  Start(absl::ZeroDuration());
  EXPECT_FALSE(dispatcher_->draining());
  dispatcher_->BeginDrain();
  EXPECT_TRUE(dispatcher_->draining());
  dispatcher_->EndDrain();
  EXPECT_FALSE(dispatcher_->draining());
}

TEST_F(DispatcherTest, StopRunsTheQueuedWork) {
  Start(absl::ZeroDuration());
  std::thread gate = StartGate();
  grpc::Status queued;
  std::thread caller([&] { queued = Call("queued"); });
  service_->AwaitSubmitted(2);
  service_->Open();
  dispatcher_->Stop();
  gate.join();
  caller.join();
  EXPECT_EQ(service_->ran(), 2);
  EXPECT_EQ(queued.error_code(), grpc::StatusCode::ABORTED);
}

}  // namespace
}  // namespace kvtier::service
