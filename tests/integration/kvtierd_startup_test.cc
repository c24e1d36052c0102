// kvtierd's configuration and start-up checks as an operator meets them: every configuration
// error of a run is reported together (not only the first); a directory or a FIFO given as the
// configuration file is refused at once; --check-config finds what a start would fail on (a busy
// port, a state directory that cannot be created, a socket path taken by a file, a missing tokens
// file, a host tier larger than the memory limit) without creating anything; and a start with a
// busy metrics port fails before it opens the store (no index directory appears); flags take
// their value after a space or an equals sign, and a wrong command line exits 2. Label
// integration; every kvtierd run is under a timeout, so a hang fails instead of blocking.
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "tests/integration/daemon_fixture.h"

namespace kvtier::integration {
namespace {

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

bool Exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

// A TCP socket listening on a free port of 127.0.0.1, closed on destruction.
class BusyPort {
 public:
  BusyPort() {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(listen(fd_, 1), 0);
    socklen_t len = sizeof(addr);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    address_ = "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  }
  ~BusyPort() { close(fd_); }
  const std::string& address() const { return address_; }

 private:
  int fd_ = -1;
  std::string address_;
};

using KvtierdStartupTest = DaemonFixture;

TEST_F(KvtierdStartupTest, EveryConfigurationErrorIsReportedInOneRun) {
  // (Fields Args() does not --set, or its overrides would replace the file's values.)
  std::ofstream(dir_->File("bad.yaml")) << "server:\n  max_request_bytes: lots\n"
                                           "host:\n  colour: blue\n"
                                           "index:\n  sync: sometimes\n";
  std::string out;
  EXPECT_EQ(RunKvtierd({"--config=" + dir_->File("bad.yaml"), "--set=host.pin=bogus",
                        "--set=engines.lease_seconds=-1", "--set=server.chunk_pages=0",
                        "--set=nonsense", "--check-config"},
                       &out),
            1)
      << out;
  for (const std::string& line : {
           "kvtierd: config file " + dir_->File("bad.yaml") +
               ": unknown field 'host.colour' (line 4)",
           std::string("kvtierd: field 'server.max_request_bytes': 'lots' is not a size"),
           std::string("kvtierd: field 'index.sync': 'sometimes' is not none, batch or always"),
           std::string("kvtierd: field 'host.pin': 'bogus' is not auto, cuda, mlock or none"),
           std::string("kvtierd: field 'engines.lease_seconds': -1 is outside"),
           std::string("kvtierd: field 'server.chunk_pages': 0 is outside [1, 65536]"),
           std::string("kvtierd: --set 'nonsense': expected field.path=value"),
       }) {
    EXPECT_TRUE(Contains(out, line)) << line << "\nnot in:\n" << out;
  }
  // One line per field: a value that failed is not reported again by the checks that follow it
  // (here: the range of server.max_request_bytes).
  size_t lines = 0;
  for (size_t at = out.find("max_request_bytes"); at != std::string::npos;
       at = out.find("max_request_bytes", at + 1)) {
    ++lines;
  }
  EXPECT_EQ(lines, 1u) << out;
  // A start reports the same, and exits 1 before it creates anything.
  out.clear();
  EXPECT_EQ(RunKvtierd({"--set=host.pin=bogus", "--set=index.sync=sometimes"}, &out), 1) << out;
  EXPECT_TRUE(Contains(out, "field 'host.pin'") && Contains(out, "field 'index.sync'")) << out;
  EXPECT_FALSE(Exists(dir_->File("state"))) << out;
}

TEST_F(KvtierdStartupTest, ADirectoryOrAFifoIsNotAConfigurationFile) {
  std::string out;
  // A directory used to load as an empty file: the defaults, silently.
  EXPECT_EQ(RunKvtierd({"--config=" + dir_->path(), "--check-config"}, &out), 1) << out;
  EXPECT_TRUE(
      Contains(out, "kvtierd: config file " + dir_->path() + " is a directory, not a regular file"))
      << out;
  EXPECT_FALSE(Contains(out, "configuration is valid")) << out;
  out.clear();
  EXPECT_EQ(RunKvtierd({"--config=" + dir_->path()}, &out), 1) << out;
  EXPECT_TRUE(Contains(out, "is a directory, not a regular file")) << out;

  // A FIFO used to hang the loader until something wrote to it (here: until the timeout).
  const std::string fifo = dir_->File("kvtierd.yaml");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  out.clear();
  EXPECT_EQ(RunKvtierd({"--config=" + fifo, "--check-config"}, &out, 20), 1)
      << "137: kvtierd hung on the FIFO\n"
      << out;
  EXPECT_TRUE(
      Contains(out, "kvtierd: config file " + fifo + " is a FIFO (named pipe), not a regular file"))
      << out;

  // A tokens file that is a FIFO or a device is refused the same way, by the start-up checks.
  out.clear();
  EXPECT_EQ(RunKvtierd({"--set=auth.tokens_file=" + fifo, "--check-config"}, &out, 20), 1) << out;
  EXPECT_TRUE(Contains(out, "auth.tokens_file " + fifo + " is a FIFO (named pipe)")) << out;
  out.clear();
  EXPECT_EQ(RunKvtierd({"--set=auth.tokens_file=/dev/zero", "--check-config"}, &out, 20), 1) << out;
  EXPECT_TRUE(Contains(out, "auth.tokens_file /dev/zero is a character device")) << out;
}

TEST_F(KvtierdStartupTest, ABusyMetricsPortFailsTheStartBeforeTheStoreOpens) {
  BusyPort busy;
  std::string out;
  EXPECT_EQ(RunKvtierd({"--set=metrics.listen=" + busy.address()}, &out), 1) << out;
  EXPECT_TRUE(Contains(out, "kvtierd: metrics.listen: cannot listen on " + busy.address() +
                                ": Address already in use"))
      << out;
  // The store was not opened (it used to be: index recovery, then the port failed).
  EXPECT_FALSE(Exists(dir_->File("state/index"))) << out;
  EXPECT_FALSE(Contains(out, "recovered")) << out;
  EXPECT_FALSE(Exists(Socket())) << out;

  // --check-config says the same; a free port passes.
  out.clear();
  EXPECT_EQ(RunKvtierd({"--set=metrics.listen=" + busy.address(), "--check-config"}, &out), 1)
      << out;
  EXPECT_TRUE(Contains(out, "metrics.listen: cannot listen on " + busy.address())) << out;
  out.clear();
  EXPECT_EQ(RunKvtierd({"--check-config"}, &out), 0) << out;
  EXPECT_TRUE(Contains(out, "kvtierd: configuration is valid")) << out;
}

TEST_F(KvtierdStartupTest, CheckConfigFindsWhatAStartWouldFailOnAndCreatesNothing) {
  // state_dir below a regular file; server.socket taken by a regular file; no tokens file; a host
  // tier larger than any memory limit.
  std::ofstream(dir_->File("a-file")) << "x";
  std::ofstream(dir_->File("taken.sock")) << "x";
  std::string out;
  EXPECT_EQ(RunKvtierd({"--set=state_dir=" + dir_->File("a-file/state"),
                        "--socket=" + dir_->File("taken.sock"),
                        "--set=auth.tokens_file=" + dir_->File("no-tokens"),
                        "--set=host.capacity=64TiB", "--check-config"},
                       &out),
            1)
      << out;
  for (const std::string& line : {
           "kvtierd: state_dir " + dir_->File("a-file/state") + " cannot be created: " +
               dir_->File("a-file") + " is a regular file, not a directory",
           "kvtierd: server.socket " + dir_->File("taken.sock") +
               " exists and is a regular file, not a socket",
           "kvtierd: cannot open auth.tokens_file " + dir_->File("no-tokens") +
               ": No such file or directory",
           std::string("exceeds 90% of the memory limit"),
       }) {
    EXPECT_TRUE(Contains(out, line)) << line << "\nnot in:\n" << out;
  }

  // Nothing was created or removed: not the state directory, not the disk tier's, and the file in
  // the socket's place is still there.
  out.clear();
  EXPECT_EQ(RunKvtierd({"--check-config"}, &out), 0) << out;
  EXPECT_FALSE(Exists(dir_->File("state"))) << "--check-config created state_dir";
  EXPECT_TRUE(Exists(dir_->File("taken.sock")));

  // A daemon serving on the socket: a second one is told so before it opens the store.
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  out.clear();
  EXPECT_EQ(RunKvtierd({"--check-config"}, &out), 1) << out;
  EXPECT_TRUE(Contains(out, "another process is serving on " + Socket())) << out;
  EXPECT_TRUE(Contains(out, "metrics.listen: cannot listen on")) << out;
  EXPECT_EQ(StopDaemon(SIGTERM), 0) << Log();
}

// A client that sees the socket's path can connect: libkvtier fails at once on a refused
// connection, so a path that existed before the daemon listened on it (bind, then chmod, then
// listen) made a client started beside the daemon fail now and then. A thread spins on the path
// while kvtierd starts (two more keep the CPUs busy) and connects the moment it appears, over
// several starts.
TEST_F(KvtierdStartupTest, TheSocketPathAppearsOnlyOnceItAcceptsConnections) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  ASSERT_LT(Socket().size(), sizeof(addr.sun_path));
  std::memcpy(addr.sun_path, Socket().data(), Socket().size());
  int refused = 0;
  for (int start = 0; start < 20; ++start) {
    std::atomic<bool> stop{false};     // the busy threads end
    std::atomic<bool> give_up{false};  // the daemon did not start: the watcher ends
    std::atomic<int> result{-2};       // -2: the path never appeared; 0: connected; else the errno
    std::thread watcher([&] {
      // Until the path exists, even after StartDaemon has returned (it has then, as the daemon
      // answers RPCs): on a loaded machine this thread may not run between the two.
      struct stat st;
      while (::stat(Socket().c_str(), &st) != 0) {
        if (give_up.load()) return;
      }
      const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      result = connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0 ? 0 : errno;
      close(fd);
    });
    // Two busy threads beside it, so the daemon is preempted inside any window it leaves.
    std::vector<std::thread> busy;
    for (int i = 0; i < 2; ++i) {
      busy.emplace_back([&] {
        while (!stop.load()) {
        }
      });
    }
    StartDaemon();
    const bool started = !HasFatalFailure();
    stop = true;
    give_up = !started;
    watcher.join();
    for (std::thread& t : busy) t.join();
    ASSERT_TRUE(started);
    ASSERT_NE(result.load(), -2) << "the watcher never saw " << Socket();
    if (result.load() != 0) {
      ++refused;
      ADD_FAILURE() << "start " << start << ": connect as " << Socket()
                    << " appeared: " << std::strerror(result.load());
    }
    ASSERT_EQ(StopDaemon(SIGTERM), 0) << Log();
    ASSERT_FALSE(Exists(Socket())) << "a stopped kvtierd removes its socket";
  }
  EXPECT_EQ(refused, 0);
}

TEST_F(KvtierdStartupTest, FlagsTakeTheirValueAfterASpaceOrAnEqualsSign) {
  // The fixture's flags with the value as the next argument: kvtierd serves on that socket and
  // keeps its state in that directory.
  std::vector<std::string> args = {KvtierdPath()};
  for (const std::string& arg : Args()) {
    if (arg.rfind("--", 0) != 0) continue;
    const size_t eq = arg.find('=');
    args.push_back(arg.substr(0, eq));
    args.push_back(arg.substr(eq + 1));
  }
  ASSERT_EQ(args[1], "--state-dir");
  ASSERT_EQ(args[3], "--socket");
  absl::StatusOr<KvtierdChild> child = SpawnKvtierd(args, Socket(), dir_->File("kvtierd.log"));
  ASSERT_TRUE(child.ok()) << child.status().message() << ":\n" << Log();
  pid_ = child->pid;
  EXPECT_TRUE(Exists(dir_->File("state")));
  EXPECT_EQ(StopDaemon(SIGTERM), 0) << Log();
}

TEST_F(KvtierdStartupTest, AWrongCommandLineExitsTwoNamingTheFlag) {
  std::string out;
  EXPECT_EQ(RunKvtierd({"--frobnicate"}, &out), 2) << out;
  EXPECT_TRUE(Contains(out, "kvtierd: unknown flag --frobnicate\nusage: kvtierd [options]")) << out;
  EXPECT_EQ(RunKvtierd({"--config"}, &out), 2) << out;
  EXPECT_TRUE(Contains(out, "kvtierd: --config needs a value")) << out;
  EXPECT_EQ(RunKvtierd({"--config", "a.yaml", "--config=b.yaml"}, &out), 2) << out;
  EXPECT_TRUE(Contains(out, "kvtierd: --config given more than once")) << out;
  EXPECT_EQ(RunKvtierd({"--check-config=yes"}, &out), 2) << out;
  EXPECT_TRUE(Contains(out, "kvtierd: --check-config takes no value")) << out;
  EXPECT_EQ(RunKvtierd({"stray"}, &out), 2) << out;
  EXPECT_TRUE(Contains(out, "kvtierd: unexpected argument 'stray'")) << out;
  EXPECT_FALSE(Exists(dir_->File("state"))) << "a usage error starts nothing";
  EXPECT_EQ(RunKvtierd({"--help"}, &out), 0) << out;
  EXPECT_TRUE(Contains(out, "usage: kvtierd [options]")) << out;
  EXPECT_TRUE(Contains(out, "  --state-dir DIR")) << out;
  EXPECT_TRUE(Contains(out, "override one field, e.g. --set=host.capacity=8GiB")) << out;
  EXPECT_TRUE(Contains(out, "Exit status: 0 after a clean stop")) << out;
  EXPECT_EQ(RunKvtierd({"--version"}, &out), 0) << out;
  EXPECT_TRUE(Contains(out, "kvtierd 0.1.0")) << out;
}

}  // namespace
}  // namespace kvtier::integration
