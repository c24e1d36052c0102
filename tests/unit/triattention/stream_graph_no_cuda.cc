// StreamGraph in a build without CUDA: there are no streams to capture.
#include "tests/unit/triattention/stream_graph.h"

namespace kvtier::triattention {

absl::StatusOr<std::unique_ptr<StreamGraph>> StreamGraph::Capture(
    void*, const std::function<absl::Status()>&) {
  return absl::UnimplementedError("kvtier was built without CUDA");
}

StreamGraph::~StreamGraph() = default;

absl::Status StreamGraph::Launch(void*) const {
  return absl::UnimplementedError("kvtier was built without CUDA");
}

}  // namespace kvtier::triattention
