// The watchdog pings from a thread of their own rather than from the signal loop, so that what
// they prove is the health check (the store's lock, the index commits), not only that the main
// thread waits in sigwait. Half the interval leaves one missed ping of slack, as
// sd_watchdog_enabled (3) recommends.
#include "daemon/kvtierd/systemd_watchdog.h"

#include <utility>

#include "absl/strings/str_format.h"
#include "common/logging.h"

namespace kvtier::kvtierd {

StoreHealthCheck::StoreHealthCheck(store::BlockStore* store)
    : store_(store), commit_failures_(store->Stats().index_commit_failures) {}

absl::Status StoreHealthCheck::Check() {
  const store::StoreStats stats = store_->Stats();
  const uint64_t failed = stats.index_commit_failures - commit_failures_;
  commit_failures_ = stats.index_commit_failures;
  if (failed > 0 && stats.unsynced_index_writes > 0) {
    return absl::UnavailableError(
        absl::StrFormat("%d index commits failed since the last check and %d index writes are "
                        "not durable",
                        failed, stats.unsynced_index_writes));
  }
  return absl::OkStatus();
}

std::unique_ptr<SystemdWatchdog> SystemdWatchdog::Start(const SystemdNotifier* notifier,
                                                        HealthCheck check) {
  if (!notifier->enabled() || !notifier->watchdog().has_value()) return nullptr;
  std::unique_ptr<SystemdWatchdog> w(
      new SystemdWatchdog(notifier, std::move(check), *notifier->watchdog() / 2));
  w->thread_ = std::thread([raw = w.get()] { raw->Loop(); });
  return w;
}

SystemdWatchdog::~SystemdWatchdog() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void SystemdWatchdog::Loop() {
  bool healthy = true;
  while (true) {
    const absl::Status health = check_();
    if (health.ok()) {
      if (!healthy) KVTIER_LOG(kWarning, "watchdog: healthy again; pinging systemd");
      healthy = true;
      if (absl::Status st = notifier_->Notify("WATCHDOG=1"); !st.ok()) {
        KVTIER_LOG_FIRST(kWarning, "watchdog: ", st.message());
      }
    } else if (healthy) {
      healthy = false;
      KVTIER_LOG(kError,
                 "watchdog: unhealthy, not pinging systemd (which restarts kvtierd when "
                 "this lasts): ",
                 health.message());
    }
    absl::MutexLock lock(&mu_);
    const absl::Time next = absl::Now() + period_;
    while (!stop_ && absl::Now() < next) mu_.AwaitWithDeadline(absl::Condition(&stop_), next);
    if (stop_) return;
  }
}

}  // namespace kvtier::kvtierd
