// Fused NVFP4 encode and decode kernels (nvfp4, nvfp4+rope and nvfp4x2; BF16/FP16/FP8).
// One CTA per (buffer, page), or several for small batches (ChunksFor: each takes a share of the
// buffer's groups; encode CTAs each read the whole buffer for its maximum). The plan is in device
// memory (CtaBuffer). Encode has two variants, picked per launch by where the blocks are
// (cudaPointerGetAttributes). Blocks in device memory: it reads the buffer's quantized part once
// from GPU memory into shared memory (cp.async, 16-byte copies; buffers of up to kMaxStageBytes
// whose rows are 16-byte aligned, else it reads GPU memory twice), takes the buffer maximum, then
// quantizes from shared memory. Blocks in host memory (mapped pinned): no staging unless the
// launch splits buffers (StagesBuffer), at most 40 registers (six CTAs per SM, more stores in
// flight over PCIe), and the scale bytes written at the end as 16-byte words. Both write each cold
// byte once, straight to the block, and the same bytes; lossless parts are copied byte for byte and
// the padding zeroed. Decode reads codes and scales from the block in warp tiles of whole 128-byte
// lines and writes the hot rows. Headers and checksums are written by the host
// (nvfp4_gpu_codec.cc). Over 800 lines because encode and decode of the three codecs share the
// device helpers and launch plans here and nvcc compiles the file once; the per-group math is in
// nvfp4_device.cuh.
//
// FP8 groups would take the general scale search of nvfp4_device.cuh (the decoded FP8 grid is
// rounded) for every group. Their inputs have only 127 magnitudes, so each CTA instead evaluates
// that same search once per possible group maximum, and the thresholds once per scale code (as
// magnitude codes: x > threshold iff its code >= the count of codes whose value is <= threshold),
// for its buffer's exponent, and then encodes four values per instruction; decode tabulates the
// 16 outputs of each of the 256 scale bytes. The tables are memos of the same functions, so the
// bytes are those of the general path.
//
// BF16 and FP16 groups whose scale code has an exact grid with normal midpoints (nearly all of
// them) compare their elements with the midpoints two at a time in the element format
// (nvfp4_device.cuh, EncodeGroupByHalfCompare: three paired compares per element, a binary
// search), instead of seven binary32 compares per element; other groups take the thresholds.
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "kernels/nvfp4_device.cuh"
#include "kernels/nvfp4_launch.h"
#include "kernels/nvfp4x2_settle.cuh"

namespace kvtier::kernels::internal {
namespace {

constexpr int kThreads = 256;

// The plan lives in device memory (GpuNvfp4Codec uploads it once per device): a launch passes a
// pointer, not the 23 KiB plan, whose copy into every launch cost about 3 us of host and GPU time
// (docs/PERFORMANCE.md, "small launches"). Each CTA copies its buffer's entry into shared memory
// once; the other fields are read where needed.
static_assert(sizeof(GpuBuffer) % 4 == 0 && sizeof(GpuBuffer) / 4 <= kThreads);
__device__ __forceinline__ const GpuBuffer& CtaBuffer(const GpuPlan* __restrict__ plan, int bi) {
  __shared__ __align__(16) GpuBuffer buffer;
  const auto* from = reinterpret_cast<const uint32_t*>(&plan->buffers[bi]);
  if (threadIdx.x < sizeof(GpuBuffer) / 4) {
    reinterpret_cast<uint32_t*>(&buffer)[threadIdx.x] = from[threadIdx.x];
  }
  __syncthreads();
  return buffer;
}

__device__ __forceinline__ int DomainOf(uint8_t dtype) {
  return dtype == 1 ? device::kBf16 : dtype == 2 ? device::kFp16 : device::kFp8;
}

// The 16 * esize bytes of a group (esize 1 or 2) as 16-byte words: 16-byte loads when aligned
// (the usual case), byte loads otherwise.
__device__ __forceinline__ void LoadGroupWords(const uint8_t* p, int esize, uint4* w) {
  if ((reinterpret_cast<uintptr_t>(p) & 15) == 0) {
    w[0] = reinterpret_cast<const uint4*>(p)[0];
    if (esize == 2) w[1] = reinterpret_cast<const uint4*>(p)[1];
    return;
  }
  uint32_t v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    if (j < 16 * esize) v[j / 4] |= uint32_t{p[j]} << (8 * (j % 4));
  }
  w[0] = make_uint4(v[0], v[1], v[2], v[3]);
  w[1] = make_uint4(v[4], v[5], v[6], v[7]);
}

// The 16 values of a BF16 or FP16 group.
__device__ __forceinline__ void UnpackGroup(const uint4* words, uint8_t dtype, float* x) {
  const uint32_t w[8] = {words[0].x, words[0].y, words[0].z, words[0].w,
                         words[1].x, words[1].y, words[1].z, words[1].w};
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const uint16_t a = static_cast<uint16_t>(w[j]), c = static_cast<uint16_t>(w[j] >> 16);
    x[2 * j] = dtype == 1 ? device::Bf16ToFloat(a) : device::Fp16ToFloat(a);
    x[2 * j + 1] = dtype == 1 ? device::Bf16ToFloat(c) : device::Fp16ToFloat(c);
  }
}

// The largest finite magnitude of a BF16 or FP16 group, as a float (0 when none): magnitudes of
// both formats order like their bits, and inf/NaN bits are the largest.
__device__ __forceinline__ float GroupMax16(const uint4* words, uint8_t dtype) {
  const uint32_t inf = dtype == 1 ? 0x7f807f80u : 0x7c007c00u;
  const uint32_t w[8] = {words[0].x, words[0].y, words[0].z, words[0].w,
                         words[1].x, words[1].y, words[1].z, words[1].w};
  uint32_t m = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const uint32_t a = w[j] & 0x7fff7fffu;
    // a < inf as a float compare in the element format (false for NaN): one instruction on
    // sm_90, where __vcmpgeu2 takes several
    m = __vmaxu2(m, a & device::CompareHalves<false>(dtype == 1, inf, a));
  }
  m = __vmaxu2(m, m >> 16) & 0xffffu;
  return dtype == 1 ? device::Bf16ToFloat(static_cast<uint16_t>(m))
                    : device::Fp16ToFloat(static_cast<uint16_t>(m));
}

// Per byte of four FP8 values: the magnitude code, 0 for NaN (code 0x7f).
__device__ __forceinline__ uint32_t Fp8Magnitudes(uint32_t w) {
  const uint32_t m = w & 0x7f7f7f7fu;
  return m & ~__vcmpeq4(m, 0x7f7f7f7fu);
}

