// StreamGraph: a CUDA graph of the work enqueued on a stream, for the test that replays a captured
// GPU round. No CUDA types here, so gpu_round_test.cc compiles in every build; CMake compiles
// stream_graph_cuda.cc (the CUDA runtime's graph calls) or, without CUDA, stream_graph_no_cuda.cc
// (Unimplemented; the test skips before it gets here).
#ifndef KVTIER_TESTS_UNIT_TRIATTENTION_STREAM_GRAPH_H_
#define KVTIER_TESTS_UNIT_TRIATTENTION_STREAM_GRAPH_H_

#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kvtier::triattention {

class StreamGraph {
 public:
  // Captures (thread-local mode) what `enqueue` puts on `stream`, a cudaStream_t that is not the
  // legacy default stream, and instantiates it. `enqueue`'s error when it fails (the capture is
  // ended first); Internal with the CUDA error when capturing fails.
  static absl::StatusOr<std::unique_ptr<StreamGraph>> Capture(
      void* stream, const std::function<absl::Status()>& enqueue);
  ~StreamGraph();
  StreamGraph(const StreamGraph&) = delete;
  StreamGraph& operator=(const StreamGraph&) = delete;

  // Enqueues a replay of the graph on `stream`.
  absl::Status Launch(void* stream) const;

 private:
  StreamGraph(void* graph, void* exec) : graph_(graph), exec_(exec) {}
  void* graph_;  // cudaGraph_t
  void* exec_;   // cudaGraphExec_t
};

}  // namespace kvtier::triattention

#endif  // KVTIER_TESTS_UNIT_TRIATTENTION_STREAM_GRAPH_H_
