/* The C ABI's second part (C99): what a binding needs to mirror the whole C++ API of libkvtier
 * (the `kvtier` Python package is one, through ctypes). kvtier.h's conventions hold (int status,
 * a last `kvtier_error* err`, caller buffers with `*required`, borrowed pointers). The `_v2` forms
 * return the whole result of their C++ call (every item's code, tier and message; byte counts;
 * expiry times); kvtier.h's first forms stay for engines that need less. Also here: connecting with
 * every ClientOptions field, pools of every kind (paths, POSIX names, CUDA IPC exports), layouts'
 * buffers and builders, block-hash extras, compression configurations, and kvtier_free for memory
 * the library allocates. Thread-safety as in kvtier.h; every call blocks until its answer.
 */
#ifndef KVTIER_CLIENT_INCLUDE_KVTIER_KVTIER_V2_H_
#define KVTIER_CLIENT_INCLUDE_KVTIER_KVTIER_V2_H_

#include "kvtier/kvtier.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Frees memory a _v2 function allocated for the caller (it says so). NULL is a no-op. */
void kvtier_free(void* memory);

/* ---- Connecting ---- */

/* Every ClientOptions field; a zeroed struct means every default. */
typedef struct kvtier_connect_options {
  const char* socket_path;     /* NULL or "": $KVTIER_SOCKET, else /run/kvtier/kvtier.sock */
  const char* target;          /* a gRPC target instead ("unix:/path", "host:port"); NULL: none */
  const char* client_name;     /* added to Hello's client string; NULL: none */
  const char* token;           /* tenant token (authorization: Bearer); NULL: none */
  uint32_t connect_timeout_ms; /* how long the daemon has to answer Hello; 0: 10 s */
  uint32_t rpc_timeout_ms;     /* deadline of every later call; 0: 30 s */
  int no_keep_alive;           /* non-zero: registered engines' leases are not renewed */
} kvtier_connect_options;

/* Connects and says Hello. UNAVAILABLE naming the socket (and the reason, e.g. "No such file or
 * directory", "Connection refused") at once when nothing listens on it, or when no daemon answers
 * within connect_timeout_ms; FAILED_PRECONDITION when the API versions do not overlap. */
int kvtier_client_connect_v2(const kvtier_connect_options* options, kvtier_client** client,
                             kvtier_error* err);

/* kvtier_server_info and the feature names. */
typedef struct kvtier_server_info_v2 {
  kvtier_server_info info;
  char features[1024]; /* comma-separated, truncated to fit */
} kvtier_server_info_v2;

/* What Hello answered at connect, or (refresh != 0) a new Hello's answer. */
int kvtier_client_server_info_v2(kvtier_client* client, int refresh, kvtier_server_info_v2* info,
                                 kvtier_error* err);

/* Renews an engine's lease now (clients renew on their own unless no_keep_alive). NOT_FOUND for
 * an engine that is not registered. */
int kvtier_client_keep_alive(kvtier_client* client, const char* engine_id, kvtier_error* err);

/* ---- Pools of every kind ---- */

enum { KVTIER_POOL_SHARED_MEMORY = 1, KVTIER_POOL_CUDA_IPC = 2 };
#define KVTIER_CUDA_IPC_HANDLE_BYTES 64
#define KVTIER_DEVICE_UUID_BYTES 16

/* A GPU pool as kvtierd maps it: a cudaIpcMemHandle_t of a whole allocation, the device, and the
 * pool's bytes inside the allocation. */
typedef struct kvtier_cuda_ipc_pool {
  uint8_t handle[KVTIER_CUDA_IPC_HANDLE_BYTES];
  uint8_t device_uuid[KVTIER_DEVICE_UUID_BYTES];
  uint32_t device_ordinal;
  uint64_t base_offset_bytes; /* the pool's start in the allocation */
  uint64_t size_bytes;
} kvtier_cuda_ipc_pool;

/* One pool as RegisterEngine sends it (kvtier::PoolRegistration). */
typedef struct kvtier_pool_registration {
  const char* name; /* a pool name of the layout */
  uint32_t slots;
  int kind; /* KVTIER_POOL_* */
  /* KVTIER_POOL_SHARED_MEMORY: a file path or a POSIX shared-memory name ("/name"), one of them
   * non-empty; size_bytes 0 means slots x slot_bytes. */
  const char* path;
  const char* shm_name;
  uint64_t offset_bytes;
  uint64_t size_bytes;
  kvtier_cuda_ipc_pool cuda; /* KVTIER_POOL_CUDA_IPC */
} kvtier_pool_registration;

/* 1 when this libkvtier was built with CUDA and sees at least one device, else 0. */
int kvtier_cuda_available(void);

