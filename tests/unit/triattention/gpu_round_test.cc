// The batched GPU round (triattention/gpu_round.h over kernels/kv_round*.cu) against the CPU
// reference on a real device, over dtypes (BF16, FP16, FP8 E4M3), head_dim 64 / 128 / 256, pages
// of 16 to 256 tokens, HND and NHD pages, separate and combined pools, GQA groups 1 to 16, the
// three modes and both compaction orders, pools whose pages hold every layer (page_stride_bytes),
// with ragged requests in one batch:
//  - raw scores of GPU and CPU within 1e-3 relative of a float64 oracle of the folded form;
//  - kept sets identical to the CPU's (ScoreRequest, NormalizeRows, SelectKeptTokens);
//  - every pool byte after the round equal to the CPU's CompactRequest applied with the GPU's
//    sets: kept rows byte-exact, prompts, tails and other pages untouched.
// Also heavy ties, FP8 NaN keys, a round captured in a CUDA graph and replayed on new requests,
// and the host-side errors. Skips where there is no CUDA build or no device.
#include "triattention/gpu_round.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "codec/dtype.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/device.h"
#include "kernels/kv_round.h"
#include "tests/unit/triattention/stream_graph.h"
#include "triattention/compaction.h"
#include "triattention/evictor.h"
#include "triattention/scoring.h"

namespace kvtier::triattention {
namespace {

using codec::DType;
using ::testing::HasSubstr;

// Skips the test unless a CUDA device is usable (in a build without CUDA, ListDevices is
// Unimplemented).
#define REQUIRE_GPU()                                                                     \
  do {                                                                                    \
    auto devices = kernels::ListDevices();                                                \
    if (!devices.ok() || devices->empty()) {                                              \
      GTEST_SKIP() << "no CUDA device: "                                                  \
                   << (devices.ok() ? std::string("none") : devices.status().ToString()); \
    }                                                                                     \
  } while (0)

struct Geometry {
  DType dtype = DType::kBf16;
  int head_dim = 128;
  int page = 32;
  KvLayout layout = KvLayout::kHnd;
  KvPoolKind kind = KvPoolKind::kSeparate;
  int layers = 2;
  int kv_heads = 2;
  int group = 4;
  int64_t num_pages = 96;
  // One pool for every layer, a kvtier layout: each page holds layer 0's K and V planes, then
  // layer 1's, ..., so layer l's K starts 2l planes into the pool, its V 2l + 1 planes in (the
  // second plane of the page for a combined pool), and page_stride_bytes = layers * 2 * plane.
  bool all_layers_in_page = false;
};

struct RoundConfig {
  EvictionMode mode = EvictionMode::kUnion;
  CompactionOrder order = CompactionOrder::kFillHoles;
  bool normalize = true;
  int64_t budget = 96;
};

std::string Describe(const Geometry& g, const RoundConfig& c) {
  return absl::StrCat(codec::DTypeName(g.dtype), " d", g.head_dim, " p", g.page,
                      g.layout == KvLayout::kHnd ? " HND" : " NHD",
                      g.kind == KvPoolKind::kCombined ? " combined" : " separate",
                      g.all_layers_in_page ? " all-layer pages" : "", " G", g.kv_heads, " group",
                      g.group, " mode", static_cast<int>(c.mode), " order",
                      static_cast<int>(c.order), c.normalize ? "" : " raw");
}

// Host pools and their device copies.
struct Cache {
  Geometry geo;
  // Per pool: layer l's K at 2l, V at 2l + 1 (separate), or one pool (all_layers_in_page).
  std::vector<std::vector<uint8_t>> host;
  std::vector<void*> device;
  KvCacheView host_view, device_view;

