// Tests of the TriAttention Evictor (triattention/evictor.h) on a host-memory cache of random BF16
// rows: rounds fire at the beta crossings the schedule names and not at identity crossings, the
// outcome's length and freed pages follow from prompt + budget + tail, the cache after a round is
// byte for byte what the CPU reference functions give when called by hand on a copy, both
// compaction orders keep the same rows, and every error leaves the schedule and the cache as they
// were. Also the config, mode-name and geometry checks and the file-loading factory.
#include "triattention/evictor.h"
#include "tests/testing/triattention_files.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "codec/dtype.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvtier::triattention {
namespace {

using ::testing::HasSubstr;

constexpr int kLayers = 2;
constexpr int kKvHeads = 2;
constexpr int kQueryHeads = 4;
constexpr int kHeadDim = 64;
constexpr int kPage = 16;
constexpr int64_t kNumPages = 64;
constexpr double kTheta = 10000.0;

// A host cache of separate K and V pools filled with random BF16 values.
struct HostCache {
  std::vector<std::vector<uint8_t>> k, v;
  KvCacheView view;

  void PointViewAtPools() {
    view.layers.clear();
    for (size_t l = 0; l < k.size(); ++l) view.layers.push_back({k[l].data(), v[l].data()});
  }
  HostCache Clone() const {
    HostCache copy = *this;
    copy.PointViewAtPools();
    return copy;
  }
  bool SameBytes(const HostCache& other) const { return k == other.k && v == other.v; }
};

HostCache MakeHostCache(KvLayout layout, std::mt19937_64& rng) {
  HostCache c;
  c.view.num_pages = kNumPages;
  c.view.page_tokens = kPage;
  c.view.num_kv_heads = kKvHeads;
  c.view.head_dim = kHeadDim;
  c.view.dtype = codec::DType::kBf16;
  c.view.layout = layout;
  const size_t elements = static_cast<size_t>(kNumPages) * kPage * kKvHeads * kHeadDim;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto fill = [&](std::vector<uint8_t>& pool) {
    pool.resize(elements * 2);
    for (size_t e = 0; e < elements; ++e) {
      codec::StoreFromFloat(codec::DType::kBf16, normal(rng), pool.data(), e);
    }
  };
  c.k.resize(kLayers);
  c.v.resize(kLayers);
  for (int l = 0; l < kLayers; ++l) {
    fill(c.k[l]);
    fill(c.v[l]);
  }
  c.PointViewAtPools();
  return c;
}

// Random query statistics with the default-RoPE tables of kTheta filled in.
Calibration MakeCalibration(int layers, std::mt19937_64& rng) {
  Calibration c;
  c.layers = layers;
  c.heads = kQueryHeads;
  c.bands = kHeadDim / 2;
  c.head_dim = kHeadDim;
  c.rope_style = "half";
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int i = 0; i < layers * c.heads * c.bands; ++i) {
    c.q_mean_real.push_back(normal(rng));
    c.q_mean_imag.push_back(normal(rng));
    c.q_abs_mean.push_back(std::hypot(c.q_mean_real.back(), c.q_mean_imag.back()) + 0.5f);
  }
  c.present.assign(static_cast<size_t>(layers) * c.heads, 1);
  c.omega.emplace();
  for (int f = 0; f < c.bands; ++f) {
    c.omega->push_back(static_cast<float>(std::pow(kTheta, -2.0 * f / kHeadDim)));
  }
  c.freq_scale_sq.emplace(c.bands, 1.0f);
  return c;
}

// `count` block tables of `pages` pages each, disjoint, in random page order.
std::vector<std::vector<int32_t>> BlockTables(int count, int pages, std::mt19937_64& rng) {
  std::vector<int32_t> all(kNumPages);
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng);
  std::vector<std::vector<int32_t>> tables;
  for (int i = 0; i < count; ++i) {
    tables.emplace_back(all.begin() + i * pages, all.begin() + (i + 1) * pages);
  }
  return tables;
}

// The engine's side of one request: its block table, physical length (tail included) and the
// tokens generated since prefill.
struct EngineRequest {
  uint64_t id = 0;
  int64_t prompt = 0;
  int64_t tail = 0;
  std::vector<int32_t> table;
  int64_t length = 0;
  int64_t generated = 0;

