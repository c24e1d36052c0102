// KvTierService: registration, leases, lookups, offload and onboard over host pools.
#include "daemon/service/kvtier_service.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/coding.h"
#include "common/digest.h"
#include "common/logging.h"
#include "common/quote.h"
#include "common/status_macros.h"
#include "daemon/service/proto_convert.h"
#include "daemon/service/request_limits.h"
#include "kernels/device.h"
#include "kernels/gpu_block_codec.h"
#include "kvtier/v1/namespace.pb.h"

namespace kvtier::service {
namespace {

constexpr uint32_t kApiVersion = 1;
// The workers' flow of RegisterEngine calls (engine ids start with 'e'; admin work is "").
constexpr absl::string_view kRegistrationFlow = "registration";

}  // namespace

// ---- Namespaces ----

DerivedNamespace DeriveNamespace(const std::string& tenant, const std::string& model,
                                 const std::string& partition, uint64_t layout_fingerprint,
                                 const codec::CodecSpec& codec, const std::string& id_key,
                                 const std::string& root_secret) {
  std::string text = "kvtier-namespace-v1";
  for (const std::string* part : {&tenant, &model, &partition}) {
    PutFixed32(&text, static_cast<uint32_t>(part->size()));
    text.append(*part);
  }
  PutFixed64(&text, layout_fingerprint);
  text.append(codec.ToString());
  PutFixed32(&text, codec.alignment_bytes);
  DerivedNamespace out;
  // The id: keyed, so that nobody without the daemon's key can compute another tenant's id (and
  // register it first); 64 bits, and never below 2^32, where format-1 indexes kept their ids.
  out.id = DecodeFixed64(HmacSha256(id_key, text).data());
  if (out.id < (uint64_t{1} << 32)) out.id |= uint64_t{1} << 32;
  // The hash root keeps the derivation of the first version (the 32-bit id of a plain SHA-256),
  // so that the chains engines computed before keep naming the same blocks.
  out.legacy_id = DecodeFixed32(Sha256(text).data());
  if (out.legacy_id == 0) out.legacy_id = 1;
  out.hash_root = NamespaceHashRoot(out.legacy_id, root_secret);
  return out;
}

std::string NamespaceHashRoot(uint64_t legacy_id, const std::string& secret) {
  std::string root = "kvtier-hash-root-v1";
  PutFixed64(&root, legacy_id);
  root.append(secret);  // authentication on: roots cannot be computed without the tenant's tokens
  const Sha256Digest digest = Sha256(root);
  return std::string(digest.begin(), digest.end());
}

std::string ClusterNamespaceOf(const std::string& tenant, const std::string& key) {
  const Sha256Digest mac = HmacSha256(key, absl::StrCat("kvtier-cluster-namespace-v1", tenant));
  return absl::StrCat("t-", LowerHex(absl::MakeConstSpan(mac.data(), 16)));
}

std::string KeyFingerprint(const std::string& key) {
  const Sha256Digest mac = HmacSha256(key, "kvtier-fleet-key-fingerprint-v1");
  return LowerHex(absl::MakeConstSpan(mac.data(), 8));
}

absl::StatusOr<DerivedNamespace> DeriveNamespace(const v1::Namespace& ns, const std::string& key,
                                                 bool authentication) {
  KVTIER_ASSIGN_OR_RETURN(codec::CodecSpec spec, CodecFromProto(ns.codec(), codec::CodecSpec()));
  return DeriveNamespace(ns.tenant(), ns.model(), ns.partition(), ns.layout_fingerprint(), spec,
                         key, authentication ? key + ns.tenant() : "");
}

// ---- Service ----

KvTierService::KvTierService(store::BlockStore* store, ServiceOptions options, ServiceState* state)
    : store_(store),
      options_(std::move(options)),
      started_(absl::Now()),
      host_plane_(dataplane::MakeHostDataPlane(store, &totals_)),
      gpu_plane_(dataplane::MakeGpuDataPlane(store, &totals_)),
      state_(state) {
  std::random_device rd;
  do {
    incarnation_ = (uint64_t{rd()} << 32) | rd();
  } while (incarnation_ == 0);
  if (options_.events != nullptr) incarnation_ = options_.events->incarnation();
  for (const std::string& path : options_.forbidden_pool_files) {
    struct stat st;
    if (stat(path.c_str(), &st) == 0) forbidden_.emplace_back(st.st_dev, st.st_ino);
  }
  if (options_.node_name.empty()) {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    options_.node_name = host;
  }
  lease_thread_ = std::thread([this] { LeaseLoop(); });
}

KvTierService::~KvTierService() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  lease_thread_.join();
  std::vector<std::pair<std::thread, std::shared_ptr<std::atomic<bool>>>> waiters;
  {
    absl::MutexLock lock(&mu_);
    waiters.swap(waiters_);
  }
  for (auto& w : waiters) w.first.join();  // their engines' work finishes on the workers
  state_->dispatcher().Stop();             // no work of this service runs after it
}

