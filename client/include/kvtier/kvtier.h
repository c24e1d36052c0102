/* The C ABI of libkvtier (C99): opaque handles over the C++ API of kvtier/client.h, layout.h,
 * block_hasher.h and pools.h, for engines and bindings that cannot link C++.
 *
 * Conventions:
 *  - Functions return an int status: 0 (KVTIER_OK) or an absl::StatusCode number (KVTIER_*
 *    below). Every such function takes a last `kvtier_error* err`, which may be NULL; when given
 *    it is always written: code = the status, message = the server's or the library's text,
 *    NUL-terminated and truncated to fit (empty on success). The few functions that cannot fail
 *    (names, version, destroy) return their value or void.
 *  - Results go to out-parameters; optional ones may be NULL. Arrays are caller-allocated with
 *    explicit lengths. Block hashes are `count` hashes of `hash_len` bytes (1 to 32) end to end.
 *  - Strings are NUL-terminated UTF-8. A string result goes to a caller buffer of `capacity`
 *    bytes: `*required` (when given) gets its size including the NUL; a NULL buffer with capacity
 *    0 only asks the size (KVTIER_OK); a buffer that is too small gets "" and
 *    KVTIER_RESOURCE_EXHAUSTED.
 *  - Pointers to handles and buffers are borrowed for the call only, except where stated.
 *  - Thread-safety: a kvtier_client is thread-safe (as kvtier::Client); layouts are immutable and
 *    thread-safe; hashers and pools are thread-compatible. Every call blocks until its answer,
 *    except event watches, whose callbacks run on the watch's own thread.
 */
#ifndef KVTIER_CLIENT_INCLUDE_KVTIER_KVTIER_H_
#define KVTIER_CLIENT_INCLUDE_KVTIER_KVTIER_H_

#include <stddef.h>
#include <stdint.h>

#include "kvtier/version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes: the absl::StatusCode (and gRPC) numbers. */
enum {
  KVTIER_OK = 0,
  KVTIER_CANCELLED = 1,
  KVTIER_UNKNOWN = 2,
  KVTIER_INVALID_ARGUMENT = 3,
  KVTIER_DEADLINE_EXCEEDED = 4,
  KVTIER_NOT_FOUND = 5,
  KVTIER_ALREADY_EXISTS = 6,
  KVTIER_PERMISSION_DENIED = 7,
  KVTIER_RESOURCE_EXHAUSTED = 8,
  KVTIER_FAILED_PRECONDITION = 9,
  KVTIER_ABORTED = 10,
  KVTIER_OUT_OF_RANGE = 11,
  KVTIER_UNIMPLEMENTED = 12,
  KVTIER_INTERNAL = 13,
  KVTIER_UNAVAILABLE = 14,
  KVTIER_DATA_LOSS = 15,
  KVTIER_UNAUTHENTICATED = 16
};

/* Tiers (kvtier::Tier). */
enum {
  KVTIER_TIER_UNSPECIFIED = 0,
  KVTIER_TIER_GPU = 1,
  KVTIER_TIER_HOST = 2,
  KVTIER_TIER_DISK = 3,
  KVTIER_TIER_CLUSTER = 4 /* the fleet's shared cluster tier (Lookup only) */
};
#define KVTIER_MAX_TIERS 4

/* Per-item result codes of batched calls (kvtier::ItemCode). */
enum {
  KVTIER_ITEM_OK = 0,
  KVTIER_ITEM_ALREADY_STORED = 1,
  KVTIER_ITEM_NOT_FOUND = 2,
  KVTIER_ITEM_INVALID_ARGUMENT = 3,
  KVTIER_ITEM_RESOURCE_EXHAUSTED = 4,
  KVTIER_ITEM_NOT_ADMITTED = 5,
  KVTIER_ITEM_DATA_LOSS = 6,
  KVTIER_ITEM_UNAVAILABLE = 7,
  KVTIER_ITEM_SKIPPED = 8,
  KVTIER_ITEM_ABORTED = 9,
  KVTIER_ITEM_FAILED_PRECONDITION = 10,
  KVTIER_ITEM_INTERNAL = 11
};

/* Element types (kvtier::DType), priorities (kvtier::Priority), write acks (kvtier::WriteAck);
 * 0 is the server's default for the last two. */
