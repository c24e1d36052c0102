// kvtier (Python): the Client (kvtier/client.h), its result types and the event stream.
// Synchronous calls convert their arguments, release the GIL for the RPC, and convert the result
// back. The *_async calls return a concurrent.futures.Future that the library's callback thread
// completes after taking the GIL; the Future is created running, so it cannot be cancelled. The
// Python Client holds the C++ Client through a shared_ptr that each call copies, and every last
// release of it (close(), garbage collection, the end of a call racing close()) happens with the
// GIL released, because destroying a Client waits for callbacks that need the GIL.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/python/bindings.h"
#include "kvtier/client.h"
#include "kvtier/layout.h"
#include "kvtier/pools.h"
#include "kvtier/types.h"

namespace py = pybind11;

namespace kvtier::python {
namespace {

double Seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }
double UnixSeconds(absl::Time t) { return absl::ToDoubleSeconds(t - absl::UnixEpoch()); }
py::object OptionalUnixSeconds(const std::optional<absl::Time>& t) {
  if (!t) return py::none();
  return py::float_(UnixSeconds(*t));
}
absl::Duration FromSeconds(double s) { return s > 0 ? absl::Seconds(s) : absl::ZeroDuration(); }

std::vector<std::string> HashList(const py::sequence& hashes) {
  std::vector<std::string> out;
  out.reserve(hashes.size());
  for (py::handle h : hashes) {
    if (!py::isinstance<py::bytes>(h)) throw py::type_error("block hashes must be bytes");
    out.push_back(h.cast<std::string>());
  }
  return out;
}

std::vector<PageRef> PageList(const py::sequence& hashes, const std::vector<uint32_t>& indices) {
  if (hashes.size() != indices.size()) {
    ThrowIfError(absl::InvalidArgumentError(
        absl::StrCat(hashes.size(), " hashes but ", indices.size(), " page indices")));
  }
  std::vector<std::string> h = HashList(hashes);
  std::vector<PageRef> pages(h.size());
  for (size_t i = 0; i < h.size(); ++i) {
    pages[i].block_hash = std::move(h[i]);
    pages[i].page_index = indices[i];
  }
  return pages;
}

// An Engine or its id.
std::string EngineId(const py::handle& engine) {
  if (py::isinstance<Engine>(engine)) return engine.cast<const Engine&>().engine_id;
  return engine.cast<std::string>();
}

// A SharedMemoryPool, DevicePool or PoolRegistration.
PoolRegistration ToRegistration(const py::handle& pool) {
  if (py::isinstance<SharedMemoryPool>(pool)) {
    return pool.cast<const SharedMemoryPool&>().Registration();
  }
  if (py::isinstance<DevicePool>(pool)) return pool.cast<const DevicePool&>().Registration();
  return pool.cast<PoolRegistration>();
}

ParkOptions MakeParkOptions(bool append, uint64_t num_tokens, const py::bytes& user_data,
                            double ttl, Priority priority, WriteAck ack) {
  ParkOptions o;
  o.append = append;
  o.num_tokens = num_tokens;
  o.user_data = std::string(user_data);
  o.ttl = FromSeconds(ttl);
  o.priority = priority;
  o.ack = ack;
  return o;
}

// A Future in the running state (so that it cannot be cancelled) and the callback that completes
// it from the library's thread.
template <typename T>
std::pair<py::object, Callback<T>> MakeFuture() {
  py::object future = py::module_::import("concurrent.futures").attr("Future")();
  future.attr("set_running_or_notify_cancel")();
  SharedObject shared = Share(future);
  Callback<T> done = [shared](absl::StatusOr<T> result) {
    py::gil_scoped_acquire gil;
    try {
      if (result.ok()) {
        shared->attr("set_result")(py::cast(*std::move(result)));
      } else {
        shared->attr("set_exception")(MakeError(result.status()));
      }
    } catch (py::error_already_set& e) {
      e.discard_as_unraisable("kvtier: completing a Future");
    } catch (const std::exception& e) {  // e.g. a cast error: never let it reach gRPC's thread
      PyErr_SetString(PyExc_RuntimeError, e.what());
      PyErr_WriteUnraisable(nullptr);
    }
  };
  return {future, std::move(done)};
}

class PyEventWatch {
 public:
  explicit PyEventWatch(std::unique_ptr<EventWatch> watch) : watch_(std::move(watch)) {}
  ~PyEventWatch() { Cancel(); }
  // Cancels the stream and waits for its thread (which may be waiting for the GIL).
  void Cancel() {
    std::unique_ptr<EventWatch> watch = std::move(watch_);
    if (watch == nullptr) return;
    py::gil_scoped_release release;
    watch->Cancel();
    watch.reset();
  }

