// The vLLM KV-events batch in msgpack (msgpack-cxx's packer, into a string reserved for the
// batch's estimated size). The arrays of hashes and token ids, most of a batch's bytes, are
// written by a loop of their own into the string, in msgpack's shortest form for each integer
// (as the packer writes them): the packer makes a call and a string append per element, which
// cost more than the rest of the encoding at 16 tokens per block.
//
// The array form writes every field of an event, in the protocol's order, with nil for the
// optional ones that are unset: decoders that index fields by position (older Go and Rust
// routers) find each where they expect it, and msgspec-based decoders accept the full array as
// they accept a shortened one. The map form leaves nil fields out, as msgspec's omit_defaults
// does; block_hashes, token_ids and block_size have no default in the protocol and are always
// written.
#include "daemon/kvevents/kv_event_encoding.h"

#include <algorithm>
#include <type_traits>

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

// `v` in msgpack's shortest form for an unsigned integer at *out, which it advances.
void PutUint(uint64_t v, char*& out) {
  const auto big_endian = [&out](uint64_t x, int bytes) {
    for (int i = bytes - 1; i >= 0; --i) *out++ = static_cast<char>(x >> (8 * i));
  };
  if (v < 0x80) {
    *out++ = static_cast<char>(v);  // positive fixint
  } else if (v <= 0xff) {
    *out++ = static_cast<char>(0xcc);
    big_endian(v, 1);
  } else if (v <= 0xffff) {
    *out++ = static_cast<char>(0xcd);
    big_endian(v, 2);
  } else if (v <= 0xffffffff) {
    *out++ = static_cast<char>(0xce);
    big_endian(v, 4);
  } else {
    *out++ = static_cast<char>(0xcf);
    big_endian(v, 8);
  }
}

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

// An array of unsigned integers: the header by the packer (which writes into `s`), the elements
// straight into `s` (at most 1 + sizeof(T) bytes each).
template <typename T>
void PackList(Packer& p, std::string& s, const std::vector<T>& values) {
  static_assert(std::is_unsigned_v<T>);
  p.pack_array(static_cast<uint32_t>(values.size()));
  const size_t start = s.size();
  s.resize(start + values.size() * (1 + sizeof(T)));
  char* out = s.data() + start;
  for (const T v : values) PutUint(v, out);
  s.resize(static_cast<size_t>(out - s.data()));
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

void PackArrayEvent(Packer& p, std::string& s, const KvEvent& e) {
  switch (e.kind) {
    case KvEventKind::kBlockStored:
      p.pack_array(12);
      PackString(p, Tag(e.kind));
      PackList(p, s, e.block_hashes);
      PackOptional(p, e.parent_block_hash);
      PackList(p, s, e.token_ids);
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
      PackList(p, s, e.block_hashes);
      PackMedium(p, e.medium);
      PackOptional(p, e.group_idx);
      return;
    case KvEventKind::kAllBlocksCleared:
      p.pack_array(1);
      PackString(p, Tag(e.kind));
      return;
  }
}

void PackMapEvent(Packer& p, std::string& s, const KvEvent& e) {
  const bool medium = !e.medium.empty();
  const bool group = e.group_idx.has_value();
  switch (e.kind) {
    case KvEventKind::kBlockStored:
      p.pack_map(4 + (e.parent_block_hash.has_value() ? 1 : 0) + (medium ? 1 : 0) +
                 (group ? 1 : 0));
      PackString(p, "type");
      PackString(p, Tag(e.kind));
      PackString(p, "block_hashes");
      PackList(p, s, e.block_hashes);
      if (e.parent_block_hash.has_value()) {
        PackString(p, "parent_block_hash");
        p.pack(*e.parent_block_hash);
      }
      PackString(p, "token_ids");
      PackList(p, s, e.token_ids);
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
      PackList(p, s, e.block_hashes);
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
  size_t estimate = 32;
  for (const KvEvent& e : events) {
    estimate += 160 + 9 * e.block_hashes.size() + 5 * e.token_ids.size();
  }
  std::string out;
  out.reserve(estimate);
  StringBuffer buffer(&out);
  Packer p(buffer);
  p.pack_array(3);
  p.pack_double(timestamp);
  p.pack_array(static_cast<uint32_t>(events.size()));
  for (const KvEvent& e : events) {
    if (encoding == KvEventEncoding::kMap) {
      PackMapEvent(p, out, e);
    } else {
      PackArrayEvent(p, out, e);
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
