// FairScheduler: the order of turns between flows and within one flow, fresh flows first, turns
// asked for at destruction, and tasks of one flow on several workers. One worker held by a gate
// task while the others are queued makes every order deterministic.
#include "daemon/service/fair_scheduler.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace kvtier::service {
namespace {

// The turns run, in order, as "<name><turn>" ("a1", "a2", ...).
class Trace {
 public:
  void Add(const std::string& s) {
    absl::MutexLock lock(&mu_);
    turns_.push_back(s);
  }
  std::vector<std::string> turns() const {
    absl::MutexLock lock(&mu_);
    return turns_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<std::string> turns_;
};

// A task of `turns` turns that records each; `during` (when set) runs in its first turn.
FairScheduler::Task Turns(Trace* trace, const std::string& name, int turns,
                          std::function<void()> during = nullptr) {
  auto done = std::make_shared<int>(0);
  return [trace, name, turns, done, during] {
    ++*done;
    trace->Add(name + std::to_string(*done));
    if (*done == 1 && during != nullptr) during();
    return *done < turns;
  };
}

// Holds the scheduler's only worker until Open(): the tasks submitted meanwhile are all queued.
class Gate {
 public:
  explicit Gate(FairScheduler& scheduler) {
    scheduler.Submit("gate", [this] {
      started_.Notify();
      open_.WaitForNotificationWithTimeout(absl::Seconds(60));
      return false;
    });
    EXPECT_TRUE(started_.WaitForNotificationWithTimeout(absl::Seconds(60)));
  }
  void Open() { open_.Notify(); }

 private:
  absl::Notification started_, open_;
};

TEST(FairSchedulerTest, FlowsTakeTurnsRoundRobin) {
  Trace trace;
  {
    FairScheduler scheduler(1);
    Gate gate(scheduler);
    scheduler.Submit("a", Turns(&trace, "a", 3));
    scheduler.Submit("b", Turns(&trace, "b", 3));
    scheduler.Submit("c", Turns(&trace, "c", 1));
    EXPECT_EQ(scheduler.queued(), 3u);
    gate.Open();
  }
  EXPECT_EQ(trace.turns(), (std::vector<std::string>{"a1", "b1", "c1", "a2", "b2", "a3", "b3"}));
}

TEST(FairSchedulerTest, AFlowWithNothingQueuedGoesAheadOfTheFlowsThatHadTurns) {
  Trace trace;
  {
    FairScheduler scheduler(1);
    Gate gate(scheduler);
    // "c" arrives during a's second turn, behind the turns of a and b: it goes first.
    scheduler.Submit("a", Turns(&trace, "a", 4));
    scheduler.Submit("b", Turns(&trace, "b", 4));
    scheduler.Submit("x",
                     Turns(&trace, "x", 2, [&] { scheduler.Submit("c", Turns(&trace, "c", 2)); }));
    gate.Open();
  }
  // a1 b1 x1 (submits c) | c1 | a2 b2 x2 c2 a3 b3 a4 b4: c's first turn before a2, then in turn.
  EXPECT_EQ(trace.turns(), (std::vector<std::string>{"a1", "b1", "x1", "c1", "a2", "b2", "x2", "c2",
                                                     "a3", "b3", "a4", "b4"}));
}

TEST(FairSchedulerTest, ATaskContinuesAheadOfTheLaterTasksOfItsFlow) {
  Trace trace;
  {
    FairScheduler scheduler(1);
    Gate gate(scheduler);
    scheduler.Submit("a", Turns(&trace, "x", 3));
    scheduler.Submit("a", Turns(&trace, "y", 1));
    scheduler.Submit("b", Turns(&trace, "b", 2));
    gate.Open();
  }
  EXPECT_EQ(trace.turns(), (std::vector<std::string>{"x1", "b1", "x2", "b2", "x3", "y1"}));
}

TEST(FairSchedulerTest, AFlowThatGetsANewTaskWhileItsTaskRunsIsNotFresh) {
  Trace trace;
  {
    FairScheduler scheduler(1);
    Gate gate(scheduler);
    scheduler.Submit("b", Turns(&trace, "b", 2));
    // x's flow has nothing queued while x1 runs; y then arrives in it. x's second turn must not
    // overtake b's as a fresh flow would.
    scheduler.Submit("a",
                     Turns(&trace, "x", 2, [&] { scheduler.Submit("a", Turns(&trace, "y", 1)); }));
    gate.Open();
  }
  EXPECT_EQ(trace.turns(), (std::vector<std::string>{"b1", "x1", "b2", "x2", "y1"}));
}

TEST(FairSchedulerTest, DestructionRunsEveryTurnAskedFor) {
  Trace trace;
  {
    FairScheduler scheduler(2);
    for (int i = 0; i < 8; ++i) {
      scheduler.Submit(std::to_string(i % 3), Turns(&trace, "t" + std::to_string(i) + "-", 5));
    }
  }
  EXPECT_EQ(trace.turns().size(), 40u);
}

TEST(FairSchedulerTest, TasksOfOneFlowRunOnSeveralWorkersAtOnce) {
  FairScheduler scheduler(2);
  absl::Notification first, second, done_first, done_second;
  bool saw_second = false, saw_first = false;
  scheduler.Submit("a", [&] {
    first.Notify();
    saw_second = second.WaitForNotificationWithTimeout(absl::Seconds(60));
    done_first.Notify();
    return false;
  });
  scheduler.Submit("a", [&] {
    second.Notify();
    saw_first = first.WaitForNotificationWithTimeout(absl::Seconds(60));
    done_second.Notify();
    return false;
  });
  ASSERT_TRUE(done_first.WaitForNotificationWithTimeout(absl::Seconds(120)));
  ASSERT_TRUE(done_second.WaitForNotificationWithTimeout(absl::Seconds(120)));
  EXPECT_TRUE(saw_second && saw_first) << "the two tasks of one flow did not run at once";
}

}  // namespace
}  // namespace kvtier::service
