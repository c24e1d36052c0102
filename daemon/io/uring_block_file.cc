// The io_uring BlockFile engine.
//
// Threading: Submit() validates the request, appends it to a mutex-guarded queue and returns. One
// ring thread owns the ring: each turn of its loop moves queued requests into SQEs while fewer
// than queue_depth are in the kernel, submits them and waits for at least one completion in a
// single io_uring_enter, reaps every CQE, and then runs the callbacks (outside the lock, so that
// callbacks may submit the next request; those are picked up by the next turn without a wake-up).
//
// Wake-ups: a read of an eventfd stays armed in the ring (user_data kWakeTag). Before the thread
// may sleep with room for more requests it sets need_wake_ under the lock; the first Submit() that
// sees the flag clears it and writes the eventfd, which completes that read. So a busy ring costs
// no syscall per request, an idle one exactly one eventfd write, and nobody polls.
//
// Completions: res < 0 with EINTR/EAGAIN is resubmitted (counted, bounded); any other error maps
// through IoErrorToStatus. 0 < res < remaining is a short transfer: the rest is resubmitted from
// where it stopped (with O_DIRECT a read that stops off a 512-byte boundary met the end of file).
// res == 0 on a read is an unexpected end of file. Every CQE is marked seen (cq_advance).
//
// Registration of the buffers faults in and pins every page of the host tier, for every file, which
// takes seconds for a large tier; so where the kernel has sparse buffer tables (5.19) the regions
// (1 GiB each) are registered one at a time with a ProgressLog between them.
//
// Registered buffers: a request inside one registered region uses READ_FIXED/WRITE_FIXED, unless
// it is longer than the device's max_segments pages. The kernel hands a fixed buffer of 4 KiB
// pages to the block layer as one bvec per page (only pages of huge folios are coalesced), and the
// split check counts each as a segment, so such a request is always split; a plain read/write
// merges physically adjacent pages into one bvec first. Measured on the development VM's virtio
// disk (max_segments 254) with 1,331,200-byte (325-page) reads: fixed-buffer requests reached the
// disk as exactly two requests each (648 KiB on average), plain ones as 978-1,184 KiB requests.
// From huge pages both ran at 2.7 GB/s, so nothing is lost by the plain path.
//
// The ring prefers SINGLE_ISSUER | DEFER_TASKRUN (completion work runs only when this thread
// enters the kernel), then COOP_TASKRUN, then no flags, so it works on kernels from 5.6 on.
#include "daemon/io/uring_block_file.h"

#include <liburing.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/memory/memory.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/types/span.h"
#include "common/format_bytes.h"
#include "common/logging.h"
#include "common/progress.h"
#include "daemon/io/posix_file.h"

namespace kvtier::io {
namespace {

// user_data of the two internal operations; requests carry their Op address (never 1 or 2).
constexpr uint64_t kWakeTag = 1;
constexpr uint64_t kCancelTag = 2;
// EINTR/EAGAIN resubmissions of one request before it fails with Unavailable.
constexpr uint32_t kMaxRetriesPerRequest = 1000;
// io_uring_register_buffers accepts iovecs of at most 1 GiB.
constexpr uint64_t kMaxRegisteredIovec = uint64_t{1} << 30;

}  // namespace

struct UringBlockFile::Op : SubmittedIo {
  uint64_t transferred = 0;
  uint32_t retries = 0;
};

// Everything only the ring thread touches.
class UringBlockFile::Ring {
 public:
  Ring(UringBlockFile* file, std::vector<absl::Span<uint8_t>> buffers, ProgressOptions progress)
      : file_(file), buffers_(std::move(buffers)), progress_(std::move(progress)) {}

  // The ring thread's body.
  void Run() {
    pthread_setname_np(pthread_self(), "kvtier-uring");
    file_->ring_thread_id_ = std::this_thread::get_id();
    setup_status_ = Setup();
    const bool ok = setup_status_.ok();
    setup_done_.Notify();
    if (!ok) return;
    ArmWake();
    Loop();
    Teardown();
  }

  // Blocks until Setup() has run; then returns its status.
  absl::Status WaitForSetup() {
    setup_done_.WaitForNotification();
    return setup_status_;
  }

 private:
  struct Region {
    uintptr_t begin;
    uintptr_t end;
    int index;
  };

