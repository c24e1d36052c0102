// The engine side of `kvtier-bench e2e` (the flags, the run and the report are in e2e_bench.cc,
// whose top comment describes the benchmark): this process's device and pinned host memory, the
// source pages and their block hashes, the engines it registers with the kvtierd child (pools
// shared through CUDA IPC), the timed Offload and Onboard rounds, the check of onboarded pages, and
// the cudaMemcpy and empty-Offload baselines. Single-threaded.
#include "tools/bench/e2e_bench_internal.h"

#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "codec/codec.h"
#include "codec/codec_spec.h"
#include "codec/dtype.h"
#include "codec/page_layout.h"
#include "common/coding.h"
#include "grpcpp/grpcpp.h"
#include "kernels/device.h"
#include "kvtier/v1/service.grpc.pb.h"
#include "proto/codec_convert.h"
#include "tools/bench/daemon_process.h"
#include "tools/codec/model_presets.h"
#include "tools/codec/page_metrics.h"

namespace kvtier::bench::e2e_internal {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kLeaseSeconds = 600;  // asked for; the daemon clamps it (every RPC renews it)
constexpr auto kRpcTimeout = std::chrono::seconds(300);
constexpr auto kStartTimeout = std::chrono::seconds(300);  // pinning a large host tier is slow
constexpr int kEmptyOffloadWarmup = 5;
constexpr uint64_t kMarkerBytes = 64;  // 32 BF16 values at the start of each source page
constexpr double kMaxNvfp4RelativeRmse = 0.5;
constexpr absl::string_view kCodecs[] = {"raw", "nvfp4"};  // the speedup is kCodecs[1] over [0]
constexpr int kDevice = 0;                                 // kernels::ListDevices()[0]

std::chrono::system_clock::time_point RpcDeadline() {
  return std::chrono::system_clock::now() + kRpcTimeout;
}

double Milliseconds(Clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

}  // namespace

double GBps(uint64_t bytes, double ms) {
  return ms > 0 ? static_cast<double>(bytes) / (ms * 1e-3) / 1e9 : 0;
}

double Best(const std::vector<double>& values) {
  return values.empty() ? 0 : *std::min_element(values.begin(), values.end());
}

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

namespace {

// ---- Memory of this process ----

absl::StatusOr<std::unique_ptr<DeviceBuffer>> AllocateDevice(uint64_t bytes) {
  absl::StatusOr<void*> ptr = kernels::AllocateDeviceMemory(kDevice, bytes);
  if (!ptr.ok()) return ptr.status();
  return std::make_unique<DeviceBuffer>(*ptr, bytes);
}

// Page-aligned host memory registered with kernels::PinHostMemory; unpinned and freed by the
// destructor.
class PinnedHostBuffer {
 public:
  static absl::StatusOr<std::unique_ptr<PinnedHostBuffer>> Create(uint64_t bytes) {
    void* ptr = nullptr;
    if (const int rc = posix_memalign(&ptr, 4096, bytes); rc != 0) {
      return absl::ResourceExhaustedError(
          absl::StrCat("posix_memalign of ", bytes, " bytes: ", std::strerror(rc)));
    }
    std::unique_ptr<PinnedHostBuffer> buffer(new PinnedHostBuffer(ptr, bytes));
    if (absl::Status pinned = kernels::PinHostMemory(ptr, bytes); !pinned.ok()) return pinned;
    buffer->pinned_ = true;
    return buffer;
  }
  ~PinnedHostBuffer() {
    if (pinned_) {
      if (absl::Status st = kernels::UnpinHostMemory(ptr_); !st.ok()) {
        std::fprintf(stderr, "kvtier-bench e2e: %s\n", st.ToString().c_str());
      }
    }
    free(ptr_);
  }
  PinnedHostBuffer(const PinnedHostBuffer&) = delete;
  PinnedHostBuffer& operator=(const PinnedHostBuffer&) = delete;

  uint8_t* data() const { return static_cast<uint8_t*>(ptr_); }
  uint64_t size() const { return bytes_; }

