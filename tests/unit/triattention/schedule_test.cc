// Tests of the TriAttention round schedule (triattention/schedule.h): rounds fire on beta
// crossings only when the decode region exceeds the decode-only budget, a speculative step that
// crosses several multiples of beta gives one round, the prompt never counts toward the budget,
// and the logical round start includes evicted tokens.
#include "triattention/schedule.h"

#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace kvtier::triattention {
namespace {

// Runs steps of the given sizes, committing every due round; returns the generation_steps
// values at which rounds fired.
std::vector<int64_t> RunSteps(const ScheduleConfig& config, RequestRoundState* state,
                              const std::vector<int64_t>& steps,
                              std::vector<RoundDecision>* rounds) {
  std::vector<int64_t> fired;
  for (int64_t n : steps) {
    absl::StatusOr<RoundDecision> d = OnStepEnd(config, n, state);
    EXPECT_TRUE(d.ok()) << d.status();
    if (d.ok() && d->due) {
      fired.push_back(state->generation_steps);
      if (rounds != nullptr) rounds->push_back(*d);
      CommitRound(config, *d, state);
    }
  }
  return fired;
}

TEST(ScheduleTest, FirstRoundAtFirstCrossingPastBudget) {
  const ScheduleConfig config{.budget = 256, .beta = 128};
  RequestRoundState state = StartRequest(1000);
  std::vector<RoundDecision> rounds;
  // 256 steps: crossings at 128 and 256, decode region 128 then 256: never above budget.
  std::vector<int64_t> fired = RunSteps(config, &state, std::vector<int64_t>(256, 1), &rounds);
  EXPECT_TRUE(fired.empty());
  EXPECT_EQ(state.confirmed_length, 1256);
  // 257..383: no crossing although the region exceeds the budget.
  fired = RunSteps(config, &state, std::vector<int64_t>(127, 1), &rounds);
  EXPECT_TRUE(fired.empty());
  EXPECT_EQ(state.confirmed_length, 1383);
  // 384: crossing with a decode region of 384 > 256: one round evicting 128.
  fired = RunSteps(config, &state, {1}, &rounds);
  ASSERT_EQ(fired, std::vector<int64_t>{384});
  EXPECT_EQ(rounds[0].evict, 128);
  EXPECT_EQ(rounds[0].round_start, 1384);
  EXPECT_EQ(state.confirmed_length, 1256);
  EXPECT_EQ(state.evicted_tokens, 128);
  EXPECT_EQ(state.LogicalLength(), 1384);
}

TEST(ScheduleTest, SteadyStateOneRoundPerBeta) {
  const ScheduleConfig config{.budget = 100, .beta = 64};
  RequestRoundState state = StartRequest(7);
  std::vector<RoundDecision> rounds;
  std::vector<int64_t> fired = RunSteps(config, &state, std::vector<int64_t>(640, 1), &rounds);
  // Decode region exceeds 100 first at the crossing 128; then every 64.
  std::vector<int64_t> expected;
  for (int64_t s = 128; s <= 640; s += 64) expected.push_back(s);
  EXPECT_EQ(fired, expected);
  ASSERT_EQ(rounds.size(), expected.size());
  EXPECT_EQ(rounds[0].evict, 28);
  for (size_t i = 1; i < rounds.size(); ++i) {
    EXPECT_EQ(rounds[i].evict, 64) << i;
    EXPECT_EQ(rounds[i].round_start, 7 + expected[i]) << i;  // logical length = prompt + steps
  }
  EXPECT_EQ(state.confirmed_length, 107);
  EXPECT_EQ(state.evicted_tokens, 640 - 100);
}

TEST(ScheduleTest, MultiBoundaryStepCoalescesIntoOneRound) {
  const ScheduleConfig config{.budget = 16, .beta = 8};
  RequestRoundState state = StartRequest(3);
  std::vector<RoundDecision> rounds;
  // One step of 30 tokens crosses 8, 16 and 24: one round.
  std::vector<int64_t> fired = RunSteps(config, &state, {30}, &rounds);
  ASSERT_EQ(fired, std::vector<int64_t>{30});
  EXPECT_EQ(rounds[0].evict, 14);
  EXPECT_EQ(rounds[0].round_start, 33);
  // Speculative steps of 3: 31 (no crossing), 34 (crosses 32, region 16+4 > 16): one round.
  fired = RunSteps(config, &state, {1, 3}, &rounds);
  EXPECT_EQ(fired, std::vector<int64_t>{34});
  EXPECT_EQ(rounds[1].evict, 4);
  EXPECT_EQ(state.LogicalLength(), 3 + 34);
}

TEST(ScheduleTest, PromptNeverCountsTowardBudget) {
  const ScheduleConfig config{.budget = 64, .beta = 32};
  // A prompt far larger than the budget: no round until the decode region itself exceeds 64.
  RequestRoundState state = StartRequest(100000);
  std::vector<int64_t> fired = RunSteps(config, &state, std::vector<int64_t>(64, 1), nullptr);
  EXPECT_TRUE(fired.empty());
  fired = RunSteps(config, &state, std::vector<int64_t>(32, 1), nullptr);
  EXPECT_EQ(fired, std::vector<int64_t>{96});
  EXPECT_EQ(state.confirmed_length, 100064);
}

TEST(ScheduleTest, IdentityRoundIsNotDueAndConsumesTheCrossing) {
  const ScheduleConfig config{.budget = 64, .beta = 32};
  RequestRoundState state = StartRequest(5);
  // Cross 32 with a decode region of 32 <= 64: identity, not due.
  absl::StatusOr<RoundDecision> d;
  for (int i = 0; i < 32; ++i) d = OnStepEnd(config, 1, &state);
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(d->due);
  EXPECT_EQ(state.last_boundary, 1);
  EXPECT_FALSE(Due(config, state).due);
  // Exactly at the budget at the crossing 64: still identity.
  for (int i = 0; i < 32; ++i) d = OnStepEnd(config, 1, &state);
  EXPECT_FALSE(d->due);
  EXPECT_EQ(state.evicted_tokens, 0);
  // One past the budget but between crossings: not due until 96.
  d = OnStepEnd(config, 1, &state);
  EXPECT_FALSE(d->due);
  for (int i = 0; i < 30; ++i) d = OnStepEnd(config, 1, &state);
  EXPECT_FALSE(d->due);
  d = OnStepEnd(config, 1, &state);
  EXPECT_TRUE(d->due);
  EXPECT_EQ(d->evict, 32);
}

TEST(ScheduleTest, RejectsBadInput) {
  RequestRoundState state = StartRequest(4);
  EXPECT_EQ(OnStepEnd({.budget = 0, .beta = 8}, 1, &state).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(OnStepEnd({.budget = 8, .beta = 0}, 1, &state).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(OnStepEnd({.budget = 8, .beta = 8}, 0, &state).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(state.generation_steps, 0);
}

}  // namespace
}  // namespace kvtier::triattention
