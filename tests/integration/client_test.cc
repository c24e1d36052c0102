// kvtier::Client against a real kvtierd: Connect and Hello, RegisterEngine's own checks and the
// daemon's errors passed through, byte-exact raw round trips and nvfp4 round trips equal to the
// CPU codec, BlockHasher chains as keys, requests split above the daemon's item limit, the
// callback and future forms with several calls in flight, Park / Resume / Release, Pin / Unpin,
// Stats, the event stream, lease renewal, destruction with calls in flight and tenant tokens.
#include "kvtier/client.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>
#include <mutex>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "daemon/service/auth.h"
#include "kvtier/block_hasher.h"
#include "kvtier/layout.h"
#include "kvtier/pools.h"
#include "tests/integration/daemon_fixture.h"

namespace kvtier::integration {
namespace {

constexpr uint32_t kSlots = 32;

PageLayout SmallLayout() { return PageLayout::Gqa({2, 2, 64, 16}).value(); }

// Fills one page of `layout` at `page` with N(0, 1) values from `seed`.
void FillPage(const PageLayout& layout, uint8_t* page, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const codec::PageLayout& l = layout.internal();
  for (const codec::BufferSpec& b : l.buffers) {
    const uint64_t elems = l.Rows(b) * b.RowStride();
    for (uint64_t e = 0; e < elems; ++e) {
      codec::StoreFromFloat(b.dtype, normal(rng), page + b.offset_bytes, e);
    }
  }
}

// What `page` becomes after an encode and a decode with `codec` on the CPU.
std::vector<uint8_t> CpuRoundTrip(const PageLayout& layout, const uint8_t* page,
                                  const std::string& codec) {
  const codec::PageLayout& l = layout.internal();
  auto c = codec::Codec::Create(l, codec::CodecSpec::Parse(codec).value()).value();
  std::vector<uint8_t> block(c->block_bytes());
  std::vector<uint8_t> result(l.pools[0].slot_bytes, 0);
  codec::HotPageView in;
  codec::MutableHotPageView out;
  for (const codec::BufferSpec& b : l.buffers) {
    in.base.push_back(page + b.offset_bytes);
    out.base.push_back(result.data() + b.offset_bytes);
  }
  EXPECT_TRUE(c->Encode(in, absl::MakeSpan(block)).ok());
  EXPECT_TRUE(c->Decode(block, out).ok());
  return result;
}

class ClientTest : public DaemonFixture {
 protected:
  ClientOptions Options() const {
    ClientOptions options;
    options.socket_path = Socket();
    options.client_name = "client-test/1";
    options.connect_timeout = absl::Seconds(10);
    return options;
  }

  std::unique_ptr<Client> Connect(ClientOptions options) {
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? std::move(*client) : nullptr;
  }
  std::unique_ptr<Client> Connect() { return Connect(Options()); }

  // A host pool of kSlots pages in the fixture's directory.
  std::unique_ptr<SharedMemoryPool> Pool(const std::string& name = "pool.kv") {
    absl::StatusOr<std::unique_ptr<SharedMemoryPool>> pool =
        SharedMemoryPool::Create(dir_->File(name), "kv", kSlots, layout_.pools()[0].slot_bytes);
    EXPECT_TRUE(pool.ok()) << pool.status();
    return std::move(*pool);
  }

  EngineOptions EngineFor(const SharedMemoryPool& pool, const std::string& codec = "raw") const {
    EngineOptions options;
    options.engine_name = "client-test";
    options.model = "test-model";
    options.layout = layout_;
    options.codec = codec;
    options.pools.push_back(pool.Registration());
    return options;
  }

  std::vector<uint8_t> Page(const SharedMemoryPool& pool, uint32_t i) const {
    return std::vector<uint8_t>(pool.slot(i), pool.slot(i) + pool.slot_bytes());
  }

  // Pages [first, first + n) with hashes Hash(chain, 0..n-1).
  static std::vector<PageRef> Refs(uint64_t chain, uint32_t first, uint32_t n) {
    std::vector<PageRef> refs;
    for (uint32_t i = 0; i < n; ++i) refs.push_back({Hash(chain, i), first + i});
    return refs;
  }
  static std::vector<std::string> Hashes(uint64_t chain, uint32_t n) {
    std::vector<std::string> hashes;
    for (uint32_t i = 0; i < n; ++i) hashes.push_back(Hash(chain, i));
    return hashes;
  }
  static OffloadOptions Stored() {
    OffloadOptions options;
    options.ack = WriteAck::kStored;
    return options;
  }

  PageLayout layout_ = SmallLayout();
};

TEST_F(ClientTest, ConnectDescribesTheServer) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  std::unique_ptr<Client> client = Connect();
  ASSERT_NE(client, nullptr);
  const ServerInfo& info = client->server();
  EXPECT_EQ(info.api_version, 1u);
  EXPECT_FALSE(info.server_version.empty());
  EXPECT_NE(info.incarnation_id, 0u);
  EXPECT_FALSE(info.node_name.empty());
  EXPECT_EQ(info.codecs, (std::vector<std::string>{"raw", "nvfp4", "nvfp4x2"}));
  EXPECT_EQ(info.tiers, (std::vector<Tier>{Tier::kHost, Tier::kDisk}));
  EXPECT_TRUE(info.shared_memory_pools);
  EXPECT_FALSE(info.authentication);
  EXPECT_FALSE(info.draining);
  EXPECT_EQ(info.max_items_per_request, 4096u);

  absl::StatusOr<ServerInfo> again = client->Hello();
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->incarnation_id, info.incarnation_id);
  EXPECT_EQ(LibraryVersion(), "0.1.0");
  EXPECT_EQ(LibraryVersion(), KVTIER_VERSION_STRING);
  // The daemon of the same build reports the same version.
  EXPECT_EQ(info.server_version, KVTIER_VERSION_STRING);

