// Tests of one TriAttention round on the CPU (kv_view.h, scoring.h, compaction.h).
//  - Scores: keys are drawn pre-RoPE, rotated by their (gappy, as after earlier evictions)
//    absolute positions with omega and the attention factor a, stored in BF16 / FP16 / FP8 E4M3
//    in HND or NHD pages (separate or combined K|V pools) through the test's own address
//    arithmetic; a float64 oracle of the HF pre-RoPE form inverts the rotation and sums over
//    the offsets explicitly with cos(delta * omega + phi); the library's post-RoPE score must be
//    a times it. A second float64 oracle sums the post-RoPE form per offset.
//  - Selection: every mode against a stable-sort oracle, on scores with heavy ties and ragged
//    lengths.
//  - Compaction: byte-exact moves, prompt and other requests' pages untouched, freed pages.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "codec/dtype.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "triattention/calibration.h"
#include "triattention/compaction.h"
#include "triattention/kv_view.h"
#include "triattention/scoring.h"

namespace kvtier::triattention {
namespace {

using codec::DType;
using ::testing::HasSubstr;

struct CacheSpec {
  DType dtype = DType::kBf16;
  KvLayout layout = KvLayout::kHnd;
  KvPoolKind kind = KvPoolKind::kSeparate;
  int page = 16;
  int kv_heads = 2;
  int head_dim = 64;
  int layers = 2;
  int64_t num_pages = 32;
};

// Byte offset of a row in a pool, written out independently of KvStridesOf / KvRowAddress.
uint64_t RowOffset(const CacheSpec& s, bool value, int64_t page, int head, int slot) {
  const uint64_t row = codec::DTypeBytes(s.dtype) * s.head_dim;
  const uint64_t plane = row * s.page * s.kv_heads;
  const bool combined = s.kind == KvPoolKind::kCombined;
  uint64_t off = page * (combined ? 2 * plane : plane);
  if (value && combined) off += plane;
  if (s.layout == KvLayout::kHnd) {
    off += (static_cast<uint64_t>(head) * s.page + slot) * row;
  } else {
    off += (static_cast<uint64_t>(slot) * s.kv_heads + head) * row;
  }
  return off;
}

struct TestCache {
  CacheSpec spec;
  std::vector<std::vector<uint8_t>> k, v;  // per layer; v empty for combined pools
  KvCacheView view;

