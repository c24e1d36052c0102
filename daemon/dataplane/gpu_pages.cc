// DevicePool and GpuPageCodec: CUDA IPC pools and whole-page encode/decode on the GPU.
#include "daemon/dataplane/gpu_pages.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "codec/crc32c.h"
#include "common/annotate.h"
#include "common/status_macros.h"
#include "kernels/device.h"

namespace kvtier::dataplane {
namespace {
constexpr int kStreams = 8;  // concurrent one-page kernels per engine
}  // namespace

absl::StatusOr<std::unique_ptr<DevicePool>> DevicePool::Open(const std::string& pool_name,
                                                             const CudaIpcMemory& memory,
                                                             uint32_t slots, uint64_t slot_bytes) {
  if (!kernels::BuiltWithCuda()) {
    return absl::UnimplementedError(absl::StrFormat(
        "pool '%s': this kvtierd was built without CUDA and cannot map CUDA IPC pools", pool_name));
  }
  if (memory.handle.size() != kernels::kIpcHandleBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "pool '%s': cuda_ipc.handle has %d bytes, not 64", pool_name, memory.handle.size()));
  }
  if (memory.device_uuid.size() != 16) {
    return absl::InvalidArgumentError(
        absl::StrFormat("pool '%s': cuda_ipc.device_uuid has %d bytes, not 16", pool_name,
                        memory.device_uuid.size()));
  }
  if (slots == 0)
    return absl::InvalidArgumentError(absl::StrFormat("pool '%s': 0 slots", pool_name));
  if (static_cast<unsigned __int128>(slots) * slot_bytes > memory.size_bytes) {
    return absl::FailedPreconditionError(
        absl::StrFormat("pool '%s': size_bytes %d is below %d slots of %d bytes", pool_name,
                        memory.size_bytes, slots, slot_bytes));
  }
  absl::StatusOr<int> device = kernels::DeviceByUuid(memory.device_uuid);
  if (!device.ok()) {
    return absl::FailedPreconditionError(absl::StrFormat("pool '%s' (engine device %d): %s",
                                                         pool_name, memory.device_ordinal,
                                                         device.status().message()));
  }
  absl::StatusOr<void*> mapping = kernels::OpenIpcMemory(*device, memory.handle);
  if (!mapping.ok()) {
    return Annotate(mapping.status(), absl::StrCat("pool '", pool_name, "'"));
  }
  // The pool must lie inside the allocation the handle names: otherwise Offload would read and
  // Onboard write whatever else this process has mapped on the device.
  absl::StatusOr<uint64_t> available = kernels::AllocationBytesFrom(*mapping);
  if (!available.ok() || memory.base_offset_bytes > *available ||
      memory.size_bytes > *available - memory.base_offset_bytes) {
    kernels::CloseIpcMemory(*mapping);
    return absl::InvalidArgumentError(absl::StrFormat(
        "pool '%s': base_offset_bytes %d + size_bytes %d exceed the shared allocation (%s)",
        pool_name, memory.base_offset_bytes, memory.size_bytes,
        available.ok() ? absl::StrCat(*available, " bytes") : available.status().message()));
  }
  std::unique_ptr<DevicePool> pool(new DevicePool());
  pool->mapping_ = *mapping;
  pool->base_ = static_cast<uint8_t*>(*mapping) + memory.base_offset_bytes;
  pool->device_ = *device;
  pool->slots_ = slots;
  pool->slot_bytes_ = slot_bytes;
  return pool;
}

DevicePool::~DevicePool() { kernels::CloseIpcMemory(mapping_); }

bool IsFlatLayout(const codec::PageLayout& layout) {
  if (layout.pools.size() != 1) return false;
  uint64_t offset = 0;
  for (const codec::BufferSpec& b : layout.buffers) {
    if (b.pool != 0 || b.offset_bytes != offset) return false;
    offset += layout.Rows(b) * b.RowStride() * codec::DTypeBytes(b.dtype);
  }
  return offset <= layout.pools[0].slot_bytes;
}