  EngineRequest(uint64_t id, int64_t prompt, int64_t tail, std::vector<int32_t> table)
      : id(id), prompt(prompt), tail(tail), table(std::move(table)), length(prompt + tail) {}
  // The request at the end of a generation step that confirmed n tokens.
  StepRequest Step(int64_t n) {
    length += n;
    generated += n;
    return StepRequest{id, n, KvRequestView{table, length, prompt, tail}};
  }
  void Undo(int64_t n) {
    length -= n;
    generated -= n;
  }
  void Apply(const StepOutcome& outcome) { length = outcome.new_length; }
};

// Runs single-token steps of `r` until it has generated `generated` tokens; fails on a round.
void StepWithoutRounds(Evictor& evictor, EngineRequest& r, int64_t generated) {
  while (r.generated < generated) {
    absl::StatusOr<std::vector<StepOutcome>> out = evictor.OnGenerationStepEnd({r.Step(1)});
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_FALSE((*out)[0].evicted) << "request " << r.id << " at " << r.generated;
  }
}

// The round by hand: the CPU reference functions the Evictor is documented to call.
void ReferenceRound(const EvictorConfig& config, const Calibration& calibration,
                    const KvCacheView& view, const KvRequestView& kv, int64_t round_start) {
  absl::StatusOr<RoundWeights> weights =
      BuildRoundWeights(calibration, round_start, config.num_offsets);
  ASSERT_TRUE(weights.ok()) << weights.status();
  absl::StatusOr<RoundScores> scores = ScoreRequest(*weights, view, kv);
  ASSERT_TRUE(scores.ok()) << scores.status();
  if (config.normalize) NormalizeRows(&*scores);
  absl::StatusOr<KeptTokens> kept =
      SelectKeptTokens(*scores, config.mode, view.num_kv_heads, config.budget, kv.prompt_len);
  ASSERT_TRUE(kept.ok()) << kept.status();
  absl::StatusOr<CompactionResult> result = CompactRequest(view, kv, *kept, config.order);
  ASSERT_TRUE(result.ok()) << result.status();
}

void ExpectSameState(const RequestRoundState& a, const RequestRoundState& b) {
  EXPECT_EQ(a.prompt_len, b.prompt_len);
  EXPECT_EQ(a.confirmed_length, b.confirmed_length);
  EXPECT_EQ(a.generation_steps, b.generation_steps);
  EXPECT_EQ(a.last_boundary, b.last_boundary);
  EXPECT_EQ(a.evicted_tokens, b.evicted_tokens);
}

EvictorConfig SmallConfig() {
  EvictorConfig config;
  config.budget = 32;
  config.beta = 16;
  return config;
}

std::unique_ptr<Evictor> MakeEvictor(const EvictorConfig& config, const Calibration& calibration,
                                     const HostCache& cache) {
  absl::StatusOr<std::unique_ptr<Evictor>> evictor =
      Evictor::Create(config, calibration, cache.view);
  EXPECT_TRUE(evictor.ok()) << evictor.status();
  return evictor.ok() ? std::move(*evictor) : nullptr;
}

TEST(EvictorTest, OneRoundAtTheBetaCrossingPastBudgetWithLengthAndFreedPages) {
  std::mt19937_64 rng(1);
  HostCache cache = MakeHostCache(KvLayout::kHnd, rng);
  std::unique_ptr<Evictor> evictor =
      MakeEvictor(SmallConfig(), MakeCalibration(kLayers, rng), cache);
  ASSERT_NE(evictor, nullptr);
  EXPECT_FALSE(evictor->on_gpu());
  // Prompt 20, tail 2, 8 pages reserved (128 tokens): more than the request ever holds.
  EngineRequest r(7, 20, 2, BlockTables(1, 8, rng)[0]);
  ASSERT_TRUE(evictor->AddRequest(r.id, r.prompt).ok());
  // The decode region first exceeds the budget 32 at 33 tokens; the next crossing is 48.
  StepWithoutRounds(*evictor, r, 47);
  absl::StatusOr<std::vector<StepOutcome>> out = evictor->OnGenerationStepEnd({r.Step(1)});
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 1u);
  const StepOutcome& o = (*out)[0];
  EXPECT_EQ(o.id, 7u);
  EXPECT_TRUE(o.evicted);
  EXPECT_EQ(o.new_length, 20 + 32 + 2);
  EXPECT_EQ(o.evicted_tokens, 16);
  // Old length 70 (5 pages), new 54 (4 pages): table[4] only; table[5..8) held no tokens.
  EXPECT_EQ(o.freed_pages, std::vector<int32_t>{r.table[4]});
  absl::StatusOr<RequestRoundState> state = evictor->State(7);
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->confirmed_length, 52);
  EXPECT_EQ(state->evicted_tokens, 16);
  EXPECT_EQ(state->LogicalLength(), 20 + 48);
  r.Apply(o);

  // The next round comes beta tokens later, at 64 generated tokens.
  StepWithoutRounds(*evictor, r, 63);
  out = evictor->OnGenerationStepEnd({r.Step(1)});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE((*out)[0].evicted);
  EXPECT_EQ((*out)[0].new_length, 54);
  EXPECT_EQ((*out)[0].evicted_tokens, 32);
  EXPECT_EQ((*out)[0].freed_pages, std::vector<int32_t>{r.table[4]});  // old length 70 again
  EXPECT_TRUE(evictor->RemoveRequest(7).ok());
  EXPECT_EQ(evictor->RemoveRequest(7).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(evictor->State(7).status().code(), absl::StatusCode::kNotFound);
}

