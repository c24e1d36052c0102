// kvtier::Client over gRPC (kvtier.v1.KvTier): a Core holds the channel, the stub and the calls in
// flight; ClientImpl adds the keep-alive thread; EventWatchImpl reads one WatchEvents stream on its
// own thread. Thread-safe: the in-flight set (CallTracker) and ClientImpl's engine set are guarded
// by their own mutexes, which never nest. The conversions between the kvtier.v1 messages and the
// public types are in client_convert.cc.
//
// Design:
// - Every unary call goes through gRPC's callback API. A heap-allocated CallState owns the
//   ClientContext, request and response until the completion has run. Calls borrow the Core; the
//   Client waits for all of them before it releases it, and the release never runs on a gRPC
//   callback thread: gRPC aborts when the last reference to a channel is dropped on the thread
//   that runs that channel's callbacks. The synchronous forms start the callback form and wait on
//   a future, so there is one code path per RPC.
// - Batches above ServerInfo.max_items_per_request are sent as a chain of calls: each completion
//   folds its response into the joined result and starts the next chunk, so the caller's thread
//   is never blocked.
// - Destroying the Client stops the keep-alive thread, cancels every call in flight (their
//   callbacks run with CANCELLED) and waits for the callbacks before it returns. Calls started
//   after that point fail with CANCELLED without reaching the daemon.
// - The authorization token is per-call metadata rather than call credentials: gRPC refuses call
//   credentials on insecure channels, and the Unix socket is one.
#include "kvtier/client.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/src/client_convert.h"
#include "grpcpp/grpcpp.h"
#include "kvtier/v1/service.grpc.pb.h"

namespace kvtier {

std::string_view LibraryVersion() { return KVTIER_VERSION_STRING; }

namespace {

using AsyncStub = v1::KvTier::StubInterface::async_interface;
template <typename Req, typename Resp>
using AsyncMethod = void (AsyncStub::*)(grpc::ClientContext*, const Req*, Resp*,
                                        std::function<void(grpc::Status)>);

constexpr uint32_t kApiVersion = 1;
constexpr uint32_t kDefaultMaxItems = 4096;
constexpr char kDefaultSocket[] = "/run/kvtier/kvtier.sock";

using client_internal::AppendItems;
using client_internal::DurationToProto;
using client_internal::EngineFromProto;
using client_internal::EventFromProto;
using client_internal::RegisterRequest;
using client_internal::ServerInfoFromProto;
using client_internal::StatsFromProto;
using client_internal::TierFromProto;
using client_internal::TimeFromProto;
using client_internal::ValidateEngineOptions;

absl::Status FromGrpc(absl::string_view rpc, const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat(rpc, ": ", status.error_message()));
}

// ---- Core: channel, stub and the calls in flight ------------------------------------------------

struct CallOptions {
  absl::Duration timeout = absl::ZeroDuration();  // zero: ClientOptions.rpc_timeout
  bool wait_for_ready = false;
};

class Core;

// The Core whose callback the current thread is running, so that a Client destroyed from inside
// its own callback does not wait for that callback.
thread_local const Core* t_running_callback = nullptr;

// The calls in flight of one Core. Shared with the calls, so that a completion may finish its
// bookkeeping after the Core is gone; it holds nothing of gRPC's.
struct CallTracker {
  absl::Mutex mu;
  absl::CondVar idle;
  std::set<grpc::ClientContext*> in_flight ABSL_GUARDED_BY(mu);  // contexts to cancel
  size_t pending ABSL_GUARDED_BY(mu) = 0;  // calls whose state is not yet destroyed
  bool shutting_down ABSL_GUARDED_BY(mu) = false;
};

// The channel, the stub and the calls in flight. Calls borrow the Core: its owners wait for every
// callback (WaitIdle) before they release it, and the last release never happens on a gRPC
// thread (gRPC aborts when a channel is destroyed on the thread that runs its callbacks).
class Core {
 public:
  Core(ClientOptions options, std::shared_ptr<grpc::Channel> channel)
      : options_(std::move(options)),
        channel_(std::move(channel)),
        stub_(v1::KvTier::NewStub(channel_)) {}

  const ClientOptions& options() const { return options_; }
  v1::KvTier::Stub& stub() { return *stub_; }
  const ServerInfo& server() const { return server_; }
  void set_server(ServerInfo server) { server_ = std::move(server); }
  size_t max_items() const {
    return server_.max_items_per_request > 0 ? server_.max_items_per_request : kDefaultMaxItems;
  }

  // Deadline (none for a stream) and the token.
  void Prepare(grpc::ClientContext* ctx, const CallOptions& call, bool streaming = false) const {
    const absl::Duration timeout =
        call.timeout > absl::ZeroDuration() ? call.timeout : options_.rpc_timeout;
    if (!streaming) ctx->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    if (call.wait_for_ready) ctx->set_wait_for_ready(true);
    if (!options_.token.empty()) {
      ctx->AddMetadata("authorization", absl::StrCat("Bearer ", options_.token));
    }
  }