  // Without socket_path the client follows $KVTIER_SOCKET.
  ASSERT_EQ(setenv("KVTIER_SOCKET", Socket().c_str(), 1), 0);
  ClientOptions from_env;
  from_env.connect_timeout = absl::Seconds(10);
  absl::StatusOr<std::unique_ptr<Client>> env_client = Client::Connect(from_env);
  unsetenv("KVTIER_SOCKET");
  ASSERT_TRUE(env_client.ok()) << env_client.status();
  EXPECT_EQ((*env_client)->server().incarnation_id, info.incarnation_id);
}

TEST_F(ClientTest, ConnectWithoutADaemonIsUnavailableAndNamesTheSocket) {
  ClientOptions options = Options();
  options.connect_timeout = absl::Milliseconds(300);
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), absl::StatusCode::kUnavailable) << client.status();
  EXPECT_NE(client.status().message().find(Socket()), std::string::npos) << client.status();
}

// With the default connect_timeout (10 s): nothing at the socket path, or a socket file nobody
// listens on (a daemon that died), fails at once with the path and the system's reason.
TEST_F(ClientTest, ConnectFailsAtOnceWithTheReasonWhenNothingListens) {
  ClientOptions options = Options();
  ASSERT_EQ(options.connect_timeout, absl::Seconds(10));
  absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), absl::StatusCode::kUnavailable) << client.status();
  EXPECT_NE(client.status().message().find(Socket()), std::string::npos) << client.status();
  EXPECT_NE(client.status().message().find("No such file or directory"), std::string::npos)
      << client.status();

  // A socket file left behind: bound, never listened on, closed.
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, Socket().c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)), 0)
      << std::strerror(errno);
  close(fd);
  start = absl::Now();
  client = Client::Connect(options);
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), absl::StatusCode::kUnavailable) << client.status();
  EXPECT_NE(client.status().message().find(Socket()), std::string::npos) << client.status();
  EXPECT_NE(client.status().message().find("Connection refused"), std::string::npos)
      << client.status();
  unlink(Socket().c_str());
}

TEST_F(ClientTest, RegisterEngineChecksItsOptionsAndPassesTheDaemonsErrorsOn) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  std::unique_ptr<Client> client = Connect();
  ASSERT_NE(client, nullptr);
  std::unique_ptr<SharedMemoryPool> pool = Pool();

  auto expect_error = [&](const EngineOptions& options, absl::StatusCode code,
                          const std::string& words) {
    absl::StatusOr<kvtier::Engine> engine = client->RegisterEngine(options);
    ASSERT_FALSE(engine.ok());
    EXPECT_EQ(engine.status().code(), code) << engine.status();
    EXPECT_NE(engine.status().message().find(words), std::string::npos) << engine.status();
  };
  EngineOptions bad = EngineFor(*pool);
  bad.model.clear();
  expect_error(bad, absl::StatusCode::kInvalidArgument, "EngineOptions.model");
  bad = EngineFor(*pool);
  bad.layout.reset();
  expect_error(bad, absl::StatusCode::kInvalidArgument, "EngineOptions.layout");
  bad = EngineFor(*pool);
  bad.pools.clear();
  expect_error(bad, absl::StatusCode::kInvalidArgument, "EngineOptions.pools");
  bad = EngineFor(*pool);
  bad.pools[0].cuda_ipc.emplace();
  expect_error(bad, absl::StatusCode::kInvalidArgument, "EngineOptions.pools[0]");
  bad = EngineFor(*pool);
  bad.pools[0].shared_memory.reset();
  expect_error(bad, absl::StatusCode::kInvalidArgument, "EngineOptions.pools[0]");
  bad = EngineFor(*pool);
  bad.codec = "zstd";
  expect_error(bad, absl::StatusCode::kInvalidArgument, "EngineOptions.codec");

  // The daemon's own checks: a pool outside pools.allowed_dirs, a pool too small for its slots.
  absl::StatusOr<kvtier::testing::TempDir> elsewhere = kvtier::testing::TempDir::Create();
  ASSERT_TRUE(elsewhere.ok());
  absl::StatusOr<std::unique_ptr<SharedMemoryPool>> outside = SharedMemoryPool::Create(
      elsewhere->File("pool.kv"), "kv", kSlots, layout_.pools()[0].slot_bytes);
  ASSERT_TRUE(outside.ok()) << outside.status();
  expect_error(EngineFor(**outside), absl::StatusCode::kInvalidArgument,
               "RegisterEngine: pool 'kv': '" + (*outside)->path() +
                   "' is outside the directories the daemon maps pools from");
  bad = EngineFor(*pool);
  bad.pools[0].slots = kSlots * 2;
  expect_error(bad, absl::StatusCode::kFailedPrecondition, "RegisterEngine: ");

  // Nothing was registered by the failures; a good registration works.
  absl::StatusOr<kvtier::Engine> engine = client->RegisterEngine(EngineFor(*pool));
  ASSERT_TRUE(engine.ok()) << engine.status();
  EXPECT_EQ(engine->hash_root.size(), 32u);
  EXPECT_EQ(engine->codec, "raw");
  EXPECT_EQ(engine->hot_page_bytes, layout_.hot_page_bytes());
  EXPECT_GE(engine->cold_block_bytes, engine->hot_page_bytes);
  EXPECT_EQ(engine->lease_ttl, absl::Seconds(30));
  EXPECT_EQ(engine->incarnation_id, client->server().incarnation_id);
  absl::StatusOr<Stats> stats = client->GetStats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->registered_engines, 1u);

  absl::Status st = client->KeepAlive("no-such-engine");
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound) << st;
  EXPECT_EQ(st.message().rfind("KeepAlive: ", 0), 0u) << st;
}

