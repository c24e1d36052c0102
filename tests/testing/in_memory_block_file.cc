// InMemoryBlockFile: a FIFO of accepted requests served by one completion thread with memcpy.
#include "tests/testing/in_memory_block_file.h"

#include <cstring>
#include <utility>

#include "absl/memory/memory.h"

namespace kvtier::testing {

struct InMemoryBlockFile::Op {
  io::IoRequest request;
  io::IoCallback done;
  io::IoCounters::Clock::time_point submitted;
};

absl::StatusOr<std::unique_ptr<InMemoryBlockFile>> InMemoryBlockFile::Create(uint64_t size_bytes,
                                                                             uint32_t alignment) {
  return CreateOn(std::make_shared<std::vector<uint8_t>>(size_bytes, 0), alignment);
}

absl::StatusOr<std::unique_ptr<InMemoryBlockFile>> InMemoryBlockFile::CreateOn(
    std::shared_ptr<std::vector<uint8_t>> storage, uint32_t alignment) {
  if (storage == nullptr) return absl::InvalidArgumentError("in-memory block file without storage");
  io::BlockFileOptions options;
  options.path = "memory";
  options.size_bytes = storage->size();
  options.alignment = alignment;
  if (absl::Status valid = io::ValidateBlockFileOptions(options); !valid.ok()) return valid;
  return absl::WrapUnique(new InMemoryBlockFile(std::move(storage), alignment));
}

InMemoryBlockFile::InMemoryBlockFile(std::shared_ptr<std::vector<uint8_t>> storage,
                                     uint32_t alignment)
    : storage_(std::move(storage)), alignment_(alignment) {
  thread_ = std::thread([this] { CompletionThreadMain(); });
}

InMemoryBlockFile::~InMemoryBlockFile() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

void InMemoryBlockFile::Submit(const io::IoRequest& request, io::IoCallback done) {
  if (absl::Status valid = io::ValidateIoRequest(request, size_bytes(), alignment_, path_);
      !valid.ok()) {
    counters_.OnRejected(request.kind);
    done(std::move(valid));
    return;
  }
  auto op = std::make_unique<Op>();
  op->request = request;
  op->done = std::move(done);
  op->submitted = io::IoCounters::Clock::now();
  {
    absl::MutexLock lock(&mu_);
    if (!stopping_) {
      counters_.OnQueued();
      pending_.push_back(std::move(op));
      return;
    }
  }
  counters_.OnRejected(request.kind);
  op->done(absl::UnavailableError("in-memory block file is shutting down; request not accepted"));
}

absl::Status InMemoryBlockFile::Sync() {
  absl::MutexLock lock(&mu_);
  ++syncs_;
  return absl::OkStatus();
}

uint64_t InMemoryBlockFile::syncs() const {
  absl::MutexLock lock(&mu_);
  return syncs_;
}

void InMemoryBlockFile::CompletionThreadMain() {
  for (;;) {
    std::unique_ptr<Op> op;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](InMemoryBlockFile* self) ABSL_NO_THREAD_SAFETY_ANALYSIS {
            return self->stopping_ || !self->pending_.empty();
          },
          this));
      if (pending_.empty()) return;
      op = std::move(pending_.front());
      pending_.pop_front();
      counters_.OnStarted();
    }
    const io::IoRequest& r = op->request;
    uint8_t* bytes = storage_->data() + r.offset;
    if (r.kind == io::IoKind::kRead) {
      std::memcpy(r.buffer, bytes, r.length);
    } else {
      std::memcpy(bytes, r.buffer, r.length);
    }
    counters_.OnFinished(r.kind, absl::OkStatus(), r.length, op->submitted);
    op->done(absl::OkStatus());
  }
}

}  // namespace kvtier::testing
