// UringBlockFile: the io_uring BlockFile engine. One ring, owned by one dedicated thread that moves
// queued requests into submission entries (at most queue_depth in the kernel), reaps completions,
// resubmits short transfers and EINTR/EAGAIN, and runs the callbacks. The file and the caller's
// registered buffers are registered with the ring when the kernel allows it. Thread-safe.
#ifndef KVTIER_DAEMON_IO_URING_BLOCK_FILE_H_
#define KVTIER_DAEMON_IO_URING_BLOCK_FILE_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "daemon/io/block_file.h"
#include "daemon/io/io_counters.h"

namespace kvtier::io {

class UringBlockFile final : public BlockFile {
 public:
  // Starts the ring thread for `fd`, an open, read-write file of at least options.size_bytes
  // (OpenBlockFile makes one). Takes ownership of `fd` on success only; on error the caller still
  // owns it. Uses options.path (for messages), size_bytes, alignment, queue_depth and
  // registered_buffers (borrowed for the file's lifetime). InvalidArgument when
  // ValidateBlockFileOptions(options) fails; Unimplemented, with the errno, when the kernel
  // refuses a ring (ENOSYS, EPERM, io_uring disabled...); Internal when the wake-up eventfd or the
  // thread cannot be made. Failing to register the file or the buffers (RLIMIT_MEMLOCK) is logged
  // once and is not an error. Blocks until the ring is set up.
  static absl::StatusOr<std::unique_ptr<UringBlockFile>> Create(int fd,
                                                                const BlockFileOptions& options);

  // Stops accepting requests (Submit() then completes with Unavailable), completes every request
  // already accepted, joins the ring thread and closes the file. Blocks; must not run on a
  // completion callback of this file.
  ~UringBlockFile() override;

  void Submit(const IoRequest& request, IoCallback done) override;
  absl::Status Sync() override;
  uint64_t size_bytes() const override { return size_bytes_; }
  uint32_t alignment() const override { return alignment_; }
  const std::string& path() const override { return path_; }
  std::string mechanism() const override { return "io_uring"; }
  BlockFileStats stats() const override { return counters_.Read(); }

  // Whether the ring accepted the file / the buffers as registered (fixed) resources.
  bool file_registered() const { return file_registered_.load(std::memory_order_acquire); }
  bool buffers_registered() const { return buffers_registered_.load(std::memory_order_acquire); }
  // Whether the file was opened with O_DIRECT.
  bool direct_io() const { return direct_io_; }
  // Requests longer than this use plain read/write even inside a registered buffer (see the .cc);
  // UINT64_MAX when the device sets no limit.
  uint64_t max_fixed_buffer_bytes() const { return max_fixed_buffer_bytes_; }

 private:
  struct Op;
  class Ring;  // the ring and its thread-owned state; defined in the .cc, the only liburing user

  UringBlockFile(int fd, int wake_fd, const BlockFileOptions& options);

  // Makes the ring thread's pending eventfd read complete.
  void WakeRingThread();

  int fd_;             // -1 once a failed Create() has handed it back
  const int wake_fd_;  // eventfd; Submit() writes it when the ring thread sleeps
  const std::string path_;
  const uint64_t size_bytes_;
  const uint32_t alignment_;
  const uint32_t queue_depth_;
  const bool direct_io_;
  const uint64_t max_fixed_buffer_bytes_;
  std::atomic<bool> file_registered_{false};
  std::atomic<bool> buffers_registered_{false};
  IoCounters counters_;

  absl::Mutex mu_;
  std::deque<std::unique_ptr<Op>> pending_ ABSL_GUARDED_BY(mu_);
  // Set by the ring thread before it may sleep in the kernel with room for more requests; the
  // next Submit() clears it and writes wake_fd_.
  bool need_wake_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;

  std::unique_ptr<Ring> ring_;  // touched only by the ring thread once it runs
  std::thread thread_;
  std::thread::id ring_thread_id_;  // set by the ring thread before Create() returns
};

// Whether the running kernel grants this process an io_uring: sets up a one-entry ring and tears
// it down. OK when it does; Unimplemented with the errno text when it refuses (ENOSYS on an old
// kernel, EPERM under a seccomp profile or kernel.io_uring_disabled). Blocks for the two system
// calls only.
absl::Status UringAvailable();

}  // namespace kvtier::io

#endif  // KVTIER_DAEMON_IO_URING_BLOCK_FILE_H_
