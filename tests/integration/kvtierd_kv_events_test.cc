// kv_events against a real kvtierd: an independent Python subscriber (kv_events_subscriber.py,
// Debian's python3-zmq and python3-msgpack) decodes the published vLLM KV events in both
// encodings and checks that a router's view (hashes per medium) follows a scripted sequence of
// offloads, a demotion to disk, removals and a clear, that another tenant's namespace stays
// invisible, that sequence numbers are gap-free from 0, that the replay socket returns a
// requested range and its terminator, and that a subscriber that connects late and replays from
// 0 sees everything still buffered. Also: the replay buffer's bound, a connected (not bound)
// PUB endpoint, the metrics, the start-up errors of bad kv_events settings, the check of
// OffloadItem.token_ids, and `kvtierctl watch --format=vllm`.
#include <poll.h>

#include <future>
#include <map>
#include <set>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "tests/integration/daemon_fixture.h"

namespace kvtier::integration {
namespace {

using json = nlohmann::json;

// The subscriber script as a child process, spoken to in JSON lines over two pipes.
class Subscriber {
 public:
  Subscriber(const std::vector<std::string>& args, const std::string& log) {
    int in[2], out[2];
    EXPECT_EQ(pipe2(in, O_CLOEXEC), 0);
    EXPECT_EQ(pipe2(out, O_CLOEXEC), 0);
    std::vector<std::string> argv_s = {"/usr/bin/python3", KV_EVENTS_SUBSCRIBER};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, in[0], 0);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    posix_spawn_file_actions_addopen(&actions, 2, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    EXPECT_EQ(posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ), 0);
    posix_spawn_file_actions_destroy(&actions);
    close(in[0]);
    close(out[1]);
    to_ = in[1];
    from_ = out[0];
  }
  ~Subscriber() {
    close(to_);
    close(from_);
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }

  void Send(const json& j) {
    const std::string line = j.dump() + "\n";
    EXPECT_EQ(write(to_, line.data(), line.size()), static_cast<ssize_t>(line.size()));
  }
  // The next line the script prints, parsed; null after 30 s or at its end.
  json Receive() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (buffer_.find('\n') == std::string::npos) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      pollfd p{from_, POLLIN, 0};
      if (left.count() <= 0 || poll(&p, 1, static_cast<int>(left.count())) <= 0) return nullptr;
      char buf[4096];
      const ssize_t n = read(from_, buf, sizeof(buf));
      if (n <= 0) return nullptr;
      buffer_.append(buf, static_cast<size_t>(n));
    }
    const size_t nl = buffer_.find('\n');
    const std::string line = buffer_.substr(0, nl);
    buffer_.erase(0, nl + 1);
    return json::parse(line, nullptr, false);
  }
  json Ask(const json& j) {
    Send(j);
    return Receive();
  }

 private:
  pid_t pid_ = 0;
  int to_ = -1, from_ = -1;
  std::string buffer_;
};

// A router's view, as the test expects it: 64-bit hashes per medium.
struct View {
  std::map<std::string, std::set<uint64_t>> media;
  json Expect(int cleared) const {
    json e = json::object();
    for (const char* m : {"GPU", "CPU", "STORAGE"}) {
      e[m] = json::array();
      auto it = media.find(m);
      if (it != media.end()) {
        for (uint64_t h : it->second) e[m].push_back(h);
      }
    }
    return json{{"expect", e}, {"cleared", cleared}};
  }
};

// Test block `i`'s key: even blocks an engine's own 8-byte key (big-endian 0x1000 + i: the event
// carries exactly that), odd ones a 32-byte hash whose last 8 bytes are 0xABCD0000 + i (the event
// carries those, read big-endian).
std::string Key(uint64_t i) {
  std::string h(i % 2 == 0 ? 8 : 32, '\0');
  const uint64_t v = i % 2 == 0 ? 0x1000 + i : 0xABCD0000 + i;
  for (int b = 0; b < 8; ++b) h[h.size() - 1 - b] = static_cast<char>((v >> (8 * b)) & 0xff);
  if (h.size() == 32) h[0] = 0x7f;  // a SHA-256 hash is not zero at the front
  return h;
}
uint64_t Reduced(uint64_t i) { return i % 2 == 0 ? 0x1000 + i : 0xABCD0000 + i; }