TEST(EvictorTest, CacheAfterEachRoundEqualsTheReferenceFunctionsOnACopy) {
  std::mt19937_64 rng(2);
  int cases = 0;
  for (EvictionMode mode :
       {EvictionMode::kUnion, EvictionMode::kPerHead, EvictionMode::kPerLayerPerHead}) {
    for (CompactionOrder order : {CompactionOrder::kFillHoles, CompactionOrder::kPreserveOrder}) {
      for (bool normalize : {true, false}) {
        SCOPED_TRACE(absl::StrCat(EvictionModeName(mode), " order ", static_cast<int>(order),
                                  " normalize ", normalize));
        HostCache cache = MakeHostCache(++cases % 2 ? KvLayout::kHnd : KvLayout::kNhd, rng);
        EvictorConfig config = SmallConfig();
        config.mode = mode;
        config.order = order;
        config.normalize = normalize;
        const Calibration calibration = MakeCalibration(kLayers, rng);
        std::unique_ptr<Evictor> evictor = MakeEvictor(config, calibration, cache);
        ASSERT_NE(evictor, nullptr);
        EngineRequest r(3, 21, 1, BlockTables(1, 8, rng)[0]);
        ASSERT_TRUE(evictor->AddRequest(r.id, r.prompt).ok());
        // Rounds at 48 and 64 generated tokens, each starting at the logical length.
        for (int64_t generated : {48, 64}) {
          StepWithoutRounds(*evictor, r, generated - 1);
          HostCache reference = cache.Clone();
          const StepRequest step = r.Step(1);
          absl::StatusOr<std::vector<StepOutcome>> out = evictor->OnGenerationStepEnd({step});
          ASSERT_TRUE(out.ok()) << out.status();
          ASSERT_TRUE((*out)[0].evicted) << generated;
          EXPECT_FALSE(cache.SameBytes(reference))
              << "the round at " << generated << " moved nothing";
          ReferenceRound(config, calibration, reference.view, step.kv, r.prompt + generated);
          EXPECT_TRUE(cache.SameBytes(reference)) << "the round at " << generated;
          r.Apply((*out)[0]);
        }
      }
    }
  }
}

TEST(EvictorTest, IdentityCrossingsLaunchNothing) {
  std::mt19937_64 rng(3);
  HostCache cache = MakeHostCache(KvLayout::kHnd, rng);
  const HostCache before = cache.Clone();
  std::unique_ptr<Evictor> evictor =
      MakeEvictor(SmallConfig(), MakeCalibration(kLayers, rng), cache);
  ASSERT_NE(evictor, nullptr);
  EngineRequest r(1, 20, 0, BlockTables(1, 8, rng)[0]);
  ASSERT_TRUE(evictor->AddRequest(r.id, r.prompt).ok());
  // Crossings at 16 and 32 with 16 and 32 decode tokens (not above the budget), then 33..47
  // without a crossing.
  StepWithoutRounds(*evictor, r, 47);
  EXPECT_TRUE(cache.SameBytes(before));
  absl::StatusOr<RequestRoundState> state = evictor->State(1);
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->last_boundary, 2);
  EXPECT_EQ(state->evicted_tokens, 0);
  EXPECT_EQ(state->confirmed_length, 20 + 47);
}

