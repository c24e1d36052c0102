// StateDrive: watches the directory that holds the index and the file system under it, so that
// the index stops taking writes while the drive is (nearly) full and stops acknowledging durable
// writes once its directory is gone. Debian's RocksDB aborts the process after a write that
// failed, so the index must not let RocksDB meet a full drive: below `min_free_bytes` it refuses
// writes itself, and a write that meets ENOSPC anyway waits (WaitForSpace) instead of failing.
// A preallocated reserve file inside the directory is given up when a write has to wait, so that
// writes already inside RocksDB can finish, and taken back when space returns. Thread-safe.
#ifndef KVTIER_DAEMON_INDEX_STATE_DRIVE_H_
#define KVTIER_DAEMON_INDEX_STATE_DRIVE_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace kvtier::index {

struct StateDriveOptions {
  std::string dir;                         // must exist
  uint64_t min_free_bytes = 256ull << 20;  // writes are refused below this much free space
  uint64_t reserve_bytes = 64ull << 20;    // kept preallocated in `dir`; 0: none
  absl::Duration refresh_interval = absl::Milliseconds(100);
  // Free bytes of the file system; statvfs's f_bavail * f_frsize of `dir` when empty (tests).
  std::function<uint64_t()> free_bytes;
};

// What the drive allows now.
enum class DriveState : uint8_t {
  kWritable = 0,
  kShort = 1,  // too little free space (or a write waited for space and it is not back yet)
  kLost = 2,   // the directory was removed or replaced, or cannot be written
};
absl::string_view DriveStateName(DriveState state);  // "writable", "short", "lost"

struct DriveCondition {
  DriveState state = DriveState::kWritable;
  uint64_t free_bytes = 0;
  uint64_t min_free_bytes = 0;
  bool stalled = false;  // a write is waiting for space right now
  std::string reason;    // empty when writable; else one sentence naming the directory
  // OK when writable; ResourceExhausted (short) or FailedPrecondition (lost) with the reason.
  absl::Status ToStatus() const;
};

class StateDrive {
 public:
  // Opens `options.dir` (kept open to notice its removal), takes the first reading and creates
  // the reserve when there is room for it. FailedPrecondition when the directory cannot be opened.
  static absl::StatusOr<std::unique_ptr<StateDrive>> Open(const StateDriveOptions& options);
  ~StateDrive();
  StateDrive(const StateDrive&) = delete;
  StateDrive& operator=(const StateDrive&) = delete;

  // The current condition, read again when the last reading is older than refresh_interval (or
  // `force`): free space (statvfs), the directory (still linked, still the one at its path, a
  // probe file can be created in it). Takes the reserve back once space has returned. A removed
  // or replaced directory stays lost. Cheap between readings; a few syscalls otherwise.
  DriveCondition Check(bool force = false);
  // Whether the directory is still linked and still the one at its path (two stat calls; no
  // probe, no statvfs): what a durable acknowledgement needs after a log sync. FailedPrecondition
  // with the reason when it is not (and the drive is lost from then on).
  absl::Status CheckDirectory();

  // A write that met ENOSPC or EDQUOT waits for space through one of these instead of failing:
  // the first one gives up the reserve and marks the drive short; Pause() sleeps `pause` and
  // returns false once Abandon() was called (the writer then fails). The drive counts as stalled
  // while one exists.
  class SpaceWait {
   public:
    SpaceWait(StateDrive* drive, absl::string_view what);
    ~SpaceWait();
    SpaceWait(const SpaceWait&) = delete;
    SpaceWait& operator=(const SpaceWait&) = delete;
    bool Pause(absl::Duration pause = absl::Milliseconds(50));

   private:
    StateDrive* drive_;
  };
  // From now on SpaceWait::Pause returns false at once (shutdown).
  void Abandon() { abandoned_ = true; }
  bool stalled() const { return waiting_.load() > 0; }

  const std::string& dir() const { return dir_; }

 private:
  explicit StateDrive(const StateDriveOptions& options);
  uint64_t FreeBytes() const;
  // REQUIRES: mu_ held.
  void Refresh();
  // Sets removed_ (and logs) when the directory is gone or replaced. REQUIRES: mu_ held.
  void CheckLinked();
  void ReleaseReserve();  // REQUIRES: mu_ held
  bool CreateReserve();   // REQUIRES: mu_ held

  const StateDriveOptions options_;
  const std::string dir_;
  const std::string reserve_path_;
  int dir_fd_ = -1;
  dev_t dev_ = 0;
  ino_t ino_ = 0;
  std::atomic<int> waiting_{0};
  std::atomic<bool> abandoned_{false};

  absl::Mutex mu_;
  absl::Time checked_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  DriveCondition condition_ ABSL_GUARDED_BY(mu_);
  bool removed_ ABSL_GUARDED_BY(mu_) = false;       // sticky
  bool waited_ ABSL_GUARDED_BY(mu_) = false;        // a write waited; short until space is back
  bool reserve_held_ ABSL_GUARDED_BY(mu_) = false;  // the reserve file exists at full size
  std::string wait_reason_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvtier::index

#endif  // KVTIER_DAEMON_INDEX_STATE_DRIVE_H_