 private:
  std::unique_ptr<EventWatch> watch_;
};

class PyClient {
 public:
  explicit PyClient(std::unique_ptr<Client> client) : client_(std::move(client)) {}
  ~PyClient() { Close(); }

  void Close() {
    std::shared_ptr<Client> client = std::move(client_);
    if (client == nullptr) return;
    py::gil_scoped_release release;
    client.reset();
  }

  // Runs `call(Client&)` with the GIL released and returns its result (a StatusOr) unwrapped.
  template <typename Call>
  auto Blocking(Call&& call) {
    std::shared_ptr<Client> client = Get();
    std::optional<decltype(call(*client))> result;
    {
      py::gil_scoped_release release;
      result.emplace(call(*client));
      client.reset();
    }
    if constexpr (std::is_same_v<std::decay_t<decltype(*result)>, absl::Status>) {
      ThrowIfError(*result);
    } else {
      return ValueOrThrow(*std::move(result));
    }
  }

  // Starts `call(Client&, callback)` with the GIL released; returns the Future.
  template <typename T, typename Call>
  py::object Async(Call&& call) {
    auto [future, done] = MakeFuture<T>();
    std::shared_ptr<Client> client = Get();
    {
      py::gil_scoped_release release;
      call(*client, std::move(done));
      client.reset();
    }
    return future;
  }

  std::shared_ptr<Client> Get() const {
    if (client_ == nullptr) {
      ThrowIfError(absl::FailedPreconditionError("the kvtier.Client is closed"));
    }
    return client_;
  }