// The magnitude code of the largest finite value of a 16-value FP8 group (FP8 magnitudes order
// like their codes).
__device__ __forceinline__ uint32_t Fp8MaxCode(const uint4& w) {
  uint32_t m = __vmaxu4(__vmaxu4(Fp8Magnitudes(w.x), Fp8Magnitudes(w.y)),
                        __vmaxu4(Fp8Magnitudes(w.z), Fp8Magnitudes(w.w)));
  m = __vmaxu4(m, m >> 16);
  m = __vmaxu4(m, m >> 8);
  return m & 0xffu;
}

// Per CTA, for an FP8 buffer and its exponent: the scale code of every possible group maximum
// and, per scale code, each threshold as a magnitude-code count replicated in four bytes.
struct Fp8EncodeTables {
  uint32_t at_least[device::kMaxScaleCode + 1][7];
  uint8_t scale_of_max[128];
};

// Per CTA, for a BF16 or FP16 buffer and its exponent: MakeThresholds of every scale code, the
// boundaries of NearestScaleCodeOfSixth, and whether ChooseScaleCode's exact path returns a
// nearest code as it is.
struct Encode16Tables {
  // MakeHalfThresholds where half_ok (device::HalfCompareOk), two 16-byte loads per group.
  alignas(16) uint32_t half_threshold[device::kMaxScaleCode + 1][8];
  float threshold[device::kMaxScaleCode + 1][7];
  float boundary[device::kMaxScaleCode];
  uint8_t exact[device::kMaxScaleCode + 1];
  uint8_t grid_exact[device::kMaxScaleCode + 1];  // device::GridIsExact (the conversion path)
  uint8_t half_ok[device::kMaxScaleCode + 1];     // device::HalfCompareOk
};
constexpr uint32_t kTablesBytes =
    ((sizeof(Fp8EncodeTables) > sizeof(Encode16Tables) ? sizeof(Fp8EncodeTables)
                                                       : sizeof(Encode16Tables)) +
     15) /
    16 * 16;

__device__ void BuildEncode16Tables(int d, float p, Encode16Tables* t) {
  const int c = static_cast<int>(threadIdx.x);
  if (c > device::kMaxScaleCode) return;
  device::MakeThresholds(d, c, p, t->threshold[c]);
  if (c < device::kMaxScaleCode) t->boundary[c] = device::Boundary(c);
  const float lo = __fmul_rn(__fmul_rn(6.0f, device::ScaleValue(c - 1 > 1 ? c - 1 : 1)), p);
  const float hi = __fmul_rn(__fmul_rn(6.0f, device::ScaleValue(c + 1 < 0x7e ? c + 1 : 0x7e)), p);
  t->exact[c] = lo >= (d == device::kBf16 ? 0x1p-126f : 0x1p-14f) &&
                hi <= (d == device::kBf16 ? 0x1.FEp127f : 65504.0f);
  t->grid_exact[c] = device::GridIsExact(d, c, p);
  t->half_ok[c] = device::HalfCompareOk(d, c, p);
  if (t->half_ok[c]) device::MakeHalfThresholds(d, c, p, t->half_threshold[c]);
}

// device::ChooseScaleCode for BF16/FP16 with the CTA's tables (same steps, same result).
__device__ __forceinline__ int ChooseScaleCode16(int d, float a, float q_scale, float p,
                                                 const Encode16Tables* t) {
  if (!(a > 0.0f)) return 0;
  const float y = __fmul_rn(a, q_scale);
  int c;  // device::NearestScaleCodeOfSixth(y)
  if (!(y > 0.0f)) {
    c = 0;
  } else {
    const float q = __fmul_rn(y, 1.0f / 6.0f);
    if (q >= 448.0f) {
      c = device::kMaxScaleCode;
    } else if (q < 0.015625f) {
      c = static_cast<int>(__fadd_rn(__fmul_rn(q, 512.0f), 0.5f));
    } else {
      const uint32_t u = __float_as_uint(q);
      c = static_cast<int>(((((u >> 23) & 0xffu) - 120u) << 3) | ((u >> 20) & 0x7u));
      if ((u & 0xfffffu) >= 0x80000u) ++c;
    }
    if (c < device::kMaxScaleCode && y > t->boundary[c]) ++c;
    if (c > 0 && y <= t->boundary[c - 1]) --c;
    c = c < device::kMaxScaleCode ? c : device::kMaxScaleCode;
  }
  if (t->exact[c]) return c;
  return device::ChooseScaleCode(d, a, q_scale, p);
}

// Codes of four FP8 values (one per byte, sign in bit 3): EncodeValue of their float values.
__device__ __forceinline__ uint32_t EncodeFp8Word(uint32_t w, const uint32_t* at_least) {
  const uint32_t magnitude = w & 0x7f7f7f7fu;
  const uint32_t nan = __vcmpeq4(magnitude, 0x7f7f7f7fu);
  const uint32_t plus_one = magnitude + 0x01010101u;  // no carries: bytes <= 0x80
  uint32_t c = 0;
#pragma unroll
  for (int i = 0; i < 7; ++i) c += __vcmpgtu4(plus_one, at_least[i]) & 0x01010101u;
  return (c | ((w >> 4) & 0x08080808u)) & ~nan;
}

// Two code bytes per output byte (the first in the low nibble): bytes 0 and 2 of c | c >> 4.
__device__ __forceinline__ uint32_t PackCodes(uint32_t lo, uint32_t hi) {
  return __byte_perm(lo | (lo >> 4), hi | (hi >> 4), 0x6420);
}

__device__ __forceinline__ void CopyToShared16(void* shared, const void* global) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(global) : "memory");
}

__device__ __forceinline__ void WaitCopiesToShared() {
  asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::: "memory");
}

// Largest staged quantized part (groups * 16 * esize bytes, plus kStagePad for 2-byte types).
constexpr uint32_t kMaxStageBytes = 75 * 1024;
// Words 0 and 1 of 2-byte groups go to two arrays (conflict-free 16-byte shared reads); the pad
// between them keeps the 16-byte copies into them conflict-free too.
constexpr uint32_t kStagePad = 64;

__host__ __device__ __forceinline__ uint64_t StageBytes(const GpuBuffer& b) {
  const uint64_t groups = b.rows * (b.quant_len / 16);
  return groups * 16 * b.esize + (b.esize == 2 ? kStagePad : 0);
}

