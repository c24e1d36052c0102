// KvEventPublisher: one thread owns the ZeroMQ context's sockets and the replay buffer, and waits
// in zmq_poll on an eventfd (the log's notifier writes it) and on the ROUTER socket, so the store
// and the log never wait for the network: the log's notifier only writes the eventfd.
//
// A full send queue: the PUB socket runs with ZMQ_XPUB_NODROP, so a batch that a subscriber's
// queue (send_hwm messages) cannot take fails with EAGAIN instead of vanishing silently; it is
// counted as dropped, keeps its sequence number (subscribers see the gap) and stays in the replay
// buffer, from which a subscriber fills the gap. ZeroMQ refuses a message for every subscriber
// when one is full: a slow subscriber makes the others replay too, but no drop goes unseen.
// Replies on the ROUTER socket are never dropped (no high-water mark): a request costs at most
// the replay buffer's batches in memory until they are sent.
//
// Wake-ups: the log's notifier writes the eventfd only when no wake is pending (pending_), and
// with a batch interval the thread, once woken, lets the store log for that long before it reads
// (serving replay meanwhile). While reads find events it stays busy: it reads once per interval,
// with pending_ left set, so that a steady store costs the thread one wake-up per interval and
// the notifier no eventfd write; a read that finds nothing clears pending_ (and looks once more).
// Reading at once after every logged event cost a context switch of this thread and of ZeroMQ's I/O
// thread per offload, and closed the log's tail so that an offload's blocks did not merge: on two
// cores that made each offload wait (docs/PERFORMANCE.md, "KV events: publishing overhead").
#include "daemon/kvevents/kv_event_publisher.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/errno_text.h"
#include "common/logging.h"
#include "zmq.h"

namespace kvtier::kvevents {
namespace {

// ZeroMQ's own codes by zmq_strerror, system ones by ErrnoText (strerror is not thread-safe).
std::string ZmqError() {
  const int err = zmq_errno();
  return err >= ZMQ_HAUSNUMERO ? std::string(zmq_strerror(err)) : ErrnoText(err);
}

void BigEndian64(uint64_t v, char out[8]) {
  for (int i = 7; i >= 0; --i) {
    out[i] = static_cast<char>(v & 0xff);
    v >>= 8;
  }
}

uint64_t ReadBigEndian64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | p[i];
  return v;
}

bool Binds(const std::string& endpoint) {
  return absl::StrContains(endpoint, "*") || absl::StrContains(endpoint, "::") ||
         absl::StartsWith(endpoint, "ipc://") || absl::StartsWith(endpoint, "inproc://");
}

// Sends `size` bytes as one frame; `more`: more frames follow.
int SendFrame(void* socket, const void* data, size_t size, bool more, int flags) {
  return zmq_send(socket, data, size, flags | (more ? ZMQ_SNDMORE : 0));
}

std::string LastEndpoint(void* socket, const std::string& fallback) {
  char buf[512];
  size_t size = sizeof(buf);
  if (zmq_getsockopt(socket, ZMQ_LAST_ENDPOINT, buf, &size) != 0 || size <= 1) return fallback;
  return std::string(buf, size - 1);
}

}  // namespace

absl::StatusOr<std::unique_ptr<KvEventPublisher>> KvEventPublisher::Create(
    KvEventPublisherOptions options, service::EventLog* log) {
  if (options.endpoint.empty()) return absl::InvalidArgumentError("kv_events: empty endpoint");
  if (options.replay_buffer == 0) {
    return absl::InvalidArgumentError("kv_events: replay_buffer must be at least 1");
  }
  if (options.send_hwm < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("kv_events: send_hwm %d must be at least 1", options.send_hwm));
  }
  if (options.max_logged_events_per_batch == 0) options.max_logged_events_per_batch = 1;
  std::unique_ptr<KvEventPublisher> p(new KvEventPublisher(std::move(options), log));
  if (absl::Status st = p->Open(); !st.ok()) return st;
  log->AddListener(p.get());
  p->listening_.store(true, std::memory_order_release);
  p->thread_ = std::thread([raw = p.get()] { raw->Run(); });
  return p;
}

KvEventPublisher::KvEventPublisher(KvEventPublisherOptions options, service::EventLog* log)
    : options_(std::move(options)), log_(log), filter_(options_.tenants, options_.tenant_of) {}

