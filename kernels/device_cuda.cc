// Device discovery, memory, streams and events in a CUDA build: wraps the CUDA runtime calls of
// device_query.cu into absl::Status. Builds without CUDA compile device_no_cuda.cc instead.
#include "kernels/device.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"
#include "kernels/device_query.h"

namespace kvtier::kernels {

bool BuiltWithCuda() { return true; }

absl::StatusOr<std::vector<DeviceInfo>> ListDevices() {
  int count = 0;
  if (int err = internal::QueryDeviceCount(&count); err != 0) {
    return absl::UnavailableError(
        absl::StrCat("no usable CUDA device: ", internal::ErrorString(err), " (error ", err, ")"));
  }
  std::vector<DeviceInfo> devices;
  for (int i = 0; i < count; ++i) {
    internal::RawDeviceInfo raw;
    if (int err = internal::QueryDevice(i, &raw); err != 0) {
      return absl::UnavailableError(
          absl::StrCat("CUDA device ", i, ": ", internal::ErrorString(err), " (error ", err, ")"));
    }
    devices.push_back(DeviceInfo{i, raw.name, raw.sm_major, raw.sm_minor, raw.memory_bytes,
                                 raw.can_map_host_memory != 0,
                                 std::string(reinterpret_cast<const char*>(raw.uuid), 16)});
  }
  return devices;
}

absl::Status PinHostMemory(void* ptr, uint64_t bytes) {
  if (int err = internal::RegisterHost(ptr, bytes); err != 0) {
    return absl::UnavailableError(
        absl::StrFormat("cudaHostRegister of %d bytes at %p failed: %s (error %d)", bytes, ptr,
                        internal::ErrorString(err), err));
  }
  return absl::OkStatus();
}

absl::Status UnpinHostMemory(void* ptr) {
  if (int err = internal::UnregisterHost(ptr); err != 0) {
    return absl::InternalError(absl::StrFormat("cudaHostUnregister at %p failed: %s (error %d)",
                                               ptr, internal::ErrorString(err), err));
  }
  return absl::OkStatus();
}

namespace {
std::string CudaText(int err) {
  return absl::StrFormat("%s (error %d)", internal::ErrorString(err), err);
}
constexpr int kCudaErrorInvalidDevice = 101;   // cudaErrorInvalidDevice
constexpr int kCudaErrorMemoryAllocation = 2;  // cudaErrorMemoryAllocation
}  // namespace

absl::Status UseDevice(int device) {
  if (int err = internal::SetDevice(device); err != 0) {
    const std::string text = absl::StrFormat("CUDA device %d: %s", device, CudaText(err));
    return err == kCudaErrorInvalidDevice ? absl::InvalidArgumentError(text)
                                          : absl::UnavailableError(text);
  }
  return absl::OkStatus();
}

absl::StatusOr<void*> AllocateDeviceMemory(int device, uint64_t bytes) {
  absl::Status st = UseDevice(device);
  if (!st.ok()) return st;
  void* ptr = nullptr;
  if (int err = internal::MallocDevice(&ptr, bytes); err != 0) {
    const std::string text =
        absl::StrFormat("cudaMalloc of %d bytes on device %d: %s", bytes, device, CudaText(err));
    return err == kCudaErrorMemoryAllocation ? absl::ResourceExhaustedError(text)
                                             : absl::UnavailableError(text);
  }
  return ptr;
}

void FreeDeviceMemory(void* ptr) {
  if (ptr == nullptr) return;
  if (int err = internal::FreeDevice(ptr); err != 0) {
    KVTIER_LOG(kError, "cudaFree(", absl::StrFormat("%p", ptr), "): ", CudaText(err));
  }
}

absl::StatusOr<void*> CreateStream(int device) {
  absl::Status st = UseDevice(device);
  if (!st.ok()) return st;
  void* stream = nullptr;
  if (int err = internal::CreateStream(&stream); err != 0) {
    return absl::UnavailableError(
        absl::StrFormat("cudaStreamCreate on device %d: %s", device, CudaText(err)));
  }
  return stream;
}

void DestroyStream(void* stream) {
  if (stream == nullptr) return;
  if (int err = internal::DestroyStream(stream); err != 0) {
    KVTIER_LOG(kError, "cudaStreamDestroy: ", CudaText(err));
  }
}

void* PerThreadStream() { return internal::PerThreadStream(); }

absl::Status CopyAsync(void* dst, const void* src, uint64_t bytes, void* stream) {
  if (int err = internal::CopyAsync(dst, src, bytes, stream); err != 0) {
    return absl::InternalError(absl::StrFormat("cudaMemcpyAsync of %d bytes from %p to %p: %s",
                                               bytes, src, dst, CudaText(err)));
  }
  return absl::OkStatus();
}

absl::Status SynchronizeStream(void* stream) {
  if (int err = internal::SynchronizeStream(stream); err != 0) {
    return absl::InternalError(absl::StrCat("CUDA stream: ", CudaText(err)));
  }
  return absl::OkStatus();
}

absl::StatusOr<void*> CreateEvent(int device) {
  absl::Status st = UseDevice(device);
  if (!st.ok()) return st;
  void* event = nullptr;
  if (int err = internal::CreateEvent(&event); err != 0) {
    return absl::UnavailableError(
        absl::StrFormat("cudaEventCreate on device %d: %s", device, CudaText(err)));
  }
  return event;
}

absl::Status RecordEvent(void* event, void* stream) {
  if (int err = internal::RecordEvent(event, stream); err != 0) {
    return absl::InternalError(absl::StrCat("cudaEventRecord: ", CudaText(err)));
  }
  return absl::OkStatus();
}

absl::Status StreamWaitEvent(void* stream, void* event) {
  if (int err = internal::WaitEvent(stream, event); err != 0) {
    return absl::InternalError(absl::StrCat("cudaStreamWaitEvent: ", CudaText(err)));
  }
  return absl::OkStatus();
}

absl::Status ZeroDeviceMemoryAsync(void* ptr, uint64_t bytes, void* stream) {
  if (int err = internal::ZeroAsync(ptr, bytes, stream); err != 0) {
    return absl::InternalError(
        absl::StrFormat("cudaMemsetAsync of %d bytes at %p: %s", bytes, ptr, CudaText(err)));
  }
  return absl::OkStatus();
}

absl::Status WaitEvent(void* event) {
  if (int err = internal::SynchronizeEvent(event); err != 0) {
    return absl::InternalError(absl::StrCat("cudaEventSynchronize: ", CudaText(err)));
  }
  return absl::OkStatus();
}

void DestroyEvent(void* event) {
  if (event == nullptr) return;
  if (int err = internal::DestroyEvent(event); err != 0) {
    KVTIER_LOG(kError, "cudaEventDestroy: ", CudaText(err));
  }
}

absl::StatusOr<bool> StreamIsCapturing(void* stream) {
  int capturing = 0;
  if (int err = internal::StreamCapturing(stream, &capturing); err != 0) {
    return absl::InternalError(absl::StrCat("cudaStreamIsCapturing: ", CudaText(err)));
  }
  return capturing != 0;
}

absl::StatusOr<bool> HostPointersUsableOnDevice(int device) {
  int value = 0;
  if (int err = internal::HostPointerUsable(device, &value); err != 0) {
    return absl::UnavailableError(absl::StrFormat("CUDA device %d: %s", device, CudaText(err)));
  }
  return value != 0;
}

absl::StatusOr<std::string> ExportIpcMemory(void* ptr) {
  std::string handle(kIpcHandleBytes, '\0');
  if (int err = internal::IpcExport(ptr, reinterpret_cast<unsigned char*>(handle.data()));
      err != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("cudaIpcGetMemHandle(%p): %s", ptr, CudaText(err)));
  }
  return handle;
}