size_t KvTierService::engine_count() const { return state_->registry().size(); }

absl::StatusOr<EngineRef> KvTierService::EnterFor(grpc::CallbackServerContext* ctx,
                                                  const std::string& engine_id) {
  absl::StatusOr<std::string> caller = Caller(ctx);
  if (!caller.ok()) return caller.status();
  return state_->registry().EnterChecked(engine_id, options_.auth != nullptr ? &*caller : nullptr);
}

grpc::ServerUnaryReactor* KvTierService::WithEngine(
    grpc::CallbackServerContext* ctx, const std::string& engine_id,
    absl::FunctionRef<absl::Status(const Engine&)> work) {
  absl::Status st;
  {
    absl::StatusOr<EngineRef> engine = EnterFor(ctx, engine_id);
    st = engine.ok() ? work(**engine) : engine.status();
  }  // left before the call finishes
  return FinishWith(ctx, st);
}

grpc::ServerUnaryReactor* KvTierService::OnEngineWorker(
    grpc::CallbackServerContext* ctx, const std::string& engine_id,
    std::function<absl::Status(const Engine&)> work) {
  return OnEngineTurns(
      ctx, engine_id,
      [work = std::move(work)](const Engine& engine) -> std::optional<absl::Status> {
        return work(engine);
      });
}

grpc::ServerUnaryReactor* KvTierService::OnEngineTurns(
    grpc::CallbackServerContext* ctx, const std::string& engine_id,
    std::function<std::optional<absl::Status>(const Engine&)> turn) {
  absl::StatusOr<EngineRef> entered = EnterFor(ctx, engine_id);
  if (!entered.ok()) return FinishWith(ctx, entered.status());
  const std::string flow = (*entered)->id;
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  // The ref lives in the work: RunTurnsOnWorker destroys it after the last turn, or without a
  // turn when the call is skipped, and the engine is left then.
  state_->dispatcher().RunTurnsOnWorker(
      ctx, reactor, flow,
      [engine = std::move(*entered), turn = std::move(turn)] { return turn(*engine); });
  return reactor;
}

std::pair<uint32_t, uint32_t> KvTierService::Remove(const std::string& engine_id, const char* why,
                                                    bool only_if_expired) {
  std::shared_ptr<Engine> engine = state_->registry().Take(engine_id, only_if_expired);
  if (engine == nullptr) return {0, 0};
  const uint32_t released = state_->parks().ReleaseEngine(engine_id);
  const uint32_t pins = state_->pins().DropEngine(engine_id);
  KVTIER_LOG(kInfo, "engine ", engine->id, " (", engine->name, ") unregistered: ", why,
             released > 0 ? absl::StrCat("; released ", released, " parked requests") : "",
             pins > 0 ? absl::StrCat("; released ", pins, " pins") : "");
  return {released, pins};
}

void KvTierService::LeaseLoop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&stop_), options_.lease_check_interval)) return;
    }
    for (const std::string& id : state_->registry().Expired(absl::Now())) {
      Remove(id, "lease expired", /*only_if_expired=*/true);
    }
    state_->parks().ReleaseExpired(absl::Now());
    state_->pins().DropExpired(absl::Now());
  }
}

