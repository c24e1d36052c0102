// KvtierdProcess: one kvtierd child process for the crash harness: spawned with the harness's
// flags (small tiers so that blocks move to disk, the state directory given, metrics on a free
// port), waited for until it answers Hello, SIGKILLed, and read (a gauge on /metrics, the tail of
// its log). Not thread-safe: the harness's main thread owns it; client threads share its stubs
// (gRPC stubs are thread-safe) for the life of one incarnation.
#ifndef KVTIER_TESTS_CRASH_KVTIERD_PROCESS_H_
#define KVTIER_TESTS_CRASH_KVTIERD_PROCESS_H_

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "kvtier/v1/service.grpc.pb.h"
#include "tests/integration/daemon_fixture.h"

extern char** environ;

namespace kvtier::crash {

class KvtierdProcess {
 public:
  using Clock = std::chrono::steady_clock;

  // kvtierd at path `binary`, with its socket, log and allowed pool directory in `dir` and its
  // state directory (index, and the disk tier under it as by default) at `state_dir`. The tiers
  // are small: an 8 MiB host tier, so that blocks move to the 48 MiB disk tier all the time; the
  // index stops taking writes below 16 MiB free and keeps a 4 MiB reserve (a 128 MiB state drive
  // holds all of it with room to spare until it is filled on purpose).
  KvtierdProcess(std::string binary, std::string dir, std::string state_dir)
      : binary_(std::move(binary)), dir_(std::move(dir)), state_dir_(std::move(state_dir)) {}
  ~KvtierdProcess() { Kill(); }

  std::string socket() const { return dir_ + "/kvtier.sock"; }
  std::string log_path() const { return dir_ + "/kvtierd.log"; }
  int metrics_port() const { return metrics_port_; }
  v1::KvTier::Stub& stub() { return *stub_; }
  v1::KvTierAdmin::Stub& admin() { return *admin_; }
  pid_t pid() const { return pid_; }

  // Spawns kvtierd (stderr to log_path(), truncated) and waits until it answers Hello on a new
  // channel, whose stubs stub() and admin() then return. False (with the reason in `why`) when it
  // cannot be spawned, exits, or does not answer within 30 s; it is killed then. Blocks.
  bool Start(std::string* why) {
    metrics_port_ = integration::FreePort();
    std::vector<std::string> args = {
        binary_,
        "--state-dir=" + state_dir_,
        "--socket=" + socket(),
        "--set=host.capacity=8MiB",
        "--set=host.chunk=1MiB",
        "--set=host.pin=none",
        "--set=disk.capacity=48MiB",
        "--set=disk.chunk=4MiB",
        "--set=index.min_free=16MiB",
        "--set=index.reserve=4MiB",
        "--set=pools.allowed_dirs=[" + dir_ + "]",
        "--set=metrics.listen=127.0.0.1:" + std::to_string(metrics_port_),
        "--set=server.workers=4",
        "--set=log.level=warning"};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 2, log_path().c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    const int rc = posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) {
      pid_ = 0;
      *why = absl::StrCat("cannot spawn ", binary_, ": ", std::strerror(rc));
      return false;
    }
    const auto started = Clock::now();
    const auto deadline = started + std::chrono::seconds(30);
    grpc::ChannelArguments channel_args;
    channel_args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 20);
    channel_args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 20);
    channel_args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 100);
    channel_ = grpc::CreateCustomChannel("unix:" + socket(), grpc::InsecureChannelCredentials(),
                                         channel_args);
    stub_ = v1::KvTier::NewStub(channel_);
    admin_ = v1::KvTierAdmin::NewStub(channel_);
    while (Clock::now() < deadline) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = 0;
        *why = absl::StrCat("kvtierd exited at start (", DescribeStatus(status), ")");
        return false;
      }
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
      ctx.set_wait_for_ready(true);
      v1::HelloRequest req;
      v1::HelloResponse resp;
      if (stub_->Hello(&ctx, req, &resp).ok()) {
        start_seconds_ = std::chrono::duration<double>(Clock::now() - started).count();
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    *why = "kvtierd did not answer Hello within 30 s";
    Kill();
    return false;
  }

  // True while the process has not exited; `status` receives its wait status when it has (and
  // the process is reaped).
  bool Alive(int* status) {
    if (pid_ <= 0) return false;
    if (waitpid(pid_, status, WNOHANG) == pid_) {
      pid_ = 0;
      return false;
    }
    return true;
  }

  // SIGKILL, and waits for the exit. Does nothing without a process.
  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = 0;
  }

  // The value of a gauge on /metrics, as text ("" when the endpoint or the gauge is missing).
  // Blocks for one HTTP request.
  std::string Metric(const std::string& name) const {
    const std::string text = integration::HttpGet(metrics_port_, "/metrics");
    const std::string key = "\n" + name + " ";
    const size_t at = ("\n" + text).find(key);
    if (at == std::string::npos) return "";
    const size_t begin = at + key.size() - 1;
    const size_t end = text.find('\n', begin);
    return text.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
  }

  // The last `lines` lines of the log, indented for a report.
  std::string LogTail(int lines) const {
    std::ifstream in(log_path());
    std::deque<std::string> tail;
    for (std::string line; std::getline(in, line);) {
      tail.push_back(line);
      if (tail.size() > static_cast<size_t>(lines)) tail.pop_front();
    }
    std::string out;
    for (const std::string& line : tail) absl::StrAppend(&out, "    | ", line, "\n");
    return out;
  }

  // Seconds from the spawn to the first Hello answered, of the last Start().
  double start_seconds() const { return start_seconds_; }

  // "exit status N", "signal N" for a wait status.
  static std::string DescribeStatus(int status) {
    if (WIFEXITED(status)) return absl::StrCat("exit status ", WEXITSTATUS(status));
    if (WIFSIGNALED(status)) return absl::StrCat("signal ", WTERMSIG(status));
    return absl::StrCat("wait status ", status);
  }

 private:
  const std::string binary_;
  const std::string dir_;
  const std::string state_dir_;
  pid_t pid_ = 0;
  int metrics_port_ = 0;
  double start_seconds_ = 0;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::KvTier::Stub> stub_;
  std::unique_ptr<v1::KvTierAdmin::Stub> admin_;
};

}  // namespace kvtier::crash

#endif  // KVTIER_TESTS_CRASH_KVTIERD_PROCESS_H_
