// A kvtierd child process for the kvtier-bench subcommands that measure a real daemon (lookup,
// e2e): the scratch directory that holds its state, socket and log, spawning it with --set
// overrides, waiting until Hello answers on its Unix socket, and stopping it with SIGTERM. Also
// the small gRPC helpers those subcommands share. Not thread-safe: one thread drives a
// DaemonProcess (its stub() may be used from any thread while it runs, as any gRPC stub).
//
// Use: DaemonProcess d; d.Start(kvtierd, dir, {"host.pin=none"}); d.stub().Lookup(...);
//      d.Stop();   (the destructor kills a daemon that was not stopped)
#ifndef KVTIER_TOOLS_BENCH_DAEMON_PROCESS_H_
#define KVTIER_TOOLS_BENCH_DAEMON_PROCESS_H_

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/grpcpp.h"
#include "kvtier/v1/service.grpc.pb.h"

namespace kvtier::bench {

// dirname(/proc/self/exe) + "/kvtierd": the daemon built next to kvtier-bench. Internal when
// /proc/self/exe cannot be read (the message suggests --kvtierd=PATH).
absl::StatusOr<std::string> DefaultKvtierd();

// The scratch directory as an absolute path: `requested`, created (mode 0700) when missing, or,
// when `requested` is empty, a fresh "/tmp/<temp_prefix>.XXXXXX" and *temporary set (the caller
// removes it with RemoveScratchDir). Internal with the failing call and errno text.
absl::StatusOr<std::string> PrepareScratchDir(const std::string& requested,
                                              absl::string_view temp_prefix, bool* temporary);

// Removes `dir` and everything under it. Internal with the file system's message.
absl::Status RemoveScratchDir(const std::string& dir);

// The status of a failed RPC, with the same code, its message prefixed with `rpc`.
absl::Status RpcError(absl::string_view rpc, const grpc::Status& status);

struct DaemonStartOptions {
  std::string client_name = "kvtier-bench";  // HelloRequest.client_name
  // How long Start waits for the socket and then for Hello (a daemon that pins a large host tier
  // with CUDA takes seconds to come up).
  std::chrono::seconds start_timeout{30};
  // The CPUs the daemon (every thread of it) runs on; empty: those of the calling thread.
  std::vector<int> cpus;
};

// kvtierd as a child process: `<kvtierd> --state-dir=<dir>/state --socket=<dir>/kvtier.sock`
// followed by one --set=<setting> per setting the caller passes (the caller chooses every tier
// size, pinning and listener). Its stdout and stderr go to <dir>/kvtierd.log. The destructor kills
// (SIGKILL) and reaps a daemon that Stop() did not stop.
class DaemonProcess {
 public:
  DaemonProcess() = default;
  ~DaemonProcess();
  DaemonProcess(const DaemonProcess&) = delete;
  DaemonProcess& operator=(const DaemonProcess&) = delete;

  // Spawns `kvtierd` on the scratch directory `dir` (absolute, existing) with `settings` (each
  // "dotted.key=value", e.g. "host.pin=none"), waits for its socket file to exist, then until Hello
  // answers, both within options.start_timeout. NotFound when `kvtierd` is not executable;
  // InvalidArgument when the socket path is too long for a Unix socket; FailedPrecondition when
  // another process serves on the socket or the daemon exits while starting; DeadlineExceeded on
  // timeout. REQUIRES: not started before.
  absl::Status Start(const std::string& kvtierd, const std::string& dir,
                     const std::vector<std::string>& settings,
                     const DaemonStartOptions& options = {});

  // Closes the channel, sends SIGTERM and waits for the exit (SIGKILL after 30 s). An error when
  // the daemon had to be killed or did not exit with status 0. OK when it is not running.
  absl::Status Stop();

  // The end of the daemon's log (about 4000 bytes, from a line start), "" when it is empty or
  // missing.
  std::string LogTail() const;

  // REQUIRES: Start() succeeded and Stop() was not called.
  v1::KvTier::Stub& stub() { return *stub_; }
  v1::KvTierAdmin::Stub& admin() { return *admin_; }
  // The answer to the Hello that ended Start().
  const v1::HelloResponse& hello() const { return hello_; }
  pid_t pid() const { return pid_; }  // 0 when not running
  const std::string& binary() const { return binary_; }
  const std::string& socket_path() const { return socket_; }
  const std::string& log_path() const { return log_; }

 private:
  // An error when the child has exited (it is then reaped).
  absl::Status CheckRunning();

  std::string binary_;
  std::string socket_;
  std::string log_;
  pid_t pid_ = 0;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::KvTier::Stub> stub_;
  std::unique_ptr<v1::KvTierAdmin::Stub> admin_;
  v1::HelloResponse hello_;
};

}  // namespace kvtier::bench

#endif  // KVTIER_TOOLS_BENCH_DAEMON_PROCESS_H_
