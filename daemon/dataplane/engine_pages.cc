// EnginePages: page views over an engine's host pools, and the page index check.
#include "daemon/dataplane/engine_pages.h"

#include "absl/strings/str_format.h"

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

}  // namespace kvtier::dataplane
