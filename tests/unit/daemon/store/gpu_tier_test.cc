// The store's GPU tier on a real device: hot pages stored with PutHot are served losslessly while
// they stay on the GPU, encoded by the fused kernel into the host tier when the tier is above its
// watermark (byte-identical to the CPU codec's blocks), carried down to disk and across restarts
// like any block, and never survive a restart on their own. Without CUDA or a device, the tier is
// refused with a precise status and the GPU cases skip.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <random>
#include <thread>
#include <vector>

#include "codec/codec.h"
#include "codec/dtype.h"
#include "daemon/store/block_store.h"
#include "daemon/store/host_arena.h"
#include "gtest/gtest.h"
#include "kernels/device.h"
#include "tests/unit/daemon/store/store_fixture.h"

namespace kvtier::store {
namespace {

bool HaveDevice() {
  auto devices = kernels::ListDevices();
  return devices.ok() && !devices->empty();
}

// Device memory for a test, freed at scope exit.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(uint64_t bytes) : bytes_(bytes) {
    auto ptr = kernels::AllocateDeviceMemory(0, bytes);
    EXPECT_TRUE(ptr.ok()) << ptr.status();
    if (ptr.ok()) ptr_ = *ptr;
  }
  ~DeviceBuffer() { kernels::FreeDeviceMemory(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return ptr_; }
  void Upload(const std::vector<uint8_t>& host) {
    ASSERT_EQ(host.size(), bytes_);
    ASSERT_TRUE(kernels::CopyAsync(ptr_, host.data(), bytes_, kernels::PerThreadStream()).ok());
    ASSERT_TRUE(kernels::SynchronizeStream(kernels::PerThreadStream()).ok());
  }
  std::vector<uint8_t> Download() const {
    std::vector<uint8_t> host(bytes_);
    EXPECT_TRUE(kernels::CopyAsync(host.data(), ptr_, bytes_, kernels::PerThreadStream()).ok());
    EXPECT_TRUE(kernels::SynchronizeStream(kernels::PerThreadStream()).ok());
    return host;
  }

 private:
  uint64_t bytes_;
  void* ptr_ = nullptr;
};

// One layer, 8 KV heads of 128 dims, 32 tokens, BF16: the 131 KB per-layer page.
codec::PageLayout PerLayerLayout() {
  return codec::BuildGqaLayout({1, 8, 128, 32, codec::DType::kBf16, 0, 0}).value();
}

class GpuTierTest : public StoreFixture {
 protected:
  void SetUp() override {
    StoreFixture::SetUp();
    options_.gpu.capacity_bytes = 8ull << 20;
    options_.gpu.chunk_bytes = 1ull << 20;
    options_.host.pin = HostPinMode::kCuda;
    options_.disk.dirs.clear();
    layout_ = PerLayerLayout();
    spec_ = codec::CodecSpec::Parse("nvfp4").value();
    cpu_ = codec::Codec::Create(layout_, spec_).value();
    page_bytes_ = codec::FlatPageBytes(layout_);
  }

  absl::StatusOr<std::unique_ptr<BlockStore>> OpenWithLayout() {
    auto store = Open();
    if (store.ok()) {
      absl::Status st = (*store)->SetHotLayout(1, layout_, spec_);
      if (!st.ok()) return st;
    }
    return store;
  }

  // A page of N(0, sigma) values, sigma depending on the id (1e-3 .. 1e3).
  std::vector<uint8_t> Page(uint64_t id) const {
    std::vector<uint8_t> page(page_bytes_);
    std::mt19937_64 rng(id * 7919 + 17);
    std::normal_distribution<float> normal(0.0f, std::pow(10.0f, static_cast<float>(id % 7) - 3));
    codec::HotPageView view = codec::FlatPageView(layout_, absl::MakeConstSpan(page));
    for (size_t b = 0; b < layout_.buffers.size(); ++b) {
      const codec::BufferSpec& buffer = layout_.buffers[b];
      auto* base = const_cast<uint8_t*>(view.base[b]);
      const uint64_t elems = layout_.Rows(buffer) * buffer.RowStride();
      for (uint64_t e = 0; e < elems; ++e) {
        codec::StoreFromFloat(buffer.dtype, normal(rng), base, e);
      }
    }
    return page;
  }
  std::vector<uint8_t> ColdBlock(uint64_t id) const {
    std::vector<uint8_t> block(cpu_->block_bytes());
    const std::vector<uint8_t> page = Page(id);
    EXPECT_TRUE(
        cpu_->Encode(codec::FlatPageView(layout_, absl::MakeConstSpan(page)), absl::MakeSpan(block))
            .ok());
    return block;
  }
  std::vector<uint8_t> DecodedPage(uint64_t id) const {
    std::vector<uint8_t> page(page_bytes_);
    EXPECT_TRUE(
        cpu_->Decode(ColdBlock(id), codec::FlatPageView(layout_, absl::MakeSpan(page))).ok());
    return page;
  }

