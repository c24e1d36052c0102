// The daemon crash harness's engine side (see daemon_crash_workload.h).
#include "tests/crash/daemon_crash_workload.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kvtier::crash {
namespace {

using integration::Hash;

uint64_t SplitMix(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

void FillPage(uint8_t* page, uint64_t bytes, uint64_t chain, uint64_t id) {
  uint64_t x = chain * 0x100000001B3ull ^ id;
  for (uint64_t off = 0; off < bytes; off += 8) {
    const uint64_t v = SplitMix(x);
    std::memcpy(page + off, &v, std::min<uint64_t>(8, bytes - off));
  }
}

bool PageHolds(const uint8_t* page, uint64_t bytes, uint64_t chain, uint64_t id) {
  std::vector<uint8_t> expected(bytes);
  FillPage(expected.data(), bytes, chain, id);
  return std::memcmp(page, expected.data(), bytes) == 0;
}

grpc::ClientContext* WithDeadline(grpc::ClientContext* ctx) {
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  return ctx;
}

bool DriveIsFull(DrivePhase p) {
  return p == DrivePhase::kFullPending || p == DrivePhase::kFull || p == DrivePhase::kReturnPending;
}

bool SaysLost(v1::ItemCode code) {
  return code == v1::ITEM_CODE_NOT_FOUND || code == v1::ITEM_CODE_DATA_LOSS;
}

void Report(Counters* counters, const std::string& line) {
  if (counters->reported++ < 20) {
    std::printf("  %s\n", line.c_str());
    std::fflush(stdout);
  }
}

std::vector<uint64_t> Ledger::Issue(uint32_t n, uint64_t* issued_this_cycle) {
  absl::MutexLock lock(&mu_);
  std::vector<uint64_t> ids;
  for (uint32_t i = 0; i < n && *issued_this_cycle < kNewDurablePerCycle; ++i) {
    ids.push_back(next_id_++);
    to_drop_[ids.back()] = 0;
    ++*issued_this_cycle;
  }
  return ids;
}

void Ledger::Acknowledge(uint64_t id) {
  absl::MutexLock lock(&mu_);
  to_drop_.erase(id);
  acked_.insert(id);
}

std::vector<uint64_t> Ledger::Sample(uint32_t n, std::mt19937_64& rng) {
  absl::MutexLock lock(&mu_);
  std::vector<uint64_t> ids;
  if (acked_.empty()) return ids;
  std::set<uint64_t> seen;
  for (uint32_t i = 0; i < n; ++i) {
    auto it = acked_.begin();
    std::advance(it, static_cast<long>(rng() % acked_.size()));
    if (seen.insert(*it).second) ids.push_back(*it);
  }
  return ids;
}

bool Ledger::Lost(uint64_t id) {
  absl::MutexLock lock(&mu_);
  if (acked_.erase(id) == 0) return false;
  to_drop_[id] = 0;
  return true;
}

bool Ledger::IsAcknowledged(uint64_t id) {
  absl::MutexLock lock(&mu_);
  return acked_.count(id) != 0;
}

std::vector<uint64_t> Ledger::Acknowledged() {
  absl::MutexLock lock(&mu_);
  return std::vector<uint64_t>(acked_.begin(), acked_.end());
}

void Ledger::Retire() {
  absl::MutexLock lock(&mu_);
  while (acked_.size() > kLiveDurable) {
    to_drop_[*acked_.begin()] = 0;
    acked_.erase(acked_.begin());
  }
}

std::vector<uint64_t> Ledger::ToDrop() {
  absl::MutexLock lock(&mu_);
  std::vector<uint64_t> ids;
  for (const auto& [id, rounds] : to_drop_) ids.push_back(id);
  return ids;
}

void Ledger::Dropped(uint64_t id) {
  absl::MutexLock lock(&mu_);
  auto it = to_drop_.find(id);
  if (it != to_drop_.end() && ++it->second >= 2) to_drop_.erase(it);
}

Workload::Workload(KvtierdProcess* daemon, integration::TestEngine* engine, std::string engine_id,
                   Ledger* ledger, Counters* counters, std::atomic<DrivePhase>* phase,
                   uint64_t seed)
    : daemon_(daemon),
      engine_(engine),
      engine_id_(std::move(engine_id)),
      ledger_(ledger),
      counters_(counters),
      phase_(phase),
      seed_(seed) {}

void Workload::Start() {
  for (uint32_t t = 0; t < kThreads; ++t) threads_.emplace_back([this, t] { Run(t); });
}

void Workload::Stop() {
  stop_ = true;
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

uint64_t Workload::durable_issued() {
  absl::MutexLock lock(&mu_);
  return issued_this_cycle_;
}

std::string Workload::first_error() {
  absl::MutexLock lock(&mu_);
  return first_error_;
}

void Workload::Run(uint32_t t) {
  std::mt19937_64 rng(seed_ * 7919 + t);
  const uint32_t src = t * kThreadPages;
  const uint32_t scratch = src + kBatch;
  while (!stop_) {
    if (paused_) {
      idle_threads_++;
      while (!stop_) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      break;
    }
    const uint32_t n = 1 + static_cast<uint32_t>(rng() % kBatch);
    const int op = static_cast<int>(rng() % 100);
    if (op < 25) {
      if (!DurableOffload(src, n, rng)) VolatileOffload(src, n, rng);
    } else if (op < 55) {
      VolatileOffload(src, n, rng);
    } else if (op < 90) {
      OnboardSome(scratch, n, rng);
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(2 + rng() % 18));
    }
  }
}

void Workload::RpcFailed(const char* what, const grpc::Status& st) {
  if (killing_ || stop_) return;
  counters_->rpc_errors++;
  absl::MutexLock lock(&mu_);
  if (first_error_.empty()) {
    first_error_ = absl::StrCat(what, ": ", st.error_code(), " ", st.error_message());
  }
}

bool Workload::DurableOffload(uint32_t src, uint32_t n, std::mt19937_64& rng) {
  std::vector<uint64_t> ids;
  {
    absl::MutexLock lock(&mu_);
    ids = ledger_->Issue(n, &issued_this_cycle_);
  }
  if (ids.empty()) return false;
  v1::OffloadRequest req;
  req.set_engine_id(engine_id_);
  req.set_durable(true);
  req.set_ack(v1::WRITE_ACK_DURABLE);
  for (size_t i = 0; i < ids.size(); ++i) {
    const uint32_t page = src + static_cast<uint32_t>(i);
    FillPage(engine_->page(page), engine_->page_bytes(), kDurableChain, ids[i]);
    v1::OffloadItem* item = req.add_items();
    item->set_block_hash(Hash(kDurableChain, ids[i]));
    item->set_page_index(page);
  }
  const DrivePhase phase = phase_->load();
  grpc::ClientContext ctx;
  v1::OffloadResponse resp;
  durable_in_flight_++;
  offloads_in_flight_++;
  const grpc::Status st = daemon_->stub().Offload(WithDeadline(&ctx), req, &resp);
  offloads_in_flight_--;
  durable_in_flight_--;
  if (!st.ok()) {
    RpcFailed("durable Offload", st);
    return true;
  }
  if (resp.results_size() != static_cast<int>(ids.size())) {
    counters_->durable_failed += ids.size();
    Report(counters_, absl::StrFormat("a durable Offload of %d items returned %d results",
                                      ids.size(), resp.results_size()));
    return true;
  }
  int refused = 0;
  for (int i = 0; i < resp.results_size(); ++i) {
    const v1::ItemCode code = resp.results(i).code();
    refused += code == v1::ITEM_CODE_RESOURCE_EXHAUSTED;
    if (code == v1::ITEM_CODE_OK || code == v1::ITEM_CODE_ALREADY_STORED) {
      ledger_->Acknowledge(ids[i]);
      counters_->durable_acked++;
      if (phase == DrivePhase::kFull) counters_->durable_acked_full++;
      if (phase == DrivePhase::kReturned) counters_->durable_acked_after++;
    } else if (code == v1::ITEM_CODE_RESOURCE_EXHAUSTED && DriveIsFull(phase)) {
      counters_->durable_refused_full++;
      absl::MutexLock lock(&counters_->mu);
      if (counters_->first_refusal.empty()) counters_->first_refusal = resp.results(i).message();
    } else {
      counters_->durable_failed++;
    }
  }
  if (refused == resp.results_size()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10 + rng() % 21));
  }
  return true;
}

