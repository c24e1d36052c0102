// What the C ABI's translation units share (c_api.cc for kvtier/kvtier.h, c_api_v2.cc and
// c_api_values.cc for kvtier/kvtier_v2.h, c_api_evictor.cc for kvtier/kvtier_evictor.h): the
// handle structs, the exception firewall Guard(), status reporting and the conversions of C
// arrays and strings. Internal to libkvtier; everything here is a pure helper (thread-safe).
#ifndef KVTIER_CLIENT_SRC_C_API_INTERNAL_H_
#define KVTIER_CLIENT_SRC_C_API_INTERNAL_H_

#include <algorithm>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "kvtier/block_hasher.h"
#include "kvtier/client.h"
#include "kvtier/kvtier.h"
#include "kvtier/layout.h"
#include "kvtier/pools.h"
#include "kvtier/types.h"

struct kvtier_client {
  std::unique_ptr<kvtier::Client> impl;
};
struct kvtier_layout {
  kvtier::PageLayout impl;
};
struct kvtier_hasher {
  kvtier::BlockHasher impl;
};
struct kvtier_shm_pool {
  std::unique_ptr<kvtier::SharedMemoryPool> impl;
};
struct kvtier_watch {
  std::unique_ptr<kvtier::EventWatch> impl;
};

namespace kvtier::c_api {

// Copies `text` into a fixed array, truncated and NUL-terminated.
template <size_t N>
void CopyFixed(std::string_view text, char (&out)[N]) {
  const size_t n = std::min(text.size(), N - 1);
  std::memcpy(out, text.data(), n);
  out[n] = '\0';
}

inline int Report(const absl::Status& status, kvtier_error* err) {
  if (err != nullptr) {
    err->code = static_cast<int>(status.code());
    CopyFixed(std::string_view(status.message().data(), status.message().size()), err->message);
  }
  return static_cast<int>(status.code());
}

// Runs `body` (returning absl::Status) and reports its status; no exception escapes.
template <typename Body>
int Guard(kvtier_error* err, Body&& body) {
  try {
    return Report(body(), err);
  } catch (const std::exception& e) {
    return Report(absl::InternalError(absl::StrCat("libkvtier: ", e.what())), err);
  } catch (...) {
    return Report(absl::InternalError("libkvtier: unknown C++ exception"), err);
  }
}

inline absl::Status Missing(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(what, " is NULL"));
}

inline std::string Str(const char* s) { return s == nullptr ? std::string() : std::string(s); }

// The caller-buffer convention of kvtier.h for a string result.
inline absl::Status WriteString(std::string_view value, char* out, size_t capacity,
                                size_t* required, absl::string_view what) {
  if (required != nullptr) *required = value.size() + 1;
  if (out == nullptr) {
    if (capacity == 0) return absl::OkStatus();
    return Missing(what);
  }
  if (capacity < value.size() + 1) {
    if (capacity > 0) out[0] = '\0';
    return absl::ResourceExhaustedError(
        absl::StrCat(what, " needs ", value.size() + 1, " bytes; the buffer has ", capacity));
  }
  std::memcpy(out, value.data(), value.size());
  out[value.size()] = '\0';
  return absl::OkStatus();
}

inline absl::Status CheckEngine(kvtier_client* client, const char* engine_id) {
  if (client == nullptr) return Missing("client");
  if (engine_id == nullptr) return Missing("engine_id");
  return absl::OkStatus();
}

// `count` hashes of `hash_len` bytes end to end.
inline absl::StatusOr<std::vector<std::string>> Hashes(const uint8_t* hashes, size_t hash_len,
                                                       size_t count) {
  std::vector<std::string> out;
  if (count == 0) return out;
  if (hashes == nullptr) return Missing("hashes");
  if (hash_len == 0 || hash_len > kBlockHashBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("hash_len ", hash_len, " is not 1 to ", kBlockHashBytes));
  }
  out.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    out.emplace_back(reinterpret_cast<const char*>(hashes + i * hash_len), hash_len);
  }
  return out;
}

