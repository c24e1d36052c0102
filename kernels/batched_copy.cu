// The batched copy kernel. Spans travel as one __grid_constant__ kernel parameter, in the smallest
// of three sizes that holds the launch's spans (8, 128 or 1024 spans: 192 B, 3 KiB, 24 KiB; large
// parameters need CUDA 12.1+ and sm_70+): every byte of it is copied into each launch, and 24 KiB
// cost about 3 us a launch on the H100 (docs/PERFORMANCE.md, "small launches"). Grid: x = 32 KiB
// chunks of a span, y = span. Each thread moves 16-byte vectors, with all of its loads issued
// before its stores so that several PCIe reads are in flight when the source is mapped host memory;
// spans whose source and destination are misaligned against each other fall back to byte copies.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/batched_copy_launch.h"

namespace kvtier::kernels::internal {
namespace {

constexpr int kThreads = 256;
constexpr int kVectorsPerThread = 8;  // 8 x 16 B in flight per thread
constexpr uint64_t kChunkBytes = uint64_t{kThreads} * kVectorsPerThread * 16;  // 32 KiB

template <int kSpans>
struct SpanBatch {
  CopySpan spans[kSpans];
};

template <int kSpans>
__global__ void __launch_bounds__(kThreads)
    BatchedCopyKernel(const __grid_constant__ SpanBatch<kSpans> batch) {
  const CopySpan span = batch.spans[blockIdx.y];
  const uint64_t begin = uint64_t{blockIdx.x} * kChunkBytes;
  if (begin >= span.bytes) return;
  const uint64_t end = begin + kChunkBytes < span.bytes ? begin + kChunkBytes : span.bytes;
  const auto* src = static_cast<const uint8_t*>(span.src);
  auto* dst = static_cast<uint8_t*>(span.dst);
  const uintptr_t s = reinterpret_cast<uintptr_t>(src);
  const uintptr_t d = reinterpret_cast<uintptr_t>(dst);
  if (((s ^ d) & 15) != 0) {  // cannot both be 16-byte aligned: bytes
    for (uint64_t i = begin + threadIdx.x; i < end; i += kThreads) dst[i] = src[i];
    return;
  }
  // Vectors cover [vb, ve): 16-byte aligned in both buffers (a = the span's first aligned
  // offset); the bytes of the chunk before vb and from ve on go one by one.
  const uint64_t a = ((16 - (s & 15)) & 15) < span.bytes ? ((16 - (s & 15)) & 15) : span.bytes;
  const uint64_t span_vector_end = a + ((span.bytes - a) & ~uint64_t{15});
  uint64_t vb = begin > a ? begin : a;
  vb = a + ((vb - a + 15) & ~uint64_t{15});
  if (vb > end) vb = end;
  uint64_t ve = end < span_vector_end ? end : span_vector_end;
  ve = ve > a ? a + ((ve - a) & ~uint64_t{15}) : a;
  if (ve < vb) ve = vb;
  for (uint64_t i = begin + threadIdx.x; i < vb; i += kThreads) dst[i] = src[i];
  for (uint64_t i = ve + threadIdx.x; i < end; i += kThreads) dst[i] = src[i];
  if (ve == vb) return;
  const auto* vsrc = reinterpret_cast<const uint4*>(src + vb);
  auto* vdst = reinterpret_cast<uint4*>(dst + vb);
  const uint64_t vectors = (ve - vb) / 16;
  uint4 v[kVectorsPerThread];
#pragma unroll
  for (int k = 0; k < kVectorsPerThread; ++k) {
    const uint64_t i = threadIdx.x + uint64_t{k} * kThreads;
    if (i < vectors) v[k] = vsrc[i];
  }
#pragma unroll
  for (int k = 0; k < kVectorsPerThread; ++k) {
    const uint64_t i = threadIdx.x + uint64_t{k} * kThreads;
    if (i < vectors) vdst[i] = v[k];
  }
}

template <int kSpans>
int Launch(const CopySpan* spans, int count, void* stream) {
  SpanBatch<kSpans> batch;
  uint64_t max_bytes = 0;
  for (int i = 0; i < count; ++i) {
    batch.spans[i] = spans[i];
    if (spans[i].bytes > max_bytes) max_bytes = spans[i].bytes;
  }
  if (max_bytes == 0) return 0;
  const uint64_t chunks = (max_bytes + kChunkBytes - 1) / kChunkBytes;
  if (chunks > 0x7fffffffu) return static_cast<int>(cudaErrorInvalidValue);
  const dim3 grid(static_cast<unsigned>(chunks), static_cast<unsigned>(count));
  BatchedCopyKernel<kSpans><<<grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(batch);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

int LaunchBatchedCopy(const CopySpan* spans, int count, void* stream) {
  static_assert(BatchedCopier::kSpansPerLaunch == 1024);
  if (count <= 0) return 0;
  if (count <= 8) return Launch<8>(spans, count, stream);
  if (count <= 128) return Launch<128>(spans, count, stream);
  return Launch<1024>(spans, count, stream);
}

}  // namespace kvtier::kernels::internal