  absl::Status Setup() {
    const unsigned entries = file_->queue_depth_ + 2;  // requests, the wake read, one cancel
    const unsigned flag_sets[] = {IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN,
                                  IORING_SETUP_COOP_TASKRUN, 0};
    int rc = -EINVAL;
    for (unsigned flags : flag_sets) {
      io_uring_params params;
      std::memset(&params, 0, sizeof(params));
      params.flags = flags;
      rc = io_uring_queue_init_params(entries, &ring_, &params);
      if (rc != -EINVAL) break;
    }
    if (rc < 0) {
      return absl::UnimplementedError(absl::StrCat("io_uring_queue_init(", entries, ") for '",
                                                   file_->path_, "' failed: ", ErrnoText(-rc)));
    }
    rc = io_uring_register_files(&ring_, &file_->fd_, 1);
    if (rc == 0) {
      fixed_file_ = true;
      file_->file_registered_.store(true, std::memory_order_release);
    } else {
      KVTIER_LOG_FIRST(kWarning, "io_uring cannot register '", file_->path_, "' as a fixed file (",
                       ErrnoText(-rc), "); using its descriptor");
    }
    RegisterBuffers();
    return absl::OkStatus();
  }

  void RegisterBuffers() {
    std::vector<iovec> iovecs;
    for (absl::Span<uint8_t> span : buffers_) {
      for (uint64_t at = 0; at < span.size(); at += kMaxRegisteredIovec) {
        iovecs.push_back(
            iovec{span.data() + at, std::min<uint64_t>(kMaxRegisteredIovec, span.size() - at)});
      }
    }
    if (iovecs.empty()) return;
    const int rc = RegisterIovecs(iovecs);
    if (rc != 0) {
      KVTIER_LOG_FIRST(kWarning, "io_uring cannot register ", iovecs.size(), " buffer regions (",
                       ErrnoText(-rc), "; RLIMIT_MEMLOCK?); block I/O uses unregistered buffers");
      return;
    }
    for (size_t i = 0; i < iovecs.size(); ++i) {
      const auto begin = reinterpret_cast<uintptr_t>(iovecs[i].iov_base);
      regions_.push_back(Region{begin, begin + iovecs[i].iov_len, static_cast<int>(i)});
    }
    std::sort(regions_.begin(), regions_.end(),
              [](const Region& a, const Region& b) { return a.begin < b.begin; });
    file_->buffers_registered_.store(true, std::memory_order_release);
  }

  // Registers `iovecs` as the ring's fixed buffers 0..n-1: into a sparse table one region at a
  // time with progress lines (the kernel faults in and pins every page, seconds for a large
  // unpinned host tier), or in one call where the kernel has no sparse tables (before 5.19).
  // 0 or -errno; on failure nothing stays registered.
  int RegisterIovecs(const std::vector<iovec>& iovecs) {
    if (io_uring_register_buffers_sparse(&ring_, iovecs.size()) != 0) {
      return io_uring_register_buffers(&ring_, iovecs.data(), iovecs.size());
    }
    uint64_t total = 0;
    for (const iovec& v : iovecs) total += v.iov_len;
    ProgressLog progress(absl::StrCat("disk tier: registering ", FormatBytes(total),
                                      " of I/O buffers with io_uring for '", file_->path_, "'"),
                         total, progress_);
    for (size_t i = 0; i < iovecs.size(); ++i) {
      const __u64 tag = 0;
      const int rc = io_uring_register_buffers_update_tag(&ring_, i, &iovecs[i], &tag, 1);
      if (rc < 0) {
        io_uring_unregister_buffers(&ring_);
        return rc;
      }
      progress.Advance(iovecs[i].iov_len);
    }
    progress.Finish();
    return 0;
  }

  // The index of the registered buffer holding all of [address, address + length), or -1.
  int FindRegion(const uint8_t* address, uint64_t length) const {
    const auto begin = reinterpret_cast<uintptr_t>(address);
    auto it = std::upper_bound(regions_.begin(), regions_.end(), begin,
                               [](uintptr_t a, const Region& r) { return a < r.begin; });
    if (it == regions_.begin()) return -1;
    --it;
    return begin + length <= it->end ? it->index : -1;
  }

  io_uring_sqe* GetSqe() {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    while (sqe == nullptr) {  // the ring has room for every request; only a full SQ gets here
      io_uring_submit(&ring_);
      sqe = io_uring_get_sqe(&ring_);
    }
    return sqe;
  }

  void ArmWake() {
    io_uring_sqe* sqe = GetSqe();
    io_uring_prep_read(sqe, file_->wake_fd_, &wake_value_, sizeof(wake_value_), 0);
    io_uring_sqe_set_data64(sqe, kWakeTag);
    wake_armed_ = true;
  }

