// TokenTable: a map of the blocks' tokens and a queue of its keys in insertion order; a block
// recorded again keeps its place, so every key is queued exactly once and the queue's front is
// the entry to evict. The tokens are immutable and shared: Offload's workers build them before
// taking the lock, the publisher takes references under it (no copy, no allocation), and
// entries replaced or evicted are freed after it, so that the lock is held for map operations
// only; a request's items and a logged event's blocks take it once.
#include "daemon/service/token_table.h"

#include <algorithm>

namespace kvtier::service {

TokenTable::TokenTable(size_t capacity) : capacity_(std::max<size_t>(capacity, 1)) {}

namespace {
constexpr size_t kHashesPerLock = 256;  // GetMany
}  // namespace

void TokenTable::PutLocked(const Key& key, std::shared_ptr<const Tokens> tokens,
                           std::vector<std::shared_ptr<const Tokens>>* garbage) {
  auto [it, inserted] = blocks_.try_emplace(key);
  if (!inserted) garbage->push_back(std::move(it->second));
  it->second = std::move(tokens);
  if (!inserted) return;
  order_.push_back(key);
  while (order_.size() > capacity_) {
    auto old = blocks_.find(order_.front());
    garbage->push_back(std::move(old->second));
    blocks_.erase(old);
    order_.pop_front();
    ++evicted_;
  }
}

void TokenTable::Put(index::NamespaceId ns, const index::BlockHash& hash,
                     std::vector<uint32_t> token_ids, uint32_t block_size) {
  std::vector<std::pair<index::BlockHash, std::vector<uint32_t>>> one;
  one.emplace_back(hash, std::move(token_ids));
  PutMany(ns, block_size, std::move(one));
}

void TokenTable::PutMany(index::NamespaceId ns, uint32_t block_size,
                         std::vector<std::pair<index::BlockHash, std::vector<uint32_t>>> blocks) {
  std::vector<std::shared_ptr<const Tokens>> made;
  made.reserve(blocks.size());
  for (auto& [hash, token_ids] : blocks) {
    if (token_ids.empty()) {
      made.push_back(nullptr);
      continue;
    }
    auto t = std::make_shared<Tokens>();
    t->token_ids = std::move(token_ids);
    t->block_size = block_size;
    made.push_back(std::move(t));
  }
  std::vector<std::shared_ptr<const Tokens>> garbage;  // freed after the lock
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (made[i] != nullptr) PutLocked(Key{ns, blocks[i].first}, std::move(made[i]), &garbage);
  }
}

std::optional<TokenTable::Tokens> TokenTable::Get(index::NamespaceId ns,
                                                  const index::BlockHash& hash) const {
  std::vector<std::shared_ptr<const Tokens>> one;
  GetMany(ns, absl::MakeConstSpan(&hash, 1), &one);
  if (one[0] == nullptr) return std::nullopt;
  return *one[0];
}

void TokenTable::GetMany(index::NamespaceId ns, absl::Span<const index::BlockHash> hashes,
                         std::vector<std::shared_ptr<const Tokens>>* out) const {
  out->assign(hashes.size(), nullptr);
  for (size_t first = 0; first < hashes.size(); first += kHashesPerLock) {
    const size_t end = std::min(hashes.size(), first + kHashesPerLock);
    absl::MutexLock lock(&mu_);
    for (size_t i = first; i < end; ++i) {
      auto it = blocks_.find(Key{ns, hashes[i]});
      if (it != blocks_.end()) (*out)[i] = it->second;
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
  absl::MutexLock lock(&mu_);
  auto it = block_sizes_.find(ns);
  return it == block_sizes_.end() ? 0 : it->second;
}

size_t TokenTable::size() const {
  absl::MutexLock lock(&mu_);
  return blocks_.size();
}

uint64_t TokenTable::evicted() const {
  absl::MutexLock lock(&mu_);
  return evicted_;
}

}  // namespace kvtier::service
