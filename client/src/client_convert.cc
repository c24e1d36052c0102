// Conversions between the kvtier.v1 messages and libkvtier's public client types; see
// client_convert.h. The wire enums Tier and ItemCode share their numeric values with the public
// ones, so they convert by cast.
#include "client/src/client_convert.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "codec/codec_spec.h"
#include "codec/page_layout.h"
#include "proto/codec_convert.h"

namespace kvtier::client_internal {

absl::Time TimeFromProto(const google::protobuf::Timestamp& t) {
  return absl::FromUnixSeconds(t.seconds()) + absl::Nanoseconds(t.nanos());
}

absl::Duration DurationFromProto(const google::protobuf::Duration& d) {
  return absl::Seconds(d.seconds()) + absl::Nanoseconds(d.nanos());
}

void DurationToProto(absl::Duration d, google::protobuf::Duration* out) {
  const int64_t ns = absl::ToInt64Nanoseconds(d);
  out->set_seconds(ns / 1000000000);
  out->set_nanos(static_cast<int32_t>(ns % 1000000000));
}

Tier TierFromProto(int tier) { return static_cast<Tier>(tier); }

ItemResult ItemFromProto(const v1::ItemResult& item) {
  return ItemResult{static_cast<ItemCode>(item.code()), item.message(), TierFromProto(item.tier())};
}

void AppendItems(const google::protobuf::RepeatedPtrField<v1::ItemResult>& items,
                 std::vector<ItemResult>* out) {
  for (const v1::ItemResult& item : items) out->push_back(ItemFromProto(item));
}

std::string CodecName(v1::Codec codec) {
  switch (codec) {
    case v1::CODEC_RAW:
      return "raw";
    case v1::CODEC_NVFP4:
      return "nvfp4";
    case v1::CODEC_NVFP4X2:
      return "nvfp4x2";
    default:
      return absl::StrCat("codec-", static_cast<int>(codec));
  }
}

ServerInfo ServerInfoFromProto(const v1::HelloResponse& resp) {
  ServerInfo info;
  info.api_version = resp.api_version();
  info.server_version = resp.server_version();
  info.incarnation_id = resp.incarnation_id();
  info.node_name = resp.node_name();
  const v1::ServerCapabilities& caps = resp.capabilities();
  for (int tier : caps.tiers()) info.tiers.push_back(TierFromProto(tier));
  for (int codec : caps.codecs()) info.codecs.push_back(CodecName(static_cast<v1::Codec>(codec)));
  info.cuda = caps.cuda();
  info.cuda_ipc_pools = caps.cuda_ipc_pools();
  info.shared_memory_pools = caps.shared_memory_pools();
  info.persistent_host_tier = caps.persistent_host_tier();
  info.authentication = caps.authentication();
  info.draining = resp.draining();
  info.max_items_per_request = resp.limits().max_items_per_request();
  info.features.assign(caps.features().begin(), caps.features().end());
  return info;
}

Engine EngineFromProto(const v1::RegisterEngineResponse& resp) {
  Engine engine;
  engine.engine_id = resp.engine_id();
  engine.namespace_id = resp.namespace_id();
  engine.hash_root = resp.hash_root();
  absl::StatusOr<codec::CodecSpec> codec =
      proto::CodecFromProto(resp.ns().codec(), codec::CodecSpec{});
  engine.codec = codec.ok() ? codec->ToString() : CodecName(resp.ns().codec().codec());
  engine.hot_page_bytes = resp.hot_page_bytes();
  engine.cold_block_bytes = resp.cold_block_bytes();
  engine.lease_ttl = DurationFromProto(resp.lease_ttl());
  engine.incarnation_id = resp.incarnation_id();
  return engine;
}

TierStats TierStatsFromProto(const v1::TierStats& t) {
  TierStats s;
  s.tier = TierFromProto(t.tier());
  s.capacity_bytes = t.capacity_bytes();
  s.used_bytes = t.used_bytes();
  s.blocks = t.blocks();
  s.pinned_blocks = t.pinned_blocks();
  s.hits = t.hits();
  s.misses = t.misses();
  s.bytes_in = t.bytes_in();
  s.bytes_out = t.bytes_out();
  s.evicted_blocks = t.evicted_blocks();
  s.checksum_failures = t.checksum_failures();
  return s;
}

Stats StatsFromProto(const v1::StatsResponse& resp) {
  Stats stats;
  stats.incarnation_id = resp.incarnation_id();
  stats.uptime = DurationFromProto(resp.uptime());
  for (const v1::TierStats& t : resp.tiers()) stats.tiers.push_back(TierStatsFromProto(t));
  stats.hot_bytes_offloaded = resp.hot_bytes_offloaded();
  stats.cold_bytes_offloaded = resp.cold_bytes_offloaded();
  stats.hot_bytes_onboarded = resp.hot_bytes_onboarded();
  stats.cold_bytes_onboarded = resp.cold_bytes_onboarded();
  stats.dropped_offloads = resp.dropped_offloads();
  stats.parked_requests = resp.parked_requests();
  stats.registered_engines = resp.registered_engines();
  stats.draining = resp.draining();
  for (const v1::NamespaceStats& n : resp.namespaces()) {
    NamespaceStats ns;
    ns.namespace_id = n.namespace_id();
    ns.tenant = n.ns().tenant();
    ns.model = n.ns().model();
    ns.partition = n.ns().partition();
    for (const v1::TierUsage& u : n.tiers()) {
      TierStats t;
      t.tier = TierFromProto(u.tier());
      t.blocks = u.blocks();
      t.used_bytes = u.used_bytes();
      ns.tiers.push_back(t);
    }
    ns.engines = n.engines();
    ns.hits = n.hits();
    ns.misses = n.misses();
    ns.parked_requests = n.parked_requests();
    stats.namespaces.push_back(std::move(ns));
  }
  return stats;
}

bool EventFromProto(const v1::Event& e, Event* out) {
  out->sequence = e.sequence();
  out->namespace_id = e.namespace_id();
  switch (e.kind_case()) {
    case v1::Event::kBlockStored:
      out->kind = Event::Kind::kBlockStored;
      out->block_hashes.assign(e.block_stored().block_hashes().begin(),
                               e.block_stored().block_hashes().end());
      out->tier = TierFromProto(e.block_stored().tier());
      return true;
    case v1::Event::kBlockRemoved:
      out->kind = Event::Kind::kBlockRemoved;
      out->block_hashes.assign(e.block_removed().block_hashes().begin(),
                               e.block_removed().block_hashes().end());
      out->tier = TierFromProto(e.block_removed().tier());
      return true;
    case v1::Event::kBlockMoved:
      out->kind = Event::Kind::kBlockMoved;
      out->block_hashes.assign(e.block_moved().block_hashes().begin(),
                               e.block_moved().block_hashes().end());
      out->tier = TierFromProto(e.block_moved().to_tier());
      out->from_tier = TierFromProto(e.block_moved().from_tier());
      return true;
    case v1::Event::kNamespaceCleared:
      out->kind = Event::Kind::kNamespaceCleared;
      out->tier = TierFromProto(e.namespace_cleared().tier());
      out->count = e.namespace_cleared().removed_blocks();
      return true;
    case v1::Event::kEventsLost: {
      out->kind = Event::Kind::kEventsLost;
      const v1::EventsLost& lost = e.events_lost();
      out->count = lost.first_sequence() > 0 && lost.last_sequence() >= lost.first_sequence()
                       ? lost.last_sequence() - lost.first_sequence() + 1
                       : 0;
      return true;
    }
    case v1::Event::kSnapshotComplete:
      out->kind = Event::Kind::kSnapshotComplete;
      out->count = e.snapshot_complete().blocks();
      return true;
    default:
      return false;
  }
}

absl::Status ValidateEngineOptions(const EngineOptions& options) {
  if (options.model.empty()) {
    return absl::InvalidArgumentError("EngineOptions.model is required (1 to 256 bytes)");
  }
  if (!options.layout.has_value()) {
    return absl::InvalidArgumentError("EngineOptions.layout is required");
  }
  if (options.pools.empty()) {
    return absl::InvalidArgumentError(
        "EngineOptions.pools is required: one PoolRegistration per pool of the layout");
  }
  for (size_t i = 0; i < options.pools.size(); ++i) {
    const PoolRegistration& pool = options.pools[i];
    if (pool.shared_memory.has_value() == pool.cuda_ipc.has_value()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "EngineOptions.pools[%d] ('%s'): exactly one of shared_memory and cuda_ipc must be set "
          "(%s are)",
          i, pool.name, pool.shared_memory.has_value() ? "both" : "neither"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::RegisterEngineRequest> RegisterRequest(const EngineOptions& options) {
  v1::RegisterEngineRequest req;
  req.set_engine_name(options.engine_name);
  req.set_tenant(options.tenant);
  req.set_model(options.model);
  req.set_partition(options.partition);
  const codec::PageLayout& layout = options.layout->internal();
  proto::LayoutToProto(layout, req.mutable_layout());
  if (!options.codec.empty()) {
    absl::StatusOr<codec::CodecSpec> spec = codec::CodecSpec::Parse(options.codec);
    if (!spec.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("EngineOptions.codec '", options.codec, "': ", spec.status().message()));
    }
    if (options.codec_alignment_bytes != 0) spec->alignment_bytes = options.codec_alignment_bytes;
    proto::CodecToProto(*spec, req.mutable_codec());
  } else if (options.codec_alignment_bytes != 0) {
    req.mutable_codec()->set_alignment_bytes(options.codec_alignment_bytes);  // default codec
  }
  for (const PoolRegistration& pool : options.pools) {
    v1::PoolRegistration* out = req.add_pools();
    out->set_name(pool.name);
    out->set_slots(pool.slots);
    uint64_t slot_bytes = 0;
    for (const codec::PoolSpec& spec : layout.pools) {
      if (spec.name == pool.name) slot_bytes = spec.slot_bytes;
    }
    if (pool.shared_memory.has_value()) {
      const PoolRegistration::SharedMemory& shm = *pool.shared_memory;
      v1::SharedMemoryFile* file = out->mutable_shared_memory();
      if (!shm.path.empty()) {
        file->set_path(shm.path);
      } else if (!shm.shm_name.empty()) {
        file->set_shm_name(shm.shm_name);
      }
      file->set_offset_bytes(shm.offset_bytes);
      file->set_size_bytes(shm.size_bytes != 0 ? shm.size_bytes : slot_bytes * pool.slots);
    } else {
      const PoolRegistration::CudaIpc& ipc = *pool.cuda_ipc;
      v1::CudaIpcMemory* mem = out->mutable_cuda_ipc();
      mem->set_handle(ipc.handle);
      mem->set_device_uuid(ipc.device_uuid);
      mem->set_device_ordinal(ipc.device_ordinal);
      mem->set_base_offset_bytes(ipc.base_offset_bytes);
      mem->set_size_bytes(ipc.size_bytes != 0 ? ipc.size_bytes : slot_bytes * pool.slots);
    }
  }
  if (options.lease_ttl > absl::ZeroDuration()) {
    DurationToProto(options.lease_ttl, req.mutable_lease_ttl());
  }
  return req;
}

}  // namespace kvtier::client_internal
