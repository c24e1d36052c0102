// The read sweep of hbm_probe.h: a grid-stride loop of 16-byte loads, four in flight per thread,
// XOR-reduced per block and combined with one atomic per block.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/hbm_probe_launch.h"

namespace kvtier::kernels::internal {
namespace {

constexpr int kThreads = 512;

__global__ void __launch_bounds__(kThreads)
    ReadProbeKernel(const uint4* data, uint64_t vectors, unsigned long long* sink) {
  uint32_t acc = 0;
  const uint64_t stride = uint64_t{gridDim.x} * kThreads;
  uint64_t i = uint64_t{blockIdx.x} * kThreads + threadIdx.x;
  for (; i + 3 * stride < vectors; i += 4 * stride) {
    const uint4 a = data[i], b = data[i + stride], c = data[i + 2 * stride],
                d = data[i + 3 * stride];
    acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^
           d.w;
  }
  for (; i < vectors; i += stride) {
    const uint4 a = data[i];
    acc ^= a.x ^ a.y ^ a.z ^ a.w;
  }
#pragma unroll
  for (int off = 16; off >= 1; off >>= 1) acc ^= __shfl_xor_sync(0xffffffffu, acc, off);
  if ((threadIdx.x & 31) == 0) atomicXor(sink, static_cast<unsigned long long>(acc));
}

}  // namespace

int LaunchReadProbe(const void* data, uint64_t bytes, uint64_t* sink, void* stream) {
  int device = 0, sms = 0;
  if (cudaError_t err = cudaGetDevice(&device); err != cudaSuccess) return static_cast<int>(err);
  if (cudaError_t err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
      err != cudaSuccess) {
    return static_cast<int>(err);
  }
  ReadProbeKernel<<<sms * 4, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const uint4*>(data), bytes / 16, reinterpret_cast<unsigned long long*>(sink));
  return static_cast<int>(cudaGetLastError());
}

}  // namespace kvtier::kernels::internal
