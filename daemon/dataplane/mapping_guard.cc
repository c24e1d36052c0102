// MappingGuard (see mapping_guard.h).
//
// The ranges live in a fixed table of atomics so that the handler reads them without a lock: a
// slot is claimed by its `claimed` flag, then filled end-first and published by storing `begin`;
// it is withdrawn by clearing `begin` first. mmap is a plain system call (made through syscall()
// here, which takes no lock); replacing the page with MAP_FIXED leaves the rest of the engine's
// mapping in place and lets the faulting instruction complete on return from the handler.
#include "daemon/dataplane/mapping_guard.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <mutex>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace kvtier::dataplane {
namespace {

struct Range {
  std::atomic<bool> claimed{false};
  std::atomic<uintptr_t> begin{0};
  std::atomic<uintptr_t> end{0};
  std::atomic<uintptr_t> page{0};
  std::atomic<uint32_t> faults{0};
  std::atomic<uintptr_t> first_fault{0};
};

Range g_ranges[MappingGuard::kMaxRanges];
std::atomic<int> g_high_water{0};  // slots below it may be in use
struct sigaction g_previous;

void ChainToPrevious(int sig, siginfo_t* info, void* context) {
  if ((g_previous.sa_flags & SA_SIGINFO) != 0 && g_previous.sa_sigaction != nullptr) {
    g_previous.sa_sigaction(sig, info, context);
    return;
  }
  if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN &&
      g_previous.sa_handler != nullptr) {
    g_previous.sa_handler(sig);
    return;
  }
  // The default action: restore it and return; the instruction faults again and the process
  // dumps core as it would have without this handler.
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = SIG_DFL;
  sigaction(SIGBUS, &dfl, nullptr);
}

void OnBusError(int sig, siginfo_t* info, void* context) {
  const uintptr_t addr = reinterpret_cast<uintptr_t>(info->si_addr);
  const int n = g_high_water.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i) {
    Range& r = g_ranges[i];
    const uintptr_t begin = r.begin.load(std::memory_order_acquire);
    if (begin == 0 || addr < begin || addr >= r.end.load(std::memory_order_acquire)) continue;
    const uintptr_t page_bytes = r.page.load(std::memory_order_relaxed);
    const uintptr_t page = begin + (addr - begin) / page_bytes * page_bytes;
    const long mapped = syscall(SYS_mmap, page, page_bytes, PROT_READ | PROT_WRITE,
                                MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (mapped == static_cast<long>(page)) {
      if (r.faults.fetch_add(1, std::memory_order_acq_rel) == 0) {
        r.first_fault.store(page - begin, std::memory_order_release);
      }
      return;
    }
    break;  // could not replace the page: not recoverable
  }
  ChainToPrevious(sig, info, context);
}

void InstallHandler() {
  struct sigaction action;
  std::memset(&action, 0, sizeof(action));
  action.sa_sigaction = OnBusError;
  action.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&action.sa_mask);
  sigaction(SIGBUS, &action, &g_previous);
}

}  // namespace

absl::StatusOr<std::unique_ptr<MappingGuard>> MappingGuard::Guard(void* base, size_t bytes,
                                                                  size_t page_bytes) {
  static std::once_flag installed;
  std::call_once(installed, InstallHandler);
  if (base == nullptr || bytes == 0 || page_bytes == 0) {
    return absl::InvalidArgumentError("MappingGuard: empty range");
  }
  for (int i = 0; i < kMaxRanges; ++i) {
    bool expected = false;
    if (!g_ranges[i].claimed.compare_exchange_strong(expected, true)) continue;
    Range& r = g_ranges[i];
    r.faults.store(0);
    r.first_fault.store(0);
    r.page.store(page_bytes);
    r.end.store(reinterpret_cast<uintptr_t>(base) + bytes, std::memory_order_release);
    r.begin.store(reinterpret_cast<uintptr_t>(base), std::memory_order_release);
    int high = g_high_water.load();
    while (high < i + 1 && !g_high_water.compare_exchange_weak(high, i + 1)) {
    }
    return std::unique_ptr<MappingGuard>(new MappingGuard(i));
  }
  return absl::ResourceExhaustedError(
      absl::StrFormat("%d mapped pools are guarded already", kMaxRanges));
}

MappingGuard::~MappingGuard() {
  Range& r = g_ranges[slot_];
  r.begin.store(0, std::memory_order_release);
  r.end.store(0, std::memory_order_release);
  r.claimed.store(false, std::memory_order_release);
}

uint32_t MappingGuard::faults() const {
  return g_ranges[slot_].faults.load(std::memory_order_acquire);
}

uint64_t MappingGuard::first_fault_offset() const {
  return g_ranges[slot_].first_fault.load(std::memory_order_acquire);
}

}  // namespace kvtier::dataplane
