// KvtierdProcess: the daemon crash harness's kvtierd, one incarnation after another: started
// through integration::SpawnKvtierd with the harness's flags (small tiers so that blocks move to
// disk, the index's space settings, metrics on a free port), SIGKILLed, and read (a gauge on
// /metrics, the tail of its log). Not thread-safe: the harness's main thread owns it; client
// threads share its stubs (gRPC stubs are thread-safe) for the life of one incarnation.
#ifndef KVTIER_TESTS_CRASH_KVTIERD_PROCESS_H_
#define KVTIER_TESTS_CRASH_KVTIERD_PROCESS_H_

#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <deque>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "kvtier/v1/service.grpc.pb.h"
#include "tests/integration/daemon_fixture.h"

namespace kvtier::crash {

class KvtierdProcess {
 public:
  // kvtierd at path `binary`, with its socket, log and allowed pool directory in `dir` and its
  // state directory (the index, and the disk tier under it as by default) at `state_dir`. The
  // tiers are small: an 8 MiB host tier, so that blocks move to the 64 MiB disk tier all the
  // time; the index stops taking writes below 16 MiB free and keeps a 4 MiB reserve (a 128 MiB
  // state drive holds all of it with room to spare until it is filled on purpose).
  KvtierdProcess(std::string binary, std::string dir, std::string state_dir)
      : binary_(std::move(binary)), dir_(std::move(dir)), state_dir_(std::move(state_dir)) {}
  ~KvtierdProcess() { Kill(); }
  KvtierdProcess(const KvtierdProcess&) = delete;
  KvtierdProcess& operator=(const KvtierdProcess&) = delete;

  std::string socket() const { return dir_ + "/kvtier.sock"; }
  // Every incarnation's stderr, appended.
  std::string log_path() const { return dir_ + "/kvtierd.log"; }
  // REQUIRES: a successful Start(); valid until the next one.
  v1::KvTier::Stub& stub() { return *stub_; }
  v1::KvTierAdmin::Stub& admin() { return *admin_; }
  pid_t pid() const { return pid_; }

  // Spawns kvtierd and waits until it answers Hello; stub() and admin() then reach it. The
  // status of integration::SpawnKvtierd otherwise (the reason in its message). Blocks up to 30 s.
  absl::Status Start() {
    metrics_port_ = integration::FreePort();
    const auto started = std::chrono::steady_clock::now();
    absl::StatusOr<integration::KvtierdChild> child = integration::SpawnKvtierd(
        {binary_, "--state-dir=" + state_dir_, "--socket=" + socket(), "--set=host.capacity=8MiB",
         "--set=host.chunk=1MiB", "--set=host.pin=none", "--set=disk.capacity=64MiB",
         "--set=disk.chunk=4MiB", "--set=index.min_free=16MiB", "--set=index.reserve=4MiB",
         "--set=pools.allowed_dirs=[" + dir_ + "]",
         "--set=metrics.listen=127.0.0.1:" + std::to_string(metrics_port_),
         "--set=server.workers=4", "--set=log.level=warning"},
        socket(), log_path());
    if (!child.ok()) return child.status();
    start_seconds_ =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    pid_ = child->pid;
    stub_ = v1::KvTier::NewStub(child->channel);
    admin_ = v1::KvTierAdmin::NewStub(child->channel);
    return absl::OkStatus();
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
    const std::string text = "\n" + integration::HttpGet(metrics_port_, "/metrics");
    const std::string key = "\n" + name + " ";
    const size_t at = text.find(key);
    if (at == std::string::npos) return "";
    const size_t begin = at + key.size();
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

  // Seconds from the spawn to the first Hello answered, of the last successful Start().
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
  std::unique_ptr<v1::KvTier::Stub> stub_;
  std::unique_ptr<v1::KvTierAdmin::Stub> admin_;
};

}  // namespace kvtier::crash

#endif  // KVTIER_TESTS_CRASH_KVTIERD_PROCESS_H_