TEST_F(ClientTest, RawOffloadLookupOnboardGivesIdenticalPages) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  std::unique_ptr<Client> client = Connect();
  ASSERT_NE(client, nullptr);
  std::unique_ptr<SharedMemoryPool> pool = Pool();
  absl::StatusOr<kvtier::Engine> engine = client->RegisterEngine(EngineFor(*pool));
  ASSERT_TRUE(engine.ok()) << engine.status();
  for (uint32_t i = 0; i < 4; ++i) FillPage(layout_, pool->slot(i), 100 + i);

  absl::StatusOr<OffloadResult> off = client->Offload(engine->engine_id, Refs(1, 0, 4), Stored());
  ASSERT_TRUE(off.ok()) << off.status();
  ASSERT_EQ(off->results.size(), 4u);
  for (const ItemResult& r : off->results) {
    EXPECT_EQ(r.code, ItemCode::kOk) << r.message;
    EXPECT_EQ(r.tier, Tier::kHost);
  }
  EXPECT_EQ(off->stored_pages, 4u);
  EXPECT_EQ(off->hot_bytes_read, 4 * layout_.hot_page_bytes());
  EXPECT_EQ(off->cold_bytes_written, 4 * engine->cold_block_bytes);

  // The chain is cached up to its fourth page.
  absl::StatusOr<LookupResult> hit = client->Lookup(engine->engine_id, Hashes(1, 6));
  ASSERT_TRUE(hit.ok()) << hit.status();
  EXPECT_EQ(hit->hit_pages, 4u);
  EXPECT_EQ(hit->tiers, std::vector<Tier>(4, Tier::kHost));
  EXPECT_FALSE(hit->pin_expires_at.has_value());

  absl::StatusOr<OnboardResult> on = client->Onboard(engine->engine_id, Refs(1, 10, 4));
  ASSERT_TRUE(on.ok()) << on.status();
  EXPECT_EQ(on->onboarded_pages, 4u);
  EXPECT_EQ(on->hot_bytes_written, 4 * layout_.hot_page_bytes());
  for (uint32_t i = 0; i < 4; ++i) {
    EXPECT_EQ(on->results[i].code, ItemCode::kOk) << on->results[i].message;
    EXPECT_TRUE(Page(*pool, 10 + i) == Page(*pool, i)) << "page " << i;
  }

  // Offloading the same hashes again keeps the stored blocks.
  off = client->Offload(engine->engine_id, Refs(1, 0, 2), Stored());
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_EQ(off->results[0].code, ItemCode::kAlreadyStored);
  EXPECT_EQ(off->stored_pages, 0u);
}

TEST_F(ClientTest, BlockHasherChainsAreKeys) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  std::unique_ptr<Client> client = Connect();
  ASSERT_NE(client, nullptr);
  std::unique_ptr<SharedMemoryPool> pool = Pool();
  absl::StatusOr<kvtier::Engine> engine = client->RegisterEngine(EngineFor(*pool));
  ASSERT_TRUE(engine.ok()) << engine.status();
  absl::StatusOr<BlockHasher> hasher =
      BlockHasher::Create(engine->hash_root, layout_.tokens_per_page());
  ASSERT_TRUE(hasher.ok()) << hasher.status();

  std::vector<uint32_t> prompt(4 * 16 + 7);  // four full pages and a partial one
  std::iota(prompt.begin(), prompt.end(), 1000u);
  absl::StatusOr<std::vector<std::string>> hashes = hasher->Hash(prompt);
  ASSERT_TRUE(hashes.ok()) << hashes.status();
  ASSERT_EQ(hashes->size(), 4u);
  std::vector<PageRef> refs;
  for (uint32_t i = 0; i < 4; ++i) {
    FillPage(layout_, pool->slot(i), 7 * i);
    refs.push_back({(*hashes)[i], i});
  }
  absl::StatusOr<OffloadResult> off = client->Offload(engine->engine_id, refs, Stored());
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_EQ(off->stored_pages, 4u);

  // A longer prompt with the same beginning finds the four pages; one that differs in its third
  // page finds two.
  std::vector<uint32_t> longer = prompt;
  longer.resize(6 * 16, 5);
  absl::StatusOr<std::vector<std::string>> longer_hashes = hasher->Hash(longer);
  ASSERT_TRUE(longer_hashes.ok());
  absl::StatusOr<LookupResult> hit = client->Lookup(engine->engine_id, *longer_hashes);
  ASSERT_TRUE(hit.ok()) << hit.status();
  EXPECT_EQ(hit->hit_pages, 4u);
  std::vector<uint32_t> forked = prompt;
  forked[2 * 16 + 3] = 1;
  hit = client->Lookup(engine->engine_id, hasher->Hash(forked).value());
  ASSERT_TRUE(hit.ok()) << hit.status();
  EXPECT_EQ(hit->hit_pages, 2u);

  std::vector<PageRef> dest;
  for (uint32_t i = 0; i < 4; ++i) dest.push_back({(*longer_hashes)[i], 20 + i});
  absl::StatusOr<OnboardResult> on = client->Onboard(engine->engine_id, dest);
  ASSERT_TRUE(on.ok()) << on.status();
  EXPECT_EQ(on->onboarded_pages, 4u);
  for (uint32_t i = 0; i < 4; ++i) EXPECT_TRUE(Page(*pool, 20 + i) == Page(*pool, i));
}

TEST_F(ClientTest, Nvfp4OnboardEqualsTheCpuCodecRoundTrip) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  std::unique_ptr<Client> client = Connect();
  ASSERT_NE(client, nullptr);
  std::unique_ptr<SharedMemoryPool> pool = Pool();
  absl::StatusOr<kvtier::Engine> engine = client->RegisterEngine(EngineFor(*pool, "nvfp4"));
  ASSERT_TRUE(engine.ok()) << engine.status();
  EXPECT_EQ(engine->codec, "nvfp4");
  EXPECT_LT(engine->cold_block_bytes, engine->hot_page_bytes);
  for (uint32_t i = 0; i < 3; ++i) FillPage(layout_, pool->slot(i), 555 + i);

  absl::StatusOr<OffloadResult> off = client->Offload(engine->engine_id, Refs(2, 0, 3), Stored());
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_EQ(off->stored_pages, 3u);
  absl::StatusOr<OnboardResult> on = client->Onboard(engine->engine_id, Refs(2, 8, 3));
  ASSERT_TRUE(on.ok()) << on.status();
  EXPECT_EQ(on->onboarded_pages, 3u);
  for (uint32_t i = 0; i < 3; ++i) {
    const std::vector<uint8_t> expected = CpuRoundTrip(layout_, pool->slot(i), "nvfp4");
    EXPECT_TRUE(Page(*pool, 8 + i) == expected) << "page " << i;
    EXPECT_FALSE(Page(*pool, 8 + i) == Page(*pool, i)) << "nvfp4 is lossy";
  }
}