  absl::Status PutHot(BlockStore& store, uint64_t id, DeviceBuffer& staging) {
    staging.Upload(Page(id));
    return store.PutHot(Key(id), staging.get());
  }

  // Checks the cold block served for `id` against the CPU codec; returns its tier.
  std::optional<Tier> ExpectCold(BlockStore& store, uint64_t id) const {
    absl::StatusOr<std::optional<PinnedBlock>> pinned = store.Acquire(Key(id));
    EXPECT_TRUE(pinned.ok()) << pinned.status();
    if (!pinned.ok() || !pinned->has_value()) return std::nullopt;
    const std::vector<uint8_t> expected = ColdBlock(id);
    const absl::Span<const uint8_t> got = (*pinned)->bytes();
    EXPECT_TRUE(std::equal(got.begin(), got.end(), expected.begin(), expected.end()))
        << "page " << id << ": the block differs from the CPU codec's";
    return (*pinned)->served_from();
  }

  // Checks the hot page ReadHot gives for `id`: the page itself from the GPU tier, the CPU
  // codec's decoded page from a colder tier. Returns the tier.
  std::optional<Tier> ExpectHot(BlockStore& store, uint64_t id, DeviceBuffer& out) const {
    absl::StatusOr<std::optional<Tier>> tier = store.ReadHot(Key(id), out.get());
    EXPECT_TRUE(tier.ok()) << tier.status();
    if (!tier.ok() || !tier->has_value()) return std::nullopt;
    const std::vector<uint8_t> got = out.Download();
    if (**tier == Tier::kGpu) {
      EXPECT_TRUE(got == Page(id)) << "page " << id << ": a GPU hit must be lossless";
    } else {
      EXPECT_TRUE(got == DecodedPage(id)) << "page " << id << ": differs from the CPU decode";
    }
    return *tier;
  }

