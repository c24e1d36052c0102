// TokenTable: a ring of block slots, filled in insertion order, so that the slot the next new
// block takes is also the oldest recorded block's once the ring is full (eviction needs no queue),
// and a block recorded again keeps its slot (its age). Each slot's tokens sit in one array at
// slot x stride, the stride being the longest block's tokens so far: recording a block is a copy
// into its slot, with no allocation, at 10,000 blocks/s under the lock every Offload takes once.
// (The earlier map of shared vectors and queue of keys made two allocations per block and a
// deque's per block: docs/PERFORMANCE.md, "KV events: publishing overhead".) A longer block than
// any before widens every slot at once, to at least twice the stride (so that a table widens a
// few times at most); a width whose array cannot be allocated is not taken, and such blocks are
// not recorded (their events carry no tokens).
//
// Lookup: an open-addressing index of slot numbers with linear probing, at most half full,
// allocated zeroed with the ring; an evicted key leaves by backward-shift deletion, so the index
// has no tombstones and never rehashes. Keys are (namespace, block hash); each slot keeps its
// key's 64-bit hash, so that probes compare it before the key and deletion finds an entry's home
// without rehashing.
#include "daemon/service/token_table.h"

#include <algorithm>
#include <cstring>
#include <new>

namespace kvtier::service {
namespace {

constexpr size_t kHashesPerLock = 256;  // GetMany

size_t IndexSize(size_t capacity) {
  size_t n = 2;
  while (n < 2 * capacity) n <<= 1;
  return n;
}

uint64_t Mix(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ULL;
  h ^= h >> 33;
  return h;
}

}  // namespace

TokenTable::TokenTable(size_t capacity)
    : capacity_(std::clamp<size_t>(capacity, 1, kMaxCapacity)),
      index_mask_(IndexSize(capacity_) - 1),
      slots_(std::make_unique_for_overwrite<Slot[]>(capacity_)),
      index_(static_cast<uint32_t*>(std::calloc(index_mask_ + 1, sizeof(uint32_t)))) {
  if (index_ == nullptr) throw std::bad_alloc();
}

uint64_t TokenTable::KeyHash(index::NamespaceId ns, const index::BlockHash& hash) {
  uint64_t words[4];
  static_assert(sizeof(words) == sizeof(index::BlockHash));
  std::memcpy(words, hash.data(), sizeof(words));
  uint64_t h = Mix(ns + 0x9e3779b97f4a7c15ULL);
  for (uint64_t w : words) h = Mix(h ^ w);
  return h;
}

size_t TokenTable::Probe(uint64_t key_hash, index::NamespaceId ns, const index::BlockHash& hash,
                         uint32_t* slot) const {
  for (size_t pos = key_hash & index_mask_;; pos = (pos + 1) & index_mask_) {
    const uint32_t entry = index_[pos];
    if (entry == 0) {
      *slot = kNone;
      return pos;
    }
    const Slot& s = slots_[entry - 1];
    if (s.key_hash == key_hash && s.ns == ns && s.hash == hash) {
      *slot = entry - 1;
      return pos;
    }
  }
}

void TokenTable::UnindexLocked(uint32_t slot) {
  const Slot& s = slots_[slot];
  uint32_t found = kNone;
  size_t hole = Probe(s.key_hash, s.ns, s.hash, &found);
  if (found != slot) return;  // not indexed
  // Entries after the hole move back into it unless their home lies cyclically in (hole, pos].
  for (size_t pos = (hole + 1) & index_mask_; index_[pos] != 0; pos = (pos + 1) & index_mask_) {
    const size_t home = slots_[index_[pos] - 1].key_hash & index_mask_;
    const bool stays = hole <= pos ? (hole < home && home <= pos) : (hole < home || home <= pos);
    if (stays) continue;
    index_[hole] = index_[pos];
    hole = pos;
  }
  index_[hole] = 0;
}

void TokenTable::WidenLocked(uint32_t tokens) {
  const uint32_t stride = static_cast<uint32_t>(
      std::min<uint64_t>(kNone, std::max<uint64_t>(tokens, 2 * uint64_t{stride_})));
  std::unique_ptr<uint32_t[]> wider(new (std::nothrow) uint32_t[capacity_ * stride]);
  if (wider == nullptr) return;
  for (size_t i = 0; i < size_; ++i) {
    std::memcpy(&wider[i * stride], &token_ids_[i * stride_], slots_[i].count * sizeof(uint32_t));
  }
  token_ids_ = std::move(wider);
  stride_ = stride;
}

void TokenTable::PutLocked(index::NamespaceId ns, uint64_t key_hash, const Block& block,
                           uint32_t block_size) {
  const size_t count = block.token_ids.size();
  if (count == 0) return;
  if (count > stride_) {
    if (count > kNone) return;
    WidenLocked(static_cast<uint32_t>(count));
    if (count > stride_) return;  // the wider ring could not be allocated
  }
  uint32_t slot = kNone;
  size_t pos = Probe(key_hash, ns, block.hash, &slot);
  if (slot == kNone) {
    slot = static_cast<uint32_t>(next_);
    next_ = next_ + 1 == capacity_ ? 0 : next_ + 1;
    if (size_ == capacity_) {  // the slot's block is the oldest: it goes
      UnindexLocked(slot);
      ++evicted_;
      uint32_t absent = kNone;
      pos = Probe(key_hash, ns, block.hash, &absent);  // the deletion may have moved the hole
    } else {
      ++size_;
    }
    Slot& s = slots_[slot];
    s.ns = ns;
    s.hash = block.hash;
    s.key_hash = key_hash;
    index_[pos] = slot + 1;
  }
  Slot& s = slots_[slot];
  s.block_size = block_size;
  s.count = static_cast<uint32_t>(count);
  std::memcpy(&token_ids_[slot * size_t{stride_}], block.token_ids.data(),
              count * sizeof(uint32_t));
}

void TokenTable::Put(index::NamespaceId ns, const index::BlockHash& hash,
                     absl::Span<const uint32_t> token_ids, uint32_t block_size) {
  const Block one{hash, token_ids};
  PutMany(ns, block_size, absl::MakeConstSpan(&one, 1));
}

void TokenTable::PutMany(index::NamespaceId ns, uint32_t block_size,
                         absl::Span<const Block> blocks) {
  constexpr size_t kChunk = 64;  // key hashes computed before the lock, this many at a time
  uint64_t key_hashes[kChunk];
  for (size_t first = 0; first < blocks.size(); first += kChunk) {
    const size_t n = std::min(kChunk, blocks.size() - first);
    for (size_t i = 0; i < n; ++i) key_hashes[i] = KeyHash(ns, blocks[first + i].hash);
    absl::MutexLock lock(&mu_);
    for (size_t i = 0; i < n; ++i) PutLocked(ns, key_hashes[i], blocks[first + i], block_size);
  }
}

std::optional<TokenTable::Tokens> TokenTable::Get(index::NamespaceId ns,
                                                  const index::BlockHash& hash) const {
  std::vector<Found> found;
  std::vector<uint32_t> tokens;
  GetMany(ns, absl::MakeConstSpan(&hash, 1), &found, &tokens);
  if (found[0].count == 0) return std::nullopt;
  return Tokens{std::move(tokens), found[0].block_size};
}

void TokenTable::GetMany(index::NamespaceId ns, absl::Span<const index::BlockHash> hashes,
                         std::vector<Found>* found, std::vector<uint32_t>* tokens) const {
  found->assign(hashes.size(), Found{});
  tokens->clear();
  uint64_t key_hashes[kHashesPerLock];
  for (size_t first = 0; first < hashes.size(); first += kHashesPerLock) {
    const size_t n = std::min(hashes.size() - first, kHashesPerLock);
    for (size_t i = 0; i < n; ++i) key_hashes[i] = KeyHash(ns, hashes[first + i]);
    absl::ReaderMutexLock lock(&mu_);
    for (size_t i = 0; i < n; ++i) {
      uint32_t slot = kNone;
      Probe(key_hashes[i], ns, hashes[first + i], &slot);
      if (slot == kNone) continue;
      const Slot& s = slots_[slot];
      Found& f = (*found)[first + i];
      f.block_size = s.block_size;
      f.count = s.count;
      f.first = tokens->size();
      const uint32_t* t = &token_ids_[slot * size_t{stride_}];
      tokens->insert(tokens->end(), t, t + s.count);
    }
  }
}

void TokenTable::SetBlockSize(index::NamespaceId ns, uint32_t block_size) {
  absl::MutexLock lock(&mu_);
  auto it = block_sizes_.find(ns);
  if (it != block_sizes_.end()) {
    it->second = block_size;
  } else if (block_sizes_.size() < kMaxNamespaces) {
    block_sizes_.emplace(ns, block_size);
  }
}

uint32_t TokenTable::BlockSizeOf(index::NamespaceId ns) const {
  absl::ReaderMutexLock lock(&mu_);
  auto it = block_sizes_.find(ns);
  return it == block_sizes_.end() ? 0 : it->second;
}

size_t TokenTable::size() const {
  absl::ReaderMutexLock lock(&mu_);
  return size_;
}

uint64_t TokenTable::evicted() const {
  absl::ReaderMutexLock lock(&mu_);
  return evicted_;
}

uint32_t TokenTable::slot_tokens() const {
  absl::ReaderMutexLock lock(&mu_);
  return stride_;
}

}  // namespace kvtier::service
