// BlockStore's hot-page calls: the GPU tier's write path (ReserveHot and its Commit, PutHot) and
// read path (AcquireHot, ReadHot), and the namespaces' hot layouts (SetHotLayout). They publish
// and pin through the same InsertWriting/Publish and pins as the cold-block calls.
#include <chrono>
#include <utility>

#include "absl/strings/str_format.h"
#include "codec/cold_block.h"
#include "common/status_macros.h"
#include "daemon/store/block_store.h"
#include "daemon/store/block_store_internal.h"
#include "kernels/device.h"

namespace kvtier::store {

using internal::Entry;
using internal::State;

absl::Status BlockStore::SetHotLayout(NamespaceId ns, const codec::PageLayout& layout,
                                      const codec::CodecSpec& spec) {
  KVTIER_ASSIGN_OR_RETURN(codec::BlockPlan plan, codec::MakeBlockPlan(layout, spec));
  State& s = *state_;
  {
    // Every engine of a namespace registers its layout (a namespace has one): the codec made
    // for the first stays, and the layout table does not grow with registrations.
    absl::MutexLock lock(&s.mu);
    auto it = s.hot.find(ns);
    if (it != s.hot.end() && it->second->plan().fingerprint == plan.fingerprint) {
      return absl::OkStatus();
    }
  }
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<kernels::GpuBlockCodec> hot,
                          kernels::GpuBlockCodec::CreateFused(plan));
  if (hot->plan().block_bytes > options_.max_block_bytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("namespace %d: a block of this layout has %d bytes, more than the "
                        "store's max_block_bytes (%d)",
                        ns, hot->plan().block_bytes, options_.max_block_bytes));
  }
  if (s.gpu && hot->page_bytes() > s.gpu->chunk_bytes()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "namespace %d: a hot page of this layout needs a %d-byte GPU slot, more than the GPU "
        "tier's chunk size (%d)",
        ns, hot->page_bytes(), s.gpu->chunk_bytes()));
  }
  absl::MutexLock lock(&s.mu);
  s.hot[ns] = hot.get();
  s.hot_codecs.push_back(std::move(hot));
  return absl::OkStatus();
}

std::optional<int> BlockStore::GpuTierDevice() const {
  if (!state_->gpu) return std::nullopt;
  return state_->gpu->device();
}

absl::StatusOr<Reservation> BlockStore::ReserveHot(const BlockKey& key,
                                                   uint64_t layout_fingerprint) {
  return ReserveHotWaiting(key, layout_fingerprint, /*wait_ms=*/0);
}

absl::StatusOr<Reservation> BlockStore::ReserveHotWaiting(const BlockKey& key,
                                                          uint64_t layout_fingerprint,
                                                          uint32_t wait_ms) {
  State& s = *state_;
  if (!s.gpu) {
    return absl::FailedPreconditionError("the store has no GPU tier (gpu.capacity is 0)");
  }
  absl::MutexLock lock(&s.mu);
  KVTIER_ASSIGN_OR_RETURN(const kernels::GpuBlockCodec* codec, internal::HotCodecOf(s, key.ns));
  if (codec->plan().fingerprint != layout_fingerprint) {
    return absl::FailedPreconditionError(
        absl::StrFormat("namespace %d's hot pages have layout %016x, not %016x", key.ns,
                        codec->plan().fingerprint, layout_fingerprint));
  }
  if (s.stop) return absl::UnavailableError("the store is shutting down");
  if (s.map.contains(key)) return absl::AlreadyExistsError("block is already stored");
  const uint64_t block_bytes = codec->plan().block_bytes;
  const uint64_t slot_size = s.host_tier->SlotSize(block_bytes);
  KVTIER_RETURN_IF_ERROR(MakeNamespaceRoom(key.ns, block_bytes, slot_size));
  std::optional<TierSlot> slot;
  if (wait_ms == 0) {
    slot = s.gpu->Allocate(codec->page_bytes());
    if (!slot.has_value()) s.work_cv.Signal();  // make room for the next ones
  } else {
    slot = internal::AllocateWaiting(s, *s.gpu, codec->page_bytes(), wait_ms, s.gpu_room_waiters,
                                     nullptr);
  }
  if (!slot.has_value()) {
    if (wait_ms > 0) ++s.counters.put_rejected;  // else the caller stores it another way
    if (s.stop) return absl::UnavailableError("the store is shutting down");
    return absl::ResourceExhaustedError(absl::StrFormat(
        "GPU tier full: no room for a %d-byte page within %d ms (%d of %d bytes used, %d "
        "pages pinned or being demoted)",
        codec->page_bytes(), wait_ms, s.gpu->used_bytes(), s.gpu->capacity_bytes(),
        s.pinned + s.migrating));
  }
  if (s.map.contains(key)) {  // stored by another caller while this one waited
    (void)s.gpu->Free(*slot, codec->page_bytes());
    return absl::AlreadyExistsError("block is already stored");
  }
  s.gpu_used = s.gpu->used_bytes();
  Entry* e = internal::InsertWriting(s, key, block_bytes, slot_size);
  e->rec.codec = static_cast<uint8_t>(codec::PlanHeader(codec->plan()).codec);
  e->gpu = slot->offset;
  e->hot = codec;
  Reservation r;
  r.store_ = this;
  r.entry_ = e;
  r.key_ = key;
  r.bytes_ = absl::Span<uint8_t>(s.gpu->data() + slot->offset, codec->page_bytes());
  r.tier_ = Tier::kGpu;
  return r;
}