TEST(EvictorTest, SpeculativeStepCrossingSeveralMultiplesGivesOneRound) {
  std::mt19937_64 rng(4);
  HostCache cache = MakeHostCache(KvLayout::kNhd, rng);
  const EvictorConfig config = SmallConfig();
  const Calibration calibration = MakeCalibration(kLayers, rng);
  std::unique_ptr<Evictor> evictor = MakeEvictor(config, calibration, cache);
  ASSERT_NE(evictor, nullptr);
  EngineRequest r(9, 20, 0, BlockTables(1, 8, rng)[0]);
  ASSERT_TRUE(evictor->AddRequest(r.id, r.prompt).ok());
  // 40 tokens at once cross 16 and 32: one round evicting 40 - 32.
  HostCache reference = cache.Clone();
  StepRequest step = r.Step(40);
  absl::StatusOr<std::vector<StepOutcome>> out = evictor->OnGenerationStepEnd({step});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE((*out)[0].evicted);
  EXPECT_EQ((*out)[0].new_length, 52);
  EXPECT_EQ((*out)[0].evicted_tokens, 8);
  ReferenceRound(config, calibration, reference.view, step.kv, 60);
  EXPECT_TRUE(cache.SameBytes(reference));
  r.Apply((*out)[0]);
  // 35 more (40 -> 75) cross 48 and 64: one round evicting 32 + 35 - 32.
  out = evictor->OnGenerationStepEnd({r.Step(35)});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE((*out)[0].evicted);
  EXPECT_EQ((*out)[0].new_length, 52);
  EXPECT_EQ((*out)[0].evicted_tokens, 8 + 35);
  // Old length 87 (6 pages), new 52 (4 pages).
  EXPECT_EQ((*out)[0].freed_pages, (std::vector<int32_t>{r.table[4], r.table[5]}));
  r.Apply((*out)[0]);
  absl::StatusOr<RequestRoundState> state = evictor->State(9);
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->last_boundary, 4);
  EXPECT_EQ(state->LogicalLength(), 20 + 75);
  // 76..79 cross nothing.
  StepWithoutRounds(*evictor, r, 79);
}

TEST(EvictorTest, SeveralRequestsInOneStepRunTheirRoundsAndReportInInputOrder) {
  std::mt19937_64 rng(5);
  HostCache cache = MakeHostCache(KvLayout::kHnd, rng);
  EvictorConfig config = SmallConfig();
  config.mode = EvictionMode::kPerHead;
  const Calibration calibration = MakeCalibration(kLayers, rng);
  std::unique_ptr<Evictor> evictor = MakeEvictor(config, calibration, cache);
  ASSERT_NE(evictor, nullptr);
  std::vector<std::vector<int32_t>> tables = BlockTables(3, 8, rng);
  EngineRequest a(10, 20, 2, tables[0]), b(11, 5, 0, tables[1]), c(12, 33, 1, tables[2]);
  for (EngineRequest* r : {&a, &b, &c}) ASSERT_TRUE(evictor->AddRequest(r->id, r->prompt).ok());
  StepWithoutRounds(*evictor, a, 47);
  StepWithoutRounds(*evictor, b, 10);
  StepWithoutRounds(*evictor, c, 47);
  HostCache reference = cache.Clone();
  const std::vector<StepRequest> steps = {c.Step(1), b.Step(1), a.Step(1)};
  absl::StatusOr<std::vector<StepOutcome>> out = evictor->OnGenerationStepEnd(steps);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 3u);
  EXPECT_EQ((*out)[0].id, 12u);
  EXPECT_EQ((*out)[1].id, 11u);
  EXPECT_EQ((*out)[2].id, 10u);
  EXPECT_TRUE((*out)[0].evicted);
  EXPECT_FALSE((*out)[1].evicted);
  EXPECT_TRUE((*out)[2].evicted);
  EXPECT_EQ((*out)[0].new_length, 33 + 32 + 1);
  EXPECT_EQ((*out)[1].new_length, 5 + 11);
  EXPECT_TRUE((*out)[1].freed_pages.empty());
  EXPECT_EQ((*out)[1].evicted_tokens, 0);
  EXPECT_EQ((*out)[2].new_length, 20 + 32 + 2);
  ReferenceRound(config, calibration, reference.view, steps[0].kv, 33 + 48);
  ReferenceRound(config, calibration, reference.view, steps[2].kv, 20 + 48);
  EXPECT_TRUE(cache.SameBytes(reference));
}

