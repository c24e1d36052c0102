// Device discovery: wraps the CUDA runtime queries of device_query.cu into absl::Status, or
// reports Unimplemented in builds without CUDA (KVTIER_WITH_CUDA undefined).
#include "kernels/device.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"

#if KVTIER_WITH_CUDA
#include "kernels/device_query.h"
#endif

namespace kvtier::kernels {

bool BuiltWithCuda() { return KVTIER_WITH_CUDA != 0; }

absl::StatusOr<std::vector<DeviceInfo>> ListDevices() {
#if KVTIER_WITH_CUDA
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
#else
  return absl::UnimplementedError("kvtier was built without CUDA (KVTIER_CUDA=OFF or no nvcc)");
#endif
}

absl::Status PinHostMemory(void* ptr, uint64_t bytes) {
#if KVTIER_WITH_CUDA
  if (int err = internal::RegisterHost(ptr, bytes); err != 0) {
    return absl::UnavailableError(
        absl::StrFormat("cudaHostRegister of %d bytes at %p failed: %s (error %d)", bytes, ptr,
                        internal::ErrorString(err), err));
  }
  return absl::OkStatus();
#else
  (void)ptr;
  (void)bytes;
  return absl::UnimplementedError("kvtier was built without CUDA (KVTIER_CUDA=OFF or no nvcc)");
#endif
}

absl::Status UnpinHostMemory(void* ptr) {
#if KVTIER_WITH_CUDA
  if (int err = internal::UnregisterHost(ptr); err != 0) {
    return absl::InternalError(absl::StrFormat("cudaHostUnregister at %p failed: %s (error %d)",
                                               ptr, internal::ErrorString(err), err));
  }
  return absl::OkStatus();
#else
  (void)ptr;
  return absl::UnimplementedError("kvtier was built without CUDA (KVTIER_CUDA=OFF or no nvcc)");
#endif
}

#if KVTIER_WITH_CUDA
namespace {
std::string CudaText(int err) {
  return absl::StrFormat("%s (error %d)", internal::ErrorString(err), err);
}
constexpr int kCudaErrorInvalidDevice = 101;   // cudaErrorInvalidDevice
constexpr int kCudaErrorMemoryAllocation = 2;  // cudaErrorMemoryAllocation
}  // namespace
#define KVTIER_NO_CUDA_RETURN(...)
#else
#define KVTIER_NO_CUDA_RETURN(...) \
  return absl::UnimplementedError("kvtier was built without CUDA (KVTIER_CUDA=OFF or no nvcc)")
#endif

absl::Status UseDevice(int device) {
#if KVTIER_WITH_CUDA
  if (int err = internal::SetDevice(device); err != 0) {
    const std::string text = absl::StrFormat("CUDA device %d: %s", device, CudaText(err));
    return err == kCudaErrorInvalidDevice ? absl::InvalidArgumentError(text)
                                          : absl::UnavailableError(text);
  }
  return absl::OkStatus();
#else
  (void)device;
  KVTIER_NO_CUDA_RETURN();
#endif
}

absl::StatusOr<void*> AllocateDeviceMemory(int device, uint64_t bytes) {
#if KVTIER_WITH_CUDA
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
#else
  (void)device;
  (void)bytes;
  KVTIER_NO_CUDA_RETURN();
#endif
}

void FreeDeviceMemory(void* ptr) {
#if KVTIER_WITH_CUDA
  if (ptr == nullptr) return;
  if (int err = internal::FreeDevice(ptr); err != 0) {
    KVTIER_LOG(kError, "cudaFree(", absl::StrFormat("%p", ptr), "): ", CudaText(err));
  }
#else
  (void)ptr;
#endif
}

absl::StatusOr<void*> CreateStream(int device) {
#if KVTIER_WITH_CUDA
  absl::Status st = UseDevice(device);
  if (!st.ok()) return st;
  void* stream = nullptr;
  if (int err = internal::CreateStream(&stream); err != 0) {
    return absl::UnavailableError(
        absl::StrFormat("cudaStreamCreate on device %d: %s", device, CudaText(err)));
  }
  return stream;
#else
  (void)device;
  KVTIER_NO_CUDA_RETURN();
#endif
}

void DestroyStream(void* stream) {
#if KVTIER_WITH_CUDA
  if (stream == nullptr) return;
  if (int err = internal::DestroyStream(stream); err != 0) {
    KVTIER_LOG(kError, "cudaStreamDestroy: ", CudaText(err));
  }
#else
  (void)stream;
#endif
}

void* PerThreadStream() {
#if KVTIER_WITH_CUDA
  return internal::PerThreadStream();
#else
  return nullptr;
#endif
}

absl::Status CopyAsync(void* dst, const void* src, uint64_t bytes, void* stream) {
#if KVTIER_WITH_CUDA
  if (int err = internal::CopyAsync(dst, src, bytes, stream); err != 0) {
    return absl::InternalError(absl::StrFormat("cudaMemcpyAsync of %d bytes from %p to %p: %s",
                                               bytes, src, dst, CudaText(err)));
  }
  return absl::OkStatus();
#else
  (void)dst, (void)src, (void)bytes, (void)stream;
  KVTIER_NO_CUDA_RETURN();
#endif
}

absl::Status SynchronizeStream(void* stream) {
#if KVTIER_WITH_CUDA
  if (int err = internal::SynchronizeStream(stream); err != 0) {
    return absl::InternalError(absl::StrCat("CUDA stream: ", CudaText(err)));
  }
  return absl::OkStatus();
#else
  (void)stream;
  KVTIER_NO_CUDA_RETURN();
#endif
}

absl::StatusOr<void*> CreateEvent(int device) {
#if KVTIER_WITH_CUDA
  absl::Status st = UseDevice(device);
  if (!st.ok()) return st;
  void* event = nullptr;
  if (int err = internal::CreateEvent(&event); err != 0) {
    return absl::UnavailableError(
        absl::StrFormat("cudaEventCreate on device %d: %s", device, CudaText(err)));
  }
  return event;
#else
  (void)device;
  KVTIER_NO_CUDA_RETURN();
#endif
}

absl::Status RecordEvent(void* event, void* stream) {
#if KVTIER_WITH_CUDA
  if (int err = internal::RecordEvent(event, stream); err != 0) {
    return absl::InternalError(absl::StrCat("cudaEventRecord: ", CudaText(err)));
  }
  return absl::OkStatus();
#else
  (void)event, (void)stream;
  KVTIER_NO_CUDA_RETURN();
#endif
}

absl::Status WaitEvent(void* event) {
#if KVTIER_WITH_CUDA
  if (int err = internal::SynchronizeEvent(event); err != 0) {
    return absl::InternalError(absl::StrCat("cudaEventSynchronize: ", CudaText(err)));
  }
  return absl::OkStatus();
#else
  (void)event;
  KVTIER_NO_CUDA_RETURN();
#endif
}

void DestroyEvent(void* event) {
#if KVTIER_WITH_CUDA
  if (event == nullptr) return;
  if (int err = internal::DestroyEvent(event); err != 0) {
    KVTIER_LOG(kError, "cudaEventDestroy: ", CudaText(err));
  }
#else
  (void)event;
#endif
}

absl::StatusOr<bool> StreamIsCapturing(void* stream) {
#if KVTIER_WITH_CUDA
  int capturing = 0;
  if (int err = internal::StreamCapturing(stream, &capturing); err != 0) {
    return absl::InternalError(absl::StrCat("cudaStreamIsCapturing: ", CudaText(err)));
  }
  return capturing != 0;
#else
  (void)stream;
  KVTIER_NO_CUDA_RETURN();
#endif
}

absl::StatusOr<bool> HostPointersUsableOnDevice(int device) {
#if KVTIER_WITH_CUDA
  int value = 0;
  if (int err = internal::HostPointerUsable(device, &value); err != 0) {
    return absl::UnavailableError(absl::StrFormat("CUDA device %d: %s", device, CudaText(err)));
  }
  return value != 0;
#else
  (void)device;
  KVTIER_NO_CUDA_RETURN();
#endif
}

absl::StatusOr<std::string> ExportIpcMemory(void* ptr) {
#if KVTIER_WITH_CUDA
  std::string handle(kIpcHandleBytes, '\0');
  if (int err = internal::IpcExport(ptr, reinterpret_cast<unsigned char*>(handle.data()));
      err != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("cudaIpcGetMemHandle(%p): %s", ptr, CudaText(err)));
  }
  return handle;
#else
  (void)ptr;
  KVTIER_NO_CUDA_RETURN();
#endif
}

