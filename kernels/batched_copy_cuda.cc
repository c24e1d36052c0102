// BatchedCopier in a CUDA build: validation and chunking on the host, launches in batched_copy.cu.
// Builds without CUDA compile batched_copy_no_cuda.cc instead.
#include "kernels/batched_copy.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/batched_copy_launch.h"
#include "kernels/device_query.h"

namespace kvtier::kernels {

absl::StatusOr<std::unique_ptr<BatchedCopier>> BatchedCopier::Create(int device) {
  if (int err = internal::SetDevice(device); err != 0) {
    return absl::UnavailableError(absl::StrCat("CUDA device ", device, ": ",
                                               internal::ErrorString(err), " (error ", err, ")"));
  }
  return std::unique_ptr<BatchedCopier>(new BatchedCopier(device));
}

absl::Status BatchedCopier::Enqueue(absl::Span<const CopySpan> spans, void* stream) const {
  for (size_t i = 0; i < spans.size(); ++i) {
    if (spans[i].bytes != 0 && (spans[i].src == nullptr || spans[i].dst == nullptr)) {
      return absl::InvalidArgumentError(
          absl::StrCat("copy span ", i, " of ", spans[i].bytes, " bytes has a null address"));
    }
  }
  if (int err = internal::SetDevice(device_); err != 0) {
    return absl::InternalError(
        absl::StrCat("cudaSetDevice(", device_, "): ", internal::ErrorString(err)));
  }
  for (size_t first = 0; first < spans.size(); first += kSpansPerLaunch) {
    const int count = static_cast<int>(std::min<size_t>(kSpansPerLaunch, spans.size() - first));
    if (int err = internal::LaunchBatchedCopy(spans.data() + first, count, stream); err != 0) {
      return absl::InternalError(absl::StrCat("batched copy launch of ", count, " spans: ",
                                              internal::ErrorString(err), " (error ", err, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status BatchedCopier::Synchronize(void* stream) {
  if (int err = internal::SynchronizeStream(stream); err != 0) {
    return absl::InternalError(
        absl::StrCat("stream synchronize: ", internal::ErrorString(err), " (error ", err, ")"));
  }
  return absl::OkStatus();
}

}  // namespace kvtier::kernels
