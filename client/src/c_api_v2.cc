// The client calls of the C ABI's second part (kvtier/kvtier_v2.h): connecting with every option,
// registering pools of any kind, and the cache, tool-call and statistics calls with their whole
// results. Like c_api.cc, every body runs under Guard() (c_api_internal.h) and nothing throws
// across the boundary. Results are written only after the call succeeded, items always in full
// (`count` entries, SKIPPED past what the server answered).
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "client/src/c_api_internal.h"
#include "kvtier/client.h"
#include "kvtier/kvtier_v2.h"
#include "kvtier/pools.h"
#include "kvtier/types.h"

namespace kvtier::c_api {
namespace {

void WriteItems(const std::vector<ItemResult>& results, size_t count, kvtier_item* items) {
  if (items == nullptr) return;
  for (size_t i = 0; i < count; ++i) {
    kvtier_item& out = items[i];
    if (i < results.size()) {
      out.code = static_cast<int>(results[i].code);
      out.tier = static_cast<int>(results[i].tier);
      CopyFixed(results[i].message, out.message);
    } else {
      out.code = static_cast<int>(ItemCode::kSkipped);
      out.tier = static_cast<int>(Tier::kUnspecified);
      out.message[0] = '\0';
    }
  }
}

int64_t UnixMillis(const std::optional<absl::Time>& t) {
  return t.has_value() ? absl::ToUnixMillis(*t) : 0;
}

// A kvtier_pool_registration as the C++ API takes it; `index` names it in errors.
absl::StatusOr<PoolRegistration> ToRegistration(const kvtier_pool_registration& in, size_t index) {
  const std::string where = absl::StrCat("options.pools[", index, "]");
  if (in.name == nullptr) return Missing(absl::StrCat(where, ".name"));
  PoolRegistration r;
  r.name = in.name;
  r.slots = in.slots;
  switch (in.kind) {
    case KVTIER_POOL_SHARED_MEMORY:
      r.shared_memory.emplace();
      r.shared_memory->path = Str(in.path);
      r.shared_memory->shm_name = Str(in.shm_name);
      r.shared_memory->offset_bytes = in.offset_bytes;
      r.shared_memory->size_bytes = in.size_bytes;
      return r;
    case KVTIER_POOL_CUDA_IPC:
      r.cuda_ipc.emplace();
      r.cuda_ipc->handle.assign(reinterpret_cast<const char*>(in.cuda.handle),
                                sizeof(in.cuda.handle));
      r.cuda_ipc->device_uuid.assign(reinterpret_cast<const char*>(in.cuda.device_uuid),
                                     sizeof(in.cuda.device_uuid));
      r.cuda_ipc->device_ordinal = in.cuda.device_ordinal;
      r.cuda_ipc->base_offset_bytes = in.cuda.base_offset_bytes;
      r.cuda_ipc->size_bytes = in.cuda.size_bytes;
      return r;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          where, ".kind is ", in.kind, " (expected KVTIER_POOL_SHARED_MEMORY 1 or CUDA_IPC 2)"));
  }
}

void WriteTierStats(const TierStats& t, kvtier_tier_stats& out) {
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

}  // namespace
}  // namespace kvtier::c_api

using kvtier::c_api::Guard;
using kvtier::c_api::Missing;
using kvtier::c_api::Str;