// The rows (K then V) of tokens [begin, end) of one (layer, KV head).
std::vector<std::vector<uint8_t>> Rows(const KvCacheView& view, const KvRequestView& kv, int layer,
                                       int head, int64_t begin, int64_t end) {
  const KvStrides strides = KvStridesOf(view);
  std::vector<std::vector<uint8_t>> rows;
  for (int64_t t = begin; t < end; ++t) {
    std::vector<uint8_t> row(2 * strides.row_bytes);
    std::memcpy(row.data(), KvRowAddress(view, strides, kv, layer, false, head, t),
                strides.row_bytes);
    std::memcpy(row.data() + strides.row_bytes,
                KvRowAddress(view, strides, kv, layer, true, head, t), strides.row_bytes);
    rows.push_back(std::move(row));
  }
  return rows;
}

TEST(EvictorTest, FillHolesAndPreserveOrderKeepTheSameRowsPerLayerAndHead) {
  std::mt19937_64 rng(6);
  for (EvictionMode mode :
       {EvictionMode::kUnion, EvictionMode::kPerHead, EvictionMode::kPerLayerPerHead}) {
    SCOPED_TRACE(EvictionModeName(mode));
    HostCache fill = MakeHostCache(KvLayout::kHnd, rng);
    HostCache preserve = fill.Clone();
    const Calibration calibration = MakeCalibration(kLayers, rng);
    EvictorConfig config = SmallConfig();
    config.mode = mode;
    config.order = CompactionOrder::kFillHoles;
    std::unique_ptr<Evictor> fill_evictor = MakeEvictor(config, calibration, fill);
    config.order = CompactionOrder::kPreserveOrder;
    std::unique_ptr<Evictor> preserve_evictor = MakeEvictor(config, calibration, preserve);
    ASSERT_NE(fill_evictor, nullptr);
    ASSERT_NE(preserve_evictor, nullptr);
    const std::vector<int32_t> table = BlockTables(1, 8, rng)[0];
    EngineRequest rf(1, 17, 3, table), rp(1, 17, 3, table);
    ASSERT_TRUE(fill_evictor->AddRequest(1, 17).ok());
    ASSERT_TRUE(preserve_evictor->AddRequest(1, 17).ok());
    StepWithoutRounds(*fill_evictor, rf, 47);
    StepWithoutRounds(*preserve_evictor, rp, 47);
    absl::StatusOr<std::vector<StepOutcome>> of = fill_evictor->OnGenerationStepEnd({rf.Step(1)});
    absl::StatusOr<std::vector<StepOutcome>> op =
        preserve_evictor->OnGenerationStepEnd({rp.Step(1)});
    ASSERT_TRUE(of.ok()) << of.status();
    ASSERT_TRUE(op.ok()) << op.status();
    ASSERT_TRUE((*of)[0].evicted);
    ASSERT_TRUE((*op)[0].evicted);
    ASSERT_EQ((*of)[0].new_length, (*op)[0].new_length);
    const KvRequestView kv{table, (*of)[0].new_length, 17, 3};
    const int64_t kept_end = 17 + config.budget;
    bool some_order_differs = false;
    for (int l = 0; l < kLayers; ++l) {
      for (int g = 0; g < kKvHeads; ++g) {
        SCOPED_TRACE(absl::StrCat("layer ", l, " head ", g));
        // Prompt and tail at the same places, kept rows the same multiset.
        EXPECT_EQ(Rows(fill.view, kv, l, g, 0, 17), Rows(preserve.view, kv, l, g, 0, 17));
        EXPECT_EQ(Rows(fill.view, kv, l, g, kept_end, kv.length),
                  Rows(preserve.view, kv, l, g, kept_end, kv.length));
        std::vector<std::vector<uint8_t>> kept_fill = Rows(fill.view, kv, l, g, 17, kept_end);
        std::vector<std::vector<uint8_t>> kept_preserve =
            Rows(preserve.view, kv, l, g, 17, kept_end);
        some_order_differs |= kept_fill != kept_preserve;
        std::sort(kept_fill.begin(), kept_fill.end());
        std::sort(kept_preserve.begin(), kept_preserve.end());
        EXPECT_EQ(kept_fill, kept_preserve);
      }
    }
    EXPECT_TRUE(some_order_differs) << "the test should see two different orders";
  }
}

