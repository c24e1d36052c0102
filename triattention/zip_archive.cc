// ZIP parsing for torch.save archives (APPNOTE.TXT 6.3 is the specification).
// The central directory is the source of truth for sizes, CRCs and offsets: torch's writer (miniz)
// sets general-purpose bit 3 and leaves the local header's sizes at zero, putting them in a data
// descriptor after the data. The local header is only used to find where the data starts (its
// name and extra-field lengths; torch pads the extra field so that tensor data is 64-byte
// aligned) and must repeat the central directory's name and method. miniz also writes ZIP64 end
// records when torch asks for ZIP64 support; they sit between the central directory and the
// classic end record and are ignored as long as the classic record's fields are not saturated.
#include "triattention/zip_archive.h"

#include <algorithm>
#include <array>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/coding.h"

namespace kvtier::triattention {
namespace {

constexpr uint32_t kEndOfCentralDirSignature = 0x06054b50;
constexpr uint32_t kCentralDirSignature = 0x02014b50;
constexpr uint32_t kLocalHeaderSignature = 0x04034b50;
constexpr size_t kEndOfCentralDirBytes = 22;
constexpr size_t kCentralDirEntryBytes = 46;
constexpr size_t kLocalHeaderBytes = 30;
constexpr size_t kMaxCommentBytes = 0xFFFF;
constexpr uint16_t kFlagEncrypted = 0x0001;
constexpr uint16_t kFlagStrongEncryption = 0x0040;
constexpr uint16_t kMethodStored = 0;

constexpr std::array<uint32_t, 256> MakeCrcTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    table[i] = c;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kCrcTable = MakeCrcTable();

absl::Status Malformed(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("zip archive: ", what));
}

absl::Status Zip64Refused(absl::string_view where) {
  return Malformed(
      absl::StrCat(where,
                   " needs ZIP64 (a field is saturated), which calibration files never need; "
                   "ZIP64 sizes are not supported"));
}

}  // namespace