  ~Cache() {
    for (void* p : device) kernels::FreeDeviceMemory(p);
  }
  uint64_t PlaneBytes() const {
    return codec::DTypeBytes(geo.dtype) * geo.head_dim * geo.page * geo.kv_heads;
  }
  // 0 for pools of one layer (the derived stride).
  uint64_t PageStride() const { return geo.all_layers_in_page ? geo.layers * 2 * PlaneBytes() : 0; }
  uint64_t PoolBytes() const {
    if (geo.all_layers_in_page) return geo.num_pages * PageStride();
    return geo.num_pages * PlaneBytes() * (geo.kind == KvPoolKind::kCombined ? 2 : 1);
  }
  // Points view->layers at the pools whose bases are `pools` (laid out as `host`).
  void PointLayers(const std::vector<uint8_t*>& pools, KvCacheView* view) const {
    const bool combined = geo.kind == KvPoolKind::kCombined;
    view->layers.clear();
    for (int l = 0; l < geo.layers; ++l) {
      if (geo.all_layers_in_page) {
        uint8_t* k = pools[0] + 2 * l * PlaneBytes();
        view->layers.push_back({k, combined ? nullptr : k + PlaneBytes()});
      } else if (combined) {
        view->layers.push_back({pools[l], nullptr});
      } else {
        view->layers.push_back({pools[2 * l], pools[2 * l + 1]});
      }
    }
  }
  void Upload() {
    for (size_t i = 0; i < host.size(); ++i) {
      ASSERT_TRUE(kernels::CopyAsync(device[i], host[i].data(), host[i].size(), nullptr).ok());
    }
    ASSERT_TRUE(kernels::SynchronizeStream(nullptr).ok());
  }
  std::vector<std::vector<uint8_t>> Download() const {
    std::vector<std::vector<uint8_t>> out(host.size());
    for (size_t i = 0; i < host.size(); ++i) {
      out[i].resize(host[i].size());
      EXPECT_TRUE(kernels::CopyAsync(out[i].data(), device[i], out[i].size(), nullptr).ok());
    }
    EXPECT_TRUE(kernels::SynchronizeStream(nullptr).ok());
    return out;
  }
};

std::unique_ptr<Cache> MakeCache(const Geometry& geo, std::mt19937_64& rng) {
  auto c = std::make_unique<Cache>();
  c->geo = geo;
  const bool combined = geo.kind == KvPoolKind::kCombined;
  const int pools = geo.all_layers_in_page ? 1 : geo.layers * (combined ? 1 : 2);
  const uint64_t bytes = c->PoolBytes();
  const size_t elems = bytes / codec::DTypeBytes(geo.dtype);
  // Per-band scales so the bands matter unequally, as in real keys.
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int p = 0; p < pools; ++p) {
    std::vector<uint8_t> pool(bytes);
    for (size_t i = 0; i < elems; ++i) {
      const float scale = 0.25f + static_cast<float>(i % geo.head_dim) / geo.head_dim;
      codec::StoreFromFloat(geo.dtype, 2.0f * scale * normal(rng), pool.data(), i);
    }
    c->host.push_back(std::move(pool));
    auto mem = kernels::AllocateDeviceMemory(0, bytes);
    EXPECT_TRUE(mem.ok()) << mem.status();
    c->device.push_back(mem.ok() ? *mem : nullptr);
  }
  for (KvCacheView* view : {&c->host_view, &c->device_view}) {
    view->num_pages = geo.num_pages;
    view->page_tokens = geo.page;
    view->num_kv_heads = geo.kv_heads;
    view->head_dim = geo.head_dim;
    view->dtype = geo.dtype;
    view->layout = geo.layout;
    view->pool_kind = geo.kind;
    view->page_stride_bytes = c->PageStride();
    const bool dev = view == &c->device_view;
    view->memory = dev ? KvMemory::kDevice : KvMemory::kHost;
    std::vector<uint8_t*> bases;
    for (int p = 0; p < pools; ++p) {
      bases.push_back(dev ? static_cast<uint8_t*>(c->device[p]) : c->host[p].data());
    }
    c->PointLayers(bases, view);
  }
  return c;
}

Calibration MakeCalibration(const Geometry& geo, std::mt19937_64& rng) {
  Calibration c;
  c.layers = geo.layers;
  c.heads = geo.kv_heads * geo.group;
  c.bands = geo.head_dim / 2;
  c.head_dim = geo.head_dim;
  c.rope_style = "half";
  const size_t n = static_cast<size_t>(c.layers) * c.heads * c.bands;
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
  c.present.assign(static_cast<size_t>(c.layers) * c.heads, 1);
  std::vector<float> omega, fss;
  for (int f = 0; f < c.bands; ++f) {
    omega.push_back(static_cast<float>(std::pow(1e6, -2.0 * f / geo.head_dim)));
    fss.push_back(1.0f + 0.1f * static_cast<float>(f % 3));
  }
  c.omega = omega;
  c.freq_scale_sq = fss;
  return c;
}

struct Request {
  std::vector<int32_t> table;
  KvRequestView view;
  int64_t round_start = 0;
};

// Requests with disjoint random pages: decode regions of about `max_decode` tokens (request 1 a
// third of it, so it keeps everything), prompts of up to 70 tokens (none for every third), tails
// of 0 to 3 tokens.
std::vector<Request> MakeRequests(const Geometry& geo, int count, int64_t max_decode,
                                  std::mt19937_64& rng) {
  std::vector<int32_t> pages(geo.num_pages);
  std::iota(pages.begin(), pages.end(), 0);
  std::shuffle(pages.begin(), pages.end(), rng);
  std::vector<Request> out(count);  // never resized: the views point into the tables
  size_t next = 0;
  for (int i = 0; i < count; ++i) {
    Request& r = out[i];
    const int64_t prompt = (i % 3 == 0) ? 0 : static_cast<int64_t>(rng() % 70);
    const int64_t decode = i == 1 ? max_decode / 3 : max_decode - static_cast<int64_t>(rng() % 40);
    const int64_t tail = static_cast<int64_t>(rng() % 4);
    const int64_t length = prompt + decode + tail;
    const size_t need = static_cast<size_t>((length + geo.page - 1) / geo.page);
    if (next + need > pages.size()) {
      ADD_FAILURE() << "test cache of " << geo.num_pages << " pages is too small";
      out.resize(i);
      return out;
    }
    r.table.assign(pages.begin() + next, pages.begin() + next + need);
    next += need;
    r.view.block_table = r.table;
    r.view.length = length;
    r.view.prompt_len = prompt;
    r.view.protected_tail = tail;
    r.round_start = length + static_cast<int64_t>(rng() % 5000);
  }
  return out;
}

// float64 oracle of the folded post-RoPE score, and the sum of the absolute terms (for the
// tolerance of scores that cancel).
void OracleScores(const Calibration& cal, const KvCacheView& view, const KvRequestView& req,
                  int64_t t0, std::vector<double>* scores, std::vector<double>* magnitude) {
  const int F = cal.bands;
  const int group = cal.heads / view.num_kv_heads;
  const int64_t T = req.DecodeTokens();
  const KvStrides strides = KvStridesOf(view);
  scores->assign(static_cast<size_t>(cal.layers) * cal.heads * T, 0.0);
  magnitude->assign(scores->size(), 0.0);
  std::vector<double> mc(F), ms(F);
  for (int f = 0; f < F; ++f) {
    double c = 0, s = 0;
    for (int d = 0; d < kDefaultNumOffsets; ++d) {
      const double angle = static_cast<double>(t0 + (int64_t{1} << d)) * (*cal.omega)[f];
      c += std::cos(angle);
      s += std::sin(angle);
    }
    mc[f] = c / kDefaultNumOffsets;
    ms[f] = s / kDefaultNumOffsets;
  }
  for (int l = 0; l < cal.layers; ++l) {
    for (int h = 0; h < cal.heads; ++h) {
      for (int64_t t = 0; t < T; ++t) {
        const uint8_t* key =
            KvRowAddress(view, strides, req, l, false, h / group, req.prompt_len + t);
        double acc = 0, mag = 0;
        for (int f = 0; f < F; ++f) {
          const size_t i = (static_cast<size_t>(l) * cal.heads + h) * F + f;
          const double scale = (*cal.freq_scale_sq)[f];
          const double qr = cal.q_mean_real[i], qi = cal.q_mean_imag[i];
          const double wc = scale * (qr * mc[f] - qi * ms[f]);
          const double ws = scale * (qr * ms[f] + qi * mc[f]);
          const double wm = scale * (cal.q_abs_mean[i] - std::hypot(qr, qi));
          const double kr = codec::LoadAsFloat(view.dtype, key, f);
          const double ki = codec::LoadAsFloat(view.dtype, key, f + F);
          const double terms[3] = {kr * wc, ki * ws, std::hypot(kr, ki) * wm};
          for (double x : terms) {
            acc += x;
            mag += std::abs(x);
          }
        }
        const size_t at = (static_cast<size_t>(l) * cal.heads + h) * T + t;
        (*scores)[at] = acc;
        (*magnitude)[at] = mag;
      }
    }
  }
}

// Runs one GPU round over `requests` and checks it against the CPU reference.
void CheckRound(const Geometry& geo, const RoundConfig& rc, uint64_t seed, int count = 4,
                bool ties = false, bool nan_keys = false) {
  SCOPED_TRACE(Describe(geo, rc));
  std::mt19937_64 rng(seed);
  auto cache = MakeCache(geo, rng);
  const Calibration cal = MakeCalibration(geo, rng);
  std::vector<Request> requests = MakeRequests(geo, count, rc.budget * 3, rng);
  const KvStrides strides = KvStridesOf(cache->host_view);
  if (ties || nan_keys) {
    // Ties: every key of a request is one of three rows. NaN: one key in nine gets a NaN byte.
    for (Request& r : requests) {
      for (int l = 0; l < geo.layers; ++l) {
        for (int g = 0; g < geo.kv_heads; ++g) {
          for (int64_t t = r.view.prompt_len; t < r.view.DecodeEnd(); ++t) {
            uint8_t* row = KvRowAddress(cache->host_view, strides, r.view, l, false, g, t);
            if (ties) {
              const int64_t src = r.view.prompt_len + (t * 7) % 3;
              if (src != t && src < r.view.DecodeEnd()) {
                std::memcpy(row, KvRowAddress(cache->host_view, strides, r.view, l, false, g, src),
                            strides.row_bytes);
              }
            }
            if (nan_keys && t % 9 == 4) row[(t * 5) % strides.row_bytes] = 0x7f;
          }
        }
      }
    }
  }
  cache->Upload();
  GpuRoundOptions options;
  options.max_requests = count;
  options.max_decode_tokens = rc.budget * 3 + 64;
  options.budget = rc.budget;
  options.mode = rc.mode;
  options.normalize = rc.normalize;
  options.order = rc.order;
  auto round = GpuRound::Create(cal, cache->device_view, options);
  ASSERT_TRUE(round.ok()) << round.status();
  std::vector<KvRequestView> views;
  std::vector<int64_t> starts;
  for (const Request& r : requests) {
    views.push_back(r.view);
    starts.push_back(r.round_start);
  }
  void* stream = kernels::PerThreadStream();
  ASSERT_TRUE((*round)->Enqueue(views, starts, stream).ok());

  std::vector<std::vector<uint8_t>> expected = cache->host;  // CPU compaction target
  KvCacheView expected_view = cache->host_view;
  std::vector<uint8_t*> expected_bases;
  for (std::vector<uint8_t>& pool : expected) expected_bases.push_back(pool.data());
  cache->PointLayers(expected_bases, &expected_view);
  for (size_t i = 0; i < requests.size(); ++i) {
    SCOPED_TRACE(absl::StrCat("request ", i, " prompt ", views[i].prompt_len, " decode ",
                              views[i].DecodeTokens(), " tail ", views[i].protected_tail));
    auto weights = BuildRoundWeights(cal, starts[i]);
    ASSERT_TRUE(weights.ok());
    auto cpu = ScoreRequest(*weights, cache->host_view, views[i]);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    auto gpu = (*round)->RawScores(static_cast<int>(i), stream);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    ASSERT_EQ(gpu->values.size(), cpu->values.size());
    if (!nan_keys) {
      std::vector<double> oracle, magnitude;
      OracleScores(cal, cache->host_view, views[i], starts[i], &oracle, &magnitude);
      int bad = 0;
      for (size_t j = 0; j < oracle.size() && bad < 5; ++j) {
        const double tol = 1e-3 * std::abs(oracle[j]) + 1e-6 * magnitude[j];
        if (std::abs(gpu->values[j] - oracle[j]) > tol ||
            std::abs(cpu->values[j] - oracle[j]) > tol) {
          ADD_FAILURE() << "score " << j << ": gpu " << gpu->values[j] << " cpu " << cpu->values[j]
                        << " oracle " << oracle[j];
          ++bad;
        }
      }
    }
    // Selection: the CPU's, from the GPU's raw scores, exactly (ties to the lowest index). From
    // the CPU's own scores too, exactly where the scores cannot tie closely (ties: three
    // distinct keys per row), else all but a few tokens at the boundary (the two backends'
    // scores differ by rounding).
    auto gpu_kept = (*round)->Kept(static_cast<int>(i), stream);
    ASSERT_TRUE(gpu_kept.ok()) << gpu_kept.status();
    for (const bool from_gpu : {true, false}) {
      RoundScores source = from_gpu ? *gpu : *cpu;
      if (rc.normalize) NormalizeRows(&source);
      auto cpu_kept =
          SelectKeptTokens(source, rc.mode, geo.kv_heads, rc.budget, views[i].prompt_len);
      ASSERT_TRUE(cpu_kept.ok()) << cpu_kept.status();
      EXPECT_EQ(gpu_kept->kept, cpu_kept->kept);
      ASSERT_EQ(gpu_kept->sets.size(), cpu_kept->sets.size());
      int64_t differing = 0, total = 0;
      for (size_t set = 0; set < cpu_kept->sets.size(); ++set) {
        const auto& a = gpu_kept->sets[set];
        const auto& b = cpu_kept->sets[set];
        if (from_gpu || ties) {
          EXPECT_EQ(a, b) << "set " << set << (from_gpu ? " (GPU scores)" : " (CPU scores)");
        }
        std::vector<int64_t> only;
        std::set_difference(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(only));
        differing += static_cast<int64_t>(only.size());
        total += static_cast<int64_t>(b.size());
      }
      EXPECT_LE(differing * 200, total + 200) << differing << " of " << total << " kept differ";
    }
    KvRequestView expected_request = views[i];
    auto result = CompactRequest(expected_view, expected_request, *gpu_kept, rc.order);
    ASSERT_TRUE(result.ok()) << result.status();
  }
  const auto after = cache->Download();
  for (size_t p = 0; p < after.size(); ++p) {
    if (after[p] == expected[p]) continue;
    size_t first = 0;
    while (after[p][first] == expected[p][first]) ++first;
    ADD_FAILURE() << "pool " << p << " differs from the CPU compaction first at byte " << first;
  }
}

TEST(GpuRoundTest, MatchesCpuReferenceAcrossGeometries) {
  REQUIRE_GPU();
  struct Case {
    Geometry geo;
    RoundConfig rc;
  };
  const Case cases[] = {
      {{DType::kBf16, 128, 32, KvLayout::kHnd, KvPoolKind::kSeparate, 2, 2, 4},
       {EvictionMode::kUnion, CompactionOrder::kFillHoles, true, 96}},
      {{DType::kBf16, 128, 32, KvLayout::kHnd, KvPoolKind::kCombined, 2, 2, 4},
       {EvictionMode::kPerHead, CompactionOrder::kPreserveOrder, true, 96}},
      {{DType::kFp16, 64, 16, KvLayout::kNhd, KvPoolKind::kSeparate, 3, 3, 5},
       {EvictionMode::kPerLayerPerHead, CompactionOrder::kFillHoles, true, 80}},
      {{DType::kFp8E4M3, 256, 64, KvLayout::kNhd, KvPoolKind::kCombined, 2, 1, 16},
       {EvictionMode::kUnion, CompactionOrder::kPreserveOrder, true, 100}},
      {{DType::kBf16, 64, 256, KvLayout::kHnd, KvPoolKind::kSeparate, 2, 4, 1, 24},
       {EvictionMode::kPerHead, CompactionOrder::kFillHoles, false, 128}},
      {{DType::kFp16, 256, 128, KvLayout::kHnd, KvPoolKind::kSeparate, 2, 2, 2, 48},
       {EvictionMode::kPerLayerPerHead, CompactionOrder::kPreserveOrder, true, 90}},
      {{DType::kFp8E4M3, 128, 16, KvLayout::kHnd, KvPoolKind::kSeparate, 2, 8, 7},
       {EvictionMode::kUnion, CompactionOrder::kFillHoles, true, 64}},
      {{DType::kBf16, 256, 16, KvLayout::kNhd, KvPoolKind::kSeparate, 1, 2, 8},
       {EvictionMode::kPerHead, CompactionOrder::kFillHoles, true, 70}},
      {{DType::kFp8E4M3, 64, 32, KvLayout::kNhd, KvPoolKind::kSeparate, 2, 2, 3},
       {EvictionMode::kPerLayerPerHead, CompactionOrder::kPreserveOrder, false, 50}},
      // A page size that is not a power of two.
      {{DType::kBf16, 64, 24, KvLayout::kNhd, KvPoolKind::kCombined, 2, 2, 2},
       {EvictionMode::kUnion, CompactionOrder::kFillHoles, true, 60}},
  };
  uint64_t seed = 1;
  for (const Case& c : cases) CheckRound(c.geo, c.rc, seed++);
}

// Pools whose pages hold every layer's K and V end to end (a kvtier layout, page_stride_bytes =
// layers * 2 * plane): the round reads and moves each layer's rows through the larger stride and
// leaves the other layers' planes of every page alone (the whole pool is compared).
TEST(GpuRoundTest, PagesHoldingEveryLayerMatchCpuReference) {
  REQUIRE_GPU();
  struct Case {
    Geometry geo;
    RoundConfig rc;
  };
  const Case cases[] = {
      {{DType::kBf16, 128, 32, KvLayout::kHnd, KvPoolKind::kSeparate, 3, 2, 4, 96, true},
       {EvictionMode::kPerLayerPerHead, CompactionOrder::kFillHoles, true, 96}},
      {{DType::kFp16, 64, 16, KvLayout::kNhd, KvPoolKind::kCombined, 2, 3, 2, 96, true},
       {EvictionMode::kUnion, CompactionOrder::kPreserveOrder, true, 80}},
      {{DType::kFp8E4M3, 128, 16, KvLayout::kHnd, KvPoolKind::kSeparate, 2, 2, 4, 96, true},
       {EvictionMode::kPerHead, CompactionOrder::kPreserveOrder, false, 64}},
  };
  uint64_t seed = 800;
  for (const Case& c : cases) CheckRound(c.geo, c.rc, seed++);
}

TEST(GpuRoundTest, HeavyTiesSelectLowestIndices) {
  REQUIRE_GPU();
  for (EvictionMode mode :
       {EvictionMode::kUnion, EvictionMode::kPerHead, EvictionMode::kPerLayerPerHead}) {
    Geometry geo{DType::kBf16, 128, 16, KvLayout::kHnd, KvPoolKind::kSeparate, 2, 2, 4};
    CheckRound(geo, {mode, CompactionOrder::kFillHoles, true, 60}, 100 + static_cast<int>(mode), 4,
               /*ties=*/true);
  }
}

TEST(GpuRoundTest, Fp8NanKeysRankLowestAndLeaveStatisticsAlone) {
  REQUIRE_GPU();
  Geometry geo{DType::kFp8E4M3, 128, 32, KvLayout::kNhd, KvPoolKind::kSeparate, 2, 2, 4};
  for (EvictionMode mode : {EvictionMode::kUnion, EvictionMode::kPerLayerPerHead}) {
    CheckRound(geo, {mode, CompactionOrder::kFillHoles, true, 80}, 200 + static_cast<int>(mode), 3,
               false, /*nan_keys=*/true);
  }
}

TEST(GpuRoundTest, BatchOfManyRequests) {
  REQUIRE_GPU();
  Geometry geo{DType::kBf16, 128, 32, KvLayout::kHnd, KvPoolKind::kSeparate, 2, 2, 4, 400};
  CheckRound(geo, {EvictionMode::kPerHead, CompactionOrder::kFillHoles, true, 40}, 300, 24);
}

TEST(GpuRoundTest, CapturedGraphReplaysOnNewRequests) {
  REQUIRE_GPU();
  Geometry geo{DType::kBf16, 128, 32, KvLayout::kHnd, KvPoolKind::kSeparate, 2, 2, 4};
  std::mt19937_64 rng(400);
  auto cache = MakeCache(geo, rng);
  const Calibration cal = MakeCalibration(geo, rng);
  cache->Upload();
  GpuRoundOptions options;
  options.max_requests = 2;
  options.max_decode_tokens = 400;
  options.budget = 64;
  auto round = GpuRound::Create(cal, cache->device_view, options);
  ASSERT_TRUE(round.ok()) << round.status();
  auto created = kernels::CreateStream(0);
  ASSERT_TRUE(created.ok()) << created.status();
  std::unique_ptr<void, void (*)(void*)> stream_owner(*created, &kernels::DestroyStream);
  void* const stream = *created;

  // Capture with one set of requests, then Stage different ones and replay.
  std::vector<Request> first = MakeRequests(geo, 2, 150, rng);
  std::vector<KvRequestView> views;
  std::vector<int64_t> starts;
  for (const Request& r : first) {
    views.push_back(r.view);
    starts.push_back(r.round_start);
  }
  ASSERT_TRUE((*round)->Stage(views, starts, stream).ok());
  auto graph = StreamGraph::Capture(stream, [&] { return (*round)->Launch(stream); });
  ASSERT_TRUE(graph.ok()) << graph.status();

  std::vector<Request> second = MakeRequests(geo, 2, 180, rng);
  views.clear();
  starts.clear();
  for (const Request& r : second) {
    views.push_back(r.view);
    starts.push_back(r.round_start + 777);
  }
  std::vector<std::vector<uint8_t>> expected = cache->host;
  KvCacheView expected_view = cache->host_view;
  for (int l = 0; l < geo.layers; ++l) {
    expected_view.layers[l] = {expected[2 * l].data(), expected[2 * l + 1].data()};
  }
  auto grown = (*round)->Stage(views, starts, stream);
  ASSERT_TRUE(grown.ok());
  ASSERT_FALSE(*grown);
  ASSERT_TRUE((*graph)->Launch(stream).ok());
  ASSERT_TRUE(kernels::SynchronizeStream(stream).ok());
  // The replay worked on the second requests: its scores are theirs, its selection the CPU's
  // from those scores, and the pools what the CPU compaction makes of them.
  for (size_t i = 0; i < views.size(); ++i) {
    auto weights = BuildRoundWeights(cal, starts[i]);
    ASSERT_TRUE(weights.ok());
    auto cpu = ScoreRequest(*weights, cache->host_view, views[i]);
    ASSERT_TRUE(cpu.ok());
    auto gpu = (*round)->RawScores(static_cast<int>(i), stream);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    ASSERT_EQ(gpu->values.size(), cpu->values.size());
    for (size_t j = 0; j < cpu->values.size(); ++j) {
      ASSERT_NEAR(gpu->values[j], cpu->values[j], 1e-3 * (1.0 + std::abs(cpu->values[j])));
    }
    NormalizeRows(&*gpu);
    auto cpu_kept =
        SelectKeptTokens(*gpu, EvictionMode::kUnion, geo.kv_heads, 64, views[i].prompt_len);
    ASSERT_TRUE(cpu_kept.ok());
    auto gpu_kept = (*round)->Kept(static_cast<int>(i), stream);
    ASSERT_TRUE(gpu_kept.ok());
    EXPECT_EQ(gpu_kept->sets, cpu_kept->sets) << "request " << i;
    ASSERT_TRUE(
        CompactRequest(expected_view, views[i], *gpu_kept, CompactionOrder::kFillHoles).ok());
  }
  EXPECT_TRUE(cache->Download() == expected);
}

// The Evictor on a device view and on a host copy of the same cache, driven through the same
// steps (two requests generating past budget + beta, one with a speculative step): the same
// outcomes every step, and after the rounds every (layer, KV head) of every request holds kept
// rows that are all rows of the original cache (nothing invented) with at most a few tokens
// chosen differently at the selection boundary.
TEST(GpuRoundTest, EvictorOnDeviceMatchesEvictorOnHost) {
  REQUIRE_GPU();
  Geometry geo{DType::kBf16, 128, 32, KvLayout::kHnd, KvPoolKind::kSeparate, 2, 2, 4, 64};
  std::mt19937_64 rng(600);
  auto cache = MakeCache(geo, rng);
  const Calibration cal = MakeCalibration(geo, rng);
  cache->Upload();
  const auto original = cache->host;
  EvictorConfig config;
  config.budget = 100;
  config.beta = 32;
  config.max_batch = 2;
  auto on_gpu = Evictor::Create(config, cal, cache->device_view);
  ASSERT_TRUE(on_gpu.ok()) << on_gpu.status();
  ASSERT_TRUE((*on_gpu)->on_gpu());
  auto on_cpu = Evictor::Create(config, cal, cache->host_view);
  ASSERT_TRUE(on_cpu.ok()) << on_cpu.status();
  // Request r holds pages [r * 32, r * 32 + 32): room for 1,024 tokens.
  std::vector<std::vector<int32_t>> tables(2);
  const int64_t prompts[2] = {40, 7};
  int64_t lengths[2];
  for (int r = 0; r < 2; ++r) {
    tables[r].resize(32);
    std::iota(tables[r].begin(), tables[r].end(), r * 32);
    lengths[r] = prompts[r];
    ASSERT_TRUE((*on_gpu)->AddRequest(r, prompts[r]).ok());
    ASSERT_TRUE((*on_cpu)->AddRequest(r, prompts[r]).ok());
  }
  int rounds = 0;
  for (int step = 0; step < 220; ++step) {
    std::vector<StepRequest> requests(2);
    for (int r = 0; r < 2; ++r) {
      requests[r].id = r;
      requests[r].new_tokens = (r == 1 && step % 50 == 7) ? 3 : 1;
      lengths[r] += requests[r].new_tokens;
      requests[r].kv.block_table = tables[r];
      requests[r].kv.length = lengths[r];
      requests[r].kv.prompt_len = prompts[r];
    }
    auto g = (*on_gpu)->OnGenerationStepEnd(requests, nullptr);
    ASSERT_TRUE(g.ok()) << g.status();
    auto c = (*on_cpu)->OnGenerationStepEnd(requests, nullptr);
    ASSERT_TRUE(c.ok()) << c.status();
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ((*g)[r].evicted, (*c)[r].evicted);
      EXPECT_EQ((*g)[r].new_length, (*c)[r].new_length);
      EXPECT_EQ((*g)[r].evicted_tokens, (*c)[r].evicted_tokens);
      EXPECT_EQ((*g)[r].freed_pages, (*c)[r].freed_pages);
      rounds += (*g)[r].evicted ? 1 : 0;
      lengths[r] = (*g)[r].new_length;
    }
  }
  EXPECT_GE(rounds, 4);
  ASSERT_TRUE(kernels::SynchronizeStream(nullptr).ok());
  const auto after = cache->Download();
  const KvStrides strides = KvStridesOf(cache->host_view);
  int64_t differing = 0, total = 0;
  for (int r = 0; r < 2; ++r) {
    KvRequestView view;
    view.block_table = tables[r];
    view.length = lengths[r];
    view.prompt_len = prompts[r];
    for (int l = 0; l < geo.layers; ++l) {
      for (int g = 0; g < geo.kv_heads; ++g) {
        std::vector<std::string> gpu_rows, cpu_rows;
        for (int64_t t = 0; t < lengths[r]; ++t) {
          const uint64_t offset = KvRowAddress(cache->host_view, strides, view, l, false, g, t) -
                                  static_cast<const uint8_t*>(cache->host_view.layers[l].k);
          const uint8_t* gpu_row = after[2 * l].data() + offset;
          const uint8_t* cpu_row = cache->host[2 * l].data() + offset;
          gpu_rows.emplace_back(gpu_row, gpu_row + strides.row_bytes);
          cpu_rows.emplace_back(cpu_row, cpu_row + strides.row_bytes);
        }
        std::sort(gpu_rows.begin(), gpu_rows.end());
        std::sort(cpu_rows.begin(), cpu_rows.end());
        std::vector<std::string> only;
        std::set_difference(gpu_rows.begin(), gpu_rows.end(), cpu_rows.begin(), cpu_rows.end(),
                            std::back_inserter(only));
        differing += static_cast<int64_t>(only.size());
        total += static_cast<int64_t>(gpu_rows.size());
      }
    }
  }
  EXPECT_LE(differing * 100, total) << differing << " of " << total << " rows differ";
  EXPECT_NE(original, cache->host);  // the CPU evictor did compact
}