absl::StatusOr<std::unique_ptr<GpuPageCodec>> GpuPageCodec::Create(const codec::BlockPlan& plan,
                                                                   int device) {
  if (!IsFlatLayout(plan.layout)) {
    return absl::InvalidArgumentError(
        "GPU pools need a flat layout: one pool whose buffers lie back to back from offset 0");
  }
  std::unique_ptr<GpuPageCodec> codec(new GpuPageCodec());
  codec->plan_ = plan;
  codec->device_ = device;
  if (plan.spec.codec == codec::CodecId::kRaw) {
    for (const codec::BufferSpec& b : plan.layout.buffers) {
      if (b.RowStride() != b.head_dim) {
        return absl::UnimplementedError(absl::StrFormat(
            "buffer '%s': the GPU raw path needs rows without stride gaps", b.name));
      }
    }
    KVTIER_ASSIGN_OR_RETURN(codec->copier_, kernels::BatchedCopier::Create(device));
  } else if (plan.spec.codec == codec::CodecId::kNvfp4 ||
             plan.spec.codec == codec::CodecId::kNvfp4x2) {
    KVTIER_RETURN_IF_ERROR(kernels::UseDevice(device));
    KVTIER_ASSIGN_OR_RETURN(codec->nvfp4_, kernels::GpuNvfp4Codec::Create(plan));
  } else {
    return absl::UnimplementedError(absl::StrFormat(
        "codec %s has no GPU kernels; register GPU pools with raw, nvfp4 or nvfp4x2",
        plan.spec.ToString()));
  }
  for (int i = 0; i < kStreams; ++i) {
    KVTIER_ASSIGN_OR_RETURN(void* stream, kernels::CreateStream(device));
    codec->streams_.push_back(stream);
  }
  return codec;
}

GpuPageCodec::~GpuPageCodec() {
  for (void* s : streams_) kernels::DestroyStream(s);
}

absl::Status GpuPageCodec::Wait() const {
  absl::Status result;
  for (void* s : streams_) result.Update(kernels::SynchronizeStream(s));
  return result;
}

absl::Status GpuPageCodec::EncodeChunks(absl::Span<const uint8_t* const> pages,
                                        absl::Span<uint8_t* const> blocks, size_t chunk,
                                        std::vector<void*>* done) const {
  KVTIER_RETURN_IF_ERROR(kernels::UseDevice(device_));
  chunk = std::max<size_t>(1, chunk);
  for (size_t first = 0, c = 0; first < pages.size(); first += chunk, ++c) {
    void* stream = streams_[c % streams_.size()];
    const size_t end = std::min(pages.size(), first + chunk);
    if (nvfp4_ != nullptr) {
      for (size_t i = first; i < end; ++i) {
        // The scale exponents go to the block's first bytes; Seal reads them before writing
        // the header over them.
        KVTIER_RETURN_IF_ERROR(nvfp4_->EncodePayloads(
            pages[i], 0, blocks[i], 0, 1, reinterpret_cast<int8_t*>(blocks[i]), stream));
      }
    } else {
      std::vector<kernels::CopySpan> spans;
      spans.reserve((end - first) * plan_.buffers.size());
      for (size_t i = first; i < end; ++i) {
        for (size_t b = 0; b < plan_.buffers.size(); ++b) {
          spans.push_back({pages[i] + plan_.layout.buffers[b].offset_bytes,
                           blocks[i] + plan_.buffers[b].whole_offset,
                           plan_.buffers[b].whole_bytes});
        }
      }
      KVTIER_RETURN_IF_ERROR(copier_->Enqueue(spans, stream));
    }
    absl::StatusOr<void*> event = kernels::CreateEvent(device_);
    if (!event.ok()) return event.status();
    if (absl::Status recorded = kernels::RecordEvent(*event, stream); !recorded.ok()) {
      kernels::DestroyEvent(*event);  // never waited on: its chunk is not sealed
      return recorded;
    }
    done->push_back(*event);
  }
  return absl::OkStatus();
}

