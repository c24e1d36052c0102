// CephCluster: a real one-monitor Ceph cluster (Ceph 16) with one to three memstore OSDs on
// loopback, in a temporary directory, for tests of daemon/cluster. Each daemon has its own data
// directory and keyring; cephx is on. The cluster's processes are started in the foreground (-f),
// so the fixture knows their pids and stops exactly those (SIGTERM, then SIGKILL) in its
// destructor, whether the test passed or not.
//
// The recipe (measured: about 5 s from nothing to a writable pool on a 2-core machine):
//   1. ceph.conf: fsid, `mon host = v2:127.0.0.1:PORT` (PORT: a free port picked per fixture by
//      binding port 0, so parallel ctest runs do not clash; OSDs bind in 6800-7300 on their own),
//      cephx required, `osd objectstore = memstore`, small `memstore device bytes`, pool size 1,
//      `mon allow pool size one`, `osd crush chooseleaf type = 0`, run dir/admin socket/logs in the
//      directory, `mon data avail crit = 0` (tmpfs /tmp may be nearly full).
//   2. ceph-authtool: mon. keyring (mon 'allow *'), client.admin keyring (all caps), imported
//      into the mon keyring; monmaptool --create --addv a [v2:127.0.0.1:PORT].
//   3. ceph-mon --mkfs -i a --monmap --keyring; ceph-mon -f -i a.
//   4. per OSD: `ceph osd new UUID` (prints the id), ceph-authtool a key for osd.N,
//      `ceph auth add osd.N osd 'allow *' mon 'allow profile osd' -i KEYRING`,
//      ceph-osd --mkfs -i N --osd-uuid UUID --keyring, ceph-osd -f -i N.
//   5. `ceph osd pool create POOL 8 8 replicated`, `ceph osd pool set POOL size 1`.
// Without a ceph-mgr the monitor has no pool statistics, so pool quotas are not enforced and pool
// usage reads 0; SetPoolQuota only sets the quota. StartMgr starts one (tests that need quotas).
//
// Use: SKIP_IF_NO_CEPH(); auto c = CephCluster::Start(1); ASSERT_TRUE(c.ok()) << c.status();
// Not thread-safe; one test thread drives it.
#ifndef KVTIER_TESTS_TESTING_CEPH_CLUSTER_H_
#define KVTIER_TESTS_TESTING_CEPH_CLUSTER_H_

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tests/testing/temp_dir.h"

namespace kvtier::testing {

class CephCluster {
 public:
  // True when ceph-mon, ceph-osd, ceph, ceph-authtool and monmaptool are on PATH.
  static bool BinariesPresent();

  // Starts the monitor and `osds` (1..3) OSDs and creates pool "kvtier-test". Errors name the step
  // that failed and the daemon's log file.
  static absl::StatusOr<std::unique_ptr<CephCluster>> Start(int osds);

  CephCluster(const CephCluster&) = delete;
  CephCluster& operator=(const CephCluster&) = delete;
  // Stops every process this fixture started.
  ~CephCluster();

  // What a client needs: the conf (mon host, cephx), the client.admin keyring, the pool.
  const std::string& conf_path() const { return conf_; }
  const std::string& keyring_path() const { return admin_keyring_; }
  const std::string& pool() const { return pool_; }
  std::string client_id() const { return "admin"; }
  const std::string& mon_host() const { return mon_host_; }

  // Stops (SIGTERM then SIGKILL, waits) / restarts OSD `i` (0-based) or the monitor.
  absl::Status StopOsd(int i);
  absl::Status StartOsd(int i);
  absl::Status StopMon();
  // SIGKILL of OSD `i` (a memstore OSD comes back empty: in a replicated pool its peers hold
  // the data and it backfills from them).
  absl::Status KillOsd(int i);
  // SIGSTOP / SIGCONT of OSD `i`: an OSD that hangs (or a partition) without losing what it
  // holds, which a memstore OSD restarted after a stop does (its placement groups do not come
  // back active).
  absl::Status PauseOsd(int i);
  absl::Status ResumeOsd(int i);
  absl::Status StartMon();

  // True when ceph-mgr is on PATH (scripts/install-deps.sh installs it).
  static bool MgrPresent();
  // Starts a ceph-mgr: the monitor then has pool statistics, so pool quotas are enforced (and
  // usage reads nonzero). Waits until the mgr is available. About 300 MiB of memory.
  absl::Status StartMgr();

  // `ceph osd pool set-quota POOL max_bytes N`.
  absl::Status SetPoolQuota(uint64_t max_bytes);

  // Runs the ceph CLI (`ceph` with this cluster's conf and keyring, a 15 s connect timeout) with
  // `args`; the combined output, or Internal with it on a nonzero exit.
  absl::StatusOr<std::string> Ceph(const std::vector<std::string>& args);
  // Same with `rados -p POOL`; `input`, when given, is its standard input (binary values for
  // `setxattr`, whose value argument cannot hold a NUL).
  absl::StatusOr<std::string> Rados(const std::vector<std::string>& args,
                                    const std::optional<std::string>& input = std::nullopt);

 private:
  explicit CephCluster(TempDir dir) : dir_(std::move(dir)) {}
  absl::Status Setup(int osds);
  absl::Status AddOsd();
  absl::StatusOr<pid_t> Spawn(const std::vector<std::string>& argv, const std::string& log);
  absl::StatusOr<std::string> Run(const std::vector<std::string>& argv,
                                  const std::optional<std::string>& input = std::nullopt);

  TempDir dir_;
  std::string conf_, admin_keyring_, mon_host_, pool_ = "kvtier-test";
  pid_t mon_pid_ = -1;
  pid_t mgr_pid_ = -1;
  std::vector<int> osd_ids_;
  std::vector<pid_t> osd_pids_;
};

}  // namespace kvtier::testing

// In a test body: skips the test when the Ceph binaries are absent.
#define SKIP_IF_NO_CEPH()                                                               \
  do {                                                                                  \
    if (!::kvtier::testing::CephCluster::BinariesPresent())                             \
      GTEST_SKIP() << "ceph-mon/ceph-osd/ceph not installed (scripts/install-deps.sh)"; \
  } while (0)

#endif  // KVTIER_TESTS_TESTING_CEPH_CLUSTER_H_
