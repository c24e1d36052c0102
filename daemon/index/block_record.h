// The index's vocabulary: BlockKey (namespace id + 32-byte block hash), Tier, BlockRecord (where a
// cold block lives and how to check it) and their stable on-disk encodings, which RocksDB stores.
// Encodings are versioned; decoding rejects anything malformed with DataLoss. Pure functions.
#ifndef KVTIER_DAEMON_INDEX_BLOCK_RECORD_H_
#define KVTIER_DAEMON_INDEX_BLOCK_RECORD_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kvtier::index {

using NamespaceId = uint64_t;
using BlockHash = std::array<uint8_t, 32>;

struct BlockKey {
  NamespaceId ns = 0;
  BlockHash hash{};

  friend bool operator==(const BlockKey& a, const BlockKey& b) {
    return a.ns == b.ns && a.hash == b.hash;
  }
  template <typename H>
  friend H AbslHashValue(H h, const BlockKey& k) {
    // The hash is already uniformly distributed: its first 8 bytes and the namespace suffice.
    uint64_t prefix;
    std::memcpy(&prefix, k.hash.data(), sizeof(prefix));
    return H::combine(std::move(h), k.ns, prefix);
  }
};

enum class Tier : uint8_t { kGpu = 0, kHost = 1, kDisk = 2 };
inline constexpr int kTierCount = 3;
absl::string_view TierName(Tier tier);  // "gpu", "host", "disk"; "invalid" outside the enum

// Flags of a block (bit set).
inline constexpr uint8_t kBlockFlagDurable = 1;  // the client asked for it to reach disk
inline constexpr uint8_t kBlockFlagReused = 2;   // read at least once since it was stored
inline constexpr uint8_t kBlockFlagHasParent = 4;

struct BlockRecord {
  Tier tier = Tier::kHost;
  uint8_t flags = 0;
  uint8_t codec = 0;            // codec::CodecId of the cold block
  uint16_t device = 0;          // disk file index within the disk tier, or GPU ordinal
  uint64_t offset = 0;          // byte offset of the slot in that file / arena
  uint32_t size = 0;            // block_bytes
  uint32_t checksum = 0;        // the block's header CRC32C (bytes 60..63): its identity
  BlockHash parent{};           // previous block of the chain (valid with kBlockFlagHasParent)
  uint64_t last_access_ms = 0;  // wall clock, milliseconds since the Unix epoch

  friend bool operator==(const BlockRecord&, const BlockRecord&) = default;
};

// Key encoding: 8 bytes namespace id, big-endian (so one namespace is one key range), then the
// 32 hash bytes. 40 bytes. (Index format 1 had 4-byte ids and 36-byte keys; the index migrates
// them with DecodeLegacyBlockKey.)
inline constexpr size_t kBlockKeyBytes = 40;
inline constexpr size_t kLegacyBlockKeyBytes = 36;
// DecodeBlockKey: DataLoss unless `bytes` is exactly 40 bytes; DecodeLegacyBlockKey: 36 bytes.
std::string EncodeBlockKey(const BlockKey& key);
absl::StatusOr<BlockKey> DecodeBlockKey(absl::string_view bytes);
absl::StatusOr<BlockKey> DecodeLegacyBlockKey(absl::string_view bytes);

// Value encoding: version byte (1), then the fields of BlockRecord little-endian in declaration
// order, 62 bytes. Flag bits are stored verbatim. DataLoss for a wrong version, length or enum
// value; never crashes, whatever the input.
inline constexpr uint8_t kBlockRecordVersion = 1;
inline constexpr size_t kBlockRecordBytes = 62;
std::string EncodeBlockRecord(const BlockRecord& record);
absl::StatusOr<BlockRecord> DecodeBlockRecord(absl::string_view bytes);

// Namespace id encoding for the namespaces column family: 8 bytes big-endian. DecodeNamespaceId:
// DataLoss unless `bytes` is exactly 8 bytes; DecodeLegacyNamespaceId: 4 bytes (format 1).
std::string EncodeNamespaceId(NamespaceId id);
absl::StatusOr<NamespaceId> DecodeNamespaceId(absl::string_view bytes);
absl::StatusOr<NamespaceId> DecodeLegacyNamespaceId(absl::string_view bytes);

}  // namespace kvtier::index

#endif  // KVTIER_DAEMON_INDEX_BLOCK_RECORD_H_
