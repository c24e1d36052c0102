// BlockSealer in a CUDA build: the template and split plans on the host, the kernel in
// block_seal.cu. Builds without CUDA compile block_sealer_no_cuda.cc instead.
#include "kernels/block_sealer.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/device.h"
#include "kernels/device_query.h"

namespace kvtier::kernels {

absl::StatusOr<std::unique_ptr<BlockSealer>> BlockSealer::Create(const codec::BlockPlan& plan,
                                                                 int exps_per_page, int device) {
  const uint64_t payload = plan.block_bytes - plan.header_bytes;
  if (plan.header_bytes % 16 != 0 || payload % 16 != 0 || plan.header_bytes > plan.block_bytes) {
    return absl::UnimplementedError(
        absl::StrCat("the GPU seal needs a header and payload of whole 16-byte words (header ",
                     plan.header_bytes, ", block ", plan.block_bytes, " bytes)"));
  }
  if (exps_per_page < 0 || exps_per_page > internal::kSealThreads) {
    return absl::InvalidArgumentError(
        absl::StrCat(exps_per_page, " scale exponents a page for the GPU seal"));
  }
  const SealTemplate t = MakeSealTemplate(plan, exps_per_page);
  // One allocation: the template, then (16-byte aligned) the exponents' header offsets.
  const size_t offsets_at = (t.header.size() + 15) / 16 * 16;
  std::vector<uint8_t> bytes(offsets_at + t.exp_offsets.size() * sizeof(int16_t));
  std::memcpy(bytes.data(), t.header.data(), t.header.size());
  if (!t.exp_offsets.empty()) {
    std::memcpy(bytes.data() + offsets_at, t.exp_offsets.data(),
                t.exp_offsets.size() * sizeof(int16_t));
  }
  std::unique_ptr<BlockSealer> sealer(new BlockSealer());
  sealer->device_ = device;
  absl::StatusOr<void*> memory = AllocateDeviceMemory(device, bytes.size());
  if (!memory.ok()) return memory.status();
  sealer->device_header_ = *memory;
  void* stream = PerThreadStream();
  absl::Status copied = CopyAsync(sealer->device_header_, bytes.data(), bytes.size(), stream);
  if (copied.ok()) copied = SynchronizeStream(stream);  // `bytes` is freed on return
  if (!copied.ok()) return copied;
  auto* base = static_cast<uint8_t*>(sealer->device_header_);
  internal::SealKernelPlan& k = sealer->kernel_plan_;
  k.header_template = base;
  k.exp_offsets = reinterpret_cast<const int16_t*>(base + offsets_at);
  k.header_bytes = static_cast<uint32_t>(plan.header_bytes);
  k.payload_crc_offset = static_cast<uint32_t>(codec::kColdBlockPayloadCrcOffset);
  k.header_crc_offset = static_cast<uint32_t>(codec::kColdBlockHeaderCrcOffset);
  k.exps_per_page = static_cast<uint32_t>(exps_per_page);
  k.block_bytes = plan.block_bytes;
  if (!crc::PlanChunks(payload, &k.payload)) {
    return absl::UnimplementedError(
        absl::StrCat("the GPU seal takes payloads up to 64 MiB, not ", payload, " bytes"));
  }
  k.header = crc::PlanSplit(plan.header_bytes, 32);
  return sealer;
}

BlockSealer::~BlockSealer() { FreeDeviceMemory(device_header_); }

uint64_t BlockSealer::ScratchBytes(int count) const {
  return uint64_t(count < 0 ? 0 : count) * kernel_plan_.payload.chunks * sizeof(uint32_t);
}

absl::Status BlockSealer::Enqueue(uint8_t* blocks, uint64_t stride, int count, const int8_t* exps,
                                  uint32_t* scratch, void* stream) const {
  if (kernel_plan_.exps_per_page != 0 && exps == nullptr && count > 0) {
    return absl::InvalidArgumentError("the GPU seal needs the blocks' scale exponents");
  }
  if (int err =
          internal::LaunchSealBlocks(kernel_plan_, blocks, stride, count, exps, scratch, stream);
      err != 0) {
    return absl::InternalError(
        absl::StrCat("seal launch (", count, " blocks): ", internal::ErrorString(err)));
  }
  return absl::OkStatus();
}

}  // namespace kvtier::kernels