/* Exports `size_bytes` of device memory on `device` starting `offset_bytes` after the device
 * address `pointer`, which may lie anywhere inside a cudaMalloc allocation (a framework's caching
 * allocator: torch's data_ptr()), as pool `name` of `slots` slots (kvtier::ExportCudaPool).
 * UNIMPLEMENTED in builds without CUDA; INVALID_ARGUMENT for a device that does not exist, a
 * pointer in no allocation, or a pool that does not fit in its allocation. */
int kvtier_cuda_export_pool(const char* name, uint32_t slots, int device, const void* pointer,
                            uint64_t offset_bytes, uint64_t size_bytes, kvtier_cuda_ipc_pool* pool,
                            kvtier_error* err);

/* A GPU pool allocated and exported by libkvtier (kvtier::DevicePool): slots x slot_bytes of
 * device memory on `device`. UNIMPLEMENTED without CUDA, UNAVAILABLE without the device or the
 * memory. Destroying it frees the memory. */
typedef struct kvtier_device_pool kvtier_device_pool;
int kvtier_device_pool_create(int device, const char* name, uint32_t slots, uint64_t slot_bytes,
                              kvtier_device_pool** pool, kvtier_error* err);
void kvtier_device_pool_destroy(kvtier_device_pool* pool);
/* The device address, its size and the pool's export; out-parameters may be NULL. */
int kvtier_device_pool_info(const kvtier_device_pool* pool, void** data, uint64_t* size_bytes,
                            kvtier_cuda_ipc_pool* registration, kvtier_error* err);

/* ---- Engines ---- */

typedef struct kvtier_engine_options_v2 {
  const char* model;                     /* required */
  const char* engine_name;               /* NULL: "" */
  const char* tenant;                    /* NULL: the authenticated tenant or "default" */
  const char* partition;                 /* NULL: unsharded */
  const char* codec;                     /* NULL: the daemon's */
  const kvtier_layout* layout;           /* required */
  const kvtier_pool_registration* pools; /* one per layout pool */
  size_t num_pools;
  uint32_t codec_alignment_bytes; /* 0: 4096 */
  uint32_t lease_ttl_ms;          /* 0: the daemon's default */
} kvtier_engine_options_v2;

/* kvtier_client_register_engine with pools of any kind (the memory stays the caller's: it must
 * outlive the engine's registration). Same results and errors. */
int kvtier_client_register_engine_v2(kvtier_client* client, const kvtier_engine_options_v2* options,
                                     char* engine_id, size_t capacity, uint8_t* hash_root,
                                     kvtier_engine_info* info, kvtier_error* err);

/* ---- The cache, with whole results ---- */

#define KVTIER_ITEM_MESSAGE_BYTES 256

/* One item of a batched call. */
typedef struct kvtier_item {
  int code; /* KVTIER_ITEM_*; SKIPPED for items the server did not answer */
  int tier; /* the tier involved (onboard: read from), KVTIER_TIER_UNSPECIFIED when none */
  char message[KVTIER_ITEM_MESSAGE_BYTES]; /* the server's text for a failure, truncated */
} kvtier_item;

/* kvtier_client_lookup, and *pin_expires_at_unix_ms (may be NULL): when pinned hits expire,
 * 0 when nothing was pinned. */
int kvtier_client_lookup_v2(kvtier_client* client, const char* engine_id, const uint8_t* hashes,
                            size_t hash_len, size_t count, uint32_t pin_ttl_ms, uint32_t* hit_pages,
                            int* tiers, int64_t* pin_expires_at_unix_ms, kvtier_error* err);

/* What an offload or onboard moved: pages stored (offload) or onboarded (the usable prefix),
 * hot bytes read from (offload) or written to (onboard) the pools, cold bytes written or read. */
typedef struct kvtier_transfer_result {
  uint32_t pages;
  uint64_t hot_bytes;
  uint64_t cold_bytes;
} kvtier_transfer_result;

/* kvtier_client_offload / kvtier_client_onboard with the whole result; result and items (count
 * entries) may be NULL. */
int kvtier_client_offload_v2(kvtier_client* client, const char* engine_id, const uint8_t* hashes,
                             size_t hash_len, const uint32_t* page_indices, size_t count,
                             const kvtier_offload_options* options, kvtier_transfer_result* result,
                             kvtier_item* items, kvtier_error* err);
int kvtier_client_onboard_v2(kvtier_client* client, const char* engine_id, const uint8_t* hashes,
                             size_t hash_len, const uint32_t* page_indices, size_t count,
                             int continue_after_miss, kvtier_transfer_result* result,
                             kvtier_item* items, kvtier_error* err);