TEST_F(ClientTest, RequestsAboveTheItemLimitAreSplitAndJoined) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon({"--set=server.max_items_per_request=3"}));
  std::unique_ptr<Client> client = Connect();
  ASSERT_NE(client, nullptr);
  ASSERT_EQ(client->server().max_items_per_request, 3u);
  std::unique_ptr<SharedMemoryPool> pool = Pool();
  absl::StatusOr<kvtier::Engine> engine = client->RegisterEngine(EngineFor(*pool));
  ASSERT_TRUE(engine.ok()) << engine.status();
  const std::string& id = engine->engine_id;
  for (uint32_t i = 0; i < 10; ++i) FillPage(layout_, pool->slot(i), 40 + i);

  // Ten pages: four requests of at most three.
  absl::StatusOr<OffloadResult> off = client->Offload(id, Refs(3, 0, 10), Stored());
  ASSERT_TRUE(off.ok()) << off.status();
  ASSERT_EQ(off->results.size(), 10u);
  EXPECT_EQ(off->stored_pages, 10u);
  EXPECT_EQ(off->hot_bytes_read, 10 * layout_.hot_page_bytes());
  absl::StatusOr<LookupResult> hit = client->Lookup(id, Hashes(3, 10));
  ASSERT_TRUE(hit.ok()) << hit.status();
  EXPECT_EQ(hit->hit_pages, 10u);
  EXPECT_EQ(hit->tiers.size(), 10u);

  // A hole at page 4: the lookup stops there although later pages are cached.
  std::vector<std::string> holed = Hashes(3, 10);
  holed[4] = Hash(99, 4);
  hit = client->Lookup(id, holed);
  ASSERT_TRUE(hit.ok()) << hit.status();
  EXPECT_EQ(hit->hit_pages, 4u);
  EXPECT_EQ(hit->tiers.size(), 4u);

  absl::StatusOr<OnboardResult> on = client->Onboard(id, Refs(3, 16, 10));
  ASSERT_TRUE(on.ok()) << on.status();
  EXPECT_EQ(on->onboarded_pages, 10u);
  ASSERT_EQ(on->results.size(), 10u);
  for (uint32_t i = 0; i < 10; ++i) EXPECT_TRUE(Page(*pool, 16 + i) == Page(*pool, i));

  // Onboard stops at the hole: the rest of its request is skipped by the daemon, the later
  // requests by the client.
  std::vector<PageRef> refs = Refs(3, 16, 10);
  refs[4].block_hash = Hash(99, 4);
  on = client->Onboard(id, refs);
  ASSERT_TRUE(on.ok()) << on.status();
  EXPECT_EQ(on->onboarded_pages, 4u);
  ASSERT_EQ(on->results.size(), 10u);
  EXPECT_EQ(on->results[3].code, ItemCode::kOk);
  EXPECT_EQ(on->results[4].code, ItemCode::kNotFound);
  for (uint32_t i = 5; i < 10; ++i) EXPECT_EQ(on->results[i].code, ItemCode::kSkipped) << i;
  // continue_after_miss attempts every page.
  on = client->Onboard(id, refs, /*continue_after_miss=*/true);
  ASSERT_TRUE(on.ok()) << on.status();
  EXPECT_EQ(on->onboarded_pages, 4u);
  ASSERT_EQ(on->results.size(), 10u);
  EXPECT_EQ(on->results[4].code, ItemCode::kNotFound);
  for (uint32_t i = 5; i < 10; ++i) EXPECT_EQ(on->results[i].code, ItemCode::kOk) << i;

  absl::StatusOr<PinResult> pins = client->Pin(id, Hashes(3, 10));
  ASSERT_TRUE(pins.ok()) << pins.status();
  ASSERT_EQ(pins->results.size(), 10u);
  for (const ItemResult& r : pins->results) EXPECT_EQ(r.code, ItemCode::kOk) << r.message;
  EXPECT_TRUE(pins->expires_at.has_value());
  pins = client->Unpin(id, Hashes(3, 10));
  ASSERT_TRUE(pins.ok()) << pins.status();
  ASSERT_EQ(pins->results.size(), 10u);
  for (const ItemResult& r : pins->results) EXPECT_EQ(r.code, ItemCode::kOk) << r.message;

  // Park seven pages (three calls, the later ones appending), resume them in three calls.
  ParkOptions park;
  park.user_data = "sampler";
  park.num_tokens = 7 * 16 - 3;
  absl::StatusOr<ParkResult> parked = client->Park(id, "long-request", {0, 1, 2, 3, 4, 5, 6}, park);
  ASSERT_TRUE(parked.ok()) << parked.status();
  EXPECT_EQ(parked->parked_pages, 7u);
  absl::StatusOr<ResumeResult> resumed =
      client->Resume(id, "long-request", {20, 21, 22, 23, 24, 25, 26});
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->resumed_pages, 7u);
  EXPECT_EQ(resumed->parked_pages, 7u);
  EXPECT_EQ(resumed->user_data, "sampler");
  EXPECT_TRUE(resumed->released);
  for (uint32_t i = 0; i < 7; ++i) EXPECT_TRUE(Page(*pool, 20 + i) == Page(*pool, i)) << i;

  absl::StatusOr<ReleaseResult> released = client->Release(id, {"a", "b", "c", "d", "e"});
  ASSERT_TRUE(released.ok()) << released.status();
  ASSERT_EQ(released->results.size(), 5u);
  for (const ItemResult& r : released->results) EXPECT_EQ(r.code, ItemCode::kNotFound);
}

