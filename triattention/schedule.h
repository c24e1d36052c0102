// When a request is due for a TriAttention round, as TensorRT-LLM schedules it: the prompt is
// pinned on top of a decode-only budget, and a round runs when the request's confirmed-token
// counter crosses a multiple of beta while the decode region exceeds the budget. The state is a
// plain per-request value; the functions are pure (thread-compatible).
#ifndef KVTIER_TRIATTENTION_SCHEDULE_H_
#define KVTIER_TRIATTENTION_SCHEDULE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kvtier::triattention {

struct ScheduleConfig {
  int64_t budget = 2048;  // decode tokens kept by a round (the prompt comes on top)
  int64_t beta = 128;     // round cadence in confirmed tokens (upstream divide_length)
};

// InvalidArgument naming the field for budget < 1 or beta < 1.
absl::Status ValidateScheduleConfig(const ScheduleConfig& config);

// Per-request round bookkeeping.
struct RequestRoundState {
  int64_t prompt_len = 0;        // pinned prompt tokens
  int64_t confirmed_length = 0;  // physical tokens confirmed in the cache, protected tail excluded
  int64_t generation_steps = 0;  // decode tokens confirmed since prefill, evicted ones included
  int64_t last_boundary = 0;     // generation_steps / beta when the last step ended
  int64_t evicted_tokens = 0;    // decode tokens evicted so far (the runtime's compressed count)

  int64_t LogicalLength() const { return confirmed_length + evicted_tokens; }
};

// State of a request right after a prefill of `prompt_len` tokens (nothing generated yet).
RequestRoundState StartRequest(int64_t prompt_len);

struct RoundDecision {
  bool due = false;
  int64_t round_start = 0;  // t0 of the round: the logical length (confirmed + evicted)
  int64_t evict = 0;        // decode tokens the round removes (confirmed - prompt - budget)
};

// Whether a round is due now: generation_steps / beta has passed last_boundary (one round however
// many multiples of beta were crossed) and the decode region confirmed_length - prompt_len
// exceeds the budget. A crossing without excess is an identity round and is not due.
// REQUIRES: ValidateScheduleConfig(config).ok().
RoundDecision Due(const ScheduleConfig& config, const RequestRoundState& state);

// Ends a generation step that confirmed `new_tokens` (1 + accepted draft tokens): advances the
// counters, decides with Due, then consumes the crossing (last_boundary = generation_steps /
// beta) whether or not a round is due. InvalidArgument for new_tokens < 1 and the errors of
// ValidateScheduleConfig. `state` is borrowed for the call.
absl::StatusOr<RoundDecision> OnStepEnd(const ScheduleConfig& config, int64_t new_tokens,
                                        RequestRoundState* state);

// Records a round that ran as `decision` (from OnStepEnd): evicted_tokens grows by
// decision.evict and confirmed_length becomes prompt_len + budget. REQUIRES: decision.due.
void CommitRound(const ScheduleConfig& config, const RoundDecision& decision,
                 RequestRoundState* state);

}  // namespace kvtier::triattention

#endif  // KVTIER_TRIATTENTION_SCHEDULE_H_
