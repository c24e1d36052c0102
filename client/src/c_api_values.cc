// The value parts of the C ABI's second part (kvtier/kvtier_v2.h): element types, layout builders
// and their buffers, block-hash extras, compression configurations, and GPU pools (CUDA IPC
// exports and library-allocated device pools). Every body runs under Guard() (c_api_internal.h).
#include <cstdint>
#include <cstring>
#include <iterator>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "client/src/c_api_internal.h"
#include "kvtier/block_hasher.h"
#include "kvtier/compression.h"
#include "kvtier/kvtier_v2.h"
#include "kvtier/layout.h"
#include "kvtier/pools.h"
#include "kvtier/types.h"

struct kvtier_device_pool {
  std::unique_ptr<kvtier::DevicePool> impl;
};
struct kvtier_compression_config {
  kvtier::CompressionConfig impl;
};

namespace kvtier::c_api {
namespace {

void WriteCudaPool(const PoolRegistration::CudaIpc& in, kvtier_cuda_ipc_pool& out) {
  out = kvtier_cuda_ipc_pool{};
  std::memcpy(out.handle, in.handle.data(), std::min(in.handle.size(), sizeof(out.handle)));
  std::memcpy(out.device_uuid, in.device_uuid.data(),
              std::min(in.device_uuid.size(), sizeof(out.device_uuid)));
  out.device_ordinal = in.device_ordinal;
  out.base_offset_bytes = in.base_offset_bytes;
  out.size_bytes = in.size_bytes;
}

// A CompressionConfig field by its name, as text; NotFound for another name.
absl::StatusOr<std::string> ConfigField(const CompressionConfig& c, absl::string_view field) {
  if (field == "algorithm") return c.algorithm;
  if (field == "budget") return absl::StrCat(c.budget);
  if (field == "beta") return absl::StrCat(c.beta);
  if (field == "eviction_mode") return c.eviction_mode;
  if (field == "calibration_path") return c.calibration_path;
  if (field == "model_config_path") return c.model_config_path;
  if (field == "quant") return c.quant;
  if (field == "rope_precision") return c.rope_precision;
  if (field == "daemon_socket") return c.daemon_socket;
  if (field == "durable") return std::string(c.durable ? "true" : "false");
  return absl::NotFoundError(absl::StrCat(
      "no compression config field '", field,
      "' (algorithm, budget, beta, eviction_mode, calibration_path, model_config_path, quant, "
      "rope_precision, daemon_socket, durable)"));
}

}  // namespace
}  // namespace kvtier::c_api

using kvtier::c_api::Guard;
using kvtier::c_api::Missing;
using kvtier::c_api::Str;