  codec::PageLayout layout_;
  codec::CodecSpec spec_;
  std::unique_ptr<codec::Codec> cpu_;
  uint64_t page_bytes_ = 0;
};

TEST_F(GpuTierTest, RefusedWithAPreciseStatusWhereItCannotWork) {
  // A store without a GPU tier refuses hot pages (no device needed to say so).
  BlockStoreOptions no_gpu = options_;
  no_gpu.gpu.capacity_bytes = 0;
  no_gpu.host.pin = HostPinMode::kNone;
  {
    auto store = BlockStore::Open(no_gpu).value();
    int dummy = 0;
    EXPECT_EQ(store->PutHot(Key(1), &dummy).code(), absl::StatusCode::kFailedPrecondition);
    absl::Status layout = store->SetHotLayout(1, layout_, spec_);
    if (!kernels::BuiltWithCuda()) {
      EXPECT_EQ(layout.code(), absl::StatusCode::kUnimplemented) << layout;
    }
  }
  options_.host.pin = HostPinMode::kNone;
  absl::StatusOr<std::unique_ptr<BlockStore>> store = Open();
  if (!kernels::BuiltWithCuda()) {
    EXPECT_EQ(store.status().code(), absl::StatusCode::kUnimplemented) << store.status();
    EXPECT_NE(store.status().message().find("without CUDA"), std::string::npos);
  } else if (!HaveDevice()) {
    EXPECT_FALSE(store.ok());
  } else {
    // The fused encode writes into host memory: the host tier must be pinned with CUDA.
    EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition) << store.status();
    options_.host.pin = HostPinMode::kCuda;
    options_.gpu.device = 1000;
    EXPECT_EQ(Open().status().code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST_F(GpuTierTest, HostArenaPinsWithCuda) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  for (HostPinMode mode : {HostPinMode::kCuda, HostPinMode::kAuto}) {
    HostArenaOptions o;
    o.capacity_bytes = 256ull << 20;
    o.pin = mode;
    o.pin_chunk_bytes = 64ull << 20;
    auto arena = HostArena::Create(o);
    ASSERT_TRUE(arena.ok()) << arena.status();
    EXPECT_EQ((*arena)->pin_mechanism(), "cuda");
    // The device reads and writes the arena at its host address.
    std::vector<uint8_t> pattern(1 << 20);
    for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<uint8_t>(i * 31 + 7);
    DeviceBuffer device(pattern.size());
    device.Upload(pattern);
    uint8_t* host = (*arena)->data() + (100ull << 20);
    ASSERT_TRUE(
        kernels::CopyAsync(host, device.get(), pattern.size(), kernels::PerThreadStream()).ok());
    ASSERT_TRUE(kernels::SynchronizeStream(kernels::PerThreadStream()).ok());
    EXPECT_TRUE(std::equal(pattern.begin(), pattern.end(), host));
  }
}

TEST_F(GpuTierTest, HotPagesAreLosslessUntilDemoted) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  auto store = OpenWithLayout();
  ASSERT_TRUE(store.ok()) << store.status();
  DeviceBuffer staging(page_bytes_), out(page_bytes_);
  std::vector<BlockHash> chain;
  for (uint64_t id = 0; id < 6; ++id) {
    ASSERT_TRUE(PutHot(**store, id, staging).ok());
    chain.push_back(kvtier::testing::TestHash(id));
  }
  ASSERT_TRUE(PutHot(**store, 3, staging).ok()) << "a stored key keeps its bytes";
  std::vector<Tier> tiers;
  EXPECT_EQ((*store)->LookupChain(1, chain, &tiers), 6u);
  EXPECT_EQ(tiers, std::vector<Tier>(6, Tier::kGpu));
  for (uint64_t id = 0; id < 6; ++id) EXPECT_EQ(ExpectHot(**store, id, out), Tier::kGpu);
  // Acquire encodes a GPU page into a staging slot: the CPU codec's exact bytes.
  EXPECT_EQ(ExpectCold(**store, 2), Tier::kGpu);
  const StoreStats stats = (*store)->Stats();
  EXPECT_EQ(stats.tiers[0].blocks, 6u);
  EXPECT_EQ(stats.tiers[0].hits, 7u);
  EXPECT_EQ(stats.tiers[0].bytes_in, 6 * page_bytes_);
  EXPECT_EQ(stats.duplicate_puts, 1u);
  EXPECT_EQ(stats.tiers[1].used_bytes, 0u) << "staging slots are returned";
  EXPECT_EQ(stats.evictions_gpu_to_host, 0u);
  // Remove frees the GPU slot.
  EXPECT_TRUE((*store)->Remove(Key(0)).value());
  EXPECT_EQ((*store)->Stats().tiers[0].blocks, 5u);
  EXPECT_FALSE((*store)->ReadHot(Key(0), out.get()).value().has_value());
}

// The data plane's two-step write (ReserveHot, a copy into the reservation, Commit) and its
// pinned read (AcquireHot): a full tier refuses at once without counting a rejected put (the
// caller stores the page another way), another layout is refused, an uncommitted reservation
// leaves nothing behind, and a pinned page is the page as stored.
TEST_F(GpuTierTest, ReserveHotNeverWaitsAndAcquireHotPinsThePage) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  options_.put_wait_ms = 60000;  // a ReserveHot that waited would stall the test
  // No demotion by watermark: the pages this test reads must stay in the GPU tier.
  options_.gpu.watermarks = {1.0, 0.95};
  auto store = OpenWithLayout();
  ASSERT_TRUE(store.ok()) << store.status();
  const uint64_t fingerprint = codec::MakeBlockPlan(layout_, spec_).value().fingerprint;
  EXPECT_EQ((*store)->ReserveHot(Key(1), fingerprint + 1).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*store)->ReserveHot(Key(1, /*ns=*/2), fingerprint).status().code(),
            absl::StatusCode::kFailedPrecondition)
      << "a namespace without a hot layout";
  {
    absl::StatusOr<Reservation> dropped = (*store)->ReserveHot(Key(1), fingerprint);
    ASSERT_TRUE(dropped.ok()) << dropped.status();
    EXPECT_EQ(dropped->tier(), Tier::kGpu);
    EXPECT_EQ(dropped->bytes().size(), page_bytes_);
  }
  EXPECT_EQ((*store)->Stats().tiers[0].used_bytes, 0u) << "an uncommitted reservation is freed";
  std::vector<Reservation> held;
  absl::Status st;
  for (uint64_t id = 0; id < 1000; ++id) {
    absl::StatusOr<Reservation> r = (*store)->ReserveHot(Key(id), fingerprint);
    if (!r.ok()) {
      st = r.status();
      break;
    }
    const std::vector<uint8_t> page = Page(id);
    ASSERT_TRUE(
        kernels::CopyAsync(r->bytes().data(), page.data(), page.size(), kernels::PerThreadStream())
            .ok());
    ASSERT_TRUE(kernels::SynchronizeStream(kernels::PerThreadStream()).ok());
    held.push_back(*std::move(r));
  }
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << "8 MiB hold 64 pages";
  EXPECT_EQ((*store)->Stats().put_rejected, 0u);
  const size_t stored = held.size();
  ASSERT_GT(stored, 2u);
  EXPECT_EQ((*store)->ReserveHot(Key(0), fingerprint).status().code(),
            absl::StatusCode::kAlreadyExists)
      << "a key being stored";
  for (Reservation& r : held) ASSERT_TRUE((*store)->Commit(std::move(r)).ok());
  EXPECT_EQ((*store)->Stats().tiers[0].blocks, stored);
  EXPECT_FALSE((*store)->AcquireHot(Key(0), fingerprint + 1).value().has_value())
      << "another layout reads the cold block instead";
  EXPECT_FALSE((*store)->AcquireHot(Key(stored + 5), fingerprint).value().has_value());
  absl::StatusOr<std::optional<PinnedBlock>> pinned = (*store)->AcquireHot(Key(1), fingerprint);
  ASSERT_TRUE(pinned.ok() && pinned->has_value());
  EXPECT_EQ((*pinned)->served_from(), Tier::kGpu);
  std::vector<uint8_t> got((*pinned)->bytes().size());
  ASSERT_TRUE(kernels::CopyAsync(got.data(), (*pinned)->bytes().data(), got.size(),
                                 kernels::PerThreadStream())
                  .ok());
  ASSERT_TRUE(kernels::SynchronizeStream(kernels::PerThreadStream()).ok());
  EXPECT_TRUE(got == Page(1));
  EXPECT_EQ((*store)->Stats().tiers[0].hits, 1u);
  // A pinned page stays in the GPU tier through a demotion of every other page, as it was.
  ASSERT_TRUE((*store)->DemoteAll().ok());
  EXPECT_EQ((*store)->Stats().tiers[0].blocks, 1u);
  std::fill(got.begin(), got.end(), 0);
  ASSERT_TRUE(kernels::CopyAsync(got.data(), (*pinned)->bytes().data(), got.size(),
                                 kernels::PerThreadStream())
                  .ok());
  ASSERT_TRUE(kernels::SynchronizeStream(kernels::PerThreadStream()).ok());
  EXPECT_TRUE(got == Page(1));
  pinned->reset();
  ASSERT_TRUE((*store)->DemoteAll().ok());
  EXPECT_EQ((*store)->Stats().tiers[0].used_bytes, 0u);
  EXPECT_EQ(ExpectCold(**store, 1), Tier::kHost);
}