absl::Status KvEventPublisher::Open() {
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) {
    return absl::InternalError(absl::StrCat("kv_events: eventfd: ", ErrnoText(errno)));
  }
  context_ = zmq_ctx_new();
  if (context_ == nullptr) return absl::InternalError("kv_events: cannot create a ZeroMQ context");
  pub_ = zmq_socket(context_, ZMQ_PUB);
  if (pub_ == nullptr) {
    return absl::InternalError(absl::StrCat("kv_events: PUB socket: ", ZmqError()));
  }
  const int linger = 0, one = 1;
  const int hwm = options_.send_hwm;
  if (zmq_setsockopt(pub_, ZMQ_LINGER, &linger, sizeof(linger)) != 0 ||
      zmq_setsockopt(pub_, ZMQ_SNDHWM, &hwm, sizeof(hwm)) != 0 ||
      zmq_setsockopt(pub_, ZMQ_XPUB_NODROP, &one, sizeof(one)) != 0) {
    return absl::InternalError(absl::StrCat("kv_events: PUB socket options: ", ZmqError()));
  }
  const bool bind = Binds(options_.endpoint);
  const int rc = bind ? zmq_bind(pub_, options_.endpoint.c_str())
                      : zmq_connect(pub_, options_.endpoint.c_str());
  if (rc != 0) {
    return absl::UnavailableError(absl::StrFormat("kv_events.endpoint: cannot %s %s: %s",
                                                  bind ? "bind" : "connect to", options_.endpoint,
                                                  ZmqError()));
  }
  endpoint_ = bind ? LastEndpoint(pub_, options_.endpoint) : options_.endpoint;
  if (!options_.replay_endpoint.empty()) {
    router_ = zmq_socket(context_, ZMQ_ROUTER);
    if (router_ == nullptr) {
      return absl::InternalError(absl::StrCat("kv_events: ROUTER socket: ", ZmqError()));
    }
    const int unlimited = 0;
    if (zmq_setsockopt(router_, ZMQ_LINGER, &linger, sizeof(linger)) != 0 ||
        zmq_setsockopt(router_, ZMQ_SNDHWM, &unlimited, sizeof(unlimited)) != 0) {
      return absl::InternalError(absl::StrCat("kv_events: ROUTER socket options: ", ZmqError()));
    }
    if (zmq_bind(router_, options_.replay_endpoint.c_str()) != 0) {
      return absl::UnavailableError(absl::StrFormat("kv_events.replay_endpoint: cannot bind %s: %s",
                                                    options_.replay_endpoint, ZmqError()));
    }
    replay_endpoint_ = LastEndpoint(router_, options_.replay_endpoint);
  }
  return absl::OkStatus();
}

void KvEventPublisher::Stop() {
  if (!thread_.joinable()) return;
  listening_.store(false, std::memory_order_release);
  log_->RemoveListener(this);
  stop_.store(true, std::memory_order_release);
  Wake();
  thread_.join();
}

KvEventPublisher::~KvEventPublisher() {
  Stop();
  if (router_ != nullptr) zmq_close(router_);
  if (pub_ != nullptr) zmq_close(pub_);
  if (context_ != nullptr) zmq_ctx_term(context_);
  if (wake_fd_ >= 0) close(wake_fd_);
}

KvEventPublisher::Counters KvEventPublisher::counters() const {
  Counters c;
  c.published_batches = published_batches_.load(std::memory_order_relaxed);
  c.published_events = published_events_.load(std::memory_order_relaxed);
  c.dropped_batches = dropped_batches_.load(std::memory_order_relaxed);
  c.lost_log_events = lost_log_events_.load(std::memory_order_relaxed);
  c.replay_requests = replay_requests_.load(std::memory_order_relaxed);
  return c;
}

void KvEventPublisher::OnEventsAvailable() {
  if (!pending_.exchange(true, std::memory_order_seq_cst)) Wake();
}

void KvEventPublisher::Wake() {
  const uint64_t one = 1;
  // EAGAIN: the counter is already non-zero, the thread wakes anyway.
  (void)!write(wake_fd_, &one, sizeof(one));
}

void KvEventPublisher::Run() {
  zmq_pollitem_t items[2] = {};
  items[0].fd = wake_fd_;
  items[0].events = ZMQ_POLLIN;
  items[1].socket = router_;
  items[1].events = ZMQ_POLLIN;
  const int count = router_ != nullptr ? 2 : 1;
  // One poll of the eventfd and the ROUTER socket (timeout_ms -1: until either is readable);
  // drains the eventfd and serves replay requests. False when zmq_poll failed.
  const auto poll = [&](long timeout_ms) {
    if (zmq_poll(items, count, timeout_ms) < 0) {
      if (zmq_errno() == EINTR) return true;
      KVTIER_LOG(kError, "kv_events: zmq_poll: ", ZmqError(), "; publisher stops");
      return false;
    }
    if (items[0].revents & ZMQ_POLLIN) {
      uint64_t value = 0;
      (void)!read(wake_fd_, &value, sizeof(value));
    }
    if (count == 2 && (items[1].revents & ZMQ_POLLIN)) ServeReplay();
    return true;
  };
  PublishFromLog();  // what the log holds already (the store's recovery)
  while (!stop_.load(std::memory_order_acquire)) {
    if (!poll(-1)) return;
    if (stop_.load(std::memory_order_acquire)) break;
    if (!pending_.load(std::memory_order_acquire)) continue;  // a replay request, or a stale wake
    // Busy: one read per interval for as long as reads find events, pending_ staying set.
    while (!stop_.load(std::memory_order_acquire)) {
      const absl::Time until = absl::Now() + options_.batch_interval;
      while (!stop_.load(std::memory_order_acquire)) {
        const absl::Duration left = until - absl::Now();
        if (left <= absl::ZeroDuration()) break;
        if (!poll(static_cast<long>(
                absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1))))))
          return;
      }
      if (stop_.load(std::memory_order_acquire)) break;
      if (PublishFromLog() > 0) continue;
      // Idle: cleared, then the log looked at once more, since an event logged before the clear
      // found the flag set and woke no one.
      pending_.store(false, std::memory_order_seq_cst);
      if (log_->last_sequence() <= cursor_) break;
      pending_.store(true, std::memory_order_seq_cst);
    }
  }
}

