// KvEventPublisher on a real EventLog and real ZeroMQ sockets (ipc:// in a temporary directory):
// the stream's frames, replay of a range with its terminator, drops when a subscriber's queue is
// full (counted, the sequence skips, replay fills the gap), the translation of moves and clears,
// and the tenant filter.
#include "daemon/kvevents/kv_event_publisher.h"

#include <chrono>
#include <random>
#include <sstream>
#include <thread>

#include "gtest/gtest.h"
#include "tests/testing/temp_dir.h"
#include "zmq.h"

#define MSGPACK_NO_BOOST 1
#include "msgpack.hpp"

namespace kvtier::kvevents {
namespace {

// A 32-byte hash whose event hash (its last 8 bytes, big-endian) is 0x100 + tail.
index::BlockHash HashOf(uint8_t tail) {
  index::BlockHash h{};
  h[0] = 0x7f;
  h[30] = 0x01;
  h[31] = tail;
  return h;
}

store::StoreEvent Stored(index::NamespaceId ns, uint8_t tail) {
  store::StoreEvent e;
  e.kind = store::StoreEventKind::kStored;
  e.ns = ns;
  e.hash = HashOf(tail);
  e.tier = index::Tier::kHost;
  return e;
}

uint64_t Seq(const std::string& frame) {
  uint64_t v = 0;
  for (unsigned char c : frame) v = (v << 8) | c;
  return v;
}

std::string Recv(void* socket) {
  zmq_msg_t msg;
  zmq_msg_init(&msg);
  std::string out;
  if (zmq_msg_recv(&msg, socket, 0) >= 0) {
    out.assign(static_cast<const char*>(zmq_msg_data(&msg)), zmq_msg_size(&msg));
  }
  zmq_msg_close(&msg);
  return out;
}

// The events array of a batch, printed by msgpack-cxx (JSON-like).
std::string EventsText(const std::string& payload) {
  msgpack::object_handle oh = msgpack::unpack(payload.data(), payload.size());
  const msgpack::object& batch = oh.get();
  EXPECT_EQ(batch.type, msgpack::type::ARRAY);
  EXPECT_EQ(batch.via.array.size, 3u);
  std::ostringstream s;
  s << batch.via.array.ptr[1];
  return s.str();
}

class KvEventPublisherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::make_unique<kvtier::testing::TempDir>(kvtier::testing::TempDir::Create().value());
    ctx_ = zmq_ctx_new();
  }
  void TearDown() override {
    for (void* socket : sockets_) zmq_close(socket);
    zmq_ctx_term(ctx_);
  }

  // A socket of the test's context, closed at TearDown (also after a failed assertion).
  void* Socket(int type) {
    void* socket = zmq_socket(ctx_, type);
    const int linger = 0, timeout = 10000;
    zmq_setsockopt(socket, ZMQ_LINGER, &linger, sizeof(linger));
    zmq_setsockopt(socket, ZMQ_RCVTIMEO, &timeout, sizeof(timeout));
    sockets_.push_back(socket);
    return socket;
  }

  KvEventPublisherOptions Options() const {
    KvEventPublisherOptions o;
    o.endpoint = "ipc://" + dir_->File("pub");
    o.replay_endpoint = "ipc://" + dir_->File("replay");
    o.topic = "kv@test";
    o.encoding = KvEventEncoding::kMap;
    o.max_logged_events_per_batch = 1;
    return o;
  }

  // The batches replay returns from `start`, up to the terminator (which must come).
  std::vector<std::pair<uint64_t, std::string>> Replay(const std::string& endpoint,
                                                       uint64_t start) {
    void* dealer = Socket(ZMQ_DEALER);
    EXPECT_EQ(zmq_connect(dealer, endpoint.c_str()), 0);
    char start_bytes[8];
    for (int i = 0; i < 8; ++i) start_bytes[i] = static_cast<char>(start >> (56 - 8 * i));
    zmq_send(dealer, "", 0, ZMQ_SNDMORE);
    zmq_send(dealer, start_bytes, 8, 0);
    std::vector<std::pair<uint64_t, std::string>> out;
    while (true) {
      const std::string empty = Recv(dealer);
      const std::string seq = Recv(dealer);
      const std::string payload = Recv(dealer);
      EXPECT_EQ(empty, "");
      EXPECT_EQ(seq.size(), 8u);
      if (seq.size() != 8 || seq == std::string(8, '\xff')) {
        EXPECT_EQ(payload, "");
        break;
      }
      out.emplace_back(Seq(seq), payload);
    }
    return out;
  }