extern "C" {

int kvtier_dtype_from_name(const char* name, int* dtype, kvtier_error* err) {
  return Guard(err, [&]() -> absl::Status {
    if (name == nullptr) return Missing("name");
    if (dtype == nullptr) return Missing("dtype");
    for (kvtier::DType d : {kvtier::DType::kBf16, kvtier::DType::kFp16, kvtier::DType::kFp8E4M3,
                            kvtier::DType::kFp32, kvtier::DType::kBytes}) {
      if (kvtier::DTypeName(d) == name) {
        *dtype = static_cast<int>(d);
        return absl::OkStatus();
      }
    }
    return absl::InvalidArgumentError(
        absl::StrCat("unknown dtype '", name, "' (expected bf16, fp16, fp8_e4m3, fp32 or bytes)"));
  });
}

int kvtier_layout_mla(uint32_t num_layers, uint32_t tokens_per_page, uint32_t kv_lora_rank,
                      uint32_t rope_dim, int dtype, uint32_t indexer_bytes_per_token,
                      kvtier_layout** layout, kvtier_error* err) {
  return Guard(err, [&]() -> absl::Status {
    if (layout == nullptr) return Missing("layout");
    *layout = nullptr;
    kvtier::MlaLayoutOptions o;
    o.num_layers = num_layers;
    o.tokens_per_page = tokens_per_page;
    o.kv_lora_rank = kv_lora_rank;
    o.rope_dim = rope_dim;
    o.dtype = static_cast<kvtier::DType>(dtype);
    o.indexer_bytes_per_token = indexer_bytes_per_token;
    return kvtier::c_api::Emplace(layout, kvtier::PageLayout::Mla(o));
  });
}

int kvtier_layout_hybrid(uint32_t num_layers, const uint32_t* attention_layers,
                         size_t num_attention_layers, uint32_t kv_heads, uint32_t head_dim,
                         uint32_t tokens_per_page, uint32_t state_bytes, int dtype,
                         uint32_t rope_start, uint32_t rope_len, kvtier_layout** layout,
                         kvtier_error* err) {
  return Guard(err, [&]() -> absl::Status {
    if (layout == nullptr) return Missing("layout");
    *layout = nullptr;
    if (num_attention_layers > 0 && attention_layers == nullptr) {
      return Missing("attention_layers");
    }
    kvtier::HybridLayoutOptions o;
    o.num_layers = num_layers;
    o.attention_layers = kvtier::c_api::Indices(attention_layers, num_attention_layers);
    o.kv_heads = kv_heads;
    o.head_dim = head_dim;
    o.tokens_per_page = tokens_per_page;
    o.state_bytes = state_bytes;
    o.dtype = static_cast<kvtier::DType>(dtype);
    o.rope_start = rope_start;
    o.rope_len = rope_len;
    return kvtier::c_api::Emplace(layout, kvtier::PageLayout::Hybrid(o));
  });
}

int kvtier_layout_preset_names(char* names, size_t capacity, size_t* required, kvtier_error* err) {
  return Guard(err, [&]() -> absl::Status {
    return kvtier::c_api::WriteString(absl::StrJoin(kvtier::PageLayout::PresetNames(), "\n"), names,
                                      capacity, required, "preset names");
  });
}

int kvtier_layout_summary(const kvtier_layout* layout, uint64_t* fingerprint, int* has_mla,
                          size_t* num_buffers, kvtier_error* err) {
  return Guard(err, [&]() -> absl::Status {
    if (layout == nullptr) return Missing("layout");
    if (fingerprint != nullptr) *fingerprint = layout->impl.fingerprint();
    if (has_mla != nullptr) *has_mla = layout->impl.has_mla() ? 1 : 0;
    if (num_buffers != nullptr) *num_buffers = layout->impl.buffers().size();
    return absl::OkStatus();
  });
}

int kvtier_layout_buffer(const kvtier_layout* layout, size_t index, kvtier_buffer_info* buffer,
                         kvtier_error* err) {
  return Guard(err, [&]() -> absl::Status {
    if (layout == nullptr) return Missing("layout");
    if (buffer == nullptr) return Missing("buffer");
    const std::vector<kvtier::BufferInfo> buffers = layout->impl.buffers();
    if (index >= buffers.size()) {
      return absl::OutOfRangeError(
          absl::StrCat("buffer index ", index, " out of range (", buffers.size(), " buffers)"));
    }
    const kvtier::BufferInfo& b = buffers[index];
    *buffer = kvtier_buffer_info{};
    kvtier::c_api::CopyFixed(b.name, buffer->name);
    kvtier::c_api::CopyFixed(b.role, buffer->role);
    buffer->layer = b.layer;
    buffer->dtype = static_cast<int>(b.dtype);
    buffer->heads = b.heads;
    buffer->tokens = b.tokens;
    buffer->head_dim = b.head_dim;
    buffer->row_stride = b.row_stride;
    buffer->pool = b.pool;
    buffer->offset_bytes = b.offset_bytes;
    buffer->data_bytes = b.data_bytes;
    return absl::OkStatus();
  });
}

int kvtier_hasher_hash_v2(const kvtier_hasher* hasher, const uint8_t* parent, size_t parent_len,
                          const uint32_t* tokens, size_t num_tokens,
                          const uint8_t* const* extra_keys, const size_t* extra_key_lens,
                          size_t num_extra_keys, uint8_t* hashes, size_t max_hashes, size_t* count,
                          kvtier_error* err) {
  return Guard(err, [&]() -> absl::Status {
    if (hasher == nullptr) return Missing("hasher");
    if (count == nullptr) return Missing("count");
    *count = 0;
    if (num_tokens > 0 && tokens == nullptr) return Missing("tokens");
    if (num_extra_keys > 0 && (extra_keys == nullptr || extra_key_lens == nullptr)) {
      return Missing("extra_keys");
    }
    std::vector<std::string> keys;
    keys.reserve(num_extra_keys);
    for (size_t i = 0; i < num_extra_keys; ++i) {
      if (extra_keys[i] == nullptr && extra_key_lens[i] > 0) {
        return Missing(absl::StrCat("extra_keys[", i, "]"));
      }
      keys.emplace_back(reinterpret_cast<const char*>(extra_keys[i]), extra_key_lens[i]);
    }
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
            ? hasher->impl.Hash(span, keys)
            : hasher->impl.HashAfter(
                  std::string_view(reinterpret_cast<const char*>(parent), parent_len), span, keys);
    if (!out.ok()) return out.status();
    for (size_t i = 0; i < out->size(); ++i) {
      std::memcpy(hashes + i * kvtier::kBlockHashBytes, (*out)[i].data(), kvtier::kBlockHashBytes);
    }
    *count = out->size();
    return absl::OkStatus();
  });
}

int kvtier_hash_next(const uint8_t* parent, size_t parent_len, const uint32_t* tokens,
                     size_t num_tokens, const uint8_t* extra_key, size_t extra_key_len,
                     uint8_t* hash, kvtier_error* err) {
  return Guard(err, [&]() -> absl::Status {
    if (parent == nullptr && parent_len > 0) return Missing("parent");
    if (tokens == nullptr && num_tokens > 0) return Missing("tokens");
    if (extra_key == nullptr && extra_key_len > 0) return Missing("extra_key");
    if (hash == nullptr) return Missing("hash");
    const std::string h = kvtier::BlockHasher::Next(
        std::string_view(reinterpret_cast<const char*>(parent), parent_len),
        std::span<const uint32_t>(tokens, num_tokens),
        std::string_view(reinterpret_cast<const char*>(extra_key), extra_key_len));
    std::memset(hash, 0, kvtier::kBlockHashBytes);
    std::memcpy(hash, h.data(), std::min(h.size(), kvtier::kBlockHashBytes));
    return absl::OkStatus();
  });
}

int kvtier_compression_config_defaults(kvtier_compression_config** config, kvtier_error* err) {
  return Guard(err, [&]() -> absl::Status {
    if (config == nullptr) return Missing("config");
    *config = new kvtier_compression_config{};
    return absl::OkStatus();
  });
}

int kvtier_compression_config_parse(const char* text, kvtier_compression_config** config,
                                    kvtier_error* err) {
  return Guard(err, [&]() -> absl::Status {
    if (config == nullptr) return Missing("config");
    *config = nullptr;
    if (text == nullptr) return Missing("text");
    return kvtier::c_api::Emplace(config, kvtier::ParseCompressionConfig(text));
  });
}

int kvtier_compression_config_load(const char* path, kvtier_compression_config** config,
                                   kvtier_error* err) {
  return Guard(err, [&]() -> absl::Status {
    if (config == nullptr) return Missing("config");
    *config = nullptr;
    if (path == nullptr) return Missing("path");
    return kvtier::c_api::Emplace(config, kvtier::LoadCompressionConfig(path));
  });
}

void kvtier_compression_config_destroy(kvtier_compression_config* config) { delete config; }

int kvtier_compression_config_field(const kvtier_compression_config* config, const char* field,
                                    char* value, size_t capacity, size_t* required,
                                    kvtier_error* err) {
  return Guard(err, [&]() -> absl::Status {
    if (config == nullptr) return Missing("config");
    if (field == nullptr) return Missing("field");
    absl::StatusOr<std::string> text = kvtier::c_api::ConfigField(config->impl, field);
    if (!text.ok()) return text.status();
    return kvtier::c_api::WriteString(*text, value, capacity, required, field);
  });
}

size_t kvtier_compression_config_num_options(const kvtier_compression_config* config) {
  return config == nullptr ? 0 : config->impl.options.size();
}

int kvtier_compression_config_option(const kvtier_compression_config* config, size_t index,
                                     char* key, size_t key_capacity, size_t* key_required,
                                     char* value, size_t value_capacity, size_t* value_required,
                                     kvtier_error* err) {
  return Guard(err, [&]() -> absl::Status {
    if (config == nullptr) return Missing("config");
    const std::map<std::string, std::string>& options = config->impl.options;
    if (index >= options.size()) {
      return absl::OutOfRangeError(
          absl::StrCat("option index ", index, " out of range (", options.size(), " options)"));
    }
    const auto it = std::next(options.begin(), static_cast<std::ptrdiff_t>(index));
    absl::Status k =
        kvtier::c_api::WriteString(it->first, key, key_capacity, key_required, "option key");
    absl::Status v = kvtier::c_api::WriteString(it->second, value, value_capacity, value_required,
                                                "option value");
    return k.ok() ? v : k;
  });
}

int kvtier_compression_method_names(char* names, size_t capacity, size_t* required,
                                    kvtier_error* err) {
  return Guard(err, [&]() -> absl::Status {
    return kvtier::c_api::WriteString(absl::StrJoin(kvtier::CompressionMethodNames(), "\n"), names,
                                      capacity, required, "compression method names");
  });
}

int kvtier_cuda_available(void) { return kvtier::CudaAvailable() ? 1 : 0; }

int kvtier_cuda_export_pool(const char* name, uint32_t slots, int device, const void* pointer,
                            uint64_t offset_bytes, uint64_t size_bytes, kvtier_cuda_ipc_pool* pool,
                            kvtier_error* err) {
  return Guard(err, [&]() -> absl::Status {
    if (name == nullptr) return Missing("name");
    if (pool == nullptr) return Missing("pool");
    absl::StatusOr<kvtier::PoolRegistration> r = kvtier::ExportCudaPool(
        name, slots, device, const_cast<void*>(pointer), offset_bytes, size_bytes);
    if (!r.ok()) return r.status();
    kvtier::c_api::WriteCudaPool(*r->cuda_ipc, *pool);
    return absl::OkStatus();
  });
}

int kvtier_device_pool_create(int device, const char* name, uint32_t slots, uint64_t slot_bytes,
                              kvtier_device_pool** pool, kvtier_error* err) {
  return Guard(err, [&]() -> absl::Status {
    if (pool == nullptr) return Missing("pool");
    *pool = nullptr;
    if (name == nullptr) return Missing("name");
    return kvtier::c_api::Emplace(pool,
                                  kvtier::DevicePool::Create(device, name, slots, slot_bytes));
  });
}

void kvtier_device_pool_destroy(kvtier_device_pool* pool) { delete pool; }

int kvtier_device_pool_info(const kvtier_device_pool* pool, void** data, uint64_t* size_bytes,
                            kvtier_cuda_ipc_pool* registration, kvtier_error* err) {
  return Guard(err, [&]() -> absl::Status {
    if (pool == nullptr) return Missing("pool");
    if (data != nullptr) *data = pool->impl->data();
    if (size_bytes != nullptr) *size_bytes = pool->impl->size_bytes();
    if (registration != nullptr) {
      kvtier::c_api::WriteCudaPool(*pool->impl->Registration().cuda_ipc, *registration);
    }
    return absl::OkStatus();
  });
}

}  // extern "C"
