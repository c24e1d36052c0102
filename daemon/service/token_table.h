// TokenTable: the token ids engines sent with their offloaded pages (OffloadItem.token_ids), kept
// for the KV-events publisher's BlockStored events (docs/KV_EVENTS.md), and the block size (the
// engine layout's tokens_per_page) of each namespace that offloaded. Bounded: at most `capacity`
// blocks, the oldest recorded going first; it is a side table, never persisted nor in the index,
// so a block whose entry went (evicted, or a daemon restart) is published without tokens.
// Thread-safe.
#ifndef KVTIER_DAEMON_SERVICE_TOKEN_TABLE_H_
#define KVTIER_DAEMON_SERVICE_TOKEN_TABLE_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "daemon/index/block_record.h"

namespace kvtier::service {

class TokenTable {
 public:
  // Namespaces whose block size is kept, at most (further ones are not recorded).
  static constexpr size_t kMaxNamespaces = 65536;

  // Keeps at most `capacity` blocks' tokens (at least 1).
  explicit TokenTable(size_t capacity);
  TokenTable(const TokenTable&) = delete;
  TokenTable& operator=(const TokenTable&) = delete;

  struct Tokens {
    std::vector<uint32_t> token_ids;  // the page's tokens, in order (not empty)
    uint32_t block_size = 0;          // tokens per page of the engine that sent them
  };

  // Records the tokens of block `hash` of `ns`, replacing earlier ones (which keep their age).
  // Empty `token_ids` records nothing. When full, the oldest block's entry goes first.
  void Put(index::NamespaceId ns, const index::BlockHash& hash, std::vector<uint32_t> token_ids,
           uint32_t block_size);
  // Put() of each (hash, token ids) of `blocks` in order, all of `ns` and `block_size`, taking the
  // lock once (an Offload's items).
  void PutMany(index::NamespaceId ns, uint32_t block_size,
               std::vector<std::pair<index::BlockHash, std::vector<uint32_t>>> blocks);
  // The tokens recorded for the block; nullopt when none are.
  std::optional<Tokens> Get(index::NamespaceId ns, const index::BlockHash& hash) const;
  // The tokens of each of `hashes` of `ns`, in order, into *out (resized to hashes.size()): null
  // where none are recorded. Shared, immutable: no copy of the tokens is made, and the lock is
  // taken once per 256 hashes (a logged event's blocks).
  void GetMany(index::NamespaceId ns, absl::Span<const index::BlockHash> hashes,
               std::vector<std::shared_ptr<const Tokens>>* out) const;

  // Records the block size of `ns` (the last engine's that offloaded into it wins).
  void SetBlockSize(index::NamespaceId ns, uint32_t block_size);
  // The block size recorded for `ns`; 0 when none is.
  uint32_t BlockSizeOf(index::NamespaceId ns) const;

  size_t size() const;  // blocks with tokens
  size_t capacity() const { return capacity_; }
  uint64_t evicted() const;  // entries that went to make room

 private:
  using Key = std::pair<index::NamespaceId, index::BlockHash>;

  // Records `tokens` under `key` (the body of Put); an entry it replaces or evicts goes to
  // *garbage, freed by the caller after the lock.
  void PutLocked(const Key& key, std::shared_ptr<const Tokens> tokens,
                 std::vector<std::shared_ptr<const Tokens>>* garbage)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t capacity_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<Key, std::shared_ptr<const Tokens>> blocks_ ABSL_GUARDED_BY(mu_);
  std::deque<Key> order_ ABSL_GUARDED_BY(mu_);  // the keys of blocks_, oldest first
  absl::flat_hash_map<index::NamespaceId, uint32_t> block_sizes_ ABSL_GUARDED_BY(mu_);
  uint64_t evicted_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kvtier::service

#endif  // KVTIER_DAEMON_SERVICE_TOKEN_TABLE_H_
