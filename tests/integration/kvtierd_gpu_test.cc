// kvtierd with GPU pools (label gpu; skips without a CUDA device): this test process plays the
// engine, allocates its KV pool in device memory and shares it with the daemon through CUDA IPC.
// Offload runs the fused NVFP4 encode (or the batched raw copy) from the pool into the daemon's
// CUDA-pinned host tier; Onboard runs the decode back into other pages of the pool. The bytes are
// checked against the CPU codec: raw must come back exactly, nvfp4 as the CPU codec's round trip.
// Repeated hashes and corrupt disk blocks get the item codes the host path gives them. With a GPU
// tier (gpu.capacity), offloads land there and onboards of its pages are lossless copies.
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "kernels/device.h"
#include "tests/integration/daemon_fixture.h"

namespace kvtier::integration {
namespace {

bool HaveDevice() {
  auto devices = kernels::ListDevices();
  return devices.ok() && !devices->empty();
}

// An engine pool in device memory, mirrored by a host TestEngine that generates the pages and
// computes the expected results.
class GpuEngine {
 public:
  GpuEngine(const std::string& mirror_file, uint32_t slots, codec::PageLayout layout = TestLayout())
      : mirror_(mirror_file, slots, std::move(layout)), slots_(slots) {
    bytes_ = mirror_.page_bytes() * slots;
    auto ptr = kernels::AllocateDeviceMemory(0, bytes_);
    EXPECT_TRUE(ptr.ok()) << ptr.status();
    if (ptr.ok()) base_ = static_cast<uint8_t*>(*ptr);
  }
  ~GpuEngine() { kernels::FreeDeviceMemory(base_); }

  TestEngine& mirror() { return mirror_; }
  void Upload(uint32_t page) {
    ASSERT_TRUE(kernels::CopyAsync(base_ + page * mirror_.page_bytes(), mirror_.page(page),
                                   mirror_.page_bytes(), kernels::PerThreadStream())
                    .ok());
    ASSERT_TRUE(kernels::SynchronizeStream(kernels::PerThreadStream()).ok());
  }
  std::vector<uint8_t> Download(uint32_t page) {
    std::vector<uint8_t> out(mirror_.page_bytes());
    EXPECT_TRUE(kernels::CopyAsync(out.data(), base_ + page * mirror_.page_bytes(), out.size(),
                                   kernels::PerThreadStream())
                    .ok());
    EXPECT_TRUE(kernels::SynchronizeStream(kernels::PerThreadStream()).ok());
    return out;
  }
  v1::RegisterEngineRequest Request(const std::string& codec) {
    v1::RegisterEngineRequest req = mirror_.Request("", codec);
    v1::PoolRegistration* pool = req.mutable_pools(0);
    v1::CudaIpcMemory* ipc = pool->mutable_cuda_ipc();
    ipc->set_handle(kernels::ExportIpcMemory(base_).value());
    ipc->set_device_uuid(kernels::ListDevices().value()[0].uuid);
    ipc->set_size_bytes(bytes_);
    return req;
  }

