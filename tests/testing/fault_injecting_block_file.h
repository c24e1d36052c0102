// FaultInjectingBlockFile: wraps a real BlockFile and injects the failures a disk tier must
// survive: errno failures of the next N reads or writes or of an offset range, torn writes (only a
// prefix reaches the base file), bit flips in data returned by reads or in the stored bytes, and a
// crash point after which writes are acknowledged but dropped. In the spirit of RocksDB's
// FaultInjectionTestFS. Thread-safe: controls may change while requests are in flight and apply
// to requests submitted after the call.
#ifndef KVTIER_TESTS_TESTING_FAULT_INJECTING_BLOCK_FILE_H_
#define KVTIER_TESTS_TESTING_FAULT_INJECTING_BLOCK_FILE_H_

#include <cerrno>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "daemon/io/block_file.h"

namespace kvtier::testing {

// Which requests a fault applies to.
enum class FaultTarget : uint8_t { kReads = 1, kWrites = 2, kReadsAndWrites = 3 };

// How many requests each kind of fault has hit so far.
struct InjectedFaultCounts {
  uint64_t failed_reads = 0;    // by FailNextReads or FailRange
  uint64_t failed_writes = 0;   // by FailNextWrites or FailRange
  uint64_t torn_writes = 0;     // by TearNextWrite
  uint64_t flipped_reads = 0;   // reads whose returned data had a bit flipped
  uint64_t dropped_writes = 0;  // writes acknowledged but discarded after the crash point
};

class FaultInjectingBlockFile final : public io::BlockFile {
 public:
  // Wraps `base` (owned). With no fault armed, every call is forwarded unchanged.
  explicit FaultInjectingBlockFile(std::unique_ptr<io::BlockFile> base);
  // Stops accepting requests (Submit() then completes with Unavailable, also from callbacks that
  // run meanwhile), destroys the base file (which completes its in-flight requests), then the
  // controls. Blocks; must not run on a completion callback.
  ~FaultInjectingBlockFile() override;

  // The next `count` reads / writes fail with IoErrorToStatus(err) (EIO, ENOSPC, ...) without
  // reaching the base file. Adds to any count already armed; the latest `err` applies to all.
  void FailNextReads(uint32_t count, int err = EIO);
  void FailNextWrites(uint32_t count, int err = EIO);
  // Every `target` request overlapping [offset, offset + length) fails with `err`, until
  // ClearFaults().
  void FailRange(uint64_t offset, uint64_t length, int err = EIO,
                 FaultTarget target = FaultTarget::kReadsAndWrites);
  // The next write sends only its first `persisted_bytes` (rounded down to alignment(), possibly
  // 0) to the base file, then completes with IoErrorToStatus(err); with err == 0 it reports OK
  // instead, as a device that lies about durability would.
  void TearNextWrite(uint32_t persisted_bytes, int err = EIO);
  // Every successful read covering byte `byte_offset` of the file returns its data with bit `bit`
  // (0..7) of that byte inverted, until ClearFaults(). The stored bytes are not changed.
  void FlipBitOnRead(uint64_t byte_offset, uint8_t bit);
  // Inverts bit `bit` of byte `byte_offset` in the base file itself (a read-modify-write of the
  // aligned block holding it). The base file's statuses; InvalidArgument for a byte past the end.
  // Blocks; do not race it with writes to the same block.
  absl::Status CorruptStoredBit(uint64_t byte_offset, uint8_t bit);
  // The next `writes_before_crash` writes reach the base file; every later write is acknowledged
  // with OK but dropped, as if the machine lost power with them in a volatile cache. Reads keep
  // reading the base file. Lasts until ClearFaults().
  void SetCrashPoint(uint64_t writes_before_crash);
  // Whether the crash point has been passed.
  bool crashed() const;
  // Disarms every fault and ends the crash mode. Counts are kept.
  void ClearFaults();
  InjectedFaultCounts injected() const;

  // Requests that fail validation are forwarded to the base file, which rejects them. Injected
  // failures and dropped writes complete inline, in Submit(); everything else on the base file's
  // completion thread.
  void Submit(const io::IoRequest& request, io::IoCallback done) override;
  absl::Status Sync() override { return base_->Sync(); }
  uint64_t size_bytes() const override { return base_->size_bytes(); }
  uint32_t alignment() const override { return base_->alignment(); }
  const std::string& path() const override { return base_->path(); }
  // "fault-injecting(<base mechanism>)".
  std::string mechanism() const override;
  // The base file's stats, with injected failures added to read_errors / write_errors.
  io::BlockFileStats stats() const override;

  // The wrapped file; borrowed for this object's lifetime.
  io::BlockFile& base() { return *base_; }

 private:
  struct RangeFault {
    uint64_t offset;
    uint64_t length;
    int err;
    FaultTarget target;
  };
  struct BitFlip {
    uint64_t byte_offset;
    uint8_t bit;
  };
  // What Submit() decided for one request.
  struct Decision {
    int fail_err = 0;                     // nonzero: fail inline with this errno
    bool drop = false;                    // acknowledge and discard (after the crash point)
    std::optional<uint32_t> tear_length;  // send only this prefix
    int tear_err = 0;
  };

  Decision Decide(const io::IoRequest& request);
  void SubmitTornWrite(const io::IoRequest& request, uint32_t prefix, int err, io::IoCallback done);
  void ApplyBitFlips(const io::IoRequest& request);

  mutable absl::Mutex mu_;
  uint32_t fail_reads_ ABSL_GUARDED_BY(mu_) = 0;
  int fail_reads_err_ ABSL_GUARDED_BY(mu_) = EIO;
  uint32_t fail_writes_ ABSL_GUARDED_BY(mu_) = 0;
  int fail_writes_err_ ABSL_GUARDED_BY(mu_) = EIO;
  std::vector<RangeFault> ranges_ ABSL_GUARDED_BY(mu_);
  std::optional<uint32_t> tear_next_write_ ABSL_GUARDED_BY(mu_);
  int tear_err_ ABSL_GUARDED_BY(mu_) = EIO;
  std::vector<BitFlip> flips_ ABSL_GUARDED_BY(mu_);
  std::optional<uint64_t> writes_before_crash_ ABSL_GUARDED_BY(mu_);
  bool crashed_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  InjectedFaultCounts counts_ ABSL_GUARDED_BY(mu_);
  uint64_t torn_write_errors_ ABSL_GUARDED_BY(mu_) = 0;  // torn writes that reported an error

  // Declared last: destroyed (and drained) before the controls its callbacks use.
  std::unique_ptr<io::BlockFile> base_;
};

}  // namespace kvtier::testing

#endif  // KVTIER_TESTS_TESTING_FAULT_INJECTING_BLOCK_FILE_H_