TEST_F(ClientTest, CallbacksAndFuturesDoNotBlockAndRunConcurrently) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  std::unique_ptr<Client> client = Connect();
  ASSERT_NE(client, nullptr);
  std::unique_ptr<SharedMemoryPool> pool = Pool();
  absl::StatusOr<kvtier::Engine> engine = client->RegisterEngine(EngineFor(*pool));
  ASSERT_TRUE(engine.ok()) << engine.status();
  const std::string id = engine->engine_id;
  for (uint32_t i = 0; i < 8; ++i) FillPage(layout_, pool->slot(i), 900 + i);

  // Four offloads in flight at once, two pages each, as futures.
  std::vector<std::future<absl::StatusOr<OffloadResult>>> offloads;
  for (uint32_t c = 0; c < 4; ++c) {
    offloads.push_back(client->OffloadFuture(id, Refs(10 + c, 2 * c, 2), Stored()));
  }
  for (auto& f : offloads) {
    absl::StatusOr<OffloadResult> r = f.get();
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->stored_pages, 2u);
  }

  // The callback form returns before its callback runs: the callback waits for a gate that opens
  // only after LookupAsync has returned.
  std::promise<void> gate;
  std::shared_future<void> opened = gate.get_future().share();
  std::promise<std::pair<bool, absl::StatusOr<LookupResult>>> first;
  client->LookupAsync(id, Hashes(10, 2), absl::ZeroDuration(),
                      [&first, opened](absl::StatusOr<LookupResult> r) {
                        const bool gate_open =
                            opened.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
                        first.set_value({gate_open, std::move(r)});
                      });
  gate.set_value();
  auto [gate_open, first_result] = first.get_future().get();
  EXPECT_TRUE(gate_open) << "LookupAsync blocked until its callback ran";
  ASSERT_TRUE(first_result.ok()) << first_result.status();
  EXPECT_EQ(first_result->hit_pages, 2u);

  // Sixteen lookups in flight at once, each of its own chain and length.
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int> hits(16, -1);
  int done = 0;
  for (int k = 0; k < 16; ++k) {
    std::vector<std::string> hashes = Hashes(10 + k % 4, 1 + k % 3);
    client->LookupAsync(id, std::move(hashes), absl::ZeroDuration(),
                        [&, k](absl::StatusOr<LookupResult> r) {
                          std::lock_guard<std::mutex> lock(mu);
                          hits[k] = r.ok() ? static_cast<int>(r->hit_pages) : -2;
                          ++done;
                          cv.notify_all();
                        });
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(20), [&] { return done == 16; }));
  }
  for (int k = 0; k < 16; ++k) EXPECT_EQ(hits[k], std::min(2, 1 + k % 3)) << k;

  // Onboards as futures and as callbacks, in flight together.
  auto on_a = client->OnboardFuture(id, Refs(10, 16, 2));
  auto on_b = client->OnboardFuture(id, Refs(11, 18, 2));
  std::promise<absl::StatusOr<OnboardResult>> on_c;
  client->OnboardAsync(id, Refs(12, 20, 2), false,
                       [&on_c](absl::StatusOr<OnboardResult> r) { on_c.set_value(std::move(r)); });
  for (auto* f : {&on_a, &on_b}) {
    absl::StatusOr<OnboardResult> r = f->get();
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->onboarded_pages, 2u);
  }
  absl::StatusOr<OnboardResult> c = on_c.get_future().get();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->onboarded_pages, 2u);
  for (uint32_t i = 0; i < 6; ++i) EXPECT_TRUE(Page(*pool, 16 + i) == Page(*pool, i)) << i;

  // Park and Resume as futures; an error arrives through the future too.
  ParkOptions park;
  park.user_data = "f";
  absl::StatusOr<ParkResult> parked = client->ParkFuture(id, "r", {6, 7}, park).get();
  ASSERT_TRUE(parked.ok()) << parked.status();
  EXPECT_EQ(parked->parked_pages, 2u);
  absl::StatusOr<ResumeResult> resumed = client->ResumeFuture(id, "r", {24, 25}).get();
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->resumed_pages, 2u);
  EXPECT_TRUE(Page(*pool, 24) == Page(*pool, 6));
  resumed = client->ResumeFuture(id, "r", {24, 25}).get();
  EXPECT_EQ(resumed.status().code(), absl::StatusCode::kNotFound) << resumed.status();
  absl::StatusOr<LookupResult> missing =
      client->LookupFuture("no-such-engine", Hashes(10, 1)).get();
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound) << missing.status();
  EXPECT_EQ(missing.status().message().rfind("Lookup: ", 0), 0u) << missing.status();
}

