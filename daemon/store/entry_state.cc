#include "daemon/store/entry_state.h"

#include <cstdlib>

#include "common/logging.h"

namespace kvtier::store {

const char* EntryStateName(EntryState state) {
  switch (state) {
    case EntryState::kWriting:
      return "writing";
    case EntryState::kVisible:
      return "visible";
    case EntryState::kMigrating:
      return "migrating";
    case EntryState::kDetached:
      return "detached";
    case EntryState::kDetachedMigrating:
      return "detached-migrating";
  }
  return "unknown";
}

EntryState CheckedTransition(EntryState from, EntryState to) {
  if (IsLegalTransition(from, to)) return to;
  KVTIER_LOG(kError, "store: illegal entry state transition ", EntryStateName(from), " -> ",
             EntryStateName(to), "; aborting");
  std::abort();
}

}  // namespace kvtier::store
