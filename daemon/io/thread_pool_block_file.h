// ThreadPoolBlockFile: the portable BlockFile engine, for kernels that refuse io_uring. A fixed
// set of worker threads takes requests from one queue and runs blocking pread/pwrite loops that
// retry EINTR/EAGAIN and finish short transfers; callbacks run on the workers. Thread-safe.
#ifndef KVTIER_DAEMON_IO_THREAD_POOL_BLOCK_FILE_H_
#define KVTIER_DAEMON_IO_THREAD_POOL_BLOCK_FILE_H_

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

namespace kvtier::io {

class ThreadPoolBlockFile final : public BlockFile {
 public:
  // Starts options.threads workers for `fd`, an open, read-write file of at least
  // options.size_bytes (OpenBlockFile makes one). Takes ownership of `fd` on success only. Uses
  // options.path (for messages), size_bytes, alignment and threads. InvalidArgument when
  // ValidateBlockFileOptions(options) fails; Internal when a thread cannot be started. Does not
  // block on I/O.
  static absl::StatusOr<std::unique_ptr<ThreadPoolBlockFile>> Create(
      int fd, const BlockFileOptions& options);

  // Stops accepting requests (Submit() then completes with Unavailable), completes every request
  // already accepted, joins the workers and closes the file. Blocks; must not run on a completion
  // callback of this file.
  ~ThreadPoolBlockFile() override;

  void Submit(const IoRequest& request, IoCallback done) override;
  absl::Status Sync() override;
  uint64_t size_bytes() const override { return size_bytes_; }
  uint32_t alignment() const override { return alignment_; }
  const std::string& path() const override { return path_; }
  std::string mechanism() const override { return "thread-pool"; }
  BlockFileStats stats() const override { return counters_.Read(); }

 private:
  struct Op;

  ThreadPoolBlockFile(int fd, const BlockFileOptions& options);

  // A worker's body: runs queued requests until the queue is empty and the file is stopping.
  void WorkerMain();
  // Transfers all of `request` with pread/pwrite; returns its outcome. Blocks.
  absl::Status Transfer(const IoRequest& request);

  int fd_;  // -1 once a failed Create() has handed it back
  const std::string path_;
  const uint64_t size_bytes_;
  const uint32_t alignment_;
  const bool direct_io_;
  IoCounters counters_;

  absl::Mutex mu_;
  std::deque<std::unique_ptr<Op>> pending_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;

  std::vector<std::thread> workers_;
};

}  // namespace kvtier::io

#endif  // KVTIER_DAEMON_IO_THREAD_POOL_BLOCK_FILE_H_
