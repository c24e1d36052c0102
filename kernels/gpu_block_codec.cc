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
#include "common/logging.h"
#include "common/status_macros.h"
#include "kernels/device.h"

namespace kvtier::kernels {
namespace {
constexpr int kStreams = 8;  // concurrent one-page kernels per engine
// Raw decodes of at least this many bytes a merged span go by the copy engine (cudaMemcpyAsync
// per span); smaller ones in one batched-copy launch (docs/PERFORMANCE.md, "batched raw copy").
constexpr uint64_t kCopyEngineSpanBytes = uint64_t{1} << 20;
}  // namespace

// EncodeSealed's ring: kSlots slots of `slice_pages` blocks back to back, each with its pages'
// staged exponents; `sealed` is recorded on the encode stream after a slot's seal, `copied` on
// the copy stream after its copies out (the encode stream waits for it before reusing the slot).
struct GpuBlockCodec::Ring {
  static constexpr int kSlots = 3;
  uint64_t slice_pages = 0;
  void* memory = nullptr;
  uint8_t* slot[kSlots] = {};
  int8_t* exps[kSlots] = {};
  uint32_t* scratch = nullptr;  // the seal's, used on the encode stream only
  void* sealed[kSlots] = {};
  void* copied[kSlots] = {};
  uint64_t next = 0;  // the slot of the next slice, across calls
  ~Ring() {
    FreeDeviceMemory(memory);  // after the work that used it (cudaFree synchronizes)
    for (int i = 0; i < kSlots; ++i) {
      DestroyEvent(sealed[i]);
      DestroyEvent(copied[i]);
    }
  }
};

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
  // The GPU seal where it takes the plan, with its ring allocated now; without either,
  // EncodeChunks and Seal remain (the host seals).
  absl::StatusOr<std::unique_ptr<BlockSealer>> sealer = BlockSealer::Create(
      plan, gpu->nvfp4_ != nullptr ? gpu->nvfp4_->exponents_per_page() : 0, device);
  if (sealer.ok()) {
    gpu->sealer_ = std::move(*sealer);
    absl::MutexLock lock(&gpu->ring_mu_);
    if (absl::Status ring = gpu->MakeRing(); !ring.ok()) {
      KVTIER_LOG(kWarning, "GPU seal unavailable (its ring: ", ring.message(),
                 "); offloads of this engine are sealed on the host");
      gpu->sealer_.reset();
    }
  } else if (!absl::IsUnimplemented(sealer.status())) {
    return sealer.status();
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
  {
    absl::MutexLock lock(&ring_mu_);
    ring_.reset();
  }
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

absl::Status GpuBlockCodec::MakeRing() const {
  auto ring = std::make_unique<Ring>();
  const uint64_t block_bytes = plan_.block_bytes;
  ring->slice_pages = std::max<uint64_t>(1, kSealSliceBytes / block_bytes);
  const uint64_t slot_bytes = ring->slice_pages * block_bytes;
  const uint64_t exps = nvfp4_ != nullptr ? ring->slice_pages * nvfp4_->exponents_per_page() : 0;
  const uint64_t exps_bytes = (exps + 255) / 256 * 256;
  const uint64_t scratch_bytes = sealer_->ScratchBytes(static_cast<int>(ring->slice_pages));
  KVTIER_ASSIGN_OR_RETURN(
      ring->memory,
      AllocateDeviceMemory(device_, Ring::kSlots * (slot_bytes + exps_bytes) + scratch_bytes));
  auto* base = static_cast<uint8_t*>(ring->memory);
  ring->scratch = reinterpret_cast<uint32_t*>(base + Ring::kSlots * (slot_bytes + exps_bytes));
  for (int i = 0; i < Ring::kSlots; ++i) {
    ring->slot[i] = base + i * slot_bytes;
    ring->exps[i] = reinterpret_cast<int8_t*>(base + Ring::kSlots * slot_bytes + i * exps_bytes);
    KVTIER_ASSIGN_OR_RETURN(ring->sealed[i], CreateEvent(device_));
    KVTIER_ASSIGN_OR_RETURN(ring->copied[i], CreateEvent(device_));
  }
  // Raw copies write the buffers only: the padding the slots keep is zeroed once, here.
  if (nvfp4_ == nullptr) {
    KVTIER_RETURN_IF_ERROR(
        ZeroDeviceMemoryAsync(ring->memory, Ring::kSlots * slot_bytes, streams_[0]));
  }
  ring_ = std::move(ring);
  return absl::OkStatus();
}

absl::Status GpuBlockCodec::EncodeSealed(absl::Span<const uint8_t* const> pages,
                                         absl::Span<uint8_t* const> blocks,
                                         std::vector<void*>* done, size_t* pages_per_event) const {
  if (sealer_ == nullptr) {
    return absl::FailedPreconditionError("this GPU codec does not seal blocks on the device");
  }
  if (pages.size() != blocks.size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("sealed encode: %d pages for %d blocks", pages.size(), blocks.size()));
  }
  KVTIER_RETURN_IF_ERROR(UseDevice(device_));
  absl::MutexLock lock(&ring_mu_);
  if (ring_ == nullptr) {
    return absl::FailedPreconditionError("the GPU seal's ring is gone");  // never: made by Create
  }
  Ring& ring = *ring_;
  void* encode = streams_[0];
  void* copy = streams_[1];
  const uint64_t block_bytes = plan_.block_bytes;
  const int exps_per_page = nvfp4_ != nullptr ? nvfp4_->exponents_per_page() : 0;
  *pages_per_event = ring.slice_pages;
  for (size_t first = 0; first < pages.size(); first += ring.slice_pages) {
    const size_t n = std::min<size_t>(ring.slice_pages, pages.size() - first);
    const int s = static_cast<int>(ring.next++ % Ring::kSlots);
    uint8_t* slot = ring.slot[s];
    const uint8_t* const* from = pages.data() + first;
    uint8_t* const* to = blocks.data() + first;
    KVTIER_RETURN_IF_ERROR(StreamWaitEvent(encode, ring.copied[s]));
    if (nvfp4_ != nullptr) {
      // One launch per run of evenly spaced pages.
      for (size_t j = 0, run = 1; j < n; j += run) {
        const uint64_t stride =
            j + 1 < n && from[j + 1] > from[j] ? uint64_t(from[j + 1] - from[j]) : 0;
        for (run = 1; stride != 0 && j + run < n && from[j + run] == from[j] + run * stride;) {
          ++run;
        }
        KVTIER_RETURN_IF_ERROR(nvfp4_->EncodePayloads(from[j], stride, slot + j * block_bytes,
                                                      block_bytes, static_cast<int>(run),
                                                      ring.exps[s] + j * exps_per_page, encode));
      }
    } else {
      std::vector<CopySpan> spans;
      spans.reserve(n * plan_.buffers.size());
      for (size_t j = 0; j < n; ++j) AddEncodeSpans(from[j], slot + j * block_bytes, &spans);
      KVTIER_RETURN_IF_ERROR(copier_->Enqueue(spans, encode));
    }
    KVTIER_RETURN_IF_ERROR(sealer_->Enqueue(slot, block_bytes, static_cast<int>(n), ring.exps[s],
                                            ring.scratch, encode));
    KVTIER_RETURN_IF_ERROR(RecordEvent(ring.sealed[s], encode));
    KVTIER_RETURN_IF_ERROR(StreamWaitEvent(copy, ring.sealed[s]));
    for (size_t j = 0, run = 1; j < n; j += run) {
      for (run = 1; j + run < n && to[j + run] == to[j] + run * block_bytes;) ++run;
      KVTIER_RETURN_IF_ERROR(CopyAsync(to[j], slot + j * block_bytes, run * block_bytes, copy));
    }
    KVTIER_RETURN_IF_ERROR(RecordEvent(ring.copied[s], copy));
    KVTIER_ASSIGN_OR_RETURN(void* event, CreateEvent(device_));
    if (absl::Status recorded = RecordEvent(event, copy); !recorded.ok()) {
      DestroyEvent(event);
      return recorded;
    }
    done->push_back(event);
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
  // Spans merged where both sides continue each other; the large ones by the copy engine (a few
  // percent faster on the link than SM loads), the rest in one batched copy.
  std::vector<CopySpan> spans, small;
  spans.reserve(pages.size() * plan_.buffers.size());
  for (size_t i = 0; i < pages.size(); ++i) {
    std::vector<CopySpan> page;
    AddDecodeSpans(blocks[i], pages[i], &page);
    for (const CopySpan& span : page) {
      CopySpan* last = spans.empty() ? nullptr : &spans.back();
      if (last != nullptr && static_cast<const uint8_t*>(last->src) + last->bytes == span.src &&
          static_cast<uint8_t*>(last->dst) + last->bytes == span.dst) {
        last->bytes += span.bytes;
      } else {
        spans.push_back(span);
      }
    }
  }
  for (const CopySpan& span : spans) {
    if (span.bytes >= kCopyEngineSpanBytes) {
      KVTIER_RETURN_IF_ERROR(CopyAsync(span.dst, span.src, span.bytes, streams_[0]));
    } else {
      small.push_back(span);
    }
  }
  return small.empty() ? absl::OkStatus() : copier_->Enqueue(small, streams_[0]);
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
