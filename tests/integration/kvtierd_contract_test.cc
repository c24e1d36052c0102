// kvtierd against the letter of its contract (proto/kvtier/v1/*.proto), from outside, over raw gRPC
// so that no client-side check hides what the daemon does: identifiers and names over their
// documented limits are INVALID_ARGUMENT before any lookup and never come back whole in a
// message; a hash repeated in one Offload fails that item; buffers that overlap in a pool's slot
// are refused (interleaved ones that do not are accepted and round-trip, and heads left at 0 mean
// one head, as layout.proto says); a NamespaceSelector with all = false is INVALID_ARGUMENT
// wherever a selector is taken; and an Onboard of a block whose disk copy was corrupted reports
// ITEM_CODE_DATA_LOSS naming it and counts it.
#include <functional>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "tests/integration/daemon_fixture.h"

namespace kvtier::integration {
namespace {

using KvtierdContractTest = DaemonFixture;

// A value far over every documented limit (1 MiB), as a third-party client sent it.
const std::string& Huge() {
  static const std::string* huge = new std::string(1 << 20, 'e');
  return *huge;
}

// Expects INVALID_ARGUMENT with a message that names `words`, and that does not repeat the
// 1 MiB value (a message that quotes a value repeats at most a short prefix of it).
void ExpectShortInvalid(const grpc::Status& st, const std::string& words, const std::string& what) {
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
      << what << ": " << st.error_message().substr(0, 300);
  EXPECT_LT(st.error_message().size(), 512u)
      << what << ": a " << st.error_message().size() << "-byte message";
  EXPECT_NE(st.error_message().find(words), std::string::npos)
      << what << ": " << st.error_message().substr(0, 300);
}

TEST_F(KvtierdContractTest, OverLongIdsAndNamesAreInvalidArgumentAndNeverEchoedInFull) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  TestEngine engine(dir_->File("pool-a"), 8);
  const v1::RegisterEngineResponse reg = Register(*stub_, engine.Request());
  ASSERT_FALSE(reg.engine_id().empty());
  ASSERT_LE(reg.engine_id().size(), 64u) << "RegisterEngineResponse.engine_id: at most 64 bytes";