 private:
  PinnedHostBuffer(void* ptr, uint64_t bytes) : ptr_(ptr), bytes_(bytes) {}
  void* ptr_;
  uint64_t bytes_;
  bool pinned_ = false;
};

// A copy on this thread's stream, waited for.
absl::Status CopyAndWait(void* dst, const void* src, uint64_t bytes) {
  void* stream = kernels::PerThreadStream();
  if (absl::Status st = kernels::CopyAsync(dst, src, bytes, stream); !st.ok()) return st;
  return kernels::SynchronizeStream(stream);
}

absl::StatusOr<std::vector<uint8_t>> Download(const uint8_t* device, uint64_t bytes) {
  std::vector<uint8_t> out(bytes);
  if (absl::Status st = CopyAndWait(out.data(), device, bytes); !st.ok()) return st;
  return out;
}

}  // namespace

// ---- The pages ----

absl::StatusOr<codec::PageLayout> PresetLayout(absl::string_view preset, uint32_t layers) {
  if (preset == tools::kQwen3_8bPreset) {
    codec::GqaOptions options = tools::Qwen3_8bOptions();
    if (layers > 0) options.num_layers = layers;
    return codec::BuildGqaLayout(options);
  }
  if (preset == tools::kDeepseekV3Preset) {
    codec::MlaOptions options = tools::DeepseekV3Options();
    if (layers > 0) options.num_layers = layers;
    return codec::BuildMlaLayout(options);
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown preset '", preset, "'"));
}

absl::Status CheckLayout(const codec::PageLayout& layout, absl::string_view preset) {
  if (layout.pools.size() != 1 || layout.buffers.empty()) {
    return absl::FailedPreconditionError(
        absl::StrFormat("preset %s: the layout has %d pools and %d buffers; the GPU data plane "
                        "needs one pool",
                        preset, layout.pools.size(), layout.buffers.size()));
  }
  if (layout.pools[0].slot_bytes != codec::FlatPageBytes(layout)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "preset %s: slot_bytes %d differs from the flat page's %d bytes; the GPU data plane needs "
        "a flat layout",
        preset, layout.pools[0].slot_bytes, codec::FlatPageBytes(layout)));
  }
  const codec::BufferSpec& first = layout.buffers.front();
  if (first.offset_bytes != 0 || first.dtype != codec::DType::kBf16 ||
      layout.SpanBytes(first) < kMarkerBytes) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "preset %s: the first buffer '%s' is not a BF16 buffer of at least %d bytes at offset 0 "
        "(it carries each page's index)",
        preset, first.name, kMarkerBytes));
  }
  return absl::OkStatus();
}