// Blocks in mapped host memory: the encode kernel stages nothing (a staged buffer's shared memory
// costs CTAs per SM, so fewer stores in flight over PCIe; the second read of the hot bytes comes
// from L2) and, for buffers of up to kMaxGatherScales groups, gathers the scale bytes in shared
// memory and writes them at the end as whole 16-byte words (a warp's one-byte stores cover only
// 32 bytes: a short write over PCIe).
constexpr bool kGatherScales = true;
// CTAs per SM the host variant is compiled for (at most 40 registers; 4 at its natural 64).
constexpr int kHostEncodeCtas = 6;
constexpr uint32_t kMaxGatherScales = 16 * 1024;

__host__ __device__ __forceinline__ bool GatherScales(const GpuBuffer& b) {
  return kGatherScales && b.rows * (b.quant_len / 16) <= kMaxGatherScales;
}

// Whether the encode stages a buffer's quantized part in shared memory (when its rows are 16-byte
// aligned): always for blocks in device memory; for blocks in host memory only in launches that
// split buffers among CTAs (`chunked`), where each CTA reads the whole buffer for its maximum and
// the staging's copies, all in flight at once, replace a loop of dependent loads.
__host__ __device__ __forceinline__ bool StagesBuffer(const GpuBuffer& b, bool to_host,
                                                      bool chunked) {
  return (!to_host || chunked) && StageBytes(b) <= kMaxStageBytes;
}

// Where the gathered scale bytes (blocks in host memory) start in dynamic shared memory: after
// the tables and the staged buffer.
__host__ __device__ __forceinline__ uint32_t GatherAt(const GpuBuffer& b, bool staged) {
  return kTablesBytes + (staged ? static_cast<uint32_t>((StageBytes(b) + 15) / 16 * 16) : 0);
}

// Dynamic shared memory the encode kernel needs for a buffer (to_host: blocks in host memory).
__host__ __device__ __forceinline__ uint32_t SharedBytes(const GpuBuffer& b, bool to_host,
                                                         bool chunked) {
  if (!b.quantized || b.quant_len == 0) return 0;
  const uint32_t bytes = GatherAt(b, StagesBuffer(b, to_host, chunked));
  const uint64_t groups = b.rows * (b.quant_len / 16);
  return bytes + (to_host && GatherScales(b) ? static_cast<uint32_t>((groups + 15) / 16 * 16) : 0);
}

// A buffer's CTAs: blockIdx.z of gridDim.z (chunks of its groups, for small batches).
__device__ __forceinline__ uint32_t Chunk() { return blockIdx.z; }
__device__ __forceinline__ uint32_t Chunks() { return gridDim.z; }

