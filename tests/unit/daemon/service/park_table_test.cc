// ParkTable through the real host data plane and a real BlockStore: a park and its resume move
// the pages' bytes; append, AlreadyExists and NotFound; the table's limits with their messages;
// that an engine never resumes or releases another engine's request (same id, other tenant or
// same tenant); ttl clamping, expiry at its exact boundary and renewal by a kept resume; that a
// failed park leaves nothing behind; DataLoss for an evicted parked page; and parks, resumes and
// releases from several threads. Expiry is tested through ReleaseExpired's `now`, never by
// waiting.
#include "daemon/service/park_table.h"

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "daemon/dataplane/data_plane.h"
#include "gtest/gtest.h"
#include "tests/testing/temp_dir.h"
#include "tests/unit/daemon/service/engine_fixture.h"

namespace kvtier::service {
namespace {

using testing::ClearPage;
using testing::FillPage;
using testing::PageHolds;

class ParkTableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::make_unique<kvtier::testing::TempDir>(kvtier::testing::TempDir::Create().value());
    absl::StatusOr<std::unique_ptr<store::BlockStore>> opened = testing::OpenStore(*dir_);
    ASSERT_TRUE(opened.ok()) << opened.status();
    store_ = std::move(*opened);
    plane_ = dataplane::MakeHostDataPlane(store_.get(), &totals_);
    alice_ = NewEngine("a1", "alice", 1);
    bob_ = NewEngine("b1", "bob", 2);
  }

  std::shared_ptr<Engine> NewEngine(const std::string& id, const std::string& tenant,
                                    store::NamespaceId ns) {
    absl::StatusOr<std::shared_ptr<Engine>> engine =
        testing::MakeEngine(*dir_, id, tenant, ns, plane_.get(), "pool-" + id, /*slots=*/16);
    EXPECT_TRUE(engine.ok()) << engine.status();
    return engine.ok() ? *engine : nullptr;
  }

  // Fills `pages` of the engine with seeds base + i and parks them as `request`.
  absl::StatusOr<ParkTable::Parked> ParkPages(ParkTable& table, const Engine& engine,
                                              const std::string& request,
                                              const std::vector<uint32_t>& pages, uint64_t base,
                                              bool append = false) {
    for (size_t i = 0; i < pages.size(); ++i) FillPage(engine, pages[i], base + i);
    ParkTable::ParkArgs args;
    args.request_id = request;
    args.page_indices = pages;
    args.num_tokens = 16 * pages.size();
    args.user_data = "state of " + request;
    args.append = append;
    return table.Park(engine, args);
  }

  absl::StatusOr<ParkTable::Resumed> ResumeInto(ParkTable& table, const Engine& engine,
                                                const std::string& request,
                                                const std::vector<uint32_t>& pages,
                                                uint32_t first_page = 0, bool keep = false) {
    for (uint32_t p : pages) ClearPage(engine, p);
    ParkTable::ResumeArgs args;
    args.request_id = request;
    args.first_page = first_page;
    args.page_indices = pages;
    args.keep_parked = keep;
    return table.Resume(engine, args);
  }

  // Whether the store still holds the parked page `position` of the engine's request.
  bool Stored(const Engine& engine, const std::string& request, uint64_t position) {
    absl::StatusOr<std::optional<store::PinnedBlock>> held =
        store_->Hold({engine.ns, ParkTable::Hash(engine.id, request, position)});
    return held.ok() && held->has_value();
  }

  uint64_t BlockBytes() const { return alice_->codec->block_bytes(); }

  std::unique_ptr<kvtier::testing::TempDir> dir_;
  std::unique_ptr<store::BlockStore> store_;
  dataplane::DataPlaneTotals totals_;
  std::unique_ptr<dataplane::DataPlane> plane_;
  std::shared_ptr<Engine> alice_, bob_;
};

