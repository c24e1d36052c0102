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
#include "common/coding.h"
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

// A stored ZIP archive of `entries` with correct sizes and CRCs.
std::vector<uint8_t> StoredZip(
    const std::vector<std::pair<std::string, absl::Span<const uint8_t>>>& entries) {
  std::vector<uint8_t> out;
  std::vector<uint8_t> central;
  for (const auto& [name, data] : entries) {
    const uint32_t crc = ZipCrc32(data);
    const size_t offset = out.size();
    PutFixed32(&out, 0x04034b50);
    PutFixed16(&out, 20);  // version needed
    PutFixed16(&out, 0);   // flags
    PutFixed16(&out, 0);   // method: stored
    PutFixed32(&out, 0);   // time, date
    PutFixed32(&out, crc);
    PutFixed32(&out, static_cast<uint32_t>(data.size()));
    PutFixed32(&out, static_cast<uint32_t>(data.size()));
    PutFixed16(&out, static_cast<uint16_t>(name.size()));
    PutFixed16(&out, 0);  // extra length
    out.insert(out.end(), name.begin(), name.end());
    out.insert(out.end(), data.begin(), data.end());
    PutFixed32(&central, 0x02014b50);
    PutFixed16(&central, 20);  // version made by
    PutFixed16(&central, 20);  // version needed
    PutFixed16(&central, 0);   // flags
    PutFixed16(&central, 0);   // method
    PutFixed32(&central, 0);   // time, date
    PutFixed32(&central, crc);
    PutFixed32(&central, static_cast<uint32_t>(data.size()));
    PutFixed32(&central, static_cast<uint32_t>(data.size()));
    PutFixed16(&central, static_cast<uint16_t>(name.size()));
    PutFixed16(&central, 0);  // extra length
    PutFixed16(&central, 0);  // comment length
    PutFixed16(&central, 0);  // disk
    PutFixed16(&central, 0);  // internal attributes
    PutFixed32(&central, 0);  // external attributes
    PutFixed32(&central, static_cast<uint32_t>(offset));
    central.insert(central.end(), name.begin(), name.end());
  }
  const size_t cd_offset = out.size();
  out.insert(out.end(), central.begin(), central.end());
  PutFixed32(&out, 0x06054b50);
  PutFixed32(&out, 0);  // disk numbers
  PutFixed16(&out, static_cast<uint16_t>(entries.size()));
  PutFixed16(&out, static_cast<uint16_t>(entries.size()));
  PutFixed32(&out, static_cast<uint32_t>(central.size()));
  PutFixed32(&out, static_cast<uint32_t>(cd_offset));
  PutFixed16(&out, 0);  // comment length
  return out;
}

std::vector<uint8_t> FloatBytes(size_t count) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i < count; ++i) {
    const float v = 0.25f * static_cast<float>(i % 13) + 0.5f;
    uint32_t bits;
    static_assert(sizeof(bits) == sizeof(v));
    __builtin_memcpy(&bits, &v, sizeof(bits));
    PutFixed32(&out, bits);
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