// Lossless bytes of a buffer: whole rows of a lossless buffer, or the [prefix][suffix] bytes of
// each row of a quantized one; `to_cold` picks the direction. The buffer's CTAs share the bytes.
__device__ void CopyLossless(const GpuBuffer& b, uint8_t* hot, uint8_t* cold, bool to_cold) {
  const uint64_t row_bytes = uint64_t{b.head_dim} * b.esize;
  const uint64_t first = uint64_t{Chunk()} * kThreads + threadIdx.x;
  const uint64_t step = uint64_t{kThreads} * Chunks();
  if (!b.quantized) {
    const uint64_t total = b.rows * row_bytes;
    for (uint64_t i = first; i < total; i += step) {
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
  for (uint64_t i = first; i < total; i += step) {
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

// The 16 values of a group as binary32 (BF16, FP16 or FP8 words).
__device__ __forceinline__ void GroupValues(const uint4* w, uint8_t dtype, float* x) {
  if (dtype != 1 && dtype != 2) {
    const uint32_t v[4] = {w[0].x, w[0].y, w[0].z, w[0].w};
#pragma unroll
    for (int j = 0; j < 16; ++j)
      x[j] = device::Fp8ToFloat(static_cast<uint8_t>(v[j / 4] >> (8 * (j % 4))));
    return;
  }
  UnpackGroup(w, dtype, x);
}

// The largest finite magnitude of 16 values (0 when none).
__device__ __forceinline__ float FiniteMax(const float* x) {
  float m = 0.0f;
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const float a = fabsf(x[j]);
    m = a <= 3.40282347e38f && a > m ? a : m;
  }
  return m;
}

// One binary32 pass over the 16 values of a group (FORMAT.md §5.3-5.4 with D = binary32): its
// scale code, packed codes and, when `residual` is not null, fl(x - decoded) for finite x (0 for
// NaN and infinities).
__device__ __forceinline__ int Binary32Pass(const float* x, float q, float p, uint32_t* packed,
                                            float* residual) {
  const int s = device::ChooseScaleCode(device::kBinary32, FiniteMax(x), q, p);
  float threshold[7];
  device::MakeThresholds(device::kBinary32, s, p, threshold);
  const float scale = device::ScaleValue(s);
  packed[0] = packed[1] = 0;
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const uint8_t c = device::EncodeValue(threshold, x[j]);
    packed[j / 8] |= uint32_t{c} << (4 * (j % 8));
    if (residual != nullptr) {
      const float d = __fmul_rn(__fmul_rn(device::E2m1(c & 7), scale), p);
      const float v = (c & 8) ? -d : d;
      residual[j] = fabsf(x[j]) <= 3.40282347e38f ? __fsub_rn(x[j], v) : 0.0f;
    }
  }
  return s;
}

// nvfp4x2 (FORMAT.md §5.5) for the CTA's buffer, given pass 1's exponent and the buffer's largest
// finite magnitude: a first sweep reduces the residual's maximum (k2), a second recomputes pass 1
// (deterministic), settles both planes' codes and writes both planes. Each cold byte is written
// once; the hot group is read again for the second sweep (from shared memory when staged, else
// GPU memory / L2).
template <typename LoadGroup>
__device__ void EncodeTwoPasses(const GpuBuffer& b, LoadGroup load, uint32_t groups, float p,
                                float q, float amax, uint8_t* data, uint8_t* scales,
                                int8_t* k2_out) {
  const bool data_aligned = (reinterpret_cast<uintptr_t>(data) & 7) == 0;
  auto store = [&](uint8_t* out, uint64_t codes) {
    if (data_aligned) {
      *reinterpret_cast<uint2*>(out) =
          make_uint2(static_cast<uint32_t>(codes), static_cast<uint32_t>(codes >> 32));
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) out[j] = static_cast<uint8_t>(codes >> (8 * j));
    }
  };
  uint4 w[2];
  float x[16], r[16];
  uint32_t packed[2];
  float local = 0.0f;
  for (uint32_t g = threadIdx.x; g < groups; g += kThreads) {
    load(g, w);
    GroupValues(w, b.dtype, x);
    Binary32Pass(x, q, p, packed, r);
    local = fmaxf(local, FiniteMax(r));
  }
  __shared__ uint32_t residual_max;
  if (threadIdx.x == 0) residual_max = 0;
  __syncthreads();
  const uint32_t bits = __reduce_max_sync(0xffffffffu, __float_as_uint(local));
  if ((threadIdx.x & 31) == 0) atomicMax(&residual_max, bits);
  __syncthreads();
  const float amax2 = __uint_as_float(residual_max);
  const int k2 = device::ChooseScaleExp(amax2);
  if (threadIdx.x == 0) *k2_out = static_cast<int8_t>(k2);
  device::TwoPassGroup tg;
  tg.p1 = p;
  tg.q1 = q;
  tg.p2 = ldexpf(1.0f, -k2);
  tg.q2 = ldexpf(1.0f, k2);
  tg.buffer_a1 = amax;
  tg.buffer_a2 = amax2;
  tg.out = DomainOf(b.dtype);
  uint8_t* data2 = data + uint64_t{groups} * 8;
  uint8_t* scales2 = scales + groups;
  for (uint32_t g = threadIdx.x; g < groups; g += kThreads) {
    load(g, w);
    GroupValues(w, b.dtype, x);
    tg.s1 = Binary32Pass(x, q, p, packed, r);
    tg.scale1 = device::ScaleValue(tg.s1);
    device::MakeThresholds(device::kBinary32, tg.s1, p, tg.t1);
    tg.a1 = FiniteMax(x);
    tg.a2 = FiniteMax(r);
    tg.s2 = device::ChooseScaleCode(device::kBinary32, tg.a2, tg.q2, tg.p2);
    uint64_t codes1 = uint64_t{packed[0]} | uint64_t{packed[1]} << 32, codes2;
    const int s2 = device::SettledPass2(tg, x, r, &codes1, &codes2);
    scales[g] = static_cast<uint8_t>(tg.s1);
    scales2[g] = static_cast<uint8_t>(s2);
    store(data + uint64_t{g} * 8, codes1);
    store(data2 + uint64_t{g} * 8, codes2);
  }
}

// kToHost: the blocks are in host memory (mapped pinned, read over PCIe later); else in device
// memory. Both write the same bytes. kTwoPasses: nvfp4x2 (its own kernels, so that nvfp4's keep
// their registers).
template <bool kToHost, bool kTwoPasses>
__device__ __forceinline__ void Encode(const GpuPlan* __restrict__ plan, const uint8_t* hot_base,
                                       uint64_t hot_stride, uint8_t* cold_base,
                                       uint64_t cold_stride, int8_t* scale_exp) {
  extern __shared__ __align__(16) uint8_t shared[];
  const int bi = blockIdx.x;
  const uint64_t page = blockIdx.y;
  const GpuBuffer& b = CtaBuffer(plan, bi);
  uint8_t* hot = const_cast<uint8_t*>(hot_base) + page * hot_stride + b.hot_offset;
  uint8_t* cold = cold_base + page * cold_stride;
  const bool first_chunk = Chunk() == 0;
  if (bi == 0 && first_chunk) {
    const int zero_count = plan->zero_count;
    for (int z = 0; z < zero_count; ++z) {
      const ZeroRange range = plan->zeros[z];
      for (uint64_t i = threadIdx.x; i < range.bytes; i += kThreads) cold[range.offset + i] = 0;
    }
  }
  CopyLossless(b, hot, cold, /*to_cold=*/true);
  const int buffer_count = plan->buffer_count;
  const int exps_per_page = plan->exps_per_page;
  int8_t* exps = scale_exp + page * exps_per_page;
  if (threadIdx.x == 0 && first_chunk && exps_per_page > buffer_count) {
    exps[buffer_count + bi] = 0;  // k2, for nvfp4x2 plans; EncodeTwoPasses overwrites it
  }
  if (!b.quantized || b.quant_len == 0) {
    if (threadIdx.x == 0 && first_chunk) exps[bi] = 0;
    return;
  }
  const int esize = b.esize;
  const bool fp8 = esize == 1;
  const uint32_t gpr = b.quant_len / 16;
  const uint32_t groups = static_cast<uint32_t>(b.rows) * gpr;
  const uint32_t group_bytes = 16u * esize;
  const uint8_t* quant = hot + uint64_t{b.quant_start} * esize;
  auto* tables = reinterpret_cast<Fp8EncodeTables*>(shared);
  auto* tables16 = reinterpret_cast<Encode16Tables*>(shared);
  uint8_t* stage = shared + kTablesBytes;
  const uint32_t word1_at = groups * 16 + kStagePad;  // 2-byte types: where words 1 start
  // This CTA's groups [g_begin, g_end): all of them unless the buffer is split into chunks
  // (multiples of 16 groups); every chunk reads the whole buffer for its maximum (from L2).
  const uint32_t per_chunk = (groups + Chunks() * 16 - 1) / (Chunks() * 16) * 16;
  const uint32_t g_begin = min(groups, Chunk() * per_chunk);
  const uint32_t g_end = min(groups, g_begin + per_chunk);
  const bool stages = StagesBuffer(b, kToHost, Chunks() > 1);
  const bool staged =
      stages && ((reinterpret_cast<uintptr_t>(quant) | b.row_stride_bytes) & 15) == 0;
  if (staged) {
    const uint32_t chunks = groups * esize;
    for (uint32_t i = threadIdx.x; i < chunks; i += kThreads) {
      const uint32_t g = fp8 ? i : i >> 1;
      const uint32_t part = fp8 ? 0 : i & 1;
      const uint8_t* src =
          quant + uint64_t{g / gpr} * b.row_stride_bytes + (g % gpr) * group_bytes + part * 16;
      CopyToShared16(stage + part * word1_at + g * 16, src);
    }
    WaitCopiesToShared();
    __syncthreads();
  }
  // The 16-byte words of group g, from shared memory or GPU memory.
  auto load = [&](uint32_t g, uint4* w) {
    if (staged) {
      w[0] = *reinterpret_cast<const uint4*>(stage + g * 16);
      if (!fp8) w[1] = *reinterpret_cast<const uint4*>(stage + word1_at + g * 16);
    } else {
      LoadGroupWords(quant + uint64_t{g / gpr} * b.row_stride_bytes + (g % gpr) * group_bytes,
                     esize, w);
    }
  };
  uint4 w[2];
  uint32_t local = 0;  // float bits (2-byte types) or FP8 magnitude code
  for (uint32_t g = threadIdx.x; g < groups; g += kThreads) {
    load(g, w);
    const uint32_t m = fp8 ? Fp8MaxCode(w[0]) : __float_as_uint(GroupMax16(w, b.dtype));
    local = m > local ? m : local;
  }
  __shared__ uint32_t block_max;
  if (threadIdx.x == 0) block_max = 0;
  __syncthreads();
  local = __reduce_max_sync(0xffffffffu, local);
  if ((threadIdx.x & 31) == 0) atomicMax(&block_max, local);
  __syncthreads();
  const float amax =
      fp8 ? device::Fp8ToFloat(static_cast<uint8_t>(block_max)) : __uint_as_float(block_max);
  const int k = device::ChooseScaleExp(amax);
  if (threadIdx.x == 0 && first_chunk) exps[bi] = static_cast<int8_t>(k);
  const float p = ldexpf(1.0f, -k);
  const float q = ldexpf(1.0f, k);
  const int domain = DomainOf(b.dtype);
  uint8_t* data = cold + b.data_offset;
  uint8_t* scales = cold + b.scale_offset;
  if constexpr (kTwoPasses) {
    EncodeTwoPasses(b, load, groups, p, q, amax, data, scales, &exps[buffer_count + bi]);
    return;
  }
  const bool data_aligned = (reinterpret_cast<uintptr_t>(data) & 7) == 0;
  // Host blocks: the scale bytes gathered in shared memory (after the tables), written by flush.
  uint8_t* gathered = kToHost && GatherScales(b) ? shared + GatherAt(b, stages) : nullptr;
  // (indexed from g_begin: gathered[i] is the scale of group g_begin + i)
  auto flush = [&]() {
    if (gathered == nullptr) return;
    __syncthreads();
    uint8_t* out = scales + g_begin;
    const uint32_t n = g_end - g_begin;
    const uint32_t head =
        (16u - static_cast<uint32_t>(reinterpret_cast<uintptr_t>(out) & 15)) & 15u;
    const uint32_t lead = head < n ? head : n;
    const uint32_t words = (n - lead) / 16;
    for (uint32_t i = threadIdx.x; i < lead; i += kThreads) out[i] = gathered[i];
    for (uint32_t i = threadIdx.x; i < words; i += kThreads) {
      const uint8_t* from = gathered + lead + i * 16;
      uint32_t v[4] = {0, 0, 0, 0};
#pragma unroll
      for (int j = 0; j < 16; ++j) v[j / 4] |= uint32_t{from[j]} << (8 * (j % 4));
      reinterpret_cast<uint4*>(out + lead)[i] = make_uint4(v[0], v[1], v[2], v[3]);
    }
    for (uint32_t i = lead + words * 16 + threadIdx.x; i < n; i += kThreads) out[i] = gathered[i];
  };
  auto store = [&](uint32_t g, uint32_t lo, uint32_t hi, int s) {
    uint8_t* out = data + uint64_t{g} * 8;
    if (data_aligned) {  // one 8-byte store (PCIe-friendly)
      *reinterpret_cast<uint2*>(out) = make_uint2(lo, hi);
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        out[j] = static_cast<uint8_t>(lo >> (8 * j));
        out[4 + j] = static_cast<uint8_t>(hi >> (8 * j));
      }
    }
    if (gathered != nullptr) {
      gathered[g - g_begin] = static_cast<uint8_t>(s);
    } else {
      scales[g] = static_cast<uint8_t>(s);
    }
  };
  if (fp8) {
    if (threadIdx.x <= device::kMaxScaleCode) {
      const int c = static_cast<int>(threadIdx.x);
      tables->scale_of_max[c] = static_cast<uint8_t>(
          device::ChooseScaleCode(domain, device::Fp8ToFloat(static_cast<uint8_t>(c)), q, p));
      float threshold[7];
      device::MakeThresholds(domain, c, p, threshold);
      for (int i = 0; i < 7; ++i) {
        uint32_t lo = 0, hi = device::kMaxScaleCode + 1;  // codes 0..0x7e with value <= t
        while (lo < hi) {
          const uint32_t mid = (lo + hi) / 2;
          if (device::Fp8ToFloat(static_cast<uint8_t>(mid)) <= threshold[i]) {
            lo = mid + 1;
          } else {
            hi = mid;
          }
        }
        tables->at_least[c][i] = lo * 0x01010101u;
      }
    }
    __syncthreads();
    for (uint32_t g = g_begin + threadIdx.x; g < g_end; g += kThreads) {
      load(g, w);
      const int s = tables->scale_of_max[Fp8MaxCode(w[0])];
      uint32_t at_least[7];
#pragma unroll
      for (int i = 0; i < 7; ++i) at_least[i] = tables->at_least[s][i];
      store(g, PackCodes(EncodeFp8Word(w[0].x, at_least), EncodeFp8Word(w[0].y, at_least)),
            PackCodes(EncodeFp8Word(w[0].z, at_least), EncodeFp8Word(w[0].w, at_least)), s);
    }
    flush();
    return;
  }
  BuildEncode16Tables(domain, p, tables16);
  __syncthreads();
  float x[16];
  float threshold[7];
  for (uint32_t g = g_begin + threadIdx.x; g < g_end; g += kThreads) {
    load(g, w);
    const int s = ChooseScaleCode16(domain, GroupMax16(w, b.dtype), q, p, tables16);
    uint32_t packed[2] = {0, 0};
#if KVTIER_HW_E2M1
    if (tables16->grid_exact[s]) {  // the hardware conversion: the same codes (nvfp4_device.cuh)
      UnpackGroup(w, b.dtype, x);
      device::EncodeGroupByConversion(x, device::ScaleValue(s), p, packed);
      store(g, packed[0], packed[1], s);
      continue;
    }
#endif
    if (tables16->half_ok[s]) {  // paired compares in the element format: the same codes
      const uint4 t0 = *reinterpret_cast<const uint4*>(&tables16->half_threshold[s][0]);
      const uint4 t1 = *reinterpret_cast<const uint4*>(&tables16->half_threshold[s][4]);
      const uint32_t t[7] = {t0.x, t0.y, t0.z, t0.w, t1.x, t1.y, t1.z};
      const uint32_t words[8] = {w[0].x, w[0].y, w[0].z, w[0].w, w[1].x, w[1].y, w[1].z, w[1].w};
      device::EncodeGroupByHalfCompare(words, domain == device::kBf16, t, packed);
      store(g, packed[0], packed[1], s);
      continue;
    }
    UnpackGroup(w, b.dtype, x);
#pragma unroll
    for (int i = 0; i < 7; ++i) threshold[i] = tables16->threshold[s][i];
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      packed[j / 8] |= uint32_t{device::EncodeValue(threshold, x[j])} << (4 * (j % 8));
    }
    store(g, packed[0], packed[1], s);
  }
  flush();
}

