// StateDrive (see state_drive.h).
//
// Free space is statvfs's f_bavail (what an unprivileged user may still write; the daemon usually
// runs as one) outside the reserve file. The drive turns short below min_free and writable again
// only above min_free plus a margin (an eighth of min_free, at least 1 MiB) plus the reserve when
// it must be taken back, so that a drive near the threshold does not flap. The reserve is a
// preallocated file, so giving it up frees its blocks at once even on a file system that another
// process keeps filling. The probe file shows whether the directory still takes new files: RocksDB
// creates files (tables, logs, manifests) all the time, and one it cannot create is a failed write.
#include "daemon/index/state_drive.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/errno_text.h"
#include "common/logging.h"

namespace kvtier::index {
namespace {

constexpr char kReserveName[] = "kvtier-space-reserve";
constexpr char kProbeName[] = ".kvtier-write-probe";

std::string Mib(uint64_t bytes) {
  return absl::StrFormat("%.1f MiB", static_cast<double>(bytes) / (1 << 20));
}

}  // namespace

absl::string_view DriveStateName(DriveState state) {
  switch (state) {
    case DriveState::kWritable:
      return "writable";
    case DriveState::kShort:
      return "short";
    case DriveState::kLost:
      return "lost";
  }
  return "invalid";
}

absl::Status DriveCondition::ToStatus() const {
  switch (state) {
    case DriveState::kWritable:
      return absl::OkStatus();
    case DriveState::kShort:
      return absl::ResourceExhaustedError(reason);
    case DriveState::kLost:
      return absl::FailedPreconditionError(reason);
  }
  return absl::InternalError("invalid drive state");
}

StateDrive::StateDrive(const StateDriveOptions& options)
    : options_(options), dir_(options.dir), reserve_path_(options.dir + "/" + kReserveName) {}

StateDrive::~StateDrive() {
  if (dir_fd_ >= 0) close(dir_fd_);
}

absl::StatusOr<std::unique_ptr<StateDrive>> StateDrive::Open(const StateDriveOptions& options) {
  std::unique_ptr<StateDrive> drive(new StateDrive(options));
  drive->dir_fd_ = open(options.dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (drive->dir_fd_ < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot open the index directory ", options.dir, ": ", ErrnoText(errno)));
  }
  struct stat st;
  if (fstat(drive->dir_fd_, &st) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot stat the index directory ", options.dir, ": ", ErrnoText(errno)));
  }
  drive->dev_ = st.st_dev;
  drive->ino_ = st.st_ino;
  absl::MutexLock lock(&drive->mu_);
  struct stat reserve;
  if (fstatat(drive->dir_fd_, kReserveName, &reserve, AT_SYMLINK_NOFOLLOW) == 0) {
    if (S_ISREG(reserve.st_mode) &&
        static_cast<uint64_t>(reserve.st_size) == options.reserve_bytes &&
        options.reserve_bytes > 0) {
      drive->reserve_held_ = true;
    } else {
      drive->ReleaseReserve();  // another size (the setting changed): made again below
    }
  }
  drive->Refresh();
  return drive;
}

uint64_t StateDrive::FreeBytes() const {
  if (options_.free_bytes) return options_.free_bytes();
  struct statvfs vfs;
  if (fstatvfs(dir_fd_, &vfs) != 0) return 0;
  return uint64_t{vfs.f_bavail} * vfs.f_frsize;
}

void StateDrive::ReleaseReserve() {
  if (unlinkat(dir_fd_, kReserveName, 0) != 0 && errno != ENOENT) {
    KVTIER_LOG(kWarning, "index: cannot remove the space reserve ", reserve_path_, ": ",
               ErrnoText(errno));
  }
  if (reserve_held_) {
    KVTIER_LOG(kWarning, "index: gave up the ", Mib(options_.reserve_bytes), " space reserve ",
               reserve_path_, " so that writes under way can finish");
  }
  reserve_held_ = false;
}

bool StateDrive::CreateReserve() {
  const int fd =
      openat(dir_fd_, kReserveName, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return false;
  int err = 0;
  if (fallocate(fd, 0, 0, static_cast<off_t>(options_.reserve_bytes)) != 0) {
    err = errno;
    if (err == EOPNOTSUPP) {  // no fallocate here: write the blocks instead
      err = 0;
      std::vector<char> zeros(1 << 20);
      for (uint64_t done = 0; done < options_.reserve_bytes && err == 0;) {
        const size_t n =
            static_cast<size_t>(std::min<uint64_t>(zeros.size(), options_.reserve_bytes - done));
        const ssize_t w = pwrite(fd, zeros.data(), n, static_cast<off_t>(done));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) err = w < 0 ? errno : EIO;
        if (w > 0) done += static_cast<uint64_t>(w);
      }
      if (err == 0 && fsync(fd) != 0) err = errno;
    }
  }
  close(fd);
  if (err != 0) {
    unlinkat(dir_fd_, kReserveName, 0);
    return false;
  }
  reserve_held_ = true;
  return true;
}

void StateDrive::CheckLinked() {
  if (removed_) return;
  std::string lost;
  struct stat st;
  if (fstat(dir_fd_, &st) == 0 && st.st_nlink == 0) {
    lost = "was removed";
  } else if (stat(dir_.c_str(), &st) != 0) {
    lost = absl::StrCat("is gone from its path (", ErrnoText(errno), ")");
  } else if (st.st_dev != dev_ || st.st_ino != ino_) {
    lost = "was replaced by another directory";
  }
  if (lost.empty()) return;
  removed_ = true;
  wait_reason_ = absl::StrCat("the index directory ", dir_, " ", lost,
                              " while kvtierd ran; nothing more is written to it and durable "
                              "writes fail until kvtierd restarts");
  KVTIER_LOG(kError, "index: ", wait_reason_);
  condition_.state = DriveState::kLost;
  condition_.reason = wait_reason_;
}

absl::Status StateDrive::CheckDirectory() {
  absl::MutexLock lock(&mu_);
  CheckLinked();
  if (removed_) return absl::FailedPreconditionError(wait_reason_);
  return absl::OkStatus();
}

void StateDrive::Refresh() {
  checked_ = absl::Now();
  DriveCondition c;
  c.min_free_bytes = options_.min_free_bytes;
  c.stalled = stalled();
  std::string lost;
  CheckLinked();
  if (removed_) {
    c.state = DriveState::kLost;
    c.reason = wait_reason_;
    c.free_bytes = FreeBytes();
    condition_ = c;
    return;
  }
  bool no_room_for_files = false;
  const int probe =
      openat(dir_fd_, kProbeName, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (probe < 0) {
    const int err = errno;
    if (err == ENOSPC || err == EDQUOT) {
      no_room_for_files = true;
    } else {
      lost = absl::StrCat("the index directory ", dir_,
                          " cannot be written (creating a file: ", ErrnoText(err),
                          "); durable writes fail until it can");
    }
  } else {
    close(probe);
    unlinkat(dir_fd_, kProbeName, 0);
  }
  c.free_bytes = FreeBytes();
  if (!lost.empty()) {
    if (condition_.state != DriveState::kLost) KVTIER_LOG(kError, "index: ", lost);
    c.state = DriveState::kLost;
    c.reason = lost;
    condition_ = c;
    return;
  }
  const uint64_t min_free = options_.min_free_bytes;
  const uint64_t margin = std::max<uint64_t>(min_free / 8, 1 << 20);
  const bool was_short = condition_.state == DriveState::kShort || waited_;
  const uint64_t resume_at = min_free + margin + (reserve_held_ ? 0 : options_.reserve_bytes);
  bool short_now = no_room_for_files || c.stalled ||
                   (was_short ? c.free_bytes < resume_at : c.free_bytes < min_free);
  if (!short_now && !reserve_held_ && options_.reserve_bytes > 0) {
    short_now = !CreateReserve();
    if (!short_now) c.free_bytes = FreeBytes();
  }
  if (short_now) {
    c.state = DriveState::kShort;
    c.reason = absl::StrCat(
        "the drive holding the index at ", dir_, " has ", Mib(c.free_bytes), " free",
        c.stalled
            ? " and an index write is waiting for space"
            : absl::StrCat(", below ", was_short ? "what resumes writes (" : "index.min_free (",
                           Mib(was_short ? resume_at : min_free), ")"),
        "; durable writes and writes to the disk tier are refused until space returns");
    if (condition_.state != DriveState::kShort) KVTIER_LOG(kWarning, "index: ", c.reason);
  } else {
    if (condition_.state != DriveState::kWritable) {
      KVTIER_LOG(kInfo, "index: the drive holding ", dir_, " has ", Mib(c.free_bytes),
                 " free again; index writes resume");
    }
    waited_ = false;
  }
  condition_ = c;
}

DriveCondition StateDrive::Check(bool force) {
  absl::MutexLock lock(&mu_);
  if (force || absl::Now() - checked_ >= options_.refresh_interval ||
      stalled() != condition_.stalled) {
    Refresh();
  }
  return condition_;
}

StateDrive::SpaceWait::SpaceWait(StateDrive* drive, absl::string_view what) : drive_(drive) {
  drive_->waiting_.fetch_add(1);
  absl::MutexLock lock(&drive_->mu_);
  if (!drive_->waited_) {
    KVTIER_LOG(kWarning, "index: ", what, " found no space on the drive holding ", drive_->dir_,
               "; it waits for space (the index refuses new writes meanwhile)");
  }
  drive_->waited_ = true;
  if (drive_->reserve_held_) drive_->ReleaseReserve();
  DriveCondition& c = drive_->condition_;
  if (c.state == DriveState::kWritable) {
    c.state = DriveState::kShort;
    c.reason = absl::StrCat("the drive holding the index at ", drive_->dir_,
                            " is full and an index write is waiting for space");
  }
  c.stalled = true;
}

StateDrive::SpaceWait::~SpaceWait() { drive_->waiting_.fetch_sub(1); }

bool StateDrive::SpaceWait::Pause(absl::Duration pause) {
  if (drive_->abandoned_) return false;
  absl::SleepFor(pause);
  return !drive_->abandoned_;
}

}  // namespace kvtier::index