// The token ids the tests send with block `i` of team-a (blocks 0 to 9): blocks 0 to 7 a full
// 16-token page (1000 * i + t), block 8 none, block 9 a partial page of 5 tokens.
std::vector<uint32_t> Tokens(uint64_t i) {
  std::vector<uint32_t> t;
  const uint32_t n = i < 8 ? 16 : i == 9 ? 5 : 0;
  for (uint32_t k = 0; k < n; ++k) t.push_back(static_cast<uint32_t>(1000 * i + k));
  return t;
}
// Tokens() of blocks [0, 10) as the subscriber's --tokens: {"<reduced hash>": [ids], ...}.
std::string TokensArg() {
  json j = json::object();
  for (uint64_t i = 0; i < 10; ++i) {
    if (!Tokens(i).empty()) j[std::to_string(Reduced(i))] = Tokens(i);
  }
  return "--tokens=" + j.dump();
}

void OffloadKeys(v1::KvTier::Stub& stub, const std::string& engine, uint64_t first, uint32_t n,
                 bool with_tokens = false) {
  v1::OffloadRequest req;
  req.set_engine_id(engine);
  for (uint32_t i = 0; i < n; ++i) {
    v1::OffloadItem* item = req.add_items();
    item->set_block_hash(Key(first + i));
    item->set_page_index(i);
    if (with_tokens) {
      for (uint32_t t : Tokens(first + i)) item->add_token_ids(t);
    }
  }
  grpc::ClientContext ctx;
  v1::OffloadResponse resp;
  ASSERT_TRUE(stub.Offload(DaemonFixture::Context(&ctx), req, &resp).ok());
  ASSERT_EQ(resp.stored_pages(), n);
}

// Where block `i` is now, by a one-block Lookup: "GPU", "CPU", "STORAGE" or "" (not held).
std::string MediumOf(v1::KvTier::Stub& stub, const std::string& engine, uint64_t i) {
  v1::LookupRequest req;
  req.set_engine_id(engine);
  req.add_block_hashes(Key(i));
  grpc::ClientContext ctx;
  v1::LookupResponse resp;
  EXPECT_TRUE(stub.Lookup(DaemonFixture::Context(&ctx), req, &resp).ok());
  if (resp.hit_pages() == 0) return "";
  switch (resp.tiers(0)) {
    case v1::TIER_GPU:
      return "GPU";
    case v1::TIER_HOST:
      return "CPU";
    default:
      return "STORAGE";
  }
}

class KvEventsTest : public DaemonFixture, public ::testing::WithParamInterface<const char*> {
 protected:
  std::string Pub() const { return "ipc://" + dir_->File("kv-events.sock"); }
  std::string Replay() const { return "ipc://" + dir_->File("kv-replay.sock"); }
  static constexpr const char* kTopic = "kv@127.0.0.1:5557@test-model";

  std::vector<std::string> KvEventArgs(const std::string& encoding) const {
    return {"--set=kv_events.enabled=true", "--set=kv_events.endpoint=" + Pub(),
            "--set=kv_events.replay_endpoint=" + Replay(),
            std::string("--set=kv_events.topic=") + kTopic, "--set=kv_events.encoding=" + encoding,
            // Only for namespaces no engine offloaded into: team-a's blocks have its engine's 16.
            "--set=kv_events.block_size=5", "--set=kv_events.tenants=[team-a]",
            // Published at once, so that each step of the scripted sequence is a batch of its
            // own however the machine schedules (with an interval, an offload and the demotion
            // it causes may share one).
            "--set=kv_events.batch_interval_ms=0"};
  }
  std::vector<std::string> SubscriberArgs(const std::string& encoding) const {
    return {"--endpoint=" + Pub(),    "--replay=" + Replay(), std::string("--topic=") + kTopic,
            "--encoding=" + encoding, "--block-size=16",      TokensArg()};
  }
  // The view the daemon's lookups give for blocks [0, n) of `engine`.
  View Looked(const std::string& engine, uint64_t n) {
    View v;
    for (uint64_t i = 0; i < n; ++i) {
      const std::string m = MediumOf(*stub_, engine, i);
      if (!m.empty()) v.media[m].insert(Reduced(i));
    }
    return v;
  }
};

