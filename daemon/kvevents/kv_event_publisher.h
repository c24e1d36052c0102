// KvEventPublisher: kvtierd's blocks as vLLM KV events over ZeroMQ (docs/KV_EVENTS.md), so that
// the routers fleets already run (llm-d, Dynamo) see the host and disk tiers. It reads the daemon's
// EventLog in order on its own thread, which owns the sockets: a PUB socket for the stream
// (3-frame messages: topic, 8-byte big-endian sequence from 0, msgpack batch) and an optional
// ROUTER socket that replays buffered batches. Thread-safe; counters may be read from any thread.
#ifndef KVTIER_DAEMON_KVEVENTS_KV_EVENT_PUBLISHER_H_
#define KVTIER_DAEMON_KVEVENTS_KV_EVENT_PUBLISHER_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/kvevents/event_translation.h"
#include "daemon/kvevents/kv_event_encoding.h"
#include "daemon/service/event_log.h"

namespace kvtier::kvevents {

struct KvEventPublisherOptions {
  // ZeroMQ endpoint of the PUB socket. One with "*" or "::" in it, or an ipc:// or inproc://
  // endpoint, is bound; any other is connected (to a relay or subscriber that binds).
  std::string endpoint = "tcp://*:5557";
  // ZeroMQ endpoint the ROUTER socket for replay binds; "": no replay socket.
  std::string replay_endpoint;
  // First frame of every message (subscribers filter on its prefix).
  std::string topic;
  KvEventEncoding encoding = KvEventEncoding::kArray;
  // Batches kept for replay (at least 1), and at most this many payload bytes of them (the oldest
  // go first; the newest batch is always kept).
  size_t replay_buffer = 10000;
  size_t replay_buffer_bytes = size_t{256} << 20;
  // Messages queued per subscriber before a batch is dropped (ZMQ_SNDHWM, at least 1).
  int send_hwm = 100000;
  // Tenants whose namespaces are published; empty: every namespace.
  std::vector<std::string> tenants;
  // Tenant of a namespace id, asked when `tenants` is not empty. Called on the publisher's thread.
  TenantOfNamespace tenant_of;
  // Tokens per block written in BlockStored for a namespace whose block size `tokens` does not
  // know (0: unknown).
  uint32_t block_size = 0;
  // The token ids and block sizes engines sent with their offloads (TranslateLoggedEvent); read on
  // the publisher's thread; borrowed, must outlive the publisher. Null: none, every BlockStored
  // has `block_size` and empty token_ids.
  const service::TokenTable* tokens = nullptr;
  // The batch's data_parallel_rank; nullopt writes nil.
  std::optional<int64_t> data_parallel_rank;
  // Logged events per batch, at most (each holds up to EventLog::kMaxHashesPerEvent hashes).
  size_t max_logged_events_per_batch = 16;
  // How long the publisher waits, once told that events were logged, before it reads the log:
  // what the store logs meanwhile goes in the same read (and merges in the log), so a busy store
  // costs one wake-up and a few batches per interval instead of some per offload. Zero: reads at
  // once. Delays every batch by up to this much.
  absl::Duration batch_interval = absl::ZeroDuration();
};

class KvEventPublisher final : public service::EventLog::Listener {
 public:
  // Opens the sockets (binding or connecting them) and starts publishing what `log` holds, from
  // its oldest retained event on. InvalidArgument for bad options, Unavailable when an endpoint
  // cannot be bound or connected (the message names the endpoint and ZeroMQ's reason). Borrows
  // `log` until destroyed. REQUIRES: `log` is not closed.
  static absl::StatusOr<std::unique_ptr<KvEventPublisher>> Create(KvEventPublisherOptions options,
                                                                  service::EventLog* log);
  // Stops publishing: no more reads of the log, which the publisher no longer listens to, and the
  // thread is joined; counters stay readable. Idempotent. Blocks until the thread ends.
  void Stop();
  // Stops and closes the sockets (unsent messages are discarded).
  ~KvEventPublisher() override;
  KvEventPublisher(const KvEventPublisher&) = delete;
  KvEventPublisher& operator=(const KvEventPublisher&) = delete;

  // The endpoints the sockets use (for a bound tcp endpoint with a wildcard port, the port
  // ZeroMQ chose); replay_endpoint() is "" without replay.
  const std::string& endpoint() const { return endpoint_; }
  const std::string& replay_endpoint() const { return replay_endpoint_; }

  struct Counters {
    uint64_t published_batches = 0;  // messages handed to the PUB socket
    uint64_t published_events = 0;   // KV events in them
    uint64_t dropped_batches = 0;    // a subscriber's queue was full (replay has them)
    uint64_t lost_log_events = 0;    // logged events that left the log's window unread
    uint64_t replay_requests = 0;    // replay requests answered
  };
  Counters counters() const;
  // Sequence of the next batch (batches published or dropped so far).
  uint64_t next_sequence() const { return next_seq_.load(std::memory_order_acquire); }

  // Whether it is one of the log's listeners now (from Create until Stop).
  bool listening() const { return listening_.load(std::memory_order_acquire); }

  // EventLog::Listener: wakes the publisher's thread, unless a wake is pending already.
  void OnEventsAvailable() override;

 private:
  KvEventPublisher(KvEventPublisherOptions options, service::EventLog* log);
  absl::Status Open();
  void Run();
  // Publishes what the log holds past cursor_; the logged events read.
  size_t PublishFromLog();
  void Send(std::string payload);
  void ServeReplay();
  void Wake();

  const KvEventPublisherOptions options_;
  service::EventLog* const log_;
  TenantFilter filter_;  // the thread's

  void* context_ = nullptr;
  void* pub_ = nullptr;
  void* router_ = nullptr;
  int wake_fd_ = -1;  // eventfd
  std::string endpoint_, replay_endpoint_;

  // The thread's.
  uint64_t cursor_ = 0;  // last logged sequence read
  struct Buffered {
    uint64_t seq;
    std::string payload;
  };
  std::deque<Buffered> replay_;  // oldest first
  size_t replay_bytes_ = 0;      // payload bytes in replay_

  std::atomic<bool> stop_{false};
  // Set by OnEventsAvailable when it wakes the thread, cleared by the thread when a read finds
  // the log idle: events logged meanwhile wake it no further.
  std::atomic<bool> pending_{false};
  std::atomic<bool> listening_{false};
  std::atomic<uint64_t> next_seq_{0};
  std::atomic<uint64_t> published_batches_{0}, published_events_{0}, dropped_batches_{0},
      lost_log_events_{0}, replay_requests_{0};
  std::thread thread_;
};

}  // namespace kvtier::kvevents

#endif  // KVTIER_DAEMON_KVEVENTS_KV_EVENT_PUBLISHER_H_
