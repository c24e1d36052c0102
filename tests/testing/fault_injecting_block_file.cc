// FaultInjectingBlockFile: Submit() decides under one lock which armed fault (if any) a request
// meets, in this order: a failing range, the fail-next counters, the crash point (writes), a torn
// write; the request then fails inline, is dropped, or goes to the base file (whole or as a
// prefix). Bit flips are applied to read data in the base file's completion callback.
#include "tests/testing/fault_injecting_block_file.h"

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/types/span.h"

namespace kvtier::testing {
namespace {

bool Targets(FaultTarget target, io::IoKind kind) {
  const auto bit = kind == io::IoKind::kRead ? FaultTarget::kReads : FaultTarget::kWrites;
  return (static_cast<uint8_t>(target) & static_cast<uint8_t>(bit)) != 0;
}

bool Overlaps(uint64_t offset, uint64_t length, const io::IoRequest& request) {
  return offset < request.offset + request.length && request.offset < offset + length;
}

}  // namespace

FaultInjectingBlockFile::FaultInjectingBlockFile(std::unique_ptr<io::BlockFile> base)
    : base_(std::move(base)) {}

FaultInjectingBlockFile::~FaultInjectingBlockFile() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  base_.reset();
}

void FaultInjectingBlockFile::FailNextReads(uint32_t count, int err) {
  absl::MutexLock lock(&mu_);
  fail_reads_ += count;
  fail_reads_err_ = err;
}

void FaultInjectingBlockFile::FailNextWrites(uint32_t count, int err) {
  absl::MutexLock lock(&mu_);
  fail_writes_ += count;
  fail_writes_err_ = err;
}

void FaultInjectingBlockFile::FailRange(uint64_t offset, uint64_t length, int err,
                                        FaultTarget target) {
  absl::MutexLock lock(&mu_);
  ranges_.push_back(RangeFault{offset, length, err, target});
}

void FaultInjectingBlockFile::TearNextWrite(uint32_t persisted_bytes, int err) {
  absl::MutexLock lock(&mu_);
  tear_next_write_ = persisted_bytes - persisted_bytes % base_->alignment();
  tear_err_ = err;
}

void FaultInjectingBlockFile::FlipBitOnRead(uint64_t byte_offset, uint8_t bit) {
  absl::MutexLock lock(&mu_);
  flips_.push_back(BitFlip{byte_offset, static_cast<uint8_t>(bit & 7)});
}

absl::Status FaultInjectingBlockFile::CorruptStoredBit(uint64_t byte_offset, uint8_t bit) {
  if (byte_offset >= base_->size_bytes()) {
    return absl::InvalidArgumentError(absl::StrFormat("byte %u is past the end of '%s' (%u bytes)",
                                                      byte_offset, path(), size_bytes()));
  }
  const uint32_t a = base_->alignment();
  const uint64_t block = byte_offset - byte_offset % a;
  std::unique_ptr<uint8_t, decltype(&std::free)> buffer(
      static_cast<uint8_t*>(std::aligned_alloc(a, a)), &std::free);
  if (buffer == nullptr) return absl::ResourceExhaustedError("aligned_alloc failed");
  absl::Span<uint8_t> bytes(buffer.get(), a);
  if (absl::Status read = base_->Read(block, bytes); !read.ok()) return read;
  bytes[byte_offset - block] ^= static_cast<uint8_t>(1u << (bit & 7));
  return base_->Write(block, bytes);
}

void FaultInjectingBlockFile::SetCrashPoint(uint64_t writes_before_crash) {
  absl::MutexLock lock(&mu_);
  writes_before_crash_ = writes_before_crash;
}

bool FaultInjectingBlockFile::crashed() const {
  absl::MutexLock lock(&mu_);
  return crashed_;
}

void FaultInjectingBlockFile::ClearFaults() {
  absl::MutexLock lock(&mu_);
  fail_reads_ = 0;
  fail_writes_ = 0;
  ranges_.clear();
  tear_next_write_.reset();
  flips_.clear();
  writes_before_crash_.reset();
  crashed_ = false;
}

InjectedFaultCounts FaultInjectingBlockFile::injected() const {
  absl::MutexLock lock(&mu_);
  return counts_;
}

std::string FaultInjectingBlockFile::mechanism() const {
  return absl::StrCat("fault-injecting(", base_->mechanism(), ")");
}

