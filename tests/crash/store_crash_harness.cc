// kvtier-store-crash-harness: kills a process that stores and reads blocks with SIGKILL at random
// moments, restarts the store, and checks what a crash must never break:
//   - every index entry resolves to a block whose checksum verifies (BlockStore::Verify finds no
//     failure),
//   - every block acknowledged as durable (a Put with wait_durable that returned OK) is present,
//   - no read, in the child or after the restart, returns wrong bytes.
// Usage: kvtier-store-crash-harness [--cycles=N] [--seed=S] [--dir=D] [--persistent-host]
//                                   [--max-delay-ms=M]
// The child mode (--child) is internal. Exit status 0 when every cycle passed.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/logging.h"
#include "daemon/store/block_store.h"
#include "tests/testing/cold_blocks.h"
#include "tests/testing/temp_dir.h"

namespace kvtier::store {
namespace {

constexpr uint64_t kIdsPerCycle = 1'000'000;

struct Flags {
  int cycles = 20;
  uint64_t seed = 1;
  std::string dir;
  bool persistent_host = false;
  int max_delay_ms = 600;
  bool child = false;
  uint64_t start_id = 0;
  int ack_fd = -1;
};

uint32_t PayloadFor(uint64_t id) { return 4000 + static_cast<uint32_t>(id % 10) * 4000; }
BlockKey KeyFor(uint64_t id) { return BlockKey{1, kvtier::testing::TestHash(id)}; }

BlockStoreOptions StoreOptions(const Flags& f) {
  BlockStoreOptions o;
  o.host.capacity_bytes = 8ull << 20;  // small: blocks move to disk all the time
  o.host.pin = HostPinMode::kNone;
  if (f.persistent_host) {
    o.host.shm_dir = f.dir;
    o.host.shm_name = "host-arena";
  }
  o.host_chunk_bytes = 1ull << 20;
  o.max_block_bytes = 1ull << 20;
  o.disk.dirs = {f.dir + "/disk0", f.dir + "/disk1"};
  o.disk.capacity_bytes = 1ull << 30;
  o.disk.chunk_bytes = 1ull << 20;
  o.index_path = f.dir + "/index";
  o.sync = index::SyncPolicy::kBatch;
  return o;
}

bool SameBytes(absl::Span<const uint8_t> got, uint64_t id) {
  const std::vector<uint8_t> expected = kvtier::testing::MakeTestBlock(id, PayloadFor(id));
  return got.size() == expected.size() && std::equal(got.begin(), got.end(), expected.begin());
}

void WriteLine(int fd, const std::string& line) {
  std::string text = line + "\n";
  const char* p = text.data();
  size_t left = text.size();
  while (left > 0) {
    ssize_t n = write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) std::_Exit(4);
    p += n;
    left -= static_cast<size_t>(n);
  }
}

// The child: stores and reads until it is killed. Reports "A id" after a durable put returned OK,
// "R id" before removing a block, "W id" (then exits) when a read returned wrong bytes.
int RunChild(const Flags& f) {
  SetMinLogSeverity(LogSeverity::kError);
  absl::StatusOr<std::unique_ptr<BlockStore>> store = BlockStore::Open(StoreOptions(f));
  if (!store.ok()) {
    std::fprintf(stderr, "child: open failed: %s\n", store.status().ToString().c_str());
    return 2;
  }
  std::mt19937_64 rng(f.seed ^ f.start_id);
  std::vector<uint64_t> issued;
  for (uint64_t id = f.start_id;; ++id) {
    const int op = static_cast<int>(rng() % 100);
    if (op < 45 || issued.empty()) {
      PutOptions o;
      o.durable = op < 30;
      o.wait_durable = o.durable;
      absl::Status st =
          (*store)->Put(KeyFor(id), kvtier::testing::MakeTestBlock(id, PayloadFor(id)), o);
      if (st.ok()) WriteLine(f.ack_fd, absl::StrCat(o.durable ? "A " : "N ", id));
      issued.push_back(id);
    } else if (op < 95) {
      const uint64_t target = issued[rng() % issued.size()];
      absl::StatusOr<std::optional<PinnedBlock>> p = (*store)->Acquire(KeyFor(target));
      if (p.ok() && p->has_value() && !SameBytes((*p)->bytes(), target)) {
        WriteLine(f.ack_fd, absl::StrCat("W ", target));
        return 3;
      }
    } else {
      const uint64_t target = issued[rng() % issued.size()];
      WriteLine(f.ack_fd, absl::StrCat("R ", target));
      (void)(*store)->Remove(KeyFor(target));
    }
  }
}

struct Ledger {
  std::set<uint64_t> durable;  // acknowledged, not removed since
  std::set<uint64_t> removed;  // may or may not be present
  uint64_t max_issued = 0;     // highest id whose put returned
  bool wrong_bytes = false;
  std::string partial;
  void Consume(const char* data, size_t n) {
    partial.append(data, n);
    size_t nl;
    while ((nl = partial.find('\n')) != std::string::npos) {
      const std::string line = partial.substr(0, nl);
      partial.erase(0, nl + 1);
      uint64_t id = 0;
      if (line.size() < 3 || !absl::SimpleAtoi(line.substr(2), &id)) continue;
      if (line[0] == 'A' || line[0] == 'N') max_issued = std::max(max_issued, id);
      if (line[0] == 'A') {
        durable.insert(id);
        removed.erase(id);
      } else if (line[0] == 'R') {
        durable.erase(id);
        removed.insert(id);
      } else if (line[0] == 'W') {
        wrong_bytes = true;
      }
    }
  }
};

int RunParent(Flags f, const char* self) {
  std::unique_ptr<kvtier::testing::TempDir> temp;
  if (f.dir.empty()) {
    temp = std::make_unique<kvtier::testing::TempDir>(kvtier::testing::TempDir::Create().value());
    f.dir = temp->path();
  }
  for (const char* sub : {"/disk0", "/disk1"}) mkdir((f.dir + sub).c_str(), 0700);
  SetMinLogSeverity(LogSeverity::kWarning);  // a block that fails verification says why
  std::mt19937_64 rng(f.seed);
  Ledger ledger;
  uint64_t total_checked = 0, total_verified = 0;
  std::vector<uint64_t> cycle_max;  // per cycle: highest id stored
  double max_recovery = 0;
  for (int cycle = 0; cycle < f.cycles; ++cycle) {
    int fds[2];
    if (pipe(fds) != 0) return 2;
    const uint64_t start_id = static_cast<uint64_t>(cycle) * kIdsPerCycle;
    const pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      const std::string ack = absl::StrCat("--ack-fd=", fds[1]);
      const std::string start = absl::StrCat("--start-id=", start_id);
      const std::string seed = absl::StrCat("--seed=", f.seed);
      const std::string dir = absl::StrCat("--dir=", f.dir);
      std::vector<const char*> argv = {self,          "--child",    ack.c_str(),
                                       start.c_str(), seed.c_str(), dir.c_str()};
      if (f.persistent_host) argv.push_back("--persistent-host");
      argv.push_back(nullptr);
      execv(self, const_cast<char* const*>(argv.data()));
      std::_Exit(127);
    }
    close(fds[1]);
    if (pid < 0) {  // kill(-1, ...) below would signal every process this user may signal
      std::fprintf(stderr, "fork: %s\n", std::strerror(errno));
      close(fds[0]);
      return 2;
    }
    const int delay_ms = 50 + static_cast<int>(rng() % static_cast<uint64_t>(f.max_delay_ms));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(delay_ms);
    char buf[4096];
    bool child_ended = false;
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{fds[0], POLLIN, 0};
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (poll(&p, 1, static_cast<int>(std::max<int64_t>(1, left.count()))) > 0) {
        const ssize_t n = read(fds[0], buf, sizeof(buf));
        if (n <= 0) {
          child_ended = true;
          break;
        }
        ledger.Consume(buf, static_cast<size_t>(n));
      }
    }
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    for (ssize_t n; (n = read(fds[0], buf, sizeof(buf))) > 0;) {
      ledger.Consume(buf, static_cast<size_t>(n));
    }
    close(fds[0]);
    if (ledger.wrong_bytes) {
      std::fprintf(stderr, "cycle %d: the child read wrong bytes\n", cycle);
      return 1;
    }
    if (child_ended && !(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)) {
      std::fprintf(stderr, "cycle %d: the child exited on its own (status %d)\n", cycle, status);
      return 1;
    }

