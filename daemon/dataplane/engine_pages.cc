// EnginePages: page views over an engine's host pools, the page index check, and the GPU tier's
// set-up for an engine's GPU pool.
#include "daemon/dataplane/engine_pages.h"

#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace kvtier::dataplane {

codec::MutableHotPageView EnginePages::MutableView(uint32_t page) const {
  codec::MutableHotPageView view;
  view.base.reserve(layout.buffers.size());
  for (const codec::BufferSpec& b : layout.buffers) {
    view.base.push_back(pools[b.pool]->slot(page) + b.offset_bytes);
  }
  return view;
}

codec::HotPageView EnginePages::View(uint32_t page) const {
  codec::MutableHotPageView bases = MutableView(page);
  return codec::HotPageView{{bases.base.begin(), bases.base.end()}};
}

absl::Status EnginePages::CheckPage(uint32_t page) const {
  if (page < slots) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrFormat("page index %d out of range for the engine's pools (%d slots)", page, slots));
}

absl::Status UseGpuTier(store::BlockStore& store, const codec::CodecSpec& spec,
                        EnginePages& engine) {
  if (engine.device_pool == nullptr || engine.gpu == nullptr) {
    return absl::FailedPreconditionError("the engine has no GPU pool");
  }
  if (store.GpuTierDevice() != std::optional<int>(engine.device_pool->device())) {
    return absl::FailedPreconditionError(
        absl::StrFormat("the store has no GPU tier on device %d", engine.device_pool->device()));
  }
  // The tier holds pages in their flat form, which a GPU pool's slots are in already.
  if (codec::FlatPageBytes(engine.layout) != engine.hot_page_bytes) {
    return absl::FailedPreconditionError(
        absl::StrFormat("a flat page has %d bytes, the engine's pages %d",
                        codec::FlatPageBytes(engine.layout), engine.hot_page_bytes));
  }
  KVTIER_RETURN_IF_ERROR(store.SetHotLayout(engine.ns, engine.layout, spec));
  KVTIER_ASSIGN_OR_RETURN(engine.gpu_tier_copier,
                          kernels::BatchedCopier::Create(engine.device_pool->device()));
  return absl::OkStatus();
}

}  // namespace kvtier::dataplane