  // Queues the untransferred rest of `op`.
  void Prep(Op* op) {
    io_uring_sqe* sqe = GetSqe();
    const IoRequest& r = op->request;
    uint8_t* address = static_cast<uint8_t*>(r.buffer) + op->transferred;
    const auto length = static_cast<unsigned>(r.length - op->transferred);
    const uint64_t offset = r.offset + op->transferred;
    const int fd = fixed_file_ ? 0 : file_->fd_;
    const int buffer_index =
        length <= file_->max_fixed_buffer_bytes_ ? FindRegion(address, length) : -1;
    if (buffer_index >= 0) {
      if (r.kind == IoKind::kRead) {
        io_uring_prep_read_fixed(sqe, fd, address, length, offset, buffer_index);
      } else {
        io_uring_prep_write_fixed(sqe, fd, address, length, offset, buffer_index);
      }
      file_->counters_.OnFixedBufferOp();
    } else if (r.kind == IoKind::kRead) {
      io_uring_prep_read(sqe, fd, address, length, offset);
    } else {
      io_uring_prep_write(sqe, fd, address, length, offset);
    }
    if (fixed_file_) io_uring_sqe_set_flags(sqe, IOSQE_FIXED_FILE);
    io_uring_sqe_set_data64(sqe, reinterpret_cast<uint64_t>(op));
  }

  void Finish(Op* op, absl::Status status) {
    --in_kernel_;
    finished_.emplace_back(op, std::move(status));
  }

  void HandleCompletion(uint64_t user_data, int res) {
    if (user_data == kWakeTag) {
      wake_armed_ = false;
      if (!exiting_) ArmWake();
      return;
    }
    if (user_data == kCancelTag) return;
    Op* op = reinterpret_cast<Op*>(user_data);
    const IoRequest& r = op->request;
    const absl::string_view path = file_->path_;
    if (res < 0) {
      const int err = -res;
      if ((err == EINTR || err == EAGAIN) && op->retries < kMaxRetriesPerRequest) {
        ++op->retries;
        file_->counters_.OnRetry();
        Prep(op);
        return;
      }
      Finish(op, IoErrorToStatus(err, r.kind, path, r.offset, r.length));
      return;
    }
    if (res == 0) {
      Finish(op, r.kind == IoKind::kRead
                     ? UnexpectedEndOfFile(path, r.offset, r.length, op->transferred)
                     : WriteMadeNoProgress(path, r.offset, r.length, op->transferred));
      return;
    }
    op->transferred += static_cast<uint64_t>(res);
    if (op->transferred >= r.length) {
      Finish(op, absl::OkStatus());
      return;
    }
    file_->counters_.OnShortTransfer();
    if (r.kind == IoKind::kRead &&
        IsDirectIoEndOfFile(file_->direct_io_, r.offset + op->transferred)) {
      Finish(op, UnexpectedEndOfFile(path, r.offset, r.length, op->transferred));
      return;
    }
    Prep(op);
  }

  void Reap() {
    unsigned head;
    unsigned count = 0;
    io_uring_cqe* cqe;
    io_uring_for_each_cqe(&ring_, head, cqe) {
      ++count;
      HandleCompletion(io_uring_cqe_get_data64(cqe), cqe->res);
    }
    io_uring_cq_advance(&ring_, count);
  }

  void RunCallbacks() {
    for (auto& [raw, status] : finished_) {
      std::unique_ptr<Op> op(raw);
      file_->counters_.OnFinished(op->request.kind, status, op->request.length, op->submitted);
      op->done(std::move(status));
    }
    finished_.clear();
  }

  void Loop() {
    std::vector<std::unique_ptr<Op>> batch;
    batch.reserve(file_->queue_depth_);
    for (;;) {
      bool exit_now;
      {
        absl::MutexLock lock(&file_->mu_);
        while (in_kernel_ + batch.size() < file_->queue_depth_ && !file_->pending_.empty()) {
          batch.push_back(std::move(file_->pending_.front()));
          file_->pending_.pop_front();
        }
        exit_now = file_->stopping_ && file_->pending_.empty() && batch.empty() && in_kernel_ == 0;
        // Only worth a wake-up when a new request could enter the ring at once.
        file_->need_wake_ =
            !exit_now && file_->pending_.empty() && in_kernel_ + batch.size() < file_->queue_depth_;
      }
      if (exit_now) return;
      for (std::unique_ptr<Op>& op : batch) {
        file_->counters_.OnStarted();
        ++in_kernel_;
        Prep(op.release());
      }
      batch.clear();
      const int rc = io_uring_submit_and_wait(&ring_, 1);
      if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
        KVTIER_LOG_FIRST(kError, "io_uring_submit_and_wait for '", file_->path_,
                         "' failed: ", ErrnoText(-rc), "; retrying");
      }
      Reap();
      RunCallbacks();
    }
  }

