// Engines for the service's table tests: a registered-looking Engine (raw codec, one lossless
// buffer per page) whose host pool is a real file in a temporary directory, mapped as the service
// maps it (dataplane::HostPool::Map), so that the real host data plane moves its pages into and
// out of a real BlockStore. Header-only; the consumer links kvtier_service and kvtier_testing.
#ifndef KVTIER_TESTS_UNIT_DAEMON_SERVICE_ENGINE_FIXTURE_H_
#define KVTIER_TESTS_UNIT_DAEMON_SERVICE_ENGINE_FIXTURE_H_

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "codec/codec.h"
#include "daemon/dataplane/host_pool.h"
#include "daemon/service/engine_registry.h"
#include "daemon/store/block_store.h"
#include "tests/testing/cold_blocks.h"
#include "tests/testing/temp_dir.h"

namespace kvtier::service::testing {

inline constexpr uint32_t kPagePayload = 4096;  // bytes of a page's one lossless buffer

// Creates `dir`/`file` of `bytes` zero bytes (a pool file an engine would have made).
inline absl::Status MakePoolFile(const kvtier::testing::TempDir& dir, const std::string& file,
                                 uint64_t bytes) {
  const std::string path = dir.File(file);
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) return absl::InternalError("cannot create pool file " + path);
  const int rc = ftruncate(fd, static_cast<off_t>(bytes));
  close(fd);
  if (rc != 0) return absl::InternalError("cannot size pool file " + path);
  return absl::OkStatus();
}

// An engine of `tenant` in namespace `ns` whose one pool of `slots` pages is `dir`/`pool_file`
// (created unless it exists), moved by `plane` (may be null where no page moves).
inline absl::StatusOr<std::shared_ptr<Engine>> MakeEngine(
    const kvtier::testing::TempDir& dir, const std::string& id, const std::string& tenant,
    store::NamespaceId ns, dataplane::DataPlane* plane, const std::string& pool_file,
    uint32_t slots = 8) {
  auto engine = std::make_shared<Engine>();
  engine->id = id;
  engine->name = "engine " + id;
  engine->tenant = tenant;
  engine->ns = ns;
  engine->plane = plane;
  engine->lease = absl::Minutes(5);
  engine->layout = kvtier::testing::LosslessLayout(kPagePayload);
  codec::CodecSpec spec;
  spec.codec = codec::CodecId::kRaw;
  absl::StatusOr<std::unique_ptr<codec::Codec>> c = codec::Codec::Create(engine->layout, spec);
  if (!c.ok()) return c.status();
  engine->codec = std::move(*c);
  const uint64_t bytes = uint64_t{slots} * kPagePayload;
  if (access(dir.File(pool_file).c_str(), F_OK) != 0) {
    if (absl::Status made = MakePoolFile(dir, pool_file, bytes); !made.ok()) return made;
  }
  dataplane::SharedMemoryFile file;
  file.path = dir.File(pool_file);
  file.size_bytes = bytes;
  absl::StatusOr<std::unique_ptr<dataplane::HostPool>> pool =
      dataplane::HostPool::Map("pool", file, slots, kPagePayload, {dir.path()});
  if (!pool.ok()) return pool.status();
  engine->pools.push_back(std::move(*pool));
  engine->slots = slots;
  engine->hot_page_bytes = engine->layout.HotBytes();
  return engine;
}

// A small real BlockStore in `dir` (index, one disk directory, a 16 MiB host tier).
inline absl::StatusOr<std::unique_ptr<store::BlockStore>> OpenStore(
    const kvtier::testing::TempDir& dir) {
  if (mkdir(dir.File("disk").c_str(), 0700) != 0 && errno != EEXIST) {
    return absl::InternalError("cannot create " + dir.File("disk"));
  }
  store::BlockStoreOptions options;
  options.host.capacity_bytes = 16ull << 20;
  options.host.pin = store::HostPinMode::kNone;
  options.host_chunk_bytes = 1ull << 20;
  options.max_block_bytes = 1ull << 20;
  options.disk.dirs = {dir.File("disk")};
  options.disk.capacity_bytes = 32ull << 20;
  options.disk.chunk_bytes = 1ull << 20;
  options.index_path = dir.File("index");
  options.sync = index::SyncPolicy::kBatch;
  options.put_wait_ms = 5000;
  return store::BlockStore::Open(options);
}

// Fills page `page` of the engine's pool with bytes derived from `seed`.
inline void FillPage(const Engine& engine, uint32_t page, uint64_t seed) {
  uint8_t* p = engine.pools[0]->slot(page);
  uint64_t state = seed * 0x2545F4914F6CDD1Dull + 7;
  for (uint32_t i = 0; i < kPagePayload; i += 8) {
    const uint64_t v = kvtier::testing::SplitMix64(state);
    std::memcpy(p + i, &v, 8);
  }
}

// True when page `page` holds what FillPage(engine, page', seed) wrote.
inline bool PageHolds(const Engine& engine, uint32_t page, uint64_t seed) {
  const uint8_t* p = engine.pools[0]->slot(page);
  uint64_t state = seed * 0x2545F4914F6CDD1Dull + 7;
  for (uint32_t i = 0; i < kPagePayload; i += 8) {
    const uint64_t v = kvtier::testing::SplitMix64(state);
    if (std::memcmp(p + i, &v, 8) != 0) return false;
  }
  return true;
}

// Zeroes page `page` (so that a resume that wrote nothing is seen).
inline void ClearPage(const Engine& engine, uint32_t page) {
  std::memset(engine.pools[0]->slot(page), 0, kPagePayload);
}

}  // namespace kvtier::service::testing

#endif  // KVTIER_TESTS_UNIT_DAEMON_SERVICE_ENGINE_FIXTURE_H_