io::BlockFileStats FaultInjectingBlockFile::stats() const {
  io::BlockFileStats s = base_->stats();
  absl::MutexLock lock(&mu_);
  s.read_errors += counts_.failed_reads;
  s.write_errors += counts_.failed_writes + torn_write_errors_;
  return s;
}

FaultInjectingBlockFile::Decision FaultInjectingBlockFile::Decide(const io::IoRequest& request) {
  Decision d;
  const bool read = request.kind == io::IoKind::kRead;
  absl::MutexLock lock(&mu_);
  for (const RangeFault& range : ranges_) {
    if (Targets(range.target, request.kind) && Overlaps(range.offset, range.length, request)) {
      d.fail_err = range.err;
      break;
    }
  }
  if (d.fail_err == 0 && read && fail_reads_ > 0) {
    --fail_reads_;
    d.fail_err = fail_reads_err_;
  } else if (d.fail_err == 0 && !read && fail_writes_ > 0) {
    --fail_writes_;
    d.fail_err = fail_writes_err_;
  }
  if (d.fail_err != 0) {
    ++(read ? counts_.failed_reads : counts_.failed_writes);
    return d;
  }
  if (read) return d;
  if (!crashed_ && writes_before_crash_.has_value()) {
    if (*writes_before_crash_ == 0) {
      crashed_ = true;
    } else {
      --*writes_before_crash_;
    }
  }
  if (crashed_) {
    d.drop = true;
    ++counts_.dropped_writes;
    return d;
  }
  if (tear_next_write_.has_value()) {
    d.tear_length = *tear_next_write_;
    d.tear_err = tear_err_;
    tear_next_write_.reset();
    ++counts_.torn_writes;
    if (d.tear_err != 0) ++torn_write_errors_;
  }
  return d;
}

void FaultInjectingBlockFile::Submit(const io::IoRequest& request, io::IoCallback done) {
  bool stopping;
  {
    absl::MutexLock lock(&mu_);
    stopping = stopping_;
  }
  if (stopping) {  // base_ may be gone already
    done(absl::UnavailableError("fault-injecting block file is shutting down"));
    return;
  }
  if (!io::ValidateIoRequest(request, size_bytes(), alignment(), path()).ok()) {
    base_->Submit(request, std::move(done));
    return;
  }
  const Decision d = Decide(request);
  if (d.fail_err != 0) {
    done(io::IoErrorToStatus(d.fail_err, request.kind, path(), request.offset, request.length));
    return;
  }
  if (d.drop) {
    done(absl::OkStatus());
    return;
  }
  if (d.tear_length.has_value()) {
    SubmitTornWrite(request, std::min(*d.tear_length, request.length), d.tear_err, std::move(done));
    return;
  }
  if (request.kind == io::IoKind::kWrite) {
    base_->Submit(request, std::move(done));
    return;
  }
  base_->Submit(request, [this, request, done = std::move(done)](absl::Status status) mutable {
    if (status.ok()) ApplyBitFlips(request);
    done(std::move(status));
  });
}

void FaultInjectingBlockFile::SubmitTornWrite(const io::IoRequest& request, uint32_t prefix,
                                              int err, io::IoCallback done) {
  absl::Status outcome =
      err == 0 ? absl::OkStatus()
               : io::IoErrorToStatus(err, request.kind, path(), request.offset, request.length);
  if (prefix == 0) {
    done(std::move(outcome));
    return;
  }
  io::IoRequest partial = request;
  partial.length = prefix;
  base_->Submit(
      partial, [outcome = std::move(outcome), done = std::move(done)](absl::Status status) mutable {
        done(status.ok() ? std::move(outcome) : std::move(status));
      });
}

void FaultInjectingBlockFile::ApplyBitFlips(const io::IoRequest& request) {
  absl::MutexLock lock(&mu_);
  bool flipped = false;
  for (const BitFlip& flip : flips_) {
    if (flip.byte_offset < request.offset || flip.byte_offset >= request.offset + request.length) {
      continue;
    }
    static_cast<uint8_t*>(request.buffer)[flip.byte_offset - request.offset] ^=
        static_cast<uint8_t>(1u << flip.bit);
    flipped = true;
  }
  if (flipped) ++counts_.flipped_reads;
}

}  // namespace kvtier::testing