extern "C" {

void kvtier_free(void* memory) { std::free(memory); }

int kvtier_client_connect_v2(const kvtier_connect_options* options, kvtier_client** client,
                             kvtier_error* err) {
  return Guard(err, [&]() -> absl::Status {
    if (client == nullptr) return Missing("client");
    *client = nullptr;
    if (options == nullptr) return Missing("options");
    kvtier::ClientOptions o;
    o.socket_path = Str(options->socket_path);
    o.target = Str(options->target);
    o.client_name = Str(options->client_name);
    o.token = Str(options->token);
    if (options->connect_timeout_ms > 0) {
      o.connect_timeout = kvtier::c_api::Millis(options->connect_timeout_ms);
    }
    if (options->rpc_timeout_ms > 0) {
      o.rpc_timeout = kvtier::c_api::Millis(options->rpc_timeout_ms);
    }
    o.keep_alive = options->no_keep_alive == 0;
    return kvtier::c_api::Emplace(client, kvtier::Client::Connect(o));
  });
}

int kvtier_client_server_info_v2(kvtier_client* client, int refresh, kvtier_server_info_v2* info,
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
    *info = kvtier_server_info_v2{};
    kvtier_server_info& out = info->info;
    out.api_version = s.api_version;
    out.incarnation_id = s.incarnation_id;
    kvtier::c_api::CopyFixed(s.server_version, out.server_version);
    kvtier::c_api::CopyFixed(s.node_name, out.node_name);
    kvtier::c_api::CopyFixed(absl::StrJoin(s.codecs, ","), out.codecs);
    for (kvtier::Tier t : s.tiers) {
      const int bit = static_cast<int>(t);
      if (bit > 0 && bit < 32) out.tier_mask |= 1u << bit;
    }
    out.max_items_per_request = s.max_items_per_request;
    out.cuda = s.cuda;
    out.cuda_ipc_pools = s.cuda_ipc_pools;
    out.shared_memory_pools = s.shared_memory_pools;
    out.persistent_host_tier = s.persistent_host_tier;
    out.authentication = s.authentication;
    out.draining = s.draining;
    kvtier::c_api::CopyFixed(absl::StrJoin(s.features, ","), info->features);
    return absl::OkStatus();
  });
}

int kvtier_client_keep_alive(kvtier_client* client, const char* engine_id, kvtier_error* err) {
  return Guard(err, [&]() -> absl::Status {
    if (absl::Status st = kvtier::c_api::CheckEngine(client, engine_id); !st.ok()) return st;
    return client->impl->KeepAlive(engine_id);
  });
}

int kvtier_client_register_engine_v2(kvtier_client* client, const kvtier_engine_options_v2* options,
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
      absl::StatusOr<kvtier::PoolRegistration> r =
          kvtier::c_api::ToRegistration(options->pools[i], i);
      if (!r.ok()) return r.status();
      o.pools.push_back(*std::move(r));
    }
    o.codec_alignment_bytes = options->codec_alignment_bytes;
    o.lease_ttl = kvtier::c_api::Millis(options->lease_ttl_ms);
    return kvtier::c_api::RegisterEngine(client, o, engine_id, capacity, hash_root, info);
  });
}

int kvtier_client_lookup_v2(kvtier_client* client, const char* engine_id, const uint8_t* hashes,
                            size_t hash_len, size_t count, uint32_t pin_ttl_ms, uint32_t* hit_pages,
                            int* tiers, int64_t* pin_expires_at_unix_ms, kvtier_error* err) {
  return Guard(err, [&]() -> absl::Status {
    if (absl::Status st = kvtier::c_api::CheckEngine(client, engine_id); !st.ok()) return st;
    if (hit_pages == nullptr) return Missing("hit_pages");
    *hit_pages = 0;
    if (pin_expires_at_unix_ms != nullptr) *pin_expires_at_unix_ms = 0;
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
    if (pin_expires_at_unix_ms != nullptr) {
      *pin_expires_at_unix_ms = kvtier::c_api::UnixMillis(r->pin_expires_at);
    }
    return absl::OkStatus();
  });
}

int kvtier_client_offload_v2(kvtier_client* client, const char* engine_id, const uint8_t* hashes,
                             size_t hash_len, const uint32_t* page_indices, size_t count,
                             const kvtier_offload_options* options, kvtier_transfer_result* result,
                             kvtier_item* items, kvtier_error* err) {
  return kvtier_client_offload_tokens(client, engine_id, hashes, hash_len, page_indices, count,
                                      nullptr, nullptr, options, result, items, err);
}

