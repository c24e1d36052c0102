// The engine side of the compression framework (the seed blog's five stages). One configuration
// block selects a method and its settings, the same YAML / JSON in C++, Python and the example
// engine:
//
//   algorithm: triattention                algorithm: quantization_for_cold_page
//   budget: 2048                           quant: nvfp4            # or nvfp4x2, raw
//   beta: 128                              rope_precision: quantized   # or lossless
//   eviction_mode: union                   daemon_socket: /run/kvtier/kvtier.sock
//   calibration_path: calib.pt
//   model_config_path: config.json
//
// A factory builds the method for an engine (rejecting combinations that cannot work, with a
// message naming both sides), and the engine calls the CompressionManager hooks at its stages and
// nothing else. Methods are registered by name, so a new one plugs in without touching the engine
// or the library. A CompressionManager is driven by one thread (the engine's scheduler loop).
#ifndef KVTIER_CLIENT_INCLUDE_KVTIER_COMPRESSION_H_
#define KVTIER_CLIENT_INCLUDE_KVTIER_COMPRESSION_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kvtier/layout.h"
#include "kvtier/pools.h"

namespace kvtier {

// One method's settings. Keys a method does not know are kept in `options` (every key is, as
// text), so custom methods read their own settings from there.
struct CompressionConfig {
  std::string algorithm;  // "triattention", "quantization_for_cold_page", or a registered name
  // triattention
  int64_t budget = 2048;
  int64_t beta = 128;
  std::string eviction_mode = "union";  // union | per_head | per_layer_perhead
  std::string calibration_path;         // required for triattention
  std::string model_config_path;        // the model's config.json (RoPE); required
  // quantization_for_cold_page
  std::string quant = "nvfp4";               // nvfp4 | nvfp4x2 | raw
  std::string rope_precision = "quantized";  // quantized | lossless (RoPE range kept exact)
  std::string daemon_socket;                 // "" = ClientOptions' default
  bool durable = false;                      // offloads written through to disk
  // Every key of the block as text ("budget" -> "2048"), for methods of their own. The built-ins
  // also read from here: triattention normalize_scores (true | false, default true) and
  // max_append_tokens (the most tokens one step may confirm, e.g. a tool result appended after
  // a resume; sizes the GPU round's workspace; default 4096);
  // quantization_for_cold_page tenant, partition, engine_name, token and connect_timeout_ms.
  std::map<std::string, std::string> options;
};

// Parses one configuration block, YAML or JSON (a mapping of scalars; an optional top-level key
// "compression_config" is unwrapped). InvalidArgument names the key and the value: an unknown
// algorithm is left to the factory, but a number that is not a number, or budget / beta < 1, is
// rejected here.
absl::StatusOr<CompressionConfig> ParseCompressionConfig(std::string_view text);
// Reads (at most 16 MiB) and parses a file. NotFound when it does not exist; InvalidArgument for
// everything else, naming the path: a file that cannot be read, one that is not a regular file (a
// FIFO, socket, device or directory is refused without being read, so the call never waits on
// it), and the parser's errors. Blocks on the file system.
absl::StatusOr<CompressionConfig> LoadCompressionConfig(const std::string& path);

// What a method sees of the engine, fixed for the engine's lifetime.
struct EngineContext {
  std::string model;  // the model's name (the cache namespace)
  std::optional<PageLayout> layout;
  std::vector<void*> pool_bases;  // one per layout pool, slots x slot_bytes each
  uint32_t slots = 0;
  bool device_memory = false;  // pools in GPU memory on `device` (else host memory)
  int device = 0;
  // How kvtierd reaches the pools (shared-memory files or CUDA IPC), for cold-page offload.
  std::vector<PoolRegistration> pool_registrations;
};

// One request as the hooks see it. The engine owns it, keeps it current between hooks, and reads
// the outputs the hooks set.
struct RequestState {
  uint64_t id = 0;
  std::string name;              // the engine's request id (Park / Resume key)
  std::vector<uint32_t> tokens;  // every token whose KV is (or will be) in the pages, prompt first
  int64_t prompt_len = 0;
  std::vector<int32_t> block_table;  // the request's pages, in KV order
  int64_t num_tokens = 0;            // KV tokens physically in the pages
  int64_t new_tokens = 1;            // tokens the last generation step confirmed
  int64_t protected_tail = 0;        // last tokens no method may evict
  void* stream = nullptr;            // the engine's CUDA stream for device pools