 private:
  TestEngine mirror_;
  uint32_t slots_;
  uint64_t bytes_ = 0;
  uint8_t* base_ = nullptr;
};

using KvtierdGpuTest = DaemonFixture;

TEST_F(KvtierdGpuTest, OffloadAndOnboardThroughCudaIpcAndTheFusedKernels) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  ASSERT_NO_FATAL_FAILURE(StartDaemon({"--set=host.pin=cuda"}));
  for (const char* codec : {"nvfp4", "nvfp4x2", "raw"}) {
    SCOPED_TRACE(codec);
    GpuEngine engine(dir_->File(std::string("mirror-") + codec), 32);
    for (uint32_t i = 0; i < 8; ++i) {
      engine.mirror().Fill(i, 500 + i);
      engine.Upload(i);
    }
    grpc::ClientContext ctx;
    v1::RegisterEngineResponse reg;
    grpc::Status st = stub_->RegisterEngine(Context(&ctx), engine.Request(codec), &reg);
    ASSERT_TRUE(st.ok()) << st.error_message();

    v1::OffloadRequest off;
    off.set_engine_id(reg.engine_id());
    off.set_ack(v1::WRITE_ACK_STORED);
    for (uint32_t i = 0; i < 8; ++i) {
      v1::OffloadItem* item = off.add_items();
      item->set_block_hash(Hash(1, i));
      item->set_page_index(i);
    }
    v1::OffloadItem* bad = off.add_items();
    bad->set_block_hash(Hash(1, 100));
    bad->set_page_index(32);
    {
      grpc::ClientContext octx;
      v1::OffloadResponse resp;
      ASSERT_TRUE(stub_->Offload(Context(&octx), off, &resp).ok());
      EXPECT_EQ(resp.stored_pages(), 8u);
      for (int i = 0; i < 8; ++i) {
        EXPECT_EQ(resp.results(i).code(), v1::ITEM_CODE_OK) << resp.results(i).message();
      }
      EXPECT_EQ(resp.results(8).code(), v1::ITEM_CODE_INVALID_ARGUMENT);
    }
    v1::OnboardRequest on;
    on.set_engine_id(reg.engine_id());
    for (uint32_t i = 0; i < 8; ++i) {
      v1::OnboardItem* item = on.add_items();
      item->set_block_hash(Hash(1, i));
      item->set_page_index(16 + i);
    }
    on.add_items()->set_block_hash(Hash(1, 99));  // a miss ends the prefix
    on.mutable_items(8)->set_page_index(30);
    on.add_items()->set_block_hash(Hash(1, 0));
    on.mutable_items(9)->set_page_index(31);
    {
      grpc::ClientContext octx;
      v1::OnboardResponse resp;
      ASSERT_TRUE(stub_->Onboard(Context(&octx), on, &resp).ok());
      EXPECT_EQ(resp.onboarded_pages(), 8u);
      EXPECT_EQ(resp.results(8).code(), v1::ITEM_CODE_NOT_FOUND);
      EXPECT_EQ(resp.results(9).code(), v1::ITEM_CODE_SKIPPED);
    }
    for (uint32_t i = 0; i < 8; ++i) {
      const std::vector<uint8_t> got = engine.Download(16 + i);
      if (std::string(codec) == "raw") {
        EXPECT_TRUE(got == engine.mirror().Bytes(i)) << "page " << i << ": raw must be lossless";
      } else {
        EXPECT_TRUE(got == engine.mirror().RoundTrip(i, codec))
            << "page " << i << ": differs from the CPU codec's round trip";
      }
    }
    // The blocks the GPU wrote are ordinary cold blocks: a host-pool engine of the same
    // namespace reads them with the CPU codec.
    TestEngine host(dir_->File(std::string("host-") + codec), 8);
    grpc::ClientContext hctx;
    v1::RegisterEngineResponse hreg;
    ASSERT_TRUE(stub_->RegisterEngine(Context(&hctx), host.Request("", codec), &hreg).ok());
    EXPECT_EQ(hreg.namespace_id(), reg.namespace_id());
    v1::OnboardRequest hon;
    hon.set_engine_id(hreg.engine_id());
    hon.add_items()->set_block_hash(Hash(1, 3));
    hon.mutable_items(0)->set_page_index(0);
    grpc::ClientContext hoctx;
    v1::OnboardResponse hresp;
    ASSERT_TRUE(stub_->Onboard(Context(&hoctx), hon, &hresp).ok());
    EXPECT_EQ(hresp.results(0).code(), v1::ITEM_CODE_OK) << hresp.results(0).message();
    EXPECT_TRUE(host.Bytes(0) == engine.mirror().RoundTrip(3, codec));
  }
}

// Both data paths treat a durable offload of stored pages alike: the stored blocks become durable.
TEST_F(KvtierdGpuTest, DurableOffloadOfStoredPagesMakesThemDurable) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  ASSERT_NO_FATAL_FAILURE(StartDaemon({"--set=host.pin=cuda"}));
  GpuEngine engine(dir_->File("mirror"), 8);
  for (uint32_t i = 0; i < 4; ++i) {
    engine.mirror().Fill(i, 70 + i);
    engine.Upload(i);
  }
  grpc::ClientContext ctx;
  v1::RegisterEngineResponse reg;
  ASSERT_TRUE(stub_->RegisterEngine(Context(&ctx), engine.Request("nvfp4"), &reg).ok());
  ASSERT_EQ(Offload(*stub_, reg.engine_id(), 6, 0, 4).stored_pages(), 4u);
  ASSERT_EQ(TierStatsOf(*stub_, v1::TIER_DISK).blocks(), 0u) << "stored in the host tier only";
  const v1::OffloadResponse again = Offload(*stub_, reg.engine_id(), 6, 0, 4, /*durable=*/true);
  for (const v1::ItemResult& r : again.results()) {
    EXPECT_EQ(r.code(), v1::ITEM_CODE_ALREADY_STORED) << r.message();
  }
  EXPECT_EQ(TierStatsOf(*stub_, v1::TIER_DISK).blocks(), 4u)
      << "a durable offload acknowledged with WRITE_ACK_DURABLE leaves the stored blocks on disk";
}

