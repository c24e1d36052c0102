// Internal to `kvtier-bench e2e`, shared by its two sources: e2e_bench.cc (flags, the run, the
// report) and e2e_bench_engine.cc (this process as the engine: its memory, the kvtierd child's
// engines, the timed rounds and the baselines). The flags, the state and results of a run, and
// the entry points that e2e_bench.cc calls. Not an API; single-threaded.
#ifndef KVTIER_TOOLS_BENCH_E2E_BENCH_INTERNAL_H_
#define KVTIER_TOOLS_BENCH_E2E_BENCH_INTERNAL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "codec/page_layout.h"
#include "kernels/device.h"
#include "tools/bench/daemon_process.h"
#include "tools/codec/model_presets.h"

namespace kvtier::bench::e2e_internal {

inline constexpr int kCopyRepeats = 3;
inline constexpr int kEmptyOffloads = 50;

struct E2eFlags {
  std::string kvtierd;  // empty: the kvtierd next to this binary
  std::string dir;      // empty: a fresh directory under /tmp, removed at the end
  uint32_t pages = 256;
  uint32_t rounds = 3;
  std::string preset = std::string(tools::kQwen3_8bPreset);
  uint32_t layers = 0;                  // 0: the preset model's
  std::string host_capacity = "16GiB";  // passed to the daemon as written
  uint64_t host_capacity_bytes = uint64_t{16} << 30;
  std::string gpu_capacity;  // gpu.capacity as written; empty: no GPU tier
  bool json = false;
};

// Bytes per second in GB/s (1e9 bytes); 0 for a zero time.
double GBps(uint64_t bytes, double ms);

// The smallest value; 0 for none.
double Best(const std::vector<double>& values);

// The middle value (the mean of the two middle ones for an even count).
double Median(std::vector<double> values);

// Device memory from kernels::AllocateDeviceMemory; freed by Free() or the destructor.
class DeviceBuffer {
 public:
  DeviceBuffer(void* ptr, uint64_t bytes) : ptr_(static_cast<uint8_t*>(ptr)), bytes_(bytes) {}
  ~DeviceBuffer() { Free(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void Free() {
    kernels::FreeDeviceMemory(ptr_);  // nullptr is fine
    ptr_ = nullptr;
  }
  uint8_t* data() const { return ptr_; }
  uint64_t size() const { return bytes_; }

 private:
  uint8_t* ptr_;
  uint64_t bytes_;
};

// The layout of a --preset: one pool "kv", buffers back to back.
// The preset's layout, with `layers` layers instead of the model's when it is not 0.
absl::StatusOr<codec::PageLayout> PresetLayout(absl::string_view preset, uint32_t layers);

// What this benchmark assumes of a layout: flat (one pool whose slot is exactly the flat page, as
// the daemon's GPU data plane needs), and a first buffer of BF16 values at least kMarkerBytes long
// (the page-index marker).
absl::Status CheckLayout(const codec::PageLayout& layout, absl::string_view preset);

// Everything the codecs share.
struct Setup {
  E2eFlags flags;
  kernels::DeviceInfo device;
  codec::PageLayout layout;
  uint64_t slot_bytes = 0;
  std::vector<uint8_t> host_page;  // the generated page, without a marker
  uint64_t salt = 0;               // the daemon's incarnation id
};

// Device pools of registered engines, kept until the daemon has exited unless their engine was
// unregistered (the daemon may still map a pool whose registration failed or timed out).
struct Resources {
  std::vector<std::unique_ptr<DeviceBuffer>> pools;
};

struct Baseline {
  uint64_t copy_bytes = 0;  // pages * slot_bytes, each way
  double d2h_ms = 0;        // best of kCopyRepeats
  double h2d_ms = 0;
  double empty_offload_p50_us = 0;
  double empty_offload_min_us = 0;
};

struct RoundResult {
  double offload_ms = 0;
  double onboard_ms = 0;
  uint64_t hot_bytes_read = 0;  // from the responses
  uint64_t cold_bytes_written = 0;
  uint64_t cold_bytes_read = 0;
  uint64_t hot_bytes_written = 0;
};

struct PageCheck {
  std::vector<uint32_t> pages;  // source pages checked (onboarded into pages + flags.pages)
  bool identical = false;       // onboarded pages byte for byte equal to their sources
  double relative_rmse = 0;     // nvfp4: of the checked pages against their sources
  double snr_db = 0;
  bool cpu_codec_match = false;  // nvfp4: bit-identical to the CPU codec's round trip
};

struct CodecResult {
  std::string codec;
  uint64_t hot_page_bytes = 0;
  uint64_t cold_block_bytes = 0;
  std::vector<RoundResult> rounds;
  PageCheck check;
  // With a GPU tier: its pages of every round demoted into the host tier by the background
  // thread's fused encode, and how long from the request until the tier was empty.
  uint64_t gpu_demoted_pages = 0;
  double gpu_demote_ms = 0;

  std::vector<double> OffloadMs() const {
    std::vector<double> v;
    for (const RoundResult& r : rounds) v.push_back(r.offload_ms);
    return v;
  }
  std::vector<double> OnboardMs() const {
    std::vector<double> v;
    for (const RoundResult& r : rounds) v.push_back(r.onboard_ms);
    return v;
  }
  uint64_t BatchHotBytes(uint32_t pages) const { return uint64_t{pages} * hot_page_bytes; }
};

struct Report {
  std::string server_version;
  Baseline baseline;
  std::vector<CodecResult> codecs;  // in kCodecs order
};

// Everything between starting the daemon and stopping it: starts kvtierd from `kvtierd` on `dir`
// (the caller stops it, on errors too), then the baselines and every codec in turn. Pools whose
// engine could not be unregistered stay in `resources` until the daemon has exited.
absl::StatusOr<Report> RunWithDaemon(DaemonProcess& daemon, Resources& resources, Setup& setup,
                                     const std::string& kvtierd, const std::string& dir);

}  // namespace kvtier::bench::e2e_internal

#endif  // KVTIER_TOOLS_BENCH_E2E_BENCH_INTERNAL_H_
