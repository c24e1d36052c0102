// GpuRound: host-side checks, device memory and staging around kernels/kv_round.h.
#include "triattention/gpu_round.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/device.h"
#include "kernels/kv_round.h"

namespace kvtier::triattention {
namespace {

constexpr uint64_t kAlign = 256;

uint64_t AlignUp(uint64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

// Device memory freed with the owner.
struct DeviceBuffer {
  void* ptr = nullptr;
  uint64_t bytes = 0;
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { kernels::FreeDeviceMemory(ptr); }
  absl::Status Allocate(int device, uint64_t n) {
    kernels::FreeDeviceMemory(ptr);
    ptr = nullptr;
    bytes = 0;
    KVTIER_ASSIGN_OR_RETURN(ptr, kernels::AllocateDeviceMemory(device, std::max<uint64_t>(n, 1)));
    bytes = n;
    return absl::OkStatus();
  }
  uint8_t* at(uint64_t offset) const { return static_cast<uint8_t*>(ptr) + offset; }
};

// Pinned host memory (page-aligned, registered with CUDA).
struct PinnedBuffer {
  void* ptr = nullptr;
  uint64_t bytes = 0;
  bool pinned = false;
  PinnedBuffer() = default;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() { Release(); }
  void Release() {
    if (pinned) (void)kernels::UnpinHostMemory(ptr);
    std::free(ptr);
    ptr = nullptr;
    bytes = 0;
    pinned = false;
  }
  absl::Status Allocate(uint64_t n) {
    Release();
    const uint64_t size = (std::max<uint64_t>(n, 1) + 4095) / 4096 * 4096;
    ptr = std::aligned_alloc(4096, size);
    if (ptr == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat("no host memory for ", size, " bytes"));
    }
    bytes = size;
    KVTIER_RETURN_IF_ERROR(kernels::PinHostMemory(ptr, size));
    pinned = true;
    return absl::OkStatus();
  }
};

kernels::KvEvictionMode ToKernelMode(EvictionMode mode) {
  return static_cast<kernels::KvEvictionMode>(static_cast<uint8_t>(mode));
}

}  // namespace

struct GpuRound::Device {
  DeviceBuffer calibration;  // q arrays (float), then omega and freq_scale_sq (double)
  DeviceBuffer pools;        // KvPoolPair[layers]
  DeviceBuffer workspace;
  DeviceBuffer staging_device;  // KvRoundRequest[max_requests], then the block tables
  PinnedBuffer staging_host;
  uint64_t table_capacity = 0;  // int32 entries after the descriptors
  void* upload_done = nullptr;  // event after the last upload
  bool uploaded = false;
  kernels::TriRoundShape shape;
  kernels::PagedKvDevice kv;
  kernels::TriCalibrationDevice cal;
  kernels::KvRoundWorkspace ws;
  int last_requests = 0;    // requests of the last Launch
  int staged_requests = 0;  // requests of the last Stage

  ~Device() { kernels::DestroyEvent(upload_done); }

  uint64_t DescriptorBytes() const {
    return AlignUp(sizeof(kernels::KvRoundRequest) * static_cast<uint64_t>(shape.max_requests));
  }
  absl::Status AllocateStaging(int device, uint64_t entries) {
    const uint64_t bytes = DescriptorBytes() + entries * sizeof(int32_t);
    KVTIER_RETURN_IF_ERROR(staging_device.Allocate(device, bytes));
    KVTIER_RETURN_IF_ERROR(staging_host.Allocate(bytes));
    table_capacity = entries;
    return absl::OkStatus();
  }
};

GpuRound::GpuRound(GpuRoundOptions options, KvCacheView view)
    : options_(options), view_(std::move(view)), device_(std::make_unique<Device>()) {}

GpuRound::~GpuRound() = default;

absl::StatusOr<std::unique_ptr<GpuRound>> GpuRound::Create(const Calibration& calibration,
                                                           const KvCacheView& view,
                                                           const GpuRoundOptions& options) {
  KVTIER_RETURN_IF_ERROR(ValidateKvCacheView(view));
  if (view.memory != KvMemory::kDevice) {
    return absl::FailedPreconditionError("the GPU round needs a kv view of device memory");
  }
  if (!calibration.omega.has_value() || !calibration.freq_scale_sq.has_value()) {
    return absl::FailedPreconditionError(
        "calibration has no omega / freq_scale_sq (fill them with FillCalibrationRope)");
  }
  if (calibration.layers != static_cast<int>(view.layers.size())) {
    return absl::InvalidArgumentError(absl::StrCat("calibration has ", calibration.layers,
                                                   " layers, the kv view ", view.layers.size()));
  }
  if (calibration.bands * 2 != view.head_dim) {
    return absl::InvalidArgumentError(absl::StrCat("calibration has ", calibration.bands,
                                                   " bands (head_dim ", calibration.bands * 2,
                                                   "), the kv view head_dim ", view.head_dim));
  }
  if (calibration.heads < 1 || calibration.heads % view.num_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("calibration has ", calibration.heads,
                                                   " query heads, not a multiple of the kv view's ",
                                                   view.num_kv_heads, " kv heads"));
  }
  const size_t n = static_cast<size_t>(calibration.layers) * calibration.heads * calibration.bands;
  if (calibration.q_mean_real.size() != n || calibration.q_mean_imag.size() != n ||
      calibration.q_abs_mean.size() != n ||
      calibration.omega->size() != static_cast<size_t>(calibration.bands) ||
      calibration.freq_scale_sq->size() != static_cast<size_t>(calibration.bands)) {
    return absl::InvalidArgumentError("calibration arrays do not match its layers, heads, bands");
  }
  for (const KvLayerPools& pools : view.layers) {
    if (reinterpret_cast<uintptr_t>(pools.k) % 16 != 0 ||
        reinterpret_cast<uintptr_t>(pools.v) % 16 != 0) {
      return absl::InvalidArgumentError("kv view pool addresses must be 16-byte aligned");
    }
  }
  if (options.max_requests < 1) {
    return absl::InvalidArgumentError(absl::StrCat("max_requests ", options.max_requests, " < 1"));
  }
  GpuRoundOptions opts = options;
  if (opts.max_decode_tokens == 0) opts.max_decode_tokens = opts.budget + 2 * 128 + 64;
  auto round = std::unique_ptr<GpuRound>(new GpuRound(opts, view));
  round->query_heads_ = calibration.heads;
  Device& d = *round->device_;

