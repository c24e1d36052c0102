// Internal: the CUDA side of kv_round.h with plain types only (the .cu file includes no Abseil
// code of its own). The host wrapper (kv_round.cc) validates; these only launch.
#ifndef KVTIER_KERNELS_KV_ROUND_LAUNCH_H_
#define KVTIER_KERNELS_KV_ROUND_LAUNCH_H_

#include <cstdint>

#include "kernels/kv_round.h"

namespace kvtier::kernels::internal {

struct TriRoundArgs {
  TriRoundShape shape;
  PagedKvDevice kv;
  TriCalibrationDevice calibration;
  const KvRoundRequest* requests = nullptr;
  int num_requests = 0;
  int sets = 0;  // KvSetsPerRequest(shape.mode, ...)
  KvRoundWorkspace workspace;
};

// Launches the round's kernels on `stream`. Returns a cudaError_t value (0 on success).
int LaunchTriRound(const TriRoundArgs& args, void* stream);

struct CompactionArgs {
  PagedKvDevice kv;
  const KvRoundRequest* requests = nullptr;
  int num_requests = 0;
  int sets = 0;
  const int32_t* kept = nullptr;
  const int32_t* kept_count = nullptr;
  // Optional, from the round's selection: per set the evicted slots inside [prompt, prompt +
  // kept), ascending, and their count. Without them compaction finds the holes itself.
  const int32_t* holes = nullptr;
  const int32_t* hole_count = nullptr;
  int64_t kept_stride = 0;
  KvCompactionOrder order = KvCompactionOrder::kFillHoles;
};

// Launches the compaction kernel on `stream`. Returns a cudaError_t value (0 on success).
int LaunchKvCompaction(const CompactionArgs& args, void* stream);

}  // namespace kvtier::kernels::internal

#endif  // KVTIER_KERNELS_KV_ROUND_LAUNCH_H_
