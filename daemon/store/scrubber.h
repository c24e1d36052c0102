// Scrubber: the scan behind BlockStore::Verify (kvtierctl verify). It picks the blocks to check
// under the store's lock, then reads back each stored copy, one at a time and outside the lock,
// through the store's verified read (which removes a block that fails unless the scan only
// reports), and builds the report. Copies are checked in the stack's order, in every tier that
// holds cold blocks (the GPU tier holds hot pages, not yet blocks, and is skipped); a block's
// first failure ends its checks. Internal to the store.
#ifndef KVTIER_DAEMON_STORE_SCRUBBER_H_
#define KVTIER_DAEMON_STORE_SCRUBBER_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/store/block_store_internal.h"

namespace kvtier::store {

class Scrubber {
 public:
  // Reads back and verifies the copy of `key` in `tier` without counting a read: the block's
  // size when it passed; nullopt when it failed (`failure` says why, `io_error` whether the read
  // itself failed; removed unless `keep_corrupt`) or is gone (`failure` left empty). Errors are
  // the read's (Unavailable: no host memory to stage a disk read).
  using ReadCopy = std::function<absl::StatusOr<std::optional<uint64_t>>(
      const BlockKey& key, Tier tier, bool keep_corrupt, std::string* failure, bool* io_error)>;

  Scrubber(BlockStore::State& s, ReadCopy read) : s_(s), read_(std::move(read)) {}

  // Blocks for the scan. The error of the first read that returns one.
  absl::StatusOr<BlockStore::VerifyReport> Run(const BlockStore::VerifyOptions& options);

 private:
  // The keys of the visible blocks the options name that have a copy to check.
  std::vector<BlockKey> Select(const BlockStore::VerifyOptions& options);

  BlockStore::State& s_;
  ReadCopy read_;
};

}  // namespace kvtier::store

#endif  // KVTIER_DAEMON_STORE_SCRUBBER_H_