    // Restart and check.
    absl::StatusOr<std::unique_ptr<BlockStore>> store = BlockStore::Open(StoreOptions(f));
    if (!store.ok()) {
      std::fprintf(stderr, "cycle %d: reopen failed: %s\n", cycle,
                   store.status().ToString().c_str());
      return 1;
    }
    max_recovery = std::max(max_recovery, (*store)->recovery().seconds);
    absl::StatusOr<BlockStore::VerifyReport> verify = (*store)->Verify();
    if (!verify.ok() || verify->failed != 0) {
      std::fprintf(
          stderr, "cycle %d: %s index entries do not resolve to a verified block\n", cycle,
          verify.ok() ? absl::StrCat(verify->failed).c_str() : verify.status().ToString().c_str());
      return 1;
    }
    total_verified += verify->blocks;
    for (uint64_t id : ledger.durable) {
      absl::StatusOr<std::optional<PinnedBlock>> p = (*store)->Acquire(KeyFor(id));
      if (!p.ok() || !p->has_value()) {
        std::fprintf(stderr, "cycle %d: durable block %llu is missing after the restart\n", cycle,
                     static_cast<unsigned long long>(id));
        return 1;
      }
      if (!SameBytes((*p)->bytes(), id)) {
        std::fprintf(stderr, "cycle %d: block %llu has wrong bytes\n", cycle,
                     static_cast<unsigned long long>(id));
        return 1;
      }
      ++total_checked;
    }
    for (uint64_t id : ledger.removed) {
      absl::StatusOr<std::optional<PinnedBlock>> p = (*store)->Acquire(KeyFor(id));
      if (p.ok() && p->has_value() && !SameBytes((*p)->bytes(), id)) {
        std::fprintf(stderr, "cycle %d: removed block %llu came back with wrong bytes\n", cycle,
                     static_cast<unsigned long long>(id));
        return 1;
      }
    }
    // Keep the store bounded: blocks of cycles older than the last three are removed for good
    // (otherwise disk eviction would, legitimately, drop acknowledged blocks).
    cycle_max.push_back(ledger.max_issued);
    ledger.max_issued = 0;
    if (cycle >= 3) {
      const uint64_t old_start = static_cast<uint64_t>(cycle - 3) * kIdsPerCycle;
      for (uint64_t id = old_start; id <= cycle_max[cycle - 3] && cycle_max[cycle - 3] != 0; ++id) {
        if (!(*store)->Remove(KeyFor(id)).ok()) return 1;
        ledger.durable.erase(id);
        ledger.removed.erase(id);
      }
      if (!(*store)->Flush().ok()) return 1;
    }
    std::printf(
        "cycle %3d: killed after %3d ms; %s; %llu blocks verified; %zu durable blocks present\n",
        cycle, delay_ms, (*store)->recovery().ToString().c_str(),
        static_cast<unsigned long long>(verify->blocks), ledger.durable.size());
    std::fflush(stdout);
  }
  std::printf(
      "PASS: %d cycles, %llu index entries verified, %llu durable-block checks, longest recovery "
      "%.3f s\n",
      f.cycles, static_cast<unsigned long long>(total_verified),
      static_cast<unsigned long long>(total_checked), max_recovery);
  return 0;
}

}  // namespace
}  // namespace kvtier::store

