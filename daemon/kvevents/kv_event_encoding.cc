// The vLLM KV-events batch in msgpack (msgpack-cxx's packer, into a string).
//
// The array form writes every field of an event, in the protocol's order, with nil for the
// optional ones that are unset: decoders that index fields by position (older Go and Rust
// routers) find each where they expect it, and msgspec-based decoders accept the full array as
// they accept a shortened one. The map form leaves nil fields out, as msgspec's omit_defaults
// does; block_hashes, token_ids and block_size have no default in the protocol and are always
// written.
#include "daemon/kvevents/kv_event_encoding.h"

#include <algorithm>

#include "absl/strings/str_format.h"

#define MSGPACK_NO_BOOST 1
#include "msgpack.hpp"

namespace kvtier::kvevents {
namespace {

class StringBuffer {
 public:
  explicit StringBuffer(std::string* out) : out_(out) {}
  void write(const char* data, size_t size) { out_->append(data, size); }

 private:
  std::string* out_;
};

using Packer = msgpack::packer<StringBuffer>;

void PackString(Packer& p, absl::string_view s) {
  p.pack_str(static_cast<uint32_t>(s.size()));
  p.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}

template <typename T>
void PackOptional(Packer& p, const std::optional<T>& v) {
  if (v.has_value()) {
    p.pack(*v);
  } else {
    p.pack_nil();
  }
}

void PackMedium(Packer& p, const std::string& medium) {
  if (medium.empty()) {
    p.pack_nil();
  } else {
    PackString(p, medium);
  }
}

template <typename T>
void PackList(Packer& p, const std::vector<T>& values) {
  p.pack_array(static_cast<uint32_t>(values.size()));
  for (const T& v : values) p.pack(v);
}

absl::string_view Tag(KvEventKind kind) {
  switch (kind) {
    case KvEventKind::kBlockStored:
      return "BlockStored";
    case KvEventKind::kBlockRemoved:
      return "BlockRemoved";
    case KvEventKind::kAllBlocksCleared:
      return "AllBlocksCleared";
  }
  return "AllBlocksCleared";
}

void PackArrayEvent(Packer& p, const KvEvent& e) {
  switch (e.kind) {
    case KvEventKind::kBlockStored:
      p.pack_array(12);
      PackString(p, Tag(e.kind));
      PackList(p, e.block_hashes);
      PackOptional(p, e.parent_block_hash);
      PackList(p, e.token_ids);
      p.pack(e.block_size);
      p.pack_nil();  // lora_id
      PackMedium(p, e.medium);
      p.pack_nil();  // lora_name
      p.pack_nil();  // extra_keys
      PackOptional(p, e.group_idx);
      p.pack_nil();  // kv_cache_spec_kind
      p.pack_nil();  // kv_cache_spec_sliding_window
      return;
    case KvEventKind::kBlockRemoved:
      p.pack_array(4);
      PackString(p, Tag(e.kind));
      PackList(p, e.block_hashes);
      PackMedium(p, e.medium);
      PackOptional(p, e.group_idx);
      return;
    case KvEventKind::kAllBlocksCleared:
      p.pack_array(1);
      PackString(p, Tag(e.kind));
      return;
  }
}

void PackMapEvent(Packer& p, const KvEvent& e) {
  const bool medium = !e.medium.empty();
  const bool group = e.group_idx.has_value();
  switch (e.kind) {
    case KvEventKind::kBlockStored:
      p.pack_map(4 + (e.parent_block_hash.has_value() ? 1 : 0) + (medium ? 1 : 0) +
                 (group ? 1 : 0));
      PackString(p, "type");
      PackString(p, Tag(e.kind));
      PackString(p, "block_hashes");
      PackList(p, e.block_hashes);
      if (e.parent_block_hash.has_value()) {
        PackString(p, "parent_block_hash");
        p.pack(*e.parent_block_hash);
      }
      PackString(p, "token_ids");
      PackList(p, e.token_ids);
      PackString(p, "block_size");
      p.pack(e.block_size);
      if (medium) {
        PackString(p, "medium");
        PackString(p, e.medium);
      }
      if (group) {
        PackString(p, "group_idx");
        p.pack(*e.group_idx);
      }
      return;
    case KvEventKind::kBlockRemoved:
      p.pack_map(2 + (medium ? 1 : 0) + (group ? 1 : 0));
      PackString(p, "type");
      PackString(p, Tag(e.kind));
      PackString(p, "block_hashes");
      PackList(p, e.block_hashes);
      if (medium) {
        PackString(p, "medium");
        PackString(p, e.medium);
      }
      if (group) {
        PackString(p, "group_idx");
        p.pack(*e.group_idx);
      }
      return;
    case KvEventKind::kAllBlocksCleared:
      p.pack_map(1);
      PackString(p, "type");
      PackString(p, Tag(e.kind));
      return;
  }
}

}  // namespace

absl::StatusOr<KvEventEncoding> ParseKvEventEncoding(absl::string_view text) {
  if (text == "array") return KvEventEncoding::kArray;
  if (text == "map") return KvEventEncoding::kMap;
  return absl::InvalidArgumentError(
      absl::StrFormat("KV-event encoding '%s' is not array or map", text));
}

absl::string_view KvEventEncodingName(KvEventEncoding encoding) {
  return encoding == KvEventEncoding::kMap ? "map" : "array";
}

std::string EncodeKvEventBatch(double timestamp, const std::vector<KvEvent>& events,
                               std::optional<int64_t> data_parallel_rank,
                               KvEventEncoding encoding) {
  std::string out;
  StringBuffer buffer(&out);
  Packer p(buffer);
  p.pack_array(3);
  p.pack_double(timestamp);
  p.pack_array(static_cast<uint32_t>(events.size()));
  for (const KvEvent& e : events) {
    if (encoding == KvEventEncoding::kMap) {
      PackMapEvent(p, e);
    } else {
      PackArrayEvent(p, e);
    }
  }
  PackOptional(p, data_parallel_rank);
  return out;
}

uint64_t ReduceBlockHash(const index::BlockHash& hash) {
  const bool short_key =
      std::all_of(hash.begin() + 8, hash.end(), [](uint8_t b) { return b == 0; });
  const size_t start = short_key ? 0 : hash.size() - 8;
  uint64_t v = 0;
  for (size_t i = start; i < start + 8; ++i) v = (v << 8) | hash[i];
  return v;
}

absl::string_view MediumOfTier(index::Tier tier) {
  switch (tier) {
    case index::Tier::kGpu:
      return "GPU";
    case index::Tier::kHost:
      return "CPU";
    case index::Tier::kDisk:
      return "STORAGE";
  }
  return "STORAGE";
}

}  // namespace kvtier::kvevents
