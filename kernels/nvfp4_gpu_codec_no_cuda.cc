// GpuNvfp4Codec in a build without CUDA (CMake compiles this file instead of
// nvfp4_gpu_codec_cuda.cc): Create is Unimplemented, so no codec exists, and the members that
// would launch kernels only say why.
#include "kernels/no_cuda.h"
#include "kernels/nvfp4_gpu_codec.h"
#include "kernels/nvfp4_launch.h"

namespace kvtier::kernels {

// No staging ring is ever allocated.
struct GpuNvfp4Codec::Staging {};

GpuNvfp4Codec::~GpuNvfp4Codec() = default;

absl::StatusOr<std::unique_ptr<GpuNvfp4Codec>> GpuNvfp4Codec::Create(const codec::BlockPlan&) {
  return internal::BuiltWithoutCudaError();
}

absl::Status GpuNvfp4Codec::EncodePayloads(const void*, uint64_t, void*, uint64_t, int, int8_t*,
                                           void*) const {
  return internal::BuiltWithoutCudaError();
}

absl::Status GpuNvfp4Codec::Decode(const void*, uint64_t, void*, uint64_t, int, void*,
                                   HostRead) const {
  return internal::BuiltWithoutCudaError();
}

absl::Status GpuNvfp4Codec::DecodeStaged(const uint8_t*, uint64_t, uint8_t*, uint64_t, int,
                                         void*) const {
  return internal::BuiltWithoutCudaError();
}

absl::Status GpuNvfp4Codec::DecodeGathered(absl::Span<const uint8_t* const>,
                                           absl::Span<uint8_t* const>, void*) const {
  return internal::BuiltWithoutCudaError();
}

}  // namespace kvtier::kernels
