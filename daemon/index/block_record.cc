// Encodings of the index's keys and values (see block_record.h), field by field through
// common/coding.h: no memcpy of structs, so the format does not depend on the host's endianness
// or padding. Decoders check every length and enum before reading and return DataLoss; pure
// functions, thread-safe.
//
// Block record, version 1 (kBlockRecordBytes = 62), integers little-endian:
//   offset  0  u8   version (1)        offset 14  u32  size
//   offset  1  u8   tier (0..2)        offset 18  u32  checksum
//   offset  2  u8   flags              offset 22  u8[32] parent
//   offset  3  u8   codec              offset 54  u64  last_access_ms
//   offset  4  u16  device             (end   62)
//   offset  6  u64  offset
#include "daemon/index/block_record.h"

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "common/coding.h"

namespace kvtier::index {
namespace {

constexpr size_t kNamespaceIdBytes = 8;
constexpr size_t kLegacyNamespaceIdBytes = 4;
static_assert(1 + 1 + 1 + 1 + 2 + 8 + 4 + 4 + 32 + 8 == kBlockRecordBytes,
              "the table above and kBlockRecordBytes disagree");
static_assert(kNamespaceIdBytes + sizeof(BlockHash) == kBlockKeyBytes);
static_assert(kLegacyNamespaceIdBytes + sizeof(BlockHash) == kLegacyBlockKeyBytes);

void AppendHash(const BlockHash& hash, std::string* out) {
  out->append(reinterpret_cast<const char*>(hash.data()), hash.size());
}

// REQUIRES: `at + 32 <= data.size()`.
BlockHash ReadHash(absl::string_view data, size_t at) {
  BlockHash hash;
  for (size_t i = 0; i < hash.size(); ++i) hash[i] = static_cast<uint8_t>(data[at + i]);
  return hash;
}

// A namespace id of `id_bytes` (kNamespaceIdBytes or kLegacyNamespaceIdBytes), big-endian.
// REQUIRES: `data.size() >= id_bytes`.
NamespaceId ReadId(absl::string_view data, size_t id_bytes) {
  return id_bytes == kNamespaceIdBytes ? DecodeBigEndian64(data.data())
                                       : DecodeBigEndian32(data.data());
}

absl::StatusOr<BlockKey> DecodeKeyWithIdOf(absl::string_view bytes, size_t id_bytes) {
  if (bytes.size() != id_bytes + sizeof(BlockHash)) {
    return absl::DataLossError(absl::StrFormat("block key is %d bytes, expected %d", bytes.size(),
                                               id_bytes + sizeof(BlockHash)));
  }
  BlockKey key;
  key.ns = ReadId(bytes, id_bytes);
  key.hash = ReadHash(bytes, id_bytes);
  return key;
}

absl::StatusOr<NamespaceId> DecodeIdOf(absl::string_view bytes, size_t id_bytes) {
  if (bytes.size() != id_bytes) {
    return absl::DataLossError(
        absl::StrFormat("namespace id is %d bytes, expected %d", bytes.size(), id_bytes));
  }
  return ReadId(bytes, id_bytes);
}

}  // namespace

absl::string_view TierName(Tier tier) {
  switch (tier) {
    case Tier::kGpu:
      return "gpu";
    case Tier::kHost:
      return "host";
    case Tier::kDisk:
      return "disk";
  }
  return "invalid";
}

std::string EncodeBlockKey(const BlockKey& key) {
  std::string out;
  out.reserve(kBlockKeyBytes);
  PutBigEndian64(&out, key.ns);
  AppendHash(key.hash, &out);
  return out;
}

absl::StatusOr<BlockKey> DecodeBlockKey(absl::string_view bytes) {
  return DecodeKeyWithIdOf(bytes, kNamespaceIdBytes);
}

absl::StatusOr<BlockKey> DecodeLegacyBlockKey(absl::string_view bytes) {
  return DecodeKeyWithIdOf(bytes, kLegacyNamespaceIdBytes);
}

std::string EncodeBlockRecord(const BlockRecord& record) {
  std::string out;
  out.reserve(kBlockRecordBytes);
  out.push_back(static_cast<char>(kBlockRecordVersion));
  out.push_back(static_cast<char>(record.tier));
  out.push_back(static_cast<char>(record.flags));
  out.push_back(static_cast<char>(record.codec));
  PutFixed16(&out, record.device);
  PutFixed64(&out, record.offset);
  PutFixed32(&out, record.size);
  PutFixed32(&out, record.checksum);
  AppendHash(record.parent, &out);
  PutFixed64(&out, record.last_access_ms);
  return out;
}

absl::StatusOr<BlockRecord> DecodeBlockRecord(absl::string_view bytes) {
  // The version comes first: a record of another version may well have another length, and the
  // version is then the precise complaint.
  if (bytes.empty()) {
    return absl::DataLossError(
        absl::StrFormat("block record is empty, expected %d bytes of version %d", kBlockRecordBytes,
                        kBlockRecordVersion));
  }
  const uint8_t version = static_cast<uint8_t>(bytes[0]);
  if (version != kBlockRecordVersion) {
    return absl::DataLossError(
        absl::StrFormat("block record has format version %d, this build reads version %d "
                        "(record of %d bytes)",
                        version, kBlockRecordVersion, bytes.size()));
  }
  if (bytes.size() != kBlockRecordBytes) {
    return absl::DataLossError(
        absl::StrFormat("block record of version %d is %d bytes, expected %d", version,
                        bytes.size(), kBlockRecordBytes));
  }
  const uint8_t tier = static_cast<uint8_t>(bytes[1]);
  if (tier >= kTierCount) {
    return absl::DataLossError(
        absl::StrFormat("block record tier value %d out of range [0, %d)", tier, kTierCount));
  }
  BlockRecord record;
  record.tier = static_cast<Tier>(tier);
  record.flags = static_cast<uint8_t>(bytes[2]);
  record.codec = static_cast<uint8_t>(bytes[3]);
  record.device = DecodeFixed16(bytes.data() + 4);
  record.offset = DecodeFixed64(bytes.data() + 6);
  record.size = DecodeFixed32(bytes.data() + 14);
  record.checksum = DecodeFixed32(bytes.data() + 18);
  record.parent = ReadHash(bytes, 22);
  record.last_access_ms = DecodeFixed64(bytes.data() + 54);
  return record;
}

std::string EncodeNamespaceId(NamespaceId id) {
  std::string out;
  out.reserve(kNamespaceIdBytes);
  PutBigEndian64(&out, id);
  return out;
}

absl::StatusOr<NamespaceId> DecodeNamespaceId(absl::string_view bytes) {
  return DecodeIdOf(bytes, kNamespaceIdBytes);
}

absl::StatusOr<NamespaceId> DecodeLegacyNamespaceId(absl::string_view bytes) {
  return DecodeIdOf(bytes, kLegacyNamespaceIdBytes);
}

}  // namespace kvtier::index