  // Every RPC that names an engine: a 1 MiB id is not a lookup miss (NOT_FOUND with the whole id
  // in the message) but a malformed request. The empty id is malformed too (engine_id is
  // required).
  const std::vector<std::pair<std::string, std::function<grpc::Status(const std::string&)>>>
      by_engine = {
          {"KeepAlive",
           [&](const std::string& id) {
             v1::KeepAliveRequest req;
             req.set_engine_id(id);
             v1::KeepAliveResponse resp;
             grpc::ClientContext ctx;
             return stub_->KeepAlive(Context(&ctx), req, &resp);
           }},
          {"Unregister",
           [&](const std::string& id) {
             v1::UnregisterRequest req;
             req.set_engine_id(id);
             v1::UnregisterResponse resp;
             grpc::ClientContext ctx;
             return stub_->Unregister(Context(&ctx), req, &resp);
           }},
          {"Lookup",
           [&](const std::string& id) {
             v1::LookupRequest req;
             req.set_engine_id(id);
             req.add_block_hashes(Hash(1, 0));
             v1::LookupResponse resp;
             grpc::ClientContext ctx;
             return stub_->Lookup(Context(&ctx), req, &resp);
           }},
          {"Offload",
           [&](const std::string& id) {
             v1::OffloadRequest req;
             req.set_engine_id(id);
             req.add_items()->set_block_hash(Hash(1, 0));
             v1::OffloadResponse resp;
             grpc::ClientContext ctx;
             return stub_->Offload(Context(&ctx), req, &resp);
           }},
          {"Onboard",
           [&](const std::string& id) {
             v1::OnboardRequest req;
             req.set_engine_id(id);
             req.add_items()->set_block_hash(Hash(1, 0));
             v1::OnboardResponse resp;
             grpc::ClientContext ctx;
             return stub_->Onboard(Context(&ctx), req, &resp);
           }},
          {"Park",
           [&](const std::string& id) {
             v1::ParkRequest req;
             req.set_engine_id(id);
             req.set_request_id("r1");
             req.add_page_indices(0);
             v1::ParkResponse resp;
             grpc::ClientContext ctx;
             return stub_->Park(Context(&ctx), req, &resp);
           }},
          {"Resume",
           [&](const std::string& id) {
             v1::ResumeRequest req;
             req.set_engine_id(id);
             req.set_request_id("r1");
             req.add_page_indices(0);
             v1::ResumeResponse resp;
             grpc::ClientContext ctx;
             return stub_->Resume(Context(&ctx), req, &resp);
           }},
          {"Release",
           [&](const std::string& id) {
             v1::ReleaseRequest req;
             req.set_engine_id(id);
             req.add_request_ids("r1");
             v1::ReleaseResponse resp;
             grpc::ClientContext ctx;
             return stub_->Release(Context(&ctx), req, &resp);
           }},
          {"Pin",
           [&](const std::string& id) {
             v1::PinRequest req;
             req.set_engine_id(id);
             req.add_block_hashes(Hash(1, 0));
             v1::PinResponse resp;
             grpc::ClientContext ctx;
             return stub_->Pin(Context(&ctx), req, &resp);
           }},
          {"Unpin",
           [&](const std::string& id) {
             v1::UnpinRequest req;
             req.set_engine_id(id);
             req.add_block_hashes(Hash(1, 0));
             v1::UnpinResponse resp;
             grpc::ClientContext ctx;
             return stub_->Unpin(Context(&ctx), req, &resp);
           }},
      };
  for (const auto& [method, call] : by_engine) {
    ExpectShortInvalid(call(Huge()), "1048576 bytes", method + " with a 1 MiB engine_id");
    ExpectShortInvalid(call(""), "engine_id", method + " with an empty engine_id");
    // An id of a length the daemon issues that it does not know stays NOT_FOUND.
    const grpc::Status unknown = call(std::string(64, 'e'));
    EXPECT_EQ(unknown.error_code(), grpc::StatusCode::NOT_FOUND)
        << method << ": " << unknown.error_message();
  }

  // Request ids: 1 to 128 bytes (ParkRequest.request_id), wherever one is taken.
  {
    v1::ResumeRequest req;
    req.set_engine_id(reg.engine_id());
    req.set_request_id(Huge());
    req.add_page_indices(0);
    v1::ResumeResponse resp;
    grpc::ClientContext ctx;
    ExpectShortInvalid(stub_->Resume(Context(&ctx), req, &resp), "request_id",
                       "Resume with a 1 MiB request_id");
  }
  {
    v1::ReleaseRequest req;
    req.set_engine_id(reg.engine_id());
    req.add_request_ids("r1");
    req.add_request_ids(Huge());
    v1::ReleaseResponse resp;
    grpc::ClientContext ctx;
    ExpectShortInvalid(stub_->Release(Context(&ctx), req, &resp), "request_ids[1]",
                       "Release with a 1 MiB request id");
  }
  {
    v1::ParkRequest req;
    req.set_engine_id(reg.engine_id());
    req.set_request_id(Huge());
    req.add_page_indices(0);
    v1::ParkResponse resp;
    grpc::ClientContext ctx;
    ExpectShortInvalid(stub_->Park(Context(&ctx), req, &resp), "request_id",
                       "Park with a 1 MiB request_id");
  }

  // Hello's client_name: at most 256 bytes.
  {
    v1::HelloRequest req;
    req.set_client_name(Huge());
    v1::HelloResponse resp;
    grpc::ClientContext ctx;
    ExpectShortInvalid(stub_->Hello(Context(&ctx), req, &resp), "client_name",
                       "Hello with a 1 MiB client_name");
  }

