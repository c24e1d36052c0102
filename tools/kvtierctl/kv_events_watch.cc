// watch --format=vllm: subscribes to the daemon's KV-events PUB socket (docs/KV_EVENTS.md) and
// prints every KV event it publishes as one JSON object per line, under vLLM's field names: what
// a router subscribed there receives, token ids included. It reads the wire format itself (frames,
// msgpack batch, either event encoding) and does not talk gRPC to the daemon.
#include <signal.h>

#include <chrono>
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_replace.h"
#include "daemon/config/config.h"
#include "tools/kvtierctl/kvtierctl.h"
#include "zmq.h"

#define MSGPACK_NO_BOOST 1
#include "msgpack.hpp"

namespace kvtier::ctl {
namespace {

// vLLM's fields of each event type, in the array encoding's order.
const std::vector<std::string>* FieldsOf(const std::string& type) {
  static const std::vector<std::string> kStored = {"block_hashes",
                                                   "parent_block_hash",
                                                   "token_ids",
                                                   "block_size",
                                                   "lora_id",
                                                   "medium",
                                                   "lora_name",
                                                   "extra_keys",
                                                   "group_idx",
                                                   "kv_cache_spec_kind",
                                                   "kv_cache_spec_sliding_window"};
  static const std::vector<std::string> kRemoved = {"block_hashes", "medium", "group_idx"};
  static const std::vector<std::string> kCleared = {};
  if (type == "BlockStored") return &kStored;
  if (type == "BlockRemoved") return &kRemoved;
  if (type == "AllBlocksCleared") return &kCleared;
  return nullptr;
}

Json ToJsonValue(const msgpack::object& o) {
  switch (o.type) {
    case msgpack::type::NIL:
      return nullptr;
    case msgpack::type::BOOLEAN:
      return o.via.boolean;
    case msgpack::type::POSITIVE_INTEGER:
      return o.via.u64;
    case msgpack::type::NEGATIVE_INTEGER:
      return o.via.i64;
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64:
      return o.via.f64;
    case msgpack::type::STR:
      return std::string(o.via.str.ptr, o.via.str.size);
    case msgpack::type::BIN: {
      static constexpr char kHex[] = "0123456789abcdef";
      std::string hex;
      for (uint32_t i = 0; i < o.via.bin.size; ++i) {
        const auto c = static_cast<unsigned char>(o.via.bin.ptr[i]);
        hex += kHex[c >> 4];
        hex += kHex[c & 15];
      }
      return hex;
    }
    case msgpack::type::ARRAY: {
      Json a = Json::array();
      for (uint32_t i = 0; i < o.via.array.size; ++i) a.push_back(ToJsonValue(o.via.array.ptr[i]));
      return a;
    }
    case msgpack::type::MAP: {
      Json m = Json::object();
      for (uint32_t i = 0; i < o.via.map.size; ++i) {
        const msgpack::object_kv& kv = o.via.map.ptr[i];
        const Json key = ToJsonValue(kv.key);
        m[key.is_string() ? key.get<std::string>() : key.dump()] = ToJsonValue(kv.val);
      }
      return m;
    }
    default:
      return "(unsupported msgpack type)";
  }
}

// One event of a batch in either encoding as {"type": ..., every field of its type (null when
// unset)}; nullopt for a shape that is neither.
std::optional<Json> EventJson(const msgpack::object& raw) {
  Json out = Json::object();
  if (raw.type == msgpack::type::ARRAY && raw.via.array.size > 0 &&
      raw.via.array.ptr[0].type == msgpack::type::STR) {
    const std::string type(raw.via.array.ptr[0].via.str.ptr, raw.via.array.ptr[0].via.str.size);
    const std::vector<std::string>* fields = FieldsOf(type);
    if (fields == nullptr || raw.via.array.size != fields->size() + 1) return std::nullopt;
    out["type"] = type;
    for (size_t i = 0; i < fields->size(); ++i) {
      out[(*fields)[i]] = ToJsonValue(raw.via.array.ptr[i + 1]);
    }
    return out;
  }
  if (raw.type != msgpack::type::MAP) return std::nullopt;
  Json m = ToJsonValue(raw);
  if (!m.contains("type") || !m["type"].is_string()) return std::nullopt;
  const std::vector<std::string>* fields = FieldsOf(m["type"].get<std::string>());
  if (fields == nullptr) return std::nullopt;
  out["type"] = m["type"];
  for (const std::string& f : *fields) out[f] = m.contains(f) ? m[f] : Json(nullptr);
  return out;
}

// The endpoint to subscribe to: --endpoint, else the kv_events.endpoint of the daemon's
// configuration file --config (a bound tcp endpoint's "*" is reached on 127.0.0.1, "[::]" on
// "[::1]"). "" after a
// message on stderr; *rc is then the exit status.
std::string EndpointOf(const Invocation& inv, int* rc) {
  if (auto endpoint = inv.Get("endpoint")) return *endpoint;
  const std::optional<std::string> file = inv.Get("config");
  if (!file.has_value()) {
    *rc = UsageError(inv, "--format=vllm needs --endpoint=ENDPOINT or --config=FILE");
    return "";
  }
  absl::StatusOr<kvtierd::Config> config = kvtierd::LoadConfig(*file, inv.GetAll("set"));
  if (!config.ok()) {
    std::cerr << "kvtierctl: " << *file << ": " << config.status().message() << "\n";
    *rc = kExitFailed;
    return "";
  }
  const std::string& endpoint = config->kv_events.endpoint;
  if (!config->kv_events.enabled) {
    std::cerr << "kvtierctl: " << *file << " does not enable kv_events\n";
    *rc = kExitFailed;
    return "";
  }
  if (absl::StartsWith(endpoint, "tcp://") && !absl::StrContains(endpoint, "*") &&
      !absl::StrContains(endpoint, "::")) {
    std::cerr << "kvtierctl: kv_events.endpoint " << endpoint
              << " is connected by kvtierd (to a relay), not bound: subscribe to the relay with "
                 "--endpoint\n";
    *rc = kExitFailed;
    return "";
  }
  return absl::StrReplaceAll(endpoint,
                             {{"tcp://*:", "tcp://127.0.0.1:"}, {"tcp://[::]:", "tcp://[::1]:"}});
}

}  // namespace

int RunWatchVllm(const Invocation& inv) {
  for (const char* flag : {"from", "namespace", "tenant", "model", "partition"}) {
    if (inv.Has(flag)) {
      return UsageError(inv, std::string("--") + flag + " does not apply to --format=vllm");
    }
  }
  uint64_t count = 0;
  if (int rc = ParseCount(inv, "count", &count); rc != kExitOk) return rc;
  double duration = 0;
  if (auto text = inv.Get("duration")) {
    if (!absl::SimpleAtod(*text, &duration) || !(duration > 0)) {
      return UsageError(inv, "--duration needs a positive number of seconds, not '" + *text + "'");
    }
  }
  int rc = kExitOk;
  const std::string endpoint = EndpointOf(inv, &rc);
  if (endpoint.empty()) return rc;
  const std::string topic = inv.Get("topic").value_or("");

  // Ctrl-C or SIGTERM ends it cleanly: blocked, and looked for between polls.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  void* ctx = zmq_ctx_new();
  void* sub = zmq_socket(ctx, ZMQ_SUB);
  const int linger = 0;
  const int ipv6 = 1;
  zmq_setsockopt(sub, ZMQ_LINGER, &linger, sizeof(linger));
  zmq_setsockopt(sub, ZMQ_IPV6, &ipv6, sizeof(ipv6));
  zmq_setsockopt(sub, ZMQ_SUBSCRIBE, topic.data(), topic.size());
  if (zmq_connect(sub, endpoint.c_str()) != 0) {
    std::cerr << "kvtierctl: cannot subscribe to " << endpoint << ": " << zmq_strerror(zmq_errno())
              << "\n";
    zmq_close(sub);
    zmq_ctx_term(ctx);
    return kExitFailed;
  }
  const auto deadline =
      std::chrono::steady_clock::now() +
      std::chrono::milliseconds(duration > 0 ? static_cast<int64_t>(duration * 1000) : 0);
  uint64_t seen = 0;
  rc = kExitOk;
  bool done = false;
  while (!done) {
    const timespec no_wait = {0, 0};
    if (sigtimedwait(&stop_signals, nullptr, &no_wait) > 0) break;
    if (duration > 0 && std::chrono::steady_clock::now() >= deadline) break;
    zmq_pollitem_t item = {sub, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&item, 1, 100) <= 0) continue;
    // One message: topic, 8-byte big-endian sequence, msgpack batch.
    std::vector<std::string> frames;
    int more = 1;
    while (more) {
      zmq_msg_t msg;
      zmq_msg_init(&msg);
      if (zmq_msg_recv(&msg, sub, 0) < 0) {
        zmq_msg_close(&msg);
        break;
      }
      frames.emplace_back(static_cast<const char*>(zmq_msg_data(&msg)), zmq_msg_size(&msg));
      more = zmq_msg_more(&msg);
      zmq_msg_close(&msg);
    }
    if (frames.size() != 3 || frames[1].size() != 8) {
      std::cerr << "kvtierctl: a message of " << frames.size()
                << " frames is not a KV-events batch (topic, sequence, payload)\n";
      continue;
    }
    uint64_t seq = 0;
    for (unsigned char c : frames[1]) seq = (seq << 8) | c;
    msgpack::object_handle oh;
    try {
      oh = msgpack::unpack(frames[2].data(), frames[2].size());
    } catch (const std::exception& e) {
      std::cerr << "kvtierctl: batch " << seq << " is not msgpack: " << e.what() << "\n";
      continue;
    }
    const msgpack::object& batch = oh.get();
    if (batch.type != msgpack::type::ARRAY || batch.via.array.size != 3 ||
        batch.via.array.ptr[1].type != msgpack::type::ARRAY) {
      std::cerr << "kvtierctl: batch " << seq << " is not [timestamp, events, rank]\n";
      continue;
    }
    const Json timestamp = ToJsonValue(batch.via.array.ptr[0]);
    const Json rank = ToJsonValue(batch.via.array.ptr[2]);
    const msgpack::object& events = batch.via.array.ptr[1];
    for (uint32_t i = 0; i < events.via.array.size && !done; ++i) {
      std::optional<Json> event = EventJson(events.via.array.ptr[i]);
      if (!event.has_value()) {
        std::cerr << "kvtierctl: batch " << seq << " event " << i << " is no KV event\n";
        continue;
      }
      Json line = Json::object();
      line["seq"] = seq;
      line["timestamp"] = timestamp;
      line["data_parallel_rank"] = rank;
      line.update(*event);
      std::cout << line.dump() << "\n";
      if (count != 0 && ++seen >= count) done = true;
    }
    std::cout.flush();
  }
  zmq_close(sub);
  zmq_ctx_term(ctx);
  return rc;
}

}  // namespace kvtier::ctl