TEST_F(ParkTableTest, ParkThenResumeMovesThePagesAndReleasesAfterTheLast) {
  ParkTable table(store_.get(), {});
  const absl::Time before = absl::Now();
  absl::StatusOr<ParkTable::Parked> parked = ParkPages(table, *alice_, "r1", {0, 1, 2}, 10);
  ASSERT_TRUE(parked.ok()) << parked.status();
  EXPECT_EQ(parked->pages, 3u);
  EXPECT_EQ(parked->cold_bytes, 3 * BlockBytes());
  EXPECT_GE(parked->expires, before + absl::Minutes(10));  // default_ttl
  EXPECT_EQ(table.size(), 1u);
  EXPECT_EQ(table.CountOfTenant("alice"), 1u);
  EXPECT_TRUE(Stored(*alice_, "r1", 2));

  // The first two pages into other slots, kept; then the last, which releases.
  absl::StatusOr<ParkTable::Resumed> resumed = ResumeInto(table, *alice_, "r1", {7, 8});
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->resumed_pages, 2u);
  EXPECT_EQ(resumed->parked_pages, 3u);
  EXPECT_EQ(resumed->num_tokens, 48u);
  EXPECT_EQ(resumed->user_data, "state of r1");
  EXPECT_FALSE(resumed->released);
  EXPECT_TRUE(PageHolds(*alice_, 7, 10));
  EXPECT_TRUE(PageHolds(*alice_, 8, 11));
  resumed = ResumeInto(table, *alice_, "r1", {9}, /*first_page=*/2);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_TRUE(resumed->released);
  EXPECT_TRUE(PageHolds(*alice_, 9, 12));
  EXPECT_EQ(table.size(), 0u);
  EXPECT_EQ(table.CountOfTenant("alice"), 0u);
  for (uint64_t i = 0; i < 3; ++i) EXPECT_FALSE(Stored(*alice_, "r1", i)) << "page " << i;

  resumed = ResumeInto(table, *alice_, "r1", {0});
  EXPECT_EQ(resumed.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(resumed.status().message(),
            "nothing is parked under request 'r1' (never parked, released or expired)");
}

TEST_F(ParkTableTest, AppendAlreadyExistsAndRanges) {
  ParkTable table(store_.get(), {});
  ASSERT_TRUE(ParkPages(table, *alice_, "r1", {0, 1}, 10).ok());
  absl::StatusOr<ParkTable::Parked> again = ParkPages(table, *alice_, "r1", {2}, 20);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(again.status().message(), "request 'r1' is already parked (set append to add pages)");
  again = ParkPages(table, *alice_, "r2", {2}, 20, /*append=*/true);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(again.status().message(), "append: nothing is parked under request 'r2'");

  again = ParkPages(table, *alice_, "r1", {3}, 12, /*append=*/true);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->pages, 3u);
  absl::StatusOr<ParkTable::Resumed> resumed = ResumeInto(table, *alice_, "r1", {5, 6, 7, 8});
  EXPECT_EQ(resumed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(resumed.status().message(), "pages [0, 4) asked for; 3 are parked");
  resumed = ResumeInto(table, *alice_, "r1", {5, 6, 7});
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  for (uint32_t i = 0; i < 3; ++i) EXPECT_TRUE(PageHolds(*alice_, 5 + i, 10 + i)) << i;
  EXPECT_TRUE(resumed->released);
}

TEST_F(ParkTableTest, LimitsNameTheirSetting) {
  ParkTable table(store_.get(), {/*max_requests=*/3, /*max_requests_per_tenant=*/2});
  ASSERT_TRUE(ParkPages(table, *alice_, "r1", {0}, 1).ok());
  ASSERT_TRUE(ParkPages(table, *alice_, "r2", {1}, 2).ok());
  absl::StatusOr<ParkTable::Parked> third = ParkPages(table, *alice_, "r3", {2}, 3);
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(third.status().message(),
            "this tenant has 2 parked requests (engines.max_parked_requests_per_tenant)");
  EXPECT_FALSE(Stored(*alice_, "r3", 0)) << "a refused park left its page";
  // Appending to a parked request is not a new request.
  EXPECT_TRUE(ParkPages(table, *alice_, "r2", {3}, 4, /*append=*/true).ok());
  ASSERT_TRUE(ParkPages(table, *bob_, "r1", {0}, 5).ok());
  absl::StatusOr<ParkTable::Parked> full = ParkPages(table, *bob_, "r2", {1}, 6);
  EXPECT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(full.status().message(), "3 requests are parked (engines.max_parked_requests)");
  std::vector<std::optional<uint64_t>> freed = table.Release("a1", {"r1"});
  EXPECT_EQ(freed.size(), 1u);
  EXPECT_TRUE(ParkPages(table, *bob_, "r2", {1}, 6).ok());
  EXPECT_EQ(table.CountOfTenant("alice"), 1u);
  EXPECT_EQ(table.CountOfTenant("bob"), 2u);
}