  const KvStrides strides = KvStridesOf(view);
  d.kv.num_layers = static_cast<int>(view.layers.size());
  d.kv.page_tokens = view.page_tokens;
  d.kv.kv_heads = view.num_kv_heads;
  d.kv.head_dim = view.head_dim;
  d.kv.dtype = static_cast<kernels::KvElement>(static_cast<uint8_t>(view.dtype));
  d.kv.combined = view.pool_kind == KvPoolKind::kCombined;
  d.kv.row_bytes = strides.row_bytes;
  d.kv.token_stride = strides.token;
  d.kv.head_stride = strides.head;
  d.kv.page_stride = strides.page;
  d.kv.v_offset = strides.v_in_page;
  d.shape.max_requests = opts.max_requests;
  d.shape.max_decode_tokens = opts.max_decode_tokens;
  d.shape.budget = opts.budget;
  d.shape.mode = ToKernelMode(opts.mode);
  d.shape.normalize = opts.normalize;
  d.shape.num_offsets = opts.num_offsets;
  d.shape.order = static_cast<kernels::KvCompactionOrder>(static_cast<uint8_t>(opts.order));

  // Calibration: three float arrays, then omega and freq_scale_sq widened to double.
  const uint64_t q_bytes = AlignUp(n * sizeof(float));
  const uint64_t band_bytes = AlignUp(static_cast<uint64_t>(calibration.bands) * sizeof(double));
  std::vector<uint8_t> host(3 * q_bytes + 2 * band_bytes, 0);
  std::memcpy(host.data(), calibration.q_mean_real.data(), n * sizeof(float));
  std::memcpy(host.data() + q_bytes, calibration.q_mean_imag.data(), n * sizeof(float));
  std::memcpy(host.data() + 2 * q_bytes, calibration.q_abs_mean.data(), n * sizeof(float));
  auto* omega = reinterpret_cast<double*>(host.data() + 3 * q_bytes);
  auto* scale = reinterpret_cast<double*>(host.data() + 3 * q_bytes + band_bytes);
  for (int f = 0; f < calibration.bands; ++f) {
    omega[f] = (*calibration.omega)[f];
    scale[f] = (*calibration.freq_scale_sq)[f];
  }
  KVTIER_RETURN_IF_ERROR(d.calibration.Allocate(opts.device, host.size()));
  KVTIER_RETURN_IF_ERROR(
      kernels::CopyAsync(d.calibration.ptr, host.data(), host.size(), /*stream=*/nullptr));
  d.cal.q_mean_real = reinterpret_cast<const float*>(d.calibration.at(0));
  d.cal.q_mean_imag = reinterpret_cast<const float*>(d.calibration.at(q_bytes));
  d.cal.q_abs_mean = reinterpret_cast<const float*>(d.calibration.at(2 * q_bytes));
  d.cal.omega = reinterpret_cast<const double*>(d.calibration.at(3 * q_bytes));
  d.cal.freq_scale_sq = reinterpret_cast<const double*>(d.calibration.at(3 * q_bytes + band_bytes));
  d.cal.query_heads = calibration.heads;

