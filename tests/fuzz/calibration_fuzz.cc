// libFuzzer target for the TriAttention calibration loaders (triattention/calibration.h) and the
// torch.save reader under them. Nothing may crash, read out of bounds, hit undefined behaviour,
// leak or allocate without bound; a loader that fails must say InvalidArgument or DataLoss, and
// one that succeeds must return arrays of the sizes its geometry promises, with finite values.
// Built by tests/fuzz/CMakeLists.txt (KVTIER_BUILD_FUZZERS=ON, clang). Single-threaded.
//
// Two ways in per input:
//  1. The input as a whole file, for ParseTorchCalibration (ZIP parsing) and
//     ParseSafetensorsCalibration (header length, JSON, offsets).
//  2. The input as `archive/data.pkl` of a well-formed stored ZIP archive with correct CRCs and
//     three storages ("0": 64 float32, "1": 32 complex64, "2": 8 float32), so that the fuzzer
//     reaches the pickle interpreter and the official and flat conversions instead of stopping at
//     the archive checks. Seeds: the .pt files of tests/unit/triattention/make_calibration.py
//     (their data.pkl for this way in).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "triattention/calibration.h"
#include "triattention/zip_archive.h"

namespace kvtier::triattention {
namespace {

[[noreturn]] void Fail(const char* what, absl::string_view detail) {
  std::fprintf(stderr, "calibration_fuzz: %s: %.*s\n", what, static_cast<int>(detail.size()),
               detail.data());
  std::abort();
}

void Check(const char* name, const absl::StatusOr<Calibration>& result) {
  if (!result.ok()) {
    const absl::StatusCode code = result.status().code();
    if (code != absl::StatusCode::kInvalidArgument && code != absl::StatusCode::kDataLoss) {
      Fail(name, result.status().ToString());
    }
    return;
  }
  const Calibration& c = *result;
  const size_t values = static_cast<size_t>(c.layers) * c.heads * c.bands;
  if (c.layers < 1 || c.heads < 1 || c.bands < 1 || c.q_mean_real.size() != values ||
      c.q_mean_imag.size() != values || c.q_abs_mean.size() != values ||
      c.present.size() != static_cast<size_t>(c.layers) * c.heads || c.head_dim != 2 * c.bands ||
      c.rope_style != "half") {
    Fail(name, "accepted a calibration whose arrays do not match its geometry");
  }
  for (size_t i = 0; i < values; ++i) {
    if (!std::isfinite(c.q_mean_real[i]) || !std::isfinite(c.q_mean_imag[i]) ||
        !(c.q_abs_mean[i] >= 0) || !std::isfinite(c.q_abs_mean[i])) {
      Fail(name, "accepted a non-finite or negative statistic");
    }
  }
  for (const auto* table : {&c.omega, &c.freq_scale_sq}) {
    if (table->has_value() && (*table)->size() != static_cast<size_t>(c.bands)) {
      Fail(name, "accepted a RoPE table of the wrong size");
    }
  }
}

void PutLe(std::vector<uint8_t>& out, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

// A stored ZIP archive of `entries` with correct sizes and CRCs.
std::vector<uint8_t> StoredZip(
    const std::vector<std::pair<std::string, absl::Span<const uint8_t>>>& entries) {
  std::vector<uint8_t> out;
  std::vector<uint8_t> central;
  for (const auto& [name, data] : entries) {
    const uint32_t crc = ZipCrc32(data);
    const size_t offset = out.size();
    PutLe(out, 0x04034b50, 4);
    PutLe(out, 20, 2);  // version needed
    PutLe(out, 0, 2);   // flags
    PutLe(out, 0, 2);   // method: stored
    PutLe(out, 0, 4);   // time, date
    PutLe(out, crc, 4);
    PutLe(out, data.size(), 4);
    PutLe(out, data.size(), 4);
    PutLe(out, name.size(), 2);
    PutLe(out, 0, 2);  // extra length
    out.insert(out.end(), name.begin(), name.end());
    out.insert(out.end(), data.begin(), data.end());
    PutLe(central, 0x02014b50, 4);
    PutLe(central, 20, 2);  // version made by
    PutLe(central, 20, 2);  // version needed
    PutLe(central, 0, 2);   // flags
    PutLe(central, 0, 2);   // method
    PutLe(central, 0, 4);   // time, date
    PutLe(central, crc, 4);
    PutLe(central, data.size(), 4);
    PutLe(central, data.size(), 4);
    PutLe(central, name.size(), 2);
    PutLe(central, 0, 2);  // extra length
    PutLe(central, 0, 2);  // comment length
    PutLe(central, 0, 2);  // disk
    PutLe(central, 0, 2);  // internal attributes
    PutLe(central, 0, 4);  // external attributes
    PutLe(central, offset, 4);
    central.insert(central.end(), name.begin(), name.end());
  }
  const size_t cd_offset = out.size();
  out.insert(out.end(), central.begin(), central.end());
  PutLe(out, 0x06054b50, 4);
  PutLe(out, 0, 4);  // disk numbers
  PutLe(out, entries.size(), 2);
  PutLe(out, entries.size(), 2);
  PutLe(out, central.size(), 4);
  PutLe(out, cd_offset, 4);
  PutLe(out, 0, 2);  // comment length
  return out;
}

std::vector<uint8_t> FloatBytes(size_t count) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i < count; ++i) {
    const float v = 0.25f * static_cast<float>(i % 13) + 0.5f;
    uint32_t bits;
    static_assert(sizeof(bits) == sizeof(v));
    __builtin_memcpy(&bits, &v, sizeof(bits));
    PutLe(out, bits, 4);
  }
  return out;
}

}  // namespace
}  // namespace kvtier::triattention

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvtier::triattention;  // NOLINT(build/namespaces): entry point of this file only
  const absl::Span<const uint8_t> input(data, size);
  Check("torch file", ParseTorchCalibration(input));
  Check("safetensors file", ParseSafetensorsCalibration(input));

  static const std::vector<uint8_t> kStorage0 = FloatBytes(64);
  static const std::vector<uint8_t> kStorage1 = FloatBytes(64);  // 32 complex64
  static const std::vector<uint8_t> kStorage2 = FloatBytes(8);
  static const std::vector<uint8_t> kLittle = {'l', 'i', 't', 't', 'l', 'e'};
  const std::vector<uint8_t> archive = StoredZip({
      {"archive/data.pkl", input},
      {"archive/byteorder", kLittle},
      {"archive/data/0", kStorage0},
      {"archive/data/1", kStorage1},
      {"archive/data/2", kStorage2},
  });
  Check("pickle in an archive", ParseTorchCalibration(archive));
  return 0;
}