grpc::ServerUnaryReactor* KvTierService::Hello(grpc::CallbackServerContext* ctx,
                                               const v1::HelloRequest* req,
                                               v1::HelloResponse* resp) {
  if (absl::Status st = CheckLength("client_name", req->client_name(), 0, kMaxClientNameBytes);
      !st.ok()) {
    return FinishWith(ctx, st);
  }
  const uint32_t min = req->min_api_version() == 0 ? 1 : req->min_api_version();
  const uint32_t max = req->max_api_version() == 0 ? min : req->max_api_version();
  if (max < min) {
    return FinishWith(ctx, absl::InvalidArgumentError(absl::StrFormat(
                               "max_api_version %d is below min_api_version %d", max, min)));
  }
  if (min > kApiVersion || max < kApiVersion) {
    return FinishWith(ctx, absl::FailedPreconditionError(absl::StrFormat(
                               "the client speaks API versions %d..%d, this server only %d", min,
                               max, kApiVersion)));
  }
  resp->set_api_version(kApiVersion);
  resp->set_server_min_api_version(kApiVersion);
  resp->set_server_max_api_version(kApiVersion);
  resp->set_server_version(options_.version);
  resp->set_incarnation_id(incarnation_);
  SetTime(started_, resp->mutable_started_at());
  resp->set_node_name(options_.node_name);
  v1::ServerCapabilities* caps = resp->mutable_capabilities();
  const store::StoreStats stats = store_->Stats();
  if (stats.tiers[0].capacity_bytes > 0) caps->add_tiers(v1::TIER_GPU);
  caps->add_tiers(v1::TIER_HOST);
  if (stats.tiers[2].capacity_bytes > 0) caps->add_tiers(v1::TIER_DISK);
  if (options_.shared_tier != nullptr) caps->add_tiers(v1::TIER_CLUSTER);
  caps->add_codecs(v1::CODEC_RAW);
  caps->add_codecs(v1::CODEC_NVFP4);
  caps->add_codecs(v1::CODEC_NVFP4X2);
  caps->add_block_format_versions(1);
  auto devices = kernels::ListDevices();
  caps->set_cuda(devices.ok() && !devices->empty());
  caps->set_cuda_ipc_pools(caps->cuda() && store_->HostTierDeviceAccessible());
  caps->set_shared_memory_pools(true);
  caps->set_authentication(options_.auth != nullptr);
  v1::ServerLimits* limits = resp->mutable_limits();
  limits->set_max_items_per_request(options_.max_items_per_request);
  limits->set_max_request_bytes(options_.max_request_bytes);
  limits->set_max_hash_bytes(32);
  limits->set_max_pools_per_engine(codec::kMaxPools);
  limits->set_max_buffers_per_layout(codec::kMaxBuffers);
  limits->set_max_engines(options_.max_engines);
  SetDuration(options_.min_lease, limits->mutable_min_lease_ttl());
  SetDuration(options_.max_lease, limits->mutable_max_lease_ttl());
  SetDuration(options_.max_park_ttl, limits->mutable_max_park_ttl());
  SetDuration(options_.max_pin_ttl, limits->mutable_max_pin_ttl());
  limits->set_max_park_user_data_bytes(options_.max_park_user_data_bytes);
  resp->set_draining(state_->dispatcher().draining());
  return FinishWith(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* KvTierService::RegisterEngine(grpc::CallbackServerContext* ctx,
                                                        const v1::RegisterEngineRequest* req,
                                                        v1::RegisterEngineResponse* resp) {
  if (state_->dispatcher().draining())
    return FinishWith(ctx, absl::UnavailableError("the daemon is draining"));
  for (absl::Status st : {CheckLength("engine_name", req->engine_name(), 0, kMaxEngineNameBytes),
                          CheckLength("tenant", req->tenant(), 0, kMaxTenantBytes),
                          CheckLength("model", req->model(), 1, kMaxModelBytes),
                          CheckLength("partition", req->partition(), 0, kMaxPartitionBytes)}) {
    if (!st.ok()) return FinishWith(ctx, st);
  }
  // Authenticated before any pool is opened: an unknown caller learns nothing about files.
  absl::StatusOr<std::string> caller = Caller(ctx);
  if (!caller.ok()) return FinishWith(ctx, caller.status());
  if (options_.auth != nullptr && !req->tenant().empty() && req->tenant() != *caller) {
    return FinishWith(ctx, absl::PermissionDeniedError(
                               absl::StrFormat("the token authenticates tenant %s, not %s",
                                               Quoted(*caller), Quoted(req->tenant()))));
  }
  // Opening pools (files, CUDA IPC) and writing the namespace record (the index) may block: on a
  // worker, in the registrations' own flow.
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  state_->dispatcher().RunOnWorker(
      ctx, reactor,
      [this, req, resp, caller = *std::move(caller), peer = ctx->peer()] {
        // Checked again on the worker: a Drain that began meanwhile waits for this request.
        if (state_->dispatcher().draining())
          return absl::UnavailableError("the daemon is draining");
        return DoRegister(*req, caller, peer, resp);
      },
      kRegistrationFlow);
  return reactor;
}

absl::Status KvTierService::DoRegister(const v1::RegisterEngineRequest& request,
                                       const std::string& caller, const std::string& peer,
                                       v1::RegisterEngineResponse* resp) {
  const v1::RegisterEngineRequest* req = &request;
  if (!req->has_layout()) return absl::InvalidArgumentError("layout is required");
  auto engine = std::make_shared<Engine>();
  absl::StatusOr<codec::PageLayout> layout = LayoutFromProto(req->layout());
  if (!layout.ok()) return layout.status();
  engine->layout = std::move(*layout);
  absl::StatusOr<codec::CodecSpec> spec = CodecFromProto(req->codec(), options_.default_codec);
  if (!spec.ok()) return spec.status();
  absl::StatusOr<std::unique_ptr<codec::Codec>> codec = codec::Codec::Create(engine->layout, *spec);
  if (!codec.ok()) return codec.status();
  engine->codec = std::move(*codec);
  // Every layout pool exactly once.
  engine->pools.resize(engine->layout.pools.size());
  if (req->pools_size() != static_cast<int>(engine->layout.pools.size())) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%d pools registered for a layout of %d pools", req->pools_size(),
                        engine->layout.pools.size()));
  }
  engine->slots = UINT32_MAX;
  for (const v1::PoolRegistration& reg : req->pools()) {
    size_t index = 0;
    while (index < engine->layout.pools.size() && engine->layout.pools[index].name != reg.name()) {
      ++index;
    }
    if (index == engine->layout.pools.size()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("pool %s is not a pool of the layout", Quoted(reg.name())));
    }
    if (engine->pools[index] != nullptr) {
      return absl::InvalidArgumentError(
          absl::StrFormat("pool %s is registered twice", Quoted(reg.name())));
    }
    if (reg.has_cuda_ipc()) {
      if (engine->layout.pools.size() != 1) {
        return absl::UnimplementedError(
            absl::StrFormat("pool '%s': GPU engines register one pool (a flat layout); this "
                            "layout has %d",
                            reg.name(), engine->layout.pools.size()));
      }
      if (!kernels::BuiltWithCuda()) {
        return absl::UnimplementedError(
            absl::StrFormat("pool '%s': this kvtierd was built without CUDA and serves host "
                            "pools (shared_memory) only",
                            reg.name()));
      }
      if (!store_->HostTierDeviceAccessible()) {
        return absl::FailedPreconditionError(
            absl::StrFormat("pool '%s': GPU pools need the host tier pinned with CUDA (host.pin "
                            "auto or cuda on a machine with a GPU)",
                            reg.name()));
      }
      absl::StatusOr<std::unique_ptr<dataplane::DevicePool>> pool =
          dataplane::DevicePool::Open(reg.name(), CudaIpcMemoryFromProto(reg.cuda_ipc()),
                                      reg.slots(), engine->layout.pools[index].slot_bytes);
      if (!pool.ok()) return pool.status();
      absl::StatusOr<std::unique_ptr<kernels::GpuBlockCodec>> gpu =
          kernels::GpuBlockCodec::Create(engine->codec->plan(), (*pool)->device());
      if (!gpu.ok()) return gpu.status();
      engine->device_pool = std::move(*pool);
      engine->gpu = std::move(*gpu);
      engine->slots = std::min(engine->slots, reg.slots());
      engine->pools[index] = nullptr;
      continue;
    }
    if (!reg.has_shared_memory()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("pool '%s': memory (cuda_ipc or shared_memory) is required", reg.name()));
    }
    // With authentication on, a tenant's pools live in its own subdirectory.
    absl::StatusOr<std::unique_ptr<dataplane::HostPool>> pool = dataplane::HostPool::Map(
        reg.name(), SharedMemoryFileFromProto(reg.shared_memory()), reg.slots(),
        engine->layout.pools[index].slot_bytes, options_.pool_dirs,
        options_.auth != nullptr ? caller : "", forbidden_);
    if (!pool.ok()) return pool.status();
    engine->pools[index] = std::move(*pool);
    engine->slots = std::min(engine->slots, reg.slots());
  }
  const std::string tenant =
      options_.auth != nullptr ? caller : (req->tenant().empty() ? "default" : req->tenant());
  const uint64_t fingerprint = codec::LayoutFingerprint(engine->layout);
  const DerivedNamespace ns = DeriveNamespace(
      tenant, req->model(), req->partition(), fingerprint, *spec, options_.hash_root_key,
      options_.auth != nullptr ? options_.hash_root_key + tenant : "");
  engine->tenant = tenant;
  engine->ns = ns.id;
  v1::Namespace* ns_proto = resp->mutable_ns();
  ns_proto->set_tenant(tenant);
  ns_proto->set_model(req->model());
  ns_proto->set_partition(req->partition());
  ns_proto->set_layout_fingerprint(fingerprint);
  CodecToProto(*spec, ns_proto->mutable_codec());
  const std::string ns_record = ns_proto->SerializeAsString();
  for (const auto& [id, record] : store_->Namespaces()) {
    // Two different namespaces must never share blocks (64-bit keyed ids: never seen so far).
    if (id == ns.id && record.first != ns_record) {
      return absl::FailedPreconditionError(
          absl::StrFormat("namespace id %016x of (tenant %s, model %s, partition %s) is "
                          "already taken by another namespace; use another partition",
                          ns.id, Quoted(tenant), Quoted(req->model()), Quoted(req->partition())));
    }
  }
  if (absl::Status st = store_->PutNamespace(ns.id, ns_record, 0); !st.ok()) {
    return st;
  }
  absl::Duration lease =
      req->has_lease_ttl() ? DurationFromProto(req->lease_ttl()) : options_.default_lease;
  lease = std::clamp(lease, options_.min_lease, options_.max_lease);
  engine->lease = lease;
  engine->hot_page_bytes = engine->layout.HotBytes();
  engine->plane = engine->gpu != nullptr ? gpu_plane_.get() : host_plane_.get();
  if (engine->device_pool != nullptr &&
      store_->GpuTierDevice() == std::optional<int>(engine->device_pool->device())) {
    // The store's GPU tier is on this engine's device: its offloads are acknowledged once their
    // pages are copied there (docs/ARCHITECTURE.md, "GPU tier"); a codec the fused kernels
    // cannot encode from the tier (raw) keeps the direct path.
    absl::Status hot = dataplane::UseGpuTier(*store_, *spec, *engine);
    if (!hot.ok()) {
      KVTIER_LOG(kInfo, "engine pages of namespace ", absl::StrFormat("%016x", ns.id),
                 " bypass the GPU tier: ", hot.message());
    }
  }
  engine->registered = absl::Now();
  engine->peer = peer;
  engine->pid = options_.peers != nullptr ? options_.peers->PidOf(engine->peer) : 0;
  engine->id = absl::StrFormat("e%016x-%d", incarnation_, next_engine_++);
  engine->name = req->engine_name().empty() ? engine->id : req->engine_name();
  if (absl::Status st = state_->registry().Add(engine); !st.ok()) return st;
  KVTIER_LOG(kInfo, "engine ", engine->id, " (", engine->name, ") registered: tenant ", tenant,
             ", model ", req->model(), ", namespace ", absl::StrFormat("%016x", ns.id), ", ",
             engine->layout.buffers.size(), " buffers, ", engine->slots, " pages, codec ",
             spec->ToString());
  resp->set_engine_id(engine->id);
  resp->set_namespace_id(ns.id);
  resp->set_hash_root(ns.hash_root);
  SetDuration(lease, resp->mutable_lease_ttl());
  SetTime(state_->registry().ExpiresOf(*engine), resp->mutable_lease_expires_at());
  resp->set_hot_page_bytes(engine->hot_page_bytes);
  resp->set_cold_block_bytes(engine->codec->block_bytes());
  resp->set_incarnation_id(incarnation_);
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* KvTierService::Unregister(grpc::CallbackServerContext* ctx,
                                                    const v1::UnregisterRequest* req,
                                                    v1::UnregisterResponse* resp) {
  if (absl::StatusOr<EngineRef> engine = EnterFor(ctx, req->engine_id()); !engine.ok()) {
    return FinishWith(ctx, engine.status());
  }  // and left: Remove waits for the engine's requests
  // Waiting for the engine's in-flight requests may take a while: not on a gRPC thread.
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  state_->dispatcher().AddInFlight();  // a drain waits for it
  absl::MutexLock lock(&mu_);
  for (auto it = waiters_.begin(); it != waiters_.end();) {  // join the finished ones
    if (it->second->load()) {
      it->first.join();
      it = waiters_.erase(it);
    } else {
      ++it;
    }
  }
  auto done = std::make_shared<std::atomic<bool>>(false);
  std::thread waiter([this, reactor, resp, done, id = req->engine_id()] {
    const auto [parked, pins] = Remove(id, "unregistered by the client");
    resp->set_released_parked_requests(parked);
    resp->set_released_pins(pins);
    state_->dispatcher().DoneInFlight();  // before the client hears (Dispatcher's order)
    reactor->Finish(grpc::Status::OK);
    done->store(true);
  });
  waiters_.emplace_back(std::move(waiter), std::move(done));
  return reactor;
}