namespace {

// 32 BF16 values, +1 or -1 by the bits of `page` (bit j -> value j), little-endian: the first
// kMarkerBytes of source page `page`, so that pages differ and stay finite.
void WriteMarker(uint32_t page, uint8_t* out) {
  for (uint32_t j = 0; j < kMarkerBytes / 2; ++j) {
    EncodeFixed16(out + 2 * j, ((page >> j) & 1) != 0 ? 0x3F80 : 0xBF80);  // 1.0, -1.0
  }
}

// Source page `page` as it is in device memory: the generated page with its marker.
std::vector<uint8_t> ReferencePage(const std::vector<uint8_t>& host_page, uint32_t page) {
  std::vector<uint8_t> out = host_page;
  WriteMarker(page, out.data());
  return out;
}

// Slots [0, pages) get the generated page with their markers; `zeroed` slots get zeros.
absl::Status FillPool(const DeviceBuffer& pool, uint64_t slot_bytes, uint32_t pages,
                      const std::vector<uint8_t>& host_page, const std::vector<uint32_t>& zeroed) {
  // Every source stays alive and unchanged until the stream is synchronized.
  std::vector<uint8_t> markers(pages * kMarkerBytes);
  const std::vector<uint8_t> zeros(slot_bytes, 0);
  void* stream = kernels::PerThreadStream();
  for (uint32_t i = 0; i < pages; ++i) {
    uint8_t* slot = pool.data() + uint64_t{i} * slot_bytes;
    WriteMarker(i, markers.data() + i * kMarkerBytes);
    if (absl::Status st = kernels::CopyAsync(slot, host_page.data(), slot_bytes, stream);
        !st.ok()) {
      return st;
    }
    if (absl::Status st =
            kernels::CopyAsync(slot, markers.data() + i * kMarkerBytes, kMarkerBytes, stream);
        !st.ok()) {
      return st;
    }
  }
  for (uint32_t s : zeroed) {
    if (absl::Status st = kernels::CopyAsync(pool.data() + uint64_t{s} * slot_bytes, zeros.data(),
                                             slot_bytes, stream);
        !st.ok()) {
      return st;
    }
  }
  return kernels::SynchronizeStream(stream);
}

uint64_t Mix64(uint64_t x) {  // the SplitMix64 finalizer: a bijection
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return x;
}

// A 32-byte block hash, distinct for every (codec, round, page) of one run (its first 8 bytes are
// a bijection of them for a fixed salt); the salt, the daemon's incarnation id, keeps a reused
// --dir from answering ALREADY_STORED. REQUIRES: round, page < 2^24.
std::string BlockHash(uint64_t salt, uint32_t codec, uint32_t round, uint32_t page) {
  const uint64_t key = (uint64_t{codec} << 48) | (uint64_t{round} << 24) | page;
  std::string h(32, '\0');
  uint64_t word = Mix64(key ^ salt);
  for (size_t b = 0; b < h.size(); b += 8) {
    std::memcpy(h.data() + b, &word, 8);
    word = Mix64(word + 0x9E3779B97F4A7C15ull);
  }
  return h;
}

// ---- The run ----

// cudaMemcpy of `bytes` from device memory to pinned host memory and back, best of kCopyRepeats.
absl::Status MeasureCopies(uint64_t bytes, Baseline* out) {
  absl::StatusOr<std::unique_ptr<DeviceBuffer>> device = AllocateDevice(bytes);
  if (!device.ok()) return device.status();
  absl::StatusOr<std::unique_ptr<PinnedHostBuffer>> host = PinnedHostBuffer::Create(bytes);
  if (!host.ok()) return host.status();
  out->copy_bytes = bytes;
  const auto time_copy = [&](void* dst, const void* src, double* best) -> absl::Status {
    *best = 0;
    for (int k = 0; k < kCopyRepeats; ++k) {
      const Clock::time_point start = Clock::now();
      if (absl::Status st = CopyAndWait(dst, src, bytes); !st.ok()) return st;
      const double ms = Milliseconds(Clock::now() - start);
      if (k == 0 || ms < *best) *best = ms;
    }
    return absl::OkStatus();
  };
  if (absl::Status st = time_copy((*host)->data(), (*device)->data(), &out->d2h_ms); !st.ok()) {
    return st;
  }
  return time_copy((*device)->data(), (*host)->data(), &out->h2d_ms);
}

// Offload RPCs of no items on `engine_id`: kEmptyOffloadWarmup untimed, then kEmptyOffloads timed.
absl::Status MeasureEmptyOffload(DaemonProcess& daemon, const std::string& engine_id,
                                 Baseline* out) {
  v1::OffloadRequest req;
  req.set_engine_id(engine_id);
  req.set_ack(v1::WRITE_ACK_STORED);
  std::vector<double> us;
  for (int i = 0; i < kEmptyOffloadWarmup + kEmptyOffloads; ++i) {
    v1::OffloadResponse resp;
    const Clock::time_point start = Clock::now();
    grpc::ClientContext ctx;
    ctx.set_deadline(RpcDeadline());
    const grpc::Status st = daemon.stub().Offload(&ctx, req, &resp);
    const Clock::time_point end = Clock::now();
    if (!st.ok()) return RpcError(absl::StrCat("Offload of no pages (", i, ")"), st);
    if (resp.results_size() != 0) {
      return absl::InternalError(
          absl::StrFormat("Offload of no pages answered %d results", resp.results_size()));
    }
    if (i >= kEmptyOffloadWarmup) {
      us.push_back(std::chrono::duration<double, std::micro>(end - start).count());
    }
  }
  out->empty_offload_p50_us = Median(us);
  out->empty_offload_min_us = Best(us);
  return absl::OkStatus();
}

struct Engine {
  std::string id;
  uint64_t hot_page_bytes = 0;
  uint64_t cold_block_bytes = 0;
  uint64_t namespace_id = 0;
};

// Registers an engine of `spec` whose one pool is `pool` (shared through CUDA IPC).
absl::StatusOr<Engine> RegisterEngine(DaemonProcess& daemon, const Setup& setup,
                                      const codec::CodecSpec& spec, const DeviceBuffer& pool,
                                      uint32_t slots) {
  absl::StatusOr<std::string> handle = kernels::ExportIpcMemory(pool.data());
  if (!handle.ok()) return handle.status();
  v1::RegisterEngineRequest req;
  req.set_engine_name(absl::StrCat("kvtier-bench-e2e ", spec.ToString()));
  req.set_model(absl::StrCat("kvtier-bench-e2e/", setup.flags.preset));
  proto::LayoutToProto(setup.layout, req.mutable_layout());
  proto::CodecToProto(spec, req.mutable_codec());
  v1::PoolRegistration* reg = req.add_pools();
  reg->set_name(setup.layout.pools[0].name);
  reg->set_slots(slots);
  v1::CudaIpcMemory* ipc = reg->mutable_cuda_ipc();
  ipc->set_handle(*handle);
  ipc->set_device_uuid(setup.device.uuid);
  ipc->set_device_ordinal(static_cast<uint32_t>(setup.device.ordinal));
  ipc->set_base_offset_bytes(0);
  ipc->set_size_bytes(pool.size());
  req.mutable_lease_ttl()->set_seconds(kLeaseSeconds);
  v1::RegisterEngineResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(RpcDeadline());
  if (grpc::Status st = daemon.stub().RegisterEngine(&ctx, req, &resp); !st.ok()) {
    return RpcError(absl::StrCat("RegisterEngine (codec ", spec.ToString(), ", CUDA IPC pool of ",
                                 slots, " slots)"),
                    st);
  }
  return Engine{resp.engine_id(), resp.hot_page_bytes(), resp.cold_block_bytes(),
                resp.namespace_id()};
}

absl::Status Unregister(DaemonProcess& daemon, const std::string& engine_id) {
  v1::UnregisterRequest req;
  req.set_engine_id(engine_id);
  v1::UnregisterResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(RpcDeadline());
  if (grpc::Status st = daemon.stub().Unregister(&ctx, req, &resp); !st.ok()) {
    return RpcError(absl::StrCat("Unregister of engine ", engine_id), st);
  }
  return absl::OkStatus();
}

// An error naming the first item of `results` that is not ITEM_CODE_OK, or a count that is not
// `expected`.
absl::Status CheckItems(absl::string_view what,
                        const google::protobuf::RepeatedPtrField<v1::ItemResult>& results,
                        uint32_t expected) {
  if (results.size() != static_cast<int>(expected)) {
    return absl::InternalError(
        absl::StrFormat("%s: %d results for %u items", what, results.size(), expected));
  }
  for (int i = 0; i < results.size(); ++i) {
    const v1::ItemResult& r = results.Get(i);
    if (r.code() == v1::ITEM_CODE_OK) continue;
    std::string hint;
    if (r.code() == v1::ITEM_CODE_RESOURCE_EXHAUSTED) hint = " (raise --host-capacity?)";
    if (r.code() == v1::ITEM_CODE_NOT_FOUND) hint = " (evicted from the host tier?)";
    return absl::InternalError(absl::StrFormat("%s: item %d of %u: %s%s%s%s", what, i, expected,
                                               v1::ItemCode_Name(r.code()),
                                               r.message().empty() ? "" : ": ", r.message(), hint));
  }
  return absl::OkStatus();
}

// One Offload of pages [0, pages) under fresh hashes, then one Onboard of them into slots
// [pages, 2 * pages), each timed; every item must succeed.
absl::StatusOr<RoundResult> RunRound(DaemonProcess& daemon, const Setup& setup,
                                     const Engine& engine, uint32_t codec_index, uint32_t round) {
  const uint32_t pages = setup.flags.pages;
  const std::string label = absl::StrCat(kCodecs[codec_index], " round ", round + 1);
  v1::OffloadRequest off;
  off.set_engine_id(engine.id);
  off.set_ack(v1::WRITE_ACK_STORED);
  v1::OnboardRequest on;
  on.set_engine_id(engine.id);
  for (uint32_t i = 0; i < pages; ++i) {
    const std::string hash = BlockHash(setup.salt, codec_index, round, i);
    v1::OffloadItem* o = off.add_items();
    o->set_block_hash(hash);
    o->set_page_index(i);
    v1::OnboardItem* n = on.add_items();
    n->set_block_hash(hash);
    n->set_page_index(pages + i);
  }
  RoundResult result;
  {
    v1::OffloadResponse resp;
    const Clock::time_point start = Clock::now();
    grpc::ClientContext ctx;
    ctx.set_deadline(RpcDeadline());
    const grpc::Status st = daemon.stub().Offload(&ctx, off, &resp);
    const Clock::time_point end = Clock::now();
    if (!st.ok()) return RpcError(absl::StrCat(label, ": Offload of ", pages, " pages"), st);
    if (absl::Status items = CheckItems(absl::StrCat(label, ": Offload"), resp.results(), pages);
        !items.ok()) {
      return items;
    }
    result.offload_ms = Milliseconds(end - start);
    result.hot_bytes_read = resp.hot_bytes_read();
    result.cold_bytes_written = resp.cold_bytes_written();
  }
  {
    v1::OnboardResponse resp;
    const Clock::time_point start = Clock::now();
    grpc::ClientContext ctx;
    ctx.set_deadline(RpcDeadline());
    const grpc::Status st = daemon.stub().Onboard(&ctx, on, &resp);
    const Clock::time_point end = Clock::now();
    if (!st.ok()) return RpcError(absl::StrCat(label, ": Onboard of ", pages, " pages"), st);
    if (absl::Status items = CheckItems(absl::StrCat(label, ": Onboard"), resp.results(), pages);
        !items.ok()) {
      return items;
    }
    if (resp.onboarded_pages() != pages) {
      return absl::InternalError(absl::StrFormat(
          "%s: Onboard answered onboarded_pages %u with every one of its %u items OK", label,
          resp.onboarded_pages(), pages));
    }
    result.onboard_ms = Milliseconds(end - start);
    result.cold_bytes_read = resp.cold_bytes_read();
    result.hot_bytes_written = resp.hot_bytes_written();
  }
  return result;
}

// Offset of the first byte where `a` and `b` differ, and how many bytes differ. REQUIRES: same
// sizes.
std::pair<size_t, size_t> Differences(const std::vector<uint8_t>& a,
                                      const std::vector<uint8_t>& b) {
  size_t first = a.size();
  size_t count = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) {
      if (count++ == 0) first = i;
    }
  }
  return {first, count};
}

