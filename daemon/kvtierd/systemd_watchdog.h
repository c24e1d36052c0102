// The systemd watchdog of kvtierd: SystemdWatchdog is a thread that sends WATCHDOG=1 every half
// watchdog interval while a health check passes, so that systemd restarts a daemon that hangs or
// cannot persist its index. StoreHealthCheck is that check. SystemdWatchdog is thread-safe;
// StoreHealthCheck is called from one thread.
#ifndef KVTIER_DAEMON_KVTIERD_SYSTEMD_WATCHDOG_H_
#define KVTIER_DAEMON_KVTIERD_SYSTEMD_WATCHDOG_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/kvtierd/systemd_notify.h"
#include "daemon/store/block_store.h"

namespace kvtier::kvtierd {

// Whether the store is healthy: Stats() returns (so the store's lock is not held forever; a hung
// lock hangs the check, and the missing pings let systemd act), and the index commits. It is
// unhealthy when index commits failed since the previous check and index writes are still
// unsynced: the background thread retries a failed commit every 100 ms, so this holds at two
// checks in a row only when commits have been failing for a whole watchdog interval.
class StoreHealthCheck {
 public:
  // Borrows `store`, which must outlive the check.
  explicit StoreHealthCheck(store::BlockStore* store);
  // OK when healthy; Unavailable naming the failure otherwise. Blocks on the store's lock.
  absl::Status Check();

 private:
  store::BlockStore* store_;
  uint64_t commit_failures_ = 0;
};

class SystemdWatchdog {
 public:
  using HealthCheck = std::function<absl::Status()>;

  // Starts the thread: every notifier->watchdog() / 2 it runs `check` and, when it returns OK,
  // sends WATCHDOG=1. A failed check is logged (once until the next success) and skips the ping.
  // nullptr when the notifier has no watchdog. Borrows `notifier`, which must outlive the result.
  static std::unique_ptr<SystemdWatchdog> Start(const SystemdNotifier* notifier, HealthCheck check);

  ~SystemdWatchdog();  // stops and joins the thread (after a check in progress returns)

 private:
  SystemdWatchdog(const SystemdNotifier* notifier, HealthCheck check, absl::Duration period)
      : notifier_(notifier), check_(std::move(check)), period_(period) {}
  void Loop();

  const SystemdNotifier* notifier_;
  HealthCheck check_;
  absl::Duration period_;
  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace kvtier::kvtierd

#endif  // KVTIER_DAEMON_KVTIERD_SYSTEMD_WATCHDOG_H_
