// FormatBytes: a byte count as a person reads it in a log line ("256.0 GiB", "512 B"), in binary
// units. Stateless and thread-safe.
#ifndef KVTIER_COMMON_FORMAT_BYTES_H_
#define KVTIER_COMMON_FORMAT_BYTES_H_

#include <cstdint>
#include <string>

namespace kvtier {

// "512 B" below 1 KiB, else one decimal in the largest binary unit that keeps the value at least
// 1 ("1.5 KiB", "4.0 MiB", "256.0 GiB", "1.0 TiB", up to PiB).
std::string FormatBytes(uint64_t bytes);

}  // namespace kvtier

#endif  // KVTIER_COMMON_FORMAT_BYTES_H_
