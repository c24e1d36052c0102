// Fused NVFP4 encode and decode kernels (first version: nvfp4 and nvfp4+rope, BF16/FP16/FP8).
// One CTA per (buffer, page). Encode reads the buffer twice from GPU memory (once for the buffer
// maximum, once to quantize) and writes each cold byte once, straight to the block (device memory
// or mapped pinned host memory); lossless parts are copied byte for byte and the padding zeroed.
// Decode reads codes and scales from the block and writes the hot rows. Headers and checksums are
// written by the host (nvfp4_gpu_codec.cc).
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/nvfp4_device.cuh"
#include "kernels/nvfp4_launch.h"

namespace kvtier::kernels::internal {
namespace {

constexpr int kThreads = 256;
// The plan travels as one kernel parameter (CUDA 12.1+ allows up to 32,764 bytes).
static_assert(sizeof(GpuPlan) <= 32764, "GpuPlan exceeds the kernel parameter limit");

__device__ __forceinline__ int DomainOf(uint8_t dtype) {
  return dtype == 1 ? device::kBf16 : dtype == 2 ? device::kFp16 : device::kFp8;
}

__device__ __forceinline__ float LoadElement(const uint8_t* p, uint8_t dtype) {
  if (dtype == 3) return device::Fp8ToFloat(p[0]);
  const uint16_t h = static_cast<uint16_t>(p[0] | (p[1] << 8));
  return dtype == 1 ? device::Bf16ToFloat(h) : device::Fp16ToFloat(h);
}

__device__ __forceinline__ void StoreElement(uint8_t* p, uint8_t dtype, float v) {
  if (dtype == 3) {
    p[0] = device::FloatToFp8(v);
    return;
  }
  const uint16_t h = dtype == 1 ? device::FloatToBf16(v) : device::FloatToFp16(v);
  p[0] = static_cast<uint8_t>(h);
  p[1] = static_cast<uint8_t>(h >> 8);
}

// Loads group g of the buffer (16 values of one row's quantized run): 16-byte loads when the
// group is 16-byte aligned (the usual case), element loads otherwise.
__device__ __forceinline__ void LoadGroup(const GpuBuffer& b, const uint8_t* hot, uint64_t g,
                                          float* x) {
  const uint64_t gpr = b.quant_len / 16;
  const uint8_t* p =
      hot + (g / gpr) * b.row_stride_bytes + (b.quant_start + (g % gpr) * 16) * b.esize;
  if (b.esize == 2 && (reinterpret_cast<uintptr_t>(p) & 15) == 0) {
    const uint4 lo = reinterpret_cast<const uint4*>(p)[0];
    const uint4 hi = reinterpret_cast<const uint4*>(p)[1];
    const uint32_t w[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const uint16_t a = static_cast<uint16_t>(w[j]), c = static_cast<uint16_t>(w[j] >> 16);
      x[2 * j] = b.dtype == 1 ? device::Bf16ToFloat(a) : device::Fp16ToFloat(a);
      x[2 * j + 1] = b.dtype == 1 ? device::Bf16ToFloat(c) : device::Fp16ToFloat(c);
    }
    return;
  }
#pragma unroll
  for (int j = 0; j < 16; ++j) x[j] = LoadElement(p + j * b.esize, b.dtype);
}

__device__ __forceinline__ float GroupMax(const float* x) {
  uint32_t m = 0;
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const uint32_t a = __float_as_uint(x[j]) & 0x7fffffffu;
    if (a < 0x7f800000u && a > m) m = a;
  }
  return __uint_as_float(m);
}

// Lossless bytes of a buffer: whole rows of a lossless buffer, or the [prefix][suffix] bytes of
// each row of a quantized one; `to_cold` picks the direction.
__device__ void CopyLossless(const GpuBuffer& b, uint8_t* hot, uint8_t* cold, bool to_cold) {
  const uint64_t row_bytes = uint64_t{b.head_dim} * b.esize;
  if (!b.quantized) {
    const uint64_t total = b.rows * row_bytes;
    for (uint64_t i = threadIdx.x; i < total; i += kThreads) {
      uint8_t* h = hot + (i / row_bytes) * b.row_stride_bytes + i % row_bytes;
      uint8_t* c = cold + b.whole_offset + i;
      if (to_cold)
        *c = *h;
      else
        *h = *c;
    }
    return;
  }
  const uint64_t per_row = b.row_lossless_bytes;
  if (per_row == 0) return;
  const uint64_t prefix = uint64_t{b.quant_start} * b.esize;
  const uint64_t suffix_at = uint64_t{b.quant_start + b.quant_len} * b.esize;
  const uint64_t total = b.rows * per_row;
  for (uint64_t i = threadIdx.x; i < total; i += kThreads) {
    const uint64_t j = i % per_row;
    uint8_t* h =
        hot + (i / per_row) * b.row_stride_bytes + (j < prefix ? j : suffix_at + j - prefix);
    uint8_t* c = cold + b.row_lossless_offset + i;
    if (to_cold)
      *c = *h;
    else
      *h = *c;
  }
}

__global__ void __launch_bounds__(kThreads)
    EncodeKernel(const __grid_constant__ GpuPlan plan, const uint8_t* hot_base, uint64_t hot_stride,
                 uint8_t* cold_base, uint64_t cold_stride, int8_t* scale_exp) {
  const int bi = blockIdx.x;
  const uint64_t page = blockIdx.y;
  const GpuBuffer& b = plan.buffers[bi];
  uint8_t* hot = const_cast<uint8_t*>(hot_base) + page * hot_stride + b.hot_offset;
  uint8_t* cold = cold_base + page * cold_stride;
  if (bi == 0) {
    for (int z = 0; z < plan.zero_count; ++z) {
      for (uint64_t i = threadIdx.x; i < plan.zeros[z].bytes; i += kThreads) {
        cold[plan.zeros[z].offset + i] = 0;
      }
    }
  }
  CopyLossless(b, hot, cold, /*to_cold=*/true);
  if (!b.quantized || b.quant_len == 0) {
    if (threadIdx.x == 0) scale_exp[page * plan.buffer_count + bi] = 0;
    return;
  }
  const uint64_t groups = b.rows * (b.quant_len / 16);
  float x[16];
  uint32_t local = 0;
  for (uint64_t g = threadIdx.x; g < groups; g += kThreads) {
    LoadGroup(b, hot, g, x);
    const uint32_t m = __float_as_uint(GroupMax(x));
    local = m > local ? m : local;
  }
  __shared__ uint32_t block_max;
  if (threadIdx.x == 0) block_max = 0;
  __syncthreads();
  atomicMax(&block_max, local);
  __syncthreads();
  const int k = device::ChooseScaleExp(__uint_as_float(block_max));
  if (threadIdx.x == 0) scale_exp[page * plan.buffer_count + bi] = static_cast<int8_t>(k);
  const float p = ldexpf(1.0f, -k);
  const float q = ldexpf(1.0f, k);
  const int domain = DomainOf(b.dtype);
  float threshold[7];
  for (uint64_t g = threadIdx.x; g < groups; g += kThreads) {
    LoadGroup(b, hot, g, x);
    const float a = GroupMax(x);
    const int s = device::ChooseScaleCode(domain, a, q, p);
    device::MakeThresholds(domain, s, p, threshold);
    uint8_t packed[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      packed[j] = static_cast<uint8_t>(device::EncodeValue(threshold, x[2 * j]) |
                                       (device::EncodeValue(threshold, x[2 * j + 1]) << 4));
    }
    uint8_t* out = cold + b.data_offset + g * 8;
    if ((reinterpret_cast<uintptr_t>(out) & 7) == 0) {  // one 8-byte store (PCIe-friendly)
      uint2 word;
      memcpy(&word, packed, 8);
      *reinterpret_cast<uint2*>(out) = word;
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) out[j] = packed[j];
    }
    cold[b.scale_offset + g] = static_cast<uint8_t>(s);
  }
}