enum {
  KVTIER_DTYPE_BF16 = 1,
  KVTIER_DTYPE_FP16 = 2,
  KVTIER_DTYPE_FP8_E4M3 = 3,
  KVTIER_DTYPE_FP32 = 4,
  KVTIER_DTYPE_BYTES = 5
};
enum {
  KVTIER_PRIORITY_DEFAULT = 0,
  KVTIER_PRIORITY_LOW = 1,
  KVTIER_PRIORITY_NORMAL = 2,
  KVTIER_PRIORITY_HIGH = 3
};
enum {
  KVTIER_ACK_DEFAULT = 0,
  KVTIER_ACK_PAGES_READ = 1,
  KVTIER_ACK_STORED = 2,
  KVTIER_ACK_DURABLE = 3
};

#define KVTIER_BLOCK_HASH_BYTES 32
#define KVTIER_ERROR_MESSAGE_BYTES 512
#define KVTIER_ENGINE_ID_BYTES 128 /* enough for any engine id the daemon hands out */

typedef struct kvtier_error {
  int code;                                 /* a KVTIER_* status */
  char message[KVTIER_ERROR_MESSAGE_BYTES]; /* NUL-terminated, truncated to fit */
} kvtier_error;

typedef struct kvtier_client kvtier_client;     /* a connection to kvtierd */
typedef struct kvtier_layout kvtier_layout;     /* an immutable page layout */
typedef struct kvtier_hasher kvtier_hasher;     /* a block hasher (root + tokens per page) */
typedef struct kvtier_shm_pool kvtier_shm_pool; /* a host pool in a shared-memory file */

/* The version of the library loaded at run time, "0.1.0": the KVTIER_VERSION_STRING it was built
 * with, which may differ from the KVTIER_VERSION_STRING of the headers a program was compiled
 * against (kvtier/version.h). Static storage. */
const char* kvtier_version(void);
/* "OK", "INVALID_ARGUMENT", ...; "gpu", "host", "disk", "cluster", "unspecified"; "ok",
 * "not_found", ... Static storage; unknown numbers give "UNKNOWN" / "unspecified" / "unknown". */
const char* kvtier_status_name(int code);
const char* kvtier_tier_name(int tier);
const char* kvtier_item_code_name(int code);

/* ---- Client ---- */

/* Connects to the daemon on `socket_path` (NULL or "": $KVTIER_SOCKET, else
 * /run/kvtier/kvtier.sock) and says Hello. `client_name` (may be NULL) is added to Hello's client
 * string; `timeout_ms` bounds the connect and every later call (0: 10 s to connect, 30 s per
 * call). Engines registered through the client keep their leases renewed until unregistered or
 * the client is closed. UNAVAILABLE naming the socket: at once, with the reason ("No such file
 * or directory", "Connection refused"), when nothing listens on it; after the timeout when no
 * daemon answers Hello. */
int kvtier_client_connect(const char* socket_path, const char* client_name, uint32_t timeout_ms,
                          kvtier_client** client, kvtier_error* err);
/* Closes the connection (outstanding leases are no longer renewed). NULL is a no-op.
 * REQUIRES: no other thread uses the client. */
void kvtier_client_close(kvtier_client* client);

typedef struct kvtier_server_info {
  uint32_t api_version;
  uint64_t incarnation_id;
  char server_version[64];
  char node_name[128];
  char codecs[128];   /* comma-separated, e.g. "raw,nvfp4,nvfp4x2" */
  uint32_t tier_mask; /* bit (1 << KVTIER_TIER_x) for each tier the daemon runs */
  uint32_t max_items_per_request;
  int cuda, cuda_ipc_pools, shared_memory_pools, persistent_host_tier, authentication, draining;
} kvtier_server_info;

/* What Hello answered at connect, or (refresh != 0) a new Hello's answer. */
int kvtier_client_server_info(kvtier_client* client, int refresh, kvtier_server_info* info,
                              kvtier_error* err);

/* ---- Layouts ---- */

/* A preset ("qwen3-8b", "llama-3.1-8b", "deepseek-v3", ...; NOT_FOUND lists them), a GQA layout
 * (rope_len 0: RoPE over the whole K row), or the JSON form of `kvtier-codec layout`.
 * INVALID_ARGUMENT names the offending field. Free with kvtier_layout_destroy. */
int kvtier_layout_from_preset(const char* name, uint32_t tokens_per_page, int dtype,
                              kvtier_layout** layout, kvtier_error* err);
