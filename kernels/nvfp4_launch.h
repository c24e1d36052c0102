// Internal: plain-type descriptors and launchers of the fused NVFP4 kernels (no Abseil, no CUDA
// types), shared by nvfp4_kernels.cu and the host wrapper nvfp4_gpu_codec_cuda.cc.
#ifndef KVTIER_KERNELS_NVFP4_LAUNCH_H_
#define KVTIER_KERNELS_NVFP4_LAUNCH_H_

#include <cstdint>

namespace kvtier::kernels::internal {

inline constexpr int kMaxGpuBuffers = 224;
inline constexpr int kMaxZeroRanges = 240;

// One buffer of a page, as the kernels see it (offsets from the page / block start).
struct GpuBuffer {
  uint64_t hot_offset;        // first row of the buffer in the hot page
  uint64_t row_stride_bytes;  // between row starts in the hot page
  uint64_t rows;
  uint64_t data_offset;  // packed E2M1 codes
  uint64_t scale_offset;
  uint64_t row_lossless_offset;
  uint64_t whole_offset;      // a lossless buffer's rows
  uint64_t scale_exp_offset;  // the buffer's scale exponent (int8) in the block header
  uint32_t row_lossless_bytes;
  uint32_t head_dim;
  uint32_t quant_start;
  uint32_t quant_len;
  uint8_t dtype;  // codec::DType value
  uint8_t esize;  // bytes per element
  uint8_t quantized;
  uint8_t passes;  // 1 nvfp4, 2 nvfp4x2 (plane 2 follows plane 1 in the codes and the scales)
};

struct ZeroRange {
  uint64_t offset;
  uint64_t bytes;
};

struct GpuPlan {
  GpuBuffer buffers[kMaxGpuBuffers];
  ZeroRange zeros[kMaxZeroRanges];
  int buffer_count;
  int zero_count;
  int exps_per_page;  // buffer_count * the largest pass count: k of buffer b at b, k2 at
                      // buffer_count + b
  int target_ctas;    // 0: split buffers among CTAs only in grids of under 16 CTAs, aiming
                      // for two per SM; > 0: aim for this many in any grid (1: never split)
};

// Encodes `pages` pages: page p's hot bytes start at hot_base + p * hot_stride, its block at
// cold_base + p * cold_stride (device-accessible addresses). Writes every payload byte of every
// block (not the header) and the buffer exponents into scale_exp[p * exps_per_page + ...] (device-
// accessible; see GpuPlan). Returns a cudaError_t value.
// `plan` is read on the host (grid, shared memory); the kernels read `device_plan`, a copy of it
// in the current device's memory (fields but target_ctas).
int LaunchNvfp4Encode(const GpuPlan& plan, const GpuPlan* device_plan, const uint8_t* hot_base,
                      uint64_t hot_stride, uint8_t* cold_base, uint64_t cold_stride, int pages,
                      int8_t* scale_exp, void* stream);
// Decodes: reads each buffer's exponents from the block header (GpuBuffer::scale_exp_offset, and
// the residual exponent in the byte after it).
int LaunchNvfp4Decode(const GpuPlan& plan, const GpuPlan* device_plan, const uint8_t* cold_base,
                      uint64_t cold_stride, uint8_t* hot_base, uint64_t hot_stride, int pages,
                      void* stream);

}  // namespace kvtier::kernels::internal

#endif  // KVTIER_KERNELS_NVFP4_LAUNCH_H_
