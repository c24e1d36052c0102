// `kvtier-bench index`. Stores N real 4 KiB cold blocks through BlockStore (they move to the disk
// tier as the small host tier fills), closes the store, reopens it and times recovery until a
// sample of blocks has been read back and verified from disk. Then, with the recovered blocks
// indexed (plus a host tier's worth of fresh ones), it measures on one thread: single-hash
// lookups per second over random keys, and the latency of looking up whole 4096-block chains.
// The baseline for both is BlockIndex::MultiGet (RocksDB) of the same keys in the same run.
#include "tools/bench/index_bench.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "codec/codec.h"
#include "common/logging.h"
#include "daemon/index/block_index.h"
#include "daemon/store/block_store.h"

namespace kvtier::bench {
namespace {

using Clock = std::chrono::steady_clock;
using store::BlockKey;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

index::BlockHash HashOf(uint64_t id) {
  index::BlockHash h{};
  uint64_t x = id * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
  for (size_t i = 0; i < h.size(); i += 8) {
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    std::memcpy(h.data() + i, &x, 8);
  }
  return h;
}

uint64_t RssBytes() {
  std::ifstream in("/proc/self/statm");
  uint64_t pages = 0, resident = 0;
  in >> pages >> resident;
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

struct Flags {
  uint64_t blocks = 1'000'000;
  uint64_t lookups = 5'000'000;
  uint64_t chain = 4096;
  uint64_t chain_reps = 2000;
  std::string dir;
  bool json = false;
  bool keep = false;
};

struct Percentiles {
  double p50 = 0, p99 = 0, max = 0;
};
Percentiles Summarize(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  Percentiles p;
  if (v.empty()) return p;
  p.p50 = v[v.size() / 2];
  p.p99 = v[std::min(v.size() - 1, v.size() * 99 / 100)];
  p.max = v.back();
  return p;
}

}  // namespace

void DeclareIndexBenchFlags(cli::Command& command) {
  command
      .SetDescription(
          "The store's index: recovery of N disk blocks, random lookups/s, and chain lookups\n"
          "against RocksDB MultiGet.")
      .AddFlag("blocks", "N",
               "disk blocks (4 KiB cold blocks) to store and recover (default 1000000)")
      .AddFlag("lookups", "N", "random single-hash lookups to time (default 5000000)")
      .AddFlag("chain", "N", "blocks per chain lookup (default 4096)")
      .AddFlag("chain-reps", "N", "chain lookups to time (default 2000)")
      .AddFlag("dir", "DIR", "where the index and the disk file go (default $TMPDIR or /var/tmp)")
      .AddSwitch("keep", "keep the index and the disk file afterwards")
      .AddSwitch("json", "print JSON instead of the table");
}

int RunIndexBench(const cli::Values& values) {
  Flags f;
  f.json = values.Has("json");
  f.keep = values.Has("keep");
  f.dir = values.Get("dir").value_or("");
  for (const auto& [name, out] : {std::pair<const char*, uint64_t*>{"blocks", &f.blocks},
                                  {"lookups", &f.lookups},
                                  {"chain", &f.chain},
                                  {"chain-reps", &f.chain_reps}}) {
    absl::StatusOr<std::optional<uint64_t>> v = values.OptionalUint64(name);
    if (!v.ok()) return values.PrintUsageError(v.status().message());
    if (v->has_value()) *out = **v;
  }
  if (f.blocks < f.chain || f.chain == 0) {
    return values.PrintUsageError("--chain must be positive and --blocks at least --chain");
  }
  SetMinLogSeverity(LogSeverity::kWarning);
  if (f.dir.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    f.dir = tmp != nullptr ? tmp : "/var/tmp";
  }
  const std::string root = absl::StrCat(f.dir, "/kvtier-index-bench-", getpid());
  mkdir(root.c_str(), 0700);
  mkdir((root + "/disk").c_str(), 0700);

  // One real 4 KiB raw cold block; every stored block is a copy (contents do not matter here,
  // checksums do: each is verified on the way in and on every read from disk).
  codec::PageLayout layout;
  layout.tokens_per_page = 1;
  layout.pools.push_back({"pool", 3968});
  codec::BufferSpec b;
  b.name = "state";
  b.role = codec::BufferRole::kLossless;
  b.dtype = codec::DType::kBytes;
  b.heads = 1;
  b.tokens = 1;
  b.head_dim = 3968;
  layout.buffers.push_back(b);
  codec::CodecSpec spec;
  spec.codec = codec::CodecId::kRaw;
  std::unique_ptr<codec::Codec> c = codec::Codec::Create(layout, spec).value();
  std::vector<uint8_t> page(3968, 0x5A), block(c->block_bytes());
  if (!c->Encode(codec::FlatPageView(layout, page), absl::MakeSpan(block)).ok()) return 1;

  store::BlockStoreOptions o;
  o.host.capacity_bytes = 256ull << 20;
  o.host.pin = store::HostPinMode::kNone;
  o.host_chunk_bytes = 16ull << 20;
  o.max_block_bytes = 1ull << 20;
  o.disk.dirs = {root + "/disk"};
  o.disk.capacity_bytes = (f.blocks * block.size() * 11 / 10 / (64ull << 20) + 1) * (64ull << 20);
  o.disk.chunk_bytes = 64ull << 20;
  o.disk_watermarks.high = 0.99;
  o.disk_watermarks.low = 0.98;
  o.index_path = root + "/index";
  o.sync = index::SyncPolicy::kBatch;
  o.demotion_batch = 1024;
  o.group_commit_interval_ms = 20;

  // Populate: every block goes to disk (DemoteAll at the end catches the host's remainder).
  const auto t_fill = Clock::now();
  {
    auto s = store::BlockStore::Open(o);
    if (!s.ok()) {
      std::fprintf(stderr, "open: %s\n", s.status().ToString().c_str());
      return 1;
    }
    for (uint64_t id = 0; id < f.blocks; ++id) {
      absl::Status st = (*s)->Put(BlockKey{1, HashOf(id)}, block);
      if (!st.ok()) {
        std::fprintf(stderr, "put %llu: %s\n", static_cast<unsigned long long>(id),
                     st.ToString().c_str());
        return 1;
      }
    }
    if (!(*s)->DemoteAll().ok()) return 1;
  }
  const double fill_s = Seconds(t_fill, Clock::now());

  // Restart: recovery, then a sample of verified reads from disk.
  const uint64_t rss_before = RssBytes();
  const auto t_open = Clock::now();
  auto reopened = store::BlockStore::Open(o);
  if (!reopened.ok()) {
    std::fprintf(stderr, "reopen: %s\n", reopened.status().ToString().c_str());
    return 1;
  }
  std::unique_ptr<store::BlockStore> s = std::move(*reopened);
  const double recover_s = Seconds(t_open, Clock::now());
  std::mt19937_64 rng(7);
  uint64_t sample_hits = 0;
  for (int i = 0; i < 1000; ++i) {
    auto p = s->Acquire(BlockKey{1, HashOf(rng() % f.blocks)});
    sample_hits += p.ok() && p->has_value() && (*p)->served_from() == index::Tier::kDisk;
  }
  const double servable_s = Seconds(t_open, Clock::now());
  const uint64_t recovered = s->recovery().disk_blocks;
  const store::StoreStats recovered_stats = s->Stats();
  const double bytes_per_entry = static_cast<double>(recovered_stats.index_memory_bytes) /
                                 static_cast<double>(std::max<uint64_t>(1, recovered));
  const double rss_per_entry = static_cast<double>(RssBytes() - std::min(RssBytes(), rss_before)) /
                               static_cast<double>(std::max<uint64_t>(1, recovered));
  const std::string s_recovery_text = s->recovery().ToString();
  // Across tiers: a host tier's worth of fresh blocks next to the recovered disk blocks.
  const uint64_t host_blocks = (o.host.capacity_bytes / block.size()) * 8 / 10;
  for (uint64_t id = f.blocks; id < f.blocks + host_blocks; ++id) {
    if (!s->Put(BlockKey{1, HashOf(id)}, block).ok()) return 1;
  }
  const uint64_t indexed = f.blocks + host_blocks;

  // Single-hash lookups on one thread.
  std::vector<uint64_t> ids(1 << 20);
  for (uint64_t& id : ids) id = rng() % indexed;
  uint64_t hits = 0;
  const auto t_lookup = Clock::now();
  for (uint64_t i = 0; i < f.lookups; ++i) {
    const index::BlockHash h = HashOf(ids[i & (ids.size() - 1)]);
    hits += s->LookupChain(1, absl::MakeConstSpan(&h, 1));
  }
  const double lookup_s = Seconds(t_lookup, Clock::now());

  // Whole chains, and the same chains through RocksDB MultiGet (the durable index) as baseline.
  std::vector<index::BlockHash> chain(f.chain);
  std::vector<double> chain_us, multiget_us;
  std::vector<index::Tier> tiers;
  uint64_t chain_hits = 0;
  for (uint64_t r = 0; r < f.chain_reps; ++r) {
    const uint64_t first = rng() % (f.blocks - f.chain + 1);
    for (uint64_t i = 0; i < f.chain; ++i) chain[i] = HashOf(first + i);
    const auto t0 = Clock::now();
    chain_hits += s->LookupChain(1, chain, &tiers);
    chain_us.push_back(Seconds(t0, Clock::now()) * 1e6);
  }
  s.reset();
  double multiget_lookup_s = 0;
  uint64_t multiget_hits = 0;
  {
    index::RocksDbIndexOptions io;
    io.path = o.index_path;
    auto idx = index::OpenRocksDbBlockIndex(io);
    if (!idx.ok()) return 1;
    std::vector<BlockKey> keys(f.chain);
    for (uint64_t r = 0; r < std::min<uint64_t>(f.chain_reps, 500); ++r) {
      const uint64_t first = rng() % (f.blocks - f.chain + 1);
      for (uint64_t i = 0; i < f.chain; ++i) keys[i] = BlockKey{1, HashOf(first + i)};
      const auto t0 = Clock::now();
      auto got = (*idx)->MultiGet(keys);
      multiget_us.push_back(Seconds(t0, Clock::now()) * 1e6);
      if (!got.ok()) return 1;
    }
    std::vector<BlockKey> one(1);
    const uint64_t n = std::min<uint64_t>(f.lookups, 500'000);
    const auto t0 = Clock::now();
    for (uint64_t i = 0; i < n; ++i) {
      one[0] = BlockKey{1, HashOf(ids[i & (ids.size() - 1)] % f.blocks)};
      auto got = (*idx)->MultiGet(one);
      multiget_hits += got.ok() && (*got)[0].has_value();
    }
    multiget_lookup_s =
        Seconds(t0, Clock::now()) / static_cast<double>(n) * static_cast<double>(f.lookups);
  }
  const Percentiles chain_p = Summarize(chain_us), multiget_p = Summarize(multiget_us);
  const double lookups_per_s = static_cast<double>(f.lookups) / lookup_s;
  const double multiget_per_s = static_cast<double>(f.lookups) / multiget_lookup_s;

  if (f.json) {
    nlohmann::json j;
    j["blocks"] = f.blocks;
    j["indexed_blocks"] = indexed;
    j["fill_seconds"] = fill_s;
    j["recovered_disk_blocks"] = recovered;
    j["recovery_seconds"] = recover_s;
    j["servable_seconds"] = servable_s;
    j["sample_disk_hits"] = sample_hits;
    j["memory_bytes_per_entry"] = bytes_per_entry;
    j["rss_growth_bytes_per_entry"] = rss_per_entry;
    j["recovery"] = s_recovery_text;
    j["lookups_per_second"] = lookups_per_s;
    j["lookup_hits"] = hits;
    j["multiget_lookups_per_second"] = multiget_per_s;
    j["chain"] = f.chain;
    j["chain_us"] = {{"p50", chain_p.p50}, {"p99", chain_p.p99}, {"max", chain_p.max}};
    j["multiget_chain_us"] = {
        {"p50", multiget_p.p50}, {"p99", multiget_p.p99}, {"max", multiget_p.max}};
    j["chain_hit_fraction"] =
        static_cast<double>(chain_hits) / static_cast<double>(f.chain * f.chain_reps);
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("kvtier-bench index: %llu disk blocks of %zu bytes (+%llu host blocks)\n",
                static_cast<unsigned long long>(f.blocks), block.size(),
                static_cast<unsigned long long>(host_blocks));
    std::printf("  fill through the store              %8.2f s\n", fill_s);
    std::printf(
        "  restart: recovered %llu disk blocks in %.3f s; 1000 random disk reads verified "
        "(%llu hits) by %.3f s\n",
        static_cast<unsigned long long>(recovered), recover_s,
        static_cast<unsigned long long>(sample_hits), servable_s);
    std::printf("  %s\n", s_recovery_text.c_str());
    std::printf(
        "  memory per indexed block            %8.0f bytes (RSS growth at reopen: %.0f bytes, "
        "RocksDB included)\n",
        bytes_per_entry, rss_per_entry);
    std::printf("  %-34s %12s %12s %8s\n", "", "store", "MultiGet", "ratio");
    std::printf("  %-34s %12.0f %12.0f %7.1fx\n", "single-hash lookups/s (1 thread)", lookups_per_s,
                multiget_per_s, lookups_per_s / multiget_per_s);
    std::printf("  %-34s %12.1f %12.1f %7.1fx\n",
                absl::StrCat(f.chain, "-block chain p50 (us)").c_str(), chain_p.p50, multiget_p.p50,
                multiget_p.p50 / chain_p.p50);
    std::printf("  %-34s %12.1f %12.1f %7.1fx\n",
                absl::StrCat(f.chain, "-block chain p99 (us)").c_str(), chain_p.p99, multiget_p.p99,
                multiget_p.p99 / chain_p.p99);
    std::printf("  chain hits %llu of %llu; single lookups hit %llu of %llu (MultiGet %llu)\n",
                static_cast<unsigned long long>(chain_hits),
                static_cast<unsigned long long>(f.chain * f.chain_reps),
                static_cast<unsigned long long>(hits), static_cast<unsigned long long>(f.lookups),
                static_cast<unsigned long long>(multiget_hits));
  }
  if (!f.keep) std::system(absl::StrCat("rm -rf '", root, "'").c_str());
  return recovered == f.blocks && chain_hits == f.chain * f.chain_reps ? 0 : 1;
}

}  // namespace kvtier::bench