// kernels::EnqueueKvCompaction on its own (the path other eviction methods use, which finds the
// holes itself): random kept sets of every mode's shape, both orders, against CompactRequest.
TEST(GpuRoundTest, StandaloneCompactionMatchesCpu) {
  REQUIRE_GPU();
  for (CompactionOrder order : {CompactionOrder::kFillHoles, CompactionOrder::kPreserveOrder}) {
    for (EvictionMode mode : {EvictionMode::kUnion, EvictionMode::kPerLayerPerHead}) {
      Geometry geo{DType::kFp16, 64, 16, KvLayout::kNhd, KvPoolKind::kCombined, 2, 3, 2};
      std::mt19937_64 rng(700 + static_cast<int>(order) * 10 + static_cast<int>(mode));
      auto cache = MakeCache(geo, rng);
      cache->Upload();
      std::vector<Request> requests = MakeRequests(geo, 2, 150, rng);
      const int sets = mode == EvictionMode::kUnion ? 1 : geo.layers * geo.kv_heads;
      const int64_t budget = 60;
      std::vector<int32_t> kept_all(static_cast<size_t>(2) * sets * budget, 0);
      std::vector<int32_t> counts(2, 0);
      std::vector<KeptTokens> kept(2);
      for (int r = 0; r < 2; ++r) {
        const KvRequestView& v = requests[r].view;
        const int64_t keep = std::min<int64_t>(budget, v.DecodeTokens());
        counts[r] = static_cast<int32_t>(keep);
        kept[r].mode = mode;
        kept[r].layers = geo.layers;
        kept[r].kv_heads = geo.kv_heads;
        kept[r].kept = keep;
        for (int s = 0; s < sets; ++s) {
          std::vector<int64_t> all(v.DecodeTokens());
          std::iota(all.begin(), all.end(), v.prompt_len);
          std::shuffle(all.begin(), all.end(), rng);
          all.resize(keep);
          std::sort(all.begin(), all.end());
          for (int64_t i = 0; i < keep; ++i) {
            kept_all[(static_cast<size_t>(r) * sets + s) * budget + i] =
                static_cast<int32_t>(all[i]);
          }
          kept[r].sets.push_back(all);
        }
      }
      // Device copies: the pools table, block tables, request descriptors, kept sets, counts.
      const KvStrides strides = KvStridesOf(cache->device_view);
      std::vector<kernels::KvPoolPair> pools;
      for (const KvLayerPools& l : cache->device_view.layers) pools.push_back({l.k, l.v});
      auto upload = [](const void* data, size_t bytes) -> void* {
        auto mem = kernels::AllocateDeviceMemory(0, bytes);
        EXPECT_TRUE(mem.ok());
        EXPECT_TRUE(kernels::CopyAsync(*mem, data, bytes, nullptr).ok());
        return *mem;
      };
      std::vector<void*> owned;
      owned.push_back(upload(pools.data(), pools.size() * sizeof(kernels::KvPoolPair)));
      std::vector<kernels::KvRoundRequest> descs(2);
      for (int r = 0; r < 2; ++r) {
        owned.push_back(upload(requests[r].table.data(), requests[r].table.size() * 4));
        descs[r].block_table = static_cast<const int32_t*>(owned.back());
        descs[r].length = requests[r].view.length;
        descs[r].prompt_len = requests[r].view.prompt_len;
        descs[r].protected_tail = requests[r].view.protected_tail;
      }
      owned.push_back(upload(descs.data(), descs.size() * sizeof(descs[0])));
      const auto* device_descs = static_cast<const kernels::KvRoundRequest*>(owned.back());
      owned.push_back(upload(kept_all.data(), kept_all.size() * 4));
      const auto* device_kept = static_cast<const int32_t*>(owned.back());
      owned.push_back(upload(counts.data(), counts.size() * 4));
      const auto* device_counts = static_cast<const int32_t*>(owned.back());
      kernels::PagedKvDevice kv;
      kv.layers = static_cast<const kernels::KvPoolPair*>(owned[0]);
      kv.num_layers = geo.layers;
      kv.page_tokens = geo.page;
      kv.kv_heads = geo.kv_heads;
      kv.head_dim = geo.head_dim;
      kv.dtype = kernels::KvElement::kFp16;
      kv.combined = true;
      kv.row_bytes = strides.row_bytes;
      kv.token_stride = strides.token;
      kv.head_stride = strides.head;
      kv.page_stride = strides.page;
      kv.v_offset = strides.v_in_page;
      const absl::Status s = kernels::EnqueueKvCompaction(
          kv, device_descs, 2, sets, device_kept, device_counts, budget,
          static_cast<kernels::KvCompactionOrder>(static_cast<uint8_t>(order)), nullptr);
      ASSERT_TRUE(s.ok()) << s;
      for (int r = 0; r < 2; ++r) {
        ASSERT_TRUE(CompactRequest(cache->host_view, requests[r].view, kept[r], order).ok());
      }
      EXPECT_TRUE(cache->Download() == cache->host)
          << "order " << static_cast<int>(order) << " mode " << static_cast<int>(mode);
      for (void* p : owned) kernels::FreeDeviceMemory(p);
    }
  }
}