TEST_F(ParkTableTest, AnEngineNeverSeesAnotherEnginesRequest) {
  ParkTable table(store_.get(), {});
  std::shared_ptr<Engine> alice2 = NewEngine("a2", "alice", 1);
  ASSERT_TRUE(ParkPages(table, *alice_, "r", {0, 1}, 100).ok());
  // The same request id under other engines: each its own request, not AlreadyExists.
  ASSERT_TRUE(ParkPages(table, *bob_, "r", {0}, 200).ok());
  for (const Engine* other : {bob_.get(), alice2.get()}) {
    absl::StatusOr<ParkTable::Resumed> resumed =
        ResumeInto(table, *other, "r", {4, 5}, 0, /*keep=*/true);
    if (other == alice2.get()) {
      EXPECT_EQ(resumed.status().code(), absl::StatusCode::kNotFound) << "same tenant";
    } else {
      // Bob resumes his own one-page request, never alice's pages.
      EXPECT_EQ(resumed.status().code(), absl::StatusCode::kInvalidArgument);
    }
  }
  EXPECT_EQ(table.Release("a2", {"r"}), std::vector<std::optional<uint64_t>>{std::nullopt});
  EXPECT_EQ(table.ReleaseEngine("a2"), 0u);
  absl::StatusOr<ParkTable::Resumed> bobs = ResumeInto(table, *bob_, "r", {6});
  ASSERT_TRUE(bobs.ok()) << bobs.status();
  EXPECT_TRUE(PageHolds(*bob_, 6, 200));
  EXPECT_TRUE(bobs->released);
  absl::StatusOr<ParkTable::Resumed> alices = ResumeInto(table, *alice_, "r", {6, 7});
  ASSERT_TRUE(alices.ok()) << alices.status();
  EXPECT_TRUE(PageHolds(*alice_, 6, 100));
  EXPECT_TRUE(PageHolds(*alice_, 7, 101));
  EXPECT_NE(ParkTable::Hash("a1", "r", 0), ParkTable::Hash("b1", "r", 0));
  EXPECT_NE(ParkTable::Hash("a1", "r", 0), ParkTable::Hash("a1", "r", 1));
  // Length-prefixed parts: moving a byte from the engine id to the request id is another hash.
  EXPECT_NE(ParkTable::Hash("a1x", "r", 0), ParkTable::Hash("a1", "xr", 0));
}

