// The conversion encode (device::EncodeGroupByConversion: fl(|x| / (S·P)) rounded to E2M1 by
// cvt.rn.satfinite.e2m1x2 on Blackwell, by the same rounding in software elsewhere) against the
// threshold encode the kernels otherwise use (MakeThresholds + EncodeValue, FORMAT.md §5.4): for
// every BF16 and every FP16 bit pattern, every scale code and a range of buffer exponents whose
// grid is exact, the codes must be equal. On sm_90 this checks the argument that makes the
// Blackwell path byte-identical (no quotient rounds onto or across a midpoint); on sm_100a it
// checks the hardware conversion itself. The paired-compare encode (device::
// EncodeGroupByHalfCompare, every target) is checked the same way on every scale code where
// HalfCompareOk holds.
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/nvfp4_device.cuh"

namespace kvtier::kernels::device {
namespace {

struct Counts {
  unsigned long long groups_checked;
  unsigned long long mismatches;
  unsigned int first_bad_pattern;
  int first_bad_scale;
  unsigned long long half_groups_checked;
  unsigned long long half_mismatches;
  unsigned int half_first_bad_pattern;
  int half_first_bad_scale;
};

// Block (s, ki), thread t: the 16 patterns 16t ... 16t + 15 as one group (4,096 groups cover every
// 16-bit pattern), decoded from `domain`, encoded both ways for scale code s and exponent ks[ki].
__global__ void CompareKernel(int domain, const int* ks, Counts* counts) {
  const int s = static_cast<int>(blockIdx.x);
  const float p = ldexpf(1.0f, -ks[blockIdx.y]);
  if (!GridIsExact(domain, s, p)) return;
  float threshold[7];
  MakeThresholds(domain, s, p, threshold);
  const bool half = HalfCompareOk(domain, s, p);
  uint32_t half_threshold[7] = {0, 0, 0, 0, 0, 0, 0};
  if (half) MakeHalfThresholds(domain, s, p, half_threshold);
  for (unsigned t = threadIdx.x; t < 4096; t += blockDim.x) {
    float x[16];
    uint32_t words[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int j = 0; j < 16; ++j) {
      const uint16_t bits = static_cast<uint16_t>(t * 16 + j);
      x[j] = domain == kBf16 ? Bf16ToFloat(bits) : Fp16ToFloat(bits);
      words[j / 2] |= uint32_t{bits} << (16 * (j % 2));
    }
    uint32_t want[2] = {0, 0}, got[2];
    for (int j = 0; j < 16; ++j) {
      want[j / 8] |= uint32_t{EncodeValue(threshold, x[j])} << (4 * (j % 8));
    }
    EncodeGroupByConversion(x, ScaleValue(s), p, got);
    atomicAdd(&counts->groups_checked, 1ull);
    if (want[0] != got[0] || want[1] != got[1]) {
      if (atomicAdd(&counts->mismatches, 1ull) == 0) {
        counts->first_bad_pattern = t * 16;
        counts->first_bad_scale = s;
      }
    }
    if (!half) continue;
    EncodeGroupByHalfCompare(words, domain == kBf16, half_threshold, got);
    atomicAdd(&counts->half_groups_checked, 1ull);
    if (want[0] != got[0] || want[1] != got[1]) {
      if (atomicAdd(&counts->half_mismatches, 1ull) == 0) {
        counts->half_first_bad_pattern = t * 16;
        counts->half_first_bad_scale = s;
      }
    }
  }
}

class E2m1ConversionTest : public ::testing::TestWithParam<int> {};

TEST_P(E2m1ConversionTest, MatchesTheThresholdEncodeForEveryPattern) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    GTEST_SKIP() << "no CUDA device";
  }
  const int domain = GetParam();
  const std::vector<int> ks = {-125, -116, -60, -20, -5, 0, 3, 11, 20, 60, 116, 125};
  int* dev_ks = nullptr;
  Counts* counts = nullptr;
  ASSERT_EQ(cudaMalloc(&dev_ks, ks.size() * sizeof(int)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dev_ks, ks.data(), ks.size() * sizeof(int), cudaMemcpyHostToDevice),
            cudaSuccess);
  ASSERT_EQ(cudaMallocManaged(&counts, sizeof(Counts)), cudaSuccess);
  *counts = Counts{0, 0, 0, -1, 0, 0, 0, -1};
  CompareKernel<<<dim3(kMaxScaleCode + 1, ks.size()), 256>>>(domain, dev_ks, counts);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  // Every scale code with an exact grid for at least k = 0 and 3, both formats.
  EXPECT_GT(counts->groups_checked, 2ull * 100 * 4096);
  EXPECT_EQ(counts->mismatches, 0ull) << "first at patterns " << counts->first_bad_pattern
                                      << "..+15, scale code " << counts->first_bad_scale;
  EXPECT_GT(counts->half_groups_checked, 2ull * 90 * 4096);
  EXPECT_EQ(counts->half_mismatches, 0ull)
      << "paired compares: first at patterns " << counts->half_first_bad_pattern
      << "..+15, scale code " << counts->half_first_bad_scale;
  std::printf(
      "%s: %llu groups of 16 compared, %llu differ (hardware conversion: %d); paired "
      "compares: %llu groups compared, %llu differ\n",
      domain == kBf16 ? "bf16" : "fp16", counts->groups_checked, counts->mismatches, KVTIER_HW_E2M1,
      counts->half_groups_checked, counts->half_mismatches);
  cudaFree(dev_ks);
  cudaFree(counts);
}

INSTANTIATE_TEST_SUITE_P(Formats, E2m1ConversionTest, ::testing::Values(kBf16, kFp16));

}  // namespace
}  // namespace kvtier::kernels::device
