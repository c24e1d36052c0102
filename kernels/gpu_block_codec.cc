// GpuBlockCodec: the same in every build; without CUDA, Create and CreateFused fail where the
// kernels' own Create does (Unimplemented), so no codec exists.
#include "kernels/gpu_block_codec.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_format.h"
#include "codec/codec.h"
#include "codec/crc32c.h"
#include "codec/dtype.h"
#include "common/status_macros.h"
#include "kernels/device.h"

namespace kvtier::kernels {
namespace {
constexpr int kStreams = 8;  // concurrent one-page kernels per engine
}  // namespace

bool IsFlatLayout(const codec::PageLayout& layout) {
  if (layout.pools.size() != 1) return false;
  uint64_t offset = 0;
  for (const codec::BufferSpec& b : layout.buffers) {
    if (b.pool != 0 || b.offset_bytes != offset) return false;
    offset += layout.Rows(b) * b.RowStride() * codec::DTypeBytes(b.dtype);
  }
  return offset <= layout.pools[0].slot_bytes;
}

GpuBlockCodec::GpuBlockCodec(const codec::BlockPlan& plan)
    : plan_(plan), page_bytes_(codec::FlatPageBytes(plan.layout)) {}

absl::StatusOr<std::unique_ptr<GpuBlockCodec>> GpuBlockCodec::Create(const codec::BlockPlan& plan,
                                                                     int device) {
  if (!IsFlatLayout(plan.layout)) {
    return absl::InvalidArgumentError(
        "GPU pools need a flat layout: one pool whose buffers lie back to back from offset 0");
  }
  std::unique_ptr<GpuBlockCodec> gpu(new GpuBlockCodec(plan));
  gpu->device_ = device;
  if (plan.spec.codec == codec::CodecId::kRaw) {
    for (const codec::BufferSpec& b : plan.layout.buffers) {
      if (b.RowStride() != b.head_dim) {
        return absl::UnimplementedError(absl::StrFormat(
            "buffer '%s': the GPU raw path needs rows without stride gaps", b.name));
      }
    }
    KVTIER_ASSIGN_OR_RETURN(gpu->copier_, BatchedCopier::Create(device));
  } else if (plan.spec.codec == codec::CodecId::kNvfp4 ||
             plan.spec.codec == codec::CodecId::kNvfp4x2) {
    KVTIER_RETURN_IF_ERROR(UseDevice(device));
    KVTIER_RETURN_IF_ERROR(gpu->MakeFused());
  } else {
    return absl::UnimplementedError(absl::StrFormat(
        "codec %s has no GPU kernels; register GPU pools with raw, nvfp4 or nvfp4x2",
        plan.spec.ToString()));
  }
  for (int i = 0; i < kStreams; ++i) {
    KVTIER_ASSIGN_OR_RETURN(void* stream, CreateStream(device));
    gpu->streams_.push_back(stream);
  }
  return gpu;
}

absl::StatusOr<std::unique_ptr<GpuBlockCodec>> GpuBlockCodec::CreateFused(
    const codec::BlockPlan& plan) {
  std::unique_ptr<GpuBlockCodec> gpu(new GpuBlockCodec(plan));
  KVTIER_RETURN_IF_ERROR(gpu->MakeFused());
  return gpu;
}

absl::Status GpuBlockCodec::MakeFused() {
  KVTIER_ASSIGN_OR_RETURN(nvfp4_, GpuNvfp4Codec::Create(plan_));
  // Cannot happen: a header has 32 bytes per buffer, a page at most two exponents.
  if (static_cast<size_t>(nvfp4_->exponents_per_page()) > plan_.header_bytes) {
    return absl::InternalError("the block header is too small to stage the scale exponents");
  }
  return absl::OkStatus();
}

GpuBlockCodec::~GpuBlockCodec() {
  for (void* s : streams_) DestroyStream(s);
}

absl::Status GpuBlockCodec::NeedStreams() const {
  if (streams_.empty()) {
    return absl::FailedPreconditionError(
        "a GPU tier codec has no streams of its own: use its per-page calls");
  }
  return absl::OkStatus();
}

void GpuBlockCodec::AddEncodeSpans(const uint8_t* page, uint8_t* block,
                                   std::vector<CopySpan>* spans) const {
  for (size_t b = 0; b < plan_.buffers.size(); ++b) {
    spans->push_back({page + plan_.layout.buffers[b].offset_bytes,
                      block + plan_.buffers[b].whole_offset, plan_.buffers[b].whole_bytes});
  }
}

void GpuBlockCodec::AddDecodeSpans(const uint8_t* block, uint8_t* page,
                                   std::vector<CopySpan>* spans) const {
  for (size_t b = 0; b < plan_.buffers.size(); ++b) {
    spans->push_back({block + plan_.buffers[b].whole_offset,
                      page + plan_.layout.buffers[b].offset_bytes, plan_.buffers[b].whole_bytes});
  }
}

absl::Status GpuBlockCodec::EnqueueEncode(const uint8_t* page, uint8_t* block, void* stream) const {
  if (nvfp4_ != nullptr) {
    // The scale exponents go to the block's first bytes; Seal reads them before writing the
    // header over them.
    return nvfp4_->EncodePayloads(page, page_bytes_, block, plan_.block_bytes, 1,
                                  reinterpret_cast<int8_t*>(block), stream);
  }
  std::vector<CopySpan> spans;
  AddEncodeSpans(page, block, &spans);
  return copier_->Enqueue(spans, stream);
}

void GpuBlockCodec::Seal(uint8_t* block) const {
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

absl::Status GpuBlockCodec::EncodeToHost(int device, const uint8_t* page, uint8_t* block) const {
  KVTIER_RETURN_IF_ERROR(UseDevice(device));
  void* stream = PerThreadStream();
  KVTIER_RETURN_IF_ERROR(EnqueueEncode(page, block, stream));
  KVTIER_RETURN_IF_ERROR(SynchronizeStream(stream));
  Seal(block);
  return absl::OkStatus();
}

absl::Status GpuBlockCodec::EnqueueDecode(const uint8_t* block, uint8_t* page, void* stream) const {
  // One page: the kernel reads the block where it is (a staged read needs several).
  if (nvfp4_ != nullptr) {
    return nvfp4_->Decode(block, plan_.block_bytes, page, page_bytes_, 1, stream);
  }
  std::vector<CopySpan> spans;
  AddDecodeSpans(block, page, &spans);
  return copier_->Enqueue(spans, stream);
}

absl::Status GpuBlockCodec::EncodeChunks(absl::Span<const uint8_t* const> pages,
                                         absl::Span<uint8_t* const> blocks, size_t chunk,
                                         std::vector<void*>* done) const {
  KVTIER_RETURN_IF_ERROR(NeedStreams());
  KVTIER_RETURN_IF_ERROR(UseDevice(device_));
  chunk = std::max<size_t>(1, chunk);
  for (size_t first = 0, c = 0; first < pages.size(); first += chunk, ++c) {
    void* stream = streams_[c % streams_.size()];
    const size_t end = std::min(pages.size(), first + chunk);
    if (nvfp4_ != nullptr) {
      for (size_t i = first; i < end; ++i) {
        KVTIER_RETURN_IF_ERROR(EnqueueEncode(pages[i], blocks[i], stream));
      }
    } else {
      // One batched copy per chunk.
      std::vector<CopySpan> spans;
      spans.reserve((end - first) * plan_.buffers.size());
      for (size_t i = first; i < end; ++i) AddEncodeSpans(pages[i], blocks[i], &spans);
      KVTIER_RETURN_IF_ERROR(copier_->Enqueue(spans, stream));
    }
    absl::StatusOr<void*> event = CreateEvent(device_);
    if (!event.ok()) return event.status();
    if (absl::Status recorded = RecordEvent(*event, stream); !recorded.ok()) {
      DestroyEvent(*event);  // never waited on: its chunk is not sealed
      return recorded;
    }
    done->push_back(*event);
  }
  return absl::OkStatus();
}

bool GpuBlockCodec::Staged(size_t pages) const {
  return nvfp4_ != nullptr &&
         pages * plan_.block_bytes >= GpuNvfp4Codec::kStagedMinSlices * GpuNvfp4Codec::kSliceBytes;
}

absl::Status GpuBlockCodec::DecodeAsync(absl::Span<const uint8_t* const> blocks,
                                        absl::Span<uint8_t* const> pages, bool staged) const {
  KVTIER_RETURN_IF_ERROR(NeedStreams());
  KVTIER_RETURN_IF_ERROR(UseDevice(device_));
  if (nvfp4_ != nullptr) {
    // Staged: the copy engine gathers the blocks into device memory while the kernel decodes the
    // previous slice (reads the link by DMA; docs/PERFORMANCE.md).
    if (staged) return nvfp4_->DecodeGathered(blocks, pages, streams_[0]);
    absl::Status launched;
    for (size_t i = 0; i < pages.size() && launched.ok(); ++i) {
      launched = EnqueueDecode(blocks[i], pages[i], streams_[i % streams_.size()]);
    }
    return launched;
  }
  // One batched copy for the whole batch.
  std::vector<CopySpan> spans;
  spans.reserve(pages.size() * plan_.buffers.size());
  for (size_t i = 0; i < pages.size(); ++i) AddDecodeSpans(blocks[i], pages[i], &spans);
  return copier_->Enqueue(spans, streams_[0]);
}

absl::Status GpuBlockCodec::Wait() const {
  absl::Status result;
  for (void* s : streams_) result.Update(SynchronizeStream(s));
  return result;
}

absl::Status GpuBlockCodec::CheckBlock(absl::Span<const uint8_t> block) const {
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

}  // namespace kvtier::kernels