TEST(EvictorTest, StepErrorsChangeNeitherScheduleNorCache) {
  std::mt19937_64 rng(7);
  HostCache cache = MakeHostCache(KvLayout::kHnd, rng);
  std::unique_ptr<Evictor> evictor =
      MakeEvictor(SmallConfig(), MakeCalibration(kLayers, rng), cache);
  ASSERT_NE(evictor, nullptr);
  std::vector<std::vector<int32_t>> tables = BlockTables(2, 8, rng);
  EngineRequest a(5, 20, 2, tables[0]), b(6, 9, 0, tables[1]);
  ASSERT_TRUE(evictor->AddRequest(a.id, a.prompt).ok());
  ASSERT_TRUE(evictor->AddRequest(b.id, b.prompt).ok());
  StepWithoutRounds(*evictor, a, 47);  // a's next step is due
  StepWithoutRounds(*evictor, b, 3);
  const HostCache before = cache.Clone();
  const RequestRoundState a_before = *evictor->State(a.id);
  const RequestRoundState b_before = *evictor->State(b.id);
  auto expect_unchanged = [&] {
    EXPECT_TRUE(cache.SameBytes(before));
    ExpectSameState(*evictor->State(a.id), a_before);
    ExpectSameState(*evictor->State(b.id), b_before);
  };

  // An unknown id after a due request: nothing runs.
  StepRequest unknown = b.Step(1);
  b.Undo(1);
  unknown.id = 99;
  absl::StatusOr<std::vector<StepOutcome>> out = evictor->OnGenerationStepEnd({a.Step(1), unknown});
  a.Undo(1);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(out.status().message(), HasSubstr("99"));
  expect_unchanged();

  // The same id twice.
  out = evictor->OnGenerationStepEnd({b.Step(1), a.Step(1), b.Step(1)});
  a.Undo(1);
  b.Undo(2);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out.status().message(), HasSubstr("request 6"));
  expect_unchanged();

  // new_tokens < 1.
  StepRequest zero = b.Step(1);
  b.Undo(1);
  zero.new_tokens = 0;
  zero.kv.length -= 1;
  out = evictor->OnGenerationStepEnd({a.Step(1), zero});
  a.Undo(1);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out.status().message(), HasSubstr("new_tokens 0"));
  expect_unchanged();

  // A confirmed length one past the schedule's count (the engine forgot the tail).
  StepRequest longer = a.Step(1);
  a.Undo(1);
  longer.kv.length += 1;
  out = evictor->OnGenerationStepEnd({longer});
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out.status().message(), HasSubstr("request 5"));
  EXPECT_THAT(out.status().message(), HasSubstr("confirmed length 69"));
  EXPECT_THAT(out.status().message(), HasSubstr("counted 68"));
  expect_unchanged();

  // A prompt_len other than AddRequest's.
  StepRequest prompt = a.Step(1);
  a.Undo(1);
  prompt.kv.prompt_len = 21;
  out = evictor->OnGenerationStepEnd({b.Step(1), prompt});
  b.Undo(1);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out.status().message(), HasSubstr("request 5"));
  EXPECT_THAT(out.status().message(), HasSubstr("prompt_len 21"));
  EXPECT_THAT(out.status().message(), HasSubstr("20"));
  expect_unchanged();

  // A block table too short for the length (ValidateKvRequest).
  StepRequest short_table = a.Step(1);
  a.Undo(1);
  short_table.kv.block_table = short_table.kv.block_table.subspan(0, 2);
  out = evictor->OnGenerationStepEnd({short_table});
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out.status().message(), HasSubstr("request 5"));
  expect_unchanged();

  // The correct step still runs the round.
  out = evictor->OnGenerationStepEnd({a.Step(1), b.Step(1)});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE((*out)[0].evicted);
  EXPECT_FALSE((*out)[1].evicted);
  EXPECT_FALSE(cache.SameBytes(before));
}

