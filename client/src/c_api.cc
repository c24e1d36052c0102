// The C ABI (kvtier/kvtier.h) over the C++ API. Each handle is a struct owning the C++ object; each
// function validates its pointers, converts the C arrays to the C++ types, calls the C++ API and
// writes the results back. Nothing throws across the boundary: every body runs under Guard()
// (c_api_internal.h), which turns a C++ exception (std::bad_alloc, in practice) into
// KVTIER_INTERNAL. The _v2 functions (kvtier/kvtier_v2.h) live in c_api_v2.cc and c_api_values.cc.
#include "kvtier/kvtier.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "client/src/c_api_internal.h"
#include "kvtier/block_hasher.h"
#include "kvtier/client.h"
#include "kvtier/layout.h"
#include "kvtier/pools.h"
#include "kvtier/types.h"

static_assert(static_cast<int>(kvtier::Event::Kind::kBlockStored) + KVTIER_EVENT_BLOCK_STORED ==
                      KVTIER_EVENT_BLOCK_STORED &&
                  static_cast<int>(kvtier::Event::Kind::kSnapshotComplete) +
                          KVTIER_EVENT_BLOCK_STORED ==
                      KVTIER_EVENT_SNAPSHOT_COMPLETE,
              "KVTIER_EVENT_* follow kvtier::Event::Kind");

using kvtier::c_api::Guard;
using kvtier::c_api::Missing;
using kvtier::c_api::Str;