  static void WaitForSequence(const KvEventPublisher& p, uint64_t next) {
    for (int i = 0; i < 1000 && p.next_sequence() < next; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_EQ(p.next_sequence(), next);
  }

  std::unique_ptr<kvtier::testing::TempDir> dir_;
  void* ctx_ = nullptr;
  std::vector<void*> sockets_;
};

TEST_F(KvEventPublisherTest, PublishesFramesAndReplaysARange) {
  service::EventLog log(1, 1000);
  auto publisher = KvEventPublisher::Create(Options(), &log);
  ASSERT_TRUE(publisher.ok()) << publisher.status();
  void* sub = Socket(ZMQ_SUB);
  zmq_setsockopt(sub, ZMQ_SUBSCRIBE, "kv@", 3);
  ASSERT_EQ(zmq_connect(sub, (*publisher)->endpoint().c_str()), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the subscription travels
  for (uint8_t i = 0; i < 3; ++i) {
    log.OnEvent(Stored(1 + i % 2, i));  // namespaces alternate: no merging
    ASSERT_NO_FATAL_FAILURE(WaitForSequence(**publisher, i + 1u));
  }
  for (uint64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(Recv(sub), "kv@test");
    EXPECT_EQ(Seq(Recv(sub)), i);
    int more = 0;
    size_t size = sizeof(more);
    zmq_getsockopt(sub, ZMQ_RCVMORE, &more, &size);
    ASSERT_EQ(more, 1);
    EXPECT_EQ(EventsText(Recv(sub)),
              "[{\"type\":\"BlockStored\",\"block_hashes\":[" + std::to_string(0x100 + i) +
                  "],\"token_ids\":[],\"block_size\":0,\"medium\":\"CPU\"}]");
  }
  const auto replayed = Replay((*publisher)->replay_endpoint(), 1);
  ASSERT_EQ(replayed.size(), 2u);
  EXPECT_EQ(replayed[0].first, 1u);
  EXPECT_EQ(replayed[1].first, 2u);
  EXPECT_TRUE(Replay((*publisher)->replay_endpoint(), 3).empty());  // the terminator alone
  const KvEventPublisher::Counters c = (*publisher)->counters();
  EXPECT_EQ(c.published_batches, 3u);
  EXPECT_EQ(c.dropped_batches, 0u);
  EXPECT_EQ(c.replay_requests, 2u);
  publisher->reset();
}

// A subscriber that does not read: once its queue (send_hwm messages, past the kernel's socket
// buffers) is full, batches are dropped and counted, their sequence numbers skipped, and replay
// still returns every one.
TEST_F(KvEventPublisherTest, AFullQueueDropsAndReplayFillsTheGap) {
  KvEventPublisherOptions o = Options();
  o.send_hwm = 1;
  service::EventLog log(1, 1 << 16);
  auto publisher = KvEventPublisher::Create(o, &log);
  ASSERT_TRUE(publisher.ok()) << publisher.status();
  void* sub = Socket(ZMQ_SUB);
  const int hwm = 1;
  zmq_setsockopt(sub, ZMQ_RCVHWM, &hwm, sizeof(hwm));
  zmq_setsockopt(sub, ZMQ_SUBSCRIBE, "", 0);
  ASSERT_EQ(zmq_connect(sub, (*publisher)->endpoint().c_str()), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  // About 4 MB of hashes (9 bytes each in msgpack), far past the sockets' buffers.
  std::mt19937_64 rng(7);
  for (int i = 0; i < 400000; ++i) {
    store::StoreEvent e = Stored(1, 0);
    const uint64_t v = rng() | (uint64_t{1} << 63);
    for (int b = 0; b < 8; ++b) e.hash[31 - b] = static_cast<uint8_t>(v >> (8 * b));
    log.OnEvent(e);
  }
  // One KV event per logged event: wait until the publisher has read them all.
  const uint64_t logged = log.last_sequence();
  for (int i = 0; i < 1000 && (*publisher)->counters().published_events < logged; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ((*publisher)->counters().published_events, logged);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the last Send
  const KvEventPublisher::Counters c = (*publisher)->counters();
  EXPECT_GT(c.dropped_batches, 0u);
  EXPECT_EQ(c.published_batches + c.dropped_batches, (*publisher)->next_sequence());
  const auto replayed = Replay((*publisher)->replay_endpoint(), 0);
  ASSERT_EQ(replayed.size(), (*publisher)->next_sequence());
  for (uint64_t i = 0; i < replayed.size(); ++i) EXPECT_EQ(replayed[i].first, i);
}

TEST_F(KvEventPublisherTest, MovesClearsAndTheTenantFilter) {
  KvEventPublisherOptions o = Options();
  o.encoding = KvEventEncoding::kArray;
  o.block_size = 16;
  o.tenants = {"a"};
  o.tenant_of = [](index::NamespaceId ns) -> std::optional<std::string> {
    if (ns == 1) return "a";
    if (ns == 2) return "b";
    return std::nullopt;
  };
  service::EventLog log(1, 1000);
  auto publisher = KvEventPublisher::Create(o, &log);
  ASSERT_TRUE(publisher.ok()) << publisher.status();
  store::StoreEvent moved = Stored(1, 9);
  moved.kind = store::StoreEventKind::kMoved;
  moved.tier = index::Tier::kHost;
  moved.to_tier = index::Tier::kDisk;
  store::StoreEvent cleared_b;
  cleared_b.kind = store::StoreEventKind::kCleared;
  cleared_b.ns = 2;
  store::StoreEvent cleared_a = cleared_b;
  cleared_a.ns = 1;
  log.OnEvent(Stored(2, 1));  // tenant b: not published
  log.OnEvent(Stored(3, 2));  // unknown namespace: not published
  store::StoreEvent cluster = Stored(1, 7);
  cluster.shared_tier = true;  // the fleet's cluster tier: not this node's, not published
  log.OnEvent(cluster);
  log.OnEvent(moved);
  log.OnEvent(cleared_b);
  log.OnEvent(cleared_a);
  for (int i = 0; i < 500 && log.last_sequence() != 6; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  // Two batches: the move, the clear of namespace 1.
  ASSERT_NO_FATAL_FAILURE(WaitForSequence(**publisher, 2));
  const auto replayed = Replay((*publisher)->replay_endpoint(), 0);
  ASSERT_EQ(replayed.size(), 2u);
  EXPECT_EQ(EventsText(replayed[0].second),
            "[[\"BlockStored\",[265],null,[],16,null,\"STORAGE\",null,null,null,null,null],"
            "[\"BlockRemoved\",[265],\"CPU\",null]]");
  EXPECT_EQ(EventsText(replayed[1].second), "[[\"AllBlocksCleared\"]]");
}

// Events that left the log's window before the publisher read them are counted as lost; what the
// log still holds is published.
TEST_F(KvEventPublisherTest, CountsEventsTheLogLostUnread) {
  service::EventLog log(1, 2);
  for (uint8_t i = 0; i < 5; ++i) log.OnEvent(Stored(1 + i % 2, i));
  auto publisher = KvEventPublisher::Create(Options(), &log);
  ASSERT_TRUE(publisher.ok()) << publisher.status();
  ASSERT_NO_FATAL_FAILURE(WaitForSequence(**publisher, 2));
  EXPECT_EQ((*publisher)->counters().lost_log_events, 3u);
}

// The replay buffer keeps at most replay_buffer batches and replay_buffer_bytes of payload, the
// newest batch always.
TEST_F(KvEventPublisherTest, TheReplayBufferIsBoundedInBatchesAndBytes) {
  for (const bool by_bytes : {false, true}) {
    SCOPED_TRACE(by_bytes ? "bytes" : "batches");
    KvEventPublisherOptions o = Options();
    o.replay_endpoint = "ipc://" + dir_->File(by_bytes ? "replay-bytes" : "replay-batches");
    o.endpoint = "ipc://" + dir_->File(by_bytes ? "pub-bytes" : "pub-batches");
    o.replay_buffer = by_bytes ? 100 : 2;
    o.replay_buffer_bytes = by_bytes ? 1 : size_t{1} << 20;
    service::EventLog log(1, 100);
    auto publisher = KvEventPublisher::Create(o, &log);
    ASSERT_TRUE(publisher.ok()) << publisher.status();
    for (uint8_t i = 0; i < 4; ++i) {
      log.OnEvent(Stored(1 + i % 2, i));
      ASSERT_NO_FATAL_FAILURE(WaitForSequence(**publisher, i + 1u));
    }
    const auto replayed = Replay((*publisher)->replay_endpoint(), 0);
    ASSERT_EQ(replayed.size(), by_bytes ? 1u : 2u);
    EXPECT_EQ(replayed.back().first, 3u);
  }
}

TEST_F(KvEventPublisherTest, AnEndpointThatCannotBindFailsCreate) {
  service::EventLog log(1, 10);
  KvEventPublisherOptions o = Options();
  o.endpoint = "ipc://" + dir_->File("missing") + "/pub";
  auto publisher = KvEventPublisher::Create(o, &log);
  ASSERT_FALSE(publisher.ok());
  EXPECT_EQ(publisher.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(publisher.status().message(), "kv_events.endpoint: cannot bind " + o.endpoint +
                                              ": No such file or directory (ENOENT)");
  EXPECT_EQ(log.listener_count(), 0u);
}

}  // namespace
}  // namespace kvtier::kvevents
