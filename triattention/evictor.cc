// Evictor: the schedule (schedule.h) glued to a round, CPU or GPU. A step is handled in three
// passes so that an error changes nothing: (1) check every request and advance copies of their
// schedule states, (2) run the rounds of the due ones, (3) commit the copies. The physical length
// after a round is prompt + budget + protected tail in every mode (notes 4.1: the kept count is
// uniform across (layer, KV head)), so the outcome never needs the round's results back from the
// device; only pages inside the old physical length are reported freed, since pages the engine
// reserved past it (for in-flight tokens) are still its own.
#include "triattention/evictor.h"

#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/annotate.h"
#include "common/status_macros.h"
#include "triattention/rope.h"

namespace kvtier::triattention {
namespace {

constexpr int kMaxNumOffsets = 62;  // BuildRoundWeights' bound

int64_t PagesFor(int64_t tokens, int page_tokens) {
  return (tokens + page_tokens - 1) / page_tokens;
}

absl::Status CheckCalibrationAgainstView(const Calibration& calibration, const KvCacheView& view) {
  if (!calibration.omega.has_value() || !calibration.freq_scale_sq.has_value()) {
    return absl::FailedPreconditionError(
        "evictor: calibration has no omega / freq_scale_sq (fill them with FillCalibrationRope)");
  }
  if (calibration.layers != static_cast<int>(view.layers.size())) {
    return absl::InvalidArgumentError(absl::StrCat("evictor: calibration has ", calibration.layers,
                                                   " layers, the kv view ", view.layers.size()));
  }
  if (calibration.bands * 2 != view.head_dim) {
    return absl::InvalidArgumentError(absl::StrCat("evictor: calibration has ", calibration.bands,
                                                   " bands (head_dim ", calibration.bands * 2,
                                                   "), the kv view head_dim ", view.head_dim));
  }
  if (calibration.heads < 1 || calibration.heads % view.num_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "evictor: calibration has ", calibration.heads,
        " query heads, not a positive multiple of the kv view's ", view.num_kv_heads, " kv heads"));
  }
  const size_t values = static_cast<size_t>(calibration.layers) * calibration.heads *
                        static_cast<size_t>(calibration.bands);
  const size_t bands = static_cast<size_t>(calibration.bands);
  if (calibration.q_mean_real.size() != values || calibration.q_mean_imag.size() != values ||
      calibration.q_abs_mean.size() != values || calibration.omega->size() != bands ||
      calibration.freq_scale_sq->size() != bands) {
    return absl::InvalidArgumentError(
        absl::StrCat("evictor: calibration arrays do not match its ", calibration.layers,
                     " layers, ", calibration.heads, " heads, ", calibration.bands, " bands"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<EvictionMode> ParseEvictionMode(absl::string_view name) {
  for (EvictionMode mode :
       {EvictionMode::kUnion, EvictionMode::kPerHead, EvictionMode::kPerLayerPerHead}) {
    if (name == EvictionModeName(mode)) return mode;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown eviction mode '", name, "' (accepted: union, per_head, per_layer_perhead)"));
}

absl::string_view EvictionModeName(EvictionMode mode) {
  switch (mode) {
    case EvictionMode::kUnion:
      return "union";
    case EvictionMode::kPerHead:
      return "per_head";
    case EvictionMode::kPerLayerPerHead:
      return "per_layer_perhead";
  }
  return "unknown";
}

absl::Status ValidateEvictorConfig(const EvictorConfig& config) {
  auto bad = [](absl::string_view field, int64_t value, absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("evictor: ", field, " ", value, " ", why));
  };
  if (config.budget < 1) return bad("budget", config.budget, "< 1");
  if (config.beta < 1) return bad("beta", config.beta, "< 1");
  if (EvictionModeName(config.mode) == "unknown") {
    return bad("mode", static_cast<int>(config.mode), "is not an EvictionMode");
  }
  if (config.order != CompactionOrder::kFillHoles &&
      config.order != CompactionOrder::kPreserveOrder) {
    return bad("order", static_cast<int>(config.order), "is not a CompactionOrder");
  }
  if (config.num_offsets < 1 || config.num_offsets > kMaxNumOffsets) {
    return bad("num_offsets", config.num_offsets,
               absl::StrCat("outside [1, ", kMaxNumOffsets, "]"));
  }
  if (config.device < 0) return bad("device", config.device, "< 0");
  if (config.max_batch < 1) return bad("max_batch", config.max_batch, "< 1");
  if (config.max_decode_tokens < 0)
    return bad("max_decode_tokens", config.max_decode_tokens, "< 0");
  if (config.max_decode_tokens != 0 && config.max_decode_tokens < config.budget + config.beta) {
    return bad("max_decode_tokens", config.max_decode_tokens,
               absl::StrCat("< budget + beta = ", config.budget + config.beta));
  }
  return absl::OkStatus();
}

Evictor::Evictor(const EvictorConfig& config, Calibration calibration, const KvCacheView& view)
    : config_(config),
      schedule_{.budget = config.budget, .beta = config.beta},
      calibration_(std::move(calibration)),
      view_(view) {}

Evictor::~Evictor() = default;

absl::StatusOr<std::unique_ptr<Evictor>> Evictor::Create(const EvictorConfig& config,
                                                         Calibration calibration,
                                                         const KvCacheView& view) {
  KVTIER_RETURN_IF_ERROR(ValidateEvictorConfig(config));
  KVTIER_RETURN_IF_ERROR(ValidateKvCacheView(view));
  KVTIER_RETURN_IF_ERROR(CheckCalibrationAgainstView(calibration, view));
  EvictorConfig resolved = config;
  if (resolved.max_decode_tokens == 0) {
    resolved.max_decode_tokens = config.budget + 2 * config.beta + 64;
  }
  auto evictor = std::unique_ptr<Evictor>(new Evictor(resolved, std::move(calibration), view));
  if (view.memory == KvMemory::kDevice) {
    const GpuRoundOptions options{.device = resolved.device,
                                  .max_requests = resolved.max_batch,
                                  .max_decode_tokens = resolved.max_decode_tokens,
                                  .budget = resolved.budget,
                                  .mode = resolved.mode,
                                  .normalize = resolved.normalize,
                                  .order = resolved.order,
                                  .num_offsets = resolved.num_offsets};
    KVTIER_ASSIGN_OR_RETURN(evictor->gpu_, GpuRound::Create(evictor->calibration_, view, options));
  }
  return evictor;
}

absl::StatusOr<std::unique_ptr<Evictor>> Evictor::CreateFromFiles(
    const EvictorConfig& config, const std::string& calibration_path,
    const std::string& model_config_path, const KvCacheView& view) {
  KVTIER_ASSIGN_OR_RETURN(Calibration calibration, LoadCalibration(calibration_path));
  KVTIER_ASSIGN_OR_RETURN(RopeTables rope, LoadRopeTables(model_config_path));
  KVTIER_RETURN_IF_ERROR(
      Annotate(CheckCalibrationAgainstRope(calibration, rope),
               absl::StrCat("calibration '", calibration_path, "' against model config '",
                            model_config_path, "'")));
  if (rope.num_kv_heads != view.num_kv_heads) {
    return absl::InvalidArgumentError(absl::StrCat("model config '", model_config_path, "' has ",
                                                   rope.num_kv_heads, " kv heads, the kv view ",
                                                   view.num_kv_heads));
  }
  FillCalibrationRope(rope, &calibration);
  return Create(config, std::move(calibration), view);
}

absl::Status Evictor::AddRequest(uint64_t id, int64_t prompt_len) {
  if (prompt_len < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("evictor: request ", id, " prompt_len ", prompt_len, " < 0"));
  }
  if (!states_.try_emplace(id, StartRequest(prompt_len)).second) {
    return absl::AlreadyExistsError(absl::StrCat("evictor: request ", id, " is already tracked"));
  }
  return absl::OkStatus();
}

absl::Status Evictor::RemoveRequest(uint64_t id) {
  if (states_.erase(id) == 0) {
    return absl::NotFoundError(absl::StrCat("evictor: request ", id, " is not tracked"));
  }
  return absl::OkStatus();
}

absl::StatusOr<RequestRoundState> Evictor::State(uint64_t id) const {
  auto it = states_.find(id);
  if (it == states_.end()) {
    return absl::NotFoundError(absl::StrCat("evictor: request ", id, " is not tracked"));
  }
  return it->second;
}

absl::StatusOr<std::vector<StepOutcome>> Evictor::OnGenerationStepEnd(
    absl::Span<const StepRequest> requests, void* stream) {
  // Pass 1: check everything and advance copies of the states.
  std::vector<RequestRoundState> next(requests.size());
  std::vector<RoundDecision> decisions(requests.size());
  std::vector<KvRequestView> due;
  std::vector<int64_t> round_starts;
  absl::flat_hash_set<uint64_t> seen;
  for (size_t i = 0; i < requests.size(); ++i) {
    const StepRequest& r = requests[i];
    auto who = [&r] { return absl::StrCat("evictor: request ", r.id, ": "); };
    KVTIER_ASSIGN_OR_RETURN(next[i], State(r.id));
    if (!seen.insert(r.id).second) {
      return absl::InvalidArgumentError(absl::StrCat(who(), "listed twice in one step"));
    }
    if (r.new_tokens < 1) {
      return absl::InvalidArgumentError(absl::StrCat(who(), "new_tokens ", r.new_tokens, " < 1"));
    }
    if (absl::Status s = ValidateKvRequest(view_, r.kv); !s.ok())
      return Annotate(s, absl::StrCat("evictor: request ", r.id));
    if (r.kv.prompt_len != next[i].prompt_len) {
      return absl::InvalidArgumentError(absl::StrCat(who(), "kv prompt_len ", r.kv.prompt_len,
                                                     ", AddRequest gave ", next[i].prompt_len));
    }
    if (r.kv.DecodeEnd() - next[i].confirmed_length != r.new_tokens) {
      return absl::InvalidArgumentError(
          absl::StrCat(who(), "confirmed length ", r.kv.DecodeEnd(), " (length ", r.kv.length,
                       " - protected tail ", r.kv.protected_tail, "), the schedule counted ",
                       next[i].confirmed_length + r.new_tokens, " (", next[i].confirmed_length,
                       " + new_tokens ", r.new_tokens, ")"));
    }
    KVTIER_ASSIGN_OR_RETURN(decisions[i], OnStepEnd(schedule_, r.new_tokens, &next[i]));
    if (!decisions[i].due) continue;
    if (on_gpu() && r.kv.DecodeTokens() > config_.max_decode_tokens) {
      return absl::InvalidArgumentError(absl::StrCat(who(), r.kv.DecodeTokens(),
                                                     " decode tokens exceed max_decode_tokens ",
                                                     config_.max_decode_tokens));
    }
    due.push_back(r.kv);
    round_starts.push_back(decisions[i].round_start);
  }

  // Pass 2: the rounds.
  if (on_gpu()) {
    KVTIER_RETURN_IF_ERROR(EnqueueGpuRounds(due, round_starts, stream));
  } else {
    for (size_t i = 0; i < due.size(); ++i) {
      KVTIER_RETURN_IF_ERROR(RunCpuRound(due[i], round_starts[i]));
    }
  }

  // Pass 3: commit and report.
  std::vector<StepOutcome> outcomes(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    const KvRequestView& kv = requests[i].kv;
    StepOutcome& out = outcomes[i];
    out.id = requests[i].id;
    out.evicted = decisions[i].due;
    out.new_length = kv.length;
    if (out.evicted) {
      CommitRound(schedule_, decisions[i], &next[i]);
      out.new_length = kv.prompt_len + config_.budget + kv.protected_tail;
      const int64_t first = PagesFor(out.new_length, view_.page_tokens);
      const int64_t end = PagesFor(kv.length, view_.page_tokens);
      for (int64_t p = first; p < end; ++p) out.freed_pages.push_back(kv.block_table[p]);
    }
    out.evicted_tokens = next[i].evicted_tokens;
    states_[out.id] = next[i];
  }
  return outcomes;
}

absl::Status Evictor::RunCpuRound(const KvRequestView& kv, int64_t round_start) {
  KVTIER_ASSIGN_OR_RETURN(RoundWeights weights,
                          BuildRoundWeights(calibration_, round_start, config_.num_offsets));
  KVTIER_ASSIGN_OR_RETURN(RoundScores scores, ScoreRequest(weights, view_, kv));
  if (config_.normalize) NormalizeRows(&scores);
  KVTIER_ASSIGN_OR_RETURN(
      KeptTokens kept,
      SelectKeptTokens(scores, config_.mode, view_.num_kv_heads, config_.budget, kv.prompt_len));
  KVTIER_ASSIGN_OR_RETURN(CompactionResult result, CompactRequest(view_, kv, kept, config_.order));
  if (result.new_length != kv.prompt_len + config_.budget + kv.protected_tail) {
    return absl::InternalError(
        absl::StrCat("evictor: round kept ", kept.kept, " tokens, the budget is ", config_.budget));
  }
  return absl::OkStatus();
}

absl::Status Evictor::EnqueueGpuRounds(absl::Span<const KvRequestView> due,
                                       absl::Span<const int64_t> round_starts, void* stream) {
  const size_t chunk = static_cast<size_t>(config_.max_batch);
  for (size_t at = 0; at < due.size(); at += chunk) {
    KVTIER_RETURN_IF_ERROR(
        gpu_->Enqueue(due.subspan(at, chunk), round_starts.subspan(at, chunk), stream));
  }
  return absl::OkStatus();
}

}  // namespace kvtier::triattention