absl::Status BlockStore::CommitHot(Reservation reservation, const PutOptions& options) {
  State& s = *state_;
  if (options.durable || options.wait_durable) {
    return absl::InvalidArgumentError(
        "a hot page is volatile and cannot be stored as durable; store its cold block instead");
  }
  Entry* e = static_cast<Entry*>(reservation.entry_);
  absl::MutexLock lock(&s.mu);
  reservation.store_ = nullptr;  // ownership of the entry moves to the map
  if (s.stop) {
    internal::Detach(s, e, RemovedBy::kSilent);
    return absl::UnavailableError("the store is shutting down");
  }
  internal::Publish(s, e, options, internal::NowMs(options_), Tier::kGpu, e->hot->page_bytes(),
                    /*durable=*/false);
  if (s.gpu_used > options_.gpu.watermarks.high * static_cast<double>(s.gpu->capacity_bytes())) {
    s.work_cv.Signal();
  }
  return absl::OkStatus();
}

absl::Status BlockStore::PutHot(const BlockKey& key, const void* device_page,
                                const PutOptions& options) {
  State& s = *state_;
  const auto start = std::chrono::steady_clock::now();
  if (options.durable || options.wait_durable) {
    return absl::InvalidArgumentError(
        "a hot page is volatile and cannot be stored as durable; store its cold block instead");
  }
  if (device_page == nullptr) return absl::InvalidArgumentError("null device page");
  uint64_t fingerprint = 0;
  if (s.gpu) {
    absl::MutexLock lock(&s.mu);
    KVTIER_ASSIGN_OR_RETURN(const kernels::GpuBlockCodec* codec, internal::HotCodecOf(s, key.ns));
    fingerprint = codec->plan().fingerprint;
  }
  absl::StatusOr<Reservation> r = ReserveHotWaiting(key, fingerprint, options_.put_wait_ms);
  if (absl::IsAlreadyExists(r.status())) {
    absl::MutexLock lock(&s.mu);
    ++s.counters.duplicate_puts;
    return absl::OkStatus();
  }
  if (!r.ok()) return r.status();
  // The copy runs outside the lock; the entry is invisible until Commit publishes it, and
  // destroying the reservation on an error frees its slot.
  const TierSlot slot{0, static_cast<uint64_t>(r->bytes().data() - s.gpu->data())};
  KVTIER_RETURN_IF_ERROR(s.gpu->Write(
      slot,
      absl::Span<const uint8_t>(static_cast<const uint8_t*>(device_page), r->bytes().size())));
  KVTIER_RETURN_IF_ERROR(Commit(std::move(*r), options));
  internal::RecordLatency(s.put_latency, start);
  return absl::OkStatus();
}

