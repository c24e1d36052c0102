// TensorRT-LLM's _periodic_evict cadence (notes 3.2): generation_steps grows by 1 + accepted
// drafts each step; a round is due when floor(prev / beta) < floor(now / beta) and seq_len >
// prompt_len + budget (below that the selection would keep everything). The boundary is tracked
// as floor(steps / beta) rather than the previous step count, which is the same test and makes
// a speculative step that jumps several multiples give exactly one round.
#include "triattention/schedule.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace kvtier::triattention {

absl::Status ValidateScheduleConfig(const ScheduleConfig& config) {
  if (config.budget < 1) {
    return absl::InvalidArgumentError(absl::StrCat("schedule: budget ", config.budget, " < 1"));
  }
  if (config.beta < 1) {
    return absl::InvalidArgumentError(absl::StrCat("schedule: beta ", config.beta, " < 1"));
  }
  return absl::OkStatus();
}

RequestRoundState StartRequest(int64_t prompt_len) {
  RequestRoundState state;
  state.prompt_len = prompt_len;
  state.confirmed_length = prompt_len;
  return state;
}

RoundDecision Due(const ScheduleConfig& config, const RequestRoundState& state) {
  RoundDecision decision;
  const bool crossed = state.generation_steps / config.beta > state.last_boundary;
  const int64_t excess = state.confirmed_length - (state.prompt_len + config.budget);
  decision.due = crossed && excess > 0;
  if (decision.due) {
    decision.round_start = state.LogicalLength();
    decision.evict = excess;
  }
  return decision;
}

absl::StatusOr<RoundDecision> OnStepEnd(const ScheduleConfig& config, int64_t new_tokens,
                                        RequestRoundState* state) {
  KVTIER_RETURN_IF_ERROR(ValidateScheduleConfig(config));
  if (new_tokens < 1) {
    return absl::InvalidArgumentError(absl::StrCat("schedule: new_tokens ", new_tokens, " < 1"));
  }
  state->generation_steps += new_tokens;
  state->confirmed_length += new_tokens;
  RoundDecision decision = Due(config, *state);
  state->last_boundary = state->generation_steps / config.beta;
  return decision;
}

void CommitRound(const ScheduleConfig& config, const RoundDecision& decision,
                 RequestRoundState* state) {
  state->evicted_tokens += decision.evict;
  state->confirmed_length = state->prompt_len + config.budget;
}

}  // namespace kvtier::triattention