template <bool kTwoPasses>
__global__ void __launch_bounds__(kThreads)
    EncodeToDeviceKernel(const GpuPlan* __restrict__ plan, const uint8_t* hot_base,
                         uint64_t hot_stride, uint8_t* cold_base, uint64_t cold_stride,
                         int8_t* scale_exp) {
  Encode<false, kTwoPasses>(plan, hot_base, hot_stride, cold_base, cold_stride, scale_exp);
}

// nvfp4x2 runs one CTA per buffer: no occupancy target, the registers for its settled codes.
template <bool kTwoPasses>
__global__ void __launch_bounds__(kThreads, kTwoPasses ? 1 : kHostEncodeCtas)
    EncodeToHostKernel(const GpuPlan* __restrict__ plan, const uint8_t* hot_base,
                       uint64_t hot_stride, uint8_t* cold_base, uint64_t cold_stride,
                       int8_t* scale_exp) {
  Encode<true, kTwoPasses>(plan, hot_base, hot_stride, cold_base, cold_stride, scale_exp);
}

// The hot bytes of group g of a quantized buffer from its 8 code bytes (element 2j in the low
// nibble of byte j) and the CTA's table of the 16 outputs of its scale byte: outputs8 for FP8,
// outputs16 (element bytes as a little-endian uint16_t) for BF16 and FP16.
__device__ __forceinline__ void DecodeGroup(const GpuBuffer& b, uint8_t* hot, uint64_t g,
                                            uint2 word, uint32_t scale_code, bool fp8,
                                            const uint8_t (*outputs8)[16],
                                            const uint16_t (*outputs16)[16]) {
  uint8_t codes[8];
  memcpy(codes, &word, 8);
  const uint64_t gpr = b.quant_len / 16;
  uint8_t* row = hot + (g / gpr) * b.row_stride_bytes;
  uint8_t* out = row + (b.quant_start + (g % gpr) * 16) * b.esize;
  if (fp8) {
    const uint8_t* outputs = outputs8[scale_code & 0xff];
    uint32_t v[4] = {0, 0, 0, 0};
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      v[j / 4] |= uint32_t{outputs[(codes[j / 2] >> ((j & 1) * 4)) & 0xf]} << (8 * (j % 4));
    }
    if ((reinterpret_cast<uintptr_t>(out) & 15) == 0) {
      *reinterpret_cast<uint4*>(out) = make_uint4(v[0], v[1], v[2], v[3]);
    } else {
#pragma unroll
      for (int j = 0; j < 16; ++j) out[j] = static_cast<uint8_t>(v[j / 4] >> (8 * (j % 4)));
    }
    return;
  }
  const uint16_t* lut = outputs16[scale_code & 0xff];
  if (b.esize == 2 && (reinterpret_cast<uintptr_t>(out) & 15) == 0) {  // two 16-byte stores
    uint32_t w[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      w[j] = uint32_t{lut[codes[j] & 0xf]} | (uint32_t{lut[codes[j] >> 4]} << 16);
    }
    reinterpret_cast<uint4*>(out)[0] = make_uint4(w[0], w[1], w[2], w[3]);
    reinterpret_cast<uint4*>(out)[1] = make_uint4(w[4], w[5], w[6], w[7]);
    return;
  }
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const uint16_t v = lut[(codes[j / 2] >> ((j & 1) * 4)) & 0xf];
    out[j * b.esize] = static_cast<uint8_t>(v);
    if (b.esize == 2) out[j * b.esize + 1] = static_cast<uint8_t>(v >> 8);
  }
}

