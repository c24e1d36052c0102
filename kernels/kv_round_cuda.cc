// kv_round_start.h in a CUDA build: the launches of kv_round.cu, their CUDA errors as statuses.
#include "absl/strings/str_cat.h"
#include "kernels/device_query.h"
#include "kernels/kv_round_launch.h"
#include "kernels/kv_round_start.h"

namespace kvtier::kernels::internal {

absl::Status StartTriRound(const TriRoundArgs& args, void* stream) {
  if (int err = LaunchTriRound(args, stream); err != 0) {
    return absl::InternalError(
        absl::StrCat("triattention round launch: ", ErrorString(err), " (error ", err, ")"));
  }
  return absl::OkStatus();
}

absl::Status StartKvCompaction(const CompactionArgs& args, void* stream) {
  if (int err = LaunchKvCompaction(args, stream); err != 0) {
    return absl::InternalError(
        absl::StrCat("kv compaction launch: ", ErrorString(err), " (error ", err, ")"));
  }
  return absl::OkStatus();
}

}  // namespace kvtier::kernels::internal
