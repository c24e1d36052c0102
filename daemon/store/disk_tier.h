// DiskTier: the disk tier's files, one preallocated BlockFile per configured directory, each cut
// into slots by its own SlotAllocator. Allocation spreads blocks over the files (the one with the
// most free space first), so several NVMe devices work in parallel. Not thread-safe for allocation
// (the store serializes it); files() may be used from any thread.
#ifndef KVTIER_DAEMON_STORE_DISK_TIER_H_
#define KVTIER_DAEMON_STORE_DISK_TIER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/progress.h"
#include "daemon/io/block_file.h"
#include "daemon/store/slot_allocator.h"
#include "daemon/store/tier.h"

namespace kvtier::store {

struct DiskTierOptions {
  std::vector<std::string> dirs;  // one file per directory; empty: no disk tier
  uint64_t capacity_bytes = 0;    // total, split evenly across the directories
  io::IoEngine engine = io::IoEngine::kAuto;
  uint32_t queue_depth = 64;
  uint32_t threads = 4;  // thread-pool engine workers per file
  uint64_t chunk_bytes = 256ull << 20;
  std::string file_name = "kvtier-blocks.dat";
  bool direct_io = true;
  // Progress lines of each file's preallocation (io::BlockFileOptions::progress).
  ProgressOptions progress;
  // Opens files through this factory instead of io::OpenBlockFile (tests inject faults here).
  std::function<absl::StatusOr<std::unique_ptr<io::BlockFile>>(const io::BlockFileOptions&)>
      open_file;
};

using DiskSlot = TierSlot;  // file: which of the tier's files

class DiskTier final : public StorageTier {
 public:
  // Creates or opens (and preallocates) the files. `registered_buffers` (the host arena) is
  // borrowed for the tier's lifetime. Errors of io::OpenBlockFile, and InvalidArgument for
  // options that cannot work (capacity below one chunk per file, too many directories).
  static absl::StatusOr<std::unique_ptr<DiskTier>> Create(
      const DiskTierOptions& options, std::vector<absl::Span<uint8_t>> registered_buffers);

  // StorageTier. A tier without files has no room and no capacity.
  index::Tier id() const override { return index::Tier::kDisk; }
  bool persistent() const override { return true; }
  uint64_t SlotSize(uint64_t size) const override {
    return allocators_.empty() ? size : allocators_[0].SlotSize(size);
  }
  std::optional<DiskSlot> Allocate(uint64_t size) override;
  absl::Status Free(const DiskSlot& slot, uint64_t size) override;
  // Recovery. FailedPrecondition when the slot is outside the files or already taken.
  absl::Status MarkAllocated(const DiskSlot& slot, uint64_t size) override;
  // One io::BlockFile::Submit of the whole span.
  void SubmitWrite(const DiskSlot& slot, absl::Span<const uint8_t> src,
                   std::function<void(absl::Status)> done) override;
  absl::Status Read(const DiskSlot& slot, absl::Span<uint8_t> dst) const override;
  absl::Status Sync() override { return SyncAll(); }
  uint64_t capacity_bytes() const override;
  uint64_t used_bytes() const override;
  uint64_t chunk_bytes() const override {
    return allocators_.empty() ? 0 : allocators_[0].chunk_bytes();
  }

  bool CanAllocate(uint64_t size) const;
  size_t file_count() const { return files_.size(); }
  io::BlockFile& file(size_t i) const { return *files_[i]; }
  // fdatasync of every file. Blocks.
  absl::Status SyncAll();

 private:
  DiskTier() = default;
  std::vector<std::unique_ptr<io::BlockFile>> files_;
  std::vector<SlotAllocator> allocators_;
};

}  // namespace kvtier::store

#endif  // KVTIER_DAEMON_STORE_DISK_TIER_H_
