// FormatBytes (see format_bytes.h).
#include "common/format_bytes.h"

#include "absl/strings/str_format.h"

namespace kvtier {

std::string FormatBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 5) {
    value /= 1024;
    ++unit;
  }
  if (unit == 0) return absl::StrFormat("%d B", bytes);
  return absl::StrFormat("%.1f %s", value, kUnits[unit]);
}

}  // namespace kvtier