// A batch of at least four 4 MiB slices of blocks takes the staged gather on onboard
// (GpuNvfp4Codec::DecodeGathered: the copy engine gathers the host tier's blocks into the ring,
// one decode launch per page); pages land in reverse order of their blocks' slots.
TEST_F(KvtierdGpuTest, OnboardsLargeBatchesThroughTheStagedGather) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  ASSERT_NO_FATAL_FAILURE(StartDaemon({"--set=host.pin=cuda", "--set=host.capacity=128MiB"}));
  constexpr uint32_t kPages = 64;  // 1 MiB pages: 64 blocks of about 0.3 MiB, five slices
  const codec::PageLayout layout =
      codec::BuildGqaLayout({8, 8, 128, 32, codec::DType::kBf16, 0, 0}).value();
  GpuEngine engine(dir_->File("mirror-gather"), 2 * kPages, layout);
  for (uint32_t i = 0; i < kPages; ++i) {
    engine.mirror().Fill(i, 900 + i);
    engine.Upload(i);
  }
  grpc::ClientContext ctx;
  v1::RegisterEngineResponse reg;
  ASSERT_TRUE(stub_->RegisterEngine(Context(&ctx), engine.Request("nvfp4"), &reg).ok());
  v1::OffloadRequest off;
  off.set_engine_id(reg.engine_id());
  off.set_ack(v1::WRITE_ACK_STORED);
  for (uint32_t i = 0; i < kPages; ++i) {
    v1::OffloadItem* item = off.add_items();
    item->set_block_hash(Hash(2, i));
    item->set_page_index(i);
  }
  {
    grpc::ClientContext octx;
    v1::OffloadResponse resp;
    ASSERT_TRUE(stub_->Offload(Context(&octx), off, &resp).ok());
    ASSERT_EQ(resp.stored_pages(), kPages);
  }
  v1::OnboardRequest on;
  on.set_engine_id(reg.engine_id());
  for (uint32_t i = 0; i < kPages; ++i) {
    v1::OnboardItem* item = on.add_items();
    item->set_block_hash(Hash(2, i));
    item->set_page_index(2 * kPages - 1 - i);
  }
  {
    grpc::ClientContext octx;
    v1::OnboardResponse resp;
    ASSERT_TRUE(stub_->Onboard(Context(&octx), on, &resp).ok());
    ASSERT_EQ(resp.onboarded_pages(), kPages);
  }
  for (uint32_t i = 0; i < kPages; ++i) {
    EXPECT_TRUE(engine.Download(2 * kPages - 1 - i) == engine.mirror().RoundTrip(i, "nvfp4"))
        << "page " << i << ": differs from the CPU codec's round trip";
  }
}