 private:
  std::shared_ptr<Client> client_;
};

std::string ServerInfoRepr(const ServerInfo& s) {
  return absl::StrCat("ServerInfo(server_version='", s.server_version,
                      "', api_version=", s.api_version, ", node_name='", s.node_name,
                      "', codecs=", s.codecs.size(), ", draining=", s.draining ? "True" : "False",
                      ")");
}

void BindEnumsAndResults(py::module_& m) {
  py::enum_<Tier>(m, "Tier")
      .value("unspecified", Tier::kUnspecified)
      .value("gpu", Tier::kGpu)
      .value("host", Tier::kHost)
      .value("disk", Tier::kDisk);
  py::enum_<ItemCode>(m, "ItemCode")
      .value("ok", ItemCode::kOk)
      .value("already_stored", ItemCode::kAlreadyStored)
      .value("not_found", ItemCode::kNotFound)
      .value("invalid_argument", ItemCode::kInvalidArgument)
      .value("resource_exhausted", ItemCode::kResourceExhausted)
      .value("not_admitted", ItemCode::kNotAdmitted)
      .value("data_loss", ItemCode::kDataLoss)
      .value("unavailable", ItemCode::kUnavailable)
      .value("skipped", ItemCode::kSkipped)
      .value("aborted", ItemCode::kAborted)
      .value("failed_precondition", ItemCode::kFailedPrecondition)
      .value("internal", ItemCode::kInternal);
  py::enum_<Priority>(m, "Priority")
      .value("default", Priority::kDefault)
      .value("low", Priority::kLow)
      .value("normal", Priority::kNormal)
      .value("high", Priority::kHigh);
  py::enum_<WriteAck>(m, "WriteAck")
      .value("default", WriteAck::kDefault)
      .value("pages_read", WriteAck::kPagesRead)
      .value("stored", WriteAck::kStored)
      .value("durable", WriteAck::kDurable);

  py::class_<ItemResult>(m, "ItemResult", "One item of a batched call.")
      .def_readonly("code", &ItemResult::code)
      .def_readonly("message", &ItemResult::message)
      .def_readonly("tier", &ItemResult::tier)
      .def_property_readonly("ok", &ItemResult::ok)
      .def("__repr__", [](const ItemResult& r) {
        return absl::StrCat(
            "ItemResult(", std::string(ItemCodeName(r.code)),
            r.message.empty() ? "" : absl::StrCat(", '", r.message, "'"),
            r.tier == Tier::kUnspecified ? "" : absl::StrCat(", ", std::string(TierName(r.tier))),
            ")");
      });

  py::class_<ServerInfo>(m, "ServerInfo", "What the daemon said in Hello.")
      .def_readonly("api_version", &ServerInfo::api_version)
      .def_readonly("server_version", &ServerInfo::server_version)
      .def_readonly("incarnation_id", &ServerInfo::incarnation_id)
      .def_readonly("node_name", &ServerInfo::node_name)
      .def_readonly("tiers", &ServerInfo::tiers)
      .def_readonly("codecs", &ServerInfo::codecs)
      .def_readonly("cuda", &ServerInfo::cuda)
      .def_readonly("cuda_ipc_pools", &ServerInfo::cuda_ipc_pools)
      .def_readonly("shared_memory_pools", &ServerInfo::shared_memory_pools)
      .def_readonly("persistent_host_tier", &ServerInfo::persistent_host_tier)
      .def_readonly("authentication", &ServerInfo::authentication)
      .def_readonly("draining", &ServerInfo::draining)
      .def_readonly("max_items_per_request", &ServerInfo::max_items_per_request)
      .def_readonly("features", &ServerInfo::features)
      .def("__repr__", &ServerInfoRepr);

  py::class_<Engine>(m, "Engine", "A registered engine (what register_engine returned).")
      .def_readonly("engine_id", &Engine::engine_id)
      .def_readonly("namespace_id", &Engine::namespace_id)
      .def_property_readonly("hash_root", [](const Engine& e) { return py::bytes(e.hash_root); })
      .def_readonly("codec", &Engine::codec)
      .def_readonly("hot_page_bytes", &Engine::hot_page_bytes)
      .def_readonly("cold_block_bytes", &Engine::cold_block_bytes)
      .def_property_readonly("lease_ttl", [](const Engine& e) { return Seconds(e.lease_ttl); })
      .def_readonly("incarnation_id", &Engine::incarnation_id)
      .def("__repr__", [](const Engine& e) {
        return absl::StrCat("Engine(engine_id='", e.engine_id, "', codec='", e.codec,
                            "', hot_page_bytes=", e.hot_page_bytes, ")");
      });

  py::class_<LookupResult>(m, "LookupResult")
      .def_readonly("hit_pages", &LookupResult::hit_pages)
      .def_readonly("tiers", &LookupResult::tiers)
      .def_property_readonly("pin_expires_at", [](const LookupResult& r) {
        return OptionalUnixSeconds(r.pin_expires_at);
      });
  py::class_<OffloadResult>(m, "OffloadResult")
      .def_readonly("results", &OffloadResult::results)
      .def_readonly("stored_pages", &OffloadResult::stored_pages)
      .def_readonly("hot_bytes_read", &OffloadResult::hot_bytes_read)
      .def_readonly("cold_bytes_written", &OffloadResult::cold_bytes_written);
  py::class_<OnboardResult>(m, "OnboardResult")
      .def_readonly("results", &OnboardResult::results)
      .def_readonly("onboarded_pages", &OnboardResult::onboarded_pages)
      .def_readonly("cold_bytes_read", &OnboardResult::cold_bytes_read)
      .def_readonly("hot_bytes_written", &OnboardResult::hot_bytes_written);
  py::class_<ParkResult>(m, "ParkResult")
      .def_readonly("parked_pages", &ParkResult::parked_pages)
      .def_readonly("cold_bytes", &ParkResult::cold_bytes)
      .def_property_readonly("expires_at",
                             [](const ParkResult& r) { return UnixSeconds(r.expires_at); })
      .def_readonly("tier", &ParkResult::tier);
  py::class_<ResumeResult>(m, "ResumeResult")
      .def_readonly("resumed_pages", &ResumeResult::resumed_pages)
      .def_readonly("parked_pages", &ResumeResult::parked_pages)
      .def_readonly("num_tokens", &ResumeResult::num_tokens)
      .def_property_readonly("user_data",
                             [](const ResumeResult& r) { return py::bytes(r.user_data); })
      .def_readonly("released", &ResumeResult::released);
  py::class_<ReleaseResult>(m, "ReleaseResult")
      .def_readonly("results", &ReleaseResult::results)
      .def_readonly("freed_bytes", &ReleaseResult::freed_bytes);
  py::class_<PinResult>(m, "PinResult")
      .def_readonly("results", &PinResult::results)
      .def_property_readonly("expires_at",
                             [](const PinResult& r) { return OptionalUnixSeconds(r.expires_at); });

  py::class_<TierStats>(m, "TierStats")
      .def_readonly("tier", &TierStats::tier)
      .def_readonly("capacity_bytes", &TierStats::capacity_bytes)
      .def_readonly("used_bytes", &TierStats::used_bytes)
      .def_readonly("blocks", &TierStats::blocks)
      .def_readonly("pinned_blocks", &TierStats::pinned_blocks)
      .def_readonly("hits", &TierStats::hits)
      .def_readonly("misses", &TierStats::misses)
      .def_readonly("bytes_in", &TierStats::bytes_in)
      .def_readonly("bytes_out", &TierStats::bytes_out)
      .def_readonly("evicted_blocks", &TierStats::evicted_blocks)
      .def_readonly("checksum_failures", &TierStats::checksum_failures);
  py::class_<NamespaceStats>(m, "NamespaceStats")
      .def_readonly("namespace_id", &NamespaceStats::namespace_id)
      .def_readonly("tenant", &NamespaceStats::tenant)
      .def_readonly("model", &NamespaceStats::model)
      .def_readonly("partition", &NamespaceStats::partition)
      .def_readonly("tiers", &NamespaceStats::tiers)
      .def_readonly("engines", &NamespaceStats::engines)
      .def_readonly("hits", &NamespaceStats::hits)
      .def_readonly("misses", &NamespaceStats::misses)
      .def_readonly("parked_requests", &NamespaceStats::parked_requests);
  py::class_<Stats>(m, "Stats")
      .def_readonly("incarnation_id", &Stats::incarnation_id)
      .def_property_readonly("uptime", [](const Stats& s) { return Seconds(s.uptime); })
      .def_readonly("tiers", &Stats::tiers)
      .def_readonly("hot_bytes_offloaded", &Stats::hot_bytes_offloaded)
      .def_readonly("cold_bytes_offloaded", &Stats::cold_bytes_offloaded)
      .def_readonly("hot_bytes_onboarded", &Stats::hot_bytes_onboarded)
      .def_readonly("cold_bytes_onboarded", &Stats::cold_bytes_onboarded)
      .def_readonly("dropped_offloads", &Stats::dropped_offloads)
      .def_readonly("parked_requests", &Stats::parked_requests)
      .def_readonly("registered_engines", &Stats::registered_engines)
      .def_readonly("draining", &Stats::draining)
      .def_readonly("namespaces", &Stats::namespaces)
      .def(
          "tier",
          [](const Stats& s, Tier tier) -> py::object {
            for (const TierStats& t : s.tiers) {
              if (t.tier == tier) return py::cast(t);
            }
            return py::none();
          },
          py::arg("tier"), "The TierStats of `tier`, or None.");

  py::enum_<Event::Kind>(m, "EventKind")
      .value("block_stored", Event::Kind::kBlockStored)
      .value("block_removed", Event::Kind::kBlockRemoved)
      .value("block_moved", Event::Kind::kBlockMoved)
      .value("namespace_cleared", Event::Kind::kNamespaceCleared)
      .value("events_lost", Event::Kind::kEventsLost)
      .value("snapshot_complete", Event::Kind::kSnapshotComplete);
  py::class_<Event>(m, "Event", "One event of the daemon's stream.")
      .def_readonly("kind", &Event::kind)
      .def_readonly("sequence", &Event::sequence)
      .def_readonly("namespace_id", &Event::namespace_id)
      .def_property_readonly("block_hashes",
                             [](const Event& e) {
                               py::list out;
                               for (const std::string& h : e.block_hashes) out.append(py::bytes(h));
                               return out;
                             })
      .def_readonly("tier", &Event::tier)
      .def_readonly("from_tier", &Event::from_tier)
      .def_readonly("count", &Event::count);
  py::class_<PyEventWatch>(m, "EventWatch",
                           "A running event stream; cancel() (or leaving a `with` block) ends it.")
      .def("cancel", &PyEventWatch::Cancel)
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyEventWatch& w, py::args) { w.Cancel(); });
}