  // Names in a registration: pool and buffer names of the layout (1 to 64 bytes), the pool a
  // registration names, and a buffer whose role is unset (reported before the layout's other
  // rules); the tenant, model and partition of a namespace match.
  auto expect_register = [&](const v1::RegisterEngineRequest& req, const std::string& words,
                             const std::string& what) {
    v1::RegisterEngineResponse resp;
    grpc::ClientContext ctx;
    ExpectShortInvalid(stub_->RegisterEngine(Context(&ctx), req, &resp), words, what);
  };
  v1::RegisterEngineRequest bad = engine.Request();
  bad.mutable_layout()->mutable_buffers(1)->set_name(Huge());
  expect_register(bad, "1048576 bytes", "a 1 MiB buffer name");
  bad = engine.Request();
  bad.mutable_layout()->mutable_buffers(1)->set_name(Huge());
  bad.mutable_layout()->mutable_buffers(1)->set_role(v1::BUFFER_ROLE_UNSPECIFIED);
  expect_register(bad, "role", "a 1 MiB buffer name with an unset role");
  bad = engine.Request();
  bad.mutable_layout()->mutable_pools(0)->set_name(Huge());
  bad.mutable_pools(0)->set_name(Huge());
  expect_register(bad, "1048576 bytes", "a 1 MiB pool name");
  bad = engine.Request();
  bad.mutable_layout()->mutable_pools(0)->set_name("kv/0");
  bad.mutable_pools(0)->set_name("kv/0");
  expect_register(bad, "'kv/0'", "a pool name with a '/'");
  bad = engine.Request();
  bad.mutable_pools(0)->set_name(Huge());
  expect_register(bad, "is not a pool of the layout", "a registration naming a 1 MiB pool");
  bad = engine.Request();
  bad.set_model(Huge());
  expect_register(bad, "model", "a 1 MiB model");
  for (int field = 0; field < 3; ++field) {
    v1::StatsRequest req;
    req.set_include_namespaces(true);
    v1::NamespaceMatch* match = req.mutable_namespaces()->mutable_match();
    (field == 0   ? match->mutable_tenant()
     : field == 1 ? match->mutable_model()
                  : match->mutable_partition())
        ->assign(Huge());
    v1::StatsResponse resp;
    grpc::ClientContext ctx;
    ExpectShortInvalid(stub_->Stats(Context(&ctx), req, &resp), "namespaces.match",
                       absl::StrCat("Stats with a 1 MiB match field ", field));
  }

  // Nothing of it changed the daemon: the engine still works.
  engine.Fill(0, 1);
  EXPECT_EQ(Offload(*stub_, reg.engine_id(), 1, 0, 1).stored_pages(), 1u);
}

TEST_F(KvtierdContractTest, AHashRepeatedInOneOffloadFailsThatItem) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  TestEngine engine(dir_->File("pool-a"), 8);
  for (uint32_t i = 0; i < 4; ++i) engine.Fill(i, 10 + i);
  const v1::RegisterEngineResponse reg = Register(*stub_, engine.Request());

  // cache.proto: "hashes must be distinct within one request (a repeated hash fails that item
  // with ITEM_CODE_INVALID_ARGUMENT)". Item 2 repeats item 0's hash with another page.
  v1::OffloadRequest req;
  req.set_engine_id(reg.engine_id());
  for (auto [chain, page] : {std::pair{7, 0}, {8, 1}, {7, 2}}) {
    v1::OffloadItem* item = req.add_items();
    item->set_block_hash(Hash(chain, 0));
    item->set_page_index(page);
  }
  {
    v1::OffloadResponse resp;
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->Offload(Context(&ctx), req, &resp).ok());
    ASSERT_EQ(resp.results_size(), 3);
    EXPECT_EQ(resp.results(0).code(), v1::ITEM_CODE_OK) << resp.results(0).message();
    EXPECT_EQ(resp.results(1).code(), v1::ITEM_CODE_OK) << resp.results(1).message();
    EXPECT_EQ(resp.results(2).code(), v1::ITEM_CODE_INVALID_ARGUMENT) << resp.results(2).message();
    EXPECT_NE(resp.results(2).message().find("items[0]"), std::string::npos)
        << resp.results(2).message();
    EXPECT_EQ(resp.stored_pages(), 2u);
  }
  // The block holds page 0's data, not page 2's.
  {
    const v1::OnboardResponse on = Onboard(*stub_, reg.engine_id(), 7, 1, 5);
    ASSERT_EQ(on.onboarded_pages(), 1u) << on.results(0).message();
    EXPECT_TRUE(engine.Bytes(5) == engine.RoundTrip(0));
  }
  // Stored already: the first item is ALREADY_STORED, its repetition still INVALID_ARGUMENT.
  {
    v1::OffloadResponse resp;
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->Offload(Context(&ctx), req, &resp).ok());
    EXPECT_EQ(resp.results(0).code(), v1::ITEM_CODE_ALREADY_STORED);
    EXPECT_EQ(resp.results(2).code(), v1::ITEM_CODE_INVALID_ARGUMENT);
  }
}

