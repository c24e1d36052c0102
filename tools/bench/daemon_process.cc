// A kvtierd child process for kvtier-bench (see daemon_process.h): posix_spawn with the log as
// stdout and stderr, a wait for the socket file and then for Hello, SIGTERM to stop.
#include "tools/bench/daemon_process.h"

#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <system_error>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/file_reading.h"
#include "tools/bench/cpu_affinity.h"

extern char** environ;

namespace kvtier::bench {
namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kStopTimeout = std::chrono::seconds(30);
constexpr size_t kLogTailBytes = 4000;

// "exit status 1", "signal 9 (Killed)".
std::string DescribeWaitStatus(int wstatus) {
  if (WIFEXITED(wstatus)) return absl::StrCat("exit status ", WEXITSTATUS(wstatus));
  if (WIFSIGNALED(wstatus)) {
    return absl::StrFormat("signal %d (%s)", WTERMSIG(wstatus), strsignal(WTERMSIG(wstatus)));
  }
  return absl::StrCat("wait status ", wstatus);
}

// True when something accepts connections on the Unix socket `path`.
bool SocketIsLive(const std::string& path) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), std::min(path.size(), sizeof(addr.sun_path) - 1));
  const bool live = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return live;
}

}  // namespace

absl::StatusOr<std::string> DefaultKvtierd() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) {
    return absl::InternalError(
        absl::StrCat("readlink /proc/self/exe: ", std::strerror(errno), " (pass --kvtierd=PATH)"));
  }
  const std::string self(buf, static_cast<size_t>(n));
  return absl::StrCat(self.substr(0, self.rfind('/')), "/kvtierd");
}

absl::StatusOr<std::string> PrepareScratchDir(const std::string& requested,
                                              absl::string_view temp_prefix, bool* temporary) {
  *temporary = false;
  std::string dir = requested;
  if (dir.empty()) {
    std::string pattern = absl::StrCat("/tmp/", temp_prefix, ".XXXXXX");
    if (mkdtemp(pattern.data()) == nullptr) {
      return absl::InternalError(absl::StrCat("mkdtemp ", pattern, ": ", std::strerror(errno)));
    }
    *temporary = true;
    dir = pattern;
  } else if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return absl::InternalError(absl::StrCat("mkdir ", dir, ": ", std::strerror(errno)));
  }
  char resolved[PATH_MAX];
  if (realpath(dir.c_str(), resolved) == nullptr) {
    return absl::InternalError(absl::StrCat("realpath ", dir, ": ", std::strerror(errno)));
  }
  return std::string(resolved);
}

absl::Status RemoveScratchDir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("removing ", dir, ": ", ec.message()));
  return absl::OkStatus();
}

absl::Status RpcError(absl::string_view rpc, const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat(rpc, ": ", status.error_message()));
}

DaemonProcess::~DaemonProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