__global__ void __launch_bounds__(kThreads)
    DecodeKernel(const __grid_constant__ GpuPlan plan, const uint8_t* cold_base,
                 uint64_t cold_stride, uint8_t* hot_base, uint64_t hot_stride) {
  const int bi = blockIdx.x;
  const uint64_t page = blockIdx.y;
  const GpuBuffer& b = plan.buffers[bi];
  uint8_t* hot = hot_base + page * hot_stride + b.hot_offset;
  uint8_t* cold = const_cast<uint8_t*>(cold_base) + page * cold_stride;
  CopyLossless(b, hot, cold, /*to_cold=*/false);
  if (!b.quantized || b.quant_len == 0) return;
  const int k = static_cast<int8_t>(cold[b.scale_exp_offset]);
  const float p = ldexpf(1.0f, -k);
  const int domain = DomainOf(b.dtype);
  const uint64_t groups = b.rows * (b.quant_len / 16);
  const uint64_t gpr = b.quant_len / 16;
  // Each iteration loads kDecodeUnroll groups' codes and scales (PCIe reads when the block is in
  // mapped host memory) before decoding any of them, to keep several reads in flight per thread.
  constexpr int kDecodeUnroll = 4;
  for (uint64_t g0 = threadIdx.x; g0 < groups; g0 += uint64_t{kThreads} * kDecodeUnroll) {
    uint8_t all_codes[kDecodeUnroll][8];
    uint8_t all_scales[kDecodeUnroll];
#pragma unroll
    for (int u = 0; u < kDecodeUnroll; ++u) {
      const uint64_t g = g0 + static_cast<uint64_t>(u) * kThreads;
      if (g >= groups) break;
      all_scales[u] = cold[b.scale_offset + g];
      const uint8_t* code_ptr = cold + b.data_offset + g * 8;
      if ((reinterpret_cast<uintptr_t>(code_ptr) & 7) == 0) {  // one 8-byte load when aligned
        const uint2 word = *reinterpret_cast<const uint2*>(code_ptr);
        memcpy(all_codes[u], &word, 8);
      } else {
#pragma unroll
        for (int j = 0; j < 8; ++j) all_codes[u][j] = code_ptr[j];
      }
    }
#pragma unroll
    for (int u = 0; u < kDecodeUnroll; ++u) {
      const uint64_t g = g0 + static_cast<uint64_t>(u) * kThreads;
      if (g >= groups) break;
      const float scale = device::ScaleValue(all_scales[u]);
      const uint8_t* codes = all_codes[u];
      // The 16 possible outputs of the group, in the destination format.
      uint16_t lut[16];
#pragma unroll
      for (int c = 0; c < 8; ++c) {
        const float d = device::Round(domain, __fmul_rn(__fmul_rn(device::E2m1(c), scale), p));
        uint8_t pos[2] = {0, 0}, neg[2] = {0, 0};
        StoreElement(pos, b.dtype, d);
        StoreElement(neg, b.dtype, -d);
        lut[c] = static_cast<uint16_t>(pos[0] | (pos[1] << 8));
        lut[c + 8] = static_cast<uint16_t>(neg[0] | (neg[1] << 8));
      }
      uint8_t* row = hot + (g / gpr) * b.row_stride_bytes;
      uint8_t* out = row + (b.quant_start + (g % gpr) * 16) * b.esize;
      if (b.esize == 2 && (reinterpret_cast<uintptr_t>(out) & 15) == 0) {  // two 16-byte stores
        uint32_t w[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          w[j] = uint32_t{lut[codes[j] & 0xf]} | (uint32_t{lut[codes[j] >> 4]} << 16);
        }
        reinterpret_cast<uint4*>(out)[0] = make_uint4(w[0], w[1], w[2], w[3]);
        reinterpret_cast<uint4*>(out)[1] = make_uint4(w[4], w[5], w[6], w[7]);
        continue;
      }
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        const uint16_t v = lut[(codes[j / 2] >> ((j & 1) * 4)) & 0xf];
        out[j * b.esize] = static_cast<uint8_t>(v);
        if (b.esize == 2) out[j * b.esize + 1] = static_cast<uint8_t>(v >> 8);
      }
    }
  }
}

}  // namespace

int LaunchNvfp4Encode(const GpuPlan& plan, const uint8_t* hot_base, uint64_t hot_stride,
                      uint8_t* cold_base, uint64_t cold_stride, int pages, int8_t* scale_exp,
                      void* stream) {
  if (pages <= 0 || plan.buffer_count <= 0) return 0;
  const dim3 grid(static_cast<unsigned>(plan.buffer_count), static_cast<unsigned>(pages));
  EncodeKernel<<<grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      plan, hot_base, hot_stride, cold_base, cold_stride, scale_exp);
  return static_cast<int>(cudaGetLastError());
}

int LaunchNvfp4Decode(const GpuPlan& plan, const uint8_t* cold_base, uint64_t cold_stride,
                      uint8_t* hot_base, uint64_t hot_stride, int pages, void* stream) {
  if (pages <= 0 || plan.buffer_count <= 0) return 0;
  const dim3 grid(static_cast<unsigned>(plan.buffer_count), static_cast<unsigned>(pages));
  DecodeKernel<<<grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      plan, cold_base, cold_stride, hot_base, hot_stride);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace kvtier::kernels::internal