  // Starts one unary call; `done` runs once with the response or the status, prefixed by `rpc`.
  template <typename Req, typename Resp>
  void Call(const char* rpc, AsyncMethod<Req, Resp> method, Req req,
            std::function<void(absl::StatusOr<Resp>)> done, const CallOptions& call = {}) {
    auto* state = new CallState<Req, Resp>{};
    state->core = this;
    state->tracker = tracker_;
    state->rpc = rpc;
    state->req = std::move(req);
    state->done = std::move(done);
    Prepare(&state->ctx, call);
    bool started = false;
    {
      absl::MutexLock lock(&tracker_->mu);
      started = !tracker_->shutting_down;
      if (started) {
        tracker_->in_flight.insert(&state->ctx);
        ++tracker_->pending;
      }
    }
    if (!started) {
      std::function<void(absl::StatusOr<Resp>)> cb = std::move(state->done);
      delete state;
      cb(absl::CancelledError(absl::StrCat(rpc, ": the client is shutting down")));
      return;
    }
    (stub_->async()->*method)(&state->ctx, &state->req, &state->resp,
                              [state](grpc::Status status) { Complete(state, status); });
  }

  // Cancels every call in flight; later calls fail with CANCELLED at once.
  void BeginShutdown() {
    absl::MutexLock lock(&tracker_->mu);
    tracker_->shutting_down = true;
    for (grpc::ClientContext* ctx : tracker_->in_flight) ctx->TryCancel();
  }

  // Waits until every callback has returned (but the caller's own, when it runs in one).
  void WaitIdle() {
    const size_t own = t_running_callback == this ? 1 : 0;
    absl::MutexLock lock(&tracker_->mu);
    while (tracker_->pending > own) tracker_->idle.Wait(&tracker_->mu);
  }

 private:
  template <typename Req, typename Resp>
  struct CallState {
    Core* core = nullptr;
    std::shared_ptr<CallTracker> tracker;
    const char* rpc = "";
    grpc::ClientContext ctx;
    Req req;
    Resp resp;
    std::function<void(absl::StatusOr<Resp>)> done;
  };

  // Runs `done`, destroys the call's state, then leaves the tracker; the Core is not touched
  // after `done` returns. The state goes first: its ClientContext holds a reference to the
  // channel, which must not be the last one.
  template <typename Req, typename Resp>
  static void Complete(CallState<Req, Resp>* state, const grpc::Status& status) {
    std::shared_ptr<CallTracker> tracker = std::move(state->tracker);
    const Core* outer = t_running_callback;
    t_running_callback = state->core;
    {
      // Destroyed inside the marked region too: its captures may own the Client.
      std::function<void(absl::StatusOr<Resp>)> done = std::move(state->done);
      absl::StatusOr<Resp> result = status.ok()
                                        ? absl::StatusOr<Resp>(std::move(state->resp))
                                        : absl::StatusOr<Resp>(FromGrpc(state->rpc, status));
      done(std::move(result));
    }
    t_running_callback = outer;
    {
      absl::MutexLock lock(&tracker->mu);
      tracker->in_flight.erase(&state->ctx);
    }
    delete state;
    absl::MutexLock lock(&tracker->mu);
    --tracker->pending;
    tracker->idle.SignalAll();
  }

  const ClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::KvTier::Stub> stub_;
  ServerInfo server_;  // set once, before the Core is shared
  std::shared_ptr<CallTracker> tracker_ = std::make_shared<CallTracker>();
};

// Releases a Core after its calls. From inside one of its callbacks (a gRPC thread) that happens
// on a thread of its own, once the callback has returned.
void ReleaseCore(std::shared_ptr<Core> core) {
  if (core == nullptr) return;
  if (t_running_callback == core.get()) {
    std::thread([core = std::move(core)]() mutable {
      core->WaitIdle();
      core.reset();
    }).detach();
  }
}

// Starts a callback form whose callback fulfils the returned future.
template <typename T, typename Start>
std::future<absl::StatusOr<T>> AsFuture(Start&& start) {
  auto promise = std::make_shared<std::promise<absl::StatusOr<T>>>();
  std::future<absl::StatusOr<T>> future = promise->get_future();
  start([promise](absl::StatusOr<T> result) { promise->set_value(std::move(result)); });
  return future;
}

// Starts a callback form and waits for its result.
template <typename T, typename Start>
absl::StatusOr<T> Await(Start&& start) {
  return AsFuture<T>(std::forward<Start>(start)).get();
}

// ---- Chunked calls ------------------------------------------------------------------------------

// A batch of `items` items sent as consecutive requests of at most Core::max_items() items (at
// least one request, even for an empty batch), their responses folded into one Result.
template <typename Req, typename Resp, typename Result>
struct ChunkSpec {
  const char* rpc = "";
  AsyncMethod<Req, Resp> method = nullptr;
  size_t items = 0;
  // The request for items [begin, end).
  std::function<Req(size_t begin, size_t end)> make;
  // Folds the response of [begin, end) into the result; false stops the chain there.
  std::function<bool(size_t begin, size_t end, Resp& resp, Result* result)> merge;
  // Called when the chain stopped early with `end` the first item not sent.
  std::function<void(size_t end, Result* result)> stopped;
  // Called when the request starting at `begin` failed; the chain finishes with the failure once
  // `then` runs (so a clean-up RPC ends before the caller hears of the failure).
  std::function<void(size_t begin, std::function<void()> then)> failed;
};

template <typename Req, typename Resp, typename Result>
class ChunkedCall : public std::enable_shared_from_this<ChunkedCall<Req, Resp, Result>> {
 public:
  static void Start(Core* core, ChunkSpec<Req, Resp, Result> spec, Callback<Result> done) {
    auto call = std::make_shared<ChunkedCall>(core, std::move(spec), std::move(done));
    call->Run(0);
  }

