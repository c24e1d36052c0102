// ZipArchive: a read-only view of an in-memory ZIP archive, restricted to what torch.save writes:
// stored (uncompressed) entries on one disk, no encryption, no ZIP64 sizes. Parse checks every
// offset and size against the buffer; entry bytes are borrowed from it, never copied.
// An archive is immutable after Parse and may be read from several threads.
#ifndef KVTIER_TRIATTENTION_ZIP_ARCHIVE_H_
#define KVTIER_TRIATTENTION_ZIP_ARCHIVE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace kvtier::triattention {

// One file of the archive, as its central directory entry and local header describe it.
struct ZipEntry {
  std::string name;
  uint64_t data_offset = 0;  // first byte of the stored data, from the start of the archive
  uint64_t size = 0;         // bytes of data (stored: compressed size == uncompressed size)
  uint32_t crc32 = 0;        // CRC-32 of the data, from the central directory
};

class ZipArchive {
 public:
  // Parses the end-of-central-directory record, the central directory and every entry's local
  // header. `file` is borrowed: it must outlive the archive and every span that Read returns.
  // InvalidArgument: no end-of-central-directory record (not a ZIP archive, or truncated), a
  // record that reaches past its region, a compressed or encrypted entry, a duplicate or empty
  // name, overlapping entries, a multi-disk archive, or ZIP64 sizes (refused: calibration files
  // are far below 4 GiB, and torch writes plain sizes for them). Does not block.
  static absl::StatusOr<ZipArchive> Parse(absl::Span<const uint8_t> file);

  // In central-directory order.
  const std::vector<ZipEntry>& entries() const { return entries_; }

  // The entry named exactly `name`, or nullptr when there is none.
  const ZipEntry* Find(absl::string_view name) const;

  // The stored bytes of `entry` (one of entries()), after checking them against the entry's
  // CRC-32: DataLoss naming the entry and both checksums on a mismatch.
  absl::StatusOr<absl::Span<const uint8_t>> Read(const ZipEntry& entry) const;

 private:
  absl::Span<const uint8_t> file_;
  std::vector<ZipEntry> entries_;
  absl::flat_hash_map<std::string, size_t> by_name_;
};

// The CRC-32 of ZIP (IEEE 802.3, reflected polynomial 0xEDB88320) over `bytes`.
uint32_t ZipCrc32(absl::Span<const uint8_t> bytes);

}  // namespace kvtier::triattention

#endif  // KVTIER_TRIATTENTION_ZIP_ARCHIVE_H_
