// InMemoryBlockFile: a BlockFile over a byte vector, for tests that need no disk. It applies the
// same request validation as the real engines and completes requests in FIFO order on its own
// background thread, so callers see real asynchrony. Thread-safe.
#ifndef KVTIER_TESTS_TESTING_IN_MEMORY_BLOCK_FILE_H_
#define KVTIER_TESTS_TESTING_IN_MEMORY_BLOCK_FILE_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "daemon/io/block_file.h"
#include "daemon/io/io_counters.h"

namespace kvtier::testing {

class InMemoryBlockFile final : public io::BlockFile {
 public:
  // A zero-filled file of `size_bytes`. InvalidArgument when `alignment` is not a power of two
  // >= 512 or `size_bytes` is not a positive multiple of it.
  static absl::StatusOr<std::unique_ptr<InMemoryBlockFile>> Create(uint64_t size_bytes,
                                                                   uint32_t alignment = 4096);
  // A file over existing bytes (e.g. the storage() of a file that was destroyed, to model a
  // reopen). Shares ownership of `storage`, whose size is the file size. Same errors as Create().
  static absl::StatusOr<std::unique_ptr<InMemoryBlockFile>> CreateOn(
      std::shared_ptr<std::vector<uint8_t>> storage, uint32_t alignment = 4096);

  // Completes every accepted request, then stops the completion thread. Blocks; must not run on a
  // completion callback of this file.
  ~InMemoryBlockFile() override;

  void Submit(const io::IoRequest& request, io::IoCallback done) override;
  // Always OK (memory is as durable as it gets here); counted in syncs().
  absl::Status Sync() override;
  uint64_t size_bytes() const override { return storage_->size(); }
  uint32_t alignment() const override { return alignment_; }
  const std::string& path() const override { return path_; }
  std::string mechanism() const override { return "memory"; }
  io::BlockFileStats stats() const override { return counters_.Read(); }

  // The bytes behind the file. Read or change them only while no request is in flight.
  const std::shared_ptr<std::vector<uint8_t>>& storage() const { return storage_; }
  // How many times Sync() ran.
  uint64_t syncs() const;

 private:
  struct Op;

  InMemoryBlockFile(std::shared_ptr<std::vector<uint8_t>> storage, uint32_t alignment);
  void CompletionThreadMain();

  const std::shared_ptr<std::vector<uint8_t>> storage_;
  const uint32_t alignment_;
  const std::string path_;  // always ""
  io::IoCounters counters_;

  mutable absl::Mutex mu_;
  std::deque<std::unique_ptr<Op>> pending_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t syncs_ ABSL_GUARDED_BY(mu_) = 0;

  std::thread thread_;
};

}  // namespace kvtier::testing

#endif  // KVTIER_TESTS_TESTING_IN_MEMORY_BLOCK_FILE_H_