absl::StatusOr<std::optional<PinnedBlock>> BlockStore::AcquireHot(const BlockKey& key,
                                                                  uint64_t layout_fingerprint) {
  State& s = *state_;
  if (!s.gpu) return std::nullopt;
  absl::MutexLock lock(&s.mu);
  auto it = s.map.find(key);
  if (it == s.map.end() || it->second->writing() || !it->second->gpu.has_value()) {
    return std::nullopt;
  }
  Entry* e = it->second.get();
  if (e->hot->plan().fingerprint != layout_fingerprint) return std::nullopt;
  ++e->pins;
  ++s.pinned;
  const uint64_t now_ms = internal::NowMs(options_);
  e->rec.flags |= index::kBlockFlagReused;
  e->rec.last_access_ms = now_ms;
  s.gpu_lru.MoveToFront(e);
  s.namespaces.Touch(e);
  ++s.counters.hits[static_cast<int>(Tier::kGpu)];
  s.counters.bytes_out[static_cast<int>(Tier::kGpu)] += e->hot->page_bytes();
  internal::CountNamespaceRead(s, key.ns, true, now_ms);
  PinnedBlock pinned;
  pinned.store_ = this;
  pinned.entry_ = e;
  pinned.bytes_ = absl::Span<const uint8_t>(s.gpu->data() + *e->gpu, e->hot->page_bytes());
  pinned.served_from_ = Tier::kGpu;
  return std::optional<PinnedBlock>(std::move(pinned));
}

absl::StatusOr<std::optional<Tier>> BlockStore::ReadHot(const BlockKey& key, void* device_dst,
                                                        void* stream) {
  State& s = *state_;
  if (device_dst == nullptr) return absl::InvalidArgumentError("null device destination");
  const kernels::GpuBlockCodec* codec = nullptr;
  {
    absl::MutexLock lock(&s.mu);
    KVTIER_ASSIGN_OR_RETURN(codec, internal::HotCodecOf(s, key.ns));
    auto it = s.map.find(key);
    if (it != s.map.end() && !it->second->writing() && it->second->gpu.has_value() &&
        it->second->hot->plan().fingerprint != codec->plan().fingerprint) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "the page was stored under another layout of namespace %d (fingerprint %016x, the "
          "namespace's is now %016x)",
          key.ns, it->second->hot->plan().fingerprint, codec->plan().fingerprint));
    }
  }
  const int device = s.gpu ? s.gpu->device() : options_.gpu.device;
  KVTIER_RETURN_IF_ERROR(kernels::UseDevice(device));
  if (stream == nullptr) stream = kernels::PerThreadStream();
  KVTIER_ASSIGN_OR_RETURN(std::optional<PinnedBlock> hot,
                          AcquireHot(key, codec->plan().fingerprint));
  if (hot.has_value()) {  // a GPU hit: the page as stored
    KVTIER_RETURN_IF_ERROR(
        kernels::CopyAsync(device_dst, hot->bytes().data(), hot->bytes().size(), stream));
    KVTIER_RETURN_IF_ERROR(kernels::SynchronizeStream(stream));
    return std::optional<Tier>(Tier::kGpu);
  }
  if (s.host_tier->arena().pin_mechanism() != "cuda") {
    return absl::FailedPreconditionError(
        "ReadHot decodes from the host tier, which must be pinned with CUDA (it is pinned with: " +
        s.host_tier->arena().pin_mechanism() + ")");
  }
  KVTIER_ASSIGN_OR_RETURN(std::optional<PinnedBlock> pinned, Acquire(key));
  if (!pinned.has_value()) return std::optional<Tier>();
  KVTIER_ASSIGN_OR_RETURN(codec::ColdBlockHeader header,
                          codec::ParseColdBlockHeader(pinned->bytes()));
  if (header.layout_fingerprint != codec->plan().fingerprint ||
      pinned->bytes().size() != codec->plan().block_bytes) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "the block was stored under another layout than namespace %d's hot layout (fingerprint "
        "%016x, %d bytes; expected %016x, %d bytes)",
        key.ns, header.layout_fingerprint, pinned->bytes().size(), codec->plan().fingerprint,
        codec->plan().block_bytes));
  }
  KVTIER_RETURN_IF_ERROR(
      codec->EnqueueDecode(pinned->bytes().data(), static_cast<uint8_t*>(device_dst), stream));
  KVTIER_RETURN_IF_ERROR(kernels::SynchronizeStream(stream));
  return std::optional<Tier>(pinned->served_from());
}

}  // namespace kvtier::store