TEST_F(GpuTierTest, DemotionEncodesIntoTheHostTier) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  auto store = OpenWithLayout();
  ASSERT_TRUE(store.ok()) << store.status();
  DeviceBuffer staging(page_bytes_), out(page_bytes_);
  for (uint64_t id = 0; id < 6; ++id) ASSERT_TRUE(PutHot(**store, id, staging).ok());
  ASSERT_TRUE((*store)->DemoteAll().ok());
  const StoreStats stats = (*store)->Stats();
  EXPECT_EQ(stats.evictions_gpu_to_host, 6u);
  EXPECT_EQ(stats.tiers[0].blocks, 0u);
  EXPECT_EQ(stats.tiers[0].used_bytes, 0u);
  EXPECT_EQ(stats.tiers[1].blocks, 6u);
  for (uint64_t id = 0; id < 6; ++id) {
    EXPECT_EQ(ExpectCold(**store, id), Tier::kHost);
    EXPECT_EQ(ExpectHot(**store, id, out), Tier::kHost);
  }
  auto verified = (*store)->Verify();
  ASSERT_TRUE(verified.ok());
  EXPECT_EQ(verified->blocks, 6u);
  EXPECT_EQ(verified->failed, 0u);
}

// FlushToDisk (kvtierctl drain --flush-to-disk) encodes GPU-tier pages into the host tier (they
// leave the GPU tier: counted as gpu->host evictions), then gives every host block a disk copy
// and keeps the host copy (no host eviction counted); a restart finds them all on disk.
TEST_F(GpuTierTest, FlushToDiskMovesGpuPagesToHostAndCopiesThemToDisk) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  options_.disk.dirs = {dir_->File("disk0"), dir_->File("disk1")};
  DeviceBuffer staging(page_bytes_), out(page_bytes_);
  {
    auto store = OpenWithLayout();
    ASSERT_TRUE(store.ok()) << store.status();
    for (uint64_t id = 0; id < 10; ++id) ASSERT_TRUE(PutHot(**store, id, staging).ok());
    ASSERT_TRUE((*store)->FlushToDisk().ok());
    const StoreStats stats = (*store)->Stats();
    EXPECT_EQ(stats.tiers[0].blocks, 0u);
    EXPECT_EQ(stats.tiers[1].blocks, 10u);
    EXPECT_EQ(stats.tiers[2].blocks, 10u);
    EXPECT_EQ(stats.evictions_gpu_to_host, 10u);
    EXPECT_EQ(stats.evictions_host_to_disk + stats.evictions_host_copy_freed +
                  stats.evictions_host_dropped,
              0u);
    EXPECT_EQ(stats.blocks_written_to_disk, 10u);
    for (uint64_t id = 0; id < 10; ++id) EXPECT_EQ(ExpectHot(**store, id, out), Tier::kHost);
  }
  auto store = OpenWithLayout();
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->recovery().disk_blocks, 10u);
  for (uint64_t id = 0; id < 10; ++id) {
    EXPECT_EQ(ExpectCold(**store, id), Tier::kDisk);
    EXPECT_EQ(ExpectHot(**store, id, out), Tier::kDisk);
  }
}