// The GPU data plane gives the items the same codes as the host one: a hash repeated in one
// Offload fails that item, and a block whose disk copy fails its checksum is DATA_LOSS (counted).
TEST_F(KvtierdGpuTest, RepeatedHashesAndCorruptBlocksGetTheirItemCodes) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  ASSERT_NO_FATAL_FAILURE(StartDaemon({"--set=host.pin=cuda"}));
  GpuEngine engine(dir_->File("mirror"), 8);
  for (uint32_t i = 0; i < 3; ++i) {
    engine.mirror().Fill(i, 70 + i);
    engine.Upload(i);
  }
  v1::RegisterEngineResponse reg;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->RegisterEngine(Context(&ctx), engine.Request("nvfp4"), &reg).ok());
  }
  v1::OffloadRequest off;
  off.set_engine_id(reg.engine_id());
  off.set_durable(true);
  off.set_ack(v1::WRITE_ACK_DURABLE);
  for (auto [i, page] : {std::pair{0, 0}, {1, 1}, {0, 2}}) {
    v1::OffloadItem* item = off.add_items();
    item->set_block_hash(Hash(3, i));
    item->set_page_index(page);
  }
  {
    grpc::ClientContext ctx;
    v1::OffloadResponse resp;
    ASSERT_TRUE(stub_->Offload(Context(&ctx), off, &resp).ok());
    EXPECT_EQ(resp.results(0).code(), v1::ITEM_CODE_OK) << resp.results(0).message();
    EXPECT_EQ(resp.results(1).code(), v1::ITEM_CODE_OK) << resp.results(1).message();
    EXPECT_EQ(resp.results(2).code(), v1::ITEM_CODE_INVALID_ARGUMENT) << resp.results(2).message();
    EXPECT_NE(resp.results(2).message().find("items[0]"), std::string::npos)
        << resp.results(2).message();
    EXPECT_EQ(resp.stored_pages(), 2u);
  }
  ASSERT_EQ(StopDaemon(), 0) << Log();
  ASSERT_GT(CorruptDiskFiles(dir_->File("state") + "/disk"), 0);
  ASSERT_NO_FATAL_FAILURE(StartDaemon({"--set=host.pin=cuda"}));
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->RegisterEngine(Context(&ctx), engine.Request("nvfp4"), &reg).ok());
  }
  v1::OnboardRequest on;
  on.set_engine_id(reg.engine_id());
  on.add_items()->set_block_hash(Hash(3, 0));
  on.mutable_items(0)->set_page_index(4);
  {
    grpc::ClientContext ctx;
    v1::OnboardResponse resp;
    ASSERT_TRUE(stub_->Onboard(Context(&ctx), on, &resp).ok());
    EXPECT_EQ(resp.results(0).code(), v1::ITEM_CODE_DATA_LOSS) << resp.results(0).message();
    EXPECT_EQ(resp.onboarded_pages(), 0u);
  }
  v1::StatsRequest sreq;
  v1::StatsResponse stats;
  grpc::ClientContext sctx;
  ASSERT_TRUE(stub_->Stats(Context(&sctx), sreq, &stats).ok());
  uint64_t failures = 0;
  for (const v1::TierStats& t : stats.tiers()) failures += t.checksum_failures();
  EXPECT_EQ(failures, 1u);
}