int kvtier_client_offload_tokens(kvtier_client* client, const char* engine_id,
                                 const uint8_t* hashes, size_t hash_len,
                                 const uint32_t* page_indices, size_t count,
                                 const uint32_t* token_ids, const uint32_t* token_counts,
                                 const kvtier_offload_options* options,
                                 kvtier_transfer_result* result, kvtier_item* items,
                                 kvtier_error* err) {
  return Guard(err, [&]() -> absl::Status {
    if (absl::Status st = kvtier::c_api::CheckEngine(client, engine_id); !st.ok()) return st;
    if (result != nullptr) *result = kvtier_transfer_result{};
    absl::StatusOr<std::vector<kvtier::PageRef>> pages =
        kvtier::c_api::Pages(hashes, hash_len, page_indices, count);
    if (!pages.ok()) return pages.status();
    if (absl::Status st = kvtier::c_api::AttachTokens(token_ids, token_counts, &*pages); !st.ok()) {
      return st;
    }
    kvtier::OffloadOptions o;
    if (options != nullptr) {
      o.durable = options->durable != 0;
      o.priority = static_cast<kvtier::Priority>(options->priority);
      o.ack = static_cast<kvtier::WriteAck>(options->ack);
    }
    absl::StatusOr<kvtier::OffloadResult> r = client->impl->Offload(engine_id, *pages, o);
    if (!r.ok()) return r.status();
    if (result != nullptr) {
      result->pages = r->stored_pages;
      result->hot_bytes = r->hot_bytes_read;
      result->cold_bytes = r->cold_bytes_written;
    }
    kvtier::c_api::WriteItems(r->results, count, items);
    return absl::OkStatus();
  });
}

int kvtier_client_onboard_v2(kvtier_client* client, const char* engine_id, const uint8_t* hashes,
                             size_t hash_len, const uint32_t* page_indices, size_t count,
                             int continue_after_miss, kvtier_transfer_result* result,
                             kvtier_item* items, kvtier_error* err) {
  return Guard(err, [&]() -> absl::Status {
    if (absl::Status st = kvtier::c_api::CheckEngine(client, engine_id); !st.ok()) return st;
    if (result != nullptr) *result = kvtier_transfer_result{};
    absl::StatusOr<std::vector<kvtier::PageRef>> pages =
        kvtier::c_api::Pages(hashes, hash_len, page_indices, count);
    if (!pages.ok()) return pages.status();
    absl::StatusOr<kvtier::OnboardResult> r =
        client->impl->Onboard(engine_id, *pages, continue_after_miss != 0);
    if (!r.ok()) return r.status();
    if (result != nullptr) {
      result->pages = r->onboarded_pages;
      result->hot_bytes = r->hot_bytes_written;
      result->cold_bytes = r->cold_bytes_read;
    }
    kvtier::c_api::WriteItems(r->results, count, items);
    return absl::OkStatus();
  });
}

int kvtier_client_pin_v2(kvtier_client* client, const char* engine_id, const uint8_t* hashes,
                         size_t hash_len, size_t count, uint32_t ttl_ms,
                         int64_t* expires_at_unix_ms, kvtier_item* items, kvtier_error* err) {
  return Guard(err, [&]() -> absl::Status {
    if (absl::Status st = kvtier::c_api::CheckEngine(client, engine_id); !st.ok()) return st;
    if (expires_at_unix_ms != nullptr) *expires_at_unix_ms = 0;
    absl::StatusOr<std::vector<std::string>> h = kvtier::c_api::Hashes(hashes, hash_len, count);
    if (!h.ok()) return h.status();
    absl::StatusOr<kvtier::PinResult> r =
        client->impl->Pin(engine_id, *h, kvtier::c_api::Millis(ttl_ms));
    if (!r.ok()) return r.status();
    if (expires_at_unix_ms != nullptr) {
      *expires_at_unix_ms = kvtier::c_api::UnixMillis(r->expires_at);
    }
    kvtier::c_api::WriteItems(r->results, count, items);
    return absl::OkStatus();
  });
}

int kvtier_client_unpin_v2(kvtier_client* client, const char* engine_id, const uint8_t* hashes,
                           size_t hash_len, size_t count, kvtier_item* items, kvtier_error* err) {
  return Guard(err, [&]() -> absl::Status {
    if (absl::Status st = kvtier::c_api::CheckEngine(client, engine_id); !st.ok()) return st;
    absl::StatusOr<std::vector<std::string>> h = kvtier::c_api::Hashes(hashes, hash_len, count);
    if (!h.ok()) return h.status();
    absl::StatusOr<kvtier::PinResult> r = client->impl->Unpin(engine_id, *h);
    if (!r.ok()) return r.status();
    kvtier::c_api::WriteItems(r->results, count, items);
    return absl::OkStatus();
  });
}