TEST_F(ParkTableTest, TtlIsClampedAndExpiryIsExactAndAKeptResumeRenews) {
  ParkTable::Limits limits;
  limits.default_ttl = absl::Minutes(10);
  limits.max_ttl = absl::Hours(1);
  ParkTable table(store_.get(), limits);
  ParkTable::ParkArgs args;
  const std::vector<uint32_t> page = {0};
  args.page_indices = page;
  absl::Time before = absl::Now();
  args.request_id = "short";
  args.ttl = absl::Milliseconds(1);
  absl::StatusOr<ParkTable::Parked> short_park = table.Park(*alice_, args);
  absl::Time after = absl::Now();
  ASSERT_TRUE(short_park.ok()) << short_park.status();
  EXPECT_GE(short_park->expires, before + absl::Seconds(1));
  EXPECT_LE(short_park->expires, after + absl::Seconds(1));
  args.request_id = "long";
  args.ttl = absl::Hours(30);
  before = absl::Now();
  absl::StatusOr<ParkTable::Parked> long_park = table.Park(*alice_, args);
  after = absl::Now();
  ASSERT_TRUE(long_park.ok()) << long_park.status();
  EXPECT_GE(long_park->expires, before + absl::Hours(1));
  EXPECT_LE(long_park->expires, after + absl::Hours(1));

  // Expired means strictly before `now`; the released request's block leaves the store.
  EXPECT_EQ(table.ReleaseExpired(short_park->expires), 0u);
  EXPECT_EQ(table.ReleaseExpired(short_park->expires + absl::Nanoseconds(1)), 1u);
  EXPECT_FALSE(Stored(*alice_, "short", 0));
  EXPECT_TRUE(Stored(*alice_, "long", 0));
  EXPECT_EQ(table.CountOfTenant("alice"), 1u);

  // A kept resume renews to default_ttl from now: past the original 1 s expiry it stays.
  args.request_id = "kept";
  args.ttl = absl::Seconds(1);
  absl::StatusOr<ParkTable::Parked> kept = table.Park(*alice_, args);
  ASSERT_TRUE(kept.ok()) << kept.status();
  ASSERT_TRUE(ResumeInto(table, *alice_, "kept", {3}, 0, /*keep=*/true).ok());
  EXPECT_EQ(table.ReleaseExpired(kept->expires + absl::Seconds(1)), 0u);
  EXPECT_EQ(table.ReleaseExpired(long_park->expires + absl::Nanoseconds(1)), 2u);
  EXPECT_EQ(table.size(), 0u);
}

TEST_F(ParkTableTest, AFailedParkLeavesNothing) {
  ParkTable table(store_.get(), {});
  // Page 40 is beyond the engine's 16 slots: the first page was written, then dropped.
  absl::StatusOr<ParkTable::Parked> parked = ParkPages(table, *alice_, "r1", {0, 1}, 1);
  ASSERT_TRUE(parked.ok());
  FillPage(*alice_, 2, 3);
  ParkTable::ParkArgs args;
  args.request_id = "bad";
  const std::vector<uint32_t> pages = {2, 40};
  args.page_indices = pages;
  absl::StatusOr<ParkTable::Parked> bad = table.Park(*alice_, args);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(bad.status().message(), "page_indices[1]: ")) << bad.status();
  EXPECT_TRUE(absl::EndsWith(bad.status().message(), " (nothing was parked)")) << bad.status();
  EXPECT_FALSE(Stored(*alice_, "bad", 0));
  EXPECT_EQ(table.size(), 1u);
  // A failed append keeps what was parked before, and drops only its own pages.
  args.request_id = "r1";
  args.append = true;
  bad = table.Park(*alice_, args);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(Stored(*alice_, "r1", 2));
  EXPECT_TRUE(Stored(*alice_, "r1", 1));
  absl::StatusOr<ParkTable::Resumed> resumed = ResumeInto(table, *alice_, "r1", {8, 9});
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->parked_pages, 2u);
  EXPECT_TRUE(PageHolds(*alice_, 9, 2));
}

