// The `raw` codec: every buffer's rows byte for byte in layer records. Lossless, and the baseline
// every compressed path is measured against.
#include <cstring>

#include "absl/strings/str_cat.h"
#include "codec/codec_internal.h"
#include "common/status_macros.h"

namespace kvtier::codec::internal {
namespace {

class RawCodec final : public Codec {
 public:
  explicit RawCodec(BlockPlan plan) : Codec(std::move(plan)) {}

  absl::Status Encode(const HotPageView& page, absl::Span<uint8_t> block,
                      std::vector<BufferEncodeStats>* stats) const override {
    KVTIER_RETURN_IF_ERROR(CheckViewSize(page.base.size(), plan_.buffers.size()));
    if (block.size() != plan_.block_bytes) {
      return absl::InvalidArgumentError(absl::StrCat("block buffer is ", block.size(),
                                                     " bytes, a raw block is ", plan_.block_bytes));
    }
    const ColdBlockHeader header = PlanHeader(plan_);
    ZeroPadding(plan_, block);
    for (size_t i = 0; i < plan_.buffers.size(); ++i) {
      GatherRows(plan_.layout, plan_.layout.buffers[i], page.base[i],
                 block.data() + plan_.buffers[i].whole_offset);
    }
    if (stats != nullptr) stats->assign(plan_.buffers.size(), BufferEncodeStats{});
    SealBlock(header, block);
    return absl::OkStatus();
  }

  absl::Status Decode(absl::Span<const uint8_t> block,
                      const MutableHotPageView& page) const override {
    KVTIER_RETURN_IF_ERROR(CheckViewSize(page.base.size(), plan_.buffers.size()));
    KVTIER_RETURN_IF_ERROR(CheckBlock(block).status());
    for (size_t i = 0; i < plan_.buffers.size(); ++i) {
      ScatterRows(plan_.layout, plan_.layout.buffers[i],
                  block.data() + plan_.buffers[i].whole_offset, page.base[i]);
    }
    return absl::OkStatus();
  }
};

}  // namespace

std::unique_ptr<Codec> MakeRawCodec(BlockPlan plan) {
  return std::make_unique<RawCodec>(std::move(plan));
}

}  // namespace kvtier::codec::internal