TEST_F(ClientTest, ParkResumeReleaseKeepUserData) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  std::unique_ptr<Client> client = Connect();
  ASSERT_NE(client, nullptr);
  std::unique_ptr<SharedMemoryPool> pool = Pool();
  absl::StatusOr<kvtier::Engine> engine = client->RegisterEngine(EngineFor(*pool, "nvfp4"));
  ASSERT_TRUE(engine.ok()) << engine.status();
  const std::string id = engine->engine_id;
  for (uint32_t i = 0; i < 3; ++i) FillPage(layout_, pool->slot(i), 31 + i);
  std::vector<std::vector<uint8_t>> originals;
  for (uint32_t i = 0; i < 3; ++i) originals.push_back(Page(*pool, i));

  ParkOptions park;
  park.num_tokens = 40;
  park.user_data = std::string("state\0with\xff bytes", 17);
  park.ack = WriteAck::kStored;
  const absl::Time before = absl::Now();
  absl::StatusOr<ParkResult> parked = client->Park(id, "req-1", {0, 1, 2}, park);
  ASSERT_TRUE(parked.ok()) << parked.status();
  EXPECT_EQ(parked->parked_pages, 3u);
  EXPECT_EQ(parked->tier, Tier::kHost);
  EXPECT_GT(parked->cold_bytes, 0u);
  EXPECT_GT(parked->expires_at, before + absl::Minutes(9));  // the 10-minute default
  // Parking the same id again without append is refused.
  absl::StatusOr<ParkResult> again = client->Park(id, "req-1", {0}, park);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists) << again.status();
  absl::StatusOr<Stats> stats = client->GetStats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->parked_requests, 1u);

  // The engine reuses its pages; Resume brings the parked KV back (park keeps the codec's
  // precision: raw would be byte-identical, nvfp4 equals the CPU round trip).
  for (uint32_t i = 0; i < 3; ++i) std::memset(pool->slot(i), 0, pool->slot_bytes());
  absl::StatusOr<ResumeResult> resumed =
      client->Resume(id, "req-1", {5, 6, 7}, 0, /*keep_parked=*/true);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->resumed_pages, 3u);
  EXPECT_EQ(resumed->parked_pages, 3u);
  EXPECT_EQ(resumed->num_tokens, 40u);
  EXPECT_EQ(resumed->user_data, park.user_data);
  EXPECT_FALSE(resumed->released);
  for (uint32_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(Page(*pool, 5 + i) == CpuRoundTrip(layout_, originals[i].data(), "nvfp4")) << i;
  }
  // Resume a part of it again from its second page.
  resumed = client->Resume(id, "req-1", {9, 10}, 1, /*keep_parked=*/true);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->resumed_pages, 2u);
  EXPECT_TRUE(Page(*pool, 9) == Page(*pool, 6));

  absl::StatusOr<ReleaseResult> released = client->Release(id, {"req-1", "never-parked"});
  ASSERT_TRUE(released.ok()) << released.status();
  ASSERT_EQ(released->results.size(), 2u);
  EXPECT_EQ(released->results[0].code, ItemCode::kOk);
  EXPECT_EQ(released->results[1].code, ItemCode::kNotFound);
  EXPECT_EQ(released->freed_bytes, parked->cold_bytes);
  resumed = client->Resume(id, "req-1", {5, 6, 7});
  EXPECT_EQ(resumed.status().code(), absl::StatusCode::kNotFound) << resumed.status();
  EXPECT_EQ(resumed.status().message().rfind("Resume: ", 0), 0u) << resumed.status();
}

TEST_F(ClientTest, PinsHoldBlocksUntilUnpinned) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  std::unique_ptr<Client> client = Connect();
  ASSERT_NE(client, nullptr);
  std::unique_ptr<SharedMemoryPool> pool = Pool();
  absl::StatusOr<kvtier::Engine> engine = client->RegisterEngine(EngineFor(*pool));
  ASSERT_TRUE(engine.ok()) << engine.status();
  const std::string id = engine->engine_id;
  ASSERT_TRUE(client->Offload(id, Refs(4, 0, 2), Stored()).ok());

  std::vector<std::string> hashes = Hashes(4, 2);
  hashes.push_back(Hash(98, 0));
  const absl::Time before = absl::Now();
  absl::StatusOr<PinResult> pins = client->Pin(id, hashes, absl::Seconds(60));
  ASSERT_TRUE(pins.ok()) << pins.status();
  ASSERT_EQ(pins->results.size(), 3u);
  EXPECT_EQ(pins->results[0].code, ItemCode::kOk);
  EXPECT_EQ(pins->results[0].tier, Tier::kHost);
  EXPECT_EQ(pins->results[1].code, ItemCode::kOk);
  EXPECT_EQ(pins->results[2].code, ItemCode::kNotFound);
  ASSERT_TRUE(pins->expires_at.has_value());
  EXPECT_GT(*pins->expires_at, before + absl::Seconds(50));
  absl::StatusOr<Stats> stats = client->GetStats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  uint64_t pinned = 0;
  for (const TierStats& t : stats->tiers) pinned += t.pinned_blocks;
  EXPECT_EQ(pinned, 2u);

  pins = client->Unpin(id, Hashes(4, 2));
  ASSERT_TRUE(pins.ok()) << pins.status();
  EXPECT_EQ(pins->results[0].code, ItemCode::kOk);
  EXPECT_EQ(pins->results[1].code, ItemCode::kOk);
  pins = client->Unpin(id, Hashes(4, 1));
  ASSERT_TRUE(pins.ok()) << pins.status();
  EXPECT_EQ(pins->results[0].code, ItemCode::kFailedPrecondition);
  stats = client->GetStats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  pinned = 0;
  for (const TierStats& t : stats->tiers) pinned += t.pinned_blocks;
  EXPECT_EQ(pinned, 0u);

  // Lookup can pin its hits.
  absl::StatusOr<LookupResult> hit = client->Lookup(id, Hashes(4, 2), absl::Seconds(30));
  ASSERT_TRUE(hit.ok()) << hit.status();
  EXPECT_EQ(hit->hit_pages, 2u);
  EXPECT_TRUE(hit->pin_expires_at.has_value());
}

TEST_F(ClientTest, StatsCountersMove) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  std::unique_ptr<Client> client = Connect();
  ASSERT_NE(client, nullptr);
  std::unique_ptr<SharedMemoryPool> pool = Pool();
  absl::StatusOr<kvtier::Engine> engine = client->RegisterEngine(EngineFor(*pool));
  ASSERT_TRUE(engine.ok()) << engine.status();
  absl::StatusOr<Stats> before = client->GetStats();
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_EQ(before->incarnation_id, client->server().incarnation_id);
  ASSERT_GE(before->tiers.size(), 2u);
  EXPECT_EQ(before->tiers[0].tier, Tier::kHost);
  EXPECT_EQ(before->tiers[0].capacity_bytes, 64u << 20);
  EXPECT_TRUE(before->namespaces.empty());

  ASSERT_TRUE(client->Offload(engine->engine_id, Refs(5, 0, 3), Stored()).ok());
  ASSERT_TRUE(client->Onboard(engine->engine_id, Refs(5, 8, 2)).ok());
  absl::StatusOr<Stats> after = client->GetStats(/*include_namespaces=*/true);
  ASSERT_TRUE(after.ok()) << after.status();
  const uint64_t page = layout_.hot_page_bytes();
  EXPECT_EQ(after->hot_bytes_offloaded - before->hot_bytes_offloaded, 3 * page);
  EXPECT_EQ(after->cold_bytes_offloaded - before->cold_bytes_offloaded,
            3 * engine->cold_block_bytes);
  EXPECT_EQ(after->hot_bytes_onboarded - before->hot_bytes_onboarded, 2 * page);
  EXPECT_EQ(after->tiers[0].blocks - before->tiers[0].blocks, 3u);
  EXPECT_GE(after->tiers[0].hits - before->tiers[0].hits, 2u);
  EXPECT_GT(after->uptime, absl::ZeroDuration());
  EXPECT_EQ(after->registered_engines, 1u);
  ASSERT_EQ(after->namespaces.size(), 1u);
  const NamespaceStats& ns = after->namespaces[0];
  EXPECT_EQ(ns.namespace_id, engine->namespace_id);
  EXPECT_EQ(ns.tenant, "default");
  EXPECT_EQ(ns.model, "test-model");
  EXPECT_EQ(ns.engines, 1u);
}

