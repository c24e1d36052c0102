// GpuBuffer: memory for the kernels' GPU tests, taken through kernels/device.h (the API the daemon
// uses) rather than the CUDA runtime, so that the tests compile in every build and skip at run
// time where there is no device. Device memory, or host memory pinned and mapped with
// PinHostMemory, which kernels use at its host address (as they use the daemon's host tier).
#ifndef KVTIER_TESTS_UNIT_KERNELS_GPU_BUFFER_H_
#define KVTIER_TESTS_UNIT_KERNELS_GPU_BUFFER_H_

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/device.h"

namespace kvtier::kernels {

class GpuBuffer {
 public:
  enum class Kind { kDevice, kMappedHost };

  // `bytes` of `kind` memory for device 0. FailedPrecondition for kMappedHost where the device
  // cannot use host addresses; the kernels API's errors otherwise.
  static absl::StatusOr<std::unique_ptr<GpuBuffer>> Allocate(Kind kind, size_t bytes) {
    std::unique_ptr<GpuBuffer> b(new GpuBuffer(kind, bytes));
    if (kind == Kind::kDevice) {
      absl::StatusOr<void*> ptr = AllocateDeviceMemory(0, bytes);
      if (!ptr.ok()) return ptr.status();
      b->data_ = static_cast<uint8_t*>(*ptr);
      return b;
    }
    absl::StatusOr<bool> usable = HostPointersUsableOnDevice(0);
    if (!usable.ok()) return usable.status();
    if (!*usable) return absl::FailedPreconditionError("device 0 cannot use host addresses");
    // Whole pages, so that no two buffers' registrations share one.
    constexpr size_t kPage = 4096;
    b->data_ =
        static_cast<uint8_t*>(std::aligned_alloc(kPage, (bytes + kPage - 1) / kPage * kPage));
    if (b->data_ == nullptr) return absl::ResourceExhaustedError("aligned_alloc");
    if (absl::Status s = PinHostMemory(b->data_, bytes); !s.ok()) {
      std::free(b->data_);
      b->data_ = nullptr;
      return s;
    }
    b->pinned_ = true;
    return b;
  }

  ~GpuBuffer() {
    if (kind_ == Kind::kDevice) {
      FreeDeviceMemory(data_);
    } else if (data_ != nullptr) {
      if (pinned_) (void)UnpinHostMemory(data_);
      std::free(data_);
    }
  }
  GpuBuffer(const GpuBuffer&) = delete;
  GpuBuffer& operator=(const GpuBuffer&) = delete;

  // An address kernels may use; for kMappedHost also the host's.
  uint8_t* data() const { return data_; }
  size_t size() const { return bytes_; }

  // Copies `bytes` to `offset` and waits for the copy (and the legacy default stream's earlier
  // work).
  absl::Status Write(absl::Span<const uint8_t> bytes, size_t offset = 0) {
    if (absl::Status s = CopyAsync(data_ + offset, bytes.data(), bytes.size(), nullptr); !s.ok()) {
      return s;
    }
    return SynchronizeStream(nullptr);
  }
  // Sets every byte to `value`.
  absl::Status Fill(uint8_t value) { return Write(std::vector<uint8_t>(bytes_, value)); }
  // The whole buffer, after the legacy default stream's earlier work.
  absl::StatusOr<std::vector<uint8_t>> Read() const {
    std::vector<uint8_t> out(bytes_);
    if (absl::Status s = CopyAsync(out.data(), data_, bytes_, nullptr); !s.ok()) return s;
    if (absl::Status s = SynchronizeStream(nullptr); !s.ok()) return s;
    return out;
  }

 private:
  GpuBuffer(Kind kind, size_t bytes) : kind_(kind), bytes_(bytes) {}
  Kind kind_;
  size_t bytes_;
  uint8_t* data_ = nullptr;
  bool pinned_ = false;
};

}  // namespace kvtier::kernels

#endif  // KVTIER_TESTS_UNIT_KERNELS_GPU_BUFFER_H_
