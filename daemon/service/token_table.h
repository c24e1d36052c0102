// TokenTable: the token ids engines sent with their offloaded pages (OffloadItem.token_ids), kept
// for the KV-events publisher's BlockStored events (docs/KV_EVENTS.md), and the block size (the
// engine layout's tokens_per_page) of each namespace that offloaded. A fixed ring of `capacity`
// block slots, reserved when it is made: recording a block allocates nothing (but the first
// block longer than any before, which widens every slot once), and when the ring is full the
// oldest recorded block gives its slot to the new one. It is a side table, never persisted nor in
// the index, so a block whose entry went (evicted, or a daemon restart) is published without
// tokens. Memory: capacity x (56 bytes + 8 to 16 bytes of lookup index + 4 bytes x the slot
// width), the width being the longest block's tokens so far (at most twice that after a widening);
// 65536 blocks of 16 tokens take 8 MiB. Thread-safe.
#ifndef KVTIER_DAEMON_SERVICE_TOKEN_TABLE_H_
#define KVTIER_DAEMON_SERVICE_TOKEN_TABLE_H_

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
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
  // Blocks kept, at most (the capacity is clamped to [1, kMaxCapacity]).
  static constexpr size_t kMaxCapacity = size_t{1} << 24;

  // Keeps at most `capacity` blocks' tokens. Reserves the ring and its index (address space;
  // pages are touched as blocks are recorded).
  explicit TokenTable(size_t capacity);
  TokenTable(const TokenTable&) = delete;
  TokenTable& operator=(const TokenTable&) = delete;

  struct Tokens {
    std::vector<uint32_t> token_ids;  // the page's tokens, in order (not empty)
    uint32_t block_size = 0;          // tokens per page of the engine that sent them
  };

  // One block to record: its hash and its tokens (borrowed for the call).
  struct Block {
    index::BlockHash hash;
    absl::Span<const uint32_t> token_ids;
  };

  // Records the tokens of block `hash` of `ns` (copied), replacing earlier ones, which keep their
  // age (their slot). Empty `token_ids` records nothing. When full, the oldest block's entry goes
  // first.
  void Put(index::NamespaceId ns, const index::BlockHash& hash,
           absl::Span<const uint32_t> token_ids, uint32_t block_size);
  // Put() of each of `blocks` in order, all of `ns` and `block_size`, taking the lock once (an
  // Offload's items).
  void PutMany(index::NamespaceId ns, uint32_t block_size, absl::Span<const Block> blocks);

  // The tokens recorded for the block (a copy); nullopt when none are.
  std::optional<Tokens> Get(index::NamespaceId ns, const index::BlockHash& hash) const;

  // Where GetMany put one block's tokens: (*tokens)[first, first + count); count 0 when none are
  // recorded.
  struct Found {
    uint32_t block_size = 0;
    uint32_t count = 0;
    size_t first = 0;
  };
  // For each of `hashes` of `ns`, in order, a Found into *found (resized to hashes.size()), the
  // tokens appended to *tokens (cleared first; the caller may reuse both, so that no allocation is
  // made once they are large enough). Takes the lock once per 256 hashes (a logged event's
  // blocks).
  void GetMany(index::NamespaceId ns, absl::Span<const index::BlockHash> hashes,
               std::vector<Found>* found, std::vector<uint32_t>* tokens) const;

  // Records the block size of `ns` (the last engine's that offloaded into it wins).
  void SetBlockSize(index::NamespaceId ns, uint32_t block_size);
  // The block size recorded for `ns`; 0 when none is.
  uint32_t BlockSizeOf(index::NamespaceId ns) const;

  size_t size() const;  // blocks with tokens
  size_t capacity() const { return capacity_; }
  uint64_t evicted() const;      // entries that went to make room
  uint32_t slot_tokens() const;  // tokens a slot holds now (the slot width)

 private:
  // A ring slot (trivial: the ring is not initialized; slots [0, size_) are in use).
  struct Slot {
    index::NamespaceId ns;
    index::BlockHash hash;
    uint64_t key_hash;  // KeyHash(ns, hash)
    uint32_t block_size;
    uint32_t count;  // tokens, at token_ids_[slot * stride_]
  };
  struct FreeDeleter {
    void operator()(void* p) const { std::free(p); }
  };

  static uint64_t KeyHash(index::NamespaceId ns, const index::BlockHash& hash);
  // The index position that holds `slot`'s number, or of the empty entry where a key of
  // `key_hash` would go; *slot the slot found, or kNone.
  size_t Probe(uint64_t key_hash, index::NamespaceId ns, const index::BlockHash& hash,
               uint32_t* slot) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Removes `slot`'s key from the index (backward-shift deletion: no tombstones).
  void UnindexLocked(uint32_t slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Widens every slot to `tokens` (copying what they hold). REQUIRES: tokens > stride_.
  void WidenLocked(uint32_t tokens) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PutLocked(index::NamespaceId ns, uint64_t key_hash, const Block& block, uint32_t block_size)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  static constexpr uint32_t kNone = ~uint32_t{0};

  const size_t capacity_;
  const size_t
      index_mask_;  // the index has index_mask_ + 1 entries, a power of two >= 2 x capacity
  mutable absl::Mutex mu_;
  std::unique_ptr<Slot[]> slots_ ABSL_GUARDED_BY(mu_);  // capacity_
  // Open addressing with linear probing: slot number + 1, 0 for empty (calloc'd).
  std::unique_ptr<uint32_t[], FreeDeleter> index_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<uint32_t[]> token_ids_ ABSL_GUARDED_BY(mu_);  // capacity_ x stride_
  uint32_t stride_ ABSL_GUARDED_BY(mu_) = 0;
  size_t size_ ABSL_GUARDED_BY(mu_) = 0;  // slots in use
  size_t next_ ABSL_GUARDED_BY(mu_) =
      0;  // the slot the next new block takes (the oldest when full)
  uint64_t evicted_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<index::NamespaceId, uint32_t> block_sizes_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvtier::service

#endif  // KVTIER_DAEMON_SERVICE_TOKEN_TABLE_H_