TEST_F(ClientTest, WatchEventsSeesOffloadsUntilCancelled) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  std::unique_ptr<Client> client = Connect();
  ASSERT_NE(client, nullptr);
  std::unique_ptr<SharedMemoryPool> pool = Pool();
  absl::StatusOr<kvtier::Engine> engine = client->RegisterEngine(EngineFor(*pool));
  ASSERT_TRUE(engine.ok()) << engine.status();

  std::mutex mu;
  std::condition_variable cv;
  std::vector<Event> events;
  std::optional<absl::Status> end;
  WatchOptions options;
  options.namespace_id = engine->namespace_id;
  absl::StatusOr<std::unique_ptr<EventWatch>> watch = client->WatchEvents(
      options,
      [&](const Event& e) {
        std::lock_guard<std::mutex> lock(mu);
        events.push_back(e);
        cv.notify_all();
      },
      [&](absl::Status st) {
        std::lock_guard<std::mutex> lock(mu);
        end = st;
        cv.notify_all();
      });
  ASSERT_TRUE(watch.ok()) << watch.status();

  // The stream is live once an offload made after it started is reported; offload until then.
  // A BlockStored event may carry the blocks of one offload together or in several events.
  auto stored = [&](uint64_t chain) {
    std::vector<std::string> hashes;
    for (const Event& e : events) {
      if (e.kind != Event::Kind::kBlockStored) continue;
      EXPECT_EQ(e.tier, Tier::kHost);
      EXPECT_EQ(e.namespace_id, engine->namespace_id);
      EXPECT_GT(e.sequence, 0u);
      for (const std::string& h : e.block_hashes) {
        if (h.substr(0, 8) == Hash(chain, 0).substr(0, 8)) hashes.push_back(h);
      }
    }
    std::sort(hashes.begin(), hashes.end());
    return hashes;
  };
  bool live = false;
  for (uint64_t chain = 100; chain < 120 && !live; ++chain) {
    ASSERT_TRUE(client->Offload(engine->engine_id, Refs(chain, 0, 2), Stored()).ok());
    std::unique_lock<std::mutex> lock(mu);
    live = cv.wait_for(lock, std::chrono::seconds(1), [&] { return !stored(chain).empty(); });
  }
  ASSERT_TRUE(live) << "no BlockStored event";
  // Now every block of an offload is reported.
  ASSERT_TRUE(client->Offload(engine->engine_id, Refs(150, 0, 2), Stored()).ok());
  bool seen = false;
  {
    std::unique_lock<std::mutex> lock(mu);
    seen =
        cv.wait_for(lock, std::chrono::seconds(10), [&] { return stored(150) == Hashes(150, 2); });
  }
  ASSERT_TRUE(seen) << "the offload's two blocks";

  const absl::Time start = absl::Now();
  (*watch)->Cancel();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  size_t count = 0;
  {
    std::lock_guard<std::mutex> lock(mu);
    ASSERT_TRUE(end.has_value()) << "on_done did not run before Cancel returned";
    EXPECT_EQ(end->code(), absl::StatusCode::kCancelled) << *end;
    count = events.size();
  }
  ASSERT_TRUE(client->Offload(engine->engine_id, Refs(200, 0, 1), Stored()).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(events.size(), count) << "events after Cancel";
}

TEST_F(ClientTest, KeepAliveRenewsShortLeases) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  std::unique_ptr<SharedMemoryPool> pool = Pool("pool-a.kv");
  std::unique_ptr<SharedMemoryPool> other = Pool("pool-b.kv");
  EngineOptions options = EngineFor(*pool);
  options.lease_ttl = absl::Milliseconds(500);

  std::unique_ptr<Client> renewing = Connect();
  ASSERT_NE(renewing, nullptr);
  absl::StatusOr<kvtier::Engine> kept = renewing->RegisterEngine(options);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(kept->lease_ttl, absl::Milliseconds(500));

  ClientOptions no_renewal = Options();
  no_renewal.keep_alive = false;
  std::unique_ptr<Client> idle = Connect(no_renewal);
  ASSERT_NE(idle, nullptr);
  EngineOptions other_options = EngineFor(*other);
  other_options.lease_ttl = absl::Milliseconds(500);
  absl::StatusOr<kvtier::Engine> lapsed = idle->RegisterEngine(other_options);
  ASSERT_TRUE(lapsed.ok()) << lapsed.status();

  std::this_thread::sleep_for(std::chrono::seconds(2));
  absl::StatusOr<OffloadResult> off = renewing->Offload(kept->engine_id, Refs(6, 0, 1), Stored());
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_EQ(off->stored_pages, 1u);
  off = idle->Offload(lapsed->engine_id, Refs(7, 0, 1), Stored());
  EXPECT_EQ(off.status().code(), absl::StatusCode::kNotFound) << off.status();
  EXPECT_EQ(off.status().message().rfind("Offload: ", 0), 0u) << off.status();

  // Unregister ends the renewals too, and the engine is gone at once.
  ASSERT_TRUE(renewing->Unregister(kept->engine_id).ok());
  off = renewing->Offload(kept->engine_id, Refs(6, 0, 1), Stored());
  EXPECT_EQ(off.status().code(), absl::StatusCode::kNotFound) << off.status();
  EXPECT_EQ(renewing->Unregister(kept->engine_id).code(), absl::StatusCode::kNotFound);

  // A client with a registered engine and calls in flight is destroyed promptly.
  absl::StatusOr<kvtier::Engine> again = renewing->RegisterEngine(options);
  ASSERT_TRUE(again.ok()) << again.status();
  std::atomic<int> callbacks{0};
  for (int i = 0; i < 8; ++i) {
    renewing->LookupAsync(again->engine_id, Hashes(6, 1), absl::ZeroDuration(),
                          [&callbacks](absl::StatusOr<LookupResult>) { ++callbacks; });
  }
  const absl::Time start = absl::Now();
  renewing.reset();
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_EQ(callbacks.load(), 8) << "every callback runs before the destructor returns";
}

