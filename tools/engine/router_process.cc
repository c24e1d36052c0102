// The router child: fork/exec of /bin/sh -c <command> with two pipes. Requests and answers are
// single lines, so a write of the whole request and a read up to the next newline are the whole
// protocol. SIGPIPE is ignored from Start on, so a router that exited makes a write fail with
// EPIPE (Unavailable) instead of killing the engine.
#include "tools/engine/router_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/errno_text.h"

namespace kvtier::engine {

absl::StatusOr<std::unique_ptr<RouterProcess>> RouterProcess::Start(const std::string& command) {
  int in[2], out[2];  // in: parent -> child stdin; out: child stdout -> parent
  if (pipe2(in, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("router: pipe: ", ErrnoText(errno)));
  }
  if (pipe2(out, O_CLOEXEC) != 0) {
    const int err = errno;
    close(in[0]);
    close(in[1]);
    return absl::InternalError(absl::StrCat("router: pipe: ", ErrnoText(err)));
  }
  const pid_t pid = fork();
  if (pid < 0) {
    const int err = errno;
    for (int fd : {in[0], in[1], out[0], out[1]}) close(fd);
    return absl::InternalError(absl::StrCat("router: fork: ", ErrnoText(err)));
  }
  if (pid == 0) {
    // dup2 clears FD_CLOEXEC on the copies; the originals close at exec.
    if (dup2(in[0], 0) < 0 || dup2(out[1], 1) < 0) _exit(127);
    execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  signal(SIGPIPE, SIG_IGN);
  return std::unique_ptr<RouterProcess>(new RouterProcess(pid, in[1], out[0]));
}

RouterProcess::~RouterProcess() {
  static constexpr char kQuit[] = "quit\n";
  (void)!write(to_child_, kQuit, sizeof(kQuit) - 1);
  close(to_child_);
  close(from_child_);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (waitpid(pid_, nullptr, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

absl::StatusOr<std::string> RouterProcess::ReadLine() {
  while (true) {
    const size_t nl = buffered_.find('\n');
    if (nl != std::string::npos) {
      std::string line = buffered_.substr(0, nl);
      buffered_.erase(0, nl + 1);
      return line;
    }
    char buf[4096];
    const ssize_t n = read(from_child_, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::UnavailableError(absl::StrCat("router: read: ", ErrnoText(errno)));
    if (n == 0) return absl::UnavailableError("router: the router closed its output (exited?)");
    buffered_.append(buf, static_cast<size_t>(n));
  }
}

absl::StatusOr<std::string> RouterProcess::Ask(const std::string& line) {
  const std::string request = line + "\n";
  size_t done = 0;
  while (done < request.size()) {
    const ssize_t n = write(to_child_, request.data() + done, request.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return absl::UnavailableError(absl::StrCat("router: write: ", ErrnoText(errno)));
    }
    done += static_cast<size_t>(n);
  }
  return ReadLine();
}

absl::StatusOr<RouteAnswer> RouterProcess::Route(std::span<const uint64_t> hashes, size_t nodes) {
  std::string request = "route";
  for (const uint64_t h : hashes) absl::StrAppendFormat(&request, " %016x", h);
  absl::StatusOr<std::string> line = Ask(request);
  if (!line.ok()) return line.status();
  const std::vector<std::string> words = absl::StrSplit(*line, ' ', absl::SkipEmpty());
  RouteAnswer answer;
  if (words.size() != 2 || !absl::SimpleAtoi(words[0], &answer.node) ||
      !absl::SimpleAtoi(words[1], &answer.matched_pages) || answer.node >= nodes) {
    return absl::InternalError(
        absl::StrCat("router: answer '", *line, "' is not '<node below ", nodes, "> <pages>'"));
  }
  return answer;
}

}  // namespace kvtier::engine
