/* The TriAttention Evictor in C99 (triattention/evictor.h; docs/TRIATTENTION.md): an engine's
 * paged KV cache described by raw addresses, a calibration, and the per-step eviction loop that
 * compacts the cache in place and names the pages to free. kvtier.h's conventions hold. An
 * evictor is thread-compatible: one thread (the engine's step loop) drives it. It BORROWS the
 * cache memory its view names: the caller keeps those pools alive and unmoved while it is used.
 */
#ifndef KVTIER_CLIENT_INCLUDE_KVTIER_KVTIER_EVICTOR_H_
#define KVTIER_CLIENT_INCLUDE_KVTIER_KVTIER_EVICTOR_H_

#include "kvtier/kvtier.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Eviction modes, compaction orders, page layouts, pool kinds and memories (the values of the
 * triattention enums). */
enum {
  KVTIER_EVICTION_UNION = 1,
  KVTIER_EVICTION_PER_HEAD = 2,
  KVTIER_EVICTION_PER_LAYER_PER_HEAD = 3
};
enum { KVTIER_COMPACTION_FILL_HOLES = 1, KVTIER_COMPACTION_PRESERVE_ORDER = 2 };
enum { KVTIER_KV_HND = 1, KVTIER_KV_NHD = 2 };
enum { KVTIER_KV_SEPARATE = 1, KVTIER_KV_COMBINED = 2 };
enum { KVTIER_KV_HOST = 1, KVTIER_KV_DEVICE = 2 };

typedef struct kvtier_evictor_config {
  int64_t budget; /* decode tokens kept; the prompt comes on top */
  int64_t beta;   /* round cadence in confirmed tokens */
  int mode;       /* KVTIER_EVICTION_* */
  int normalize;  /* z-normalise each (layer, query head) row before aggregating */
  int order;      /* KVTIER_COMPACTION_* */
  int num_offsets;
  int device;                /* device views: the GPU */
  int max_batch;             /* device views: due requests per launch */
  int64_t max_decode_tokens; /* device views: 0 means budget + 2 * beta + 64 */
} kvtier_evictor_config;

/* The defaults of triattention::EvictorConfig. */
void kvtier_evictor_config_defaults(kvtier_evictor_config* config);

/* An engine's paged KV cache (triattention::KvCacheView): per attention layer a K pool address
 * and a V pool address (v_pools may be NULL, or hold 0s, for combined pools). */
typedef struct kvtier_kv_cache_view {
  void* const* k_pools;
  void* const* v_pools;
  size_t num_layers;
  int64_t num_pages;
  int page_tokens;
  int num_kv_heads;
  int head_dim;
  int dtype;                  /* KVTIER_DTYPE_* */
  int layout;                 /* KVTIER_KV_HND / NHD */
  int pool_kind;              /* KVTIER_KV_SEPARATE / COMBINED */
  int memory;                 /* KVTIER_KV_HOST / DEVICE */
  uint64_t page_stride_bytes; /* 0: the page itself */
} kvtier_kv_cache_view;

/* Checks a view's geometry; INVALID_ARGUMENT naming the field and its value. */
int kvtier_kv_cache_view_validate(const kvtier_kv_cache_view* view, kvtier_error* err);

/* A calibration in memory: q_mean_real, q_mean_imag, q_abs_mean float32 [layers][heads][bands]
 * (row-major), omega and freq_scale_sq float32 [bands]; bands = omega_len, head_dim 2 * bands.
 * Every array has its own length, checked against the shape. */
typedef struct kvtier_calibration_arrays {
  int layers;
  int heads; /* query heads */
  const float* q_mean_real;
  size_t q_mean_real_len;
  const float* q_mean_imag;
  size_t q_mean_imag_len;
  const float* q_abs_mean;
  size_t q_abs_mean_len;
  const float* omega;
  size_t omega_len;
  const float* freq_scale_sq;
  size_t freq_scale_sq_len;
} kvtier_calibration_arrays;