// With a GPU tier on the engine's device, an offload is a device-to-device copy into it (tier GPU,
// no cold bytes written) and an onboard of a page still there gives the page back exactly; once
// the background thread has encoded the pages into the host tier they come back as the CPU
// codec's round trip. Pages that find no GPU room, durable offloads and raw engines take the
// direct path; every page is stored either way.
TEST_F(KvtierdGpuTest, GpuTierAcknowledgesOffloadsAndServesOnboardsDeviceToDevice) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  ASSERT_NO_FATAL_FAILURE(StartDaemon(
      {"--set=host.pin=cuda", "--set=host.capacity=256MiB", "--set=gpu.capacity=64MiB"}));
  constexpr uint32_t kPages = 80;  // 1 MiB pages: more than the 64 MiB tier holds
  const codec::PageLayout layout =
      codec::BuildGqaLayout({8, 8, 128, 32, codec::DType::kBf16, 0, 0}).value();
  GpuEngine engine(dir_->File("mirror-tier"), 2 * kPages, layout);
  for (uint32_t i = 0; i < kPages; ++i) {
    engine.mirror().Fill(i, 1300 + i);
    engine.Upload(i);
  }
  const v1::RegisterEngineResponse reg = Register(*stub_, engine.Request("nvfp4"));
  // A first small offload fits the empty tier whole.
  {
    const v1::OffloadResponse resp = Offload(*stub_, reg.engine_id(), 4, 0, 8);
    ASSERT_EQ(resp.stored_pages(), 8u);
    for (const v1::ItemResult& r : resp.results()) {
      EXPECT_EQ(r.code(), v1::ITEM_CODE_OK) << r.message();
      EXPECT_EQ(r.tier(), v1::TIER_GPU);
    }
    EXPECT_EQ(resp.cold_bytes_written(), 0u) << "nothing is encoded before the acknowledgement";
    EXPECT_EQ(TierStatsOf(*stub_, v1::TIER_GPU).blocks(), 8u);
    const v1::LookupResponse look = Lookup(*stub_, reg.engine_id(), 4, 8);
    ASSERT_EQ(look.tiers_size(), 8);
    for (int i = 0; i < 8; ++i) EXPECT_EQ(look.tiers(i), v1::TIER_GPU);
  }
  {
    const v1::OnboardResponse resp = Onboard(*stub_, reg.engine_id(), 4, 8, kPages);
    ASSERT_EQ(resp.onboarded_pages(), 8u);
    for (uint32_t i = 0; i < 8; ++i) {
      EXPECT_EQ(resp.results(i).tier(), v1::TIER_GPU);
      EXPECT_TRUE(engine.Download(kPages + i) == engine.mirror().Bytes(i))
          << "page " << i << ": a GPU-tier page must come back exactly";
    }
  }
  // The whole batch: what finds no GPU room is encoded into the host tier in the same call.
  std::vector<v1::Tier> stored_in(kPages);
  {
    const v1::OffloadResponse resp = Offload(*stub_, reg.engine_id(), 5, 0, kPages);
    ASSERT_EQ(resp.stored_pages(), kPages);
    uint32_t direct = 0;
    for (uint32_t i = 0; i < kPages; ++i) {
      EXPECT_EQ(resp.results(i).code(), v1::ITEM_CODE_OK) << resp.results(i).message();
      stored_in[i] = resp.results(i).tier();
      direct += stored_in[i] == v1::TIER_HOST;
    }
    EXPECT_GT(direct, 0u) << "80 MiB of pages cannot all fit a 64 MiB GPU tier";
  }
  // Onboard all of them: each as its tier gives it (GPU: exact; host: the codec's round trip).
  // The background thread may have encoded GPU pages meanwhile, so the onboard's own tier says.
  auto check_onboard = [&](const char* when) {
    const v1::OnboardResponse resp = Onboard(*stub_, reg.engine_id(), 5, kPages, kPages);
    ASSERT_EQ(resp.onboarded_pages(), kPages) << when;
    for (uint32_t i = 0; i < kPages; ++i) {
      const std::vector<uint8_t> got = engine.Download(kPages + i);
      if (resp.results(i).tier() == v1::TIER_GPU) {
        EXPECT_TRUE(got == engine.mirror().Bytes(i)) << when << ": page " << i;
      } else {
        EXPECT_TRUE(got == engine.mirror().RoundTrip(i, "nvfp4")) << when << ": page " << i;
      }
    }
  };
  ASSERT_NO_FATAL_FAILURE(check_onboard("mixed tiers"));
  // Demote every GPU page (admin Evict moves them down the usual path: the fused encode).
  {
    auto admin = v1::KvTierAdmin::NewStub(channel_);
    grpc::ClientContext ctx;
    v1::EvictRequest req;
    req.mutable_namespaces()->set_namespace_id(reg.namespace_id());
    req.set_tier(v1::TIER_GPU);
    req.set_block_count(1000);
    v1::EvictResponse resp;
    ASSERT_TRUE(admin->Evict(Context(&ctx), req, &resp).ok());
  }
  for (int i = 0; i < 200 && TierStatsOf(*stub_, v1::TIER_GPU).blocks() > 0; ++i) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_EQ(TierStatsOf(*stub_, v1::TIER_GPU).blocks(), 0u) << "the GPU pages were not demoted";
  ASSERT_NO_FATAL_FAILURE(check_onboard("after demotion"));
  {
    const v1::OnboardResponse resp = Onboard(*stub_, reg.engine_id(), 4, 8, kPages);
    ASSERT_EQ(resp.onboarded_pages(), 8u);
    for (uint32_t i = 0; i < 8; ++i) {
      EXPECT_EQ(resp.results(i).tier(), v1::TIER_HOST);
      EXPECT_TRUE(engine.Download(kPages + i) == engine.mirror().RoundTrip(i, "nvfp4"))
          << "page " << i << ": the demoted page is the fused encode's block";
    }
  }
  // Durable offloads go straight to cold blocks (a GPU-tier page is volatile).
  {
    const v1::OffloadResponse resp = Offload(*stub_, reg.engine_id(), 6, 0, 4, /*durable=*/true);
    ASSERT_EQ(resp.stored_pages(), 4u);
    for (const v1::ItemResult& r : resp.results()) EXPECT_EQ(r.tier(), v1::TIER_HOST);
    EXPECT_EQ(TierStatsOf(*stub_, v1::TIER_GPU).blocks(), 0u);
  }
  // A raw engine (the tier encodes with the fused NVFP4 kernels only) keeps the direct path.
  GpuEngine raw(dir_->File("mirror-raw"), 8);
  raw.mirror().Fill(0, 7);
  raw.Upload(0);
  const v1::RegisterEngineResponse raw_reg = Register(*stub_, raw.Request("raw"));
  const v1::OffloadResponse resp = Offload(*stub_, raw_reg.engine_id(), 7, 0, 1);
  ASSERT_EQ(resp.stored_pages(), 1u);
  EXPECT_EQ(resp.results(0).tier(), v1::TIER_HOST);
}