/* kvtier_client_offload_v2 with each page's token ids (OffloadItem.token_ids, the tokens the
 * page's block hash was computed from): a daemon with kv_events on publishes them in the block's
 * BlockStored events, which lets routers that recompute hashes from tokens (NVIDIA Dynamo's)
 * match the block; a daemon with kv_events off only checks their count (docs/KV_EVENTS.md). Page
 * i has token_counts[i] tokens (0: none), stored in `token_ids` right after page i-1's, so
 * `token_ids` holds the sum of the counts; for pages hashed by kvtier_hasher_hash from `tokens`,
 * that is `tokens` itself with every count tokens_per_page. token_counts NULL: no page has tokens
 * (token_ids is then ignored; the same as kvtier_client_offload_v2). INVALID_ARGUMENT, before any
 * RPC, for a NULL token_ids with a count that is not 0; from the daemon, for a page with more
 * tokens than the layout's tokens_per_page: the call fails, no page of that item's request is
 * stored, and the message names the item ("items[1]: 17 token ids, more than the 16 tokens of a
 * page of engine
 * ..."). Park has no token ids: parked pages are never published. */
int kvtier_client_offload_tokens(kvtier_client* client, const char* engine_id,
                                 const uint8_t* hashes, size_t hash_len,
                                 const uint32_t* page_indices, size_t count,
                                 const uint32_t* token_ids, const uint32_t* token_counts,
                                 const kvtier_offload_options* options,
                                 kvtier_transfer_result* result, kvtier_item* items,
                                 kvtier_error* err);

/* Pin / unpin with items (count entries, may be NULL) and, for pin, when the pins expire
 * (*expires_at_unix_ms, may be NULL; 0 when the server gave no time). */
int kvtier_client_pin_v2(kvtier_client* client, const char* engine_id, const uint8_t* hashes,
                         size_t hash_len, size_t count, uint32_t ttl_ms,
                         int64_t* expires_at_unix_ms, kvtier_item* items, kvtier_error* err);
int kvtier_client_unpin_v2(kvtier_client* client, const char* engine_id, const uint8_t* hashes,
                           size_t hash_len, size_t count, kvtier_item* items, kvtier_error* err);

/* ---- Tool calls, with whole results ---- */

/* kvtier_client_resume, with all of user_data: *user_data (may be NULL) gets a copy the caller
 * frees with kvtier_free (NULL when empty), its length in result->user_data_len. */
int kvtier_client_resume_v2(kvtier_client* client, const char* engine_id, const char* request_id,
                            const uint32_t* page_indices, size_t count, uint32_t first_page,
                            int keep_parked, kvtier_resume_result* result, uint8_t** user_data,
                            kvtier_error* err);
/* kvtier_client_release with items (count entries, may be NULL): OK or NOT_FOUND per id. */
int kvtier_client_release_v2(kvtier_client* client, const char* engine_id,
                             const char* const* request_ids, size_t count, kvtier_item* items,
                             uint64_t* freed_bytes, kvtier_error* err);

/* ---- Statistics, with namespaces ---- */

/* One namespace's figures (tiers: blocks and used_bytes only). Names are truncated to fit. */
typedef struct kvtier_namespace_stats {
  uint64_t namespace_id;
  char tenant[128];
  char model[256];
  char partition[128];
  uint32_t engines;
  uint64_t hits, misses, parked_requests;
  uint32_t num_tiers;
  kvtier_tier_stats tiers[KVTIER_MAX_TIERS];
} kvtier_namespace_stats;

/* kvtier_client_stats and, with include_namespaces != 0, the namespaces: the first `capacity` go
 * to `namespaces` (may be NULL with capacity 0), their total to *num_namespaces (may be NULL); a
 * caller that got more than it had room for asks again with a larger array. */
int kvtier_client_stats_v2(kvtier_client* client, int include_namespaces, kvtier_stats* stats,
                           kvtier_namespace_stats* namespaces, size_t capacity,
                           size_t* num_namespaces, kvtier_error* err);

/* ---- Layouts ---- */

/* "bf16", "fp16", "fp8_e4m3", "fp32", "bytes" to KVTIER_DTYPE_*; INVALID_ARGUMENT listing them. */
int kvtier_dtype_from_name(const char* name, int* dtype, kvtier_error* err);

/* Multi-head latent attention (kvtier::MlaLayoutOptions). */
int kvtier_layout_mla(uint32_t num_layers, uint32_t tokens_per_page, uint32_t kv_lora_rank,
                      uint32_t rope_dim, int dtype, uint32_t indexer_bytes_per_token,
                      kvtier_layout** layout, kvtier_error* err);
/* Attention layers (K and V) among state layers of state_bytes per page
 * (kvtier::HybridLayoutOptions); attention_layers has num_attention_layers entries. */
