// libkvtier's GPU pools against a real kvtierd (labels gpu and integration; skips without a
// device): a pool exported from a pointer inside a larger cudaMalloc allocation (as a framework's
// caching allocator hands out tensors) is read and written at that pointer, never around it.
#include <cstring>

#include "kernels/device.h"
#include "kvtier/block_hasher.h"
#include "kvtier/client.h"
#include "kvtier/pools.h"
#include "tests/integration/daemon_fixture.h"

namespace kvtier::integration {
namespace {

class ClientGpuTest : public DaemonFixture {
 protected:
  void SetUp() override {
    if (!CudaAvailable()) GTEST_SKIP() << "no CUDA device";
    DaemonFixture::SetUp();
  }
};

std::vector<uint8_t> Download(const void* device, uint64_t bytes) {
  std::vector<uint8_t> host(bytes);
  EXPECT_TRUE(kernels::CopyAsync(host.data(), device, bytes, nullptr).ok());
  EXPECT_TRUE(kernels::SynchronizeStream(nullptr).ok());
  return host;
}

TEST_F(ClientGpuTest, APoolInsideAnAllocationIsAddressedAtItsPointer) {
  ASSERT_NO_FATAL_FAILURE(
      StartDaemon({"--set=host.pin=cuda"}));  // GPU pools need the host tier pinned with CUDA
  const PageLayout layout = PageLayout::Gqa({2, 2, 64, 16, DType::kBf16, 0, 0}).value();
  const uint64_t page = layout.pools()[0].slot_bytes;
  constexpr uint32_t kSlots = 8;
  const uint64_t pool_bytes = kSlots * page;
  // [guard | pool | guard] in one allocation; the pool starts 3 pages in.
  const uint64_t lead = 3 * page, total = lead + pool_bytes + 2 * page;
  absl::StatusOr<void*> base = kernels::AllocateDeviceMemory(0, total);
  ASSERT_TRUE(base.ok()) << base.status();
  std::vector<uint8_t> init(total);
  for (uint64_t i = 0; i < total; ++i) init[i] = static_cast<uint8_t>((i * 131) >> 3);
  ASSERT_TRUE(kernels::CopyAsync(*base, init.data(), total, nullptr).ok());
  ASSERT_TRUE(kernels::SynchronizeStream(nullptr).ok());
  void* pool = static_cast<uint8_t*>(*base) + lead;

  absl::StatusOr<PoolRegistration> reg = ExportCudaPool("kv", kSlots, 0, pool, 0, pool_bytes);
  ASSERT_TRUE(reg.ok()) << reg.status();
  EXPECT_EQ(reg->cuda_ipc->base_offset_bytes, lead);
  EXPECT_TRUE(absl::IsInvalidArgument(
      ExportCudaPool("kv", kSlots, 0, pool, 0, pool_bytes + 3 * page).status()));

  ClientOptions co;
  co.socket_path = Socket();
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(co);
  ASSERT_TRUE(client.ok()) << client.status();
  EngineOptions eo;
  eo.model = "gpu-interior";
  eo.layout = layout;
  eo.codec = "raw";
  eo.pools = {*reg};
  absl::StatusOr<Engine> engine = (*client)->RegisterEngine(eo);
  ASSERT_TRUE(engine.ok()) << engine.status() << "\n" << Log();
  std::vector<uint32_t> tokens(4 * 16);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>(i);
  const std::vector<std::string> hashes =
      BlockHasher::Create(engine->hash_root, 16).value().Hash(tokens).value();
  std::vector<PageRef> out, in;
  for (uint32_t i = 0; i < 4; ++i) {
    out.push_back({hashes[i], i});
    in.push_back({hashes[i], 4 + i});
  }
  OffloadOptions stored;
  stored.ack = WriteAck::kStored;
  absl::StatusOr<OffloadResult> off = (*client)->Offload(engine->engine_id, out, stored);
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_EQ(off->stored_pages, 4u);
  absl::StatusOr<OnboardResult> on = (*client)->Onboard(engine->engine_id, in);
  ASSERT_TRUE(on.ok()) << on.status();
  EXPECT_EQ(on->onboarded_pages, 4u);

  const std::vector<uint8_t> after = Download(*base, total);
  // Slots 4..7 now hold slots 0..3 (what the engine had at the pool's pointer) ...
  EXPECT_EQ(std::memcmp(after.data() + lead + 4 * page, init.data() + lead, 4 * page), 0);
  // ... and every byte outside slots 4..7 is as it was.
  EXPECT_EQ(std::memcmp(after.data(), init.data(), lead + 4 * page), 0);
  EXPECT_EQ(std::memcmp(after.data() + lead + pool_bytes, init.data() + lead + pool_bytes,
                        total - lead - pool_bytes),
            0);
  EXPECT_TRUE((*client)->Unregister(engine->engine_id).ok());
  kernels::FreeDeviceMemory(*base);
}

TEST_F(ClientGpuTest, DevicePoolsRoundTripThroughNvfp4) {
  ASSERT_NO_FATAL_FAILURE(
      StartDaemon({"--set=host.pin=cuda"}));  // GPU pools need the host tier pinned with CUDA
  const PageLayout layout = PageLayout::Gqa({2, 2, 64, 16, DType::kBf16, 0, 0}).value();
  absl::StatusOr<std::unique_ptr<DevicePool>> pool =
      DevicePool::Create(0, "kv", 8, layout.pools()[0].slot_bytes);
  ASSERT_TRUE(pool.ok()) << pool.status();
  ClientOptions co;
  co.socket_path = Socket();
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(co);
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_TRUE((*client)->server().cuda_ipc_pools);
  EngineOptions eo;
  eo.model = "gpu-device-pool";
  eo.layout = layout;
  eo.codec = "nvfp4";
  eo.pools = {(*pool)->Registration()};
  absl::StatusOr<Engine> engine = (*client)->RegisterEngine(eo);
  ASSERT_TRUE(engine.ok()) << engine.status();
  TestEngine host(dir_->File("host-copy"), 1, layout.internal());
  host.Fill(0, 42);
  ASSERT_TRUE(kernels::CopyAsync((*pool)->slot(0), host.page(0), host.page_bytes(), nullptr).ok());
  ASSERT_TRUE(kernels::SynchronizeStream(nullptr).ok());
  const std::string hash(32, '\x5A');
  OffloadOptions stored;
  stored.ack = WriteAck::kStored;
  ASSERT_TRUE((*client)->Offload(engine->engine_id, {{hash, 0}}, stored).ok());
  absl::StatusOr<OnboardResult> on = (*client)->Onboard(engine->engine_id, {{hash, 5}});
  ASSERT_TRUE(on.ok()) << on.status();
  EXPECT_EQ(on->onboarded_pages, 1u);
  EXPECT_EQ(Download((*pool)->slot(5), host.page_bytes()), host.RoundTrip(0, "nvfp4"));
  EXPECT_TRUE((*client)->Unregister(engine->engine_id).ok());
}

}  // namespace
}  // namespace kvtier::integration