// The arguments shared by the sync and async forms.
#define KVTIER_OFFLOAD_ARGS                                                     \
  py::arg("engine"), py::arg("hashes"), py::arg("page_indices"), py::kw_only(), \
      py::arg("durable") = false, py::arg("priority") = Priority::kDefault,     \
      py::arg("ack") = WriteAck::kDefault
#define KVTIER_ONBOARD_ARGS                                                     \
  py::arg("engine"), py::arg("hashes"), py::arg("page_indices"), py::kw_only(), \
      py::arg("continue_after_miss") = false
#define KVTIER_PARK_ARGS                                                                        \
  py::arg("engine"), py::arg("request_id"), py::arg("page_indices"), py::kw_only(),             \
      py::arg("append") = false, py::arg("num_tokens") = 0, py::arg("user_data") = py::bytes(), \
      py::arg("ttl") = 0.0, py::arg("priority") = Priority::kDefault,                           \
      py::arg("ack") = WriteAck::kDefault
#define KVTIER_RESUME_ARGS                                                          \
  py::arg("engine"), py::arg("request_id"), py::arg("page_indices"), py::kw_only(), \
      py::arg("first_page") = 0, py::arg("keep_parked") = false

void BindClientClass(py::module_& m) {
  py::class_<PyClient>(
      m, "Client",
      "A connection to kvtierd (kvtier/client.h); thread-safe. Calls taking `engine` accept an "
      "Engine or its engine_id. Block hashes are bytes (1 to 32 of them; BlockHasher makes "
      "them); page indices a list of int or a numpy integer array. Durations and times are "
      "float seconds (times since the Unix epoch). Synchronous calls release the GIL; the "
      "*_async forms return a concurrent.futures.Future completed from a library thread. "
      "Errors raise kvtier.Error (see its subclasses); a failed item of a batch is an "
      "ItemResult, not an exception.")
      .def_static(
          "connect",
          [](const std::string& socket, const std::string& client_name, double timeout,
             const std::string& target, const std::string& token, double rpc_timeout,
             bool keep_alive) {
            ClientOptions o;
            o.socket_path = socket;
            o.target = target;
            o.client_name = client_name;
            o.token = token;
            if (timeout > 0) {
              o.connect_timeout = absl::Seconds(timeout);
              o.rpc_timeout = absl::Seconds(timeout);
            }
            if (rpc_timeout > 0) o.rpc_timeout = absl::Seconds(rpc_timeout);
            o.keep_alive = keep_alive;
            absl::StatusOr<std::unique_ptr<Client>> client;
            {
              py::gil_scoped_release release;
              client = Client::Connect(o);
            }
            return std::make_unique<PyClient>(ValueOrThrow(std::move(client)));
          },
          py::kw_only(), py::arg("socket") = "", py::arg("client_name") = "",
          py::arg("timeout") = 0.0, py::arg("target") = "", py::arg("token") = "",
          py::arg("rpc_timeout") = 0.0, py::arg("keep_alive") = true,
          "Connects and says Hello. socket '' means $KVTIER_SOCKET or /run/kvtier/kvtier.sock; "
          "`timeout` (seconds, 0: 10) bounds the connect and, unless rpc_timeout is given, "
          "every call (0: 30). kvtier.Error UNAVAILABLE when no daemon answers.")
      .def("close", &PyClient::Close,
           "Closes the connection; leases of its engines are no longer renewed.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyClient& c, py::args) { c.Close(); })
      .def_property_readonly(
          "server", [](const PyClient& c) { return c.Get()->server(); },
          "What Hello returned at connect (a ServerInfo).")
      .def("hello", [](PyClient& c) { return c.Blocking([](Client& k) { return k.Hello(); }); })
      .def(
          "register_engine",
          [](PyClient& c, const std::string& model, const PageLayout& layout,
             const py::sequence& pools, const std::string& codec, const std::string& engine_name,
             const std::string& tenant, const std::string& partition,
             uint32_t codec_alignment_bytes, double lease_ttl) {
            EngineOptions o;
            o.model = model;
            o.layout = layout;
            for (py::handle p : pools) o.pools.push_back(ToRegistration(p));
            o.codec = codec;
            o.engine_name = engine_name;
            o.tenant = tenant;
            o.partition = partition;
            o.codec_alignment_bytes = codec_alignment_bytes;
            o.lease_ttl = FromSeconds(lease_ttl);
            return c.Blocking([&o](Client& k) { return k.RegisterEngine(o); });
          },
          // The Engine keeps `pools` (and so the memory the daemon maps) alive.
          py::keep_alive<0, 4>(), py::arg("model"), py::arg("layout"), py::arg("pools"),
          py::kw_only(), py::arg("codec") = "", py::arg("engine_name") = "", py::arg("tenant") = "",
          py::arg("partition") = "", py::arg("codec_alignment_bytes") = 0,
          py::arg("lease_ttl") = 0.0,
          "Registers an engine; `pools` has one SharedMemoryPool, DevicePool or "
          "PoolRegistration per layout pool, kept alive by the returned Engine (a DLPack "
          "array or pointer behind a PoolRegistration is the caller's to keep). codec '' is the "
          "daemon's default.")
      .def(
          "unregister",
          [](PyClient& c, const py::object& engine) {
            const std::string id = EngineId(engine);
            c.Blocking([&id](Client& k) { return k.Unregister(id); });
          },
          py::arg("engine"))
      .def(
          "keep_alive",
          [](PyClient& c, const py::object& engine) {
            const std::string id = EngineId(engine);
            c.Blocking([&id](Client& k) { return k.KeepAlive(id); });
          },
          py::arg("engine"))
      .def(
          "lookup",
          [](PyClient& c, const py::object& engine, const py::sequence& hashes, double pin_ttl) {
            const std::string id = EngineId(engine);
            const std::vector<std::string> h = HashList(hashes);
            return c.Blocking([&](Client& k) { return k.Lookup(id, h, FromSeconds(pin_ttl)); });
          },
          py::arg("engine"), py::arg("hashes"), py::kw_only(), py::arg("pin_ttl") = 0.0,
          "How many leading hashes are stored (LookupResult); pin_ttl > 0 pins the hits.")
      .def(
          "offload",
          [](PyClient& c, const py::object& engine, const py::sequence& hashes,
             const std::vector<uint32_t>& page_indices, bool durable, Priority priority,
             WriteAck ack) {
            const std::string id = EngineId(engine);
            const std::vector<PageRef> pages = PageList(hashes, page_indices);
            const OffloadOptions o{durable, priority, ack};
            return c.Blocking([&](Client& k) { return k.Offload(id, pages, o); });
          },
          KVTIER_OFFLOAD_ARGS, "Stores page page_indices[i] under hashes[i] (OffloadResult).")
      .def(
          "onboard",
          [](PyClient& c, const py::object& engine, const py::sequence& hashes,
             const std::vector<uint32_t>& page_indices, bool continue_after_miss) {
            const std::string id = EngineId(engine);
            const std::vector<PageRef> pages = PageList(hashes, page_indices);
            return c.Blocking([&](Client& k) { return k.Onboard(id, pages, continue_after_miss); });
          },
          KVTIER_ONBOARD_ARGS, "Writes block hashes[i] into page page_indices[i] (OnboardResult).")
      .def(
          "park",
          [](PyClient& c, const py::object& engine, const std::string& request_id,
             const std::vector<uint32_t>& page_indices, bool append, uint64_t num_tokens,
             const py::bytes& user_data, double ttl, Priority priority, WriteAck ack) {
            const std::string id = EngineId(engine);
            const ParkOptions o =
                MakeParkOptions(append, num_tokens, user_data, ttl, priority, ack);
            return c.Blocking([&](Client& k) { return k.Park(id, request_id, page_indices, o); });
          },
          KVTIER_PARK_ARGS, "Parks a request's pages during a tool call (ParkResult).")
      .def(
          "resume",
          [](PyClient& c, const py::object& engine, const std::string& request_id,
             const std::vector<uint32_t>& page_indices, uint32_t first_page, bool keep_parked) {
            const std::string id = EngineId(engine);
            return c.Blocking([&](Client& k) {
              return k.Resume(id, request_id, page_indices, first_page, keep_parked);
            });
          },
          KVTIER_RESUME_ARGS,
          "Writes parked pages first_page.. into page_indices (ResumeResult with user_data).")
      .def(
          "release",
          [](PyClient& c, const py::object& engine, const std::vector<std::string>& request_ids) {
            const std::string id = EngineId(engine);
            return c.Blocking([&](Client& k) { return k.Release(id, request_ids); });
          },
          py::arg("engine"), py::arg("request_ids"))
      .def(
          "pin",
          [](PyClient& c, const py::object& engine, const py::sequence& hashes, double ttl) {
            const std::string id = EngineId(engine);
            const std::vector<std::string> h = HashList(hashes);
            return c.Blocking([&](Client& k) { return k.Pin(id, h, FromSeconds(ttl)); });
          },
          py::arg("engine"), py::arg("hashes"), py::kw_only(), py::arg("ttl") = 0.0)
      .def(
          "unpin",
          [](PyClient& c, const py::object& engine, const py::sequence& hashes) {
            const std::string id = EngineId(engine);
            const std::vector<std::string> h = HashList(hashes);
            return c.Blocking([&](Client& k) { return k.Unpin(id, h); });
          },
          py::arg("engine"), py::arg("hashes"))
      .def(
          "stats",
          [](PyClient& c, bool include_namespaces) {
            return c.Blocking([&](Client& k) { return k.GetStats(include_namespaces); });
          },
          py::kw_only(), py::arg("include_namespaces") = false)
      .def(
          "lookup_async",
          [](PyClient& c, const py::object& engine, const py::sequence& hashes, double pin_ttl) {
            const std::string id = EngineId(engine);
            std::vector<std::string> h = HashList(hashes);
            return c.Async<LookupResult>([&](Client& k, Callback<LookupResult> done) {
              k.LookupAsync(id, std::move(h), FromSeconds(pin_ttl), std::move(done));
            });
          },
          py::arg("engine"), py::arg("hashes"), py::kw_only(), py::arg("pin_ttl") = 0.0)
      .def(
          "offload_async",
          [](PyClient& c, const py::object& engine, const py::sequence& hashes,
             const std::vector<uint32_t>& page_indices, bool durable, Priority priority,
             WriteAck ack) {
            const std::string id = EngineId(engine);
            std::vector<PageRef> pages = PageList(hashes, page_indices);
            const OffloadOptions o{durable, priority, ack};
            return c.Async<OffloadResult>([&](Client& k, Callback<OffloadResult> done) {
              k.OffloadAsync(id, std::move(pages), o, std::move(done));
            });
          },
          KVTIER_OFFLOAD_ARGS)
      .def(
          "onboard_async",
          [](PyClient& c, const py::object& engine, const py::sequence& hashes,
             const std::vector<uint32_t>& page_indices, bool continue_after_miss) {
            const std::string id = EngineId(engine);
            std::vector<PageRef> pages = PageList(hashes, page_indices);
            return c.Async<OnboardResult>([&](Client& k, Callback<OnboardResult> done) {
              k.OnboardAsync(id, std::move(pages), continue_after_miss, std::move(done));
            });
          },
          KVTIER_ONBOARD_ARGS)
      .def(
          "park_async",
          [](PyClient& c, const py::object& engine, const std::string& request_id,
             std::vector<uint32_t> page_indices, bool append, uint64_t num_tokens,
             const py::bytes& user_data, double ttl, Priority priority, WriteAck ack) {
            const std::string id = EngineId(engine);
            const ParkOptions o =
                MakeParkOptions(append, num_tokens, user_data, ttl, priority, ack);
            return c.Async<ParkResult>([&](Client& k, Callback<ParkResult> done) {
              k.ParkAsync(id, request_id, std::move(page_indices), o, std::move(done));
            });
          },
          KVTIER_PARK_ARGS)
      .def(
          "resume_async",
          [](PyClient& c, const py::object& engine, const std::string& request_id,
             std::vector<uint32_t> page_indices, uint32_t first_page, bool keep_parked) {
            const std::string id = EngineId(engine);
            return c.Async<ResumeResult>([&](Client& k, Callback<ResumeResult> done) {
              k.ResumeAsync(id, request_id, std::move(page_indices), first_page, keep_parked,
                            std::move(done));
            });
          },
          KVTIER_RESUME_ARGS)
      .def(
          "watch_events",
          [](PyClient& c, py::function on_event, py::object on_done, bool snapshot,
             uint64_t namespace_id) {
            WatchOptions o;
            o.snapshot = snapshot;
            o.namespace_id = namespace_id;
            SharedObject event_fn = Share(std::move(on_event));
            SharedObject done_fn = Share(std::move(on_done));
            auto handle_event = [event_fn](const Event& event) {
              py::gil_scoped_acquire gil;
              try {
                (*event_fn)(event);
              } catch (py::error_already_set& e) {
                e.discard_as_unraisable("kvtier: an on_event callback");
              }
            };
            auto handle_done = [done_fn](absl::Status status) {
              py::gil_scoped_acquire gil;
              if (done_fn->is_none()) return;
              try {
                (*done_fn)(status.ok() ? py::none() : MakeError(status));
              } catch (py::error_already_set& e) {
                e.discard_as_unraisable("kvtier: an on_done callback");
              }
            };
            std::unique_ptr<EventWatch> watch = c.Blocking([&](Client& k) {
              return k.WatchEvents(o, std::move(handle_event), std::move(handle_done));
            });
            return std::make_unique<PyEventWatch>(std::move(watch));
          },
          py::arg("on_event"), py::arg("on_done") = py::none(), py::kw_only(),
          py::arg("snapshot") = false, py::arg("namespace_id") = 0,
          "Follows the daemon's events: on_event(Event) for each, in order, then on_done(error "
          "or None) once, both on the watch's own thread. Returns an EventWatch.");
}

#undef KVTIER_OFFLOAD_ARGS
#undef KVTIER_ONBOARD_ARGS
#undef KVTIER_PARK_ARGS
#undef KVTIER_RESUME_ARGS

}  // namespace

void BindClient(py::module_& m) {
  m.attr("__version__") = std::string(LibraryVersion());
  BindEnumsAndResults(m);
  BindClientClass(m);
}

}  // namespace kvtier::python