// nvfp4x2 decode (FORMAT.md §5.6): per element the two planes' binary32 values, summed and rounded
// once to the buffer's type. One group per thread; planes 2 follow planes 1.
__device__ void DecodeTwoPasses(const GpuBuffer& b, uint8_t* hot, const uint8_t* data,
                                const uint8_t* scales, uint64_t groups, float p1, float p2) {
  const uint64_t gpr = b.quant_len / 16;
  for (uint64_t g = uint64_t{Chunk()} * kThreads + threadIdx.x; g < groups;
       g += uint64_t{kThreads} * Chunks()) {
    uint8_t codes[2][8];
    float value[2][16];
    for (int plane = 0; plane < 2; ++plane) {
      const uint8_t* c = data + (plane * groups + g) * 8;
      if ((reinterpret_cast<uintptr_t>(c) & 7) == 0) {
        memcpy(codes[plane], c, 8);
      } else {
#pragma unroll
        for (int j = 0; j < 8; ++j) codes[plane][j] = c[j];
      }
      const float scale = device::ScaleValue(scales[plane * groups + g]);
      const float p = plane == 0 ? p1 : p2;
#pragma unroll
      for (int m = 0; m < 8; ++m) {
        value[plane][m] = __fmul_rn(__fmul_rn(device::E2m1(m), scale), p);
        value[plane][m + 8] = -value[plane][m];
      }
    }
    uint8_t* out =
        hot + (g / gpr) * b.row_stride_bytes + (b.quant_start + (g % gpr) * 16) * b.esize;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const int shift = (j & 1) * 4;
      const float y = __fadd_rn(value[0][(codes[0][j / 2] >> shift) & 0xf],
                                value[1][(codes[1][j / 2] >> shift) & 0xf]);
      if (b.esize == 1) {
        out[j] = device::FloatToFp8(y);
      } else {
        const uint16_t v = b.dtype == 1 ? device::FloatToBf16(y) : device::FloatToFp16(y);
        out[2 * j] = static_cast<uint8_t>(v);
        out[2 * j + 1] = static_cast<uint8_t>(v >> 8);
      }
    }
  }
}

// Decode reads the block (mapped host memory over PCIe, or device memory) in warp tiles of 256
// groups: codes 2,048 B as four 16-byte loads per lane (two groups each, 512 contiguous bytes per
// warp instruction) and scales 256 B as one 8-byte load per lane, so every load of a warp covers
// whole 128-byte lines (one-byte scale loads covered 32 bytes: a short read over PCIe). All five
// loads are issued before any is used. Lanes then exchange codes and scales (__shfl_sync) so
// that lane l decodes groups 64u + l and 64u + 32 + l: consecutive lanes write consecutive groups.
constexpr uint32_t kTileGroups = 256;
constexpr int kWarps = kThreads / 32;