  std::vector<kernels::KvPoolPair> pools(view.layers.size());
  for (size_t l = 0; l < pools.size(); ++l) pools[l] = {view.layers[l].k, view.layers[l].v};
  KVTIER_RETURN_IF_ERROR(d.pools.Allocate(opts.device, pools.size() * sizeof(kernels::KvPoolPair)));
  KVTIER_RETURN_IF_ERROR(kernels::CopyAsync(d.pools.ptr, pools.data(),
                                            pools.size() * sizeof(kernels::KvPoolPair), nullptr));
  KVTIER_RETURN_IF_ERROR(kernels::SynchronizeStream(nullptr));
  d.kv.layers = static_cast<const kernels::KvPoolPair*>(d.pools.ptr);

  KVTIER_RETURN_IF_ERROR(kernels::ValidateTriRound(d.shape, d.kv, d.cal));
  const uint64_t ws_bytes =
      kernels::KvRoundWorkspaceLayout(d.shape, d.kv, calibration.heads, nullptr, nullptr);
  KVTIER_RETURN_IF_ERROR(d.workspace.Allocate(opts.device, ws_bytes));
  kernels::KvRoundWorkspaceLayout(d.shape, d.kv, calibration.heads, d.workspace.ptr, &d.ws);

  // Block tables for requests with a long prompt grow the staging area on demand.
  const uint64_t pages_per_request = static_cast<uint64_t>(
      (opts.max_decode_tokens + 8192 + view.page_tokens - 1) / view.page_tokens);
  KVTIER_RETURN_IF_ERROR(
      d.AllocateStaging(opts.device, pages_per_request * static_cast<uint64_t>(opts.max_requests)));
  KVTIER_ASSIGN_OR_RETURN(d.upload_done, kernels::CreateEvent(opts.device));
  round->device_bytes_ =
      d.calibration.bytes + d.pools.bytes + d.workspace.bytes + d.staging_device.bytes;
  return round;
}

absl::Status GpuRound::Enqueue(absl::Span<const KvRequestView> requests,
                               absl::Span<const int64_t> round_starts, void* stream) {
  KVTIER_RETURN_IF_ERROR(Stage(requests, round_starts, stream).status());
  if (requests.empty()) return absl::OkStatus();
  return Launch(stream);
}

absl::StatusOr<bool> GpuRound::Stage(absl::Span<const KvRequestView> requests,
                                     absl::Span<const int64_t> round_starts, void* stream) {
  Device& d = *device_;
  if (requests.size() != round_starts.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(requests.size(), " requests but ", round_starts.size(), " round starts"));
  }
  if (requests.size() > static_cast<size_t>(options_.max_requests)) {
    return absl::InvalidArgumentError(
        absl::StrCat(requests.size(), " requests exceed max_requests ", options_.max_requests));
  }
  uint64_t entries = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    if (absl::Status s = ValidateKvRequest(view_, requests[i]); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("request ", i, ": ", s.message()));
    }
    if (requests[i].DecodeTokens() > options_.max_decode_tokens) {
      return absl::InvalidArgumentError(
          absl::StrCat("request ", i, " has ", requests[i].DecodeTokens(),
                       " decode tokens, more than max_decode_tokens ", options_.max_decode_tokens));
    }
    if (round_starts[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("request ", i, " round start ", round_starts[i], " < 0"));
    }
    entries += (requests[i].length + view_.page_tokens - 1) / view_.page_tokens;
  }
  if (requests.empty()) {
    d.staged_requests = 0;
    return false;
  }
  KVTIER_RETURN_IF_ERROR(kernels::UseDevice(options_.device));
  // The previous upload must have left the staging area before it is rewritten.
  if (d.uploaded) KVTIER_RETURN_IF_ERROR(kernels::WaitEvent(d.upload_done));
  bool grown = false;
  if (entries > d.table_capacity) {
    KVTIER_RETURN_IF_ERROR(kernels::SynchronizeStream(stream));  // in-flight rounds read it
    KVTIER_RETURN_IF_ERROR(d.AllocateStaging(options_.device, entries * 2));
    grown = true;
  }
  auto* descs = static_cast<kernels::KvRoundRequest*>(d.staging_host.ptr);
  auto* tables =
      reinterpret_cast<int32_t*>(static_cast<uint8_t*>(d.staging_host.ptr) + d.DescriptorBytes());
  const auto* device_tables =
      reinterpret_cast<const int32_t*>(d.staging_device.at(d.DescriptorBytes()));
  uint64_t at = 0;
  staged_decode_tokens_.assign(requests.size(), 0);
  for (size_t i = 0; i < requests.size(); ++i) {
    const KvRequestView& r = requests[i];
    const uint64_t pages =
        static_cast<uint64_t>((r.length + view_.page_tokens - 1) / view_.page_tokens);
    std::memcpy(tables + at, r.block_table.data(), pages * sizeof(int32_t));
    descs[i].block_table = device_tables + at;
    descs[i].length = r.length;
    descs[i].prompt_len = r.prompt_len;
    descs[i].protected_tail = r.protected_tail;
    descs[i].round_start = round_starts[i];
    at += pages;
    staged_decode_tokens_[i] = r.DecodeTokens();
  }
  d.staged_requests = static_cast<int>(requests.size());
  return grown;
}