  ChunkedCall(Core* core, ChunkSpec<Req, Resp, Result> spec, Callback<Result> done)
      : core_(core), spec_(std::move(spec)), done_(std::move(done)) {}

 private:
  void Run(size_t begin) {
    const size_t end = std::min(spec_.items, begin + core_->max_items());
    auto self = this->shared_from_this();
    core_->Call<Req, Resp>(
        spec_.rpc, spec_.method, spec_.make(begin, end),
        [self, begin, end](absl::StatusOr<Resp> resp) { self->Done(begin, end, std::move(resp)); });
  }

  void Done(size_t begin, size_t end, absl::StatusOr<Resp> resp) {
    if (!resp.ok()) {
      if (spec_.failed) {
        auto self = this->shared_from_this();
        spec_.failed(begin, [self, status = resp.status()] { self->Finish(status); });
        return;
      }
      Finish(resp.status());
      return;
    }
    const bool more = spec_.merge(begin, end, *resp, &result_);
    if (end < spec_.items) {
      if (more) {
        Run(end);
        return;
      }
      if (spec_.stopped) spec_.stopped(end, &result_);
    }
    Finish(std::move(result_));
  }

  void Finish(absl::StatusOr<Result> result) {
    Callback<Result> done = std::move(done_);
    done(std::move(result));
  }

  Core* core_;  // borrowed: the Client waits for every call before it releases the Core
  ChunkSpec<Req, Resp, Result> spec_;
  Callback<Result> done_;
  Result result_;
};

template <typename Req, typename Resp, typename Result>
void RunChunks(Core* core, ChunkSpec<Req, Resp, Result> spec, Callback<Result> done) {
  ChunkedCall<Req, Resp, Result>::Start(core, std::move(spec), std::move(done));
}

// ---- Event streams ------------------------------------------------------------------------------

class EventWatchImpl : public EventWatch {
 public:
  EventWatchImpl(std::shared_ptr<Core> core, v1::WatchEventsRequest req,
                 std::function<void(const Event&)> on_event,
                 std::function<void(absl::Status)> on_done)
      : state_(std::make_shared<State>()) {
    state_->core = std::move(core);
    state_->req = std::move(req);
    state_->on_event = std::move(on_event);
    state_->on_done = std::move(on_done);
    state_->core->Prepare(&state_->ctx, {}, /*streaming=*/true);
    thread_ = std::thread([state = state_] { Read(*state); });
    thread_id_ = thread_.get_id();
  }
  ~EventWatchImpl() override {
    Cancel();
    {
      absl::MutexLock lock(&join_mu_);
      if (thread_.joinable()) {
        if (thread_id_ == std::this_thread::get_id()) {
          thread_.detach();  // destroyed from its own callback: the thread owns the state
        } else {
          thread_.join();
        }
      }
    }
    if (t_running_callback != nullptr) {
      // On a gRPC callback thread the state may hold the last reference to the channel.
      std::thread([state = std::move(state_)]() mutable { state.reset(); }).detach();
    }
  }

  void Cancel() override {
    state_->cancelled.store(true);
    state_->ctx.TryCancel();
    if (thread_id_ == std::this_thread::get_id()) return;  // from a callback: it ends soon
    absl::MutexLock lock(&join_mu_);
    if (thread_.joinable()) thread_.join();
  }

 private:
  struct State {
    std::shared_ptr<Core> core;
    grpc::ClientContext ctx;
    v1::WatchEventsRequest req;
    std::function<void(const Event&)> on_event;
    std::function<void(absl::Status)> on_done;
    std::atomic<bool> cancelled{false};
  };

  static void Read(State& state) {
    std::unique_ptr<grpc::ClientReader<v1::WatchEventsResponse>> reader =
        state.core->stub().WatchEvents(&state.ctx, state.req);
    v1::WatchEventsResponse resp;
    while (reader->Read(&resp)) {
      for (const v1::Event& e : resp.events()) {
        if (state.cancelled.load()) break;
        Event event;
        if (EventFromProto(e, &event) && state.on_event) state.on_event(event);
      }
    }
    const grpc::Status status = reader->Finish();
    if (!state.on_done) return;
    if (state.cancelled.load()) {
      state.on_done(absl::CancelledError("WatchEvents: cancelled"));
    } else {
      state.on_done(FromGrpc("WatchEvents", status));
    }
  }

  std::shared_ptr<State> state_;
  absl::Mutex join_mu_;
  std::thread thread_;
  std::thread::id thread_id_;  // set once in the constructor
};

// ---- The client ---------------------------------------------------------------------------------

class ClientImpl : public Client {
 public:
  explicit ClientImpl(std::shared_ptr<Core> core) : core_(std::move(core)) {}

  ~ClientImpl() override {
    {
      absl::MutexLock lock(&engines_mu_);
      stop_ = true;
      engines_cv_.SignalAll();
    }
    core_->BeginShutdown();
    if (keep_alive_thread_.joinable()) keep_alive_thread_.join();
    core_->WaitIdle();
    ReleaseCore(std::move(core_));
  }