int kvtier_client_resume_v2(kvtier_client* client, const char* engine_id, const char* request_id,
                            const uint32_t* page_indices, size_t count, uint32_t first_page,
                            int keep_parked, kvtier_resume_result* result, uint8_t** user_data,
                            kvtier_error* err) {
  return Guard(err, [&]() -> absl::Status {
    if (absl::Status st = kvtier::c_api::CheckEngine(client, engine_id); !st.ok()) return st;
    if (user_data != nullptr) *user_data = nullptr;
    if (request_id == nullptr) return Missing("request_id");
    if (count > 0 && page_indices == nullptr) return Missing("page_indices");
    absl::StatusOr<kvtier::ResumeResult> r =
        client->impl->Resume(engine_id, request_id, kvtier::c_api::Indices(page_indices, count),
                             first_page, keep_parked != 0);
    if (!r.ok()) return r.status();
    if (user_data != nullptr && !r->user_data.empty()) {
      auto* copy = static_cast<uint8_t*>(std::malloc(r->user_data.size()));
      if (copy == nullptr) {
        return absl::ResourceExhaustedError(
            absl::StrCat("no memory for ", r->user_data.size(), " bytes of user_data"));
      }
      std::memcpy(copy, r->user_data.data(), r->user_data.size());
      *user_data = copy;
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

int kvtier_client_release_v2(kvtier_client* client, const char* engine_id,
                             const char* const* request_ids, size_t count, kvtier_item* items,
                             uint64_t* freed_bytes, kvtier_error* err) {
  return Guard(err, [&]() -> absl::Status {
    if (absl::Status st = kvtier::c_api::CheckEngine(client, engine_id); !st.ok()) return st;
    if (freed_bytes != nullptr) *freed_bytes = 0;
    if (count > 0 && request_ids == nullptr) return Missing("request_ids");
    std::vector<std::string> ids;
    for (size_t i = 0; i < count; ++i) {
      if (request_ids[i] == nullptr) return Missing(absl::StrCat("request_ids[", i, "]"));
      ids.emplace_back(request_ids[i]);
    }
    absl::StatusOr<kvtier::ReleaseResult> r = client->impl->Release(engine_id, ids);
    if (!r.ok()) return r.status();
    kvtier::c_api::WriteItems(r->results, count, items);
    if (freed_bytes != nullptr) *freed_bytes = r->freed_bytes;
    return absl::OkStatus();
  });
}

int kvtier_client_stats_v2(kvtier_client* client, int include_namespaces, kvtier_stats* stats,
                           kvtier_namespace_stats* namespaces, size_t capacity,
                           size_t* num_namespaces, kvtier_error* err) {
  return Guard(err, [&]() -> absl::Status {
    if (client == nullptr) return Missing("client");
    if (stats == nullptr) return Missing("stats");
    if (num_namespaces != nullptr) *num_namespaces = 0;
    if (capacity > 0 && namespaces == nullptr) return Missing("namespaces");
    absl::StatusOr<kvtier::Stats> s = client->impl->GetStats(include_namespaces != 0);
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
      kvtier::c_api::WriteTierStats(t, stats->tiers[stats->num_tiers++]);
    }
    for (size_t i = 0; i < s->namespaces.size() && i < capacity; ++i) {
      const kvtier::NamespaceStats& n = s->namespaces[i];
      kvtier_namespace_stats& out = namespaces[i];
      out = kvtier_namespace_stats{};
      out.namespace_id = n.namespace_id;
      kvtier::c_api::CopyFixed(n.tenant, out.tenant);
      kvtier::c_api::CopyFixed(n.model, out.model);
      kvtier::c_api::CopyFixed(n.partition, out.partition);
      out.engines = n.engines;
      out.hits = n.hits;
      out.misses = n.misses;
      out.parked_requests = n.parked_requests;
      for (const kvtier::TierStats& t : n.tiers) {
        if (out.num_tiers == KVTIER_MAX_TIERS) break;
        kvtier::c_api::WriteTierStats(t, out.tiers[out.num_tiers++]);
      }
    }
    if (num_namespaces != nullptr) *num_namespaces = s->namespaces.size();
    return absl::OkStatus();
  });
}

}  // extern "C"