int main(int argc, char** argv) {
  kvtier::store::Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](const char* name) -> const char* {
      const size_t n = std::strlen(name);
      return arg.compare(0, n, name) == 0 ? argv[i] + n : nullptr;
    };
    if (arg.rfind("--gtest_", 0) == 0) {
      continue;  // runners that pass gtest flags to every test binary
    } else if (arg == "--child") {
      f.child = true;
    } else if (arg == "--persistent-host") {
      f.persistent_host = true;
    } else if (const char* v = value("--cycles=")) {
      f.cycles = std::atoi(v);
    } else if (const char* v = value("--seed=")) {
      f.seed = std::strtoull(v, nullptr, 10);
    } else if (const char* v = value("--dir=")) {
      f.dir = v;
    } else if (const char* v = value("--max-delay-ms=")) {
      f.max_delay_ms = std::max(1, std::atoi(v));
    } else if (const char* v = value("--start-id=")) {
      f.start_id = std::strtoull(v, nullptr, 10);
    } else if (const char* v = value("--ack-fd=")) {
      f.ack_fd = std::atoi(v);
    } else {
      std::fprintf(stderr,
                   "usage: %s [--cycles=N] [--seed=S] [--dir=D] [--persistent-host] "
                   "[--max-delay-ms=M]\n",
                   argv[0]);
      return 2;
    }
  }
  return f.child ? kvtier::store::RunChild(f) : kvtier::store::RunParent(f, argv[0]);
}