int kvtier_layout_gqa(uint32_t num_layers, uint32_t kv_heads, uint32_t head_dim,
                      uint32_t tokens_per_page, int dtype, uint32_t rope_start, uint32_t rope_len,
                      kvtier_layout** layout, kvtier_error* err);
int kvtier_layout_from_json(const char* json, kvtier_layout** layout, kvtier_error* err);
void kvtier_layout_destroy(kvtier_layout* layout);

/* Any of the out-parameters may be NULL. hot_page_bytes: what an offload reads per page. */
int kvtier_layout_info(const kvtier_layout* layout, uint32_t* tokens_per_page,
                       uint64_t* hot_page_bytes, size_t* num_pools, kvtier_error* err);
/* Pool `index`'s name (caller buffer, see the conventions) and slot size; OUT_OF_RANGE past the
 * last pool. */
int kvtier_layout_pool(const kvtier_layout* layout, size_t index, char* name, size_t capacity,
                       size_t* required, uint64_t* slot_bytes, kvtier_error* err);
int kvtier_layout_to_json(const kvtier_layout* layout, char* json, size_t capacity,
                          size_t* required, kvtier_error* err);

/* ---- Block hashes ---- */

/* `root`: register's hash_root (KVTIER_BLOCK_HASH_BYTES). Free with kvtier_hasher_destroy. */
int kvtier_hasher_create(const uint8_t* root, size_t root_len, uint32_t tokens_per_page,
                         kvtier_hasher** hasher, kvtier_error* err);
void kvtier_hasher_destroy(kvtier_hasher* hasher);
/* The hashes of the full pages of `tokens` (num_tokens / tokens_per_page of them), chained from
 * `parent` (a previous page's 32-byte hash) or, when parent is NULL, from the root. Writes
 * *count hashes of 32 bytes to `hashes`; RESOURCE_EXHAUSTED (with *count set, nothing written)
 * when that is more than max_hashes. */
int kvtier_hasher_hash(const kvtier_hasher* hasher, const uint8_t* parent, const uint32_t* tokens,
                       size_t num_tokens, uint8_t* hashes, size_t max_hashes, size_t* count,
                       kvtier_error* err);

/* ---- Shared-memory pools ---- */

/* Creates `path` (mode 0660, under the daemon's pools.allowed_dirs) holding slots x slot_bytes
 * zero bytes, mapped read-write, for the layout pool `name`. Destroying the pool unmaps and
 * removes the file. */
int kvtier_shm_pool_create(const char* path, const char* name, uint32_t slots, uint64_t slot_bytes,
                           kvtier_shm_pool** pool, kvtier_error* err);
void kvtier_shm_pool_destroy(kvtier_shm_pool* pool);
/* The mapping (valid until destroy) and its size; either out-parameter may be NULL. */
int kvtier_shm_pool_data(kvtier_shm_pool* pool, uint8_t** data, uint64_t* size_bytes,
                         kvtier_error* err);

/* ---- Engines ---- */

typedef struct kvtier_engine_options {
  const char* model;             /* required */
  const char* engine_name;       /* NULL: "" */
  const char* tenant;            /* NULL: the authenticated tenant or "default" */
  const char* partition;         /* NULL: unsharded; e.g. "tp0" */
  const char* codec;             /* "raw", "nvfp4", "nvfp4+rope", "nvfp4x2"; NULL: the daemon's */
  const kvtier_layout* layout;   /* required */
  kvtier_shm_pool* const* pools; /* one per layout pool */
  size_t num_pools;
  uint32_t lease_ttl_ms; /* 0: the daemon's default */
} kvtier_engine_options;

typedef struct kvtier_engine_info {
  uint64_t namespace_id;
  uint64_t hot_page_bytes;
  uint64_t cold_block_bytes;
  uint64_t incarnation_id;
  uint64_t lease_ttl_ms;
  char codec[32]; /* the effective codec */
} kvtier_engine_info;

/* Registers an engine: its id goes to `engine_id` (a caller buffer of at least
 * KVTIER_ENGINE_ID_BYTES, checked before anything is registered), the 32-byte hasher root to
 * `hash_root` (may be NULL), the rest to `info` (may be NULL). The daemon's errors pass through
 * (INVALID_ARGUMENT for a pool outside its pools.allowed_dirs or one that does not match the
 * layout). */