TEST_P(KvEventsTest, ASubscriberFollowsOffloadsDemotionsRemovalsAndAClear) {
  const std::string encoding = GetParam();
  ASSERT_NO_FATAL_FAILURE(StartDaemon(KvEventArgs(encoding)));
  Subscriber sub(SubscriberArgs(encoding), dir_->File("subscriber.log"));
  ASSERT_EQ(sub.Receive(), json({{"ready", true}})) << Log();

  TestEngine a(dir_->File("pool-a"), 16), b(dir_->File("pool-b"), 16);
  for (uint32_t i = 0; i < 16; ++i) a.Fill(i, i), b.Fill(i, 100 + i);
  const v1::RegisterEngineResponse reg_a = Register(*stub_, a.Request("team-a"));
  const v1::RegisterEngineResponse reg_b = Register(*stub_, b.Request("team-b"));
  constexpr uint64_t kBlocks = 10;
  // With their tokens (Tokens(): full pages, one without, a partial page), which the subscriber
  // checks in every BlockStored, the demotions' included.
  ASSERT_NO_FATAL_FAILURE(OffloadKeys(*stub_, reg_a.engine_id(), 0, kBlocks, true));
  // team-b is not in kv_events.tenants: its blocks (other keys) are never published.
  ASSERT_NO_FATAL_FAILURE(OffloadKeys(*stub_, reg_b.engine_id(), 100, 6));
  View view = Looked(reg_a.engine_id(), kBlocks);
  ASSERT_EQ(view.media["CPU"].size(), kBlocks);
  json r = sub.Ask(view.Expect(0));
  ASSERT_EQ(r["ok"], true) << r.dump() << "\n" << Log();

  // Demotion: four blocks leave the host tier for disk (BlockStored STORAGE + BlockRemoved CPU).
  auto admin = v1::KvTierAdmin::NewStub(channel_);
  {
    grpc::ClientContext ctx;
    v1::EvictRequest req;
    req.mutable_namespaces()->set_namespace_id(reg_a.namespace_id());
    req.set_tier(v1::TIER_HOST);
    req.set_block_count(4);
    v1::EvictResponse resp;
    ASSERT_TRUE(admin->Evict(Context(&ctx), req, &resp).ok());
    ASSERT_EQ(resp.demoted_blocks(), 4u);
  }
  // Removal: two named blocks leave the cache (BlockRemoved from the medium they were in). A
  // block still being copied to disk is refused for now: asked again.
  for (uint64_t i : {0u, 7u}) {
    v1::ItemCode code = v1::ITEM_CODE_FAILED_PRECONDITION;
    for (int attempt = 0; attempt < 100 && code != v1::ITEM_CODE_OK; ++attempt) {
      if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      grpc::ClientContext ctx;
      v1::EvictRequest req;
      req.mutable_namespaces()->set_namespace_id(reg_a.namespace_id());
      req.mutable_hashes()->add_hashes(Key(i));
      v1::EvictResponse resp;
      ASSERT_TRUE(admin->Evict(Context(&ctx), req, &resp).ok());
      ASSERT_EQ(resp.results_size(), 1);
      code = resp.results(0).code();
      ASSERT_TRUE(code == v1::ITEM_CODE_OK || code == v1::ITEM_CODE_FAILED_PRECONDITION)
          << resp.DebugString();
    }
    ASSERT_EQ(code, v1::ITEM_CODE_OK) << "block " << i;
  }
  // A demoted block stays in the host tier until its disk copy is written: the view once no
  // block moves any more (the same twice, 200 ms apart, with some block on disk).
  view = Looked(reg_a.engine_id(), kBlocks);
  for (int attempt = 0; attempt < 50; ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const View again = Looked(reg_a.engine_id(), kBlocks);
    const bool settled = again.media == view.media && again.media.contains("STORAGE");
    view = again;
    if (settled) break;
  }
  ASSERT_EQ(view.media["STORAGE"].size() + view.media["CPU"].size(), kBlocks - 2);
  ASSERT_FALSE(view.media["STORAGE"].empty());
  r = sub.Ask(view.Expect(0));
  ASSERT_EQ(r["ok"], true) << r.dump();

  // A subscriber that connects now and replays from 0 reaches the same view.
  {
    std::vector<std::string> late_args = SubscriberArgs(encoding);
    late_args.push_back("--late");
    Subscriber late(late_args, dir_->File("late.log"));
    ASSERT_EQ(late.Receive(), json({{"ready", true}}));
    r = late.Ask(view.Expect(0));
    EXPECT_EQ(r["ok"], true) << r.dump();
    r = late.Ask({{"finish", true}});
    EXPECT_EQ(r["ok"], true) << r.dump();
    EXPECT_EQ(r["first_seq"], 0);
  }

  // Clearing team-b's namespace says nothing; clearing team-a's is AllBlocksCleared.
  for (const uint64_t ns : {reg_b.namespace_id(), reg_a.namespace_id()}) {
    grpc::ClientContext ctx;
    v1::ClearRequest req;
    req.mutable_namespaces()->set_namespace_id(ns);
    v1::ClearResponse resp;
    ASSERT_TRUE(admin->Clear(Context(&ctx), req, &resp).ok());
  }
  r = sub.Ask(View().Expect(1));
  ASSERT_EQ(r["ok"], true) << r.dump();

  r = sub.Ask({{"replay_from", 2}});
  ASSERT_EQ(r["ok"], true) << r.dump();
  ASSERT_FALSE(r["seqs"].empty());
  EXPECT_EQ(r["seqs"].front(), 2);
  r = sub.Ask({{"finish", true}});
  ASSERT_EQ(r["ok"], true) << r.dump();
  EXPECT_GE(r["batches"].get<int>(), 4);  // offload, demotion, removal, clear at least

  const std::string metrics = HttpGet(metrics_port_, "/metrics");
  EXPECT_NE(
      metrics.find("kvtier_kv_events_published_total " + std::to_string(r["batches"].get<int>())),
      std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("kvtier_kv_events_dropped_total 0"), std::string::npos);
  EXPECT_NE(metrics.find("kvtier_kv_events_lost_total 0"), std::string::npos);
  EXPECT_NE(metrics.find("kvtier_event_streams 0"), std::string::npos);  // the publisher is none
  EXPECT_EQ(StopDaemon(SIGTERM), 0) << Log();
}

