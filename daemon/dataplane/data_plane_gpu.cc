// GpuDataPlane: offload and onboard of engines' GPU pools (CUDA IPC). With the store's GPU tier on
// the engine's device (EnginePages::gpu_tier_copier), an offload copies pages device to device
// into it and is done (the background thread encodes them into the host tier later), and an
// onboard copies the pages still there back the same way. Every other page takes the direct path
// through GpuBlockCodec: offload encodes (or copies, raw) slices of pages into the codec's device
// ring, where the GPU seals them, and the copy engine lands them in the reserved host slots, each
// slice committed as it lands (GpuBlockCodec::EncodeSealed; where the GPU seal is missing, the
// fused kernels write the host slots and host threads seal them); onboard pins blocks while the
// GPU decodes the ones pinned before.
#include <algorithm>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"
#include "common/parallel_for.h"
#include "daemon/dataplane/data_plane.h"
#include "kernels/device.h"

namespace kvtier::dataplane {

namespace {

constexpr size_t kGpuBatch = 256;  // pages per kernel pass (bounds the host slots held at once)
// Offload seals the blocks of every kSealChunk pages as soon as the GPU has written them.
constexpr size_t kSealChunk = 8;
// Onboard enqueues the decode of every kOnboardChunk acquired pages while it acquires the next.
constexpr size_t kOnboardChunk = 16;
// Host threads sealing blocks (CRC32C of each payload) in parallel.
size_t SealThreads() {
  static const size_t n = std::clamp<size_t>(std::thread::hardware_concurrency() / 2, 1, 8);
  return n;
}

// KVTIER_HOST_SEAL=1 in kvtierd's environment keeps the host-sealed direct path where the GPU
// could seal (docs/CONFIG.md: for comparisons in one run, and as a fallback).
bool HostSealForced() {
  static const bool forced = [] {
    const char* value = std::getenv("KVTIER_HOST_SEAL");
    return value != nullptr && std::string_view(value) == "1";
  }();
  return forced;
}

class GpuDataPlane final : public DataPlane {
 public:
  GpuDataPlane(store::BlockStore* store, DataPlaneTotals* totals) : DataPlane(store, totals) {}
  void Offload(const EnginePages& engine, const OffloadBatch& batch, OffloadResult* out,
               ItemProgress* progress, int end) override;
  void Onboard(const EnginePages& engine, const OnboardBatch& batch, OnboardResult* out,
               ItemProgress* progress, int end) override;