uint32_t ZipCrc32(absl::Span<const uint8_t> bytes) {
  uint32_t c = 0xFFFFFFFFu;
  for (uint8_t b : bytes) c = kCrcTable[(c ^ b) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

absl::StatusOr<ZipArchive> ZipArchive::Parse(absl::Span<const uint8_t> file) {
  const uint8_t* base = file.data();
  const size_t size = file.size();
  if (size < kEndOfCentralDirBytes) {
    return Malformed(absl::StrCat("file of ", size,
                                  " bytes is too short for an end-of-central-directory record (",
                                  kEndOfCentralDirBytes, " bytes)"));
  }
  // The end record is the last thing in the file, followed only by its comment: scan backwards
  // for a signature whose comment length reaches exactly to the end.
  size_t eocd = size;
  const size_t lowest = size - kEndOfCentralDirBytes > kMaxCommentBytes
                            ? size - kEndOfCentralDirBytes - kMaxCommentBytes
                            : 0;
  for (size_t pos = size - kEndOfCentralDirBytes + 1; pos-- > lowest;) {
    if (DecodeFixed32(base + pos) == kEndOfCentralDirSignature &&
        pos + kEndOfCentralDirBytes + DecodeFixed16(base + pos + 20) == size) {
      eocd = pos;
      break;
    }
  }
  if (eocd == size) {
    return Malformed(absl::StrCat("no end-of-central-directory record in the last ", size - lowest,
                                  " bytes (not a ZIP archive, or a truncated one)"));
  }
  const uint8_t* e = base + eocd;
  const uint32_t disk = DecodeFixed16(e + 4);
  const uint32_t cd_disk = DecodeFixed16(e + 6);
  const uint32_t entries_on_disk = DecodeFixed16(e + 8);
  const uint32_t total_entries = DecodeFixed16(e + 10);
  const uint32_t cd_size = DecodeFixed32(e + 12);
  const uint32_t cd_offset = DecodeFixed32(e + 16);
  if (total_entries == 0xFFFF || cd_size == 0xFFFFFFFFu || cd_offset == 0xFFFFFFFFu) {
    return Zip64Refused("the end-of-central-directory record");
  }
  if (disk != 0 || cd_disk != 0 || entries_on_disk != total_entries) {
    return Malformed(absl::StrCat("multi-disk archives are not supported (disk ", disk,
                                  ", central directory on disk ", cd_disk, ", ", entries_on_disk,
                                  " of ", total_entries, " entries on this disk)"));
  }
  if (uint64_t{cd_offset} + cd_size > eocd) {
    return Malformed(absl::StrCat("central directory [", cd_offset, ", ",
                                  uint64_t{cd_offset} + cd_size,
                                  ") reaches past the end-of-central-directory record at ", eocd));
  }
  if (total_entries == 0) return Malformed("the archive has no entries");

  ZipArchive archive;
  archive.file_ = file;
  archive.entries_.reserve(total_entries);
  // [local header offset, end of data) of every entry, to reject overlaps.
  std::vector<std::pair<uint64_t, uint64_t>> extents;
  extents.reserve(total_entries);
  const uint64_t cd_end = uint64_t{cd_offset} + cd_size;
  uint64_t pos = cd_offset;
  for (uint32_t i = 0; i < total_entries; ++i) {
    if (pos + kCentralDirEntryBytes > cd_end) {
      return Malformed(absl::StrCat("central directory entry ", i, " at offset ", pos,
                                    " reaches past the directory's end at ", cd_end));
    }
    const uint8_t* c = base + pos;
    if (DecodeFixed32(c) != kCentralDirSignature) {
      return Malformed(
          absl::StrFormat("central directory entry %u at offset %u has signature "
                          "0x%08x, expected 0x%08x",
                          i, pos, DecodeFixed32(c), kCentralDirSignature));
    }
    const uint32_t flags = DecodeFixed16(c + 8);
    const uint32_t method = DecodeFixed16(c + 10);
    const uint32_t crc = DecodeFixed32(c + 16);
    const uint32_t compressed = DecodeFixed32(c + 20);
    const uint32_t uncompressed = DecodeFixed32(c + 24);
    const uint32_t name_len = DecodeFixed16(c + 28);
    const uint32_t extra_len = DecodeFixed16(c + 30);
    const uint32_t comment_len = DecodeFixed16(c + 32);
    const uint32_t start_disk = DecodeFixed16(c + 34);
    const uint32_t local_offset = DecodeFixed32(c + 42);
    const uint64_t next = pos + kCentralDirEntryBytes + name_len + extra_len + comment_len;
    if (next > cd_end) {
      return Malformed(absl::StrCat("central directory entry ", i, " at offset ", pos,
                                    " (with its name, extra field and comment) reaches past the "
                                    "directory's end at ",
                                    cd_end));
    }
    std::string name(reinterpret_cast<const char*>(c + kCentralDirEntryBytes), name_len);
    if (name.empty()) return Malformed(absl::StrCat("central directory entry ", i, " has no name"));
    if ((flags & (kFlagEncrypted | kFlagStrongEncryption)) != 0) {
      return Malformed(absl::StrCat("entry '", name, "' is encrypted"));
    }
    if (method != kMethodStored) {
      return Malformed(absl::StrCat("entry '", name, "' is compressed (method ", method,
                                    "); torch.save writes stored (method 0) entries only"));
    }
    if (compressed == 0xFFFFFFFFu || uncompressed == 0xFFFFFFFFu || local_offset == 0xFFFFFFFFu) {
      return Zip64Refused(absl::StrCat("entry '", name, "'"));
    }
    if (compressed != uncompressed) {
      return Malformed(absl::StrCat("stored entry '", name, "' has compressed size ", compressed,
                                    " but uncompressed size ", uncompressed));
    }
    if (start_disk != 0) {
      return Malformed(absl::StrCat("entry '", name, "' starts on disk ", start_disk));
    }
    // The local header: same name and method, then the data.
    if (uint64_t{local_offset} + kLocalHeaderBytes > cd_offset) {
      return Malformed(absl::StrCat("local header of entry '", name, "' at offset ", local_offset,
                                    " reaches past the central directory at ", cd_offset));
    }
    const uint8_t* l = base + local_offset;
    if (DecodeFixed32(l) != kLocalHeaderSignature) {
      return Malformed(
          absl::StrFormat("local header of entry '%s' at offset %u has signature "
                          "0x%08x, expected 0x%08x",
                          name, local_offset, DecodeFixed32(l), kLocalHeaderSignature));
    }
    const uint32_t local_method = DecodeFixed16(l + 8);
    const uint32_t local_name_len = DecodeFixed16(l + 26);
    const uint32_t local_extra_len = DecodeFixed16(l + 28);
    const uint64_t data_offset =
        uint64_t{local_offset} + kLocalHeaderBytes + local_name_len + local_extra_len;
    if (data_offset + compressed > cd_offset) {
      return Malformed(absl::StrCat("data of entry '", name, "' [", data_offset, ", ",
                                    data_offset + compressed,
                                    ") reaches past the central directory at ", cd_offset));
    }
    if (local_method != method) {
      return Malformed(absl::StrCat("entry '", name, "' has method ", local_method,
                                    " in its local header but ", method,
                                    " in the central directory"));
    }
    if (local_name_len != name_len ||
        !std::equal(name.begin(), name.end(), l + kLocalHeaderBytes)) {
      return Malformed(absl::StrCat(
          "local header at offset ", local_offset, " names '",
          absl::string_view(reinterpret_cast<const char*>(l + kLocalHeaderBytes), local_name_len),
          "' but the central directory says '", name, "'"));
    }
    if (!archive.by_name_.emplace(name, archive.entries_.size()).second) {
      return Malformed(absl::StrCat("entry '", name, "' appears twice"));
    }
    extents.emplace_back(local_offset, data_offset + compressed);
    archive.entries_.push_back(ZipEntry{std::move(name), data_offset, compressed, crc});
    pos = next;
  }
  if (pos != cd_end) {
    return Malformed(absl::StrCat("central directory holds ", cd_end - pos,
                                  " bytes after its last entry (", total_entries, " entries)"));
  }
  std::sort(extents.begin(), extents.end());
  for (size_t i = 1; i < extents.size(); ++i) {
    if (extents[i].first < extents[i - 1].second) {
      return Malformed(absl::StrCat("the entry at offset ", extents[i].first,
                                    " overlaps the entry whose data ends at ",
                                    extents[i - 1].second));
    }
  }
  return archive;
}

const ZipEntry* ZipArchive::Find(absl::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &entries_[it->second];
}

absl::StatusOr<absl::Span<const uint8_t>> ZipArchive::Read(const ZipEntry& entry) const {
  const absl::Span<const uint8_t> data = file_.subspan(entry.data_offset, entry.size);
  const uint32_t crc = ZipCrc32(data);
  if (crc != entry.crc32) {
    return absl::DataLossError(absl::StrFormat(
        "zip archive: entry '%s' (%u bytes) has CRC-32 0x%08x, the central directory says 0x%08x",
        entry.name, entry.size, crc, entry.crc32));
  }
  return data;
}

}  // namespace kvtier::triattention