absl::Status GpuRound::Launch(void* stream) {
  Device& d = *device_;
  if (d.staged_requests == 0) return absl::OkStatus();
  // Copies the whole staging area, so a captured graph also carries block tables that a later
  // Stage of the same request count makes longer.
  KVTIER_RETURN_IF_ERROR(
      kernels::CopyAsync(d.staging_device.ptr, d.staging_host.ptr, d.staging_device.bytes, stream));
  // A captured event cannot be waited for on the host; under capture the caller orders the next
  // Stage after the replay's upload (see Stage).
  KVTIER_ASSIGN_OR_RETURN(const bool capturing, kernels::StreamIsCapturing(stream));
  if (!capturing) KVTIER_RETURN_IF_ERROR(kernels::RecordEvent(d.upload_done, stream));
  d.uploaded = !capturing;
  d.last_requests = d.staged_requests;
  return kernels::EnqueueTriRound(d.shape, d.kv, d.cal,
                                  static_cast<const kernels::KvRoundRequest*>(d.staging_device.ptr),
                                  d.staged_requests, d.ws, stream);
}

absl::StatusOr<RoundScores> GpuRound::RawScores(int index, void* stream) const {
  const Device& d = *device_;
  if (d.last_requests == 0 || d.staged_requests == 0) {
    return absl::FailedPreconditionError("no round was enqueued");
  }
  if (index < 0 || index >= d.staged_requests) {
    return absl::OutOfRangeError(
        absl::StrCat("request ", index, " of a round of ", d.staged_requests));
  }
  KVTIER_RETURN_IF_ERROR(kernels::SynchronizeStream(stream));
  const int L = d.kv.num_layers;
  const int64_t cap = d.shape.max_decode_tokens;
  std::vector<float> all(static_cast<size_t>(L) * query_heads_ * cap);
  KVTIER_RETURN_IF_ERROR(kernels::CopyAsync(
      all.data(), d.ws.scores + static_cast<size_t>(index) * L * query_heads_ * cap,
      all.size() * sizeof(float), stream));
  KVTIER_RETURN_IF_ERROR(kernels::SynchronizeStream(stream));
  RoundScores scores;
  scores.layers = L;
  scores.heads = query_heads_;
  scores.tokens = staged_decode_tokens_[index];
  scores.values.resize(static_cast<size_t>(L) * query_heads_ * scores.tokens);
  for (int row = 0; row < L * query_heads_; ++row) {
    std::copy_n(all.data() + static_cast<size_t>(row) * cap, scores.tokens,
                scores.values.data() + static_cast<size_t>(row) * scores.tokens);
  }
  return scores;
}

absl::StatusOr<KeptTokens> GpuRound::Kept(int index, void* stream) const {
  const Device& d = *device_;
  if (d.last_requests == 0 || d.staged_requests == 0) {
    return absl::FailedPreconditionError("no round was enqueued");
  }
  if (index < 0 || index >= d.staged_requests) {
    return absl::OutOfRangeError(
        absl::StrCat("request ", index, " of a round of ", d.staged_requests));
  }
  const int sets = kernels::KvSetsPerRequest(d.shape.mode, d.kv.num_layers, d.kv.kv_heads);
  std::vector<int32_t> kept(static_cast<size_t>(sets) * d.shape.budget);
  int32_t count = 0;
  KVTIER_RETURN_IF_ERROR(kernels::SynchronizeStream(stream));
  KVTIER_RETURN_IF_ERROR(kernels::CopyAsync(
      kept.data(), d.ws.kept + static_cast<size_t>(index) * sets * d.shape.budget,
      kept.size() * sizeof(int32_t), stream));
  KVTIER_RETURN_IF_ERROR(
      kernels::CopyAsync(&count, d.ws.kept_count + index, sizeof(int32_t), stream));
  KVTIER_RETURN_IF_ERROR(kernels::SynchronizeStream(stream));
  KeptTokens out;
  out.mode = options_.mode;
  out.layers = d.kv.num_layers;
  out.kv_heads = d.kv.kv_heads;
  out.kept = count;
  for (int s = 0; s < sets; ++s) {
    const int32_t* first = kept.data() + static_cast<size_t>(s) * d.shape.budget;
    out.sets.emplace_back(first, first + count);
  }
  return out;
}

}  // namespace kvtier::triattention