TEST(GpuRoundTest, RejectsBadInputsOnTheHost) {
  REQUIRE_GPU();
  Geometry geo;
  std::mt19937_64 rng(500);
  auto cache = MakeCache(geo, rng);
  Calibration cal = MakeCalibration(geo, rng);
  GpuRoundOptions options;
  options.max_requests = 2;
  options.budget = 32;
  options.max_decode_tokens = 128;

  auto host = GpuRound::Create(cal, cache->host_view, options);
  EXPECT_TRUE(absl::IsFailedPrecondition(host.status())) << host.status();

  Calibration wrong_layers = cal;
  wrong_layers.layers = 3;
  auto layers = GpuRound::Create(wrong_layers, cache->device_view, options);
  EXPECT_THAT(layers.status().message(), HasSubstr("3 layers, the kv view 2"));

  Calibration no_rope = cal;
  no_rope.omega.reset();
  EXPECT_TRUE(
      absl::IsFailedPrecondition(GpuRound::Create(no_rope, cache->device_view, options).status()));

  GpuRoundOptions big_budget = options;
  big_budget.budget = 1000;
  EXPECT_TRUE(
      absl::IsInvalidArgument(GpuRound::Create(cal, cache->device_view, big_budget).status()));

  auto round = GpuRound::Create(cal, cache->device_view, options);
  ASSERT_TRUE(round.ok()) << round.status();
  std::vector<int32_t> table = {0, 1, 2, 3, 4, 5, 6, 7};
  KvRequestView too_long;
  too_long.block_table = table;
  too_long.length = 8 * 32;
  too_long.prompt_len = 10;
  auto s = (*round)->Enqueue({too_long}, {int64_t{300}}, nullptr);
  EXPECT_THAT(s.message(), HasSubstr("more than max_decode_tokens 128"));

  std::vector<int32_t> bad_table = {0, 1, 2, 96};
  KvRequestView out_of_range;
  out_of_range.block_table = bad_table;
  out_of_range.length = 4 * 32;
  s = (*round)->Enqueue({out_of_range}, {int64_t{200}}, nullptr);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("request 0"));

  KvRequestView ok;
  std::vector<int32_t> ok_table = {0, 1};
  ok.block_table = ok_table;
  ok.length = 40;
  s = (*round)->Enqueue({ok, ok, ok}, {int64_t{1}, int64_t{1}, int64_t{1}}, nullptr);
  EXPECT_THAT(s.message(), HasSubstr("exceed max_requests 2"));
  s = (*round)->Enqueue({ok}, {int64_t{1}, int64_t{2}}, nullptr);
  EXPECT_THAT(s.message(), HasSubstr("1 requests but 2 round starts"));
  EXPECT_TRUE(absl::IsFailedPrecondition((*round)->Kept(0, nullptr).status()));
}

}  // namespace
}  // namespace kvtier::triattention