INSTANTIATE_TEST_SUITE_P(Encodings, KvEventsTest, ::testing::Values("array", "map"),
                         [](const auto& info) { return std::string(info.param); });

using KvEventsConfigTest = KvEventsTest;

// A PUB endpoint without a wildcard is connected: the subscriber binds. The replay buffer keeps
// the last kv_events.replay_buffer batches: a late subscriber gets those, consecutive, and no
// more.
TEST_F(KvEventsConfigTest, AConnectedEndpointAndABoundedReplayBuffer) {
  const int port = FreePort();
  const std::string endpoint = "tcp://127.0.0.1:" + std::to_string(port);
  Subscriber sub({"--endpoint=" + endpoint, "--bind", "--replay=" + Replay(), "--encoding=map",
                  "--block-size=16"},
                 dir_->File("subscriber.log"));
  ASSERT_EQ(sub.Receive(), json({{"ready", true}}));
  ASSERT_NO_FATAL_FAILURE(StartDaemon(
      {"--set=kv_events.enabled=true", "--set=kv_events.endpoint=" + endpoint,
       "--set=kv_events.replay_endpoint=" + Replay(), "--set=kv_events.replay_buffer=2"}));
  ASSERT_EQ(sub.Ask({{"settle", 0.5}}), json({{"ok", true}}));  // the publisher's pipe arrives
  TestEngine a(dir_->File("pool-a"), 16);
  const v1::RegisterEngineResponse reg = Register(*stub_, a.Request());
  View view;
  for (uint64_t round = 0; round < 4; ++round) {
    // Each round is seen before the next starts: at least one batch per round.
    ASSERT_NO_FATAL_FAILURE(OffloadKeys(*stub_, reg.engine_id(), round * 2, 2));
    view.media["CPU"].insert({Reduced(round * 2), Reduced(round * 2 + 1)});
    const json r = sub.Ask(view.Expect(0));
    ASSERT_EQ(r["ok"], true) << r.dump() << "\n" << Log();
  }
  const json live = sub.Ask({{"finish", true}});
  ASSERT_EQ(live["ok"], true) << live.dump();
  const int batches = live["batches"].get<int>();
  ASSERT_GE(batches, 4);
  Subscriber late({"--endpoint=" + endpoint, "--replay=" + Replay(), "--encoding=map",
                   "--block-size=16", "--late"},
                  dir_->File("late.log"));
  ASSERT_EQ(late.Receive(), json({{"ready", true}}));
  const json r = late.Ask({{"finish", true}});
  ASSERT_EQ(r["ok"], true) << r.dump();
  EXPECT_EQ(r["batches"], 2);
  EXPECT_EQ(r["first_seq"], batches - 2);
}