TEST(EvictorTest, AddRequestAndRemoveRequestErrors) {
  std::mt19937_64 rng(8);
  HostCache cache = MakeHostCache(KvLayout::kHnd, rng);
  std::unique_ptr<Evictor> evictor =
      MakeEvictor(SmallConfig(), MakeCalibration(kLayers, rng), cache);
  ASSERT_NE(evictor, nullptr);
  EngineRequest r(4, 20, 0, BlockTables(1, 8, rng)[0]);
  ASSERT_TRUE(evictor->AddRequest(r.id, r.prompt).ok());
  StepWithoutRounds(*evictor, r, 5);
  const RequestRoundState state = *evictor->State(4);
  absl::Status status = evictor->AddRequest(4, 100);
  EXPECT_EQ(status.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(status.message(), HasSubstr("request 4"));
  ExpectSameState(*evictor->State(4), state);
  EXPECT_EQ(evictor->AddRequest(8, -1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(evictor->State(8).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(evictor->RemoveRequest(8).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(evictor->num_requests(), 1);
  // An id can come back after RemoveRequest, starting afresh.
  ASSERT_TRUE(evictor->RemoveRequest(4).ok());
  ASSERT_TRUE(evictor->AddRequest(4, 30).ok());
  EXPECT_EQ(evictor->State(4)->confirmed_length, 30);
  EXPECT_EQ(evictor->State(4)->generation_steps, 0);
}

TEST(EvictorConfigTest, ParseEvictionModeRoundTripsAndRejectsOthers) {
  for (EvictionMode mode :
       {EvictionMode::kUnion, EvictionMode::kPerHead, EvictionMode::kPerLayerPerHead}) {
    absl::StatusOr<EvictionMode> parsed = ParseEvictionMode(EvictionModeName(mode));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, mode);
  }
  EXPECT_EQ(EvictionModeName(EvictionMode::kPerLayerPerHead), "per_layer_perhead");
  for (const char* name : {"", "Union", "per-head", "per_layer_per_head", "union "}) {
    absl::StatusOr<EvictionMode> parsed = ParseEvictionMode(name);
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_THAT(parsed.status().message(), HasSubstr("union, per_head, per_layer_perhead"));
  }
  EXPECT_EQ(EvictionModeName(static_cast<EvictionMode>(9)), "unknown");
}

TEST(EvictorConfigTest, ValidateEvictorConfigNamesTheField) {
  EXPECT_TRUE(ValidateEvictorConfig(EvictorConfig{}).ok());
  struct Case {
    const char* field;
    void (*mutate)(EvictorConfig&);
  };
  const Case cases[] = {
      {"budget 0", [](EvictorConfig& c) { c.budget = 0; }},
      {"beta -1", [](EvictorConfig& c) { c.beta = -1; }},
      {"mode 9", [](EvictorConfig& c) { c.mode = static_cast<EvictionMode>(9); }},
      {"order 0", [](EvictorConfig& c) { c.order = static_cast<CompactionOrder>(0); }},
      {"num_offsets 0", [](EvictorConfig& c) { c.num_offsets = 0; }},
      {"num_offsets 63", [](EvictorConfig& c) { c.num_offsets = 63; }},
      {"device -1", [](EvictorConfig& c) { c.device = -1; }},
      {"max_batch 0", [](EvictorConfig& c) { c.max_batch = 0; }},
      {"max_decode_tokens -5", [](EvictorConfig& c) { c.max_decode_tokens = -5; }},
      {"max_decode_tokens 2175", [](EvictorConfig& c) { c.max_decode_tokens = 2175; }},
  };
  for (const Case& c : cases) {
    EvictorConfig config;
    c.mutate(config);
    absl::Status status = ValidateEvictorConfig(config);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_THAT(status.message(), HasSubstr(c.field));
  }
  EvictorConfig enough;
  enough.max_decode_tokens = 2048 + 128;
  EXPECT_TRUE(ValidateEvictorConfig(enough).ok());
}

TEST(EvictorCreateTest, GeometryErrorsNameBothSides) {
  std::mt19937_64 rng(9);
  HostCache cache = MakeHostCache(KvLayout::kHnd, rng);
  const EvictorConfig config = SmallConfig();
  absl::StatusOr<std::unique_ptr<Evictor>> created =
      Evictor::Create(config, MakeCalibration(3, rng), cache.view);
  EXPECT_EQ(created.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(created.status().message(), HasSubstr("calibration has 3 layers"));
  EXPECT_THAT(created.status().message(), HasSubstr("kv view 2"));

  Calibration wide = MakeCalibration(kLayers, rng);
  KvCacheView view128 = cache.view;
  view128.head_dim = 128;  // the pools are large enough for a check that never reads them
  created = Evictor::Create(config, wide, view128);
  EXPECT_EQ(created.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(created.status().message(), HasSubstr("32 bands"));
  EXPECT_THAT(created.status().message(), HasSubstr("head_dim 128"));

  KvCacheView three_heads = cache.view;
  three_heads.num_kv_heads = 3;
  created = Evictor::Create(config, wide, three_heads);
  EXPECT_EQ(created.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(created.status().message(), HasSubstr("4 query heads"));
  EXPECT_THAT(created.status().message(), HasSubstr("3 kv heads"));

  Calibration no_rope = wide;
  no_rope.omega.reset();
  created = Evictor::Create(config, no_rope, cache.view);
  EXPECT_EQ(created.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(created.status().message(), HasSubstr("FillCalibrationRope"));

  EvictorConfig bad = config;
  bad.budget = 0;
  created = Evictor::Create(bad, wide, cache.view);
  EXPECT_EQ(created.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(created.status().message(), HasSubstr("budget 0"));

  // max_decode_tokens 0 resolves to budget + 2 * beta + 64.
  created = Evictor::Create(config, wide, cache.view);
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ((*created)->config().max_decode_tokens, 32 + 2 * 16 + 64);
}

TEST(EvictorCreateTest, DeviceViewNeedsCuda) {
  std::mt19937_64 rng(10);
  HostCache cache = MakeHostCache(KvLayout::kHnd, rng);
  KvCacheView device_view = cache.view;
  device_view.memory = KvMemory::kDevice;
  absl::StatusOr<std::unique_ptr<Evictor>> created =
      Evictor::Create(SmallConfig(), MakeCalibration(kLayers, rng), device_view);
  if (created.ok()) {
    EXPECT_TRUE((*created)->on_gpu());  // a CUDA build on a GPU machine: nothing is launched
    return;
  }
  EXPECT_THAT(created.status().code(),
              ::testing::AnyOf(absl::StatusCode::kUnimplemented, absl::StatusCode::kUnavailable))
      << created.status();
}

void WriteConfigJson(const std::string& path, int layers, int kv_heads) {
  std::ofstream(path) << "{\"model_type\": \"llama\", \"num_hidden_layers\": " << layers
                      << ", \"num_attention_heads\": " << kQueryHeads
                      << ", \"num_key_value_heads\": " << kv_heads
                      << ", \"hidden_size\": 256, \"head_dim\": " << kHeadDim
                      << ", \"rope_theta\": " << kTheta << ", \"max_position_embeddings\": 4096}";
}

TEST(EvictorCreateTest, CreateFromFilesMatchesCreate) {
  std::mt19937_64 rng(11);
  const std::string dir = ::testing::TempDir();
  const std::string calibration_path = dir + "/evictor_test_calibration.safetensors";
  const std::string config_path = dir + "/evictor_test_config.json";
  const Calibration calibration = MakeCalibration(kLayers, rng);
  kvtier::testing::WriteSafetensorsCalibration(calibration, calibration_path);
  WriteConfigJson(config_path, kLayers, kKvHeads);

  HostCache from_files = MakeHostCache(KvLayout::kHnd, rng);
  HostCache in_memory = from_files.Clone();
  const EvictorConfig config = SmallConfig();
  absl::StatusOr<std::unique_ptr<Evictor>> loaded =
      Evictor::CreateFromFiles(config, calibration_path, config_path, from_files.view);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  std::unique_ptr<Evictor> direct = MakeEvictor(config, calibration, in_memory);
  ASSERT_NE(direct, nullptr);
  const std::vector<int32_t> table = BlockTables(1, 8, rng)[0];
  EngineRequest r1(1, 20, 0, table), r2(1, 20, 0, table);
  ASSERT_TRUE((*loaded)->AddRequest(1, 20).ok());
  ASSERT_TRUE(direct->AddRequest(1, 20).ok());
  StepWithoutRounds(**loaded, r1, 47);
  StepWithoutRounds(*direct, r2, 47);
  ASSERT_TRUE((*loaded)->OnGenerationStepEnd({r1.Step(1)}).ok());
  ASSERT_TRUE(direct->OnGenerationStepEnd({r2.Step(1)}).ok());
  EXPECT_TRUE(from_files.SameBytes(in_memory));

  const std::string other_config = dir + "/evictor_test_config3.json";
  WriteConfigJson(other_config, 3, kKvHeads);
  loaded = Evictor::CreateFromFiles(config, calibration_path, other_config, from_files.view);
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(loaded.status().message(), HasSubstr(other_config));

  WriteConfigJson(other_config, kLayers, 4);
  loaded = Evictor::CreateFromFiles(config, calibration_path, other_config, from_files.view);
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(loaded.status().message(), HasSubstr("4 kv heads, the kv view 2"));

  loaded = Evictor::CreateFromFiles(config, dir + "/no_such_calibration.pt", config_path,
                                    from_files.view);
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(loaded.status().message(), HasSubstr("no_such_calibration.pt"));
  std::remove(calibration_path.c_str());
  std::remove(config_path.c_str());
  std::remove(other_config.c_str());
}

}  // namespace
}  // namespace kvtier::triattention