int kvtier_client_register_engine(kvtier_client* client, const kvtier_engine_options* options,
                                  char* engine_id, size_t capacity, uint8_t* hash_root,
                                  kvtier_engine_info* info, kvtier_error* err);
int kvtier_client_unregister(kvtier_client* client, const char* engine_id, kvtier_error* err);

/* ---- The cache ---- */

/* How many leading hashes are stored (*hit_pages) and, when `tiers` is given (count entries),
 * the tier of each hit (entries past the hits are KVTIER_TIER_UNSPECIFIED). pin_ttl_ms > 0 pins
 * the hits for that long. NOT_FOUND for an engine that is not registered. */
int kvtier_client_lookup(kvtier_client* client, const char* engine_id, const uint8_t* hashes,
                         size_t hash_len, size_t count, uint32_t pin_ttl_ms, uint32_t* hit_pages,
                         int* tiers, kvtier_error* err);

typedef struct kvtier_offload_options {
  int durable;  /* write through to the disk tier */
  int priority; /* KVTIER_PRIORITY_* */
  int ack;      /* KVTIER_ACK_* */
} kvtier_offload_options;

/* Stores page page_indices[i] (its slot in every pool) under hash i. `options` may be NULL.
 * *stored_pages: how many were stored; codes (optional, count entries): each item's
 * KVTIER_ITEM_* code (e.g. INVALID_ARGUMENT for a page index past the pool). The status is
 * non-zero only when the call as a whole failed. Sends no token ids: kvtier_v2.h's
 * kvtier_client_offload_tokens sends each page's tokens, for kv_events (docs/KV_EVENTS.md). */
int kvtier_client_offload(kvtier_client* client, const char* engine_id, const uint8_t* hashes,
                          size_t hash_len, const uint32_t* page_indices, size_t count,
                          const kvtier_offload_options* options, uint32_t* stored_pages, int* codes,
                          kvtier_error* err);
/* Writes block i into page page_indices[i]. *onboarded_pages: the leading OK items (the usable
 * prefix); codes and tiers (optional, count entries): each item's code and the tier it was read
 * from. continue_after_miss == 0: the first failing item ends the onboard (later ones SKIPPED). */
int kvtier_client_onboard(kvtier_client* client, const char* engine_id, const uint8_t* hashes,
                          size_t hash_len, const uint32_t* page_indices, size_t count,
                          int continue_after_miss, uint32_t* onboarded_pages, int* codes,
                          int* tiers, kvtier_error* err);

/* Pins (ttl_ms 0: the daemon's default) or unpins blocks; codes optional, count entries. */
int kvtier_client_pin(kvtier_client* client, const char* engine_id, const uint8_t* hashes,
                      size_t hash_len, size_t count, uint32_t ttl_ms, int* codes,
                      kvtier_error* err);
int kvtier_client_unpin(kvtier_client* client, const char* engine_id, const uint8_t* hashes,
                        size_t hash_len, size_t count, int* codes, kvtier_error* err);

/* ---- Tool calls ---- */

typedef struct kvtier_park_options {
  int append;               /* add pages to what the request already parked */
  uint64_t num_tokens;      /* returned by resume */
  const uint8_t* user_data; /* returned by resume; at most 4096 bytes by default */
  size_t user_data_len;
  uint32_t ttl_ms; /* 0: 10 min */
  int priority;    /* KVTIER_PRIORITY_*; default high */
  int ack;         /* KVTIER_ACK_* */
} kvtier_park_options;

typedef struct kvtier_park_result {
  uint32_t parked_pages;
  uint64_t cold_bytes;
  int64_t expires_at_unix_ms;
  int tier;
} kvtier_park_result;

/* Parks a request's pages under `request_id`; options and result may be NULL. */
int kvtier_client_park(kvtier_client* client, const char* engine_id, const char* request_id,
                       const uint32_t* page_indices, size_t count,
                       const kvtier_park_options* options, kvtier_park_result* result,
                       kvtier_error* err);

typedef struct kvtier_resume_result {
  uint32_t resumed_pages;
  uint32_t parked_pages;
  uint64_t num_tokens;
  size_t user_data_len; /* the full length; min(capacity, this) bytes were copied */
  int released;         /* the parked pages were released (keep_parked == 0) */
} kvtier_resume_result;