// TestLayout's first layer as token-major rows: K and V of a token side by side, each 2 heads x 64
// dims merged into one 128-element row, rows 256 elements apart, V 128 elements after K. The
// rows of the two buffers interleave without sharing a byte.
codec::PageLayout InterleavedLayout(uint64_t v_offset_bytes) {
  codec::PageLayout layout;
  layout.tokens_per_page = 16;
  for (codec::BufferRole role : {codec::BufferRole::kAttentionK, codec::BufferRole::kAttentionV}) {
    codec::BufferSpec b;
    b.name = role == codec::BufferRole::kAttentionK ? "k.0" : "v.0";
    b.role = role;
    b.dtype = codec::DType::kBf16;
    b.heads = 1;
    b.head_dim = 128;
    b.row_stride = 256;
    b.offset_bytes = role == codec::BufferRole::kAttentionK ? 0 : v_offset_bytes;
    layout.buffers.push_back(b);
  }
  layout.pools = {codec::PoolSpec{"kv", 16 * 256 * 2}};
  return layout;
}

TEST_F(KvtierdContractTest, BuffersThatOverlapInAPoolAreRefused) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  TestEngine engine(dir_->File("pool-a"), 8);
  auto expect_overlap = [&](const v1::RegisterEngineRequest& req, const std::string& what) {
    v1::RegisterEngineResponse resp;
    grpc::ClientContext ctx;
    const grpc::Status st = stub_->RegisterEngine(Context(&ctx), req, &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << what << ": " << st.error_message();
    for (const char* words : {"'k.0'", "'v.0'", "overlap", "'kv'"}) {
      EXPECT_NE(st.error_message().find(words), std::string::npos)
          << what << ": " << st.error_message();
    }
  };
  // layout.proto: "the buffers of a pool must not overlap". v.0 starts in the middle of k.0.
  v1::RegisterEngineRequest bad = engine.Request();
  bad.mutable_layout()->mutable_buffers(1)->set_offset_bytes(2048);
  bad.mutable_layout()->set_fingerprint(0);
  expect_overlap(bad, "v.0 inside k.0");
  // Interleaved rows that collide: V rows start 64 elements into K rows.
  TestEngine strided(dir_->File("pool-b"), 8, InterleavedLayout(0));
  bad = strided.Request();
  for (v1::BufferSpec& b : *bad.mutable_layout()->mutable_buffers()) {
    if (b.name() == "v.0") b.set_offset_bytes(128);
  }
  expect_overlap(bad, "interleaved rows that collide");
  {
    v1::StatsRequest req;
    v1::StatsResponse resp;
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->Stats(Context(&ctx), req, &resp).ok());
    EXPECT_EQ(resp.registered_engines(), 0u) << "nothing was registered";
  }

  // Interleaved rows that do not collide are a valid layout: it registers and round-trips.
  TestEngine interleaved(dir_->File("pool-c"), 8, InterleavedLayout(256));
  v1::RegisterEngineRequest good = interleaved.Request();
  // Each buffer has one head, which heads = 0 means (layout.proto: "Default when 0: 1").
  for (v1::BufferSpec& b : *good.mutable_layout()->mutable_buffers()) b.set_heads(0);
  const v1::RegisterEngineResponse reg = Register(*stub_, good);
  ASSERT_FALSE(reg.engine_id().empty());
  for (uint32_t i = 0; i < 2; ++i) interleaved.Fill(i, 40 + i);
  EXPECT_EQ(Offload(*stub_, reg.engine_id(), 3, 0, 2).stored_pages(), 2u);
  const v1::OnboardResponse on = Onboard(*stub_, reg.engine_id(), 3, 2, 4);
  ASSERT_EQ(on.onboarded_pages(), 2u);
  for (uint32_t i = 0; i < 2; ++i) {
    EXPECT_TRUE(interleaved.Bytes(4 + i) == interleaved.RoundTrip(i)) << "page " << i;
  }
}

