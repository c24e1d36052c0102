// The entry lifecycle's transition table (daemon/store/entry_state.h): exactly the moves the
// store makes are legal, every other one aborts.
#include "daemon/store/entry_state.h"

#include <set>
#include <utility>

#include "gtest/gtest.h"

namespace kvtier::store {
namespace {

using S = EntryState;

constexpr S kAll[] = {S::kWriting, S::kVisible, S::kMigrating, S::kDetached, S::kDetachedMigrating};

TEST(EntryStateTest, TableHoldsExactlyTheStoresMoves) {
  const std::set<std::pair<S, S>> legal = {
      {S::kWriting, S::kVisible},              // Commit / PutHot publish, recovery
      {S::kWriting, S::kDetached},             // aborted reservation, failed copy, shutdown
      {S::kVisible, S::kMigrating},            // the background thread starts a copy
      {S::kVisible, S::kDetached},             // Remove, eviction, failed verification
      {S::kMigrating, S::kVisible},            // the copy ended
      {S::kMigrating, S::kDetachedMigrating},  // removed while the copy is in flight
      {S::kDetachedMigrating, S::kDetached},   // the copy ended after the removal
  };
  static_assert(sizeof(kAll) / sizeof(kAll[0]) == kEntryStateCount);
  for (S from : kAll) {
    for (S to : kAll) {
      EXPECT_EQ(IsLegalTransition(from, to), legal.count({from, to}) == 1)
          << EntryStateName(from) << " -> " << EntryStateName(to);
    }
  }
}

TEST(EntryStateTest, PredicatesFollowTheStates) {
  EXPECT_FALSE(IsDetached(S::kWriting));
  EXPECT_FALSE(IsDetached(S::kVisible));
  EXPECT_FALSE(IsDetached(S::kMigrating));
  EXPECT_TRUE(IsDetached(S::kDetached));
  EXPECT_TRUE(IsDetached(S::kDetachedMigrating));
  EXPECT_TRUE(IsMigrating(S::kMigrating));
  EXPECT_TRUE(IsMigrating(S::kDetachedMigrating));
  EXPECT_FALSE(IsMigrating(S::kVisible));
  EXPECT_FALSE(IsMigrating(S::kDetached));
}

TEST(EntryStateTest, LegalTransitionReturnsTheNewState) {
  EXPECT_EQ(CheckedTransition(S::kWriting, S::kVisible), S::kVisible);
  EXPECT_EQ(CheckedTransition(S::kMigrating, S::kDetachedMigrating), S::kDetachedMigrating);
}

TEST(EntryStateDeathTest, IllegalTransitionAborts) {
  // A released entry is never used again; a writing entry was never visible, so no copy of it
  // can be in flight; a copy in flight ends before the entry may be released.
  EXPECT_DEATH(CheckedTransition(S::kDetached, S::kVisible), "illegal entry state transition");
  EXPECT_DEATH(CheckedTransition(S::kWriting, S::kMigrating), "writing -> migrating");
  EXPECT_DEATH(CheckedTransition(S::kDetachedMigrating, S::kVisible),
               "detached-migrating -> visible");
  EXPECT_DEATH(CheckedTransition(S::kVisible, S::kVisible), "visible -> visible");
}

}  // namespace
}  // namespace kvtier::store