extern "C" {

const char* kvtier_version(void) {
  static const std::string* const version = new std::string(kvtier::LibraryVersion());
  return version->c_str();
}

const char* kvtier_status_name(int code) {
  static const char* const kNames[] = {"OK",
                                       "CANCELLED",
                                       "UNKNOWN",
                                       "INVALID_ARGUMENT",
                                       "DEADLINE_EXCEEDED",
                                       "NOT_FOUND",
                                       "ALREADY_EXISTS",
                                       "PERMISSION_DENIED",
                                       "RESOURCE_EXHAUSTED",
                                       "FAILED_PRECONDITION",
                                       "ABORTED",
                                       "OUT_OF_RANGE",
                                       "UNIMPLEMENTED",
                                       "INTERNAL",
                                       "UNAVAILABLE",
                                       "DATA_LOSS",
                                       "UNAUTHENTICATED"};
  if (code < 0 || code >= static_cast<int>(sizeof(kNames) / sizeof(kNames[0]))) return "UNKNOWN";
  return kNames[code];
}

const char* kvtier_tier_name(int tier) {
  // TierName returns views of string literals, so data() is NUL-terminated.
  if (tier < KVTIER_TIER_UNSPECIFIED || tier > KVTIER_TIER_CLUSTER) return "unspecified";
  return kvtier::TierName(static_cast<kvtier::Tier>(tier)).data();
}

const char* kvtier_item_code_name(int code) {
  if (code < KVTIER_ITEM_OK || code > KVTIER_ITEM_INTERNAL) return "unknown";
  return kvtier::ItemCodeName(static_cast<kvtier::ItemCode>(code)).data();
}

int kvtier_client_connect(const char* socket_path, const char* client_name, uint32_t timeout_ms,
                          kvtier_client** client, kvtier_error* err) {
  return Guard(err, [&]() -> absl::Status {
    if (client == nullptr) return Missing("client");
    *client = nullptr;
    kvtier::ClientOptions options;
    options.socket_path = Str(socket_path);
    options.client_name = Str(client_name);
    if (timeout_ms > 0) {
      options.rpc_timeout = kvtier::c_api::Millis(timeout_ms);
      options.connect_timeout = kvtier::c_api::Millis(timeout_ms);
    }
    return kvtier::c_api::Emplace(client, kvtier::Client::Connect(options));
  });
}

void kvtier_client_close(kvtier_client* client) { delete client; }

int kvtier_client_server_info(kvtier_client* client, int refresh, kvtier_server_info* info,
                              kvtier_error* err) {
  return Guard(err, [&]() -> absl::Status {
    if (client == nullptr) return Missing("client");
    if (info == nullptr) return Missing("info");
    kvtier::ServerInfo s;
    if (refresh != 0) {
      absl::StatusOr<kvtier::ServerInfo> hello = client->impl->Hello();
      if (!hello.ok()) return hello.status();
      s = *std::move(hello);
    } else {
      s = client->impl->server();
    }
    *info = kvtier_server_info{};
    info->api_version = s.api_version;
    info->incarnation_id = s.incarnation_id;
    kvtier::c_api::CopyFixed(s.server_version, info->server_version);
    kvtier::c_api::CopyFixed(s.node_name, info->node_name);
    kvtier::c_api::CopyFixed(absl::StrJoin(s.codecs, ","), info->codecs);
    for (kvtier::Tier t : s.tiers) {
      const int bit = static_cast<int>(t);
      if (bit > 0 && bit < 32) info->tier_mask |= 1u << bit;  // a newer server's tiers: ignored
    }
    info->max_items_per_request = s.max_items_per_request;
    info->cuda = s.cuda;
    info->cuda_ipc_pools = s.cuda_ipc_pools;
    info->shared_memory_pools = s.shared_memory_pools;
    info->persistent_host_tier = s.persistent_host_tier;
    info->authentication = s.authentication;
    info->draining = s.draining;
    return absl::OkStatus();
  });
}

int kvtier_layout_from_preset(const char* name, uint32_t tokens_per_page, int dtype,
                              kvtier_layout** layout, kvtier_error* err) {
  return Guard(err, [&]() -> absl::Status {
    if (layout == nullptr) return Missing("layout");
    *layout = nullptr;
    if (name == nullptr) return Missing("name");
    return kvtier::c_api::Emplace(
        layout,
        kvtier::PageLayout::Preset(name, tokens_per_page, static_cast<kvtier::DType>(dtype)));
  });
}

int kvtier_layout_gqa(uint32_t num_layers, uint32_t kv_heads, uint32_t head_dim,
                      uint32_t tokens_per_page, int dtype, uint32_t rope_start, uint32_t rope_len,
                      kvtier_layout** layout, kvtier_error* err) {
  return Guard(err, [&]() -> absl::Status {
    if (layout == nullptr) return Missing("layout");
    *layout = nullptr;
    kvtier::GqaLayoutOptions o;
    o.num_layers = num_layers;
    o.kv_heads = kv_heads;
    o.head_dim = head_dim;
    o.tokens_per_page = tokens_per_page;
    o.dtype = static_cast<kvtier::DType>(dtype);
    o.rope_start = rope_start;
    o.rope_len = rope_len;
    return kvtier::c_api::Emplace(layout, kvtier::PageLayout::Gqa(o));
  });
}

int kvtier_layout_from_json(const char* json, kvtier_layout** layout, kvtier_error* err) {
  return Guard(err, [&]() -> absl::Status {
    if (layout == nullptr) return Missing("layout");
    *layout = nullptr;
    if (json == nullptr) return Missing("json");
    return kvtier::c_api::Emplace(layout, kvtier::PageLayout::FromJson(json));
  });
}

void kvtier_layout_destroy(kvtier_layout* layout) { delete layout; }

int kvtier_layout_info(const kvtier_layout* layout, uint32_t* tokens_per_page,
                       uint64_t* hot_page_bytes, size_t* num_pools, kvtier_error* err) {
  return Guard(err, [&]() -> absl::Status {
    if (layout == nullptr) return Missing("layout");
    if (tokens_per_page != nullptr) *tokens_per_page = layout->impl.tokens_per_page();
    if (hot_page_bytes != nullptr) *hot_page_bytes = layout->impl.hot_page_bytes();
    if (num_pools != nullptr) *num_pools = layout->impl.pools().size();
    return absl::OkStatus();
  });
}

int kvtier_layout_pool(const kvtier_layout* layout, size_t index, char* name, size_t capacity,
                       size_t* required, uint64_t* slot_bytes, kvtier_error* err) {
  return Guard(err, [&]() -> absl::Status {
    if (layout == nullptr) return Missing("layout");
    const std::vector<kvtier::PoolInfo> pools = layout->impl.pools();
    if (index >= pools.size()) {
      return absl::OutOfRangeError(
          absl::StrCat("pool index ", index, " out of range (", pools.size(), " pools)"));
    }
    if (slot_bytes != nullptr) *slot_bytes = pools[index].slot_bytes;
    return kvtier::c_api::WriteString(pools[index].name, name, capacity, required, "pool name");
  });
}

int kvtier_layout_to_json(const kvtier_layout* layout, char* json, size_t capacity,
                          size_t* required, kvtier_error* err) {
  return Guard(err, [&]() -> absl::Status {
    if (layout == nullptr) return Missing("layout");
    return kvtier::c_api::WriteString(layout->impl.ToJson(), json, capacity, required,
                                      "layout JSON");
  });
}

int kvtier_hasher_create(const uint8_t* root, size_t root_len, uint32_t tokens_per_page,
                         kvtier_hasher** hasher, kvtier_error* err) {
  return Guard(err, [&]() -> absl::Status {
    if (hasher == nullptr) return Missing("hasher");
    *hasher = nullptr;
    if (root == nullptr) return Missing("root");
    return kvtier::c_api::Emplace(
        hasher,
        kvtier::BlockHasher::Create(std::string_view(reinterpret_cast<const char*>(root), root_len),
                                    tokens_per_page));
  });
}

void kvtier_hasher_destroy(kvtier_hasher* hasher) { delete hasher; }

int kvtier_hasher_hash(const kvtier_hasher* hasher, const uint8_t* parent, const uint32_t* tokens,
                       size_t num_tokens, uint8_t* hashes, size_t max_hashes, size_t* count,
                       kvtier_error* err) {
  return Guard(err, [&]() -> absl::Status {
    if (hasher == nullptr) return Missing("hasher");
    if (count == nullptr) return Missing("count");
    *count = 0;
    if (num_tokens > 0 && tokens == nullptr) return Missing("tokens");
    const size_t pages = num_tokens / hasher->impl.tokens_per_page();
    if (pages > max_hashes) {
      *count = pages;
      return absl::ResourceExhaustedError(absl::StrCat(num_tokens, " tokens make ", pages,
                                                       " hashes; the buffer holds ", max_hashes));
    }
    if (pages > 0 && hashes == nullptr) return Missing("hashes");
    const std::span<const uint32_t> span(tokens, num_tokens);
    absl::StatusOr<std::vector<std::string>> out =
        parent == nullptr
            ? hasher->impl.Hash(span)
            : hasher->impl.HashAfter(
                  std::string_view(reinterpret_cast<const char*>(parent), kvtier::kBlockHashBytes),
                  span);
    if (!out.ok()) return out.status();
    for (size_t i = 0; i < out->size(); ++i) {
      std::memcpy(hashes + i * kvtier::kBlockHashBytes, (*out)[i].data(), kvtier::kBlockHashBytes);
    }
    *count = out->size();
    return absl::OkStatus();
  });
}

int kvtier_shm_pool_create(const char* path, const char* name, uint32_t slots, uint64_t slot_bytes,
                           kvtier_shm_pool** pool, kvtier_error* err) {
  return Guard(err, [&]() -> absl::Status {
    if (pool == nullptr) return Missing("pool");
    *pool = nullptr;
    if (path == nullptr) return Missing("path");
    if (name == nullptr) return Missing("name");
    return kvtier::c_api::Emplace(pool,
                                  kvtier::SharedMemoryPool::Create(path, name, slots, slot_bytes));
  });
}

void kvtier_shm_pool_destroy(kvtier_shm_pool* pool) { delete pool; }

int kvtier_shm_pool_data(kvtier_shm_pool* pool, uint8_t** data, uint64_t* size_bytes,
                         kvtier_error* err) {
  return Guard(err, [&]() -> absl::Status {
    if (pool == nullptr) return Missing("pool");
    if (data != nullptr) *data = pool->impl->data();
    if (size_bytes != nullptr) *size_bytes = pool->impl->size_bytes();
    return absl::OkStatus();
  });
}

int kvtier_client_register_engine(kvtier_client* client, const kvtier_engine_options* options,
                                  char* engine_id, size_t capacity, uint8_t* hash_root,
                                  kvtier_engine_info* info, kvtier_error* err) {
  return Guard(err, [&]() -> absl::Status {
    if (client == nullptr) return Missing("client");
    if (options == nullptr) return Missing("options");
    if (options->layout == nullptr) return Missing("options.layout");
    if (options->num_pools > 0 && options->pools == nullptr) return Missing("options.pools");
    kvtier::EngineOptions o;
    o.model = Str(options->model);
    o.engine_name = Str(options->engine_name);
    o.tenant = Str(options->tenant);
    o.partition = Str(options->partition);
    o.codec = Str(options->codec);
    o.layout = options->layout->impl;
    for (size_t i = 0; i < options->num_pools; ++i) {
      if (options->pools[i] == nullptr) {
        return Missing(absl::StrCat("options.pools[", i, "]").c_str());
      }
      o.pools.push_back(options->pools[i]->impl->Registration());
    }
    o.lease_ttl = kvtier::c_api::Millis(options->lease_ttl_ms);
    return kvtier::c_api::RegisterEngine(client, o, engine_id, capacity, hash_root, info);
  });
}

int kvtier_client_unregister(kvtier_client* client, const char* engine_id, kvtier_error* err) {
  return Guard(err, [&]() -> absl::Status {
    if (absl::Status st = kvtier::c_api::CheckEngine(client, engine_id); !st.ok()) return st;
    return client->impl->Unregister(engine_id);
  });
}

int kvtier_client_lookup(kvtier_client* client, const char* engine_id, const uint8_t* hashes,
                         size_t hash_len, size_t count, uint32_t pin_ttl_ms, uint32_t* hit_pages,
                         int* tiers, kvtier_error* err) {
  return Guard(err, [&]() -> absl::Status {
    if (absl::Status st = kvtier::c_api::CheckEngine(client, engine_id); !st.ok()) return st;
    if (hit_pages == nullptr) return Missing("hit_pages");
    *hit_pages = 0;
    absl::StatusOr<std::vector<std::string>> h = kvtier::c_api::Hashes(hashes, hash_len, count);
    if (!h.ok()) return h.status();
    absl::StatusOr<kvtier::LookupResult> r =
        client->impl->Lookup(engine_id, *h, kvtier::c_api::Millis(pin_ttl_ms));
    if (!r.ok()) return r.status();
    *hit_pages = r->hit_pages;
    if (tiers != nullptr) {
      for (size_t i = 0; i < count; ++i) {
        tiers[i] = static_cast<int>(i < r->tiers.size() ? r->tiers[i] : kvtier::Tier::kUnspecified);
      }
    }
    return absl::OkStatus();
  });
}

int kvtier_client_offload(kvtier_client* client, const char* engine_id, const uint8_t* hashes,
                          size_t hash_len, const uint32_t* page_indices, size_t count,
                          const kvtier_offload_options* options, uint32_t* stored_pages, int* codes,
                          kvtier_error* err) {
  return Guard(err, [&]() -> absl::Status {
    if (absl::Status st = kvtier::c_api::CheckEngine(client, engine_id); !st.ok()) return st;
    if (stored_pages != nullptr) *stored_pages = 0;
    absl::StatusOr<std::vector<kvtier::PageRef>> pages =
        kvtier::c_api::Pages(hashes, hash_len, page_indices, count);
    if (!pages.ok()) return pages.status();
    kvtier::OffloadOptions o;
    if (options != nullptr) {
      o.durable = options->durable != 0;
      o.priority = static_cast<kvtier::Priority>(options->priority);
      o.ack = static_cast<kvtier::WriteAck>(options->ack);
    }
    absl::StatusOr<kvtier::OffloadResult> r = client->impl->Offload(engine_id, *pages, o);
    if (!r.ok()) return r.status();
    if (stored_pages != nullptr) *stored_pages = r->stored_pages;
    kvtier::c_api::WriteCodes(r->results, count, codes, nullptr);
    return absl::OkStatus();
  });
}

int kvtier_client_onboard(kvtier_client* client, const char* engine_id, const uint8_t* hashes,
                          size_t hash_len, const uint32_t* page_indices, size_t count,
                          int continue_after_miss, uint32_t* onboarded_pages, int* codes,
                          int* tiers, kvtier_error* err) {
  return Guard(err, [&]() -> absl::Status {
    if (absl::Status st = kvtier::c_api::CheckEngine(client, engine_id); !st.ok()) return st;
    if (onboarded_pages != nullptr) *onboarded_pages = 0;
    absl::StatusOr<std::vector<kvtier::PageRef>> pages =
        kvtier::c_api::Pages(hashes, hash_len, page_indices, count);
    if (!pages.ok()) return pages.status();
    absl::StatusOr<kvtier::OnboardResult> r =
        client->impl->Onboard(engine_id, *pages, continue_after_miss != 0);
    if (!r.ok()) return r.status();
    if (onboarded_pages != nullptr) *onboarded_pages = r->onboarded_pages;
    kvtier::c_api::WriteCodes(r->results, count, codes, tiers);
    return absl::OkStatus();
  });
}

int kvtier_client_pin(kvtier_client* client, const char* engine_id, const uint8_t* hashes,
                      size_t hash_len, size_t count, uint32_t ttl_ms, int* codes,
                      kvtier_error* err) {
  return Guard(err, [&]() -> absl::Status {
    if (absl::Status st = kvtier::c_api::CheckEngine(client, engine_id); !st.ok()) return st;
    absl::StatusOr<std::vector<std::string>> h = kvtier::c_api::Hashes(hashes, hash_len, count);
    if (!h.ok()) return h.status();
    absl::StatusOr<kvtier::PinResult> r =
        client->impl->Pin(engine_id, *h, kvtier::c_api::Millis(ttl_ms));
    if (!r.ok()) return r.status();
    kvtier::c_api::WriteCodes(r->results, count, codes, nullptr);
    return absl::OkStatus();
  });
}

int kvtier_client_unpin(kvtier_client* client, const char* engine_id, const uint8_t* hashes,
                        size_t hash_len, size_t count, int* codes, kvtier_error* err) {
  return Guard(err, [&]() -> absl::Status {
    if (absl::Status st = kvtier::c_api::CheckEngine(client, engine_id); !st.ok()) return st;
    absl::StatusOr<std::vector<std::string>> h = kvtier::c_api::Hashes(hashes, hash_len, count);
    if (!h.ok()) return h.status();
    absl::StatusOr<kvtier::PinResult> r = client->impl->Unpin(engine_id, *h);
    if (!r.ok()) return r.status();
    kvtier::c_api::WriteCodes(r->results, count, codes, nullptr);
    return absl::OkStatus();
  });
}

int kvtier_client_park(kvtier_client* client, const char* engine_id, const char* request_id,
                       const uint32_t* page_indices, size_t count,
                       const kvtier_park_options* options, kvtier_park_result* result,
                       kvtier_error* err) {
  return Guard(err, [&]() -> absl::Status {
    if (absl::Status st = kvtier::c_api::CheckEngine(client, engine_id); !st.ok()) return st;
    if (request_id == nullptr) return Missing("request_id");
    if (count > 0 && page_indices == nullptr) return Missing("page_indices");
    kvtier::ParkOptions o;
    if (options != nullptr) {
      if (options->user_data_len > 0 && options->user_data == nullptr) {
        return Missing("options.user_data");
      }
      o.append = options->append != 0;
      o.num_tokens = options->num_tokens;
      if (options->user_data_len > 0) {
        o.user_data.assign(reinterpret_cast<const char*>(options->user_data),
                           options->user_data_len);
      }
      o.ttl = kvtier::c_api::Millis(options->ttl_ms);
      o.priority = static_cast<kvtier::Priority>(options->priority);
      o.ack = static_cast<kvtier::WriteAck>(options->ack);
    }
    absl::StatusOr<kvtier::ParkResult> r =
        client->impl->Park(engine_id, request_id, kvtier::c_api::Indices(page_indices, count), o);
    if (!r.ok()) return r.status();
    if (result != nullptr) {
      result->parked_pages = r->parked_pages;
      result->cold_bytes = r->cold_bytes;
      result->expires_at_unix_ms = absl::ToUnixMillis(r->expires_at);
      result->tier = static_cast<int>(r->tier);
    }
    return absl::OkStatus();
  });
}

int kvtier_client_resume(kvtier_client* client, const char* engine_id, const char* request_id,
                         const uint32_t* page_indices, size_t count, uint32_t first_page,
                         int keep_parked, uint8_t* user_data, size_t capacity,
                         kvtier_resume_result* result, kvtier_error* err) {
  return Guard(err, [&]() -> absl::Status {
    if (absl::Status st = kvtier::c_api::CheckEngine(client, engine_id); !st.ok()) return st;
    if (request_id == nullptr) return Missing("request_id");
    if (count > 0 && page_indices == nullptr) return Missing("page_indices");
    absl::StatusOr<kvtier::ResumeResult> r =
        client->impl->Resume(engine_id, request_id, kvtier::c_api::Indices(page_indices, count),
                             first_page, keep_parked != 0);
    if (!r.ok()) return r.status();
    if (user_data != nullptr) {
      std::memcpy(user_data, r->user_data.data(), std::min(capacity, r->user_data.size()));
    }
    if (result != nullptr) {
      result->resumed_pages = r->resumed_pages;
      result->parked_pages = r->parked_pages;
      result->num_tokens = r->num_tokens;
      result->user_data_len = r->user_data.size();
      result->released = r->released;
    }
    return absl::OkStatus();
  });
}

int kvtier_client_release(kvtier_client* client, const char* engine_id,
                          const char* const* request_ids, size_t count, int* codes,
                          uint64_t* freed_bytes, kvtier_error* err) {
  return Guard(err, [&]() -> absl::Status {
    if (absl::Status st = kvtier::c_api::CheckEngine(client, engine_id); !st.ok()) return st;
    if (count > 0 && request_ids == nullptr) return Missing("request_ids");
    std::vector<std::string> ids;
    for (size_t i = 0; i < count; ++i) {
      if (request_ids[i] == nullptr) return Missing(absl::StrCat("request_ids[", i, "]").c_str());
      ids.emplace_back(request_ids[i]);
    }
    absl::StatusOr<kvtier::ReleaseResult> r = client->impl->Release(engine_id, ids);
    if (!r.ok()) return r.status();
    kvtier::c_api::WriteCodes(r->results, count, codes, nullptr);
    if (freed_bytes != nullptr) *freed_bytes = r->freed_bytes;
    return absl::OkStatus();
  });
}

int kvtier_client_stats(kvtier_client* client, kvtier_stats* stats, kvtier_error* err) {
  return Guard(err, [&]() -> absl::Status {
    if (client == nullptr) return Missing("client");
    if (stats == nullptr) return Missing("stats");
    absl::StatusOr<kvtier::Stats> s = client->impl->GetStats();
    if (!s.ok()) return s.status();
    *stats = kvtier_stats{};
    stats->incarnation_id = s->incarnation_id;
    stats->uptime_ms = static_cast<uint64_t>(absl::ToInt64Milliseconds(s->uptime));
    stats->hot_bytes_offloaded = s->hot_bytes_offloaded;
    stats->cold_bytes_offloaded = s->cold_bytes_offloaded;
    stats->hot_bytes_onboarded = s->hot_bytes_onboarded;
    stats->cold_bytes_onboarded = s->cold_bytes_onboarded;
    stats->dropped_offloads = s->dropped_offloads;
    stats->parked_requests = s->parked_requests;
    stats->registered_engines = s->registered_engines;
    stats->draining = s->draining;
    for (const kvtier::TierStats& t : s->tiers) {
      if (stats->num_tiers == KVTIER_MAX_TIERS) break;
      kvtier_tier_stats& out = stats->tiers[stats->num_tiers++];
      out.tier = static_cast<int>(t.tier);
      out.capacity_bytes = t.capacity_bytes;
      out.used_bytes = t.used_bytes;
      out.blocks = t.blocks;
      out.pinned_blocks = t.pinned_blocks;
      out.hits = t.hits;
      out.misses = t.misses;
      out.bytes_in = t.bytes_in;
      out.bytes_out = t.bytes_out;
      out.evicted_blocks = t.evicted_blocks;
      out.checksum_failures = t.checksum_failures;
    }
    return absl::OkStatus();
  });
}

int kvtier_client_watch_events(kvtier_client* client, int snapshot, uint64_t namespace_id,
                               kvtier_event_fn on_event, kvtier_watch_done_fn on_done,
                               void* user_data, kvtier_watch** watch, kvtier_error* err) {
  return Guard(err, [&]() -> absl::Status {
    if (client == nullptr) return Missing("client");
    if (on_event == nullptr) return Missing("on_event");
    if (watch == nullptr) return Missing("watch");
    *watch = nullptr;
    kvtier::WatchOptions options;
    options.snapshot = snapshot != 0;
    options.namespace_id = namespace_id;
    // The callbacks run on the watch's thread: nothing may throw out of them.
    auto deliver = [on_event, user_data](const kvtier::Event& e) {
      try {
        std::vector<uint8_t> hashes(e.block_hashes.size() * KVTIER_BLOCK_HASH_BYTES, 0);
        for (size_t i = 0; i < e.block_hashes.size(); ++i) {
          std::memcpy(hashes.data() + i * KVTIER_BLOCK_HASH_BYTES, e.block_hashes[i].data(),
                      std::min<size_t>(e.block_hashes[i].size(), KVTIER_BLOCK_HASH_BYTES));
        }
        kvtier_event out{};
        out.kind = static_cast<int>(e.kind) + KVTIER_EVENT_BLOCK_STORED;
        out.sequence = e.sequence;
        out.namespace_id = e.namespace_id;
        out.block_hashes = hashes.empty() ? nullptr : hashes.data();
        out.num_hashes = e.block_hashes.size();
        out.tier = static_cast<int>(e.tier);
        out.from_tier = static_cast<int>(e.from_tier);
        out.count = e.count;
        on_event(&out, user_data);
      } catch (...) {
        // Out of memory for one event's hashes: the event is dropped, the stream goes on.
      }
    };
    std::function<void(absl::Status)> done;
    if (on_done != nullptr) {
      done = [on_done, user_data](absl::Status status) {
        kvtier_error e{};
        kvtier::c_api::Report(status, &e);
        on_done(&e, user_data);
      };
    }
    absl::StatusOr<std::unique_ptr<kvtier::EventWatch>> w =
        client->impl->WatchEvents(options, std::move(deliver), std::move(done));
    if (!w.ok()) return w.status();
    *watch = new kvtier_watch{std::move(*w)};
    return absl::OkStatus();
  });
}

void kvtier_watch_destroy(kvtier_watch* watch) {
  if (watch == nullptr) return;
  watch->impl->Cancel();
  delete watch;  // the EventWatch's destructor waits for its thread
}

}  // extern "C"