TEST_F(GpuTierTest, WatermarksMakeRoomWhilePagesKeepComing) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  options_.gpu.capacity_bytes = 2ull << 20;  // two 1 MiB chunks of 8 pages
  auto store = OpenWithLayout();
  ASSERT_TRUE(store.ok()) << store.status();
  DeviceBuffer staging(page_bytes_), out(page_bytes_);
  constexpr uint64_t kPages = 120;
  for (uint64_t id = 0; id < kPages; ++id) {
    absl::Status st = PutHot(**store, id, staging);
    ASSERT_TRUE(st.ok()) << "page " << id << ": " << st;
  }
  ASSERT_TRUE((*store)->Flush().ok());
  const StoreStats stats = (*store)->Stats();
  EXPECT_GE(stats.evictions_gpu_to_host, kPages - 16);
  EXPECT_GT(stats.tiers[0].blocks, 0u) << "the tier stays in use below its watermark";
  EXPECT_LE(stats.tiers[0].used_bytes, stats.tiers[0].capacity_bytes);
  EXPECT_EQ(stats.tiers[0].blocks + stats.tiers[1].blocks, kPages);
  for (uint64_t id = 0; id < kPages; id += 7) {
    EXPECT_TRUE(ExpectCold(**store, id).has_value());
    EXPECT_TRUE(ExpectHot(**store, id, out).has_value());
  }
}