grpc::ServerUnaryReactor* KvTierService::KeepAlive(grpc::CallbackServerContext* ctx,
                                                   const v1::KeepAliveRequest* req,
                                                   v1::KeepAliveResponse* resp) {
  return WithEngine(ctx, req->engine_id(), [&](const Engine& engine) {
    SetTime(state_->registry().ExpiresOf(engine), resp->mutable_lease_expires_at());
    SetDuration(engine.lease, resp->mutable_lease_ttl());
    resp->set_draining(state_->dispatcher().draining());
    resp->set_incarnation_id(incarnation_);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* KvTierService::Lookup(grpc::CallbackServerContext* ctx,
                                                const v1::LookupRequest* req,
                                                v1::LookupResponse* resp) {
  if (req->block_hashes_size() > static_cast<int>(options_.max_items_per_request)) {
    return FinishWith(ctx, absl::InvalidArgumentError(absl::StrFormat(
                               "%d block hashes (at most %d per request)", req->block_hashes_size(),
                               options_.max_items_per_request)));
  }
  if (req->has_pin_ttl() && req->scope_case() != v1::LookupRequest::kEngineId) {
    return FinishWith(ctx, absl::InvalidArgumentError("pin_ttl needs the engine_id scope"));
  }
  store::NamespaceId ns = 0;
  EngineRef lookup_engine;
  if (req->scope_case() == v1::LookupRequest::kEngineId) {
    absl::StatusOr<EngineRef> engine = EnterFor(ctx, req->engine_id());
    if (!engine.ok()) return FinishWith(ctx, engine.status());
    lookup_engine = std::move(*engine);  // left after pinning, so Remove's DropPins sees the pins
    ns = lookup_engine->ns;
  } else if (req->scope_case() == v1::LookupRequest::kNamespaceId) {
    ns = req->namespace_id();
    absl::StatusOr<std::string> caller = Caller(ctx);
    if (!caller.ok()) return FinishWith(ctx, caller.status());
    bool known = false, allowed = options_.auth == nullptr;
    for (const auto& [id, record] : store_->Namespaces()) {
      if (id != ns) continue;
      known = true;
      v1::Namespace described;
      allowed =
          allowed || (described.ParseFromString(record.first) && described.tenant() == *caller);
    }
    if (!known || !allowed) {  // another tenant's namespace looks unknown
      return FinishWith(ctx,
                        absl::NotFoundError(absl::StrFormat("namespace %016x is unknown", ns)));
    }
  } else {
    return FinishWith(ctx, absl::InvalidArgumentError("engine_id or namespace_id is required"));
  }
  std::vector<index::BlockHash> chain;
  chain.reserve(req->block_hashes_size());
  for (int i = 0; i < req->block_hashes_size(); ++i) {
    absl::StatusOr<index::BlockHash> hash = HashFromProto(req->block_hashes(i));
    if (!hash.ok()) {
      lookup_engine.reset();
      return FinishWith(ctx, absl::InvalidArgumentError(
                                 absl::StrCat("block_hashes[", i, "]: ", hash.status().message())));
    }
    chain.push_back(*hash);
  }
  std::vector<index::Tier> tiers;
  const size_t hits = store_->LookupChain(ns, chain, &tiers);
  resp->set_hit_pages(static_cast<uint32_t>(hits));
  for (index::Tier t : tiers) resp->add_tiers(TierToProto(t));
  if (req->has_pin_ttl() && hits > 0) {
    std::vector<index::BlockHash> local(chain.begin(), chain.begin() + hits);
    std::vector<dataplane::ItemResult>
        results;  // the pins taken are in the store; misses are not reported
    const absl::Time expires =
        state_->pins().Pin(*lookup_engine, local, DurationFromProto(req->pin_ttl()), &results);
    SetTime(expires, resp->mutable_pin_expires_at());
  }
  if (options_.shared_tier == nullptr || hits == chain.size()) {
    lookup_engine.reset();
    return FinishWith(ctx, absl::OkStatus());
  }
  // The missing tail from the cluster tier: a wait on the network, so on a worker (in the
  // engine's flow when there is one), bounded by the call's deadline and the tier's own.
  const absl::Time deadline = DeadlineOf(ctx);
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  const std::string flow = lookup_engine ? lookup_engine->id : "";
  state_->dispatcher().RunOnWorker(
      ctx, reactor,
      [this, resp, ns, hits, deadline, chain = std::move(chain),
       engine = std::move(lookup_engine)]() mutable {
        const size_t remote = options_.shared_tier->LookupTail(
            ns, absl::MakeConstSpan(chain).subspan(hits), deadline);
        resp->set_hit_pages(static_cast<uint32_t>(hits + remote));
        for (size_t i = 0; i < remote; ++i) resp->add_tiers(v1::TIER_CLUSTER);
        engine.reset();
        return absl::OkStatus();
      },
      flow);
  return reactor;
}

absl::Status KvTierService::RecordOffloadTokens(const Engine& engine,
                                                const v1::OffloadRequest& req) const {
  const uint32_t per_page = engine.layout.tokens_per_page;
  for (int i = 0; i < req.items_size(); ++i) {
    if (static_cast<uint32_t>(req.items(i).token_ids_size()) > per_page) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "items[%d]: %d token ids, more than the %d tokens of a page of engine '%s' "
          "(its layout's tokens_per_page)",
          i, req.items(i).token_ids_size(), per_page, engine.name));
    }
  }
  if (options_.tokens == nullptr) return absl::OkStatus();
  options_.tokens->SetBlockSize(engine.ns, per_page);
  // The tokens are copied from the request into the table's ring, under its lock.
  std::vector<TokenTable::Block> blocks;
  blocks.reserve(req.items_size());
  for (int i = 0; i < req.items_size(); ++i) {
    const v1::OffloadItem& item = req.items(i);
    if (item.token_ids().empty()) continue;
    absl::StatusOr<index::BlockHash> hash = HashFromProto(item.block_hash());
    if (!hash.ok()) continue;  // the item fails in its turn
    blocks.push_back({*hash, absl::MakeConstSpan(item.token_ids().data(),
                                                 static_cast<size_t>(item.token_ids_size()))});
  }
  if (!blocks.empty()) options_.tokens->PutMany(engine.ns, per_page, blocks);
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* KvTierService::Offload(grpc::CallbackServerContext* ctx,
                                                 const v1::OffloadRequest* req,
                                                 v1::OffloadResponse* resp) {
  if (state_->dispatcher().draining())
    return FinishWith(ctx, absl::UnavailableError("the daemon is draining"));
  if (req->items_size() > static_cast<int>(options_.max_items_per_request)) {
    return FinishWith(ctx, absl::InvalidArgumentError(
                               absl::StrFormat("%d items (at most %d per request)",
                                               req->items_size(), options_.max_items_per_request)));
  }
  if (absl::Status st = CheckWriteOptions(req->priority(), req->ack()); !st.ok()) {
    return FinishWith(ctx, st);
  }
  // The request as the data plane's batch, and its result, kept across the turns.
  struct Work {
    dataplane::OffloadBatch batch;
    dataplane::OffloadResult result;
    dataplane::ItemProgress progress;
  };
  auto work = std::make_shared<Work>();
  work->batch = OffloadBatchFromProto(*req);
  return OnEngineTurns(
      ctx, req->engine_id(),
      [this, req, resp, work](const Engine& engine) -> std::optional<absl::Status> {
        // Checked again on the worker (its first turn): a Drain that began after
        // the RPC arrived waits for this request (it is counted in flight), which
        // then writes nothing.
        if (work->progress.next == 0 && state_->dispatcher().draining())
          return absl::UnavailableError("the daemon is draining");
        if (work->progress.next == 0) {
          if (absl::Status st = RecordOffloadTokens(engine, *req); !st.ok()) return st;
        }
        engine.plane->Offload(engine, work->batch, &work->result, &work->progress,
                              ChunkEnd(work->progress.next));
        if (work->progress.next < static_cast<int>(work->batch.items.size())) return std::nullopt;
        OffloadResultToProto(work->result, resp);
        return absl::OkStatus();
      });
}

void KvTierService::FetchFromSharedTier(const Engine& engine, const dataplane::OnboardBatch& batch,
                                        absl::Time deadline) {
  if (options_.shared_tier == nullptr) return;
  std::vector<index::BlockHash> hashes;
  hashes.reserve(batch.items.size());
  for (const dataplane::PageItem& item : batch.items) {
    if (item.hash.ok()) hashes.push_back(*item.hash);
  }
  options_.shared_tier->Fetch(engine.ns, hashes, engine.codec->block_bytes(), deadline);
}

grpc::ServerUnaryReactor* KvTierService::Onboard(grpc::CallbackServerContext* ctx,
                                                 const v1::OnboardRequest* req,
                                                 v1::OnboardResponse* resp) {
  if (req->items_size() > static_cast<int>(options_.max_items_per_request)) {
    return FinishWith(ctx, absl::InvalidArgumentError(
                               absl::StrFormat("%d items (at most %d per request)",
                                               req->items_size(), options_.max_items_per_request)));
  }
  struct Work {  // as Offload's
    dataplane::OnboardBatch batch;
    dataplane::OnboardResult result;
    dataplane::ItemProgress progress;
  };
  auto work = std::make_shared<Work>();
  work->batch = OnboardBatchFromProto(*req);
  const absl::Time deadline = DeadlineOf(ctx);
  return OnEngineTurns(
      ctx, req->engine_id(),
      [this, resp, work, deadline](const Engine& engine) -> std::optional<absl::Status> {
        if (work->progress.next == 0) FetchFromSharedTier(engine, work->batch, deadline);
        engine.plane->Onboard(engine, work->batch, &work->result, &work->progress,
                              ChunkEnd(work->progress.next));
        if (work->progress.next < static_cast<int>(work->batch.items.size())) return std::nullopt;
        OnboardResultToProto(work->result, resp);
        return absl::OkStatus();
      });
}

}  // namespace kvtier::service
