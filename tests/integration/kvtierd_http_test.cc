// kvtierd's HTTP endpoint as the kubelet and Prometheus meet it: /healthz and /readyz answer within
// the DaemonSet's probe timeout while other clients hold connections open without a request or
// with half of one, and /metrics still renders; /readyz answers 503 "draining" during an admin
// Drain and 200 again once it is cancelled, while /healthz stays 200; probes during SIGTERM leave
// the exit clean; other paths get 404, other methods 405.
#include <poll.h>

#include <atomic>

#include "tests/integration/daemon_fixture.h"

namespace kvtier::integration {
namespace {

// timeoutSeconds of every probe in deploy/kubernetes/daemonset.yaml: a probe that takes longer
// counts as failed, and three failed liveness probes restart the daemon.
constexpr std::chrono::seconds kProbeTimeout(3);

struct HttpResponse {
  int code = 0;  // 0: no complete response within the timeout
  std::string head;
  std::string body;
};

// Sends `request` on a new connection and reads until the server closes it, for at most
// `timeout` in all.
HttpResponse Exchange(int port, const std::string& request, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  HttpResponse out;
  const int fd = ConnectLoopback(port);
  if (fd < 0) return out;
  if (send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    close(fd);
    return out;
  }
  std::string raw;
  bool closed = false;
  while (!closed) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
    char buf[4096];
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) closed = true;
    if (n > 0) raw.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  const size_t end = raw.find("\r\n\r\n");
  if (!closed || end == std::string::npos || raw.size() < 12) return out;
  out.code = std::atoi(raw.c_str() + 9);
  out.head = raw.substr(0, end);
  out.body = raw.substr(end + 4);
  return out;
}

HttpResponse Get(int port, const std::string& path,
                 std::chrono::milliseconds timeout = kProbeTimeout) {
  return Exchange(port, "GET " + path + " HTTP/1.1\r\nHost: localhost\r\n\r\n", timeout);
}

using KvtierdHttpTest = DaemonFixture;

TEST_F(KvtierdHttpTest, ProbesAnswerWithinTheirTimeoutWhileOtherConnectionsWait) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  // Ten clients that connect and send nothing (a TCP check, a scanner, a stuck scraper) and ten
  // that send half a request and stop: more than a server with a pool of threads, each keeping one
  // connection, would have (five were enough to hold the first server's only thread for 10 s).
  std::vector<int> held;
  for (int i = 0; i < 10; ++i) held.push_back(ConnectLoopback(metrics_port_));
  for (int i = 0; i < 10; ++i) {
    const int fd = ConnectLoopback(metrics_port_);
    const std::string partial = "GET /metrics HTTP/1.1\r\nHost: localhost\r\n";
    EXPECT_EQ(send(fd, partial.data(), partial.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(partial.size()));
    held.push_back(fd);
  }
  for (int fd : held) ASSERT_GE(fd, 0);

  for (int round = 0; round < 2; ++round) {
    const HttpResponse health = Get(metrics_port_, "/healthz");
    EXPECT_EQ(health.code, 200) << "/healthz did not answer within " << kProbeTimeout.count()
                                << " s while " << held.size() << " connections were open";
    EXPECT_EQ(health.body, "ok\n");
    const HttpResponse ready = Get(metrics_port_, "/readyz");
    EXPECT_EQ(ready.code, 200) << "/readyz did not answer within " << kProbeTimeout.count()
                               << " s while " << held.size() << " connections were open";
    EXPECT_EQ(ready.body, "ready\n");
  }
  const HttpResponse metrics = Get(metrics_port_, "/metrics");
  EXPECT_EQ(metrics.code, 200);
  EXPECT_NE(metrics.body.find("\nkvtier_ready 1\n"), std::string::npos) << metrics.body;
  EXPECT_NE(metrics.body.find("\nkvtier_tier_capacity_bytes{tier=\"host\"} 67108864\n"),
            std::string::npos)
      << metrics.body;
  for (int fd : held) close(fd);
  EXPECT_EQ(StopDaemon(SIGTERM), 0) << Log();
}

TEST_F(KvtierdHttpTest, ReadyzIsDrainingDuringAnAdminDrainAndHealthzStaysOk) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  auto admin = v1::KvTierAdmin::NewStub(channel_);
  {
    grpc::ClientContext ctx;
    v1::DrainRequest req;
    v1::DrainResponse resp;
    const grpc::Status st = admin->Drain(Context(&ctx), req, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_TRUE(resp.drained());
  }
  HttpResponse ready = Get(metrics_port_, "/readyz");
  EXPECT_EQ(ready.code, 503);
  EXPECT_EQ(ready.body, "draining\n");
  const HttpResponse health = Get(metrics_port_, "/healthz");
  EXPECT_EQ(health.code, 200) << health.body;
  EXPECT_EQ(health.body, "ok\n");
  const HttpResponse metrics = Get(metrics_port_, "/metrics");
  EXPECT_NE(metrics.body.find("\nkvtier_ready 0\n"), std::string::npos) << metrics.body;

  {
    grpc::ClientContext ctx;
    v1::DrainRequest req;
    req.set_cancel(true);
    v1::DrainResponse resp;
    const grpc::Status st = admin->Drain(Context(&ctx), req, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }
  ready = Get(metrics_port_, "/readyz");
  EXPECT_EQ(ready.code, 200);
  EXPECT_EQ(ready.body, "ready\n");
  EXPECT_EQ(StopDaemon(SIGTERM), 0) << Log();
}

// Probes keep coming while kvtierd stops: none may find the gRPC server half gone (a Hello on the
// in-process channel of a server that has shut down crashes gRPC).
TEST_F(KvtierdHttpTest, ProbesWhileTheDaemonStopsLeaveItACleanExit) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  std::atomic<bool> stop{false};
  std::atomic<int> answered{0};
  std::thread prober([&] {
    while (!stop) {
      if (Get(metrics_port_, "/healthz", std::chrono::seconds(1)).code != 0) ++answered;
    }
  });
  while (answered == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const int status = StopDaemon(SIGTERM);
  stop = true;
  prober.join();
  EXPECT_EQ(status, 0) << "kvtierd did not exit 0 under probes:\n" << Log();
}

TEST_F(KvtierdHttpTest, OtherPathsAndMethodsAreRefused) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  const HttpResponse missing = Get(metrics_port_, "/nope");
  EXPECT_EQ(missing.code, 404);
  EXPECT_EQ(missing.body, "not found: /metrics, /healthz, /readyz\n");
  const HttpResponse post = Exchange(
      metrics_port_, "POST /metrics HTTP/1.1\r\nHost: localhost\r\nContent-Length: 4\r\n\r\nabcd",
      kProbeTimeout);
  EXPECT_EQ(post.code, 405);
  // A query string is ignored; HEAD gets the headers only.
  EXPECT_EQ(Get(metrics_port_, "/readyz?verbose=1").code, 200);
  const HttpResponse head =
      Exchange(metrics_port_, "HEAD /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n", kProbeTimeout);
  EXPECT_EQ(head.code, 200);
  EXPECT_EQ(head.body, "");
}

}  // namespace
}  // namespace kvtier::integration