int kvtier_layout_hybrid(uint32_t num_layers, const uint32_t* attention_layers,
                         size_t num_attention_layers, uint32_t kv_heads, uint32_t head_dim,
                         uint32_t tokens_per_page, uint32_t state_bytes, int dtype,
                         uint32_t rope_start, uint32_t rope_len, kvtier_layout** layout,
                         kvtier_error* err);
/* The preset names, '\n'-separated (caller buffer). */
int kvtier_layout_preset_names(char* names, size_t capacity, size_t* required, kvtier_error* err);

/* The layout's fingerprint (as the daemon derives namespaces), whether it has MLA latent
 * buffers, and its number of buffers; out-parameters may be NULL. */
int kvtier_layout_summary(const kvtier_layout* layout, uint64_t* fingerprint, int* has_mla,
                          size_t* num_buffers, kvtier_error* err);

/* One buffer of a layout (kvtier::BufferInfo; codec/FORMAT.md for the roles). */
typedef struct kvtier_buffer_info {
  char name[64]; /* "k.0" */
  char role[32]; /* "k", "v", "mla_latent", "lossless" */
  uint32_t layer;
  int dtype; /* KVTIER_DTYPE_* */
  uint32_t heads, tokens, head_dim, row_stride, pool;
  uint64_t offset_bytes, data_bytes;
} kvtier_buffer_info;

/* Buffer `index`; OUT_OF_RANGE past the last one. */
int kvtier_layout_buffer(const kvtier_layout* layout, size_t index, kvtier_buffer_info* buffer,
                         kvtier_error* err);

/* ---- Block hashes ---- */

/* kvtier_hasher_hash with extra keys and a parent of any stated length: `extra_keys` (NULL when
 * num_extra_keys is 0) holds one key per full page (extra_key_lens[i] bytes each) mixed into that
 * page's hash; INVALID_ARGUMENT when num_extra_keys is neither 0 nor the page count, or for a
 * parent (when not NULL) that is not 32 bytes. */
int kvtier_hasher_hash_v2(const kvtier_hasher* hasher, const uint8_t* parent, size_t parent_len,
                          const uint32_t* tokens, size_t num_tokens,
                          const uint8_t* const* extra_keys, const size_t* extra_key_lens,
                          size_t num_extra_keys, uint8_t* hashes, size_t max_hashes, size_t* count,
                          kvtier_error* err);
/* One link of the chain (kvtier::BlockHasher::Next): the 32-byte hash of the page `tokens` (any
 * length) after `parent` (any length), with an optional extra key. */
int kvtier_hash_next(const uint8_t* parent, size_t parent_len, const uint32_t* tokens,
                     size_t num_tokens, const uint8_t* extra_key, size_t extra_key_len,
                     uint8_t* hash, kvtier_error* err);

/* ---- Compression configurations (kvtier/compression.h) ---- */

typedef struct kvtier_compression_config kvtier_compression_config;

/* Every default (kvtier::CompressionConfig{}), one parsed block (YAML or JSON; INVALID_ARGUMENT
 * names the key) or a file's (NOT_FOUND / INVALID_ARGUMENT name the path). Free with
 * kvtier_compression_config_destroy. */
int kvtier_compression_config_defaults(kvtier_compression_config** config, kvtier_error* err);
int kvtier_compression_config_parse(const char* text, kvtier_compression_config** config,
                                    kvtier_error* err);
int kvtier_compression_config_load(const char* path, kvtier_compression_config** config,
                                   kvtier_error* err);
void kvtier_compression_config_destroy(kvtier_compression_config* config);
/* A field of kvtier::CompressionConfig by its name ("algorithm", "budget", "beta",
 * "eviction_mode", "calibration_path", "model_config_path", "quant", "rope_precision",
 * "daemon_socket", "durable"), as text (numbers in decimal, durable "true" / "false"), to a caller
 * buffer. NOT_FOUND for another name. */
int kvtier_compression_config_field(const kvtier_compression_config* config, const char* field,
                                    char* value, size_t capacity, size_t* required,
                                    kvtier_error* err);
/* How many keys `options` holds, and key `index` (in key order) with its value, each to a caller
 * buffer (both sizes reported when either is too small); OUT_OF_RANGE past the last key. */
size_t kvtier_compression_config_num_options(const kvtier_compression_config* config);
int kvtier_compression_config_option(const kvtier_compression_config* config, size_t index,
                                     char* key, size_t key_capacity, size_t* key_required,
                                     char* value, size_t value_capacity, size_t* value_required,
                                     kvtier_error* err);
/* The registered compression methods, sorted, '\n'-separated (caller buffer). */
int kvtier_compression_method_names(char* names, size_t capacity, size_t* required,
                                    kvtier_error* err);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KVTIER_CLIENT_INCLUDE_KVTIER_KVTIER_V2_H_ */
