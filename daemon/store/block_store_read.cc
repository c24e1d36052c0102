// BlockStore's read path: LookupChain, Acquire (from the host tier, or staged from the GPU tier or
// disk and verified), Hold and Read. The hot-page reads are in block_store_hot.cc.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "codec/cold_block.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "daemon/store/block_store.h"
#include "daemon/store/block_store_internal.h"
#include "kernels/device.h"

namespace kvtier::store {

using internal::Entry;
using internal::State;

size_t BlockStore::LookupChain(NamespaceId ns, absl::Span<const BlockHash> chain,
                               std::vector<Tier>* tiers) const {
  State& s = *state_;
  if (tiers != nullptr) tiers->clear();
  BlockKey key;
  key.ns = ns;
  absl::ReaderMutexLock lock(&s.mu);
  // Long chains are bound by memory latency: prefetch the table slots kSlotAhead keys ahead and
  // the entries kEntryAhead keys ahead, so that several misses are in flight at once.
  constexpr size_t kSlotAhead = 16;
  constexpr size_t kEntryAhead = 8;
  std::array<const Entry*, kEntryAhead> found{};
  BlockKey ahead;
  ahead.ns = ns;
  for (size_t i = 0; i < std::min(kSlotAhead, chain.size()); ++i) {
    ahead.hash = chain[i];
    s.map.prefetch(ahead);
  }
  const size_t n = chain.size();
  for (size_t i = 0; i < n + kEntryAhead; ++i) {
    if (i + kSlotAhead < n) {
      ahead.hash = chain[i + kSlotAhead];
      s.map.prefetch(ahead);
    }
    if (i >= kEntryAhead) {  // consume key j before its ring slot is reused for key i
      const size_t j = i - kEntryAhead;
      const Entry* e = found[j % kEntryAhead];
      if (e == nullptr || e->writing()) return j;
      if (tiers != nullptr) {
        tiers->push_back(internal::FastestTier(*e));
      }
    }
    if (i < n) {
      key.hash = chain[i];
      auto it = s.map.find(key);
      const Entry* e = it == s.map.end() ? nullptr : it->second.get();
      if (e != nullptr) __builtin_prefetch(e);
      found[i % kEntryAhead] = e;
    }
  }
  return n;
}

absl::StatusOr<std::optional<PinnedBlock>> BlockStore::Acquire(const BlockKey& key) {
  std::string failure;
  bool io_error = false;
  ReadMode mode;
  mode.failure = &failure;
  mode.io_error = &io_error;
  KVTIER_ASSIGN_OR_RETURN(std::optional<PinnedBlock> pinned, AcquireImpl(key, mode));
  if (pinned.has_value() || failure.empty()) return pinned;
  // It was removed (and counted): the caller learns it lost a block, not that it never had one.
  return absl::DataLossError(absl::StrCat(
      "block ",
      absl::BytesToHexString(
          absl::string_view(reinterpret_cast<const char*>(key.hash.data()), key.hash.size())),
      " of namespace ", absl::StrFormat("%08x", key.ns),
      io_error ? " could not be read and was removed: " : " failed verification and was removed: ",
      failure));
}

absl::StatusOr<std::optional<PinnedBlock>> BlockStore::AcquireUncounted(const BlockKey& key) {
  ReadMode mode;
  mode.touch = false;
  return AcquireImpl(key, mode);
}

absl::StatusOr<std::optional<PinnedBlock>> BlockStore::AcquireImpl(const BlockKey& key,
                                                                   const ReadMode& mode) {
  const bool touch = mode.touch, verify_host = mode.verify_host, force_disk = mode.force_disk;
  State& s = *state_;
  const auto start = std::chrono::steady_clock::now();
  auto record_latency = [&] { internal::RecordLatency(s.read_latency, start); };
  absl::MutexLock lock(&s.mu);
  auto it = s.map.find(key);
  if (it == s.map.end() || it->second->writing()) {
    if (touch) {
      ++s.counters.misses;
      internal::CountNamespaceRead(s, key.ns, false, 0);
    }
    return std::nullopt;
  }
  Entry* e = it->second.get();
  if (touch) {
    e->rec.flags |= index::kBlockFlagReused;
    e->rec.last_access_ms = internal::NowMs(options_);
    s.namespaces.Touch(e);
  }
  // Every path below holds a pin while the lock is released, so the entry and its copies stay.
  ++e->pins;
  ++s.pinned;
  auto unpin = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) { internal::DropPin(s, e); };
  // Drops a block whose copy in `tier` failed verification (a miss plus a counter, never its
  // bytes).
  auto drop = [&](bool io_error, Tier tier,
                  const std::string& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) {
    ++(io_error ? s.counters.io_errors : s.counters.checksum_failures[static_cast<int>(tier)]);
    if (mode.failure != nullptr) *mode.failure = why;
    if (mode.io_error != nullptr) *mode.io_error = io_error;
    if (mode.keep_corrupt) {
      KVTIER_LOG(kWarning, "store: block failed verification (kept, report only): ", why);
      internal::DropPin(s, e);
      return;
    }
    KVTIER_LOG(kWarning, "store: block dropped: ", why);
    if (touch) {
      ++s.counters.misses;
      internal::CountNamespaceRead(s, key.ns, false, 0);
    }
    --e->pins;
    --s.pinned;
    if (!e->removed()) {
      internal::Detach(s, e, RemovedBy::kCorrupt);  // releases the entry when nothing else holds it
    } else {
      internal::MaybeRelease(s, e);
    }
    s.changed_cv.SignalAll();
  };
  if (e->host.has_value() && !(force_disk && e->disk.has_value())) {
    const absl::Span<const uint8_t> bytes(s.host_tier->data() + *e->host, e->rec.size);
    if (e->verify_on_read || verify_host) {
      const uint32_t expected = e->rec.checksum;
      s.mu.Unlock();
      absl::StatusOr<uint32_t> crc = codec::VerifyColdBlock(bytes);
      s.mu.Lock();
      if (!crc.ok() || *crc != expected) {
        drop(false, Tier::kHost,
             absl::StrCat("host copy: ", crc.ok() ? "checksum differs from the index"
                                                  : std::string(crc.status().message())));
        return std::nullopt;
      }
      e->verify_on_read = false;
    }
    if (touch) {
      s.host_lru.MoveToFront(e);
      ++s.counters.hits[static_cast<int>(Tier::kHost)];
      s.counters.bytes_out[static_cast<int>(Tier::kHost)] += e->rec.size;
      internal::CountNamespaceRead(s, key.ns, true, e->rec.last_access_ms);
    }
    PinnedBlock pinned;
    pinned.store_ = this;
    pinned.entry_ = e;
    pinned.bytes_ = bytes;
    pinned.served_from_ = Tier::kHost;
    record_latency();
    return std::optional<PinnedBlock>(std::move(pinned));
  }
  if (!e->disk.has_value() && !e->gpu.has_value()) {  // no copy (not for a committed entry)
    unpin();
    return std::nullopt;
  }
  // From the GPU tier or from disk: stage the block in a host slot, fill it outside the lock.
  const bool from_gpu = e->gpu.has_value();
  if (touch) {
    if (from_gpu) {
      s.gpu_lru.MoveToFront(e);
    } else {
      s.disk_lru.MoveToFront(e);
    }
  }
  const uint32_t size = e->rec.size;
  std::optional<uint64_t> staging;
  if (std::optional<TierSlot> slot = internal::AllocateWaiting(
          s, *s.host_tier, size, options_.put_wait_ms, s.room_waiters, e)) {
    staging = slot->offset;
  }
  if (!staging.has_value()) {
    s.host_used = s.host_tier->used_bytes();
    const bool removed = e->removed();
    unpin();
    if (removed) {
      if (touch) {
        ++s.counters.misses;
        internal::CountNamespaceRead(s, key.ns, false, 0);
      }
      return std::nullopt;
    }
    if (s.stop) return absl::UnavailableError("the store is shutting down");
    return absl::UnavailableError(absl::StrFormat(
        "no host memory to stage a %d-byte block within %d ms (%d of %d bytes used, %d "
        "blocks pinned)",
        size, options_.put_wait_ms, s.host_tier->used_bytes(), s.host_tier->arena().size(),
        s.pinned));
  }
  // The end of both staged paths: the block (filled and verified at `dst`, the staging slot) is
  // served from `from`; drops the entry's pin (the handle owns the staging slot) and counts the
  // read (`bytes_out` of that tier).
  auto serve_staged = [&](Tier from, uint64_t bytes_out,
                          uint8_t* dst) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) {
    unpin();
    if (touch) {
      ++s.counters.hits[static_cast<int>(from)];
      s.counters.bytes_out[static_cast<int>(from)] += bytes_out;
      internal::CountNamespaceRead(s, key.ns, true, internal::NowMs(options_));
    }
    PinnedBlock pinned;
    pinned.store_ = this;
    pinned.staging_offset_ = *staging;
    pinned.staging_size_ = size;
    pinned.bytes_ = absl::Span<const uint8_t>(dst, size);
    pinned.served_from_ = from;
    record_latency();
    return std::optional<PinnedBlock>(std::move(pinned));
  };
  if (from_gpu) {
    s.host_used = s.host_tier->used_bytes();
    uint8_t* dst = s.host_tier->data() + *staging;
    uint8_t* slot = s.gpu->data() + *e->gpu;  // stays: the pin keeps the GPU copy
    const kernels::GpuBlockCodec* hot = e->hot;
    s.mu.Unlock();
    absl::Status encoded = hot->EncodeToHost(s.gpu->device(), slot, dst);
    s.mu.Lock();
    if (!encoded.ok()) {
      (void)s.host_tier->slots().Free(*staging, size);
      s.host_used = s.host_tier->used_bytes();
      unpin();
      return encoded;
    }
    return serve_staged(Tier::kGpu, hot->page_bytes(), dst);
  }
  s.host_used = s.host_tier->used_bytes();
  const DiskSlot slot = *e->disk;
  const uint32_t expected = e->rec.checksum;
  const uint64_t io_length = s.disk->SlotSize(size);
  uint8_t* dst = s.host_tier->data() + *staging;
  s.mu.Unlock();
  absl::Status read = s.disk->Read(slot, absl::Span<uint8_t>(dst, io_length));
  absl::StatusOr<uint32_t> crc =
      read.ok() ? codec::VerifyColdBlock({dst, size}) : absl::StatusOr<uint32_t>(read);
  s.mu.Lock();
  if (!crc.ok() || *crc != expected) {
    (void)s.host_tier->slots().Free(*staging, size);
    s.host_used = s.host_tier->used_bytes();
    drop(!read.ok(), Tier::kDisk,
         absl::StrCat(
             "disk copy in file ", slot.file, " at offset ", slot.offset, ": ",
             crc.ok() ? absl::StrFormat("header checksum %08x, index expects %08x", *crc, expected)
                      : std::string(crc.status().message())));
    return std::nullopt;
  }
  return serve_staged(Tier::kDisk, size, dst);
}