struct DecodeTile {
  uint4 codes[4];  // lane l, load u: groups 64u + 2l and 64u + 2l + 1 of the tile
  uint2 scales;    // lane l: scales of groups 8l ... 8l + 7 of the tile
};

__device__ __forceinline__ void LoadDecodeTile(const uint8_t* data, const uint8_t* scales,
                                               uint32_t tile, int lane, DecodeTile* t) {
  const uint4* c = reinterpret_cast<const uint4*>(data + uint64_t{tile} * kTileGroups * 8);
#pragma unroll
  for (int u = 0; u < 4; ++u) t->codes[u] = c[u * 32 + lane];
  t->scales = reinterpret_cast<const uint2*>(scales + uint64_t{tile} * kTileGroups)[lane];
}

// At most 64 registers: four CTAs per SM (the tile's 18 registers would otherwise cost one).
// kTwoPasses: nvfp4x2, its own kernel.
template <bool kTwoPasses>
__global__ void __launch_bounds__(kThreads, 4)
    DecodeKernel(const GpuPlan* __restrict__ plan, const uint8_t* cold_base, uint64_t cold_stride,
                 uint8_t* hot_base, uint64_t hot_stride) {
  const int bi = blockIdx.x;
  const uint64_t page = blockIdx.y;
  const GpuBuffer& b = CtaBuffer(plan, bi);
  uint8_t* hot = hot_base + page * hot_stride + b.hot_offset;
  uint8_t* cold = const_cast<uint8_t*>(cold_base) + page * cold_stride;
  const bool quantized = b.quantized && b.quant_len != 0;
  const uint64_t groups = quantized ? b.rows * (b.quant_len / 16) : 0;
  const uint8_t* data = cold + b.data_offset;
  const uint8_t* scales = cold + b.scale_offset;
  const bool tiled =
      ((reinterpret_cast<uintptr_t>(data) & 15) | (reinterpret_cast<uintptr_t>(scales) & 7)) == 0;
  const uint32_t tiles = tiled && !kTwoPasses ? static_cast<uint32_t>(groups / kTileGroups) : 0;
  const int lane = static_cast<int>(threadIdx.x & 31);
  // The buffer's CTAs share its tiles (warp w of chunk c: tiles c + w * chunks, then every
  // kWarps * chunks, so that few tiles still spread over the CTAs) and its remaining groups.
  const uint32_t tile_step = kWarps * Chunks();
  uint32_t tile = Chunk() + Chunks() * (threadIdx.x / 32);
  DecodeTile t;
  if (tile < tiles) LoadDecodeTile(data, scales, tile, lane, &t);  // in flight during the setup
  CopyLossless(b, hot, cold, /*to_cold=*/false);
  if (!quantized) return;
  const int k = static_cast<int8_t>(cold[b.scale_exp_offset]);
  const float p = ldexpf(1.0f, -k);
  const int domain = DomainOf(b.dtype);
  if constexpr (kTwoPasses) {
    DecodeTwoPasses(b, hot, data, scales, groups, p,
                    ldexpf(1.0f, -static_cast<int8_t>(cold[b.scale_exp_offset + 1])));
    return;
  }
  // The 16 outputs of every scale byte (FP8: one byte each; BF16/FP16: two), computed as the
  // CPU decoder does: the E2M1 value times the scale times 2^-k, rounded to the format.
  __shared__ __align__(16) uint16_t outputs16[256][16];
  auto* outputs8 = reinterpret_cast<uint8_t(*)[16]>(&outputs16[0][0]);
  const bool fp8 = domain == device::kFp8;
  {
    static_assert(kThreads == 256, "one thread per scale byte");
    const int sc = static_cast<int>(threadIdx.x);
    const float scale = device::ScaleValue(sc);
#pragma unroll
    for (int c = 0; c < 8; ++c) {
      const float d = device::Round(domain, __fmul_rn(__fmul_rn(device::E2m1(c), scale), p));
      if (fp8) {
        outputs8[sc][c] = device::FloatToFp8(d);
        outputs8[sc][c + 8] = device::FloatToFp8(-d);
      } else {
        outputs16[sc][c] = b.dtype == 1 ? device::FloatToBf16(d) : device::FloatToFp16(d);
        outputs16[sc][c + 8] = b.dtype == 1 ? device::FloatToBf16(-d) : device::FloatToFp16(-d);
      }
    }
    __syncthreads();
  }
  for (uint32_t first = tile; tile < tiles; tile += tile_step) {
    if (tile != first) LoadDecodeTile(data, scales, tile, lane, &t);
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const uint4 c = t.codes[u];
      uint2 w[2];
      uint32_t sc[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {  // group 64u + 32h + lane of the tile
        const int src = 16 * h + lane / 2;
        const uint32_t x = __shfl_sync(0xffffffffu, c.x, src);
        const uint32_t y = __shfl_sync(0xffffffffu, c.y, src);
        const uint32_t z = __shfl_sync(0xffffffffu, c.z, src);
        const uint32_t v = __shfl_sync(0xffffffffu, c.w, src);
        w[h] = (lane & 1) ? make_uint2(z, v) : make_uint2(x, y);
        const int scale_src = 8 * u + 4 * h + lane / 8;
        const uint32_t sx = __shfl_sync(0xffffffffu, t.scales.x, scale_src);
        const uint32_t sy = __shfl_sync(0xffffffffu, t.scales.y, scale_src);
        sc[h] = (((lane & 4) ? sy : sx) >> (8 * (lane & 3))) & 0xff;
      }
      const uint64_t g = uint64_t{tile} * kTileGroups + 64 * u + lane;
      DecodeGroup(b, hot, g, w[0], sc[0], fp8, outputs8, outputs16);
      DecodeGroup(b, hot, g + 32, w[1], sc[1], fp8, outputs8, outputs16);
    }
  }
  // The groups after the last whole tile (all of them when the sections are not aligned): each
  // iteration loads kDecodeUnroll groups' codes and scales before decoding any of them.
  constexpr int kDecodeUnroll = 4;
  const uint64_t stride = uint64_t{kThreads} * Chunks();
  for (uint64_t g0 = uint64_t{tiles} * kTileGroups + Chunk() * kThreads + threadIdx.x; g0 < groups;
       g0 += stride * kDecodeUnroll) {
    uint2 all_codes[kDecodeUnroll];
    uint8_t all_scales[kDecodeUnroll];
#pragma unroll
    for (int u = 0; u < kDecodeUnroll; ++u) {
      const uint64_t g = g0 + static_cast<uint64_t>(u) * stride;
      if (g >= groups) break;
      all_scales[u] = scales[g];
      const uint8_t* code_ptr = data + g * 8;
      if ((reinterpret_cast<uintptr_t>(code_ptr) & 7) == 0) {  // one 8-byte load when aligned
        all_codes[u] = *reinterpret_cast<const uint2*>(code_ptr);
      } else {
        uint8_t bytes[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) bytes[j] = code_ptr[j];
        memcpy(&all_codes[u], bytes, 8);
      }
    }
#pragma unroll
    for (int u = 0; u < kDecodeUnroll; ++u) {
      const uint64_t g = g0 + static_cast<uint64_t>(u) * stride;
      if (g >= groups) break;
      DecodeGroup(b, hot, g, all_codes[u], all_scales[u], fp8, outputs8, outputs16);
    }
  }
}