  const ServerInfo& server() const override { return core_->server(); }

  absl::StatusOr<ServerInfo> Hello() override {
    v1::HelloRequest req;
    req.set_min_api_version(kApiVersion);
    req.set_max_api_version(kApiVersion);
    req.set_client_name(ClientName(core_->options()));
    absl::StatusOr<v1::HelloResponse> resp =
        Unary<v1::HelloRequest, v1::HelloResponse>("Hello", &AsyncStub::Hello, std::move(req));
    if (!resp.ok()) return resp.status();
    return ServerInfoFromProto(*resp);
  }

  absl::StatusOr<Engine> RegisterEngine(const EngineOptions& options) override {
    if (absl::Status st = ValidateEngineOptions(options); !st.ok()) return st;
    absl::StatusOr<v1::RegisterEngineRequest> req = RegisterRequest(options);
    if (!req.ok()) return req.status();
    absl::StatusOr<v1::RegisterEngineResponse> resp =
        Unary<v1::RegisterEngineRequest, v1::RegisterEngineResponse>(
            "RegisterEngine", &AsyncStub::RegisterEngine, std::move(*req));
    if (!resp.ok()) return resp.status();
    Engine engine = EngineFromProto(*resp);
    if (core_->options().keep_alive) StartKeepAlive(engine.engine_id, engine.lease_ttl);
    return engine;
  }

  absl::Status Unregister(const std::string& engine_id) override {
    v1::UnregisterRequest req;
    req.set_engine_id(engine_id);
    absl::StatusOr<v1::UnregisterResponse> resp =
        Unary<v1::UnregisterRequest, v1::UnregisterResponse>("Unregister", &AsyncStub::Unregister,
                                                             std::move(req));
    if (resp.ok() || absl::IsNotFound(resp.status())) {
      absl::MutexLock lock(&engines_mu_);
      engines_.erase(engine_id);
    }
    return resp.status();
  }

  absl::Status KeepAlive(const std::string& engine_id) override {
    return KeepAliveCall(engine_id, {}).status();
  }

  absl::StatusOr<LookupResult> Lookup(const std::string& engine_id,
                                      const std::vector<std::string>& block_hashes,
                                      absl::Duration pin_ttl) override {
    return Await<LookupResult>(
        [&](Callback<LookupResult> done) { LookupAsync(engine_id, block_hashes, pin_ttl, done); });
  }
  absl::StatusOr<OffloadResult> Offload(const std::string& engine_id,
                                        const std::vector<PageRef>& pages,
                                        const OffloadOptions& options) override {
    return Await<OffloadResult>(
        [&](Callback<OffloadResult> done) { OffloadAsync(engine_id, pages, options, done); });
  }
  absl::StatusOr<OnboardResult> Onboard(const std::string& engine_id,
                                        const std::vector<PageRef>& pages,
                                        bool continue_after_miss) override {
    return Await<OnboardResult>([&](Callback<OnboardResult> done) {
      OnboardAsync(engine_id, pages, continue_after_miss, done);
    });
  }
  absl::StatusOr<ParkResult> Park(const std::string& engine_id, const std::string& request_id,
                                  const std::vector<uint32_t>& page_indices,
                                  const ParkOptions& options) override {
    return Await<ParkResult>([&](Callback<ParkResult> done) {
      ParkAsync(engine_id, request_id, page_indices, options, done);
    });
  }
  absl::StatusOr<ResumeResult> Resume(const std::string& engine_id, const std::string& request_id,
                                      const std::vector<uint32_t>& page_indices,
                                      uint32_t first_page, bool keep_parked) override {
    return Await<ResumeResult>([&](Callback<ResumeResult> done) {
      ResumeAsync(engine_id, request_id, page_indices, first_page, keep_parked, done);
    });
  }

  absl::StatusOr<ReleaseResult> Release(const std::string& engine_id,
                                        const std::vector<std::string>& request_ids) override {
    auto ids = std::make_shared<const std::vector<std::string>>(request_ids);
    ChunkSpec<v1::ReleaseRequest, v1::ReleaseResponse, ReleaseResult> spec;
    spec.rpc = "Release";
    spec.method = &AsyncStub::Release;
    spec.items = ids->size();
    spec.make = [engine_id, ids](size_t begin, size_t end) {
      v1::ReleaseRequest req;
      req.set_engine_id(engine_id);
      for (size_t i = begin; i < end; ++i) req.add_request_ids((*ids)[i]);
      return req;
    };
    spec.merge = [](size_t, size_t, v1::ReleaseResponse& resp, ReleaseResult* result) {
      AppendItems(resp.results(), &result->results);
      result->freed_bytes += resp.freed_bytes();
      return true;
    };
    return Await<ReleaseResult>([&](Callback<ReleaseResult> done) {
      RunChunks(core_.get(), std::move(spec), std::move(done));
    });
  }

