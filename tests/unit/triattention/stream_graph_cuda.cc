// StreamGraph on the CUDA runtime (CUDA builds).
#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"
#include "tests/unit/triattention/stream_graph.h"

namespace kvtier::triattention {
namespace {

absl::Status CudaStatus(const char* what, cudaError_t err) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(err)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<StreamGraph>> StreamGraph::Capture(
    void* stream, const std::function<absl::Status()>& enqueue) {
  auto* s = static_cast<cudaStream_t>(stream);
  if (absl::Status st = CudaStatus("cudaStreamBeginCapture",
                                   cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      !st.ok()) {
    return st;
  }
  const absl::Status enqueued = enqueue();
  cudaGraph_t graph = nullptr;
  const absl::Status ended = CudaStatus("cudaStreamEndCapture", cudaStreamEndCapture(s, &graph));
  if (!enqueued.ok() || !ended.ok()) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    return enqueued.ok() ? ended : enqueued;
  }
  cudaGraphExec_t exec = nullptr;
  if (absl::Status st = CudaStatus("cudaGraphInstantiate", cudaGraphInstantiate(&exec, graph, 0));
      !st.ok()) {
    cudaGraphDestroy(graph);
    return st;
  }
  return std::unique_ptr<StreamGraph>(new StreamGraph(graph, exec));
}

StreamGraph::~StreamGraph() {
  cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
  cudaGraphDestroy(static_cast<cudaGraph_t>(graph_));
}

absl::Status StreamGraph::Launch(void* stream) const {
  return CudaStatus("cudaGraphLaunch", cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_),
                                                       static_cast<cudaStream_t>(stream)));
}

}  // namespace kvtier::triattention
