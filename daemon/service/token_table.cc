// TokenTable: a map of the blocks' tokens and a queue of its keys in insertion order; a block
// recorded again keeps its place, so every key is queued exactly once and the queue's front is
// the entry to evict.
#include "daemon/service/token_table.h"

#include <algorithm>

namespace kvtier::service {

TokenTable::TokenTable(size_t capacity) : capacity_(std::max<size_t>(capacity, 1)) {}

void TokenTable::Put(index::NamespaceId ns, const index::BlockHash& hash,
                     std::vector<uint32_t> token_ids, uint32_t block_size) {
  if (token_ids.empty()) return;
  Key key{ns, hash};
  absl::MutexLock lock(&mu_);
  auto [it, inserted] = blocks_.try_emplace(key);
  it->second.token_ids = std::move(token_ids);
  it->second.block_size = block_size;
  if (!inserted) return;
  order_.push_back(key);
  while (order_.size() > capacity_) {
    blocks_.erase(order_.front());
    order_.pop_front();
    ++evicted_;
  }
}

std::optional<TokenTable::Tokens> TokenTable::Get(index::NamespaceId ns,
                                                  const index::BlockHash& hash) const {
  absl::MutexLock lock(&mu_);
  auto it = blocks_.find(Key{ns, hash});
  if (it == blocks_.end()) return std::nullopt;
  return it->second;
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