TEST_F(ParkTableTest, AnEvictedParkedPageIsDataLoss) {
  ParkTable table(store_.get(), {});
  ASSERT_TRUE(ParkPages(table, *alice_, "r1", {0, 1}, 1).ok());
  store::BlockStore::EvictRequest evict;
  evict.namespaces = {1};
  evict.hashes = {ParkTable::Hash("a1", "r1", 1)};
  evict.drop = true;
  absl::StatusOr<store::BlockStore::EvictReport> report = store_->Evict(evict);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_TRUE(report->results.at(0).ok()) << report->results[0];
  absl::StatusOr<ParkTable::Resumed> resumed = ResumeInto(table, *alice_, "r1", {4, 5});
  EXPECT_EQ(resumed.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(resumed.status().message(),
            "parked page 1 of request 'r1' is lost (evicted); recompute it");
  // The request stays parked (the engine releases it); Release reports the bytes it still had.
  EXPECT_EQ(table.Release("a1", {"r1"}), std::vector<std::optional<uint64_t>>{BlockBytes()});
}

TEST_F(ParkTableTest, ReleaseFormsAndCounts) {
  ParkTable table(store_.get(), {});
  std::shared_ptr<Engine> alice2 = NewEngine("a2", "alice", 1);
  ASSERT_TRUE(ParkPages(table, *alice_, "r1", {0, 1}, 1).ok());
  ASSERT_TRUE(ParkPages(table, *alice_, "r2", {2}, 3).ok());
  ASSERT_TRUE(ParkPages(table, *alice2, "r1", {0}, 4).ok());
  ASSERT_TRUE(ParkPages(table, *bob_, "r1", {0}, 5).ok());
  ParkTable::Counts counts = table.CountByNamespaceAndEngine();
  EXPECT_EQ(counts.per_namespace[1], 3u);
  EXPECT_EQ(counts.per_namespace[2], 1u);
  EXPECT_EQ(counts.per_engine["a1"], 2u);
  EXPECT_EQ(counts.per_engine["a2"], 1u);
  EXPECT_EQ(table.Release("a1", {"r1", "missing"}),
            (std::vector<std::optional<uint64_t>>{2 * BlockBytes(), std::nullopt}));
  EXPECT_EQ(table.ReleaseEngine("a1"), 1u);
  EXPECT_TRUE(Stored(*alice2, "r1", 0));
  const std::vector<store::NamespaceId> ns1 = {1};
  EXPECT_EQ(table.ReleaseIn(ns1), 1u);
  EXPECT_FALSE(Stored(*alice2, "r1", 0));
  EXPECT_EQ(table.size(), 1u);
  EXPECT_EQ(table.CountOfTenant("alice"), 0u);
  EXPECT_EQ(table.CountOfTenant("bob"), 1u);
}

// Engines park, resume and release their own requests on several threads while another thread
// releases expired requests (none) and counts: every resume gets its own engine's pages, and at
// the end nothing is parked and no parked block is left in the store.
TEST_F(ParkTableTest, ConcurrentParksResumesAndReleases) {
  ParkTable table(store_.get(), {});
  constexpr int kThreads = 3;
  constexpr int kRounds = 40;
  std::vector<std::shared_ptr<Engine>> engines;
  for (int t = 0; t < kThreads; ++t) {
    engines.push_back(NewEngine("e" + std::to_string(t), t == 0 ? "alice" : "bob", 1 + t));
  }
  std::atomic<int> failures{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const Engine& engine = *engines[t];
      for (int round = 0; round < kRounds; ++round) {
        const std::string request = "r" + std::to_string(round % 3);
        const uint64_t seed = 1000 * t + round;
        if (!ParkPages(table, engine, request, {0, 1}, seed).ok()) failures.fetch_add(1);
        absl::StatusOr<ParkTable::Resumed> resumed =
            ResumeInto(table, engine, request, {8, 9}, 0, /*keep=*/round % 2 == 0);
        if (!resumed.ok() || !PageHolds(engine, 8, seed) || !PageHolds(engine, 9, seed + 1)) {
          failures.fetch_add(1);
        }
        if (round % 2 == 0 && table.Release(engine.id, {request}).at(0) != 2 * BlockBytes()) {
          failures.fetch_add(1);
        }
      }
    });
  }
  std::thread sweeper([&] {
    while (!stop.load()) {
      table.ReleaseExpired(absl::Now());
      table.CountByNamespaceAndEngine();
      table.CountOfTenant("bob");
    }
  });
  for (std::thread& t : threads) t.join();
  stop.store(true);
  sweeper.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(table.size(), 0u);
  for (int t = 0; t < kThreads; ++t) {
    for (int r = 0; r < 3; ++r) {
      for (uint64_t p = 0; p < 2; ++p) {
        EXPECT_FALSE(Stored(*engines[t], "r" + std::to_string(r), p)) << t << " r" << r << " " << p;
      }
    }
  }
}

}  // namespace
}  // namespace kvtier::service