  // Outputs.
  int64_t cached_tokens = 0;         // OnRequestStart: leading prompt tokens restored
  std::vector<int32_t> freed_pages;  // OnGenerationStepEnd: pages the engine may free now
  bool compacted = false;            // the KV is no longer the plain KV of `tokens` past prompt_len
};

// The hooks, each a no-op by default. Stages: (1) prefill chunk end, (2) context end, (3)
// generation step begin and end, (4) tool call pause and resume, (5) request finish; plus request
// start, where a cache method restores a prefix. A hook's error is the request's: the engine may
// carry on without the method's help for that request.
class CompressionManager {
 public:
  virtual ~CompressionManager() = default;
  virtual std::string_view name() const = 0;

  // Before prefill; request.block_table covers the whole prompt. Sets cached_tokens.
  virtual absl::Status OnRequestStart(RequestState& request);
  virtual absl::Status OnPrefillChunkEnd(RequestState& request, int64_t chunk_end);
  virtual absl::Status OnContextEnd(RequestState& request);
  virtual absl::Status OnGenerationStepBegin(std::span<RequestState* const> requests);
  // After the step's tokens are in the cache; may shrink num_tokens and fill freed_pages.
  virtual absl::Status OnGenerationStepEnd(std::span<RequestState* const> requests);
  // The request pauses for a tool call: afterwards the engine may free its pages.
  virtual absl::Status OnToolCallPause(RequestState& request);
  // The request continues; block_table holds fresh pages for num_tokens tokens. A method that
  // restores the KV sets cached_tokens to num_tokens; otherwise the engine recomputes it.
  virtual absl::Status OnToolCallResume(RequestState& request);
  virtual absl::Status OnRequestFinish(RequestState& request);

  // The method's counters since it was built, by name. Default: none. "triattention": rounds,
  // evicted_tokens, freed_pages, requests (tracked now), each prefixed "triattention_".
  // "quantization_for_cold_page": lookups, lookup_hit_pages, onboarded_pages, onboarded_bytes,
  // offloaded_pages, offload_hot_bytes, offload_cold_bytes, parked_pages, parked_cold_bytes,
  // resumed_pages, released_requests, each prefixed "cold_page_". Thread-safe for the built-ins:
  // an engine may read them from another thread (a metrics endpoint).
  virtual std::map<std::string, uint64_t> Counters() const;
};

// Builds a method for an engine. Errors name the setting and the reason.
using CompressionMethodFactory = std::function<absl::StatusOr<std::unique_ptr<CompressionManager>>(
    const CompressionConfig& config, const EngineContext& engine)>;

// Adds a method under `algorithm`. AlreadyExists when the name is taken (the built-ins
// "triattention" and "quantization_for_cold_page" are always there). Thread-safe.
absl::Status RegisterCompressionMethod(std::string algorithm, CompressionMethodFactory factory);

// The registered names, sorted.
std::vector<std::string> CompressionMethodNames();

// Builds the method config.algorithm names. InvalidArgument for an unknown algorithm (listing the
// known ones) and for combinations that cannot work, e.g. TriAttention on an MLA layout or with a
// calibration that does not match the model; the factory's own errors otherwise.
absl::StatusOr<std::unique_ptr<CompressionManager>> CreateCompressionMethod(
    const CompressionConfig& config, const EngineContext& engine);

// Several methods called in order at every hook (e.g. TriAttention and cold-page offload). The
// first error stops the hook and is returned, except at OnRequestFinish, which every method gets
// (so that each one drops its state for the request) before the first error is returned.
// Counters() adds up the methods' counters by name.
std::unique_ptr<CompressionManager> ChainCompressionMethods(
    std::vector<std::unique_ptr<CompressionManager>> methods);

}  // namespace kvtier

#endif  // KVTIER_CLIENT_INCLUDE_KVTIER_COMPRESSION_H_