absl::StatusOr<void*> OpenIpcMemory(int device, absl::string_view handle) {
#if KVTIER_WITH_CUDA
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
#else
  (void)device;
  (void)handle;
  KVTIER_NO_CUDA_RETURN();
#endif
}

void CloseIpcMemory(void* ptr) {
#if KVTIER_WITH_CUDA
  if (ptr == nullptr) return;
  if (int err = internal::IpcClose(ptr); err != 0) {
    KVTIER_LOG(kError, "cudaIpcCloseMemHandle(", absl::StrFormat("%p", ptr), "): ", CudaText(err));
  }
#else
  (void)ptr;
#endif
}

absl::StatusOr<uint64_t> AllocationBytesFrom(const void* ptr) {
#if KVTIER_WITH_CUDA
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
#else
  (void)ptr;
  KVTIER_NO_CUDA_RETURN();
#endif
}

absl::StatusOr<DeviceAllocation> AllocationOf(const void* ptr) {
  absl::StatusOr<uint64_t> tail = AllocationBytesFrom(ptr);
  if (!tail.ok()) return tail.status();
#if KVTIER_WITH_CUDA
  uint64_t base = 0, size = 0;
  if (int err = internal::AllocationRange(const_cast<void*>(ptr), &base, &size); err != 0) {
    return absl::InvalidArgumentError(absl::StrFormat("%p is not in a device allocation", ptr));
  }
  return DeviceAllocation{reinterpret_cast<void*>(base), size};
#else
  KVTIER_NO_CUDA_RETURN();
#endif
}

absl::StatusOr<int> DeviceByUuid(absl::string_view uuid) {
  auto devices = ListDevices();
  if (!devices.ok()) return devices.status();
  for (const DeviceInfo& d : *devices) {
    if (d.uuid == uuid) return d.ordinal;
  }
  return absl::NotFoundError("no visible CUDA device has the pool's device UUID");
}

#undef KVTIER_NO_CUDA_RETURN

}  // namespace kvtier::kernels
