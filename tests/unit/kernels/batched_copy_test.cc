// The batched copy kernel on a real GPU: device <-> mapped pinned host and device -> device, spans
// of random sizes at aligned and unaligned offsets (equal and different misalignment). The
// destination is poisoned first: every span byte must arrive and no byte outside a span may
// change. Skips where there is no CUDA build or no device.
#include "kernels/batched_copy.h"

#include <cstring>
#include <random>
#include <vector>

#include "absl/types/span.h"
#include "gtest/gtest.h"
#include "kernels/device.h"
#include "tests/unit/kernels/gpu_buffer.h"

namespace kvtier::kernels {
namespace {

TEST(BatchedCopyTest, RejectsNullAddresses) {
  auto copier = BatchedCopier::Create(0);
  if (!copier.ok()) {
    EXPECT_TRUE(absl::IsUnimplemented(copier.status()) || absl::IsUnavailable(copier.status()))
        << copier.status();
    GTEST_SKIP() << copier.status().message();
  }
  CopySpan bad{nullptr, nullptr, 16};
  EXPECT_TRUE(absl::IsInvalidArgument((*copier)->Enqueue({&bad, 1}, nullptr)));
}

using Mem = GpuBuffer::Kind;

class BatchedCopyGpuTest : public ::testing::TestWithParam<std::pair<Mem, Mem>> {};

TEST_P(BatchedCopyGpuTest, CopiesEverySpanAndNothingElse) {
  auto devices = ListDevices();
  if (!devices.ok() || devices->empty()) GTEST_SKIP() << "no CUDA device";
  auto copier = BatchedCopier::Create(0);
  ASSERT_TRUE(copier.ok()) << copier.status();
  constexpr size_t kBytes = 40 << 20;
  auto src = GpuBuffer::Allocate(GetParam().first, kBytes);
  ASSERT_TRUE(src.ok()) << src.status();
  auto dst = GpuBuffer::Allocate(GetParam().second, kBytes);
  ASSERT_TRUE(dst.ok()) << dst.status();
  std::mt19937_64 rng(7);
  std::vector<uint8_t> source(kBytes), poison(kBytes, 0xA5);
  for (auto& x : source) x = static_cast<uint8_t>(rng());
  ASSERT_TRUE((*src)->Write(source).ok());
  ASSERT_TRUE((*dst)->Write(poison).ok());
  // 1500 spans, laid out without overlap: sizes 0..40 KiB and a few large ones;
  // offsets aligned, equally misaligned, or differently misaligned.
  std::vector<CopySpan> spans;
  std::vector<std::pair<size_t, size_t>> regions;  // (dst offset, bytes)
  size_t src_at = 0, dst_at = 0;
  for (int i = 0; i < 1500; ++i) {
    size_t bytes = rng() % 40000;
    if (i % 500 == 0) bytes = 1 << 20;
    if (i % 97 == 0) bytes = 0;
    const int kind = i % 3;
    const size_t src_off = src_at + (kind == 0 ? 0 : rng() % 16);
    const size_t dst_off = dst_at + (kind == 0 ? 0 : kind == 1 ? (src_off & 15) : rng() % 16);
    if (src_off + bytes > kBytes || dst_off + bytes > kBytes) break;
    spans.push_back({(*src)->data() + src_off, (*dst)->data() + dst_off, bytes});
    regions.push_back({dst_off, bytes});
    src_at = (src_off + bytes + 15) / 16 * 16 + 16;
    dst_at = (dst_off + bytes + 15) / 16 * 16 + 16 * (1 + rng() % 4);
  }
  ASSERT_EQ(spans.size(), size_t{1500});
  // Calls of every launch size class (8, 128 and 1024 spans a launch) and their edges; the last
  // call takes the rest, more than one launch.
  size_t first = 0;
  for (size_t count : {1, 7, 8, 9, 127, 128, 129}) {
    ASSERT_TRUE((*copier)->Enqueue(absl::MakeConstSpan(spans).subspan(first, count), nullptr).ok());
    first += count;
  }
  ASSERT_GT(spans.size() - first, size_t{BatchedCopier::kSpansPerLaunch});
  ASSERT_TRUE((*copier)->Enqueue(absl::MakeConstSpan(spans).subspan(first), nullptr).ok());
  ASSERT_TRUE(BatchedCopier::Synchronize(nullptr).ok());
  const absl::StatusOr<std::vector<uint8_t>> got = (*dst)->Read();
  ASSERT_TRUE(got.ok()) << got.status();
  std::vector<uint8_t> want = poison;
  for (size_t i = 0; i < spans.size(); ++i) {
    const size_t src_off = static_cast<const uint8_t*>(spans[i].src) - (*src)->data();
    std::memcpy(want.data() + regions[i].first, source.data() + src_off, regions[i].second);
  }
  for (size_t i = 0; i < kBytes; ++i) {
    ASSERT_EQ((*got)[i], want[i]) << "byte " << i << " of the destination";
  }
}

std::string DirectionName(const ::testing::TestParamInfo<std::pair<Mem, Mem>>& info) {
  auto name = [](Mem m) { return m == Mem::kDevice ? std::string("device") : std::string("host"); };
  return name(info.param.first) + "_to_" + name(info.param.second);
}

INSTANTIATE_TEST_SUITE_P(Directions, BatchedCopyGpuTest,
                         ::testing::Values(std::make_pair(Mem::kDevice, Mem::kMappedHost),
                                           std::make_pair(Mem::kMappedHost, Mem::kDevice),
                                           std::make_pair(Mem::kDevice, Mem::kDevice)),
                         DirectionName);

}  // namespace
}  // namespace kvtier::kernels
