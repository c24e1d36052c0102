#include "tests/testing/ceph_cluster.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <random>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"

namespace kvtier::testing {
namespace {

bool OnPath(const char* name) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return false;
  std::string p(path);
  size_t start = 0;
  while (start <= p.size()) {
    size_t end = p.find(':', start);
    if (end == std::string::npos) end = p.size();
    const std::string file = absl::StrCat(p.substr(start, end - start), "/", name);
    if (access(file.c_str(), X_OK) == 0) return true;
    start = end + 1;
  }
  return false;
}

std::string Uuid() {
  std::ifstream in("/proc/sys/kernel/random/uuid");
  std::string u;
  std::getline(in, u);
  return u;
}

// A port that was free a moment ago: the kernel's pick for a bind to port 0. The small race with
// another process taking it is acceptable for tests (the monitor's start then fails loudly).
absl::StatusOr<int> FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    const int e = errno;
    close(fd);
    return absl::InternalError(absl::StrCat("bind 127.0.0.1:0: ", std::strerror(e)));
  }
  close(fd);
  return ntohs(a.sin_port);
}

std::vector<char*> Argv(const std::vector<std::string>& argv) {
  std::vector<char*> out;
  for (const std::string& s : argv) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

// SIGTERM, up to 10 s for the exit, then SIGKILL; reaps the child.
void StopProcess(pid_t& pid) {
  if (pid <= 0) return;
  kill(pid, SIGTERM);
  kill(pid, SIGCONT);  // a paused OSD (PauseOsd) takes its SIGTERM once it runs
  for (int i = 0; i < 200; ++i) {
    if (waitpid(pid, nullptr, WNOHANG) == pid) {
      pid = -1;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  pid = -1;
}

}  // namespace

bool CephCluster::BinariesPresent() {
  for (const char* b : {"ceph-mon", "ceph-osd", "ceph", "rados", "ceph-authtool", "monmaptool"}) {
    if (!OnPath(b)) return false;
  }
  return true;
}

absl::StatusOr<std::unique_ptr<CephCluster>> CephCluster::Start(int osds) {
  if (osds < 1 || osds > 3) return absl::InvalidArgumentError("CephCluster: 1 to 3 OSDs");
  absl::StatusOr<TempDir> dir = TempDir::Create();
  if (!dir.ok()) return dir.status();
  std::unique_ptr<CephCluster> c(new CephCluster(*std::move(dir)));
  absl::Status st = c->Setup(osds);
  if (!st.ok()) return st;  // the destructor stops whatever started
  return c;
}

CephCluster::~CephCluster() {
  StopProcess(mgr_pid_);
  for (pid_t& p : osd_pids_) StopProcess(p);
  StopProcess(mon_pid_);
}

absl::StatusOr<pid_t> CephCluster::Spawn(const std::vector<std::string>& argv,
                                         const std::string& log) {
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  if (pid == 0) {
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    std::vector<char*> a = Argv(argv);
    execvp(a[0], a.data());
    _exit(127);
  }
  return pid;
}

absl::StatusOr<std::string> CephCluster::Run(const std::vector<std::string>& argv,
                                             const std::optional<std::string>& input) {
  const std::string input_path = dir_.File("run-input");
  if (input.has_value()) {
    std::ofstream f(input_path, std::ios::binary | std::ios::trunc);
    f.write(input->data(), static_cast<std::streamsize>(input->size()));
    if (!f.good()) return absl::InternalError(absl::StrCat("cannot write ", input_path));
  }
  int fds[2];
  if (pipe(fds) != 0) return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  if (pid == 0) {
    close(fds[0]);
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    if (input.has_value()) {
      const int in = open(input_path.c_str(), O_RDONLY);
      if (in < 0) _exit(126);
      dup2(in, 0);
    }
    std::vector<char*> a = Argv(argv);
    execvp(a[0], a.data());
    _exit(127);
  }
  close(fds[1]);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError(
        absl::StrFormat("`%s` failed (status %d): %s", absl::StrJoin(argv, " "), status, out));
  }
  return out;
}

absl::StatusOr<std::string> CephCluster::Ceph(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {
      "ceph", "-c", conf_, "-k", admin_keyring_, "-n", "client.admin", "--connect-timeout", "15"};
  argv.insert(argv.end(), args.begin(), args.end());
  return Run(argv);
}

absl::StatusOr<std::string> CephCluster::Rados(const std::vector<std::string>& args,
                                               const std::optional<std::string>& input) {
  // No admin socket: the test process's own client may hold the path (its warning would join the
  // output, which callers parse).
  std::vector<std::string> argv = {"rados",        "-c", conf_, "-k",
                                   admin_keyring_, "-p", pool_, "--admin-socket="};
  argv.insert(argv.end(), args.begin(), args.end());
  return Run(argv, input);
}

absl::Status CephCluster::Setup(int osds) {
  absl::StatusOr<int> port = FreePort();
  if (!port.ok()) return port.status();
  const std::string d = dir_.path();
  const std::string fsid = Uuid();
  mon_host_ = absl::StrCat("v2:127.0.0.1:", *port);
  conf_ = d + "/ceph.conf";
  admin_keyring_ = d + "/admin.keyring";
  if (mkdir((d + "/run").c_str(), 0755) != 0 || mkdir((d + "/mon.a").c_str(), 0755) != 0) {
    return absl::InternalError(absl::StrCat("mkdir in ", d, ": ", std::strerror(errno)));
  }
  {
    std::ofstream conf(conf_);
    conf << "[global]\n"
         << "fsid = " << fsid << "\n"
         << "mon host = " << mon_host_ << "\n"
         << "auth cluster required = cephx\nauth service required = cephx\n"
         << "auth client required = cephx\n"
         << "keyring = " << admin_keyring_ << "\n"
         << "run dir = " << d << "/run\n"
         << "log file = " << d << "/$name.log\n"
         << "admin socket = " << d << "/run/$name.asok\n"
         << "osd objectstore = memstore\nmemstore device bytes = 268435456\n"
         << "osd pool default size = 1\nosd pool default min size = 1\n"
         << "mon allow pool size one = true\nmon allow pool delete = true\n"
         << "mon warn on pool no redundancy = false\n"
         << "osd crush chooseleaf type = 0\nmon data avail crit = 0\nmon data avail warn = 0\n"
         << "osd data = " << d << "/osd.$id\nmon data = " << d << "/mon.$id\n"
         << "mgr data = " << d
         << "/mgr.$id\n"
         // Pool statistics (and so quotas, with a mgr) within a second or two, not 5 s.
         << "mgr stats period = 1\nosd mon report interval = 1\nmon osd report timeout = 10\n"
         // A killed OSD is marked down by its peers within seconds (tests of replicated pools).
         << "osd heartbeat interval = 1\nosd heartbeat grace = 4\nmon osd min down reporters = 1\n"
         << "ms bind ipv6 = false\npublic addr = 127.0.0.1\n"
         << "[osd]\nkeyring = " << d << "/osd.$id/keyring\n";
    if (!conf) return absl::InternalError(absl::StrCat("cannot write ", conf_));
  }
  const std::string mon_keyring = d + "/mon.keyring";
  for (const std::vector<std::string>& step : std::vector<std::vector<std::string>>{
           {"ceph-authtool", "--create-keyring", mon_keyring, "--gen-key", "-n", "mon.", "--cap",
            "mon", "allow *"},
           {"ceph-authtool", "--create-keyring", admin_keyring_, "--gen-key", "-n", "client.admin",
            "--cap", "mon", "allow *", "--cap", "osd", "allow *", "--cap", "mgr", "allow *"},
           {"ceph-authtool", mon_keyring, "--import-keyring", admin_keyring_},
           {"monmaptool", "--create", "--addv", "a", absl::StrCat("[", mon_host_, "]"), "--fsid",
            fsid, d + "/monmap"},
           {"ceph-mon", "-c", conf_, "--mkfs", "-i", "a", "--monmap", d + "/monmap", "--keyring",
            mon_keyring},
       }) {
    absl::StatusOr<std::string> r = Run(step);
    if (!r.ok()) return r.status();
  }
  absl::Status st = StartMon();
  if (!st.ok()) return st;
  for (int i = 0; i < osds; ++i) {
    st = AddOsd();
    if (!st.ok()) return st;
  }
  absl::StatusOr<std::string> r = Ceph({"osd", "pool", "create", pool_, "8", "8", "replicated"});
  if (!r.ok()) return r.status();
  r = Ceph({"osd", "pool", "set", pool_, "size", "1", "--yes-i-really-mean-it"});
  if (!r.ok()) return r.status();
  return absl::OkStatus();
}

absl::Status CephCluster::AddOsd() {
  const std::string uuid = Uuid();
  absl::StatusOr<std::string> out = Ceph({"osd", "new", uuid});
  if (!out.ok()) return out.status();
  // The id is the last line of the output (the CLI may print warnings before it).
  std::string s(absl::StripTrailingAsciiWhitespace(*out));
  const size_t nl = s.rfind('\n');
  if (nl != std::string::npos) s = s.substr(nl + 1);
  int id = -1;
  if (!absl::SimpleAtoi(s, &id)) return absl::InternalError("`ceph osd new` printed: " + *out);
  const std::string dir = absl::StrCat(dir_.path(), "/osd.", id);
  if (mkdir(dir.c_str(), 0755) != 0) {
    return absl::InternalError(absl::StrCat("mkdir ", dir, ": ", std::strerror(errno)));
  }
  const std::string keyring = dir + "/keyring";
  const std::string name = absl::StrCat("osd.", id);
  for (const std::vector<std::string>& step : std::vector<std::vector<std::string>>{
           {"ceph-authtool", "--create-keyring", keyring, "--gen-key", "-n", name},
       }) {
    absl::StatusOr<std::string> r = Run(step);
    if (!r.ok()) return r.status();
  }
  out = Ceph({"auth", "add", name, "osd", "allow *", "mon", "allow profile osd", "-i", keyring});
  if (!out.ok()) return out.status();
  out = Run({"ceph-osd", "-c", conf_, "-i", absl::StrCat(id), "--mkfs", "--osd-uuid", uuid,
             "--keyring", keyring});
  if (!out.ok()) return out.status();
  osd_ids_.push_back(id);
  osd_pids_.push_back(-1);
  return StartOsd(static_cast<int>(osd_ids_.size()) - 1);
}

absl::Status CephCluster::StartMon() {
  if (mon_pid_ > 0) return absl::FailedPreconditionError("the monitor is running");
  absl::StatusOr<pid_t> pid =
      Spawn({"ceph-mon", "-f", "-c", conf_, "-i", "a"}, dir_.path() + "/mon.a.stdout");
  if (!pid.ok()) return pid.status();
  mon_pid_ = *pid;
  // Ready once the CLI gets an answer.
  absl::StatusOr<std::string> r = Ceph({"mon", "stat"});
  if (!r.ok()) {
    return absl::UnavailableError(absl::StrCat("monitor did not answer (log ", dir_.path(),
                                               "/mon.a.log): ", r.status().message()));
  }
  return absl::OkStatus();
}

bool CephCluster::MgrPresent() { return OnPath("ceph-mgr"); }

absl::Status CephCluster::StartMgr() {
  if (mgr_pid_ > 0) return absl::FailedPreconditionError("the mgr is running");
  const std::string dir = dir_.path() + "/mgr.x";
  mkdir(dir.c_str(), 0755);
  absl::StatusOr<std::string> r =
      Ceph({"auth", "get-or-create", "mgr.x", "mon", "allow profile mgr", "osd", "allow *", "mds",
            "allow *", "-o", dir + "/keyring"});
  if (!r.ok()) return r.status();
  absl::StatusOr<pid_t> pid =
      Spawn({"ceph-mgr", "-f", "-c", conf_, "-i", "x", "--keyring", dir + "/keyring"},
            dir_.path() + "/mgr.x.stdout");
  if (!pid.ok()) return pid.status();
  mgr_pid_ = *pid;
  for (int tries = 0; tries < 600; ++tries) {
    r = Ceph({"mgr", "stat"});
    if (r.ok() && r->find("\"available\": true") != std::string::npos) return absl::OkStatus();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return absl::UnavailableError(
      absl::StrCat("the mgr did not become available (log ", dir_.path(), "/mgr.x.log)"));
}

absl::Status CephCluster::StopMon() {
  StopProcess(mon_pid_);
  return absl::OkStatus();
}

absl::Status CephCluster::StartOsd(int i) {
  if (i < 0 || i >= static_cast<int>(osd_ids_.size())) {
    return absl::InvalidArgumentError(absl::StrCat("no OSD ", i));
  }
  if (osd_pids_[i] > 0) return absl::FailedPreconditionError(absl::StrCat("OSD ", i, " runs"));
  const std::string id = absl::StrCat(osd_ids_[i]);
  absl::StatusOr<pid_t> pid = Spawn({"ceph-osd", "-f", "-c", conf_, "-i", id},
                                    absl::StrCat(dir_.path(), "/osd.", id, ".stdout"));
  if (!pid.ok()) return pid.status();
  osd_pids_[i] = *pid;
  // Wait until the monitor reports it up.
  for (int tries = 0; tries < 300; ++tries) {
    absl::StatusOr<std::string> r = Ceph({"osd", "dump"});
    if (r.ok() && r->find(absl::StrCat("osd.", id, " up")) != std::string::npos) {
      return absl::OkStatus();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return absl::UnavailableError(
      absl::StrCat("osd.", id, " did not come up (log ", dir_.path(), "/osd.", id, ".log)"));
}

absl::Status CephCluster::StopOsd(int i) {
  if (i < 0 || i >= static_cast<int>(osd_ids_.size())) {
    return absl::InvalidArgumentError(absl::StrCat("no OSD ", i));
  }
  StopProcess(osd_pids_[i]);
  return absl::OkStatus();
}

absl::Status CephCluster::KillOsd(int i) {
  if (i < 0 || i >= static_cast<int>(osd_pids_.size()) || osd_pids_[i] <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("no running OSD ", i));
  }
  kill(osd_pids_[i], SIGKILL);
  waitpid(osd_pids_[i], nullptr, 0);
  osd_pids_[i] = -1;
  return absl::OkStatus();
}

absl::Status CephCluster::PauseOsd(int i) {
  if (i < 0 || i >= static_cast<int>(osd_pids_.size()) || osd_pids_[i] <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("no running OSD ", i));
  }
  if (kill(osd_pids_[i], SIGSTOP) != 0) return absl::InternalError("kill(SIGSTOP) failed");
  return absl::OkStatus();
}

absl::Status CephCluster::ResumeOsd(int i) {
  if (i < 0 || i >= static_cast<int>(osd_pids_.size()) || osd_pids_[i] <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("no running OSD ", i));
  }
  if (kill(osd_pids_[i], SIGCONT) != 0) return absl::InternalError("kill(SIGCONT) failed");
  return absl::OkStatus();
}

absl::Status CephCluster::SetPoolQuota(uint64_t max_bytes) {
  absl::StatusOr<std::string> r =
      Ceph({"osd", "pool", "set-quota", pool_, "max_bytes", absl::StrCat(max_bytes)});
  return r.status();
}

}  // namespace kvtier::testing
