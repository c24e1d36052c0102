// The disk tier's files and slot maps. One file per directory keeps the I/O of each device on its
// own ring; capacity is split evenly so that the files fill at the same rate.
#include "daemon/store/disk_tier.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace kvtier::store {

absl::StatusOr<std::unique_ptr<DiskTier>> DiskTier::Create(
    const DiskTierOptions& options, std::vector<absl::Span<uint8_t>> registered_buffers) {
  std::unique_ptr<DiskTier> tier(new DiskTier());
  if (options.dirs.empty()) return tier;
  if (options.dirs.size() > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("disk tier has ", options.dirs.size(), " directories; at most 1024"));
  }
  const uint64_t per_file =
      options.capacity_bytes / options.dirs.size() / options.chunk_bytes * options.chunk_bytes;
  if (per_file == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("disk capacity ", options.capacity_bytes, " bytes over ", options.dirs.size(),
                     " directories is below one ", options.chunk_bytes, "-byte chunk per file"));
  }
  for (const std::string& dir : options.dirs) {
    io::BlockFileOptions file_options;
    file_options.path = absl::StrCat(dir, "/", options.file_name);
    file_options.size_bytes = per_file;
    file_options.engine = options.engine;
    file_options.queue_depth = options.queue_depth;
    file_options.threads = options.threads;
    file_options.direct_io = options.direct_io;
    file_options.registered_buffers = registered_buffers;
    file_options.progress = options.progress;
    absl::StatusOr<std::unique_ptr<io::BlockFile>> file =
        options.open_file ? options.open_file(file_options) : io::OpenBlockFile(file_options);
    if (!file.ok()) return file.status();
    KVTIER_ASSIGN_OR_RETURN(
        SlotAllocator allocator,
        SlotAllocator::Create(per_file, options.chunk_bytes, (*file)->alignment()));
    tier->files_.push_back(std::move(*file));
    tier->allocators_.push_back(std::move(allocator));
  }
  return tier;
}

std::optional<DiskSlot> DiskTier::Allocate(uint64_t size) {
  // The file with the most free bytes that can take this size.
  int best = -1;
  uint64_t best_free = 0;
  for (size_t i = 0; i < allocators_.size(); ++i) {
    const SlotAllocator& a = allocators_[i];
    const uint64_t free_bytes = a.capacity_bytes() - a.used_bytes();
    if (a.CanAllocate(size) && (best < 0 || free_bytes > best_free)) {
      best = static_cast<int>(i);
      best_free = free_bytes;
    }
  }
  if (best < 0) return std::nullopt;
  std::optional<uint64_t> offset = allocators_[best].Allocate(size);
  if (!offset.has_value()) return std::nullopt;
  return DiskSlot{static_cast<uint16_t>(best), *offset};
}

absl::Status DiskTier::Free(const DiskSlot& slot, uint64_t size) {
  if (slot.file >= allocators_.size()) {
    return absl::InternalError(
        absl::StrCat("free of a slot in disk file ", slot.file, " of ", allocators_.size()));
  }
  return allocators_[slot.file].Free(slot.offset, size);
}

void DiskTier::SubmitWrite(const DiskSlot& slot, absl::Span<const uint8_t> src,
                           std::function<void(absl::Status)> done) {
  if (slot.file >= files_.size()) {
    done(
        absl::InternalError(absl::StrCat("write to disk file ", slot.file, " of ", files_.size())));
    return;
  }
  io::IoRequest request;
  request.kind = io::IoKind::kWrite;
  request.offset = slot.offset;
  request.buffer = const_cast<uint8_t*>(src.data());  // a write only reads it
  request.length = static_cast<uint32_t>(src.size());
  files_[slot.file]->Submit(request, std::move(done));
}

absl::Status DiskTier::Read(const DiskSlot& slot, absl::Span<uint8_t> dst) const {
  if (slot.file >= files_.size()) {
    return absl::InternalError(
        absl::StrCat("read of disk file ", slot.file, " of ", files_.size()));
  }
  return files_[slot.file]->Read(slot.offset, dst);
}

absl::Status DiskTier::MarkAllocated(const DiskSlot& slot, uint64_t size) {
  if (slot.file >= allocators_.size()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "disk file ", slot.file, " does not exist (the tier has ", allocators_.size(), " files)"));
  }
  return allocators_[slot.file].MarkAllocated(slot.offset, size);
}

bool DiskTier::CanAllocate(uint64_t size) const {
  for (const SlotAllocator& a : allocators_) {
    if (a.CanAllocate(size)) return true;
  }
  return false;
}

uint64_t DiskTier::capacity_bytes() const {
  uint64_t total = 0;
  for (const SlotAllocator& a : allocators_) total += a.capacity_bytes();
  return total;
}

uint64_t DiskTier::used_bytes() const {
  uint64_t total = 0;
  for (const SlotAllocator& a : allocators_) total += a.used_bytes();
  return total;
}

absl::Status DiskTier::SyncAll() {
  for (auto& f : files_) KVTIER_RETURN_IF_ERROR(f->Sync());
  return absl::OkStatus();
}

}  // namespace kvtier::store