void Workload::VolatileOffload(uint32_t src, uint32_t n, std::mt19937_64& rng) {
  v1::OffloadRequest req;
  req.set_engine_id(engine_id_);
  const uint64_t first = rng() % kVolatileIds;
  for (uint32_t i = 0; i < n; ++i) {
    const uint64_t id = (first + i) % kVolatileIds;
    FillPage(engine_->page(src + i), engine_->page_bytes(), kVolatileChain, id);
    v1::OffloadItem* item = req.add_items();
    item->set_block_hash(Hash(kVolatileChain, id));
    item->set_page_index(src + i);
  }
  const DrivePhase phase = phase_->load();
  grpc::ClientContext ctx;
  v1::OffloadResponse resp;
  offloads_in_flight_++;
  const grpc::Status st = daemon_->stub().Offload(WithDeadline(&ctx), req, &resp);
  offloads_in_flight_--;
  if (!st.ok()) {
    RpcFailed("volatile Offload", st);
    return;
  }
  for (const v1::ItemResult& r : resp.results()) {
    if (r.code() == v1::ITEM_CODE_OK || r.code() == v1::ITEM_CODE_ALREADY_STORED) {
      counters_->volatile_stored++;
      if (phase == DrivePhase::kFull) counters_->volatile_stored_full++;
    } else {
      counters_->volatile_failed++;
    }
  }
}