TEST_F(ClientTest, AClientMayBeDestroyedInsideItsOwnCallback) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  std::unique_ptr<Client> client = Connect();
  ASSERT_NE(client, nullptr);
  std::unique_ptr<SharedMemoryPool> pool = Pool();
  absl::StatusOr<kvtier::Engine> engine = client->RegisterEngine(EngineFor(*pool));
  ASSERT_TRUE(engine.ok()) << engine.status();
  std::promise<absl::StatusOr<LookupResult>> result;
  Client* raw = client.get();
  raw->LookupAsync(engine->engine_id, Hashes(1, 1), absl::ZeroDuration(),
                   [&client, &result](absl::StatusOr<LookupResult> r) {
                     client.reset();
                     result.set_value(std::move(r));
                   });
  std::future<absl::StatusOr<LookupResult>> f = result.get_future();
  ASSERT_EQ(f.wait_for(std::chrono::seconds(10)), std::future_status::ready) << "deadlock";
  absl::StatusOr<LookupResult> r = f.get();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->hit_pages, 0u);
  EXPECT_EQ(client, nullptr);
  // The daemon still serves new clients.
  std::unique_ptr<Client> next = Connect();
  ASSERT_NE(next, nullptr);
  EXPECT_TRUE(next->GetStats().ok());
}

TEST_F(ClientTest, OutOfRangePageIsAnItemErrorWithTheDaemonsMessage) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  std::unique_ptr<Client> client = Connect();
  ASSERT_NE(client, nullptr);
  std::unique_ptr<SharedMemoryPool> pool = Pool();
  absl::StatusOr<kvtier::Engine> engine = client->RegisterEngine(EngineFor(*pool));
  ASSERT_TRUE(engine.ok()) << engine.status();

  std::vector<PageRef> refs = Refs(8, 0, 2);
  refs[1].page_index = 1000;
  absl::StatusOr<OffloadResult> off = client->Offload(engine->engine_id, refs, Stored());
  ASSERT_TRUE(off.ok()) << off.status();
  ASSERT_EQ(off->results.size(), 2u);
  EXPECT_EQ(off->results[0].code, ItemCode::kOk);
  EXPECT_EQ(off->results[1].code, ItemCode::kInvalidArgument);
  EXPECT_NE(off->results[1].message.find("page index 1000 out of range"), std::string::npos)
      << off->results[1].message;
  EXPECT_EQ(off->stored_pages, 1u);

  absl::StatusOr<OnboardResult> on = client->Onboard(engine->engine_id, {{Hash(8, 0), 4096}});
  ASSERT_TRUE(on.ok()) << on.status();
  EXPECT_EQ(on->results[0].code, ItemCode::kInvalidArgument);
  EXPECT_NE(on->results[0].message.find("4096"), std::string::npos) << on->results[0].message;
  EXPECT_EQ(on->onboarded_pages, 0u);
}

TEST_F(ClientTest, TokensAuthenticateEveryCall) {
  const std::string tokens = dir_->File("tokens");
  std::ofstream(tokens) << "alice " << service::TokenAuth::HashToken("token-a") << "\n";
  ASSERT_NO_FATAL_FAILURE(StartDaemon({"--set=auth.tokens_file=" + tokens}));
  ASSERT_EQ(mkdir(dir_->File("alice").c_str(), 0700), 0);
  std::unique_ptr<SharedMemoryPool> pool = Pool("alice/pool.kv");

  std::unique_ptr<Client> anonymous = Connect();
  ASSERT_NE(anonymous, nullptr);
  EXPECT_TRUE(anonymous->server().authentication);
  absl::StatusOr<kvtier::Engine> engine = anonymous->RegisterEngine(EngineFor(*pool));
  EXPECT_EQ(engine.status().code(), absl::StatusCode::kUnauthenticated) << engine.status();

  ClientOptions options = Options();
  options.token = "token-a";
  std::unique_ptr<Client> alice = Connect(options);
  ASSERT_NE(alice, nullptr);
  engine = alice->RegisterEngine(EngineFor(*pool));
  ASSERT_TRUE(engine.ok()) << engine.status();
  absl::StatusOr<OffloadResult> off = alice->Offload(engine->engine_id, Refs(9, 0, 1), Stored());
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_EQ(off->stored_pages, 1u);
  absl::StatusOr<Stats> stats = alice->GetStats(/*include_namespaces=*/true);
  ASSERT_TRUE(stats.ok()) << stats.status();
  ASSERT_EQ(stats->namespaces.size(), 1u);
  EXPECT_EQ(stats->namespaces[0].tenant, "alice");
  // Another client without the token may not use alice's engine.
  absl::StatusOr<LookupResult> hit = anonymous->Lookup(engine->engine_id, Hashes(9, 1));
  EXPECT_EQ(hit.status().code(), absl::StatusCode::kUnauthenticated) << hit.status();
}

}  // namespace
}  // namespace kvtier::integration
