// BlockFile: one preallocated file of fixed-size cold-block slots, read and written with direct
// I/O, one I/O per block, completions delivered asynchronously. Implementations: UringBlockFile
// (io_uring with registered buffers and file), ThreadPoolBlockFile (pread/pwrite workers, the
// fallback where the kernel refuses io_uring), and in tests an in-memory fake and a
// fault-injecting wrapper (tests/testing/). Every method is thread-safe.
#ifndef KVTIER_DAEMON_IO_BLOCK_FILE_H_
#define KVTIER_DAEMON_IO_BLOCK_FILE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/histogram.h"
#include "common/progress.h"

namespace kvtier::io {

enum class IoKind : uint8_t { kRead = 0, kWrite = 1 };

// One transfer of a whole block. With direct I/O, `offset`, `length` and the address of `buffer`
// are multiples of the file's alignment().
struct IoRequest {
  IoKind kind = IoKind::kRead;
  uint64_t offset = 0;
  void* buffer = nullptr;  // borrowed until the callback runs
  uint32_t length = 0;
};

// Runs exactly once per submitted request: on the file's completion thread, or inline in Submit()
// when the request is rejected before it reaches the kernel. Must not block for long.
using IoCallback = absl::AnyInvocable<void(absl::Status)>;

// Counters of one file. Monotonic except queued and in_flight. Counters of a request are updated
// before its callback runs, so a caller that has seen every callback sees final counts.
struct BlockFileStats {
  uint64_t reads = 0;  // completed successfully
  uint64_t writes = 0;
  uint64_t read_bytes = 0;
  uint64_t write_bytes = 0;
  uint64_t read_errors = 0;  // requests that completed with a non-OK status (rejections included)
  uint64_t write_errors = 0;
  uint64_t short_transfers = 0;   // partial completions whose rest was resubmitted
  uint64_t retries = 0;           // EINTR / EAGAIN resubmissions
  uint64_t fixed_buffer_ops = 0;  // transfers issued on registered (fixed) buffers (io_uring only)
  uint64_t queued = 0;            // accepted by Submit(), waiting for a free slot
  uint64_t in_flight = 0;         // handed to the kernel (io_uring) or to a worker, not completed
  uint64_t max_in_flight = 0;     // at most queue_depth (io_uring) or threads (thread pool)
  LatencyHistogram::Snapshot read_latency;  // Submit() to completion, microseconds
  LatencyHistogram::Snapshot write_latency;
};

class BlockFile {
 public:
  virtual ~BlockFile() = default;  // implementations wait for in-flight requests first

  // Queues `request`; `done` runs once with its outcome:
  //   OK                  every byte transferred (short transfers are resubmitted internally);
  //   InvalidArgument     misaligned offset/length/buffer, zero length, or past size_bytes()
  //                       (rejected inline, before any byte moves);
  //   DataLoss            EIO or an unexpected end of file while reading;
  //   ResourceExhausted   ENOSPC / EDQUOT while writing;
  //   Unavailable         the file is shutting down, or EINTR / EAGAIN persisted through retries;
  //   Internal            any other errno, EIO while writing included (the slot's contents are then
  //                       undefined); the message names the errno, the path and the offset.
  // Never blocks on the device: accepted requests wait in an unbounded queue until one of the
  // queue_depth (io_uring) or threads (thread pool) slots is free. Callbacks may call Submit().
  virtual void Submit(const IoRequest& request, IoCallback done) = 0;

  // Makes every write whose callback has already run durable (fdatasync). Blocks.
  virtual absl::Status Sync() = 0;

  virtual uint64_t size_bytes() const = 0;
  virtual uint32_t alignment() const = 0;
  virtual const std::string& path() const = 0;  // "" for files that are not on a file system
  // "io_uring", "thread-pool", "memory", "fault-injecting(io_uring)"...
  virtual std::string mechanism() const = 0;
  virtual BlockFileStats stats() const = 0;

  // Blocking conveniences built on Submit(), with its status codes and alignment rules (`dst` /
  // `src` must start at an aligned address). Must not be called from a completion callback.
  absl::Status Read(uint64_t offset, absl::Span<uint8_t> dst);
  absl::Status Write(uint64_t offset, absl::Span<const uint8_t> src);
  // Submits every request, then waits for all of them; statuses in request order. Blocks; must not
  // be called from a completion callback. The buffers are borrowed until it returns.
  std::vector<absl::Status> RunBatch(absl::Span<const IoRequest> requests);
};

enum class IoEngine : uint8_t {
  kAuto = 0,        // io_uring where the kernel allows it, else the thread pool (logged once)
  kUring = 1,       // io_uring or an error
  kThreadPool = 2,  // pread/pwrite workers
};

struct BlockFileOptions {
  std::string path;
  uint64_t size_bytes = 0;  // the file is created or extended to this size with fallocate
  IoEngine engine = IoEngine::kAuto;
  uint32_t queue_depth = 64;  // io_uring entries / requests in flight
  uint32_t threads = 4;       // thread-pool workers
  bool direct_io = true;      // O_DIRECT (falls back to buffered I/O only where refused: tmpfs)
  uint32_t alignment = 4096;
  // Memory regions the caller will pass as buffers (the host pool): io_uring registers them as
  // fixed buffers. Borrowed for the file's lifetime. Requests outside them still work. Back them
  // with huge pages (MADV_HUGEPAGE, hugetlbfs) where possible: large blocks then reach the device
  // in few segments (1,331,200-byte reads ran 3x faster on the development VM's virtio disk).
  std::vector<absl::Span<uint8_t>> registered_buffers;
  // Preallocation runs in chunks of this size (rounded down to the alignment) and logs its
  // progress through `progress` when it takes long.
  uint64_t preallocate_chunk_bytes = 1ull << 30;
  ProgressOptions progress;
};

// Opens `options.path`, creating it and preallocating size_bytes with fallocate (a file that is
// already larger is not shrunk), with the engine options.engine asks for. InvalidArgument for bad
// options or a path that is not a regular file; PermissionDenied when the file cannot be opened
// for lack of permission; ResourceExhausted when fallocate reports ENOSPC / EDQUOT; Unimplemented
// when kUring is asked for and the kernel refuses a ring; Internal with the errno otherwise (a
// missing directory included). A file this call created is removed again on error, and an older
// one that preallocation began to extend is cut back to its former size. Blocks (preallocation of
// a large file takes seconds; it logs progress through options.progress).
absl::StatusOr<std::unique_ptr<BlockFile>> OpenBlockFile(const BlockFileOptions& options);

// Maps an errno from a transfer to the status codes listed at Submit().
absl::Status IoErrorToStatus(int err, IoKind kind, absl::string_view path, uint64_t offset,
                             uint32_t length);

// The checks every implementation applies in Submit(): InvalidArgument naming the field and value
// when offset, length or the buffer address is not a multiple of `alignment`, when length is 0 or
// the buffer is null, or when the request ends past `size_bytes`; OK otherwise.
absl::Status ValidateIoRequest(const IoRequest& request, uint64_t size_bytes, uint32_t alignment,
                               absl::string_view path);

// The checks OpenBlockFile applies to `options`: InvalidArgument naming the field and value when
// alignment is not a power of two >= 512, size_bytes is 0 or not a multiple of alignment,
// queue_depth is outside [1, 4096] or threads outside [1, 256]; OK otherwise.
absl::Status ValidateBlockFileOptions(const BlockFileOptions& options);

}  // namespace kvtier::io

#endif  // KVTIER_DAEMON_IO_BLOCK_FILE_H_