void Workload::OnboardSome(uint32_t scratch, uint32_t n, std::mt19937_64& rng) {
  std::vector<std::pair<uint64_t, uint64_t>> blocks;  // (chain, id)
  for (uint64_t id : ledger_->Sample(n, rng)) blocks.emplace_back(kDurableChain, id);
  if (blocks.size() < n && rng() % 2 == 0)
    blocks.emplace_back(kVolatileChain, rng() % kVolatileIds);
  if (blocks.empty()) return;
  v1::OnboardRequest req;
  req.set_engine_id(engine_id_);
  req.set_continue_after_miss(true);
  for (size_t i = 0; i < blocks.size(); ++i) {
    const uint32_t page = scratch + static_cast<uint32_t>(i);
    std::memset(engine_->page(page), kScratchFill, engine_->page_bytes());
    v1::OnboardItem* item = req.add_items();
    item->set_block_hash(Hash(blocks[i].first, blocks[i].second));
    item->set_page_index(page);
  }
  const DrivePhase phase = phase_->load();
  grpc::ClientContext ctx;
  v1::OnboardResponse resp;
  onboards_in_flight_++;
  const grpc::Status st = daemon_->stub().Onboard(WithDeadline(&ctx), req, &resp);
  onboards_in_flight_--;
  if (!st.ok()) {
    RpcFailed("Onboard", st);
    return;
  }
  if (resp.results_size() != static_cast<int>(blocks.size())) {
    counters_->onboard_failed += blocks.size();
    Report(counters_, absl::StrFormat("an Onboard of %d items returned %d results", blocks.size(),
                                      resp.results_size()));
    return;
  }
  for (int i = 0; i < resp.results_size(); ++i) {
    const auto [chain, id] = blocks[static_cast<size_t>(i)];
    const v1::ItemCode code = resp.results(i).code();
    if (code == v1::ITEM_CODE_OK) {
      counters_->onboarded++;
      if (phase == DrivePhase::kFull) counters_->onboarded_full++;
      if (!PageHolds(engine_->page(scratch + static_cast<uint32_t>(i)), engine_->page_bytes(),
                     chain, id)) {
        counters_->wrong_bytes++;
        Report(counters_,
               absl::StrFormat("WRONG BYTES: onboard of %s block %d returned OK with other bytes",
                               chain == kDurableChain ? "durable" : "volatile", id));
      }
    } else if (chain == kDurableChain && SaysLost(code) && ledger_->Lost(id)) {
      counters_->lost++;
      Report(counters_, absl::StrFormat("LOST: acknowledged block %d: onboard item code %d %s", id,
                                        static_cast<int>(code), resp.results(i).message()));
    } else if (chain == kDurableChain && !SaysLost(code) && ledger_->IsAcknowledged(id)) {
      counters_->onboard_failed++;
      Report(counters_, absl::StrFormat("ONBOARD FAILED: acknowledged block %d: item code %d %s",
                                        id, static_cast<int>(code), resp.results(i).message()));
    }
  }
}

}  // namespace kvtier::crash