  absl::StatusOr<PinResult> Pin(const std::string& engine_id,
                                const std::vector<std::string>& block_hashes,
                                absl::Duration ttl) override {
    auto hashes = std::make_shared<const std::vector<std::string>>(block_hashes);
    ChunkSpec<v1::PinRequest, v1::PinResponse, PinResult> spec;
    spec.rpc = "Pin";
    spec.method = &AsyncStub::Pin;
    spec.items = hashes->size();
    spec.make = [engine_id, hashes, ttl](size_t begin, size_t end) {
      v1::PinRequest req;
      req.set_engine_id(engine_id);
      for (size_t i = begin; i < end; ++i) req.add_block_hashes((*hashes)[i]);
      if (ttl > absl::ZeroDuration()) DurationToProto(ttl, req.mutable_ttl());
      return req;
    };
    spec.merge = [](size_t, size_t, v1::PinResponse& resp, PinResult* result) {
      AppendItems(resp.results(), &result->results);
      if (resp.has_expires_at()) result->expires_at = TimeFromProto(resp.expires_at());
      return true;
    };
    return Await<PinResult>([&](Callback<PinResult> done) {
      RunChunks(core_.get(), std::move(spec), std::move(done));
    });
  }

  absl::StatusOr<PinResult> Unpin(const std::string& engine_id,
                                  const std::vector<std::string>& block_hashes) override {
    auto hashes = std::make_shared<const std::vector<std::string>>(block_hashes);
    ChunkSpec<v1::UnpinRequest, v1::UnpinResponse, PinResult> spec;
    spec.rpc = "Unpin";
    spec.method = &AsyncStub::Unpin;
    spec.items = hashes->size();
    spec.make = [engine_id, hashes](size_t begin, size_t end) {
      v1::UnpinRequest req;
      req.set_engine_id(engine_id);
      for (size_t i = begin; i < end; ++i) req.add_block_hashes((*hashes)[i]);
      return req;
    };
    spec.merge = [](size_t, size_t, v1::UnpinResponse& resp, PinResult* result) {
      AppendItems(resp.results(), &result->results);
      return true;
    };
    return Await<PinResult>([&](Callback<PinResult> done) {
      RunChunks(core_.get(), std::move(spec), std::move(done));
    });
  }

  absl::StatusOr<Stats> GetStats(bool include_namespaces) override {
    v1::StatsRequest req;
    req.set_include_namespaces(include_namespaces);
    absl::StatusOr<v1::StatsResponse> resp =
        Unary<v1::StatsRequest, v1::StatsResponse>("Stats", &AsyncStub::Stats, std::move(req));
    if (!resp.ok()) return resp.status();
    return StatsFromProto(*resp);
  }

  void LookupAsync(const std::string& engine_id, std::vector<std::string> block_hashes,
                   absl::Duration pin_ttl, Callback<LookupResult> done) override {
    auto hashes = std::make_shared<const std::vector<std::string>>(std::move(block_hashes));
    ChunkSpec<v1::LookupRequest, v1::LookupResponse, LookupResult> spec;
    spec.rpc = "Lookup";
    spec.method = &AsyncStub::Lookup;
    spec.items = hashes->size();
    spec.make = [engine_id, hashes, pin_ttl](size_t begin, size_t end) {
      v1::LookupRequest req;
      req.set_engine_id(engine_id);
      for (size_t i = begin; i < end; ++i) req.add_block_hashes((*hashes)[i]);
      if (pin_ttl > absl::ZeroDuration()) DurationToProto(pin_ttl, req.mutable_pin_ttl());
      return req;
    };
    spec.merge = [](size_t begin, size_t end, v1::LookupResponse& resp, LookupResult* result) {
      result->hit_pages += resp.hit_pages();
      for (int tier : resp.tiers()) result->tiers.push_back(TierFromProto(tier));
      if (resp.has_pin_expires_at()) result->pin_expires_at = TimeFromProto(resp.pin_expires_at());
      return resp.hit_pages() == end - begin;  // the prefix ends at the first miss
    };
    RunChunks(core_.get(), std::move(spec), std::move(done));
  }

  void OffloadAsync(const std::string& engine_id, std::vector<PageRef> pages,
                    const OffloadOptions& options, Callback<OffloadResult> done) override {
    auto refs = std::make_shared<const std::vector<PageRef>>(std::move(pages));
    ChunkSpec<v1::OffloadRequest, v1::OffloadResponse, OffloadResult> spec;
    spec.rpc = "Offload";
    spec.method = &AsyncStub::Offload;
    spec.items = refs->size();
    spec.make = [engine_id, refs, options](size_t begin, size_t end) {
      v1::OffloadRequest req;
      req.set_engine_id(engine_id);
      for (size_t i = begin; i < end; ++i) {
        v1::OffloadItem* item = req.add_items();
        item->set_block_hash((*refs)[i].block_hash);
        item->set_page_index((*refs)[i].page_index);
        item->mutable_token_ids()->Add((*refs)[i].token_ids.begin(), (*refs)[i].token_ids.end());
      }
      req.set_durable(options.durable);
      req.set_priority(static_cast<v1::Priority>(options.priority));
      req.set_ack(static_cast<v1::WriteAck>(options.ack));
      return req;
    };
    spec.merge = [](size_t, size_t, v1::OffloadResponse& resp, OffloadResult* result) {
      AppendItems(resp.results(), &result->results);
      result->stored_pages += resp.stored_pages();
      result->hot_bytes_read += resp.hot_bytes_read();
      result->cold_bytes_written += resp.cold_bytes_written();
      return true;
    };
    RunChunks(core_.get(), std::move(spec), std::move(done));
  }

