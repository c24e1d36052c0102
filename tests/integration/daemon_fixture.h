// A fixture for tests against a real kvtierd process: starts the binary (KVTIERD_PATH) on a
// temporary state directory and Unix socket with small tiers, connects a gRPC stub, and offers an
// engine helper that creates a host pool (a shared-memory file in the temporary directory), fills
// pages and registers them, and a helper that corrupts the disk tier's files. SpawnKvtierd starts
// one daemon process for tests that are not gtest fixtures (the daemon crash harness).
#ifndef KVTIER_TESTS_INTEGRATION_DAEMON_FIXTURE_H_
#define KVTIER_TESTS_INTEGRATION_DAEMON_FIXTURE_H_

#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "codec/codec.h"
#include "codec/dtype.h"
#include "common/coding.h"
#include "daemon/service/proto_convert.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "kvtier/v1/service.grpc.pb.h"
#include "tests/testing/temp_dir.h"

extern char** environ;

namespace kvtier::integration {

// A free TCP port on 127.0.0.1 (bound and released; good enough for tests).
inline int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

// A TCP connection to 127.0.0.1:port; -1 when it fails.
inline int ConnectLoopback(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// GET http://127.0.0.1:port/path; returns "" on failure.
inline std::string HttpGet(int port, const std::string& path, int* code = nullptr) {
  const int fd = ConnectLoopback(port);
  if (fd < 0) return "";
  const std::string req = "GET " + path + " HTTP/1.1\r\nHost: localhost\r\n\r\n";
  (void)!write(fd, req.data(), req.size());
  std::string resp;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) resp.append(buf, static_cast<size_t>(n));
  close(fd);
  if (code != nullptr) *code = resp.size() > 12 ? std::atoi(resp.c_str() + 9) : 0;
  const size_t body = resp.find("\r\n\r\n");
  return body == std::string::npos ? "" : resp.substr(body + 4);
}

// The kvtierd to test: the one next to this test binary when there is one (a bundle copied to
// another machine), else the one the build made (KVTIERD_PATH).
inline std::string KvtierdPath() {
  char self[4096] = {};
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) {
    std::string dir(self, static_cast<size_t>(n));
    dir.resize(dir.rfind('/'));
    const std::string beside = dir + "/kvtierd";
    if (access(beside.c_str(), X_OK) == 0) return beside;
  }
  return KVTIERD_PATH;
}

// A kvtierd child process started by SpawnKvtierd, and a channel to its socket.
struct KvtierdChild {
  pid_t pid = 0;
  std::shared_ptr<grpc::Channel> channel;
};

// Spawns kvtierd with `args` (args[0] is the binary) with its stderr appended to `log`, and waits
// until it answers Hello on the Unix socket `socket`. The channel reconnects within 100 ms, so
// that it finds the socket as soon as it appears. Internal (with the reason) when the process
// cannot be spawned; Unavailable when it exits at start (it is reaped) or does not answer within
// 30 s (it is killed and reaped then). Blocks up to 30 s.
inline absl::StatusOr<KvtierdChild> SpawnKvtierd(std::vector<std::string> args,
                                                 const std::string& socket,
                                                 const std::string& log) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 2, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  KvtierdChild child;
  const int rc = posix_spawn(&child.pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    return absl::InternalError(absl::StrCat("cannot spawn ", args[0], ": ", std::strerror(rc)));
  }
  grpc::ChannelArguments channel_args;
  channel_args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 20);
  channel_args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 20);
  channel_args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 100);
  child.channel =
      grpc::CreateCustomChannel("unix:" + socket, grpc::InsecureChannelCredentials(), channel_args);
  std::unique_ptr<v1::KvTier::Stub> stub = v1::KvTier::NewStub(child.channel);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (waitpid(child.pid, &status, WNOHANG) == child.pid) {
      return absl::UnavailableError(
          absl::StrCat("kvtierd exited at start (", WIFEXITED(status) ? "exit status " : "signal ",
                       WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), ")"));
    }
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
    ctx.set_wait_for_ready(true);
    v1::HelloRequest req;
    v1::HelloResponse resp;
    if (stub->Hello(&ctx, req, &resp).ok()) return child;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(child.pid, SIGKILL);
  waitpid(child.pid, nullptr, 0);
  return absl::UnavailableError("kvtierd did not answer Hello within 30 s");
}

class DaemonFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::make_unique<kvtier::testing::TempDir>(kvtier::testing::TempDir::Create().value());
    metrics_port_ = FreePort();
  }
  void TearDown() override {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }

  std::string Socket() const { return dir_->File("kvtier.sock"); }

  std::vector<std::string> Args() const {
    return {KvtierdPath(),
            "--state-dir=" + dir_->File("state"),
            "--socket=" + Socket(),
            "--set=host.capacity=64MiB",
            "--set=host.chunk=4MiB",
            "--set=host.pin=none",
            "--set=disk.capacity=64MiB",
            "--set=disk.chunk=4MiB",
            "--set=pools.allowed_dirs=[" + dir_->path() + "]",
            "--set=metrics.listen=127.0.0.1:" + std::to_string(metrics_port_),
            "--set=engines.min_lease_seconds=0.2",
            "--set=server.workers=4"};
  }

  // Starts kvtierd with Args() plus `extra`, and waits until it accepts RPCs (SpawnKvtierd). A
  // start that fails is a fatal failure: call it as ASSERT_NO_FATAL_FAILURE(StartDaemon(...)).
  void StartDaemon(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = Args();
    args.insert(args.end(), extra.begin(), extra.end());
    absl::StatusOr<KvtierdChild> child = SpawnKvtierd(args, Socket(), dir_->File("kvtierd.log"));
    if (!child.ok()) FAIL() << child.status().message() << ":\n" << Log();
    pid_ = child->pid;
    channel_ = std::move(child->channel);
    stub_ = v1::KvTier::NewStub(channel_);
  }

  // kvtierd with Args() plus `extra`, run to its exit, its stdout and stderr in `out`; returns the
  // exit status, or 137 when it ran past `timeout_s` and got SIGKILL (kvtierd blocks SIGTERM,
  // which is timeout's default). Defined below RunCommand.
  int RunKvtierd(const std::vector<std::string>& extra, std::string* out, int timeout_s = 60) const;

  // Sends `sig` to the daemon this fixture started. Without one it fails the test and sends
  // nothing: kill(0, sig) would signal the whole process group, ctest and CI included.
  void SignalDaemon(int sig) {
    if (pid_ <= 0) {
      ADD_FAILURE() << "no kvtierd to send signal " << sig << " to (it did not start)";
      return;
    }
    kill(pid_, sig);
  }

  // Sends `sig` and waits for the exit; returns the exit status (-1 when killed by a signal, or
  // when there is no daemon, which fails the test).
  int StopDaemon(int sig = SIGTERM) {
    if (pid_ <= 0) {
      ADD_FAILURE() << "no kvtierd to stop (it did not start)";
      return -1;
    }
    kill(pid_, sig);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = 0;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  std::string Log() const {
    std::ifstream in(dir_->File("kvtierd.log"));
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

 public:
  // Gives a call a 20-second deadline.
  static grpc::ClientContext* Context(grpc::ClientContext* ctx) {
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    return ctx;
  }

 protected:
  std::unique_ptr<kvtier::testing::TempDir> dir_;
  int metrics_port_ = 0;
  pid_t pid_ = 0;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::KvTier::Stub> stub_;
};

// A small GQA layout: 2 layers, 2 KV heads of 64 dims, 16 tokens, BF16 (16 KiB pages).
inline codec::PageLayout TestLayout() {
  return codec::BuildGqaLayout({2, 2, 64, 16, codec::DType::kBf16, 0, 0}).value();
}

// An engine's host pool in a shared-memory file, and its registration.
class TestEngine {
 public:
  TestEngine(const std::string& file, uint32_t slots, codec::PageLayout layout = TestLayout())
      : path_(file), slots_(slots), layout_(std::move(layout)) {
    bytes_ = layout_.pools[0].slot_bytes * slots;
    const int fd = open(path_.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(ftruncate(fd, static_cast<off_t>(bytes_)), 0);
    base_ = static_cast<uint8_t*>(mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    close(fd);
  }
  ~TestEngine() { munmap(base_, bytes_); }

  v1::RegisterEngineRequest Request(const std::string& tenant = "",
                                    const std::string& codec = "nvfp4") const {
    v1::RegisterEngineRequest req;
    req.set_engine_name("test-engine");
    req.set_tenant(tenant);
    req.set_model("test-model");
    service::LayoutToProto(layout_, req.mutable_layout());
    service::CodecToProto(codec::CodecSpec::Parse(codec).value(), req.mutable_codec());
    v1::PoolRegistration* pool = req.add_pools();
    pool->set_name(layout_.pools[0].name);
    pool->set_slots(slots_);
    pool->mutable_shared_memory()->set_path(path_);
    pool->mutable_shared_memory()->set_size_bytes(bytes_);
    return req;
  }

  uint8_t* page(uint32_t i) const { return base_ + i * layout_.pools[0].slot_bytes; }
  uint64_t page_bytes() const { return layout_.pools[0].slot_bytes; }

  // Fills page `i` with N(0, 1) values from `seed`.
  void Fill(uint32_t i, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (const codec::BufferSpec& b : layout_.buffers) {
      uint8_t* base = page(i) + b.offset_bytes;
      const uint64_t elems = layout_.Rows(b) * b.RowStride();
      for (uint64_t e = 0; e < elems; ++e) codec::StoreFromFloat(b.dtype, normal(rng), base, e);
    }
  }
  // What page `i` becomes after an encode and a decode with `codec`.
  std::vector<uint8_t> RoundTrip(uint32_t i, const std::string& codec = "nvfp4") const {
    auto c = codec::Codec::Create(layout_, codec::CodecSpec::Parse(codec).value()).value();
    std::vector<uint8_t> block(c->block_bytes());
    codec::HotPageView in;
    codec::MutableHotPageView out;
    std::vector<uint8_t> result(page_bytes(), 0);
    for (const codec::BufferSpec& b : layout_.buffers) {
      in.base.push_back(page(i) + b.offset_bytes);
      out.base.push_back(result.data() + b.offset_bytes);
    }
    EXPECT_TRUE(c->Encode(in, absl::MakeSpan(block)).ok());
    EXPECT_TRUE(c->Decode(block, out).ok());
    return result;
  }
  std::vector<uint8_t> Bytes(uint32_t i) const {
    return std::vector<uint8_t>(page(i), page(i) + page_bytes());
  }

  const codec::PageLayout& layout() const { return layout_; }

 private:
  std::string path_;
  uint32_t slots_;
  codec::PageLayout layout_;
  uint64_t bytes_ = 0;
  uint8_t* base_ = nullptr;
};

// The 32-byte hash of test block `i` of chain `chain`.
inline std::string Hash(uint64_t chain, uint64_t i) {
  std::string h(32, '\0');
  EncodeFixed64(h.data(), chain);
  EncodeFixed64(h.data() + 8, i);
  h[31] = 0x5A;
  return h;
}

// Runs a shell command; its stdout and stderr go to `out`. Returns the exit status (-1 when
// killed by a signal).
inline int RunCommand(const std::string& cmd, std::string* out) {
  FILE* p = popen(("( " + cmd + " ) 2>&1").c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out->append(buf, n);
  const int status = pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Flips the byte 2000 bytes into every 4 KiB of the disk tier's files that holds data (past the
// block headers, which are 64 + 32 bytes per buffer): every disk copy fails its payload checksum.
// Returns how many bytes it flipped.
inline int CorruptDiskFiles(const std::string& disk_dir) {
  int flipped = 0;
  DIR* dir = opendir(disk_dir.c_str());
  if (dir == nullptr) return 0;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    const std::string path = disk_dir + "/" + entry->d_name;
    const int fd = open(path.c_str(), O_RDWR);
    if (fd < 0) continue;
    std::vector<uint8_t> page(4096);
    for (off_t off = 0; pread(fd, page.data(), page.size(), off) == 4096; off += 4096) {
      bool data = false;
      for (uint8_t b : page) data |= b != 0;
      if (!data) continue;
      page[2000] ^= 0xFF;
      flipped += pwrite(fd, &page[2000], 1, off + 2000) == 1;
    }
    close(fd);
  }
  closedir(dir);
  return flipped;
}

inline int DaemonFixture::RunKvtierd(const std::vector<std::string>& extra, std::string* out,
                                     int timeout_s) const {
  std::vector<std::string> args = Args();
  args.insert(args.end(), extra.begin(), extra.end());
  std::string cmd = "timeout -s KILL " + std::to_string(timeout_s);
  for (const std::string& a : args) cmd += " '" + a + "'";
  return RunCommand(cmd, out);
}

// RPC helpers: each call gets Context()'s deadline and must succeed.
inline v1::RegisterEngineResponse Register(v1::KvTier::Stub& stub,
                                           const v1::RegisterEngineRequest& req) {
  grpc::ClientContext ctx;
  v1::RegisterEngineResponse resp;
  grpc::Status st = stub.RegisterEngine(DaemonFixture::Context(&ctx), req, &resp);
  EXPECT_TRUE(st.ok()) << st.error_message();
  return resp;
}

inline v1::OffloadResponse Offload(v1::KvTier::Stub& stub, const std::string& engine,
                                   uint64_t chain, uint32_t first_page, uint32_t pages,
                                   bool durable = false) {
  v1::OffloadRequest req;
  req.set_engine_id(engine);
  req.set_durable(durable);
  if (durable) req.set_ack(v1::WRITE_ACK_DURABLE);
  for (uint32_t i = 0; i < pages; ++i) {
    v1::OffloadItem* item = req.add_items();
    item->set_block_hash(Hash(chain, i));
    item->set_page_index(first_page + i);
  }
  grpc::ClientContext ctx;
  v1::OffloadResponse resp;
  grpc::Status st = stub.Offload(DaemonFixture::Context(&ctx), req, &resp);
  EXPECT_TRUE(st.ok()) << st.error_message();
  return resp;
}

// The daemon's statistics of one tier (an empty TierStats, and a test failure, when it has none).
inline v1::TierStats TierStatsOf(v1::KvTier::Stub& stub, v1::Tier which) {
  v1::StatsRequest req;
  grpc::ClientContext ctx;
  v1::StatsResponse resp;
  EXPECT_TRUE(stub.Stats(DaemonFixture::Context(&ctx), req, &resp).ok());
  for (const v1::TierStats& t : resp.tiers()) {
    if (t.tier() == which) return t;
  }
  ADD_FAILURE() << "no tier " << which;
  return v1::TierStats();
}

inline v1::LookupResponse Lookup(v1::KvTier::Stub& stub, const std::string& engine, uint64_t chain,
                                 uint32_t blocks) {
  v1::LookupRequest req;
  req.set_engine_id(engine);
  for (uint32_t i = 0; i < blocks; ++i) req.add_block_hashes(Hash(chain, i));
  grpc::ClientContext ctx;
  v1::LookupResponse resp;
  grpc::Status st = stub.Lookup(DaemonFixture::Context(&ctx), req, &resp);
  EXPECT_TRUE(st.ok()) << st.error_message();
  return resp;
}

inline v1::OnboardResponse Onboard(v1::KvTier::Stub& stub, const std::string& engine,
                                   uint64_t chain, uint32_t blocks, uint32_t first_page) {
  v1::OnboardRequest req;
  req.set_engine_id(engine);
  for (uint32_t i = 0; i < blocks; ++i) {
    v1::OnboardItem* item = req.add_items();
    item->set_block_hash(Hash(chain, i));
    item->set_page_index(first_page + i);
  }
  grpc::ClientContext ctx;
  v1::OnboardResponse resp;
  grpc::Status st = stub.Onboard(DaemonFixture::Context(&ctx), req, &resp);
  EXPECT_TRUE(st.ok()) << st.error_message();
  return resp;
}

}  // namespace kvtier::integration

#endif  // KVTIER_TESTS_INTEGRATION_DAEMON_FIXTURE_H_