// An item with more token ids than the engine's tokens_per_page fails the whole request, naming
// it, and stores nothing; as many as a page is fine.
TEST_F(KvEventsConfigTest, TooManyTokenIdsAreInvalid) {
  ASSERT_NO_FATAL_FAILURE(
      StartDaemon({"--set=kv_events.enabled=true", "--set=kv_events.endpoint=" + Pub(),
                   "--set=kv_events.token_table_blocks=4"}));
  TestEngine a(dir_->File("pool-a"), 16);
  const v1::RegisterEngineResponse reg = Register(*stub_, a.Request());
  v1::OffloadRequest req;
  req.set_engine_id(reg.engine_id());
  for (uint32_t i = 0; i < 2; ++i) {
    v1::OffloadItem* item = req.add_items();
    item->set_block_hash(Key(i));
    item->set_page_index(i);
    for (uint32_t t = 0; t < 16 + i; ++t) item->add_token_ids(t);
  }
  {
    grpc::ClientContext ctx;
    v1::OffloadResponse resp;
    const grpc::Status st = stub_->Offload(Context(&ctx), req, &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(st.error_message().find("items[1]: 17 token ids, more than the 16 tokens of a page "
                                      "of engine"),
              std::string::npos)
        << st.error_message();
  }
  EXPECT_EQ(MediumOf(*stub_, reg.engine_id(), 0), "");
  req.mutable_items(1)->mutable_token_ids()->RemoveLast();
  grpc::ClientContext ctx;
  v1::OffloadResponse resp;
  ASSERT_TRUE(stub_->Offload(Context(&ctx), req, &resp).ok());
  EXPECT_EQ(resp.stored_pages(), 2u);
}

// kvtierctl watch --format=vllm subscribes to the PUB socket and prints each KV event as one JSON
// line under vLLM's field names (here from the array encoding), token ids included.
TEST_F(KvEventsConfigTest, KvtierctlWatchPrintsTheKvEvents) {
  ASSERT_NO_FATAL_FAILURE(
      StartDaemon({"--set=kv_events.enabled=true", "--set=kv_events.endpoint=" + Pub(),
                   "--set=kv_events.encoding=array"}));
  TestEngine a(dir_->File("pool-a"), 16);
  const v1::RegisterEngineResponse reg = Register(*stub_, a.Request());
  const std::string ctl = std::string(KVTIERCTL_PATH) + " watch --format=vllm --endpoint=" + Pub();
  std::string out;
  std::future<int> watch = std::async(std::launch::async, [&] {
    return RunCommand(ctl + " --count=2 --duration=60 2>" + dir_->File("watch.err"), &out);
  });
  // Until it is subscribed (ZeroMQ's slow joiner), a new block every 100 ms: block 100 + k with
  // the tokens 7000 + 16 k + t.
  uint64_t offloaded = 0;
  while (watch.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready &&
         offloaded < 300) {
    v1::OffloadRequest req;
    req.set_engine_id(reg.engine_id());
    v1::OffloadItem* item = req.add_items();
    item->set_block_hash(Key(100 + offloaded));
    for (uint32_t t = 0; t < 16; ++t)
      item->add_token_ids(static_cast<uint32_t>(7000 + 16 * offloaded + t));
    ++offloaded;
    grpc::ClientContext ctx;
    v1::OffloadResponse resp;
    ASSERT_TRUE(stub_->Offload(Context(&ctx), req, &resp).ok());
  }
  ASSERT_EQ(watch.get(), 0) << out;
  const std::vector<std::string> lines = absl::StrSplit(out, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 2u) << out;
  for (const std::string& line : lines) {
    const json e = json::parse(line, nullptr, false);
    ASSERT_TRUE(e.is_object()) << line;
    EXPECT_TRUE(e["seq"].is_number_unsigned()) << line;
    EXPECT_TRUE(e["timestamp"].is_number_float()) << line;
    EXPECT_TRUE(e["data_parallel_rank"].is_null()) << line;
    EXPECT_EQ(e["type"], "BlockStored") << line;
    EXPECT_EQ(e["medium"], "CPU") << line;
    EXPECT_EQ(e["block_size"], 16) << line;
    EXPECT_TRUE(e["parent_block_hash"].is_null()) << line;
    EXPECT_TRUE(e.contains("kv_cache_spec_sliding_window")) << line;
    // Usually one block (the log may merge two offloads the publisher had not read yet): which
    // blocks, by their hashes; their tokens are the ones sent, in order.
    ASSERT_FALSE(e["block_hashes"].empty()) << line;
    std::vector<uint32_t> want;
    for (const json& h : e["block_hashes"]) {
      uint64_t k = 0;
      while (k < offloaded && Reduced(100 + k) != h.get<uint64_t>()) ++k;
      ASSERT_LT(k, offloaded) << line;
      for (uint32_t t = 0; t < 16; ++t) want.push_back(static_cast<uint32_t>(7000 + 16 * k + t));
    }
    EXPECT_EQ(e["token_ids"].get<std::vector<uint32_t>>(), want) << line;
  }

  // Flags that do not go together, and a configuration without kv_events.
  std::string err;
  EXPECT_EQ(RunCommand(ctl + " --from=snapshot", &err), 2);
  EXPECT_NE(err.find("--from does not apply to --format=vllm"), std::string::npos) << err;
  err.clear();
  EXPECT_EQ(RunCommand(std::string(KVTIERCTL_PATH) + " watch --format=json", &err), 2);
  EXPECT_NE(err.find("--format is kvtier or vllm, not 'json'"), std::string::npos) << err;
  err.clear();
  const std::string conf = dir_->File("kvtierd.yaml");
  FILE* f = fopen(conf.c_str(), "w");
  ASSERT_NE(f, nullptr);
  fputs("kv_events:\n  enabled: false\n", f);
  fclose(f);
  EXPECT_EQ(RunCommand(std::string(KVTIERCTL_PATH) + " watch --format=vllm --config=" + conf, &err),
            1);
  EXPECT_NE(err.find("does not enable kv_events"), std::string::npos) << err;
}

TEST_F(KvEventsConfigTest, BadSettingsAreStartupErrors) {
  std::string out;
  EXPECT_NE(RunKvtierd({"--set=kv_events.enabled=true", "--set=kv_events.encoding=json",
                        "--set=kv_events.endpoint=udp://x:1", "--set=kv_events.send_hwm=0"},
                       &out),
            0);
  EXPECT_NE(out.find("field 'kv_events.encoding': 'json' is not array or map"), std::string::npos)
      << out;
  EXPECT_NE(out.find("field 'kv_events.endpoint': 'udp://x:1' is not a ZeroMQ endpoint"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("field 'kv_events.send_hwm': 0 is outside [1, 10000000]"), std::string::npos)
      << out;

  // An endpoint that cannot be bound stops the start, naming it.
  out.clear();
  const std::string missing = "ipc://" + dir_->File("no-such-dir") + "/pub.sock";
  EXPECT_NE(
      RunKvtierd({"--set=kv_events.enabled=true", "--set=kv_events.endpoint=" + missing}, &out), 0);
  EXPECT_NE(out.find("kv_events.endpoint: cannot bind " + missing), std::string::npos) << out;
  // A TCP port in use.
  const int held = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(held, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(held, 1), 0);
  socklen_t len = sizeof(addr);
  getsockname(held, reinterpret_cast<sockaddr*>(&addr), &len);
  const std::string in_use = "tcp://127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  out.clear();
  EXPECT_NE(RunKvtierd({"--set=kv_events.enabled=true", "--set=kv_events.endpoint=" + Pub(),
                        "--set=kv_events.replay_endpoint=" + in_use},
                       &out, 20),
            0);
  EXPECT_NE(
      out.find("kv_events.replay_endpoint: cannot bind " + in_use + ": Address already in use"),
      std::string::npos)
      << out;
  close(held);
}

}  // namespace
}  // namespace kvtier::integration
