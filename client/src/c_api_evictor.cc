// The TriAttention Evictor's C ABI (kvtier/kvtier_evictor.h) over triattention/evictor.h. The C
// structs are converted to the C++ values at each call; the evictor handle owns the C++ Evictor.
// Every body runs under Guard() (c_api_internal.h). kvtier_evictor_step_end checks the freed-page
// buffer before the step, so that a step that ran is always reported in full.
#include "kvtier/kvtier_evictor.h"

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "client/src/c_api_internal.h"
#include "codec/dtype.h"
#include "triattention/calibration.h"
#include "triattention/compaction.h"
#include "triattention/evictor.h"
#include "triattention/kv_view.h"
#include "triattention/schedule.h"
#include "triattention/scoring.h"

struct kvtier_evictor {
  std::unique_ptr<kvtier::triattention::Evictor> impl;
};

namespace kvtier::c_api {
namespace {

namespace ta = ::kvtier::triattention;

ta::EvictorConfig ToConfig(const kvtier_evictor_config& c) {
  ta::EvictorConfig out;
  out.budget = c.budget;
  out.beta = c.beta;
  out.mode = static_cast<ta::EvictionMode>(c.mode);
  out.normalize = c.normalize != 0;
  out.order = static_cast<ta::CompactionOrder>(c.order);
  out.num_offsets = c.num_offsets;
  out.device = c.device;
  out.max_batch = c.max_batch;
  out.max_decode_tokens = c.max_decode_tokens;
  return out;
}

void FromConfig(const ta::EvictorConfig& c, kvtier_evictor_config& out) {
  out.budget = c.budget;
  out.beta = c.beta;
  out.mode = static_cast<int>(c.mode);
  out.normalize = c.normalize ? 1 : 0;
  out.order = static_cast<int>(c.order);
  out.num_offsets = c.num_offsets;
  out.device = c.device;
  out.max_batch = c.max_batch;
  out.max_decode_tokens = c.max_decode_tokens;
}

// Enum values outside uint8_t would wrap into valid ones; they are kept invalid instead (0 is no
// value of any of the enums, so the C++ checks name the field).
template <typename Enum>
Enum EnumOf(int value) {
  return static_cast<Enum>(value >= 0 && value <= 255 ? value : 0);
}

absl::StatusOr<ta::KvCacheView> ToView(const kvtier_kv_cache_view* in) {
  if (in == nullptr) return Missing("view");
  if (in->num_layers > 0 && in->k_pools == nullptr) return Missing("view.k_pools");
  ta::KvCacheView v;
  v.layers.reserve(in->num_layers);
  for (size_t i = 0; i < in->num_layers; ++i) {
    v.layers.push_back(ta::KvLayerPools{.k = in->k_pools[i],
                                        .v = in->v_pools == nullptr ? nullptr : in->v_pools[i]});
  }
  v.num_pages = in->num_pages;
  v.page_tokens = in->page_tokens;
  v.num_kv_heads = in->num_kv_heads;
  v.head_dim = in->head_dim;
  v.dtype = EnumOf<codec::DType>(in->dtype);
  v.layout = EnumOf<ta::KvLayout>(in->layout);
  v.pool_kind = EnumOf<ta::KvPoolKind>(in->pool_kind);
  v.memory = EnumOf<ta::KvMemory>(in->memory);
  v.page_stride_bytes = in->page_stride_bytes;
  return v;
}

absl::StatusOr<std::vector<float>> FloatArray(const float* data, size_t len, const char* what) {
  if (len > 0 && data == nullptr) return Missing(absl::StrCat("calibration.", what));
  return len == 0 ? std::vector<float>() : std::vector<float>(data, data + len);
}

absl::StatusOr<ta::Calibration> ToCalibration(const kvtier_calibration_arrays* in) {
  if (in == nullptr) return Missing("calibration");
  ta::Calibration c;
  c.layers = in->layers;
  c.heads = in->heads;
  c.bands = static_cast<int>(in->omega_len);
  c.head_dim = 2 * c.bands;
  c.rope_style = "half";
  struct Field {
    const float* data;
    size_t len;
    const char* name;
    std::vector<float>* out;
  };
  for (const Field& f : {Field{in->q_mean_real, in->q_mean_real_len, "q_mean_real", &c.q_mean_real},
                         Field{in->q_mean_imag, in->q_mean_imag_len, "q_mean_imag", &c.q_mean_imag},
                         Field{in->q_abs_mean, in->q_abs_mean_len, "q_abs_mean", &c.q_abs_mean}}) {
    absl::StatusOr<std::vector<float>> values = FloatArray(f.data, f.len, f.name);
    if (!values.ok()) return values.status();
    *f.out = *std::move(values);
  }
  absl::StatusOr<std::vector<float>> omega = FloatArray(in->omega, in->omega_len, "omega");
  if (!omega.ok()) return omega.status();
  absl::StatusOr<std::vector<float>> freq =
      FloatArray(in->freq_scale_sq, in->freq_scale_sq_len, "freq_scale_sq");
  if (!freq.ok()) return freq.status();
  c.omega = *std::move(omega);
  c.freq_scale_sq = *std::move(freq);
  c.present.assign(in->layers > 0 && in->heads > 0
                       ? static_cast<size_t>(in->layers) * static_cast<size_t>(in->heads)
                       : 0,
                   1);
  return c;
}

absl::Status Install(kvtier_evictor** evictor,
                     absl::StatusOr<std::unique_ptr<ta::Evictor>> created) {
  if (!created.ok()) return created.status();
  *evictor = new kvtier_evictor{*std::move(created)};
  return absl::OkStatus();
}

}  // namespace
}  // namespace kvtier::c_api