TEST_F(KvtierdGpuTest, RejectsWhatTheGpuPathCannotTake) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  ASSERT_NO_FATAL_FAILURE(StartDaemon({"--set=host.pin=cuda"}));
  GpuEngine engine(dir_->File("mirror"), 8);
  auto expect = [&](const v1::RegisterEngineRequest& req, grpc::StatusCode code,
                    const std::string& words) {
    grpc::ClientContext ctx;
    v1::RegisterEngineResponse resp;
    grpc::Status st = stub_->RegisterEngine(Context(&ctx), req, &resp);
    EXPECT_EQ(st.error_code(), code) << st.error_message();
    EXPECT_NE(st.error_message().find(words), std::string::npos) << st.error_message();
  };
  v1::RegisterEngineRequest req = engine.Request("nvfp4");
  req.mutable_pools(0)->mutable_cuda_ipc()->set_handle(std::string(63, 'x'));
  expect(req, grpc::StatusCode::INVALID_ARGUMENT, "64");
  req = engine.Request("nvfp4");
  req.mutable_pools(0)->mutable_cuda_ipc()->set_device_uuid(std::string(16, '\x7f'));
  expect(req, grpc::StatusCode::FAILED_PRECONDITION, "UUID");
  req = engine.Request("nvfp4");
  req.mutable_pools(0)->mutable_cuda_ipc()->set_size_bytes(1024);
  expect(req, grpc::StatusCode::FAILED_PRECONDITION, "size_bytes");
  req = engine.Request("nvfp4");
  req.mutable_pools(0)->mutable_cuda_ipc()->set_base_offset_bytes(1ull << 30);
  expect(req, grpc::StatusCode::INVALID_ARGUMENT, "exceed the shared allocation");
  req = engine.Request("nvfp4");
  req.mutable_pools(0)->mutable_cuda_ipc()->set_size_bytes(1ull << 40);
  expect(req, grpc::StatusCode::INVALID_ARGUMENT, "exceed the shared allocation");
  // A layout that is not flat (a gap before the last buffer).
  req = engine.Request("nvfp4");
  v1::PageLayout* layout = req.mutable_layout();
  layout->set_fingerprint(0);
  layout->mutable_pools(0)->set_slot_bytes(layout->pools(0).slot_bytes() + 4096);
  v1::BufferSpec* last = layout->mutable_buffers(layout->buffers_size() - 1);
  last->set_offset_bytes(last->offset_bytes() + 4096);
  req.mutable_pools(0)->mutable_cuda_ipc()->set_size_bytes(4 * layout->pools(0).slot_bytes());
  req.mutable_pools(0)->set_slots(4);  // 4 larger slots still fit the 8-page allocation
  expect(req, grpc::StatusCode::INVALID_ARGUMENT, "flat");
  // The daemon still serves a good registration.
  grpc::ClientContext ctx;
  v1::RegisterEngineResponse resp;
  EXPECT_TRUE(stub_->RegisterEngine(Context(&ctx), engine.Request("nvfp4"), &resp).ok());
}

}  // namespace
}  // namespace kvtier::integration