/* Writes parked pages first_page.. into page_indices; user_data (optional, `capacity` bytes) gets
 * what park stored. keep_parked == 0 releases the parked request. result may be NULL. */
int kvtier_client_resume(kvtier_client* client, const char* engine_id, const char* request_id,
                         const uint32_t* page_indices, size_t count, uint32_t first_page,
                         int keep_parked, uint8_t* user_data, size_t capacity,
                         kvtier_resume_result* result, kvtier_error* err);
/* Releases parked requests; codes (optional, count entries): KVTIER_ITEM_OK or NOT_FOUND. */
int kvtier_client_release(kvtier_client* client, const char* engine_id,
                          const char* const* request_ids, size_t count, int* codes,
                          uint64_t* freed_bytes, kvtier_error* err);

/* ---- Statistics ---- */

typedef struct kvtier_tier_stats {
  int tier;
  uint64_t capacity_bytes, used_bytes, blocks, pinned_blocks, hits, misses, bytes_in, bytes_out,
      evicted_blocks, checksum_failures;
} kvtier_tier_stats;

typedef struct kvtier_stats {
  uint64_t incarnation_id;
  uint64_t uptime_ms;
  uint64_t hot_bytes_offloaded, cold_bytes_offloaded, hot_bytes_onboarded, cold_bytes_onboarded;
  uint64_t dropped_offloads;
  uint64_t parked_requests;
  uint32_t registered_engines;
  int draining;
  uint32_t num_tiers; /* entries of tiers[] in use, fastest first */
  kvtier_tier_stats tiers[KVTIER_MAX_TIERS];
} kvtier_stats;

int kvtier_client_stats(kvtier_client* client, kvtier_stats* stats, kvtier_error* err);

/* ---- Events ---- */

/* Event kinds (kvtier::Event::Kind). */
enum {
  KVTIER_EVENT_BLOCK_STORED = 1,
  KVTIER_EVENT_BLOCK_REMOVED = 2,
  KVTIER_EVENT_BLOCK_MOVED = 3,
  KVTIER_EVENT_NAMESPACE_CLEARED = 4,
  KVTIER_EVENT_EVENTS_LOST = 5,
  KVTIER_EVENT_SNAPSHOT_COMPLETE = 6
};

/* One event of the daemon's stream. Pointers are valid during the callback only. */
typedef struct kvtier_event {
  int kind; /* KVTIER_EVENT_* */
  uint64_t sequence;
  uint64_t namespace_id;
  /* Stored, removed, moved: num_hashes hashes of KVTIER_BLOCK_HASH_BYTES end to end (a hash
   * given with fewer bytes comes back zero-padded, as the daemon keys it). */
  const uint8_t* block_hashes;
  size_t num_hashes;
  int tier;       /* stored, removed, cleared; moved: the destination (KVTIER_TIER_*) */
  int from_tier;  /* moved: the source */
  uint64_t count; /* cleared: removed blocks; lost: lost events; snapshot complete: blocks */
} kvtier_event;

typedef struct kvtier_watch kvtier_watch; /* a running event stream */
typedef void (*kvtier_event_fn)(const kvtier_event* event, void* user_data);
/* How the stream ended: KVTIER_CANCELLED after kvtier_watch_destroy, else the daemon's status
 * (e.g. UNAVAILABLE when it stopped). */
typedef void (*kvtier_watch_done_fn)(const kvtier_error* status, void* user_data);

/* Follows the daemon's events on a thread of the watch: on_event for each event in order, then
 * on_done (may be NULL) once. snapshot != 0: first a BLOCK_STORED event for every stored block,
 * then SNAPSHOT_COMPLETE, then new events; namespace_id 0: every namespace the caller may see.
 * The callbacks must not block for long and must not destroy their own watch; user_data is passed
 * through. Free with kvtier_watch_destroy (before closing the client). */
int kvtier_client_watch_events(kvtier_client* client, int snapshot, uint64_t namespace_id,
                               kvtier_event_fn on_event, kvtier_watch_done_fn on_done,
                               void* user_data, kvtier_watch** watch, kvtier_error* err);
/* Cancels the stream and waits for its thread (on_done has run when this returns), then frees
 * the watch. NULL is a no-op. */
void kvtier_watch_destroy(kvtier_watch* watch);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KVTIER_CLIENT_INCLUDE_KVTIER_KVTIER_H_ */