typedef struct kvtier_evictor kvtier_evictor;

/* An evictor for `view` (copied; the pools it names are borrowed) from an in-memory calibration,
 * or from a calibration file and the model's config.json (or model directory; blocks on file
 * I/O). Errors as triattention::Evictor::Create / CreateFromFiles: INVALID_ARGUMENT naming the
 * field for a bad config, view or calibration shape, errors naming the path for the files,
 * UNIMPLEMENTED for a device view without CUDA. Free with kvtier_evictor_destroy. */
int kvtier_evictor_create(const kvtier_evictor_config* config,
                          const kvtier_calibration_arrays* calibration,
                          const kvtier_kv_cache_view* view, kvtier_evictor** evictor,
                          kvtier_error* err);
int kvtier_evictor_create_from_files(const kvtier_evictor_config* config,
                                     const char* calibration_path, const char* model_config_path,
                                     const kvtier_kv_cache_view* view, kvtier_evictor** evictor,
                                     kvtier_error* err);
void kvtier_evictor_destroy(kvtier_evictor* evictor);

/* Starts tracking a request after its prefill (ALREADY_EXISTS for a tracked id, INVALID_ARGUMENT
 * for prompt_len < 0), or stops (NOT_FOUND for an unknown id). */
int kvtier_evictor_add_request(kvtier_evictor* evictor, uint64_t id, int64_t prompt_len,
                               kvtier_error* err);
int kvtier_evictor_remove_request(kvtier_evictor* evictor, uint64_t id, kvtier_error* err);

/* One request at the end of a generation step; the block table is borrowed for the call. */
typedef struct kvtier_step_request {
  uint64_t id;
  int64_t new_tokens; /* tokens this step confirmed */
  const int32_t* block_table;
  size_t block_table_len;
  int64_t length;         /* physical tokens in the cache, tail included */
  int64_t prompt_len;     /* pinned prompt tokens */
  int64_t protected_tail; /* last tokens excluded from scoring */
} kvtier_step_request;

/* One request's outcome: freed_count pages to free, at freed_pages[freed_offset..]. */
typedef struct kvtier_step_outcome {
  uint64_t id;
  int evicted; /* a round ran for this request this step */
  int64_t new_length;
  int64_t evicted_tokens;
  size_t freed_offset;
  size_t freed_count;
} kvtier_step_outcome;

/* Ends a generation step (triattention::Evictor::OnGenerationStepEnd): one outcome per request
 * (count entries, in input order); the freed pages of all requests go end to end to freed_pages,
 * which must hold the sum of the requests' block_table_len (INVALID_ARGUMENT otherwise, checked
 * first). `stream` is a cudaStream_t for a device view (NULL: the legacy default stream). Errors
 * change no state: NOT_FOUND for an unknown id, INVALID_ARGUMENT naming the request and value. */
int kvtier_evictor_step_end(kvtier_evictor* evictor, const kvtier_step_request* requests,
                            size_t count, void* stream, kvtier_step_outcome* outcomes,
                            int32_t* freed_pages, size_t freed_capacity, kvtier_error* err);

typedef struct kvtier_round_state {
  int64_t prompt_len, confirmed_length, generation_steps, last_boundary, evicted_tokens;
  int64_t logical_length; /* confirmed_length + evicted_tokens */
} kvtier_round_state;

/* A tracked request's schedule state; NOT_FOUND for an unknown id. */
int kvtier_evictor_state(const kvtier_evictor* evictor, uint64_t id, kvtier_round_state* state,
                         kvtier_error* err);
/* The evictor's config, whether it runs on the GPU, and how many requests it tracks;
 * out-parameters may be NULL. */
int kvtier_evictor_info(const kvtier_evictor* evictor, kvtier_evictor_config* config, int* on_gpu,
                        int64_t* num_requests, kvtier_error* err);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KVTIER_CLIENT_INCLUDE_KVTIER_KVTIER_EVICTOR_H_ */