  void OnboardAsync(const std::string& engine_id, std::vector<PageRef> pages,
                    bool continue_after_miss, Callback<OnboardResult> done) override {
    auto refs = std::make_shared<const std::vector<PageRef>>(std::move(pages));
    ChunkSpec<v1::OnboardRequest, v1::OnboardResponse, OnboardResult> spec;
    spec.rpc = "Onboard";
    spec.method = &AsyncStub::Onboard;
    spec.items = refs->size();
    spec.make = [engine_id, refs, continue_after_miss](size_t begin, size_t end) {
      v1::OnboardRequest req;
      req.set_engine_id(engine_id);
      for (size_t i = begin; i < end; ++i) {
        v1::OnboardItem* item = req.add_items();
        item->set_block_hash((*refs)[i].block_hash);
        item->set_page_index((*refs)[i].page_index);
      }
      req.set_continue_after_miss(continue_after_miss);
      return req;
    };
    spec.merge = [continue_after_miss](size_t begin, size_t end, v1::OnboardResponse& resp,
                                       OnboardResult* result) {
      AppendItems(resp.results(), &result->results);
      result->cold_bytes_read += resp.cold_bytes_read();
      result->hot_bytes_written += resp.hot_bytes_written();
      // The usable prefix: leading OK items, counted here because it spans the requests.
      size_t leading = 0;
      while (leading < end - begin && leading < static_cast<size_t>(resp.results_size()) &&
             resp.results(static_cast<int>(leading)).code() == v1::ITEM_CODE_OK) {
        ++leading;
      }
      if (result->onboarded_pages == begin) result->onboarded_pages += leading;
      return continue_after_miss || leading == end - begin;
    };
    spec.stopped = [refs](size_t end, OnboardResult* result) {
      for (size_t i = end; i < refs->size(); ++i) {
        result->results.push_back(
            ItemResult{ItemCode::kSkipped,
                       absl::StrFormat("not attempted: page %d of the onboard was not onboarded",
                                       result->onboarded_pages),
                       Tier::kUnspecified});
      }
    };
    RunChunks(core_.get(), std::move(spec), std::move(done));
  }

  void ParkAsync(const std::string& engine_id, const std::string& request_id,
                 std::vector<uint32_t> page_indices, const ParkOptions& options,
                 Callback<ParkResult> done) override {
    auto indices = std::make_shared<const std::vector<uint32_t>>(std::move(page_indices));
    ChunkSpec<v1::ParkRequest, v1::ParkResponse, ParkResult> spec;
    spec.rpc = "Park";
    spec.method = &AsyncStub::Park;
    spec.items = indices->size();
    spec.make = [engine_id, request_id, indices, options](size_t begin, size_t end) {
      v1::ParkRequest req;
      req.set_engine_id(engine_id);
      req.set_request_id(request_id);
      for (size_t i = begin; i < end; ++i) req.add_page_indices((*indices)[i]);
      req.set_append(begin > 0 || options.append);  // later chunks extend the first
      req.set_num_tokens(options.num_tokens);
      req.set_user_data(options.user_data);
      if (options.ttl > absl::ZeroDuration()) DurationToProto(options.ttl, req.mutable_ttl());
      req.set_priority(static_cast<v1::Priority>(options.priority));
      req.set_ack(static_cast<v1::WriteAck>(options.ack));
      return req;
    };
    spec.merge = [](size_t, size_t, v1::ParkResponse& resp, ParkResult* result) {
      result->parked_pages = resp.parked_pages();
      result->cold_bytes = resp.cold_bytes();
      result->expires_at = TimeFromProto(resp.expires_at());
      result->tier = TierFromProto(resp.tier());
      return true;
    };
    if (!options.append) {
      // All or nothing across chunks too: a failed later chunk releases what the first parked.
      spec.failed = [core = core_.get(), engine_id, request_id](size_t begin,
                                                                std::function<void()> then) {
        if (begin == 0) {
          then();
          return;
        }
        v1::ReleaseRequest req;
        req.set_engine_id(engine_id);
        req.add_request_ids(request_id);
        core->Call<v1::ReleaseRequest, v1::ReleaseResponse>(
            "Release", &AsyncStub::Release, std::move(req),
            [then = std::move(then)](absl::StatusOr<v1::ReleaseResponse>) { then(); });
      };
    }
    RunChunks(core_.get(), std::move(spec), std::move(done));
  }

  void ResumeAsync(const std::string& engine_id, const std::string& request_id,
                   std::vector<uint32_t> page_indices, uint32_t first_page, bool keep_parked,
                   Callback<ResumeResult> done) override {
    auto indices = std::make_shared<const std::vector<uint32_t>>(std::move(page_indices));
    ChunkSpec<v1::ResumeRequest, v1::ResumeResponse, ResumeResult> spec;
    spec.rpc = "Resume";
    spec.method = &AsyncStub::Resume;
    spec.items = indices->size();
    spec.make = [engine_id, request_id, indices, first_page, keep_parked](size_t begin,
                                                                          size_t end) {
      v1::ResumeRequest req;
      req.set_engine_id(engine_id);
      req.set_request_id(request_id);
      for (size_t i = begin; i < end; ++i) req.add_page_indices((*indices)[i]);
      req.set_first_page(first_page + static_cast<uint32_t>(begin));
      req.set_keep_parked(end < indices->size() || keep_parked);  // only the last may release
      return req;
    };
    spec.merge = [](size_t, size_t, v1::ResumeResponse& resp, ResumeResult* result) {
      result->resumed_pages += resp.resumed_pages();
      result->parked_pages = resp.parked_pages();
      result->num_tokens = resp.num_tokens();
      result->user_data = resp.user_data();
      result->released = resp.released();
      return true;
    };
    RunChunks(core_.get(), std::move(spec), std::move(done));
  }

