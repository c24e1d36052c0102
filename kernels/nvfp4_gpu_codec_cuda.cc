// Host side of the fused NVFP4 kernels in a CUDA build: turns a codec::BlockPlan into the
// kernels' descriptor table, launches them, and runs the staged decode pipelines. The host-only
// members are in nvfp4_gpu_codec.cc; builds without CUDA compile nvfp4_gpu_codec_no_cuda.cc
// instead of this file.
#include "kernels/nvfp4_gpu_codec.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/device_query.h"
#include "kernels/nvfp4_launch.h"

namespace kvtier::kernels {

// A device's staging ring for HostRead::kStaged.
struct GpuNvfp4Codec::Staging {
  int device = -1;
  uint64_t slot_bytes = 0;
  void* copy_stream = nullptr;
  void* start = nullptr;
  uint8_t* slots[kSlots] = {};
  void* copied[kSlots] = {};
  void* consumed[kSlots] = {};
  ~Staging() {
    for (int i = 0; i < kSlots; ++i) {
      if (slots[i] != nullptr) internal::FreeDevice(slots[i]);
      if (copied[i] != nullptr) internal::DestroyEvent(copied[i]);
      if (consumed[i] != nullptr) internal::DestroyEvent(consumed[i]);
    }
    if (start != nullptr) internal::DestroyEvent(start);
    if (copy_stream != nullptr) internal::DestroyStream(copy_stream);
  }
  // On the current device; returns a cudaError_t value.
  int Init(int ordinal, uint64_t bytes) {
    device = ordinal;
    slot_bytes = bytes;
    int err = internal::CreateStream(&copy_stream);
    if (err == 0) err = internal::CreateEvent(&start);
    for (int i = 0; i < kSlots && err == 0; ++i) {
      err = internal::MallocDevice(reinterpret_cast<void**>(&slots[i]), bytes);
      if (err == 0) err = internal::CreateEvent(&copied[i]);
      if (err == 0) err = internal::CreateEvent(&consumed[i]);
    }
    return err;
  }
};

GpuNvfp4Codec::GpuNvfp4Codec(codec::BlockPlan plan, std::unique_ptr<internal::GpuPlan> gpu_plan)
    : plan_(std::move(plan)), gpu_plan_(std::move(gpu_plan)) {}
GpuNvfp4Codec::~GpuNvfp4Codec() {
  absl::MutexLock lock(&plans_mu_);
  for (auto& [device, plan] : device_plans_) internal::FreeDevice(plan);
}

const internal::GpuPlan* GpuNvfp4Codec::DevicePlan(int* err) const {
  int device = 0;
  if ((*err = internal::CurrentDevice(&device)) != 0) return nullptr;
  absl::MutexLock lock(&plans_mu_);
  for (const auto& [d, plan] : device_plans_) {
    if (d == device) return plan;
  }
  void* memory = nullptr;
  if ((*err = internal::MallocDevice(&memory, sizeof(internal::GpuPlan))) != 0) return nullptr;
  void* stream = internal::PerThreadStream();
  *err = internal::CopyAsync(memory, gpu_plan_.get(), sizeof(internal::GpuPlan), stream);
  if (*err == 0) *err = internal::SynchronizeStream(stream);
  if (*err != 0) {
    internal::FreeDevice(memory);
    return nullptr;
  }
  device_plans_.emplace_back(device, static_cast<internal::GpuPlan*>(memory));
  return device_plans_.back().second;
}

int GpuNvfp4Codec::LaunchDecode(const uint8_t* cold_base, uint64_t cold_stride, uint8_t* hot_base,
                                uint64_t hot_stride, int pages, void* stream) const {
  int err = 0;
  const internal::GpuPlan* device_plan = DevicePlan(&err);
  if (device_plan == nullptr) return err;
  return internal::LaunchNvfp4Decode(*gpu_plan_, device_plan, cold_base, cold_stride, hot_base,
                                     hot_stride, pages, stream);
}

absl::StatusOr<std::unique_ptr<GpuNvfp4Codec>> GpuNvfp4Codec::Create(const codec::BlockPlan& plan) {
  if (plan.spec.codec != codec::CodecId::kNvfp4 && plan.spec.codec != codec::CodecId::kNvfp4x2) {
    return absl::UnimplementedError(absl::StrCat("the fused NVFP4 kernels do not take codec ",
                                                 plan.spec.ToString(),
                                                 " (kernels::BatchedCopier copies raw pages)"));
  }
  if (plan.buffers.size() > internal::kMaxGpuBuffers) {
    return absl::UnimplementedError(absl::StrCat("layouts of more than ", internal::kMaxGpuBuffers,
                                                 " buffers are not supported by the GPU kernels"));
  }
  auto gpu = std::make_unique<internal::GpuPlan>();
  gpu->buffer_count = static_cast<int>(plan.buffers.size());
  gpu->target_ctas = 0;
  gpu->exps_per_page = gpu->buffer_count * (plan.spec.codec == codec::CodecId::kNvfp4x2 ? 2 : 1);
  uint64_t hot_offset = 0;
  for (size_t i = 0; i < plan.buffers.size(); ++i) {
    const codec::BufferSpec& b = plan.layout.buffers[i];
    const codec::BufferPlan& bp = plan.buffers[i];
    internal::GpuBuffer& g = gpu->buffers[i];
    const uint64_t esize = codec::DTypeBytes(b.dtype);
    g.hot_offset = hot_offset;
    g.row_stride_bytes = uint64_t{b.RowStride()} * esize;
    g.rows = bp.rows;
    g.data_offset = bp.data_offset;
    g.scale_offset = bp.scale_offset;
    g.row_lossless_offset = bp.row_lossless_offset;
    g.whole_offset = bp.whole_offset;
    g.scale_exp_offset = codec::kColdBlockFixedHeaderBytes + i * codec::kColdBlockBufferEntryBytes +
                         codec::kColdBlockEntryScaleExpOffset;
    g.row_lossless_bytes = static_cast<uint32_t>(bp.row_lossless_bytes);
    g.head_dim = b.head_dim;
    g.quant_start = bp.quant_start;
    g.quant_len = bp.quant_len;
    g.dtype = static_cast<uint8_t>(b.dtype);
    g.esize = static_cast<uint8_t>(esize);
    g.quantized = bp.encoding != codec::BufferEncoding::kLossless;
    g.passes = static_cast<uint8_t>(bp.passes);
    hot_offset += bp.rows * g.row_stride_bytes;
  }
  auto add_zero = [&](uint64_t offset, uint64_t bytes) {
    if (bytes == 0) return true;
    if (gpu->zero_count == internal::kMaxZeroRanges) return false;
    gpu->zeros[gpu->zero_count++] = {offset, bytes};
    return true;
  };
  gpu->zero_count = 0;
  bool fits = true;
  for (const codec::LayerRecordPlan& r : plan.records) {
    fits = fits && add_zero(r.offset + r.bytes, r.padded_bytes - r.bytes);
  }
  const uint64_t end = plan.header_bytes + plan.payload_bytes;
  fits = fits && add_zero(end, plan.block_bytes - end);
  if (!fits) {
    return absl::UnimplementedError("too many padded layer records for the GPU kernels");
  }
  std::unique_ptr<GpuNvfp4Codec> codec(new GpuNvfp4Codec(plan, std::move(gpu)));
  // The current device's copy of the plan now (not under a caller's stream capture later); a
  // machine without a usable device gets it, or the error, at the first launch.
  int devices = 0;
  if (internal::QueryDeviceCount(&devices) == 0 && devices > 0) {
    int err = 0;
    (void)codec->DevicePlan(&err);
  }
  return codec;
}

absl::Status GpuNvfp4Codec::EncodePayloads(const void* hot_base, uint64_t hot_stride,
                                           void* cold_base, uint64_t cold_stride, int pages,
                                           int8_t* scale_exps, void* stream) const {
  int err = 0;
  const internal::GpuPlan* device_plan = DevicePlan(&err);
  if (device_plan != nullptr) {
    err = internal::LaunchNvfp4Encode(
        *gpu_plan_, device_plan, static_cast<const uint8_t*>(hot_base), hot_stride,
        static_cast<uint8_t*>(cold_base), cold_stride, pages, scale_exps, stream);
  }
  if (err != 0) {
    return absl::InternalError(
        absl::StrCat("nvfp4 encode launch (", pages, " pages): ", internal::ErrorString(err)));
  }
  return absl::OkStatus();
}

absl::Status GpuNvfp4Codec::Decode(const void* cold_base, uint64_t cold_stride, void* hot_base,
                                   uint64_t hot_stride, int pages, void* stream,
                                   HostRead host_read) const {
  if (host_read != HostRead::kDirect && pages > 1 && cold_stride >= plan_.block_bytes) {
    int device_memory = 0, capturing = 0;
    internal::InDeviceMemory(cold_base, &device_memory);
    internal::StreamCapturing(stream, &capturing);
    const uint64_t slice_pages =
        std::max<uint64_t>(1, SliceBytes(uint64_t(pages) * cold_stride) / cold_stride);
    if (!device_memory && !capturing &&
        (host_read == HostRead::kStaged || uint64_t(pages) >= kStagedMinSlices * slice_pages)) {
      return DecodeStaged(static_cast<const uint8_t*>(cold_base), cold_stride,
                          static_cast<uint8_t*>(hot_base), hot_stride, pages, stream);
    }
  }
  const int err = LaunchDecode(static_cast<const uint8_t*>(cold_base), cold_stride,
                               static_cast<uint8_t*>(hot_base), hot_stride, pages, stream);
  if (err != 0) {
    return absl::InternalError(
        absl::StrCat("nvfp4 decode launch (", pages, " pages): ", internal::ErrorString(err)));
  }
  return absl::OkStatus();
}

// The device's ring with slots of at least slot_bytes (and room for the large slices of blocks
// `stride` bytes apart, so that batches of both kinds share one ring); a smaller ring is replaced
// once its copies are done. Returns a cudaError_t value.
int GpuNvfp4Codec::AcquireRing(int device, uint64_t slot_bytes, uint64_t stride,
                               Staging** out) const {
  Staging* ring = nullptr;
  for (auto& r : staging_) {
    if (r->device == device) ring = r.get();
  }
  if (ring != nullptr && ring->slot_bytes < slot_bytes) {  // a larger stride than before
    if (int err = internal::SynchronizeStream(ring->copy_stream); err != 0) return err;
    for (auto& r : staging_) {
      if (r.get() == ring) r.reset();  // frees after the work that used it (cudaFree syncs)
    }
    std::erase(staging_, nullptr);
    ring = nullptr;
  }
  if (ring == nullptr) {
    const uint64_t large_pages = std::max<uint64_t>(1, kLargeSliceBytes / stride);
    const uint64_t bytes = std::max(slot_bytes, (large_pages - 1) * stride + plan_.block_bytes);
    auto fresh = std::make_unique<Staging>();
    if (int err = fresh->Init(device, bytes); err != 0) return err;
    ring = fresh.get();
    staging_.push_back(std::move(fresh));
  }
  *out = ring;
  return 0;
}

// Slice i: the copy stream waits until slice i - kSlots has been decoded out of its slot, copies
// the slice's blocks into the slot and records `copied`; `stream` waits for that, decodes, and
// records `consumed`. `stream` has waited for every copy when the call returns.
absl::Status GpuNvfp4Codec::DecodeStaged(const uint8_t* cold_base, uint64_t cold_stride,
                                         uint8_t* hot_base, uint64_t hot_stride, int pages,
                                         void* stream) const {
  auto failed = [&](const char* what, int err) {
    return absl::InternalError(absl::StrCat("staged nvfp4 decode (", pages, " pages): ", what, ": ",
                                            internal::ErrorString(err)));
  };
  int device = 0;
  if (int err = internal::CurrentDevice(&device); err != 0) return failed("cudaGetDevice", err);
  const uint64_t slice_pages =
      std::max<uint64_t>(1, SliceBytes(uint64_t(pages) * cold_stride) / cold_stride);
  const uint64_t slot_bytes = (slice_pages - 1) * cold_stride + plan_.block_bytes;
  absl::MutexLock lock(&staging_mu_);
  Staging* ring = nullptr;
  if (int err = AcquireRing(device, slot_bytes, cold_stride, &ring); err != 0) {
    return failed("staging ring", err);
  }
  if (int err = internal::RecordEvent(ring->start, stream); err != 0) {
    return failed("cudaEventRecord", err);
  }
  if (int err = internal::WaitEvent(ring->copy_stream, ring->start); err != 0) {
    return failed("cudaStreamWaitEvent", err);
  }
  for (uint64_t first = 0, i = 0; first < uint64_t(pages); first += slice_pages, ++i) {
    const int slot = static_cast<int>(i % kSlots);
    const uint64_t n = std::min<uint64_t>(slice_pages, pages - first);
    int err = internal::WaitEvent(ring->copy_stream, ring->consumed[slot]);
    if (err == 0) {
      err = internal::CopyAsync(ring->slots[slot], cold_base + first * cold_stride,
                                (n - 1) * cold_stride + plan_.block_bytes, ring->copy_stream);
    }
    if (err == 0) err = internal::RecordEvent(ring->copied[slot], ring->copy_stream);
    if (err == 0) err = internal::WaitEvent(stream, ring->copied[slot]);
    if (err == 0) {
      err = LaunchDecode(ring->slots[slot], cold_stride, hot_base + first * hot_stride, hot_stride,
                         static_cast<int>(n), stream);
    }
    if (err == 0) err = internal::RecordEvent(ring->consumed[slot], stream);
    if (err != 0) {
      // `stream` waits for the copies enqueued so far, so the caller's buffers stay in use until
      // its work drains; the pages of this call are not all written.
      internal::WaitEvent(stream, ring->copied[slot]);
      return failed("slice", err);
    }
  }
  return absl::OkStatus();
}

absl::Status GpuNvfp4Codec::DecodeGathered(absl::Span<const uint8_t* const> blocks,
                                           absl::Span<uint8_t* const> pages, void* stream) const {
  if (blocks.size() != pages.size()) {
    return absl::InvalidArgumentError(absl::StrCat("gathered nvfp4 decode: ", blocks.size(),
                                                   " blocks for ", pages.size(), " pages"));
  }
  if (blocks.empty()) return absl::OkStatus();
  const uint64_t count = blocks.size();
  auto failed = [&](const char* what, int err) {
    return absl::InternalError(absl::StrCat("gathered nvfp4 decode (", count, " pages): ", what,
                                            ": ", internal::ErrorString(err)));
  };
  int capturing = 0;
  internal::StreamCapturing(stream, &capturing);
  if (capturing) {  // no second stream under capture: one direct launch per page
    for (uint64_t i = 0; i < count; ++i) {
      if (int err = LaunchDecode(blocks[i], 0, pages[i], 0, 1, stream); err != 0) {
        return failed("decode launch", err);
      }
    }
    return absl::OkStatus();
  }
  int device = 0;
  if (int err = internal::CurrentDevice(&device); err != 0) return failed("cudaGetDevice", err);
  const uint64_t block_bytes = plan_.block_bytes;
  const uint64_t slice_pages = std::max<uint64_t>(1, SliceBytes(count * block_bytes) / block_bytes);
  absl::MutexLock lock(&staging_mu_);
  Staging* ring = nullptr;
  if (int err = AcquireRing(device, slice_pages * block_bytes, block_bytes, &ring); err != 0) {
    return failed("staging ring", err);
  }
  if (int err = internal::RecordEvent(ring->start, stream); err != 0) {
    return failed("cudaEventRecord", err);
  }
  if (int err = internal::WaitEvent(ring->copy_stream, ring->start); err != 0) {
    return failed("cudaStreamWaitEvent", err);
  }
  // As DecodeStaged, but slice i's blocks are gathered into consecutive block_bytes of its slot:
  // one copy per run of blocks that lie back to back, then one decode launch per run of pages
  // evenly spaced upwards (a single run when both sides are contiguous, one per page at worst).
  for (uint64_t first = 0, i = 0; first < count; first += slice_pages, ++i) {
    const int slot = static_cast<int>(i % kSlots);
    const uint64_t n = std::min<uint64_t>(slice_pages, count - first);
    const uint8_t* const* from = blocks.data() + first;
    uint8_t* const* to = pages.data() + first;
    int err = internal::WaitEvent(ring->copy_stream, ring->consumed[slot]);
    for (uint64_t j = 0, run = 1; j < n && err == 0; j += run) {
      for (run = 1; j + run < n && from[j + run] == from[j] + run * block_bytes;) ++run;
      err = internal::CopyAsync(ring->slots[slot] + j * block_bytes, from[j], run * block_bytes,
                                ring->copy_stream);
    }
    if (err == 0) err = internal::RecordEvent(ring->copied[slot], ring->copy_stream);
    if (err == 0) err = internal::WaitEvent(stream, ring->copied[slot]);
    for (uint64_t j = 0, run = 1; j < n && err == 0; j += run) {
      const uint64_t stride = j + 1 < n && to[j + 1] > to[j] ? uint64_t(to[j + 1] - to[j]) : 0;
      for (run = 1; stride != 0 && j + run < n && to[j + run] == to[j] + run * stride;) ++run;
      err = LaunchDecode(ring->slots[slot] + j * block_bytes, block_bytes, to[j], stride,
                         static_cast<int>(run), stream);
    }
    if (err == 0) err = internal::RecordEvent(ring->consumed[slot], stream);
    if (err != 0) {
      internal::WaitEvent(stream, ring->copied[slot]);  // as DecodeStaged
      return failed("slice", err);
    }
  }
  return absl::OkStatus();
}

}  // namespace kvtier::kernels