TEST_F(KvtierdContractTest, ASelectorWithAllFalseIsInvalidArgumentWhereverOneIsTaken) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  TestEngine engine(dir_->File("pool-a"), 8);
  engine.Fill(0, 1);
  const v1::RegisterEngineResponse reg = Register(*stub_, engine.Request());
  ASSERT_EQ(Offload(*stub_, reg.engine_id(), 1, 0, 1).stored_pages(), 1u);
  auto admin = v1::KvTierAdmin::NewStub(channel_);
  v1::NamespaceSelector all_false;
  all_false.set_all(false);
  auto expect_invalid = [](const grpc::Status& st, const std::string& what) {
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << what << ": " << st.error_message();
    EXPECT_NE(st.error_message().find("all"), std::string::npos)
        << what << ": " << st.error_message();
  };
  for (bool include_namespaces : {false, true}) {
    v1::StatsRequest req;
    req.set_include_namespaces(include_namespaces);
    *req.mutable_namespaces() = all_false;
    v1::StatsResponse resp;
    grpc::ClientContext ctx;
    expect_invalid(stub_->Stats(Context(&ctx), req, &resp),
                   absl::StrCat("Stats, include_namespaces ", include_namespaces));
  }
  {
    v1::WatchEventsRequest req;
    *req.mutable_namespaces() = all_false;
    grpc::ClientContext ctx;
    std::unique_ptr<grpc::ClientReader<v1::WatchEventsResponse>> reader =
        stub_->WatchEvents(Context(&ctx), req);
    v1::WatchEventsResponse resp;
    EXPECT_FALSE(reader->Read(&resp));
    expect_invalid(reader->Finish(), "WatchEvents");
  }
  {
    v1::EvictRequest req;
    *req.mutable_namespaces() = all_false;
    req.set_block_count(1);
    v1::EvictResponse resp;
    grpc::ClientContext ctx;
    expect_invalid(admin->Evict(Context(&ctx), req, &resp), "Evict");
  }
  {
    v1::ClearRequest req;
    *req.mutable_namespaces() = all_false;
    v1::ClearResponse resp;
    grpc::ClientContext ctx;
    expect_invalid(admin->Clear(Context(&ctx), req, &resp), "Clear");
  }
  {
    v1::VerifyRequest req;
    *req.mutable_namespaces() = all_false;
    v1::VerifyResponse resp;
    grpc::ClientContext ctx;
    expect_invalid(admin->Verify(Context(&ctx), req, &resp), "Verify");
  }
  EXPECT_EQ(Lookup(*stub_, reg.engine_id(), 1, 1).hit_pages(), 1u) << "nothing was cleared";

  // A selector message with no member set reads as unset where unset means every namespace
  // (kvtierctl sends one): Stats and Verify answer for every namespace; Clear still refuses.
  {
    v1::StatsRequest req;
    req.set_include_namespaces(true);
    req.mutable_namespaces();
    v1::StatsResponse resp;
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->Stats(Context(&ctx), req, &resp).ok());
    EXPECT_EQ(resp.namespaces_size(), 1);
  }
  {
    v1::VerifyRequest req;
    req.mutable_namespaces();
    v1::VerifyResponse resp;
    grpc::ClientContext ctx;
    const grpc::Status st = admin->Verify(Context(&ctx), req, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(resp.checked_blocks(), 1u);
  }
  {
    v1::ClearRequest req;
    req.mutable_namespaces();
    v1::ClearResponse resp;
    grpc::ClientContext ctx;
    EXPECT_EQ(admin->Clear(Context(&ctx), req, &resp).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }
}

TEST_F(KvtierdContractTest, OnboardOfACorruptDiskBlockIsDataLossAndCounted) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  TestEngine engine(dir_->File("pool-a"), 8);
  for (uint32_t i = 0; i < 2; ++i) engine.Fill(i, 20 + i);
  v1::RegisterEngineResponse reg = Register(*stub_, engine.Request());
  ASSERT_EQ(Offload(*stub_, reg.engine_id(), 5, 0, 2, /*durable=*/true).stored_pages(), 2u);
  // Restarted, the daemon holds the blocks only on disk (the host tier is not persistent);
  // meanwhile one byte of every disk copy changes.
  ASSERT_EQ(StopDaemon(), 0) << Log();
  ASSERT_GT(CorruptDiskFiles(dir_->File("state") + "/disk"), 0);
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  reg = Register(*stub_, engine.Request());
  ASSERT_EQ(Lookup(*stub_, reg.engine_id(), 5, 2).hit_pages(), 2u) << "indexed: a hit so far";

  auto disk_checksum_failures = [&] {
    v1::StatsRequest req;
    v1::StatsResponse resp;
    grpc::ClientContext ctx;
    EXPECT_TRUE(stub_->Stats(Context(&ctx), req, &resp).ok());
    for (const v1::TierStats& t : resp.tiers()) {
      if (t.tier() == v1::TIER_DISK) return t.checksum_failures();
    }
    return uint64_t{999};
  };
  EXPECT_EQ(disk_checksum_failures(), 0u);
  const std::vector<uint8_t> untouched = engine.Bytes(4);

  // The first block fails its checksum: DATA_LOSS naming it (not a miss), the onboard stops there,
  // the failure is counted, and the block is gone from the index.
  const v1::OnboardResponse on = Onboard(*stub_, reg.engine_id(), 5, 2, 4);
  ASSERT_EQ(on.results_size(), 2);
  EXPECT_EQ(on.results(0).code(), v1::ITEM_CODE_DATA_LOSS) << on.results(0).message();
  EXPECT_NE(on.results(0).message().find(absl::BytesToHexString(Hash(5, 0))), std::string::npos)
      << on.results(0).message();
  EXPECT_NE(on.results(0).message().find("checksum"), std::string::npos) << on.results(0).message();
  EXPECT_EQ(on.results(1).code(), v1::ITEM_CODE_SKIPPED);
  EXPECT_EQ(on.onboarded_pages(), 0u);
  EXPECT_TRUE(engine.Bytes(5) == untouched) << "a skipped page is untouched";
  EXPECT_EQ(disk_checksum_failures(), 1u);
  EXPECT_EQ(Lookup(*stub_, reg.engine_id(), 5, 2).hit_pages(), 0u) << "the corrupt block is gone";
  // The second one, on its own: the same.
  {
    v1::OnboardRequest req;
    req.set_engine_id(reg.engine_id());
    v1::OnboardItem* item = req.add_items();
    item->set_block_hash(Hash(5, 1));
    item->set_page_index(6);
    v1::OnboardResponse resp;
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->Onboard(Context(&ctx), req, &resp).ok());
    EXPECT_EQ(resp.results(0).code(), v1::ITEM_CODE_DATA_LOSS) << resp.results(0).message();
  }
  EXPECT_EQ(disk_checksum_failures(), 2u);
  const std::string metrics = HttpGet(metrics_port_, "/metrics");
  EXPECT_NE(metrics.find("\nkvtier_checksum_failures_total 2\n"), std::string::npos) << metrics;
  // A block that was never stored is still a plain miss.
  EXPECT_EQ(Onboard(*stub_, reg.engine_id(), 6, 1, 7).results(0).code(), v1::ITEM_CODE_NOT_FOUND);
}

}  // namespace
}  // namespace kvtier::integration