  absl::StatusOr<std::unique_ptr<EventWatch>> WatchEvents(
      const WatchOptions& options, std::function<void(const Event&)> on_event,
      std::function<void(absl::Status)> on_done) override {
    v1::WatchEventsRequest req;
    req.set_start(options.snapshot ? v1::WATCH_START_SNAPSHOT : v1::WATCH_START_NOW);
    if (options.namespace_id != 0) req.mutable_namespaces()->set_namespace_id(options.namespace_id);
    return std::make_unique<EventWatchImpl>(core_, std::move(req), std::move(on_event),
                                            std::move(on_done));
  }

  static std::string ClientName(const ClientOptions& options) {
    return options.client_name.empty() ? absl::StrCat("libkvtier/", std::string(LibraryVersion()))
                                       : absl::StrCat("libkvtier/", std::string(LibraryVersion()),
                                                      " ", options.client_name);
  }

 private:
  struct LeasedEngine {
    absl::Duration period;
    absl::Time due;
  };

  template <typename Req, typename Resp>
  absl::StatusOr<Resp> Unary(const char* rpc, AsyncMethod<Req, Resp> method, Req req,
                             const CallOptions& call = {}) {
    return Await<Resp>([&](std::function<void(absl::StatusOr<Resp>)> done) {
      core_->Call<Req, Resp>(rpc, method, std::move(req), std::move(done), call);
    });
  }

  absl::StatusOr<v1::KeepAliveResponse> KeepAliveCall(const std::string& engine_id,
                                                      const CallOptions& call) {
    v1::KeepAliveRequest req;
    req.set_engine_id(engine_id);
    return Unary<v1::KeepAliveRequest, v1::KeepAliveResponse>("KeepAlive", &AsyncStub::KeepAlive,
                                                              std::move(req), call);
  }

  void StartKeepAlive(const std::string& engine_id, absl::Duration lease) {
    // A server that reports no lease gets the contract's default (30 s) assumed.
    if (lease <= absl::ZeroDuration()) lease = absl::Seconds(30);
    const absl::Duration period = std::max(lease / 3, absl::Milliseconds(10));
    absl::MutexLock lock(&engines_mu_);
    if (stop_) return;
    engines_[engine_id] = LeasedEngine{period, absl::Now() + period};
    if (!keep_alive_thread_.joinable()) {
      keep_alive_thread_ = std::thread([this] { KeepAliveLoop(); });
    }
    engines_cv_.SignalAll();
  }

  // Renews every registered engine's lease about every lease / 3 until the destructor.
  void KeepAliveLoop() {
    for (;;) {
      std::vector<std::pair<std::string, absl::Duration>> due;
      {
        absl::MutexLock lock(&engines_mu_);
        for (;;) {
          if (stop_) return;
          const absl::Time now = absl::Now();
          absl::Time next = absl::InfiniteFuture();
          for (auto& [id, engine] : engines_) {
            if (engine.due <= now) {
              due.emplace_back(id, engine.period);
              engine.due = now + engine.period;
            }
            next = std::min(next, engine.due);
          }
          if (!due.empty()) break;
          engines_cv_.WaitWithDeadline(&engines_mu_, next);
        }
      }
      for (const auto& [id, period] : due) {
        // A short deadline: one unresponsive renewal must not starve the others.
        const absl::Duration timeout =
            std::min(core_->options().rpc_timeout, std::max(period, absl::Seconds(1)));
        absl::StatusOr<v1::KeepAliveResponse> resp = KeepAliveCall(id, {timeout, false});
        if (!resp.ok() && absl::IsNotFound(resp.status())) {
          absl::MutexLock lock(&engines_mu_);
          engines_.erase(id);  // expired or the daemon restarted: renewing cannot help
        }
      }
    }
  }