void GpuPageCodec::Seal(uint8_t* block) const {
  const absl::Span<uint8_t> span(block, plan_.block_bytes);
  if (nvfp4_ != nullptr) {
    std::vector<int8_t> exps(nvfp4_->exponents_per_page());
    std::memcpy(exps.data(), block, exps.size());
    nvfp4_->SealBlock(span, exps);
    return;
  }
  // Raw: zero the padding the copy did not write, then the header and checksums.
  for (const codec::LayerRecordPlan& r : plan_.records) {
    std::memset(block + r.offset + r.bytes, 0, r.padded_bytes - r.bytes);
  }
  const uint64_t end = plan_.header_bytes + plan_.payload_bytes;
  std::memset(block + end, 0, plan_.block_bytes - end);
  codec::ColdBlockHeader h = codec::PlanHeader(plan_);
  h.payload_crc32c = codec::Crc32c(block + h.header_bytes, plan_.block_bytes - h.header_bytes);
  codec::WriteColdBlockHeader(h, span);
}

bool GpuPageCodec::Staged(size_t pages) const {
  using Codec = kernels::GpuNvfp4Codec;
  return nvfp4_ != nullptr &&
         pages * plan_.block_bytes >= Codec::kStagedMinSlices * Codec::kSliceBytes;
}

absl::Status GpuPageCodec::Decode(absl::Span<const uint8_t* const> blocks,
                                  absl::Span<uint8_t* const> pages) const {
  absl::Status launched = DecodeAsync(blocks, pages, Staged(pages.size()));
  absl::Status waited = Wait();
  return launched.ok() ? waited : launched;
}

absl::Status GpuPageCodec::DecodeAsync(absl::Span<const uint8_t* const> blocks,
                                       absl::Span<uint8_t* const> pages, bool staged) const {
  KVTIER_RETURN_IF_ERROR(kernels::UseDevice(device_));
  if (nvfp4_ != nullptr) {
    // Staged: the copy engine gathers the blocks into device memory while the kernel decodes the
    // previous slice (reads the link by DMA; docs/PERFORMANCE.md).
    if (staged) return nvfp4_->DecodeGathered(blocks, pages, streams_[0]);
    absl::Status launched;
    for (size_t i = 0; i < pages.size() && launched.ok(); ++i) {
      launched = nvfp4_->Decode(blocks[i], 0, pages[i], 0, 1, streams_[i % streams_.size()]);
    }
    return launched;
  }
  std::vector<kernels::CopySpan> spans;
  spans.reserve(pages.size() * plan_.buffers.size());
  for (size_t i = 0; i < pages.size(); ++i) {
    for (size_t b = 0; b < plan_.buffers.size(); ++b) {
      spans.push_back({blocks[i] + plan_.buffers[b].whole_offset,
                       pages[i] + plan_.layout.buffers[b].offset_bytes,
                       plan_.buffers[b].whole_bytes});
    }
  }
  return copier_->Enqueue(spans, streams_[0]);
}

absl::Status GpuPageCodec::CheckBlock(absl::Span<const uint8_t> block) const {
  KVTIER_ASSIGN_OR_RETURN(codec::ColdBlockHeader h, codec::ParseColdBlockHeader(block));
  const codec::ColdBlockHeader expected = codec::PlanHeader(plan_);
  if (h.layout_fingerprint != plan_.fingerprint || h.codec != expected.codec ||
      h.codec_flags != expected.codec_flags || block.size() != plan_.block_bytes) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "the stored block (fingerprint %016x, codec %d, %d bytes) is not a block of this engine's "
        "layout and codec (fingerprint %016x, %s, %d bytes)",
        h.layout_fingerprint, static_cast<int>(h.codec), block.size(), plan_.fingerprint,
        plan_.spec.ToString(), plan_.block_bytes));
  }
  return absl::OkStatus();
}

}  // namespace kvtier::dataplane