  uint64_t RowBytes() const { return codec::DTypeBytes(spec.dtype) * spec.head_dim; }
  uint8_t* Row(int layer, bool value, int64_t page, int head, int slot) {
    std::vector<uint8_t>& pool =
        (value && spec.kind == KvPoolKind::kSeparate) ? v[layer] : k[layer];
    return pool.data() + RowOffset(spec, value, page, head, slot);
  }
  // Row of physical token `token` of a request with block table `table`.
  uint8_t* TokenRow(const std::vector<int32_t>& table, int layer, bool value, int head,
                    int64_t token) {
    return Row(layer, value, table[token / spec.page], head, static_cast<int>(token % spec.page));
  }
};

TestCache MakeCache(const CacheSpec& spec, std::mt19937_64& rng) {
  TestCache c;
  c.spec = spec;
  const uint64_t plane = c.RowBytes() * spec.page * spec.kv_heads;
  const bool combined = spec.kind == KvPoolKind::kCombined;
  const uint64_t pool_bytes = spec.num_pages * plane * (combined ? 2 : 1);
  std::uniform_int_distribution<int> byte(0, 255);
  auto fill = [&](std::vector<uint8_t>& pool) {
    pool.resize(pool_bytes);
    for (uint8_t& b : pool) b = static_cast<uint8_t>(byte(rng));
  };
  c.k.resize(spec.layers);
  for (auto& p : c.k) fill(p);
  if (!combined) {
    c.v.resize(spec.layers);
    for (auto& p : c.v) fill(p);
  }
  c.view.num_pages = spec.num_pages;
  c.view.page_tokens = spec.page;
  c.view.num_kv_heads = spec.kv_heads;
  c.view.head_dim = spec.head_dim;
  c.view.dtype = spec.dtype;
  c.view.layout = spec.layout;
  c.view.pool_kind = spec.kind;
  for (int l = 0; l < spec.layers; ++l) {
    c.view.layers.push_back({c.k[l].data(), combined ? nullptr : c.v[l].data()});
  }
  return c;
}

// A block table of `pages` distinct random page ids.
std::vector<int32_t> RandomBlockTable(int64_t num_pages, int64_t pages, std::mt19937_64& rng) {
  std::vector<int32_t> all(num_pages);
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng);
  all.resize(pages);
  return all;
}

Calibration RandomCalibration(int layers, int heads, int bands, double theta, double a,
                              std::mt19937_64& rng) {
  Calibration c;
  c.layers = layers;
  c.heads = heads;
  c.bands = bands;
  c.head_dim = 2 * bands;
  c.rope_style = "half";
  const size_t n = static_cast<size_t>(layers) * heads * bands;
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (size_t i = 0; i < n; ++i) {
    const double scale = 0.2 + 3.0 * unit(rng);
    const float qr = static_cast<float>(scale * normal(rng));
    const float qi = static_cast<float>(scale * normal(rng));
    c.q_mean_real.push_back(qr);
    c.q_mean_imag.push_back(qi);
    c.q_abs_mean.push_back(static_cast<float>(std::hypot(qr, qi) * (1.0 + unit(rng))));
  }
  c.present.assign(static_cast<size_t>(layers) * heads, 1);
  std::vector<float> omega, fss;
  for (int f = 0; f < bands; ++f) {
    omega.push_back(static_cast<float>(std::pow(theta, -2.0 * f / (2.0 * bands))));
    fss.push_back(static_cast<float>(a * a));
  }
  c.omega = omega;
  c.freq_scale_sq = fss;
  return c;
}

struct ScoreCase {
  DType dtype;
  KvLayout layout;
  KvPoolKind kind;
  int page;
  int head_dim;
  int group;
};

std::string Describe(const ScoreCase& c) {
  return absl::StrCat(codec::DTypeName(c.dtype), c.layout == KvLayout::kHnd ? " HND" : " NHD",
                      c.kind == KvPoolKind::kCombined ? " combined" : " separate", " page ", c.page,
                      " head_dim ", c.head_dim, " group ", c.group);
}

TEST(RoundScoreTest, PostRopeScoresEqualHfOracleTimesAttentionFactor) {
  std::mt19937_64 rng(20261130);
  const double a = 1.2;  // YaRN-like attention factor: keys are stored times a
  const int layers = 2;
  const int kv_heads = 2;
  int case_index = 0;
  for (DType dtype : {DType::kBf16, DType::kFp16, DType::kFp8E4M3}) {
    for (KvLayout layout : {KvLayout::kHnd, KvLayout::kNhd}) {
      for (int page : {16, 32}) {
        for (int head_dim : {64, 128}) {
          for (int group : {1, 4, 6}) {
            const ScoreCase sc{
                dtype, layout,   (case_index++ % 2) ? KvPoolKind::kCombined : KvPoolKind::kSeparate,
                page,  head_dim, group};
            SCOPED_TRACE(Describe(sc));
            const int F = head_dim / 2;
            const int heads = kv_heads * group;
            Calibration cal = RandomCalibration(layers, heads, F, 1e6, a, rng);
            const std::vector<double> omega(cal.omega->begin(), cal.omega->end());
            const std::vector<double> fss(cal.freq_scale_sq->begin(), cal.freq_scale_sq->end());

            // Ragged request: prompt and decode lengths not multiples of the page.
            std::uniform_int_distribution<int64_t> len_dist(1, 2 * page + 5);
            const int64_t prompt = len_dist(rng);
            const int64_t decode = 3 + len_dist(rng);
            const int64_t tail = case_index % 3;
            const int64_t length = prompt + decode + tail;
            CacheSpec spec{dtype, layout, sc.kind, page, kv_heads, head_dim, layers, 24};
            TestCache cache = MakeCache(spec, rng);
            const int64_t pages = (length + page - 1) / page;
            std::vector<int32_t> table = RandomBlockTable(spec.num_pages, pages + 1, rng);
            KvRequestView request{table, length, prompt, tail};

            // Absolute positions with gaps (tokens evicted in earlier rounds).
            std::vector<int64_t> pos(length);
            std::uniform_int_distribution<int64_t> gap(0, 40);
            for (int64_t t = 0; t < length; ++t) {
              pos[t] = t < prompt ? t : pos[t - 1] + 1 + gap(rng);
            }
            const int64_t t0 = pos.back() + 1;

            // stored[l][g][t][d]: the values as stored (rounded to the dtype).
            std::vector<double> stored(static_cast<size_t>(layers) * kv_heads * length * head_dim);
            auto at = [&](int l, int g, int64_t t) {
              return ((static_cast<size_t>(l) * kv_heads + g) * length + t) * head_dim;
            };
            std::normal_distribution<double> normal(0.0, 1.0);
            for (int l = 0; l < layers; ++l) {
              for (int g = 0; g < kv_heads; ++g) {
                for (int64_t t = 0; t < length; ++t) {
                  uint8_t* row = cache.TokenRow(table, l, false, g, t);
                  for (int f = 0; f < F; ++f) {
                    const double kr = normal(rng), ki = normal(rng);
                    const double ang = static_cast<double>(pos[t]) * omega[f];
                    const double rr = a * (kr * std::cos(ang) - ki * std::sin(ang));
                    const double ri = a * (kr * std::sin(ang) + ki * std::cos(ang));
                    codec::StoreFromFloat(dtype, static_cast<float>(rr), row, f);
                    codec::StoreFromFloat(dtype, static_cast<float>(ri), row, f + F);
                    stored[at(l, g, t) + f] = codec::LoadAsFloat(dtype, row, f);
                    stored[at(l, g, t) + f + F] = codec::LoadAsFloat(dtype, row, f + F);
                  }
                }
              }
            }

            absl::StatusOr<RoundWeights> weights = BuildRoundWeights(cal, t0);
            ASSERT_TRUE(weights.ok()) << weights.status();
            absl::StatusOr<RoundScores> scores = ScoreRequest(*weights, cache.view, request);
            ASSERT_TRUE(scores.ok()) << scores.status();
            ASSERT_EQ(scores->tokens, decode);

            for (int l = 0; l < layers; ++l) {
              for (int h = 0; h < heads; ++h) {
                const int g = h / group;
                const size_t q = (static_cast<size_t>(l) * heads + h) * F;
                for (int64_t j = 0; j < decode; ++j) {
                  const int64_t t = prompt + j;
                  const double* k = &stored[at(l, g, t)];
                  // HF pre-RoPE oracle.
                  double hf = 0.0;
                  // Post-RoPE per-offset oracle, and the size of its terms.
                  double post = 0.0, magnitude = 0.0;
                  for (int f = 0; f < F; ++f) {
                    const double qr = cal.q_mean_real[q + f], qi = cal.q_mean_imag[q + f];
                    const double qabs = cal.q_abs_mean[q + f];
                    const double qmag = std::hypot(qr, qi);
                    // Invert the stored rotation: k = k_rot * e^{-i pos omega} / a.
                    const double ang = static_cast<double>(pos[t]) * omega[f];
                    const double kr = (k[f] * std::cos(ang) + k[f + F] * std::sin(ang)) / a;
                    const double ki = (k[f + F] * std::cos(ang) - k[f] * std::sin(ang)) / a;
                    const double kmag = std::hypot(kr, ki);
                    const double phi = std::atan2(qi * kr - qr * ki, qr * kr + qi * ki);
                    const double A = qr * k[f] + qi * k[f + F];
                    const double B = qi * k[f] - qr * k[f + F];
                    const double norm = (qabs - qmag) * std::hypot(k[f], k[f + F]);
                    for (int d = 0; d < kDefaultNumOffsets; ++d) {
                      const double delta = static_cast<double>(int64_t{1} << d);
                      const double big_delta = static_cast<double>(t0) + delta - pos[t];
                      hf += fss[f] * qmag * kmag * std::cos(big_delta * omega[f] + phi);
                      hf += fss[f] * (qabs - qmag) * kmag;
                      const double fut = (static_cast<double>(t0) + delta) * omega[f];
                      const double trig = A * std::cos(fut) - B * std::sin(fut);
                      post += fss[f] * (trig + norm);
                      magnitude += fss[f] * (std::abs(trig) + std::abs(norm));
                    }
                  }
                  hf /= kDefaultNumOffsets;
                  post /= kDefaultNumOffsets;
                  magnitude /= kDefaultNumOffsets;
                  const double got = scores->RowOf(l, h)[j];
                  // Float weights: the error is a float rounding of the terms' magnitude.
                  const double tol = 1e-3 * std::abs(a * hf) + 1e-6 * magnitude;
                  ASSERT_NEAR(got, a * hf, tol) << "l " << l << " h " << h << " token " << t;
                  ASSERT_NEAR(post, a * hf, 1e-9 * magnitude) << "l " << l << " h " << h;
                }
              }
            }
          }
        }
      }
    }
  }
}

TEST(RoundScoreTest, FoldedWeightsEqualPerOffsetSum) {
  std::mt19937_64 rng(7);
  Calibration cal = RandomCalibration(1, 2, 8, 1e4, 1.0, rng);
  const int64_t t0 = 123457;
  absl::StatusOr<RoundWeights> w = BuildRoundWeights(cal, t0, 5);
  ASSERT_TRUE(w.ok()) << w.status();
  for (size_t i = 0; i < w->w_cos.size(); ++i) {
    const int f = static_cast<int>(i % 8);
    const double om = (*cal.omega)[f];
    double wc = 0, ws = 0;
    for (int d = 0; d < 5; ++d) {
      const double ang = static_cast<double>(t0 + (1 << d)) * om;
      // cos-weight: d/dk_r of Re(q conj(k) e^{i ang}); sin-weight: d/dk_i.
      wc += (cal.q_mean_real[i] * std::cos(ang) - cal.q_mean_imag[i] * std::sin(ang)) / 5;
      ws += (cal.q_mean_real[i] * std::sin(ang) + cal.q_mean_imag[i] * std::cos(ang)) / 5;
    }
    EXPECT_NEAR(w->w_cos[i], wc, 1e-6 * (1 + std::abs(wc)));
    EXPECT_NEAR(w->w_sin[i], ws, 1e-6 * (1 + std::abs(ws)));
    EXPECT_NEAR(w->w_mag[i], cal.q_abs_mean[i] - std::hypot(cal.q_mean_real[i], cal.q_mean_imag[i]),
                1e-6);
  }
  Calibration bare = cal;
  bare.omega.reset();
  EXPECT_EQ(BuildRoundWeights(bare, t0).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(BuildRoundWeights(cal, -1).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(RoundScoreTest, NormalizeRowsUsesPopulationStdAndEpsilon) {
  RoundScores s;
  s.layers = 1;
  s.heads = 2;
  s.tokens = 4;
  s.values = {1, 2, 3, 4, 5, 5, 5, 5};
  NormalizeRows(&s);
  const double sd = std::sqrt(1.25);
  EXPECT_NEAR(s.values[0], -1.5 / sd, 1e-6);
  EXPECT_NEAR(s.values[3], 1.5 / sd, 1e-6);
  for (int i = 4; i < 8; ++i) EXPECT_EQ(s.values[i], 0.0f);
  // Spread below epsilon: divided by 1e-6, not by the tiny std.
  s.layers = 1;
  s.heads = 1;
  s.tokens = 2;
  s.values = {1.0f, 1.0f + 1.1920929e-07f};
  NormalizeRows(&s);
  EXPECT_NEAR(s.values[1], 0.5 * 1.1920929e-07 / 1e-6, 1e-3);
}

// Selection oracle: aggregate per the notes' definitions, then std::stable_sort by score
// descending (ties keep the lower index first), first `budget`, ascending, plus prompt.
std::vector<std::vector<int64_t>> OracleSelect(const RoundScores& s, EvictionMode mode, int G,
                                               int64_t budget, int64_t prompt) {
  const int group = s.heads / G;
  const int64_t T = s.tokens;
  auto gmax = [&](int l, int g, int64_t t) {
    double m = -INFINITY;
    for (int h = g * group; h < (g + 1) * group; ++h) {
      m = std::max(m, static_cast<double>(s.RowOf(l, h)[t]));
    }
    return m;
  };
  auto pick = [&](const std::vector<double>& agg) {
    std::vector<int64_t> idx(T);
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](int64_t x, int64_t y) { return agg[x] > agg[y]; });
    idx.resize(std::min(budget, T));
    std::sort(idx.begin(), idx.end());
    for (auto& i : idx) i += prompt;
    return idx;
  };
  std::vector<std::vector<int64_t>> out;
  if (mode == EvictionMode::kUnion) {
    std::vector<double> agg(T, -INFINITY);
    for (int l = 0; l < s.layers; ++l) {
      for (int h = 0; h < s.heads; ++h) {
        for (int64_t t = 0; t < T; ++t) agg[t] = std::max(agg[t], double{s.RowOf(l, h)[t]});
      }
    }
    out.push_back(pick(agg));
  } else if (mode == EvictionMode::kPerHead) {
    for (int g = 0; g < G; ++g) {
      std::vector<double> agg(T, 0.0);
      for (int l = 0; l < s.layers; ++l) {
        for (int64_t t = 0; t < T; ++t) agg[t] += gmax(l, g, t);
      }
      for (auto& v : agg) v /= s.layers;
      out.push_back(pick(agg));
    }
  } else {
    for (int l = 0; l < s.layers; ++l) {
      for (int g = 0; g < G; ++g) {
        std::vector<double> agg(T);
        for (int64_t t = 0; t < T; ++t) agg[t] = gmax(l, g, t);
        out.push_back(pick(agg));
      }
    }
  }
  return out;
}

TEST(RoundSelectTest, EveryModeMatchesStableSortOracleWithHeavyTies) {
  std::mt19937_64 rng(99);
  int checked = 0;
  for (int group : {1, 4, 6}) {
    for (int64_t T : {0, 1, 5, 37, 100, 257}) {
      for (int levels : {1, 3, 1000}) {  // 1 level: every score equal
        RoundScores s;
        s.layers = 3;
        s.heads = 2 * group;
        s.tokens = T;
        std::uniform_int_distribution<int> level(0, levels - 1);
        for (int64_t i = 0; i < s.layers * s.heads * T; ++i) {
          s.values.push_back(0.5f * static_cast<float>(level(rng)));
        }
        for (int64_t budget : {int64_t{0}, int64_t{1}, T / 2, T, T + 3}) {
          for (EvictionMode mode :
               {EvictionMode::kUnion, EvictionMode::kPerHead, EvictionMode::kPerLayerPerHead}) {
            SCOPED_TRACE(absl::StrCat("group ", group, " T ", T, " levels ", levels, " budget ",
                                      budget, " mode ", static_cast<int>(mode)));
            absl::StatusOr<KeptTokens> kept = SelectKeptTokens(s, mode, 2, budget, 11);
            ASSERT_TRUE(kept.ok()) << kept.status();
            EXPECT_EQ(kept->kept, std::min(budget, T));
            EXPECT_EQ(kept->sets, OracleSelect(s, mode, 2, budget, 11));
            for (int l = 0; l < 3; ++l) {
              for (int g = 0; g < 2; ++g) {
                EXPECT_EQ(kept->For(l, g).size(), static_cast<size_t>(kept->kept));
              }
            }
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_EQ(checked, 3 * 6 * 3 * 5 * 3);
}

TEST(RoundSelectTest, AllTiedKeepsLowestIndicesAndNanRanksLast) {
  RoundScores s;
  s.layers = 1;
  s.heads = 1;
  s.tokens = 6;
  s.values = {NAN, 2, 2, 2, 1, 2};
  absl::StatusOr<KeptTokens> kept = SelectKeptTokens(s, EvictionMode::kUnion, 1, 3, 0);
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(kept->sets[0], (std::vector<int64_t>{1, 2, 3}));
  kept = SelectKeptTokens(s, EvictionMode::kUnion, 1, 5, 100);
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(kept->sets[0], (std::vector<int64_t>{101, 102, 103, 104, 105}));
  EXPECT_EQ(SelectKeptTokens(s, EvictionMode::kPerHead, 4, 3, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// A random kept-token set of each mode over the decode region.
KeptTokens RandomKept(EvictionMode mode, int layers, int G, int64_t budget, int64_t begin,
                      int64_t end, std::mt19937_64& rng) {
  KeptTokens k;
  k.mode = mode;
  k.layers = layers;
  k.kv_heads = G;
  k.kept = budget;
  const int sets = mode == EvictionMode::kUnion     ? 1
                   : mode == EvictionMode::kPerHead ? G
                                                    : layers * G;
  for (int i = 0; i < sets; ++i) {
    std::vector<int64_t> all(end - begin);
    std::iota(all.begin(), all.end(), begin);
    std::shuffle(all.begin(), all.end(), rng);
    all.resize(budget);
    std::sort(all.begin(), all.end());
    k.sets.push_back(all);
  }
  return k;
}

TEST(RoundCompactionTest, MovesKeptAndTailExactlyAndFreesPagesPastNewLength) {
  std::mt19937_64 rng(4242);
  for (DType dtype : {DType::kBf16, DType::kFp8E4M3}) {
    for (KvLayout layout : {KvLayout::kHnd, KvLayout::kNhd}) {
      for (KvPoolKind kind : {KvPoolKind::kSeparate, KvPoolKind::kCombined}) {
        for (int page : {16, 32}) {
          for (EvictionMode mode :
               {EvictionMode::kUnion, EvictionMode::kPerHead, EvictionMode::kPerLayerPerHead}) {
            for (int64_t tail : {0, 3}) {
              SCOPED_TRACE(absl::StrCat(codec::DTypeName(dtype), " layout ",
                                        static_cast<int>(layout), " kind ", static_cast<int>(kind),
                                        " page ", page, " mode ", static_cast<int>(mode), " tail ",
                                        tail));
              CacheSpec spec{dtype, layout, kind, page, 3, 64, 2, 40};
              TestCache cache = MakeCache(spec, rng);
              const int64_t prompt = page + 7;
              const int64_t decode = 5 * page + 3;
              const int64_t length = prompt + decode + tail;
              const int64_t budget = 2 * page - 5;
              std::vector<int32_t> table =
                  RandomBlockTable(spec.num_pages, (length + page - 1) / page + 2, rng);
              KvRequestView request{table, length, prompt, tail};
              KeptTokens kept = RandomKept(mode, spec.layers, spec.kv_heads, budget, prompt,
                                           prompt + decode, rng);
              TestCache old = cache;  // a copy of the bytes; only its Row() is used

              absl::StatusOr<CompactionResult> r =
                  CompactRequest(cache.view, request, kept, CompactionOrder::kPreserveOrder);
              ASSERT_TRUE(r.ok()) << r.status();
              const int64_t new_len = prompt + budget + tail;
              EXPECT_EQ(r->new_length, new_len);
              const size_t pages_kept = (new_len + page - 1) / page;
              EXPECT_EQ(r->freed_pages,
                        std::vector<int32_t>(table.begin() + pages_kept, table.end()));

              const uint64_t rb = cache.RowBytes();
              for (int l = 0; l < spec.layers; ++l) {
                for (int g = 0; g < spec.kv_heads; ++g) {
                  for (bool value : {false, true}) {
                    auto same = [&](int64_t dst, int64_t src) {
                      return std::memcmp(cache.TokenRow(table, l, value, g, dst),
                                         old.TokenRow(table, l, value, g, src), rb) == 0;
                    };
                    for (int64_t t = 0; t < prompt; ++t) ASSERT_TRUE(same(t, t)) << "prompt " << t;
                    const std::vector<int64_t>& set = kept.For(l, g);
                    for (int64_t j = 0; j < budget; ++j) {
                      ASSERT_TRUE(same(prompt + j, set[j]))
                          << "l " << l << " g " << g << " v " << value << " kept " << j;
                    }
                    for (int64_t j = 0; j < tail; ++j) {
                      ASSERT_TRUE(same(prompt + budget + j, prompt + decode + j)) << "tail " << j;
                    }
                  }
                }
              }
              // Pages of other requests are untouched, byte for byte.
              std::vector<bool> mine(spec.num_pages, false);
              for (int32_t p : table) mine[p] = true;
              for (int l = 0; l < spec.layers; ++l) {
                for (int64_t p = 0; p < spec.num_pages; ++p) {
                  if (mine[p]) continue;
                  for (int g = 0; g < spec.kv_heads; ++g) {
                    for (int s = 0; s < page; ++s) {
                      for (bool value : {false, true}) {
                        ASSERT_EQ(std::memcmp(cache.Row(l, value, p, g, s),
                                              old.Row(l, value, p, g, s), rb),
                                  0)
                            << "page " << p;
                      }
                    }
                  }
                }
              }
            }
          }
        }
      }
    }
  }
}

// Fill-hole order: kept tokens inside [prompt, prompt + kept) stay, the ones past it fill the
// free slots in ascending order; the tail follows. A hand-checked case, then random sets whose
// (layer, head) rows must hold exactly the kept tokens (as a multiset) with nothing else changed.
TEST(RoundCompactionTest, FillHolesMovesOnlyTokensPastTheKeptRange) {
  std::mt19937_64 rng(77);
  CacheSpec spec{DType::kBf16, KvLayout::kNhd, KvPoolKind::kCombined, 16, 2, 64, 1, 4};
  TestCache cache = MakeCache(spec, rng);
  std::vector<int32_t> table = {2, 0};
  // prompt 2, decode [2, 8), tail 2 at [8, 10); kept {3, 5, 7}: slots 2..4 become 5, 3, 7.
  KvRequestView request{table, 10, 2, 2};
  KeptTokens kept;
  kept.mode = EvictionMode::kUnion;
  kept.layers = 1;
  kept.kv_heads = 2;
  kept.kept = 3;
  kept.sets = {{3, 5, 7}};
  TestCache old = cache;
  auto r = CompactRequest(cache.view, request, kept, CompactionOrder::kFillHoles);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->new_length, 7);
  const uint64_t rb = cache.RowBytes();
  const int64_t expected_source[] = {0, 1, 5, 3, 7, 8, 9};
  for (int g = 0; g < 2; ++g) {
    for (bool value : {false, true}) {
      for (int64_t t = 0; t < 7; ++t) {
        EXPECT_EQ(std::memcmp(cache.TokenRow(table, 0, value, g, t),
                              old.TokenRow(table, 0, value, g, expected_source[t]), rb),
                  0)
            << "token " << t << " head " << g << " v " << value;
      }
    }
  }
  EXPECT_TRUE(absl::IsInvalidArgument(
      CompactRequest(cache.view, request, kept, static_cast<CompactionOrder>(9)).status()));

  for (EvictionMode mode : {EvictionMode::kPerHead, EvictionMode::kPerLayerPerHead}) {
    CacheSpec big{DType::kFp8E4M3, KvLayout::kHnd, KvPoolKind::kSeparate, 16, 3, 64, 2, 40};
    TestCache c = MakeCache(big, rng);
    std::vector<int32_t> t = RandomBlockTable(big.num_pages, 12, rng);
    KvRequestView req{t, 180, 21, 2};
    KeptTokens k = RandomKept(mode, big.layers, big.kv_heads, 60, 21, 178, rng);
    TestCache before = c;
    auto res = CompactRequest(c.view, req, k, CompactionOrder::kFillHoles);
    ASSERT_TRUE(res.ok()) << res.status();
    for (int l = 0; l < big.layers; ++l) {
      for (int g = 0; g < big.kv_heads; ++g) {
        const std::vector<int64_t>& set = k.For(l, g);
        std::vector<std::string> want, got;
        for (int64_t src : set) {
          const uint8_t* row = before.TokenRow(t, l, false, g, src);
          want.emplace_back(row, row + c.RowBytes());
        }
        for (int64_t dst = 21; dst < 81; ++dst) {
          const uint8_t* row = c.TokenRow(t, l, false, g, dst);
          got.emplace_back(row, row + c.RowBytes());
          // A kept token already in the range has not moved.
          if (std::binary_search(set.begin(), set.end(), dst)) {
            EXPECT_EQ(std::memcmp(row, before.TokenRow(t, l, false, g, dst), c.RowBytes()), 0);
          }
        }
        std::sort(want.begin(), want.end());
        std::sort(got.begin(), got.end());
        EXPECT_EQ(got, want) << "layer " << l << " head " << g;
        for (int64_t j = 0; j < 2; ++j) {
          EXPECT_EQ(std::memcmp(c.TokenRow(t, l, true, g, 81 + j),
                                before.TokenRow(t, l, true, g, 178 + j), c.RowBytes()),
                    0);
        }
      }
    }
  }
}

// NaN and infinite scores stay out of a row's statistics and keep their value.
TEST(RoundScoreTest, NormalizeRowsIgnoresNonFiniteScores) {
  RoundScores s;
  s.layers = 1;
  s.heads = 2;
  s.tokens = 4;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  s.values = {1.0f, nan, 3.0f, inf, nan, nan, -inf, nan};
  NormalizeRows(&s);
  EXPECT_FLOAT_EQ(s.values[0], -1.0f);  // mean 2, std 1 over {1, 3}
  EXPECT_TRUE(std::isnan(s.values[1]));
  EXPECT_FLOAT_EQ(s.values[2], 1.0f);
  EXPECT_EQ(s.values[3], inf);
  EXPECT_EQ(s.values[6], -inf);  // a row without a finite score is left as it is
  auto kept = SelectKeptTokens(s, EvictionMode::kPerLayerPerHead, 2, 2, 0);
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(kept->sets[0], (std::vector<int64_t>{2, 3}));  // NaN below every number
}

TEST(RoundCompactionTest, RejectsBadKeptSetsWithoutWriting) {
  std::mt19937_64 rng(5);
  CacheSpec spec{DType::kBf16, KvLayout::kHnd, KvPoolKind::kSeparate, 16, 2, 64, 1, 8};
  TestCache cache = MakeCache(spec, rng);
  std::vector<int32_t> table = {3, 1, 6};
  KvRequestView request{table, 40, 10, 0};
  const std::vector<uint8_t> k_before = cache.k[0];
  KeptTokens kept = RandomKept(EvictionMode::kPerHead, 1, 2, 5, 10, 40, rng);
  std::swap(kept.sets[1][0], kept.sets[1][1]);
  absl::Status s = CompactRequest(cache.view, request, kept).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("ascending"));
  kept = RandomKept(EvictionMode::kUnion, 1, 2, 5, 10, 40, rng);
  kept.sets[0][0] = 9;  // a prompt token
  EXPECT_THAT(CompactRequest(cache.view, request, kept).status().message(),
              HasSubstr("decode region"));
  kept = RandomKept(EvictionMode::kPerLayerPerHead, 1, 2, 5, 10, 40, rng);
  kept.sets.pop_back();
  EXPECT_THAT(CompactRequest(cache.view, request, kept).status().message(), HasSubstr("sets"));
  EXPECT_EQ(cache.k[0], k_before);
}

// A whole round: score, normalise, select per head, compact; rescoring the compacted cache with
// the same weights gives every kept token its old score, bit for bit, although each KV head now
// holds a different token set (kept keys keep their rotation; no positions are tracked).
TEST(RoundEndToEndTest, KeptTokensKeepTheirScoresAfterCompaction) {
  std::mt19937_64 rng(31337);
  for (EvictionMode mode :
       {EvictionMode::kUnion, EvictionMode::kPerHead, EvictionMode::kPerLayerPerHead}) {
    SCOPED_TRACE(static_cast<int>(mode));
    CacheSpec spec{DType::kBf16, KvLayout::kNhd, KvPoolKind::kSeparate, 32, 2, 128, 3, 16};
    TestCache cache = MakeCache(spec, rng);
    Calibration cal = RandomCalibration(spec.layers, 8, 64, 1e6, 1.0, rng);
    std::vector<int32_t> table = RandomBlockTable(spec.num_pages, 8, rng);
    const int64_t prompt = 45, length = 240, tail = 2, budget = 64;
    std::normal_distribution<double> normal(0.0, 1.0);
    for (int l = 0; l < spec.layers; ++l) {
      for (int g = 0; g < spec.kv_heads; ++g) {
        for (int64_t t = 0; t < length; ++t) {
          uint8_t* row = cache.TokenRow(table, l, false, g, t);
          for (int d = 0; d < spec.head_dim; ++d) {
            codec::StoreFromFloat(DType::kBf16, static_cast<float>(normal(rng)), row, d);
          }
        }
      }
    }
    KvRequestView request{table, length, prompt, tail};
    absl::StatusOr<RoundWeights> w = BuildRoundWeights(cal, 5000);
    ASSERT_TRUE(w.ok()) << w.status();
    absl::StatusOr<RoundScores> raw = ScoreRequest(*w, cache.view, request);
    ASSERT_TRUE(raw.ok()) << raw.status();
    RoundScores z = *raw;
    NormalizeRows(&z);
    absl::StatusOr<KeptTokens> kept = SelectKeptTokens(z, mode, spec.kv_heads, budget, prompt);
    ASSERT_TRUE(kept.ok()) << kept.status();
    absl::StatusOr<CompactionResult> r =
        CompactRequest(cache.view, request, *kept, CompactionOrder::kPreserveOrder);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->new_length, prompt + budget + tail);
    EXPECT_EQ(r->freed_pages, std::vector<int32_t>(table.begin() + 4, table.end()));

    KvRequestView after{absl::MakeConstSpan(table).subspan(0, 4), r->new_length, prompt, tail};
    absl::StatusOr<RoundScores> again = ScoreRequest(*w, cache.view, after);
    ASSERT_TRUE(again.ok()) << again.status();
    ASSERT_EQ(again->tokens, budget);
    for (int l = 0; l < spec.layers; ++l) {
      for (int h = 0; h < 8; ++h) {
        const std::vector<int64_t>& set = kept->For(l, h / 4);
        for (int64_t j = 0; j < budget; ++j) {
          ASSERT_EQ(again->RowOf(l, h)[j], raw->RowOf(l, h)[set[j] - prompt])
              << "l " << l << " h " << h << " j " << j;
        }
      }
    }
  }
}

TEST(RoundKvViewTest, ValidationNamesTheField) {
  std::mt19937_64 rng(1);
  CacheSpec spec{DType::kFp16, KvLayout::kNhd, KvPoolKind::kSeparate, 16, 2, 128, 1, 8};
  TestCache cache = MakeCache(spec, rng);
  EXPECT_TRUE(ValidateKvCacheView(cache.view).ok());
  auto expect_bad = [](KvCacheView v, const char* field) {
    absl::Status s = ValidateKvCacheView(v);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_THAT(s.message(), HasSubstr(field));
  };
  KvCacheView v = cache.view;
  v.page_tokens = 8;
  expect_bad(v, "page_tokens 8");
  v = cache.view;
  v.head_dim = 96;
  expect_bad(v, "head_dim 96");
  v = cache.view;
  v.dtype = DType::kFp32;
  expect_bad(v, "dtype");
  v = cache.view;
  v.layers[0].v = nullptr;
  expect_bad(v, "layers[0].v");
  v = cache.view;
  v.num_kv_heads = 0;
  expect_bad(v, "num_kv_heads");

  const KvStrides s = KvStridesOf(cache.view);
  EXPECT_EQ(s.row_bytes, 256u);
  EXPECT_EQ(s.head, 256u);
  EXPECT_EQ(s.token, 512u);
  EXPECT_EQ(s.page, 16u * 512u);

  std::vector<int32_t> table = {1, 2};
  EXPECT_TRUE(ValidateKvRequest(cache.view, {table, 32, 4, 2}).ok());
  EXPECT_THAT(ValidateKvRequest(cache.view, {table, 33, 4, 0}).message(),
              HasSubstr("block_table has 2 pages"));
  std::vector<int32_t> dup = {1, 1};
  EXPECT_THAT(ValidateKvRequest(cache.view, {dup, 20, 4, 0}).message(), HasSubstr("twice"));
  std::vector<int32_t> out = {1, 8};
  EXPECT_THAT(ValidateKvRequest(cache.view, {out, 20, 4, 0}).message(),
              HasSubstr("block_table[1] = 8"));
  EXPECT_THAT(ValidateKvRequest(cache.view, {table, 20, 21, 0}).message(),
              HasSubstr("prompt_len 21"));
  EXPECT_THAT(ValidateKvRequest(cache.view, {table, 20, 4, 17}).message(),
              HasSubstr("protected_tail 17"));
}

// page_stride_bytes: 0 derives the stride, a larger multiple of 16 replaces it (pages holding
// more than this layer), anything below one page or off the 16-byte grid is refused.
TEST(RoundKvViewTest, PageStrideCoversAPageAndIsAMultipleOf16) {
  std::mt19937_64 rng(2);
  for (KvPoolKind kind : {KvPoolKind::kSeparate, KvPoolKind::kCombined}) {
    CacheSpec spec{DType::kFp16, KvLayout::kNhd, kind, 16, 2, 128, 1, 8};
    TestCache cache = MakeCache(spec, rng);
    const uint64_t plane = 16u * 2u * 256u;
    const uint64_t page = kind == KvPoolKind::kCombined ? 2 * plane : plane;
    ASSERT_EQ(KvStridesOf(cache.view).page, page);

    KvCacheView v = cache.view;
    for (uint64_t stride : {page, page + 16, 3 * 2 * plane}) {
      v.page_stride_bytes = stride;
      EXPECT_TRUE(ValidateKvCacheView(v).ok()) << stride;
      const KvStrides s = KvStridesOf(v);
      EXPECT_EQ(s.page, stride);
      EXPECT_EQ(s.plane, plane);  // the rest of the geometry is unchanged
      EXPECT_EQ(s.token, 512u);
      EXPECT_EQ(s.v_in_page, kind == KvPoolKind::kCombined ? plane : 0u);
    }
    for (uint64_t stride : {page - 16, uint64_t{16}, page + 8, 2 * page + 1}) {
      v.page_stride_bytes = stride;
      const absl::Status s = ValidateKvCacheView(v);
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << stride;
      EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("page_stride_bytes ", stride)));
    }
    // A combined pool's page is both planes: one plane is too small.
    if (kind == KvPoolKind::kCombined) {
      v.page_stride_bytes = plane;
      EXPECT_TRUE(absl::IsInvalidArgument(ValidateKvCacheView(v)));
    }
  }
}

}  // namespace
}  // namespace kvtier::triattention