// After a round: downloads the first and last source pages and their onboarded copies. Every
// source must be the uploaded page; raw copies must be identical to their sources, nvfp4 copies
// non-zero and within kMaxNvfp4RelativeRmse of them.
absl::StatusOr<PageCheck> CheckOnboarded(const Setup& setup, const codec::CodecSpec& spec,
                                         const DeviceBuffer& pool, const Engine& engine,
                                         const RoundResult& round) {
  const uint32_t pages = setup.flags.pages;
  const uint64_t slot_bytes = setup.slot_bytes;
  const std::string codec_name = spec.ToString();
  const bool lossless = spec.codec == codec::CodecId::kRaw;
  // The size of what came back: the daemon's accounting of the batch.
  if (engine.hot_page_bytes != slot_bytes ||
      round.hot_bytes_written != uint64_t{pages} * engine.hot_page_bytes ||
      round.hot_bytes_read != uint64_t{pages} * engine.hot_page_bytes) {
    return absl::InternalError(absl::StrFormat(
        "codec %s: %u pages of %d bytes (slot %d bytes) offloaded as %d hot bytes read and "
        "onboarded as %d hot bytes written",
        codec_name, pages, engine.hot_page_bytes, slot_bytes, round.hot_bytes_read,
        round.hot_bytes_written));
  }
  PageCheck check;
  check.pages = {0};
  if (pages > 1) check.pages.push_back(pages - 1);
  std::unique_ptr<codec::Codec> cpu;
  std::unique_ptr<tools::RoundTripper> tripper;
  if (!lossless) {
    absl::StatusOr<std::unique_ptr<codec::Codec>> created =
        codec::Codec::Create(setup.layout, spec);
    if (!created.ok()) return created.status();
    cpu = *std::move(created);
    tripper = std::make_unique<tools::RoundTripper>(*cpu);
  }
  tools::PageComparison comparison(setup.layout);
  check.identical = true;
  check.cpu_codec_match = true;
  for (uint32_t p : check.pages) {
    const uint32_t dst = pages + p;
    absl::StatusOr<std::vector<uint8_t>> source =
        Download(pool.data() + uint64_t{p} * slot_bytes, slot_bytes);
    if (!source.ok()) return source.status();
    absl::StatusOr<std::vector<uint8_t>> onboarded =
        Download(pool.data() + uint64_t{dst} * slot_bytes, slot_bytes);
    if (!onboarded.ok()) return onboarded.status();
    if (const auto [first, count] = Differences(ReferencePage(setup.host_page, p), *source);
        count != 0) {
      return absl::InternalError(absl::StrFormat(
          "codec %s: source page %u in device memory differs from the page uploaded into it in "
          "%d of %d bytes, the first at offset %d (Offload must not write its sources)",
          codec_name, p, count, slot_bytes, first));
    }
    const auto [first, count] = Differences(*source, *onboarded);
    if (count != 0) check.identical = false;
    if (lossless) {
      if (count != 0) {
        return absl::DataLossError(absl::StrFormat(
            "codec raw is lossless, but page %u onboarded into slot %u differs from its source "
            "(slot %u) in %d of %d bytes, the first at offset %d",
            p, dst, p, count, slot_bytes, first));
      }
      continue;
    }
    if (std::all_of(onboarded->begin(), onboarded->end(), [](uint8_t b) { return b == 0; })) {
      return absl::DataLossError(absl::StrFormat(
          "codec %s: page %u onboarded into slot %u is all zeros (zeroed before the Onboard, "
          "which answered OK)",
          codec_name, p, dst));
    }
    comparison.Add(*source, *onboarded);
    std::vector<uint8_t> cpu_page(slot_bytes);
    if (absl::Status st = tripper->Run(*source, 1, absl::MakeSpan(cpu_page)); !st.ok()) {
      return st;
    }
    if (cpu_page != *onboarded) check.cpu_codec_match = false;
  }
  if (!lossless) {
    const tools::BufferErrorStats total = comparison.Total();
    check.relative_rmse = total.RelativeRmse();
    check.snr_db = total.SnrDb();
    if (!(check.relative_rmse < kMaxNvfp4RelativeRmse)) {  // NaN fails too
      return absl::DataLossError(absl::StrFormat(
          "codec %s: pages %s onboarded with a relative RMSE of %g against their sources (at "
          "most %g expected; about 0.095 for these N(0,1) values, 1 for zeros)",
          codec_name, absl::StrJoin(check.pages, " and "), check.relative_rmse,
          kMaxNvfp4RelativeRmse));
    }
  }
  return check;
}