  std::shared_ptr<Core> core_;
  absl::Mutex engines_mu_;
  absl::CondVar engines_cv_;
  std::map<std::string, LeasedEngine> engines_ ABSL_GUARDED_BY(engines_mu_);
  bool stop_ ABSL_GUARDED_BY(engines_mu_) = false;
  // Started under engines_mu_; joined by the destructor once stop_ forbids new starts.
  std::thread keep_alive_thread_;
};

// The path of a Unix socket target ("unix:PATH" or "unix://PATH"), or nullopt for another target.
std::optional<std::string> UnixSocketPath(absl::string_view target) {
  if (absl::ConsumePrefix(&target, "unix://") || absl::ConsumePrefix(&target, "unix:")) {
    return std::string(target);
  }
  return std::nullopt;
}

// Connects to the Unix socket at `path` once, without waiting, and closes the connection again:
// OK when something listens there (also when its backlog is full); Unavailable with the system's
// reason (no such file, connection refused, permission denied) otherwise, so that Connect fails
// at once instead of waiting connect_timeout for a daemon that is not there.
absl::Status ProbeUnixSocket(const std::string& path, const std::string& where) {
  sockaddr_un addr{};
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: a Unix socket path has 1 to %d bytes; this one has %d", where,
                        sizeof(addr.sun_path) - 1, path.size()));
  }
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrFormat("cannot create a socket to reach %s: %s", where, std::strerror(errno)));
  }
  int err = 0;
  if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) err = errno;
  close(fd);
  if (err == 0 || err == EAGAIN || err == EINPROGRESS) return absl::OkStatus();
  return absl::UnavailableError(absl::StrFormat("cannot connect to %s: %s (is the daemon running?)",
                                                where, std::strerror(err)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const ClientOptions& options) {
  std::string target = options.target;
  std::string where;
  if (target.empty()) {
    std::string socket = options.socket_path;
    if (socket.empty()) {
      const char* env = std::getenv("KVTIER_SOCKET");
      socket = env != nullptr && env[0] != '\0' ? env : kDefaultSocket;
    }
    target = absl::StrCat("unix:", socket);
    where = absl::StrCat("socket ", socket);
  } else {
    where = absl::StrCat("target ", target);
  }
  if (std::optional<std::string> path = UnixSocketPath(target); path.has_value()) {
    if (absl::Status st = ProbeUnixSocket(*path, where); !st.ok()) return st;
  }
  grpc::ChannelArguments args;
  // A local daemon that restarts is back within a second: reconnect quickly.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  args.SetMaxReceiveMessageSize(-1);
  args.SetString(GRPC_ARG_PRIMARY_USER_AGENT_STRING,
                 absl::StrCat("libkvtier/", std::string(LibraryVersion())));
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
  auto core = std::make_shared<Core>(options, std::move(channel));

  v1::HelloRequest req;
  req.set_min_api_version(kApiVersion);
  req.set_max_api_version(kApiVersion);
  req.set_client_name(ClientImpl::ClientName(options));
  absl::StatusOr<v1::HelloResponse> resp =
      Await<v1::HelloResponse>([&](std::function<void(absl::StatusOr<v1::HelloResponse>)> done) {
        core->Call<v1::HelloRequest, v1::HelloResponse>(
            "Hello", &AsyncStub::Hello, std::move(req), std::move(done),
            CallOptions{options.connect_timeout, /*wait_for_ready=*/true});
      });
  if (!resp.ok()) {
    core->WaitIdle();  // the Core is released here, not on the callback's thread
    if (absl::IsDeadlineExceeded(resp.status()) || absl::IsUnavailable(resp.status())) {
      return absl::UnavailableError(
          absl::StrFormat("no kvtierd answered on %s within %s (is the daemon running?): %s", where,
                          absl::FormatDuration(options.connect_timeout), resp.status().message()));
    }
    return resp.status();
  }
  core->set_server(ServerInfoFromProto(*resp));
  return std::unique_ptr<Client>(std::make_unique<ClientImpl>(std::move(core)));
}

std::future<absl::StatusOr<LookupResult>> Client::LookupFuture(
    const std::string& engine_id, std::vector<std::string> block_hashes, absl::Duration pin_ttl) {
  return AsFuture<LookupResult>([&](Callback<LookupResult> done) {
    LookupAsync(engine_id, std::move(block_hashes), pin_ttl, std::move(done));
  });
}

std::future<absl::StatusOr<OffloadResult>> Client::OffloadFuture(const std::string& engine_id,
                                                                 std::vector<PageRef> pages,
                                                                 const OffloadOptions& options) {
  return AsFuture<OffloadResult>([&](Callback<OffloadResult> done) {
    OffloadAsync(engine_id, std::move(pages), options, std::move(done));
  });
}

std::future<absl::StatusOr<OnboardResult>> Client::OnboardFuture(const std::string& engine_id,
                                                                 std::vector<PageRef> pages,
                                                                 bool continue_after_miss) {
  return AsFuture<OnboardResult>([&](Callback<OnboardResult> done) {
    OnboardAsync(engine_id, std::move(pages), continue_after_miss, std::move(done));
  });
}

std::future<absl::StatusOr<ParkResult>> Client::ParkFuture(const std::string& engine_id,
                                                           const std::string& request_id,
                                                           std::vector<uint32_t> page_indices,
                                                           const ParkOptions& options) {
  return AsFuture<ParkResult>([&](Callback<ParkResult> done) {
    ParkAsync(engine_id, request_id, std::move(page_indices), options, std::move(done));
  });
}

std::future<absl::StatusOr<ResumeResult>> Client::ResumeFuture(const std::string& engine_id,
                                                               const std::string& request_id,
                                                               std::vector<uint32_t> page_indices,
                                                               uint32_t first_page,
                                                               bool keep_parked) {
  return AsFuture<ResumeResult>([&](Callback<ResumeResult> done) {
    ResumeAsync(engine_id, request_id, std::move(page_indices), first_page, keep_parked,
                std::move(done));
  });
}

}  // namespace kvtier