using kvtier::c_api::Guard;
using kvtier::c_api::Missing;

extern "C" {

void kvtier_evictor_config_defaults(kvtier_evictor_config* config) {
  if (config == nullptr) return;
  *config = kvtier_evictor_config{};
  kvtier::c_api::FromConfig(kvtier::triattention::EvictorConfig{}, *config);
}

int kvtier_kv_cache_view_validate(const kvtier_kv_cache_view* view, kvtier_error* err) {
  return Guard(err, [&]() -> absl::Status {
    absl::StatusOr<kvtier::triattention::KvCacheView> v = kvtier::c_api::ToView(view);
    if (!v.ok()) return v.status();
    return kvtier::triattention::ValidateKvCacheView(*v);
  });
}

int kvtier_evictor_create(const kvtier_evictor_config* config,
                          const kvtier_calibration_arrays* calibration,
                          const kvtier_kv_cache_view* view, kvtier_evictor** evictor,
                          kvtier_error* err) {
  return Guard(err, [&]() -> absl::Status {
    if (evictor == nullptr) return Missing("evictor");
    *evictor = nullptr;
    if (config == nullptr) return Missing("config");
    absl::StatusOr<kvtier::triattention::KvCacheView> v = kvtier::c_api::ToView(view);
    if (!v.ok()) return v.status();
    absl::StatusOr<kvtier::triattention::Calibration> c = kvtier::c_api::ToCalibration(calibration);
    if (!c.ok()) return c.status();
    return kvtier::c_api::Install(
        evictor,
        kvtier::triattention::Evictor::Create(kvtier::c_api::ToConfig(*config), *std::move(c), *v));
  });
}

int kvtier_evictor_create_from_files(const kvtier_evictor_config* config,
                                     const char* calibration_path, const char* model_config_path,
                                     const kvtier_kv_cache_view* view, kvtier_evictor** evictor,
                                     kvtier_error* err) {
  return Guard(err, [&]() -> absl::Status {
    if (evictor == nullptr) return Missing("evictor");
    *evictor = nullptr;
    if (config == nullptr) return Missing("config");
    if (calibration_path == nullptr) return Missing("calibration_path");
    if (model_config_path == nullptr) return Missing("model_config_path");
    absl::StatusOr<kvtier::triattention::KvCacheView> v = kvtier::c_api::ToView(view);
    if (!v.ok()) return v.status();
    return kvtier::c_api::Install(
        evictor, kvtier::triattention::Evictor::CreateFromFiles(
                     kvtier::c_api::ToConfig(*config), calibration_path, model_config_path, *v));
  });
}

void kvtier_evictor_destroy(kvtier_evictor* evictor) { delete evictor; }

int kvtier_evictor_add_request(kvtier_evictor* evictor, uint64_t id, int64_t prompt_len,
                               kvtier_error* err) {
  return Guard(err, [&]() -> absl::Status {
    if (evictor == nullptr) return Missing("evictor");
    return evictor->impl->AddRequest(id, prompt_len);
  });
}

int kvtier_evictor_remove_request(kvtier_evictor* evictor, uint64_t id, kvtier_error* err) {
  return Guard(err, [&]() -> absl::Status {
    if (evictor == nullptr) return Missing("evictor");
    return evictor->impl->RemoveRequest(id);
  });
}

int kvtier_evictor_step_end(kvtier_evictor* evictor, const kvtier_step_request* requests,
                            size_t count, void* stream, kvtier_step_outcome* outcomes,
                            int32_t* freed_pages, size_t freed_capacity, kvtier_error* err) {
  return Guard(err, [&]() -> absl::Status {
    if (evictor == nullptr) return Missing("evictor");
    if (count > 0 && requests == nullptr) return Missing("requests");
    if (count > 0 && outcomes == nullptr) return Missing("outcomes");
    std::vector<kvtier::triattention::StepRequest> step(count);
    size_t table_entries = 0;
    for (size_t i = 0; i < count; ++i) {
      const kvtier_step_request& r = requests[i];
      if (r.block_table_len > 0 && r.block_table == nullptr) {
        return Missing(absl::StrCat("requests[", i, "].block_table"));
      }
      step[i].id = r.id;
      step[i].new_tokens = r.new_tokens;
      step[i].kv.block_table = absl::MakeConstSpan(r.block_table, r.block_table_len);
      step[i].kv.length = r.length;
      step[i].kv.prompt_len = r.prompt_len;
      step[i].kv.protected_tail = r.protected_tail;
      table_entries += r.block_table_len;
    }
    if (freed_capacity < table_entries || (table_entries > 0 && freed_pages == nullptr)) {
      return absl::InvalidArgumentError(
          absl::StrCat("freed_pages holds ", freed_pages == nullptr ? 0 : freed_capacity,
                       " entries; the requests' block tables have ", table_entries));
    }
    absl::StatusOr<std::vector<kvtier::triattention::StepOutcome>> done =
        evictor->impl->OnGenerationStepEnd(step, stream);
    if (!done.ok()) return done.status();
    size_t offset = 0;
    for (size_t i = 0; i < count && i < done->size(); ++i) {
      const kvtier::triattention::StepOutcome& o = (*done)[i];
      kvtier_step_outcome& out = outcomes[i];
      out.id = o.id;
      out.evicted = o.evicted ? 1 : 0;
      out.new_length = o.new_length;
      out.evicted_tokens = o.evicted_tokens;
      out.freed_offset = offset;
      out.freed_count = o.freed_pages.size();
      for (int32_t page : o.freed_pages) freed_pages[offset++] = page;
    }
    return absl::OkStatus();
  });
}

int kvtier_evictor_state(const kvtier_evictor* evictor, uint64_t id, kvtier_round_state* state,
                         kvtier_error* err) {
  return Guard(err, [&]() -> absl::Status {
    if (evictor == nullptr) return Missing("evictor");
    if (state == nullptr) return Missing("state");
    absl::StatusOr<kvtier::triattention::RequestRoundState> s = evictor->impl->State(id);
    if (!s.ok()) return s.status();
    state->prompt_len = s->prompt_len;
    state->confirmed_length = s->confirmed_length;
    state->generation_steps = s->generation_steps;
    state->last_boundary = s->last_boundary;
    state->evicted_tokens = s->evicted_tokens;
    state->logical_length = s->LogicalLength();
    return absl::OkStatus();
  });
}

int kvtier_evictor_info(const kvtier_evictor* evictor, kvtier_evictor_config* config, int* on_gpu,
                        int64_t* num_requests, kvtier_error* err) {
  return Guard(err, [&]() -> absl::Status {
    if (evictor == nullptr) return Missing("evictor");
    if (config != nullptr) kvtier::c_api::FromConfig(evictor->impl->config(), *config);
    if (on_gpu != nullptr) *on_gpu = evictor->impl->on_gpu() ? 1 : 0;
    if (num_requests != nullptr) *num_requests = evictor->impl->num_requests();
    return absl::OkStatus();
  });
}

}  // extern "C"