void BlockStore::Unpin(void* raw, std::optional<uint64_t> staging, uint64_t staging_size) {
  State& s = *state_;
  absl::MutexLock lock(&s.mu);
  if (staging.has_value()) {
    absl::Status st = s.host_tier->slots().Free(*staging, staging_size);
    if (!st.ok()) KVTIER_LOG(kError, "host tier (staging): ", st.message());
    s.host_used = s.host_tier->used_bytes();
  }
  if (Entry* e = static_cast<Entry*>(raw)) internal::DropPin(s, e);
  s.changed_cv.SignalAll();
}

absl::StatusOr<std::optional<PinnedBlock>> BlockStore::Hold(const BlockKey& key) {
  State& s = *state_;
  absl::MutexLock lock(&s.mu);
  auto it = s.map.find(key);
  if (it == s.map.end() || it->second->writing()) return std::nullopt;
  Entry* e = it->second.get();
  ++e->pins;
  ++s.pinned;
  PinnedBlock held;
  held.store_ = this;
  held.entry_ = e;
  held.served_from_ = internal::FastestTier(*e);
  return std::optional<PinnedBlock>(std::move(held));
}

absl::StatusOr<std::optional<uint64_t>> BlockStore::Read(const BlockKey& key,
                                                         absl::Span<uint8_t> dst) {
  KVTIER_ASSIGN_OR_RETURN(std::optional<PinnedBlock> pinned, Acquire(key));
  if (!pinned.has_value()) return std::optional<uint64_t>();
  const absl::Span<const uint8_t> bytes = pinned->bytes();
  if (dst.size() < bytes.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "destination of %d bytes is smaller than the %d-byte block", dst.size(), bytes.size()));
  }
  std::memcpy(dst.data(), bytes.data(), bytes.size());
  return std::optional<uint64_t>(bytes.size());
}

}  // namespace kvtier::store