 private:
  // The direct path of one pass: the encode of `pages` into the reserved host slots `blocks`,
  // sealed on the GPU (or by host threads where the codec cannot), committed as they land. Sets
  // the items' results; returns how many were stored.
  uint32_t EncodeAndCommit(const EnginePages& engine, const store::PutOptions& put,
                           const std::vector<int>& items, const std::vector<const uint8_t*>& pages,
                           const std::vector<uint8_t*>& blocks,
                           std::vector<store::Reservation>& reservations, OffloadResult* out);
};

void GpuDataPlane::Offload(const EnginePages& engine, const OffloadBatch& batch, OffloadResult* out,
                           ItemProgress* progress, int end) {
  ItemProgress whole;
  if (progress == nullptr) progress = &whole;
  const store::PutOptions put = PutOptionsFor(engine, batch);
  const uint64_t block_bytes = engine.codec->block_bytes();
  const int size = static_cast<int>(batch.items.size());
  if (out->results.size() < batch.items.size()) out->results.resize(size);  // in the first turn
  // A hot page is volatile: durable offloads take the direct path, whose blocks reach disk.
  const bool gpu_tier = engine.gpu_tier_copier != nullptr && !batch.durable;
  uint32_t stored = 0, stored_hot = 0;
  DistinctHashes& distinct = progress->distinct;  // kept across turns
  const int first = progress->next;
  int next = first;
  // The rest in a later turn; a turn does at least one full pass (the staged paths need them).
  end = std::min(std::max(end, first + static_cast<int>(kGpuBatch)), size);
  while (next < end) {
    // Reserve a GPU-tier slot, or else a host slot, for the next batch of valid, new items.
    std::vector<int> items, hot_items;
    std::vector<store::Reservation> reservations, hot_reservations;
    std::vector<const uint8_t*> pages;
    std::vector<uint8_t*> blocks;
    std::vector<kernels::CopySpan> hot_copies;
    for (; next < end && items.size() + hot_items.size() < kGpuBatch; ++next) {
      const PageItem& item = batch.items[next];
      ItemResult* result = &out->results[next];
      if (!item.hash.ok()) {
        result->Set(item.hash.status());
        continue;
      }
      const index::BlockHash& hash = *item.hash;
      if (absl::Status repeated = distinct.Add(hash, next); !repeated.ok()) {
        result->Set(repeated);
        continue;
      }
      if (absl::Status page = engine.CheckPage(item.page_index); !page.ok()) {
        result->Set(page);
        continue;
      }
      const store::BlockKey key{engine.ns, hash};
      if (gpu_tier) {
        absl::StatusOr<store::Reservation> hot =
            store_->ReserveHot(key, engine.gpu->plan().fingerprint);
        if (hot.ok()) {
          hot_items.push_back(next);
          hot_copies.push_back({engine.device_pool->slot(item.page_index), hot->bytes().data(),
                                hot->bytes().size()});
          hot_reservations.push_back(std::move(*hot));
          continue;
        }
        if (absl::IsAlreadyExists(hot.status())) {
          OffloadStoredItem(key, put, result);
          continue;
        }
        // No GPU room now: the direct path, whose errors are the item's.
      }
      absl::StatusOr<store::Reservation> r = store_->Reserve(key, block_bytes);
      if (absl::IsAlreadyExists(r.status())) {
        OffloadStoredItem(key, put, result);
        continue;
      }
      if (!r.ok()) {
        result->Set(r.status());
        continue;
      }
      items.push_back(next);
      pages.push_back(engine.device_pool->slot(item.page_index));
      blocks.push_back(r->bytes().data());
      reservations.push_back(std::move(*r));
    }
    // The pages for the GPU tier are copied in one launch, beside the encode of the others.
    absl::Status hot_copied;
    void* hot_stream = nullptr;
    if (!hot_items.empty()) {
      hot_copied = kernels::UseDevice(engine.gpu->device());
      hot_stream = kernels::PerThreadStream();
      if (hot_copied.ok()) hot_copied = engine.gpu_tier_copier->Enqueue(hot_copies, hot_stream);
    }
    if (!items.empty())
      stored += EncodeAndCommit(engine, put, items, pages, blocks, reservations, out);
    if (!hot_items.empty()) {
      // Also after a failed launch: nothing may still write the reserved slots.
      absl::Status synced = kernels::SynchronizeStream(hot_stream);
      if (hot_copied.ok()) hot_copied = synced;
      if (!hot_copied.ok()) {
        KVTIER_LOG(kError, "engine ", engine.id,
                   ": copy into the GPU tier failed: ", hot_copied.message());
      }
      for (size_t k = 0; k < hot_items.size(); ++k) {
        ItemResult& result = out->results[hot_items[k]];
        if (!hot_copied.ok()) {
          result.Set(absl::InternalError(hot_copied.message()));
          continue;  // the reservation is released unstored
        }
        absl::Status committed = store_->Commit(std::move(hot_reservations[k]), put);
        result.Set(committed);
        if (!committed.ok()) continue;
        result.tier = index::Tier::kGpu;
        ++stored_hot;
      }
    }
  }
  progress->next = next;
  out->stored_pages += stored + stored_hot;
  out->hot_bytes_read += uint64_t{stored + stored_hot} * engine.hot_page_bytes;
  out->cold_bytes_written += uint64_t{stored} * block_bytes;
  totals_->hot_bytes_offloaded += uint64_t{stored + stored_hot} * engine.hot_page_bytes;
  totals_->cold_bytes_offloaded += uint64_t{stored} * block_bytes;
  totals_->dropped_offloads += static_cast<uint64_t>(next - first) - stored - stored_hot;
}

uint32_t GpuDataPlane::EncodeAndCommit(const EnginePages& engine, const store::PutOptions& put,
                                       const std::vector<int>& items,
                                       const std::vector<const uint8_t*>& pages,
                                       const std::vector<uint8_t*>& blocks,
                                       std::vector<store::Reservation>& reservations,
                                       OffloadResult* out) {
  store::PutOptions sealed = put;
  sealed.sealed_by_caller = true;  // sealed by the GPU or below: the store checks the header only
  uint32_t stored = 0;
  size_t committed_upto = 0;
  auto commit_upto = [&](size_t end) {
    for (; committed_upto < end; ++committed_upto) {
      ItemResult& result = out->results[items[committed_upto]];
      absl::Status committed = store_->Commit(std::move(reservations[committed_upto]), sealed);
      result.Set(committed);
      if (!committed.ok()) continue;
      result.tier = index::Tier::kHost;
      ++stored;
    }
  };
  std::vector<void*> done;
  absl::Status st;
  if (engine.gpu->SealsOnDevice() && !HostSealForced()) {
    // The GPU encodes and seals each slice in its ring and the copy engine lands it in the host
    // slots; the slices are committed as they land, while later ones are still in flight.
    size_t per_event = 1;
    st = engine.gpu->EncodeSealed(pages, blocks, &done, &per_event);
    for (size_t c = 0; c < done.size() && st.ok(); ++c) {
      st = kernels::WaitEvent(done[c]);
      if (st.ok()) commit_upto(std::min(blocks.size(), (c + 1) * per_event));
    }
  } else {
    // The host seals each chunk's blocks (CRC32C) as soon as the GPU has written them, while it
    // encodes the later chunks.
    st = engine.gpu->EncodeChunks(pages, blocks, kSealChunk, &done);
    std::vector<absl::Status> sealed_chunks(done.size());
    ParallelFor(done.size(), SealThreads(), [&](size_t c) {
      sealed_chunks[c] = kernels::UseDevice(engine.gpu->device());  // no context on device 0
      if (sealed_chunks[c].ok()) sealed_chunks[c] = kernels::WaitEvent(done[c]);
      if (!sealed_chunks[c].ok()) return;
      for (size_t k = c * kSealChunk; k < std::min(blocks.size(), (c + 1) * kSealChunk); ++k) {
        engine.gpu->Seal(blocks[k]);
      }
    });
    for (const absl::Status& s : sealed_chunks) st.Update(s);
    if (st.ok()) commit_upto(blocks.size());
  }
  for (void* event : done) kernels::DestroyEvent(event);
  if (st.ok() && committed_upto < blocks.size()) {
    st = absl::InternalError("the GPU encode returned fewer slices than pages");
  }
  if (!st.ok()) {
    (void)engine.gpu->Wait();  // nothing may still write the reserved slots
    KVTIER_LOG(kError, "engine ", engine.id, ": GPU encode failed: ", st.message());
    for (size_t k = committed_upto; k < items.size(); ++k) {
      out->results[items[k]].Set(absl::InternalError(st.message()));
    }
    // The uncommitted reservations are released unstored.
  }
  return stored;
}

void GpuDataPlane::Onboard(const EnginePages& engine, const OnboardBatch& batch, OnboardResult* out,
                           ItemProgress* progress, int end) {
  ItemProgress whole;
  if (progress == nullptr) progress = &whole;
  // Kept across turns: a page written by an earlier turn is still taken, a stop still holds.
  absl::flat_hash_set<uint32_t>& destinations = progress->destinations;
  bool& stopped = progress->stopped;
  uint32_t onboarded = 0;
  const uint64_t cold_before = out->cold_bytes_read;
  const int size = static_cast<int>(batch.items.size());
  if (out->results.size() < batch.items.size()) out->results.resize(size);  // in the first turn
  const int first = progress->next;
  int next = first;
  // The rest in a later turn; a turn does at least one full pass (the staged paths need them).
  end = std::min(std::max(end, first + static_cast<int>(kGpuBatch)), size);
  while (next < end && !stopped) {
    std::vector<int> items, hot_items;
    std::vector<store::PinnedBlock> pinned, hot_pinned;
    std::vector<const uint8_t*> blocks;
    std::vector<uint8_t*> pages;
    std::vector<kernels::CopySpan> hot_copies;  // GPU-tier pages: device to device
    // The GPU decodes the pages acquired so far while the store pins the next ones; the pins are
    // held until the batch's Wait.
    const bool staged =
        engine.gpu->Staged(std::min<size_t>(kGpuBatch, static_cast<size_t>(end - next)));
    size_t enqueued = 0;
    absl::Status launched;
    auto enqueue = [&]() {
      if (launched.ok() && enqueued < items.size()) {
        launched = engine.gpu->DecodeAsync(absl::MakeConstSpan(blocks).subspan(enqueued),
                                           absl::MakeConstSpan(pages).subspan(enqueued), staged);
      }
      enqueued = items.size();
    };
    for (; next < end && items.size() + hot_items.size() < kGpuBatch && !stopped; ++next) {
      if (items.size() - enqueued >= kOnboardChunk) enqueue();
      const PageItem& item = batch.items[next];
      ItemResult* result = &out->results[next];
      absl::Status st;
      if (!item.hash.ok()) {
        st = item.hash.status();
      } else if (!engine.CheckPage(item.page_index).ok()) {
        st = engine.CheckPage(item.page_index);
      } else if (!destinations.insert(item.page_index).second) {
        st = absl::InvalidArgumentError(
            absl::StrFormat("page index %d is the destination of an earlier item of this request",
                            item.page_index));
      }
      if (st.ok() && engine.gpu_tier_copier != nullptr) {
        absl::StatusOr<std::optional<store::PinnedBlock>> hot =
            store_->AcquireHot({engine.ns, *item.hash}, engine.gpu->plan().fingerprint);
        st = hot.status();
        if (st.ok() && hot->has_value()) {
          result->tier = index::Tier::kGpu;
          hot_items.push_back(next);
          hot_copies.push_back({(*hot)->bytes().data(), engine.device_pool->slot(item.page_index),
                                (*hot)->bytes().size()});
          hot_pinned.push_back(std::move(**hot));
          continue;
        }
      }
      std::optional<store::PinnedBlock> block;
      if (st.ok()) {
        absl::StatusOr<std::optional<store::PinnedBlock>> got =
            store_->Acquire({engine.ns, *item.hash});
        st = got.status();
        if (st.ok() && !got->has_value()) st = absl::NotFoundError("");
        if (st.ok()) {
          block = std::move(**got);
          st = engine.gpu->CheckBlock(block->bytes());
        }
      }
      if (!st.ok()) {
        result->Set(st);
        if (absl::IsNotFound(st)) result->message.clear();
        stopped = !batch.continue_after_miss;
        continue;
      }
      result->tier = block->served_from();
      items.push_back(next);
      blocks.push_back(block->bytes().data());
      pages.push_back(engine.device_pool->slot(item.page_index));
      pinned.push_back(std::move(*block));
    }
    if (items.empty() && hot_items.empty()) continue;
    absl::Status copied;
    void* hot_stream = nullptr;
    if (!hot_items.empty()) {
      copied = kernels::UseDevice(engine.gpu->device());
      hot_stream = kernels::PerThreadStream();
      if (copied.ok()) copied = engine.gpu_tier_copier->Enqueue(hot_copies, hot_stream);
    }
    enqueue();
    absl::Status st = launched;
    st.Update(engine.gpu->Wait());  // also after a failed launch: earlier chunks use the pins
    if (!hot_items.empty()) copied.Update(kernels::SynchronizeStream(hot_stream));
    for (int i : items) {
      out->results[i].Set(st.ok() ? absl::OkStatus() : absl::InternalError(st.message()));
    }
    for (int i : hot_items) {
      out->results[i].Set(copied.ok() ? absl::OkStatus() : absl::InternalError(copied.message()));
    }
    if (!st.ok()) KVTIER_LOG(kError, "engine ", engine.id, ": GPU decode failed: ", st.message());
    if (!copied.ok()) {
      KVTIER_LOG(kError, "engine ", engine.id,
                 ": copy from the GPU tier failed: ", copied.message());
    }
    if (st.ok()) {
      onboarded += static_cast<uint32_t>(items.size());
      for (const store::PinnedBlock& b : pinned) out->cold_bytes_read += b.bytes().size();
    }
    if (copied.ok()) onboarded += static_cast<uint32_t>(hot_items.size());
  }
  if (stopped) {
    for (int i = next; i < size; ++i) out->results[i].code = ItemCode::kSkipped;  // not attempted
    next = size;
  }
  progress->next = next;
  if (next == size) out->onboarded_pages = LeadingOk(out->results);
  out->hot_bytes_written += uint64_t{onboarded} * engine.hot_page_bytes;
  totals_->hot_bytes_onboarded += uint64_t{onboarded} * engine.hot_page_bytes;
  totals_->cold_bytes_onboarded += out->cold_bytes_read - cold_before;
}

}  // namespace

std::unique_ptr<DataPlane> MakeGpuDataPlane(store::BlockStore* store, DataPlaneTotals* totals) {
  return std::make_unique<GpuDataPlane>(store, totals);
}

}  // namespace kvtier::dataplane