size_t KvEventPublisher::PublishFromLog() {
  std::vector<KvEvent> events;
  size_t read = 0;
  while (!stop_.load(std::memory_order_acquire)) {
    service::EventLog::Batch batch = log_->Read(cursor_, options_.max_logged_events_per_batch);
    if (batch.lost_last != 0) {
      lost_log_events_.fetch_add(batch.lost_last - batch.lost_first + 1, std::memory_order_relaxed);
      if (batch.lost_last > cursor_) cursor_ = batch.lost_last;
    }
    if (batch.events.empty()) return read;
    read += batch.events.size();
    events.clear();
    for (const auto& logged : batch.events) {
      cursor_ = logged->sequence;
      if (!filter_.Publishes(logged->ns)) continue;
      TranslateLoggedEvent(*logged, options_.block_size, &events, options_.tokens);
    }
    if (events.empty()) continue;
    const double timestamp =
        static_cast<double>(absl::ToUnixMicros(batch.events.front()->time)) / 1e6;
    published_events_.fetch_add(events.size(), std::memory_order_relaxed);
    Send(EncodeKvEventBatch(timestamp, events, options_.data_parallel_rank, options_.encoding));
  }
  return read;
}

void KvEventPublisher::Send(std::string payload) {
  const uint64_t seq = next_seq_.load(std::memory_order_relaxed);
  char seq_bytes[8];
  BigEndian64(seq, seq_bytes);
  // The first frame decides: once it is queued, ZeroMQ takes the rest of the message.
  if (SendFrame(pub_, options_.topic.data(), options_.topic.size(), true, ZMQ_DONTWAIT) < 0) {
    if (zmq_errno() != EAGAIN) KVTIER_LOG_FIRST(kWarning, "kv_events: send: ", ZmqError());
    dropped_batches_.fetch_add(1, std::memory_order_relaxed);
  } else {
    SendFrame(pub_, seq_bytes, 8, true, ZMQ_DONTWAIT);
    SendFrame(pub_, payload.data(), payload.size(), false, ZMQ_DONTWAIT);
    published_batches_.fetch_add(1, std::memory_order_relaxed);
  }
  replay_bytes_ += payload.size();
  replay_.push_back(Buffered{seq, std::move(payload)});
  while (replay_.size() > options_.replay_buffer ||
         (replay_.size() > 1 && replay_bytes_ > options_.replay_buffer_bytes)) {
    replay_bytes_ -= replay_.front().payload.size();
    replay_.pop_front();
  }
  next_seq_.store(seq + 1, std::memory_order_release);
}

void KvEventPublisher::ServeReplay() {
  while (true) {
    // A request: [identity, (empty delimiter), start_seq as 8 bytes big-endian].
    std::vector<std::string> frames;
    bool more = true;
    while (more) {
      zmq_msg_t msg;
      zmq_msg_init(&msg);
      if (zmq_msg_recv(&msg, router_, frames.empty() ? ZMQ_DONTWAIT : 0) < 0) {
        zmq_msg_close(&msg);
        if (frames.empty()) return;  // EAGAIN: no more requests
        more = false;
        break;
      }
      frames.emplace_back(static_cast<const char*>(zmq_msg_data(&msg)), zmq_msg_size(&msg));
      more = zmq_msg_more(&msg) != 0;
      zmq_msg_close(&msg);
    }
    if (frames.size() < 2) continue;
    const std::string& identity = frames.front();
    const std::string& start = frames.back();
    replay_requests_.fetch_add(1, std::memory_order_relaxed);
    auto reply = [&](const char seq[8], const std::string& payload) {
      SendFrame(router_, identity.data(), identity.size(), true, 0);
      SendFrame(router_, "", 0, true, 0);
      SendFrame(router_, seq, 8, true, 0);
      SendFrame(router_, payload.data(), payload.size(), false, 0);
    };
    if (start.size() == 8) {
      const uint64_t start_seq =
          ReadBigEndian64(reinterpret_cast<const unsigned char*>(start.data()));
      for (const Buffered& b : replay_) {
        if (b.seq < start_seq) continue;
        char seq_bytes[8];
        BigEndian64(b.seq, seq_bytes);
        reply(seq_bytes, b.payload);
      }
    } else {
      KVTIER_LOG_FIRST(kWarning, "kv_events: a replay request's start sequence has ", start.size(),
                       " bytes, not 8; answered with the terminator only");
    }
    char end[8];
    BigEndian64(~uint64_t{0}, end);  // -1 as a signed 64-bit integer
    reply(end, std::string());
  }
}

}  // namespace kvtier::kvevents