  // Cancels the wake read and waits for it, so that the kernel no longer writes wake_value_, then
  // releases the ring.
  void Teardown() {
    exiting_ = true;
    if (wake_armed_) {
      io_uring_sqe* sqe = GetSqe();
      io_uring_prep_cancel64(sqe, kWakeTag, 0);
      io_uring_sqe_set_data64(sqe, kCancelTag);
      file_->WakeRingThread();  // completes the read should the cancel miss it
      while (wake_armed_) {
        const int rc = io_uring_submit_and_wait(&ring_, 1);
        if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) break;
        Reap();
      }
    }
    io_uring_queue_exit(&ring_);
  }

  UringBlockFile* const file_;
  const std::vector<absl::Span<uint8_t>> buffers_;
  const ProgressOptions progress_;
  io_uring ring_;
  bool fixed_file_ = false;
  std::vector<Region> regions_;  // registered buffers, sorted by address
  uint64_t wake_value_ = 0;      // target of the eventfd read
  bool wake_armed_ = false;
  bool exiting_ = false;
  uint32_t in_kernel_ = 0;                              // requests in SQEs or in the kernel
  std::vector<std::pair<Op*, absl::Status>> finished_;  // reaped, callbacks not yet run
  absl::Notification setup_done_;
  absl::Status setup_status_;
};

UringBlockFile::UringBlockFile(int fd, int wake_fd, const BlockFileOptions& options)
    : fd_(fd),
      wake_fd_(wake_fd),
      path_(options.path),
      size_bytes_(options.size_bytes),
      alignment_(options.alignment),
      queue_depth_(options.queue_depth),
      direct_io_(IsDirectIo(fd)),
      max_fixed_buffer_bytes_(MaxPageSegmentBytes(fd) > 0 ? MaxPageSegmentBytes(fd) : UINT64_MAX) {}

absl::Status UringAvailable() {
  io_uring ring;
  const int rc = io_uring_queue_init(1, &ring, 0);
  if (rc < 0) {
    return absl::UnimplementedError(
        absl::StrCat("the kernel refuses io_uring_setup: ", ErrnoText(-rc)));
  }
  io_uring_queue_exit(&ring);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<UringBlockFile>> UringBlockFile::Create(
    int fd, const BlockFileOptions& options) {
  if (absl::Status valid = ValidateBlockFileOptions(options); !valid.ok()) return valid;
  const int wake_fd = eventfd(0, EFD_CLOEXEC);
  if (wake_fd < 0) {
    return absl::InternalError(
        absl::StrCat("eventfd for '", options.path, "' failed: ", ErrnoText(errno)));
  }
  auto file = absl::WrapUnique(new UringBlockFile(fd, wake_fd, options));
  file->ring_ = std::make_unique<Ring>(file.get(), options.registered_buffers, options.progress);
  Ring* ring = file->ring_.get();
  try {
    file->thread_ = std::thread([ring] { ring->Run(); });
  } catch (const std::system_error& e) {
    file->fd_ = -1;  // the caller keeps it
    return absl::InternalError(
        absl::StrCat("cannot start the io_uring thread for '", options.path, "': ", e.what()));
  }
  absl::Status setup = ring->WaitForSetup();
  if (!setup.ok()) {
    file->thread_.join();
    file->fd_ = -1;  // the caller keeps it
    return setup;
  }
  return file;
}

UringBlockFile::~UringBlockFile() {
  if (thread_.joinable()) {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    WakeRingThread();
    thread_.join();
  }
  ring_.reset();
  close(wake_fd_);
  if (fd_ >= 0) close(fd_);
}

void UringBlockFile::WakeRingThread() {
  const uint64_t one = 1;
  while (write(wake_fd_, &one, sizeof(one)) < 0 && errno == EINTR) {
  }
}

void UringBlockFile::Submit(const IoRequest& request, IoCallback done) {
  std::unique_ptr<Op> op = AcceptIo<Op>(request, done, size_bytes_, alignment_, path_, counters_);
  if (op == nullptr) return;
  bool wake = false;
  {
    absl::MutexLock lock(&mu_);
    if (!stopping_) {
      counters_.OnQueued();
      pending_.push_back(std::move(op));
      // On the ring thread (a callback submitting more) the loop looks at the queue anyway.
      if (need_wake_ && std::this_thread::get_id() != ring_thread_id_) {
        need_wake_ = false;
        wake = true;
      }
    }
  }
  if (op != nullptr) {  // not accepted
    counters_.OnRejected(request.kind);
    op->done(absl::UnavailableError(
        absl::StrCat("block file '", path_, "' is shutting down; request not accepted")));
    return;
  }
  if (wake) WakeRingThread();
}

absl::Status UringBlockFile::Sync() { return DataSyncFile(fd_, path_); }

}  // namespace kvtier::io
