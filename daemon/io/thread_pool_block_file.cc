// The thread-pool BlockFile engine: options.threads workers share one FIFO queue (absl::Mutex with
// a condition), each running one blocking pread/pwrite loop at a time, so at most `threads`
// requests are in the kernel. EINTR/EAGAIN are retried (counted, bounded); a short transfer
// continues from where it stopped (with O_DIRECT, a read stopping off a 512-byte boundary met the
// end of file); 0 bytes on a read before the end is DataLoss. Callbacks run on the worker that
// finished the request, outside the lock.
#include "daemon/io/thread_pool_block_file.h"

#include <pthread.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>
#include <utility>

#include "absl/memory/memory.h"
#include "absl/strings/str_cat.h"
#include "daemon/io/posix_file.h"

namespace kvtier::io {
namespace {

// EINTR/EAGAIN retries of one request before it fails with Unavailable.
constexpr uint32_t kMaxRetriesPerRequest = 1000;

}  // namespace

struct ThreadPoolBlockFile::Op : SubmittedIo {};

ThreadPoolBlockFile::ThreadPoolBlockFile(int fd, const BlockFileOptions& options)
    : fd_(fd),
      path_(options.path),
      size_bytes_(options.size_bytes),
      alignment_(options.alignment),
      direct_io_(IsDirectIo(fd)) {}

absl::StatusOr<std::unique_ptr<ThreadPoolBlockFile>> ThreadPoolBlockFile::Create(
    int fd, const BlockFileOptions& options) {
  if (absl::Status valid = ValidateBlockFileOptions(options); !valid.ok()) return valid;
  auto file = absl::WrapUnique(new ThreadPoolBlockFile(fd, options));
  try {
    file->workers_.reserve(options.threads);
    for (uint32_t i = 0; i < options.threads; ++i) {
      file->workers_.emplace_back([raw = file.get()] { raw->WorkerMain(); });
    }
  } catch (const std::system_error& e) {
    file->fd_ = -1;  // the caller keeps it; the destructor stops the workers already started
    return absl::InternalError(absl::StrCat("cannot start ", options.threads, " I/O threads for '",
                                            options.path, "': ", e.what()));
  }
  return file;
}

ThreadPoolBlockFile::~ThreadPoolBlockFile() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& worker : workers_) worker.join();
  if (fd_ >= 0) close(fd_);
}

void ThreadPoolBlockFile::Submit(const IoRequest& request, IoCallback done) {
  std::unique_ptr<Op> op = AcceptIo<Op>(request, done, size_bytes_, alignment_, path_, counters_);
  if (op == nullptr) return;
  {
    absl::MutexLock lock(&mu_);
    if (!stopping_) {
      counters_.OnQueued();
      pending_.push_back(std::move(op));
      return;
    }
  }
  counters_.OnRejected(request.kind);
  op->done(absl::UnavailableError(
      absl::StrCat("block file '", path_, "' is shutting down; request not accepted")));
}

absl::Status ThreadPoolBlockFile::Sync() { return DataSyncFile(fd_, path_); }

void ThreadPoolBlockFile::WorkerMain() {
  pthread_setname_np(pthread_self(), "kvtier-io");
  for (;;) {
    std::unique_ptr<Op> op;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](ThreadPoolBlockFile* self) ABSL_NO_THREAD_SAFETY_ANALYSIS {
            return self->stopping_ || !self->pending_.empty();
          },
          this));
      if (pending_.empty()) return;  // stopping, and nothing left to run
      op = std::move(pending_.front());
      pending_.pop_front();
      counters_.OnStarted();
    }
    absl::Status status = Transfer(op->request);
    counters_.OnFinished(op->request.kind, status, op->request.length, op->submitted);
    op->done(std::move(status));
  }
}

absl::Status ThreadPoolBlockFile::Transfer(const IoRequest& request) {
  auto* buffer = static_cast<uint8_t*>(request.buffer);
  uint64_t transferred = 0;
  uint32_t retries = 0;
  while (transferred < request.length) {
    const size_t length = request.length - transferred;
    const auto offset = static_cast<off_t>(request.offset + transferred);
    const ssize_t n = request.kind == IoKind::kRead
                          ? pread(fd_, buffer + transferred, length, offset)
                          : pwrite(fd_, buffer + transferred, length, offset);
    if (n < 0) {
      const int err = errno;
      if ((err == EINTR || err == EAGAIN) && retries < kMaxRetriesPerRequest) {
        ++retries;
        counters_.OnRetry();
        continue;
      }
      return IoErrorToStatus(err, request.kind, path_, request.offset, request.length);
    }
    if (n == 0) {
      return request.kind == IoKind::kRead
                 ? UnexpectedEndOfFile(path_, request.offset, request.length, transferred)
                 : WriteMadeNoProgress(path_, request.offset, request.length, transferred);
    }
    transferred += static_cast<uint64_t>(n);
    if (transferred < request.length) {
      counters_.OnShortTransfer();
      if (request.kind == IoKind::kRead &&
          IsDirectIoEndOfFile(direct_io_, request.offset + transferred)) {
        return UnexpectedEndOfFile(path_, request.offset, request.length, transferred);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace kvtier::io