// The daemon's statistics of `which` (an empty TierStats when it has none).
absl::StatusOr<v1::TierStats> TierStatsOf(DaemonProcess& daemon, v1::Tier which) {
  v1::StatsResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(RpcDeadline());
  if (grpc::Status st = daemon.stub().Stats(&ctx, v1::StatsRequest(), &resp); !st.ok()) {
    return RpcError("Stats", st);
  }
  for (const v1::TierStats& t : resp.tiers()) {
    if (t.tier() == which) return t;
  }
  return v1::TierStats();
}

// With a GPU tier holding the engine's offloaded pages: asks the daemon to demote them all (admin
// Evict of the GPU tier: the background thread's fused encode into the host tier) and times until
// the tier is empty, polling Stats every millisecond. Sets the result's demotion figures; nothing
// when the tier holds none of them.
absl::Status MeasureGpuTierDemotion(DaemonProcess& daemon, const Engine& engine,
                                    CodecResult* result) {
  absl::StatusOr<v1::TierStats> before = TierStatsOf(daemon, v1::TIER_GPU);
  if (!before.ok()) return before.status();
  if (before->blocks() == 0) return absl::OkStatus();
  const Clock::time_point start = Clock::now();
  {
    v1::EvictRequest req;
    req.mutable_namespaces()->set_namespace_id(engine.namespace_id);
    req.set_tier(v1::TIER_GPU);
    req.set_block_count(before->blocks());
    v1::EvictResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(RpcDeadline());
    if (grpc::Status st = daemon.admin().Evict(&ctx, req, &resp); !st.ok()) {
      return RpcError("admin Evict of the GPU tier", st);
    }
  }
  while (true) {
    absl::StatusOr<v1::TierStats> now = TierStatsOf(daemon, v1::TIER_GPU);
    if (!now.ok()) return now.status();
    if (now->blocks() == 0) break;
    if (Clock::now() - start > std::chrono::seconds(60)) {
      return absl::DeadlineExceededError(absl::StrFormat(
          "the GPU tier still holds %d of %d pages 60 s after they were to be demoted",
          now->blocks(), before->blocks()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  result->gpu_demoted_pages = before->blocks();
  result->gpu_demote_ms = Milliseconds(Clock::now() - start);
  return absl::OkStatus();
}

// The rounds of one registered engine (and, for the first, the empty-Offload baseline).
absl::StatusOr<CodecResult> MeasureEngine(DaemonProcess& daemon, const Setup& setup,
                                          const codec::CodecSpec& spec, uint32_t codec_index,
                                          const DeviceBuffer& pool, const Engine& engine,
                                          Baseline* baseline) {
  const uint32_t pages = setup.flags.pages;
  if (engine.cold_block_bytes == 0 ||
      uint64_t{pages} * engine.cold_block_bytes > setup.flags.host_capacity_bytes) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "codec %s: a batch of %u cold blocks of %d bytes does not fit the host tier "
        "(--host-capacity=%s); lower --pages or raise --host-capacity",
        spec.ToString(), pages, engine.cold_block_bytes, setup.flags.host_capacity));
  }
  if (codec_index == 0) {
    if (absl::Status st = MeasureEmptyOffload(daemon, engine.id, baseline); !st.ok()) return st;
  }
  CodecResult result;
  result.codec = spec.ToString();
  result.hot_page_bytes = engine.hot_page_bytes;
  result.cold_block_bytes = engine.cold_block_bytes;
  for (uint32_t r = 0; r < setup.flags.rounds; ++r) {
    absl::StatusOr<RoundResult> round = RunRound(daemon, setup, engine, codec_index, r);
    if (!round.ok()) return round.status();
    if (!setup.flags.json) {
      const uint64_t hot = result.BatchHotBytes(pages);
      std::fprintf(stderr,
                   "%s round %u/%u: offload %.2f ms (%.2f GB/s), onboard %.2f ms (%.2f GB/s)\n",
                   result.codec.c_str(), r + 1, setup.flags.rounds, round->offload_ms,
                   GBps(hot, round->offload_ms), round->onboard_ms, GBps(hot, round->onboard_ms));
    }
    if (r == 0) {
      absl::StatusOr<PageCheck> check = CheckOnboarded(setup, spec, pool, engine, *round);
      if (!check.ok()) return check.status();
      result.check = *std::move(check);
    }
    result.rounds.push_back(*round);
  }
  if (absl::Status st = MeasureGpuTierDemotion(daemon, engine, &result); !st.ok()) return st;
  return result;
}

// One codec from allocation to unregistration. The pool is freed here once its engine is
// unregistered, else after the daemon has exited (Resources).
absl::StatusOr<CodecResult> RunCodec(DaemonProcess& daemon, Resources& resources,
                                     const Setup& setup, uint32_t codec_index, Baseline* baseline) {
  absl::StatusOr<codec::CodecSpec> spec = codec::CodecSpec::Parse(kCodecs[codec_index]);
  if (!spec.ok()) return spec.status();
  const uint32_t pages = setup.flags.pages;
  const uint32_t slots = 2 * pages;
  absl::StatusOr<std::unique_ptr<DeviceBuffer>> allocated =
      AllocateDevice(uint64_t{slots} * setup.slot_bytes);
  if (!allocated.ok()) return allocated.status();
  resources.pools.push_back(*std::move(allocated));
  DeviceBuffer& pool = *resources.pools.back();
  std::vector<uint32_t> zeroed = {pages};  // the destinations of the checked pages
  if (pages > 1) zeroed.push_back(2 * pages - 1);
  if (absl::Status st = FillPool(pool, setup.slot_bytes, pages, setup.host_page, zeroed);
      !st.ok()) {
    return st;
  }
  absl::StatusOr<Engine> engine = RegisterEngine(daemon, setup, *spec, pool, slots);
  if (!engine.ok()) return engine.status();
  if (!setup.flags.json) {
    std::fprintf(stderr,
                 "codec %s: engine %s, %llu hot bytes a page, cold blocks of %llu bytes; pool of "
                 "%u slots (%.3f GB) on device %d\n",
                 spec->ToString().c_str(), engine->id.c_str(),
                 static_cast<unsigned long long>(engine->hot_page_bytes),
                 static_cast<unsigned long long>(engine->cold_block_bytes), slots,
                 static_cast<double>(pool.size()) / 1e9, setup.device.ordinal);
  }
  absl::StatusOr<CodecResult> result =
      MeasureEngine(daemon, setup, *spec, codec_index, pool, *engine, baseline);
  const absl::Status unregistered = Unregister(daemon, engine->id);  // on errors too
  if (unregistered.ok()) pool.Free();                                // the daemon has unmapped it
  if (!result.ok()) return result.status();
  if (!unregistered.ok()) return unregistered;
  return result;
}

}  // namespace

