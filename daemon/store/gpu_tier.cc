// GpuTier and HotCodec: device memory for hot pages and the encode that demotes them.
#include "daemon/store/gpu_tier.h"

#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "codec/codec.h"
#include "common/status_macros.h"
#include "kernels/device.h"

namespace kvtier::store {

absl::StatusOr<std::unique_ptr<HotCodec>> HotCodec::Create(const codec::PageLayout& layout,
                                                           const codec::CodecSpec& spec) {
  auto hot = std::make_unique<HotCodec>();
  KVTIER_ASSIGN_OR_RETURN(hot->plan, codec::MakeBlockPlan(layout, spec));
  KVTIER_ASSIGN_OR_RETURN(hot->codec, kernels::GpuNvfp4Codec::Create(hot->plan));
  hot->page_bytes = codec::FlatPageBytes(hot->plan.layout);
  // Cannot happen: a header has 32 bytes per buffer, a page at most two exponents.
  if (static_cast<size_t>(hot->codec->exponents_per_page()) > hot->plan.header_bytes) {
    return absl::InternalError("the block header is too small to stage the scale exponents");
  }
  return hot;
}

absl::Status HotCodec::EnqueueEncode(const uint8_t* page, uint8_t* block, void* stream) const {
  return codec->EncodePayloads(page, page_bytes, block, plan.block_bytes, 1,
                               reinterpret_cast<int8_t*>(block), stream);
}

void HotCodec::Seal(uint8_t* block) const {
  std::vector<int8_t> exps(codec->exponents_per_page());
  std::memcpy(exps.data(), block, exps.size());
  codec->SealBlock({block, plan.block_bytes}, exps);
}

absl::Status HotCodec::EncodeToHost(int device, const uint8_t* page, uint8_t* block) const {
  KVTIER_RETURN_IF_ERROR(kernels::UseDevice(device));
  void* stream = kernels::PerThreadStream();
  KVTIER_RETURN_IF_ERROR(EnqueueEncode(page, block, stream));
  KVTIER_RETURN_IF_ERROR(kernels::SynchronizeStream(stream));
  Seal(block);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<GpuTier>> GpuTier::Create(int device, uint64_t capacity_bytes,
                                                         uint64_t chunk_bytes) {
  if (!kernels::BuiltWithCuda()) {
    return absl::UnimplementedError(
        "a GPU tier was asked for, but kvtier was built without CUDA (KVTIER_CUDA=OFF or no nvcc)");
  }
  KVTIER_ASSIGN_OR_RETURN(std::vector<kernels::DeviceInfo> devices, kernels::ListDevices());
  if (device < 0 || static_cast<size_t>(device) >= devices.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "GPU tier: no CUDA device %d (this process sees %d)", device, devices.size()));
  }
  KVTIER_ASSIGN_OR_RETURN(bool host_pointers, kernels::HostPointersUsableOnDevice(device));
  if (!host_pointers) {
    return absl::UnavailableError(absl::StrFormat(
        "GPU tier: device %d (%s) cannot use registered host memory at its host address, which "
        "the fused encode into the host tier needs",
        device, devices[device].name));
  }
  KVTIER_ASSIGN_OR_RETURN(SlotAllocator slots,
                          SlotAllocator::Create(capacity_bytes, chunk_bytes, kSlotAlignment));
  KVTIER_ASSIGN_OR_RETURN(void* memory,
                          kernels::AllocateDeviceMemory(device, slots.capacity_bytes()));
  return std::unique_ptr<GpuTier>(
      new GpuTier(device, static_cast<uint8_t*>(memory), std::move(slots)));
}

GpuTier::~GpuTier() { kernels::FreeDeviceMemory(data_); }

}  // namespace kvtier::store
