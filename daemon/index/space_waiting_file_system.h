// A RocksDB FileSystem for the index whose writable files wait for space instead of failing.
// Debian's RocksDB (built with assertions) aborts the process on the next use of a file writer
// that saw a failed write, so no failed write must reach it: a write, sync or file creation that
// meets ENOSPC or EDQUOT waits through StateDrive::SpaceWait (which also gives up the drive's
// space reserve and marks it short, so the index refuses new writes) and goes on when space
// returns. Other errors pass through. Everything but writable files is the default file system.
#ifndef KVTIER_DAEMON_INDEX_SPACE_WAITING_FILE_SYSTEM_H_
#define KVTIER_DAEMON_INDEX_SPACE_WAITING_FILE_SYSTEM_H_

#include <memory>

#include "daemon/index/state_drive.h"

namespace rocksdb {
class FileSystem;
}  // namespace rocksdb

namespace kvtier::index {

// `drive` is borrowed and must outlive the file system and every file it opened.
std::shared_ptr<rocksdb::FileSystem> NewSpaceWaitingFileSystem(StateDrive* drive);

}  // namespace kvtier::index

#endif  // KVTIER_DAEMON_INDEX_SPACE_WAITING_FILE_SYSTEM_H_