absl::StatusOr<Report> RunWithDaemon(DaemonProcess& daemon, Resources& resources, Setup& setup,
                                     const std::string& kvtierd, const std::string& dir) {
  std::vector<std::string> settings = {
      "host.pin=cuda",       "host.capacity=" + setup.flags.host_capacity,
      "host.chunk=64MiB",
      "disk.capacity=0",  // no disk tier
      "metrics.listen=\"\"", "server.workers=4"};
  if (!setup.flags.gpu_capacity.empty())
    settings.push_back("gpu.capacity=" + setup.flags.gpu_capacity);
  DaemonStartOptions options;
  options.client_name = "kvtier-bench e2e";
  options.start_timeout = kStartTimeout;
  if (absl::Status started = daemon.Start(kvtierd, dir, settings, options); !started.ok()) {
    return started;
  }
  Report report;
  report.server_version = daemon.hello().server_version();
  setup.salt = daemon.hello().incarnation_id();
  if (!setup.flags.json) {
    std::fprintf(stderr, "kvtierd %s (pid %d) answers on %s\n", report.server_version.c_str(),
                 static_cast<int>(daemon.pid()), daemon.socket_path().c_str());
  }
  const uint32_t limit = daemon.hello().limits().max_items_per_request();
  if (limit != 0 && setup.flags.pages > limit) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--pages=%u is more than the daemon's %u items per request", setup.flags.pages, limit));
  }
  if (absl::Status st =
          MeasureCopies(uint64_t{setup.flags.pages} * setup.slot_bytes, &report.baseline);
      !st.ok()) {
    return st;
  }
  if (!setup.flags.json) {
    std::fprintf(stderr, "cudaMemcpy of %.3f GB: device -> pinned host %.2f ms, back %.2f ms\n",
                 static_cast<double>(report.baseline.copy_bytes) / 1e9, report.baseline.d2h_ms,
                 report.baseline.h2d_ms);
  }
  for (uint32_t c = 0; c < std::size(kCodecs); ++c) {
    absl::StatusOr<CodecResult> result = RunCodec(daemon, resources, setup, c, &report.baseline);
    if (!result.ok()) return result.status();
    report.codecs.push_back(*std::move(result));
  }
  return report;
}

}  // namespace kvtier::bench::e2e_internal