inline absl::StatusOr<std::vector<PageRef>> Pages(const uint8_t* hashes, size_t hash_len,
                                                  const uint32_t* page_indices, size_t count) {
  absl::StatusOr<std::vector<std::string>> h = Hashes(hashes, hash_len, count);
  if (!h.ok()) return h.status();
  if (count > 0 && page_indices == nullptr) return Missing("page_indices");
  std::vector<PageRef> pages(count);
  for (size_t i = 0; i < count; ++i) {
    pages[i].block_hash = std::move((*h)[i]);
    pages[i].page_index = page_indices[i];
  }
  return pages;
}

// Page i's tokens (token_counts[i] of them, after page i-1's in `token_ids`) into pages[i]
// (kvtier_client_offload_tokens). Null token_counts: no tokens. InvalidArgument when token_ids is
// null while some count is not 0.
inline absl::Status AttachTokens(const uint32_t* token_ids, const uint32_t* token_counts,
                                 std::vector<PageRef>* pages) {
  if (token_counts == nullptr) return absl::OkStatus();
  size_t next = 0;
  for (size_t i = 0; i < pages->size(); ++i) {
    const uint32_t n = token_counts[i];
    if (n == 0) continue;
    if (token_ids == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("token_ids is NULL but token_counts[", i, "] is ", n));
    }
    (*pages)[i].token_ids.assign(token_ids + next, token_ids + next + n);
    next += n;
  }
  return absl::OkStatus();
}

inline std::vector<uint32_t> Indices(const uint32_t* page_indices, size_t count) {
  return count == 0 ? std::vector<uint32_t>()
                    : std::vector<uint32_t>(page_indices, page_indices + count);
}

inline void WriteCodes(const std::vector<ItemResult>& results, size_t count, int* codes,
                       int* tiers) {
  for (size_t i = 0; i < count; ++i) {
    const bool have = i < results.size();
    if (codes != nullptr) {
      codes[i] = static_cast<int>(have ? results[i].code : ItemCode::kSkipped);
    }
    if (tiers != nullptr) {
      tiers[i] = static_cast<int>(have ? results[i].tier : Tier::kUnspecified);
    }
  }
}

inline absl::Duration Millis(uint64_t ms) { return absl::Milliseconds(static_cast<int64_t>(ms)); }

template <typename Handle, typename Value>
absl::Status Emplace(Handle** out, absl::StatusOr<Value> value) {
  if (!value.ok()) return value.status();
  *out = new Handle{*std::move(value)};
  return absl::OkStatus();
}

// Registers the engine `o` describes and writes what the caller asked for: its id into
// engine_id (checked to hold KVTIER_ENGINE_ID_BYTES before registering, since an engine whose id
// the caller never learns could not be unregistered), the hash root and the info (each may be
// null). The status of kvtier_client_register_engine[_v2]. Blocks for the RPC.
inline absl::Status RegisterEngine(kvtier_client* client, const EngineOptions& o, char* engine_id,
                                   size_t capacity, uint8_t* hash_root, kvtier_engine_info* info) {
  if (engine_id == nullptr || capacity < KVTIER_ENGINE_ID_BYTES) {
    return absl::InvalidArgumentError(
        absl::StrCat("engine_id needs a buffer of KVTIER_ENGINE_ID_BYTES (", KVTIER_ENGINE_ID_BYTES,
                     ") bytes, got ", capacity));
  }
  absl::StatusOr<Engine> engine = client->impl->RegisterEngine(o);
  if (!engine.ok()) return engine.status();
  if (hash_root != nullptr) {
    std::memset(hash_root, 0, kBlockHashBytes);
    std::memcpy(hash_root, engine->hash_root.data(),
                std::min(engine->hash_root.size(), kBlockHashBytes));
  }
  if (info != nullptr) {
    *info = kvtier_engine_info{};
    info->namespace_id = engine->namespace_id;
    info->hot_page_bytes = engine->hot_page_bytes;
    info->cold_block_bytes = engine->cold_block_bytes;
    info->incarnation_id = engine->incarnation_id;
    info->lease_ttl_ms = static_cast<uint64_t>(absl::ToInt64Milliseconds(engine->lease_ttl));
    CopyFixed(engine->codec, info->codec);
  }
  return WriteString(engine->engine_id, engine_id, capacity, nullptr, "engine id");
}

}  // namespace kvtier::c_api

#endif  // KVTIER_CLIENT_SRC_C_API_INTERNAL_H_