absl::StatusOr<void*> OpenIpcMemory(int device, absl::string_view handle) {
  if (handle.size() != kIpcHandleBytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("a CUDA IPC handle has 64 bytes, not %d", handle.size()));
  }
  absl::Status st = UseDevice(device);
  if (!st.ok()) return st;
  void* ptr = nullptr;
  if (int err = internal::IpcOpen(reinterpret_cast<const unsigned char*>(handle.data()), &ptr);
      err != 0) {
    const std::string text =
        absl::StrFormat("cudaIpcOpenMemHandle on device %d: %s", device, CudaText(err));
    return err == 1 /* cudaErrorInvalidValue */ || err == 400 /* cudaErrorInvalidResourceHandle */
               ? absl::InvalidArgumentError(text)
               : absl::UnavailableError(text);
  }
  return ptr;
}

void CloseIpcMemory(void* ptr) {
  if (ptr == nullptr) return;
  if (int err = internal::IpcClose(ptr); err != 0) {
    KVTIER_LOG(kError, "cudaIpcCloseMemHandle(", absl::StrFormat("%p", ptr), "): ", CudaText(err));
  }
}

absl::StatusOr<uint64_t> AllocationBytesFrom(const void* ptr) {
  uint64_t base = 0, size = 0;
  if (int err = internal::AllocationRange(const_cast<void*>(ptr), &base, &size); err != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%p is not in a device allocation (%s)", ptr,
                        err >= 10000 ? absl::StrCat("CUresult ", err - 10000) : CudaText(err)));
  }
  const uint64_t p = reinterpret_cast<uint64_t>(ptr);
  if (p < base || p >= base + size) {
    return absl::InvalidArgumentError(absl::StrFormat("%p is not in a device allocation", ptr));
  }
  return base + size - p;
}

absl::StatusOr<DeviceAllocation> AllocationOf(const void* ptr) {
  absl::StatusOr<uint64_t> tail = AllocationBytesFrom(ptr);
  if (!tail.ok()) return tail.status();
  uint64_t base = 0, size = 0;
  if (int err = internal::AllocationRange(const_cast<void*>(ptr), &base, &size); err != 0) {
    return absl::InvalidArgumentError(absl::StrFormat("%p is not in a device allocation", ptr));
  }
  return DeviceAllocation{reinterpret_cast<void*>(base), size};
}

absl::StatusOr<int> DeviceByUuid(absl::string_view uuid) {
  auto devices = ListDevices();
  if (!devices.ok()) return devices.status();
  for (const DeviceInfo& d : *devices) {
    if (d.uuid == uuid) return d.ordinal;
  }
  return absl::NotFoundError("no visible CUDA device has the pool's device UUID");
}

}  // namespace kvtier::kernels
