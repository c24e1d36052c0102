// EntryState: where a block's in-memory entry is in its life, and the one table of the moves
// between states the store may make. Every change of an entry's state goes through
// CheckedTransition, so an illegal move (a bug in the store, never an input) stops the daemon at
// the line that made it instead of leaving an entry that is, say, both released and in flight.
#ifndef KVTIER_DAEMON_STORE_ENTRY_STATE_H_
#define KVTIER_DAEMON_STORE_ENTRY_STATE_H_

#include <cstdint>

namespace kvtier::store {

// An entry's life:
//
//   kWriting ──publish──> kVisible <──copy done── kMigrating
//      │                    │  └────copy starts─────>  │
//      │ abort              │ detach                   │ detach
//      v                    v                          v
//   kDetached <──────── copy done ─────────── kDetachedMigrating
//
// kWriting: reserved (Reserve, PutHot) and invisible to lookups until Commit or PutHot publishes
// it. kVisible: in the map, found by lookups. kMigrating: visible while the background thread
// copies it into another tier (a GPU page encoded into the host tier, a host copy written to
// disk); the background thread alone enters and leaves it. kDetached: out of the map and the LRU
// lists, its index record's deletion queued; its slots are freed once no reader pins it.
// kDetachedMigrating: detached while a copy was in flight; the copy's end makes it kDetached and
// only then may its slots go. The store frees a kDetached entry's memory; nothing follows it.
enum class EntryState : uint8_t {
  kWriting = 0,
  kVisible = 1,
  kMigrating = 2,
  kDetached = 3,
  kDetachedMigrating = 4,
};
inline constexpr int kEntryStateCount = 5;

// Whether the store may move an entry from `from` to `to` (the arrows above; staying put is not a
// transition).
constexpr bool IsLegalTransition(EntryState from, EntryState to) {
  switch (from) {
    case EntryState::kWriting:
      return to == EntryState::kVisible || to == EntryState::kDetached;
    case EntryState::kVisible:
      return to == EntryState::kMigrating || to == EntryState::kDetached;
    case EntryState::kMigrating:
      return to == EntryState::kVisible || to == EntryState::kDetachedMigrating;
    case EntryState::kDetachedMigrating:
      return to == EntryState::kDetached;
    case EntryState::kDetached:
      return false;
  }
  return false;
}

const char* EntryStateName(EntryState state);

// Returns `to` when the move is legal; otherwise logs both states and aborts the process (a
// corrupted lifecycle would free slots still in use or index blocks that are gone).
EntryState CheckedTransition(EntryState from, EntryState to);

// The entry is out of the map (removed, evicted, aborted): lookups do not find it.
constexpr bool IsDetached(EntryState s) {
  return s == EntryState::kDetached || s == EntryState::kDetachedMigrating;
}
// A copy into another tier is in flight: its slots and copies must stay.
constexpr bool IsMigrating(EntryState s) {
  return s == EntryState::kMigrating || s == EntryState::kDetachedMigrating;
}

}  // namespace kvtier::store

#endif  // KVTIER_DAEMON_STORE_ENTRY_STATE_H_
