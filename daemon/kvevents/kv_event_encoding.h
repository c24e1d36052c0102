// The vLLM KV-events wire format (docs/KV_EVENTS.md): the events a router consumes (BlockStored,
// BlockRemoved, AllBlocksCleared), their msgpack encoding as a batch in either of the two forms
// engines write (tagged arrays or maps with a "type" field), and the reductions of kvtier's
// block hashes and tiers to the protocol's 64-bit hashes and media. Plain functions on plain data;
// thread-compatible.
#ifndef KVTIER_DAEMON_KVEVENTS_KV_EVENT_ENCODING_H_
#define KVTIER_DAEMON_KVEVENTS_KV_EVENT_ENCODING_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/index/block_record.h"

namespace kvtier::kvevents {

// How each event of a batch is written.
enum class KvEventEncoding : uint8_t {
  kArray,  // ["BlockStored", field, ...]: every field, in order, nil where unset
  kMap,    // {"type": "BlockStored", "field": value, ...}: nil fields left out
};

// "array" | "map". InvalidArgument naming the text otherwise.
absl::StatusOr<KvEventEncoding> ParseKvEventEncoding(absl::string_view text);
absl::string_view KvEventEncodingName(KvEventEncoding encoding);

enum class KvEventKind : uint8_t { kBlockStored, kBlockRemoved, kAllBlocksCleared };

// One event. Fields a kind does not have are ignored when it is encoded.
struct KvEvent {
  KvEventKind kind = KvEventKind::kBlockStored;
  std::vector<uint64_t> block_hashes;         // BlockStored, BlockRemoved
  std::optional<uint64_t> parent_block_hash;  // BlockStored
  std::vector<uint32_t> token_ids;            // BlockStored
  uint32_t block_size = 0;                    // BlockStored: tokens per block
  std::string medium;                         // BlockStored, BlockRemoved; "" writes nil
  std::optional<int64_t> group_idx;           // BlockStored, BlockRemoved
};

// A msgpack batch: [timestamp (float64 seconds since the Unix epoch), [events...],
// data_parallel_rank (int, or nil when unset)].
std::string EncodeKvEventBatch(double timestamp, const std::vector<KvEvent>& events,
                               std::optional<int64_t> data_parallel_rank, KvEventEncoding encoding);

// The 64-bit hash an event carries for a kvtier block hash. A hash whose bytes 8..31 are all
// zero is an engine's own key of at most 8 bytes (kvtier zero-pads shorter keys at the end):
// bytes 0..7 read big-endian, so an engine that sends its uint64 hash as 8 big-endian bytes sees
// that hash again. Any other hash (kvtier's SHA-256 chain hash) gives its last 8 bytes read
// big-endian, the reduction llm-d applies to byte hashes.
uint64_t ReduceBlockHash(const index::BlockHash& hash);

// The medium of a kvtier tier: "GPU", "CPU" (host), "STORAGE" (disk).
absl::string_view MediumOfTier(index::Tier tier);

}  // namespace kvtier::kvevents

#endif  // KVTIER_DAEMON_KVEVENTS_KV_EVENT_ENCODING_H_