// CTAs per (buffer, page). Encode: 1 for grids of kChunkBelowCtas CTAs or more (each chunk
// rereads its whole buffer for the maximum: splitting a 72-buffer page at batch 1 cost 5-10% on
// the H200, docs/PERFORMANCE.md); decode (no rereads): 1 for grids of two CTAs per SM or more.
// Else enough for plan.target_ctas (default two per SM), at most one per `groups_per_cta` groups of
// the largest buffer (encode 128; decode 256, a warp tile) and 64. plan.target_ctas > 0 replaces
// both rules (tests and benchmarks).
constexpr uint64_t kChunkBelowCtas = 16;
unsigned ChunksFor(const GpuPlan& plan, int pages, uint64_t groups_per_cta, bool rereads) {
  const uint64_t ctas = uint64_t(plan.buffer_count) * pages;
  if (rereads && ctas >= kChunkBelowCtas && plan.target_ctas == 0) return 1;
  int target = plan.target_ctas;
  if (target <= 0) {
    int device = 0, sms = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
      (void)cudaGetLastError();
      return 1;
    }
    target = 2 * sms;
  }
  if (ctas >= uint64_t(target)) return 1;
  uint64_t max_groups = 0;
  for (int i = 0; i < plan.buffer_count; ++i) {
    const GpuBuffer& b = plan.buffers[i];
    const uint64_t groups = b.quantized ? b.rows * (b.quant_len / 16) : 0;
    max_groups = groups > max_groups ? groups : max_groups;
  }
  uint64_t chunks = (uint64_t(target) + ctas - 1) / ctas;
  const uint64_t by_size = max_groups / groups_per_cta > 0 ? max_groups / groups_per_cta : 1;
  chunks = chunks < by_size ? chunks : by_size;
  return static_cast<unsigned>(chunks < 64 ? chunks : 64);
}

// cudaFuncSetAttribute(kernel, max dynamic shared memory) once per (device, kernel) for the largest
// size asked so far (it cost 0.35 us a launch on the H100).
int AllowSharedBytes(const void* kernel, int slot, uint32_t bytes) {
  constexpr int kDevices = 64, kKernels = 4;
  static std::atomic<uint32_t> allowed[kDevices][kKernels];
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return static_cast<int>(cudaGetLastError());
  std::atomic<uint32_t>* cached =
      device >= 0 && device < kDevices ? &allowed[device][slot] : nullptr;
  if (cached != nullptr && cached->load(std::memory_order_relaxed) >= bytes) return 0;
  const cudaError_t err =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
  if (err != cudaSuccess) return static_cast<int>(err);
  if (cached != nullptr) {
    uint32_t seen = cached->load(std::memory_order_relaxed);
    while (seen < bytes && !cached->compare_exchange_weak(seen, bytes)) {
    }
  }
  return 0;
}

}  // namespace

int LaunchNvfp4Encode(const GpuPlan& plan, const GpuPlan* device_plan, const uint8_t* hot_base,
                      uint64_t hot_stride, uint8_t* cold_base, uint64_t cold_stride, int pages,
                      int8_t* scale_exp, void* stream) {
  if (pages <= 0 || plan.buffer_count <= 0) return 0;
  // Where the blocks are: device (or managed) memory, or host memory (mapped pinned, or any other
  // host address the GPU can write).
  cudaPointerAttributes attributes{};
  bool to_host = true;
  if (cudaPointerGetAttributes(&attributes, cold_base) == cudaSuccess) {
    to_host = attributes.type != cudaMemoryTypeDevice && attributes.type != cudaMemoryTypeManaged;
  } else {
    (void)cudaGetLastError();  // not a CUDA address: clear the error, treat it as host memory
  }
  // nvfp4x2 needs the whole buffer's residual before its second pass: one CTA per buffer.
  const bool two_passes = plan.exps_per_page > plan.buffer_count;
  const unsigned chunks = two_passes ? 1u : ChunksFor(plan, pages, 128, /*rereads=*/true);
  uint32_t shared_bytes = 0;
  for (int i = 0; i < plan.buffer_count; ++i) {
    const uint32_t bytes = SharedBytes(plan.buffers[i], to_host, chunks > 1);
    shared_bytes = bytes > shared_bytes ? bytes : shared_bytes;
  }
  auto* kernel = to_host ? (two_passes ? EncodeToHostKernel<true> : EncodeToHostKernel<false>)
                         : (two_passes ? EncodeToDeviceKernel<true> : EncodeToDeviceKernel<false>);
  if (shared_bytes > 48 * 1024) {
    const int slot = (to_host ? 2 : 0) + (two_passes ? 1 : 0);
    if (int err = AllowSharedBytes(reinterpret_cast<const void*>(kernel), slot, shared_bytes);
        err != 0) {
      return err;
    }
  }
  const dim3 grid(static_cast<unsigned>(plan.buffer_count), static_cast<unsigned>(pages), chunks);
  kernel<<<grid, kThreads, shared_bytes, static_cast<cudaStream_t>(stream)>>>(
      device_plan, hot_base, hot_stride, cold_base, cold_stride, scale_exp);
  return static_cast<int>(cudaGetLastError());
}

int LaunchNvfp4Decode(const GpuPlan& plan, const GpuPlan* device_plan, const uint8_t* cold_base,
                      uint64_t cold_stride, uint8_t* hot_base, uint64_t hot_stride, int pages,
                      void* stream) {
  if (pages <= 0 || plan.buffer_count <= 0) return 0;
  const dim3 grid(static_cast<unsigned>(plan.buffer_count), static_cast<unsigned>(pages),
                  ChunksFor(plan, pages, kTileGroups, /*rereads=*/false));
  auto* kernel = plan.exps_per_page > plan.buffer_count ? DecodeKernel<true> : DecodeKernel<false>;
  kernel<<<grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      device_plan, cold_base, cold_stride, hot_base, hot_stride);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace kvtier::kernels::internal