TEST_F(GpuTierTest, OnlyPagesThatReachedDiskSurviveARestart) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  options_.disk.dirs = {dir_->File("disk0"), dir_->File("disk1")};
  DeviceBuffer staging(page_bytes_), out(page_bytes_);
  {
    auto store = OpenWithLayout();
    ASSERT_TRUE(store.ok()) << store.status();
    for (uint64_t id = 0; id < 10; ++id) ASSERT_TRUE(PutHot(**store, id, staging).ok());
    ASSERT_TRUE((*store)->DemoteAll().ok());  // GPU -> host -> disk
    for (uint64_t id = 10; id < 15; ++id) ASSERT_TRUE(PutHot(**store, id, staging).ok());
    EXPECT_EQ((*store)->Stats().tiers[2].blocks, 10u);
  }
  auto store = OpenWithLayout();
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->recovery().disk_blocks, 10u);
  for (uint64_t id = 0; id < 10; ++id) {
    EXPECT_EQ(ExpectCold(**store, id), Tier::kDisk);
    EXPECT_EQ(ExpectHot(**store, id, out), Tier::kDisk);
  }
  for (uint64_t id = 10; id < 15; ++id) {
    EXPECT_FALSE((*store)->ReadHot(Key(id), out.get()).value().has_value())
        << "GPU pages are volatile";
  }
}

TEST_F(GpuTierTest, RejectsWhatItCannotHold) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  auto store = OpenWithLayout();
  ASSERT_TRUE(store.ok()) << store.status();
  DeviceBuffer staging(page_bytes_), out(page_bytes_);
  staging.Upload(Page(1));
  PutOptions durable;
  durable.durable = true;
  EXPECT_EQ((*store)->PutHot(Key(1), staging.get(), durable).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*store)->PutHot(Key(1, /*ns=*/2), staging.get()).code(),
            absl::StatusCode::kFailedPrecondition)
      << "namespace 2 has no hot layout";
  EXPECT_EQ((*store)->PutHot(Key(1), nullptr).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*store)->SetHotLayout(2, layout_, codec::CodecSpec::Parse("raw").value()).code(),
            absl::StatusCode::kUnimplemented);
  // 36 layers (4.7 MB pages) cannot fit 1 MiB GPU chunks.
  codec::PageLayout big =
      codec::BuildGqaLayout({36, 8, 128, 32, codec::DType::kBf16, 0, 0}).value();
  EXPECT_EQ((*store)->SetHotLayout(2, big, spec_).code(), absl::StatusCode::kInvalidArgument);
  // A block stored cold under another layout is not decoded as this namespace's page.
  const std::vector<uint8_t> foreign = Block(9);
  ASSERT_TRUE((*store)->Put(Key(9), foreign).ok());
  EXPECT_EQ((*store)->ReadHot(Key(9), out.get()).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*store)->Stats().tiers[0].used_bytes, 0u) << "rejected puts must not leak slots";
  // A quota counts hot pages by the size of their cold blocks and evicts inside the namespace.
  const uint64_t slot = (cpu_->block_bytes() + 4095) / 4096 * 4096;
  ASSERT_TRUE((*store)->PutNamespace(1, "ns1", 3 * slot).ok());
  for (uint64_t id = 20; id < 30; ++id) ASSERT_TRUE(PutHot(**store, id, staging).ok());
  const StoreStats stats = (*store)->Stats();
  EXPECT_GT(stats.evictions_quota, 0u);
  EXPECT_LE(stats.tiers[0].blocks + stats.tiers[1].blocks, 3u);
  EXPECT_EQ(ExpectHot(**store, 29, out), Tier::kGpu);
}

TEST_F(GpuTierTest, ConcurrentPutsReadsAndDemotion) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  options_.gpu.capacity_bytes = 2ull << 20;
  auto opened = OpenWithLayout();
  ASSERT_TRUE(opened.ok()) << opened.status();
  BlockStore& store = **opened;
  constexpr int kThreads = 4;
  constexpr uint64_t kPerThread = 40;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      DeviceBuffer staging(page_bytes_), out(page_bytes_);
      std::mt19937 rng(t);
      for (uint64_t i = 0; i < kPerThread; ++i) {
        const uint64_t id = t * 1000 + i;
        if (!PutHot(store, id, staging).ok()) ++failures;
        const uint64_t back = t * 1000 + rng() % (i + 1);
        if (rng() % 2) {
          if (!ExpectHot(store, back, out).has_value()) ++failures;
        } else {
          if (!ExpectCold(store, back).has_value()) ++failures;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  ASSERT_TRUE(store.Flush().ok());
  const StoreStats stats = store.Stats();
  EXPECT_EQ(stats.tiers[0].blocks + stats.tiers[1].blocks, kThreads * kPerThread);
  EXPECT_EQ(stats.pinned_blocks, 0u);
  EXPECT_EQ(stats.migrating_blocks, 0u);
}

}  // namespace
}  // namespace kvtier::store
