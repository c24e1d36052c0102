// EnginePages: what the data plane needs of a registered engine: its id (the blocks' origin),
// its namespace, layout and codec, and the pools it moves pages between (host pools through the
// CPU codec, or one GPU pool through kernels::GpuBlockCodec). The service's Engine extends it with
// the registration's bookkeeping (name, tenant, lease, peer). Immutable once registered; read from
// any thread.
#ifndef KVTIER_DAEMON_DATAPLANE_ENGINE_PAGES_H_
#define KVTIER_DAEMON_DATAPLANE_ENGINE_PAGES_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "codec/codec.h"
#include "daemon/dataplane/gpu_pages.h"
#include "daemon/dataplane/host_pool.h"
#include "daemon/store/block_store.h"
#include "kernels/batched_copy.h"
#include "kernels/gpu_block_codec.h"

namespace kvtier::dataplane {

struct EnginePages {
  std::string id;
  store::NamespaceId ns = 0;
  codec::PageLayout layout;
  std::unique_ptr<codec::Codec> codec;
  std::vector<std::unique_ptr<HostPool>> pools;  // by layout pool index (host pools)
  std::unique_ptr<DevicePool> device_pool;       // or one GPU pool (flat layouts)
  std::unique_ptr<kernels::GpuBlockCodec> gpu;   // its kernels
  uint32_t slots = 0;                            // the smallest pool's slot count
  uint64_t hot_page_bytes = 0;
  // Set (UseGpuTier) when the store's GPU tier is on the pool's device and holds the namespace's
  // hot layout: offloads copy pages into it and onboards copy its pages back, device to device.
  std::unique_ptr<kernels::BatchedCopier> gpu_tier_copier;

  codec::HotPageView View(uint32_t page) const;
  codec::MutableHotPageView MutableView(uint32_t page) const;
  // InvalidArgument naming the page unless it is below the smallest pool's slot count.
  absl::Status CheckPage(uint32_t page) const;
};

// Lets the GPU data plane put `engine`'s pages (a GPU pool) into the store's GPU tier: sets the
// namespace's hot layout (BlockStore::SetHotLayout, with the engine's codec `spec`) and makes
// the engine's copier. The engine keeps the direct path when this fails (no GPU tier on its
// device, a codec the tier cannot encode from: Unimplemented for raw).
absl::Status UseGpuTier(store::BlockStore& store, const codec::CodecSpec& spec,
                        EnginePages& engine);

}  // namespace kvtier::dataplane

#endif  // KVTIER_DAEMON_DATAPLANE_ENGINE_PAGES_H_