absl::Status DaemonProcess::Start(const std::string& kvtierd, const std::string& dir,
                                  const std::vector<std::string>& settings,
                                  const DaemonStartOptions& options) {
  binary_ = kvtierd;
  socket_ = dir + "/kvtier.sock";
  log_ = dir + "/kvtierd.log";
  if (access(binary_.c_str(), X_OK) != 0) {
    return absl::NotFoundError(absl::StrCat("cannot run kvtierd '", binary_,
                                            "': ", std::strerror(errno),
                                            " (build it, or pass --kvtierd=PATH)"));
  }
  if (socket_.size() >= sizeof(sockaddr_un::sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("socket path '", socket_, "' is longer than ",
                                                   sizeof(sockaddr_un::sun_path) - 1,
                                                   " bytes; pass a shorter --dir"));
  }
  // A socket file left by a dead daemon would pass for the new one's before it binds.
  if (access(socket_.c_str(), F_OK) == 0) {
    if (SocketIsLive(socket_)) {
      return absl::FailedPreconditionError(absl::StrCat("a process already serves on ", socket_,
                                                        " (another kvtierd on this --dir?)"));
    }
    if (unlink(socket_.c_str()) != 0) {
      return absl::InternalError(
          absl::StrCat("unlink stale socket ", socket_, ": ", std::strerror(errno)));
    }
  }
  std::vector<std::string> args = {binary_, "--state-dir=" + dir + "/state", "--socket=" + socket_};
  for (const std::string& setting : settings) args.push_back("--set=" + setting);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 2, log_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&actions, 2, 1);  // keep stdout (the table, JSON) ours
  int rc = 0;
  {
    // The child inherits the spawning thread's CPUs (all of its threads, from the start).
    ScopedThreadAffinity pinned(options.cpus);
    if (!pinned.status().ok()) {
      posix_spawn_file_actions_destroy(&actions);
      return pinned.status();
    }
    rc = posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ);
  }
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    pid_ = 0;
    return absl::InternalError(absl::StrCat("posix_spawn '", binary_, "': ", std::strerror(rc)));
  }
  const long long timeout_s = static_cast<long long>(options.start_timeout.count());
  const auto deadline = Clock::now() + options.start_timeout;
  // Connect once the socket exists: a channel that failed to connect backs off for seconds.
  while (access(socket_.c_str(), F_OK) != 0) {
    if (absl::Status exited = CheckRunning(); !exited.ok()) return exited;
    if (Clock::now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("kvtierd did not create its socket ", socket_, " within ", timeout_s, " s"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  channel_ = grpc::CreateChannel("unix:" + socket_, grpc::InsecureChannelCredentials());
  stub_ = v1::KvTier::NewStub(channel_);
  admin_ = v1::KvTierAdmin::NewStub(channel_);
  while (Clock::now() < deadline) {
    if (absl::Status exited = CheckRunning(); !exited.ok()) return exited;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
    ctx.set_wait_for_ready(true);  // no reconnect backoff while the server comes up
    v1::HelloRequest req;
    req.set_client_name(options.client_name);
    if (stub_->Hello(&ctx, req, &hello_).ok()) return absl::OkStatus();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return absl::DeadlineExceededError(absl::StrCat(
      "kvtierd (pid ", pid_, ") did not answer Hello on ", socket_, " within ", timeout_s, " s"));
}

absl::Status DaemonProcess::Stop() {
  stub_.reset();
  admin_.reset();
  channel_.reset();
  if (pid_ <= 0) return absl::OkStatus();
  const pid_t pid = pid_;
  kill(pid, SIGTERM);
  const auto deadline = Clock::now() + kStopTimeout;
  int wstatus = 0;
  pid_t reaped;
  while ((reaped = waitpid(pid, &wstatus, WNOHANG)) == 0 && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  pid_ = 0;
  if (reaped == 0) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    return absl::DeadlineExceededError(
        absl::StrCat("kvtierd (pid ", pid, ") did not exit within 30 s of SIGTERM; killed"));
  }
  if (reaped < 0) {
    return absl::InternalError(absl::StrCat("waitpid ", pid, ": ", std::strerror(errno)));
  }
  if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
    return absl::InternalError(absl::StrCat("kvtierd (pid ", pid, ") ended with ",
                                            DescribeWaitStatus(wstatus), " after SIGTERM"));
  }
  return absl::OkStatus();
}

std::string DaemonProcess::LogTail() const {
  if (log_.empty()) return "";
  absl::StatusOr<std::string> log =
      ReadRegularFile(log_, std::numeric_limits<uint64_t>::max(), "kvtierd's log");
  if (!log.ok()) return "";  // the tail only adds to an error already being reported
  const std::string& text = *log;
  if (text.size() <= kLogTailBytes) return text;
  const size_t line = text.find('\n', text.size() - kLogTailBytes);
  return text.substr(line == std::string::npos ? text.size() - kLogTailBytes : line + 1);
}

absl::Status DaemonProcess::CheckRunning() {
  int wstatus = 0;
  if (waitpid(pid_, &wstatus, WNOHANG) != pid_) return absl::OkStatus();
  pid_ = 0;
  return absl::FailedPreconditionError(
      absl::StrCat("kvtierd exited at start with ", DescribeWaitStatus(wstatus)));
}

}  // namespace kvtier::bench
