// Host side of hbm_probe.h in a CUDA build: argument checks and the CUDA error to status
// translation. Builds without CUDA compile hbm_probe_no_cuda.cc instead.
#include "kernels/hbm_probe.h"

#include "absl/strings/str_cat.h"
#include "kernels/device_query.h"
#include "kernels/hbm_probe_launch.h"

namespace kvtier::kernels {

absl::Status EnqueueReadProbe(const void* data, uint64_t bytes, uint64_t* sink, void* stream) {
  if (data == nullptr || sink == nullptr || reinterpret_cast<uintptr_t>(data) % 16 != 0 ||
      bytes % 16 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("read probe needs 16-byte aligned data and size (", bytes, " bytes)"));
  }
  if (int err = internal::LaunchReadProbe(data, bytes, sink, stream); err != 0) {
    return absl::InternalError(
        absl::StrCat("read probe launch: ", internal::ErrorString(err), " (error ", err, ")"));
  }
  return absl::OkStatus();
}

}  // namespace kvtier::kernels
