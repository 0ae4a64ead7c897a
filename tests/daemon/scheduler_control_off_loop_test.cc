// Control changes stored off the event loop (daemon/scheduler/control_change.h): pause, resume,
// extend, set parallelism or metric names and cancel stored by a connection of their own (as a
// daemon's servers' reads thread stores them on shared storage) and followed by the scheduler
// without storage (Scheduler::FollowControl). Nodes of a SchedulerCluster on one shared SQLite
// file, a fake launcher and one fake clock.

#include <algorithm>
#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <vector>

#include "daemon/scheduler.h"
#include "daemon/scheduler/control_change.h"
#include "tests/daemon/fakes.h"
#include "tests/daemon/scheduler_harness.h"

namespace triald::daemon {
namespace {

using Kind = ControlChange::Kind;
using testing::SchedulerCluster;

Sweep OneFloat(const std::string& name, int n_trials, int parallelism) {
  Sweep s;
  s.name = name;
  s.n_trials = n_trials;
  s.parallelism = parallelism;
  s.space = testing::kUnitSpace;
  s.dir = "/tmp";
  return s;
}

// Stores `change` through `conn` and has node `node` follow it; returns what was stored.
ControlStored StoreAndFollow(storage::Storage& conn, SchedulerHarness& node, Kind kind,
                             const std::string& study, int value = 0) {
  common::Result<ControlStored> stored =
      StoreControl(conn, ControlChange{kind, study, value}, node.clock().WallSeconds());
  INFO(stored.status().ToString());
  REQUIRE(stored.ok());
  common::Status followed = node.scheduler().FollowControl(*stored);
  INFO(followed.ToString());
  REQUIRE(followed.ok());
  return *stored;
}

// One node, alpha, and a connection of its own to the shared file (a servers' reads').
struct Alpha {
  explicit Alpha(bool own_reads_connection = false)
      : c({"alpha"}, own_reads_connection), a(c[0]), conn(c.Connect("alpha")) {}
  // Runs every node until nothing is left to do: `study` then COMPLETE with `n` trials.
  void RunToComplete(const std::string& study, size_t n) {
    c.RunToEnd();
    CHECK(c.Study(study).state == StudyState::kComplete);
    CHECK(c.Trials(study).size() == n);
  }
  SchedulerCluster c;
  SchedulerHarness& a;
  std::unique_ptr<storage::Storage> conn;
};

void ExitCancelled(FakeLauncher& launcher, Launched& l) {
  launcher::ProcessOutcome o;
  o.exit.signaled = true;
  o.exit.signal = 15;
  o.stop_reason = launcher::StopReason::kCancel;
  launcher.Exit(l, o);
}

TEST_CASE("a pause stored off the loop is followed with the loop's storage away, and obeyed",
          "[scheduler][shared][control]") {
  Alpha n;
  SchedulerCluster& c = n.c;
  SchedulerHarness& a = n.a;
  storage::Storage& conn = *n.conn;
  REQUIRE(a.Submit(OneFloat("held", 3, 1)).ok());
  REQUIRE(a.launcher().live_count() == 1);
  // The loop's own connection answers nothing: following the change needs none of it.
  a.flaky().down = true;
  StoreAndFollow(conn, a, Kind::kPause, "held");
  CHECK_FALSE(a.scheduler().storage_outage().held());
  const StudyCache* cached = a.scheduler().active_study("held");
  REQUIRE(cached != nullptr);
  CHECK(cached->record.paused);
  a.flaky().down = false;
  // Stored, with its event, as the verb on the loop stores it.
  CHECK(c.Study("held").paused);
  CHECK(a.HasEvent("held", "study_paused"));
  // Obeyed: the running trial goes on, nothing new starts.
  a.launcher().Complete(*a.launcher().Live().front(), 0.5);
  a.Settle();
  a.Tick();
  CHECK(a.launcher().live_count() == 0);
  CHECK(c.Trials("held").size() == 1);
  StoreAndFollow(conn, a, Kind::kResume, "held");
  a.Settle();
  CHECK(a.launcher().live_count() == 1);
  CHECK(a.HasEvent("held", "study_resumed"));
  n.RunToComplete("held", 3);
}

TEST_CASE("metric names stored off the loop are followed in the running study's record",
          "[scheduler][shared][control]") {
  Alpha n;
  SchedulerHarness& a = n.a;
  REQUIRE(a.Submit(OneFloat("named", 2, 1)).ok());
  a.flaky().down = true;  // following needs none of the loop's storage
  common::Result<ControlStored> stored =
      StoreControl(*n.conn, ControlChange{Kind::kMetricNames, "named", 0, {"val loss"}},
                   a.clock().WallSeconds());
  REQUIRE(stored.ok());
  CHECK(stored->decision.kind == "study_metric_names");
  CHECK(stored->decision.detail == "val loss");
  REQUIRE(a.scheduler().FollowControl(*stored).ok());
  const StudyCache* cached = a.scheduler().active_study("named");
  REQUIRE(cached != nullptr);
  CHECK(cached->record.submit.metric_names == std::vector<std::string>{"val loss"});
  a.flaky().down = false;
  CHECK(n.c.Study("named").submit.metric_names == std::vector<std::string>{"val loss"});
  CHECK(a.HasEvent("named", "study_metric_names"));
  // Cleared the same way; the study runs to its end with its names as stored.
  stored = StoreControl(*n.conn, ControlChange{Kind::kMetricNames, "named", 0, {}},
                        a.clock().WallSeconds());
  REQUIRE(stored.ok());
  CHECK(stored->decision.detail == "none");
  REQUIRE(a.scheduler().FollowControl(*stored).ok());
  CHECK(cached->record.submit.metric_names.empty());
  n.RunToComplete("named", 2);
  CHECK(n.c.Study("named").submit.metric_names.empty());
}

TEST_CASE("a control change stored off the loop is refused as the verb on the loop refuses it",
          "[scheduler][shared][control]") {
  Alpha n;
  SchedulerHarness& a = n.a;
  storage::Storage& conn = *n.conn;
  REQUIRE(a.Submit(OneFloat("same", 4, 1)).ok());
  const double now = a.clock().WallSeconds();
  auto off = [&](Kind kind, const std::string& study, int value = 0) {
    return StoreControl(conn, ControlChange{kind, study, value}, now).status();
  };
  // Unknown study.
  common::Status unknown = off(Kind::kPause, "nosuch");
  CHECK(unknown.code() == common::Code::kNotFound);
  CHECK(unknown.message() == a.scheduler().Pause("nosuch", true).status().message());
  // Not paused.
  common::Status not_paused = off(Kind::kResume, "same");
  CHECK(not_paused.code() == common::Code::kFailedPrecondition);
  CHECK(not_paused.message() == a.scheduler().Pause("same", false).status().message());
  // n_trials not above the finished trials, and below those that exist.
  a.launcher().Complete(*a.launcher().Live().front(), 0.5);
  a.Settle();
  common::Status low = off(Kind::kExtend, "same", 1);
  CHECK(low.code() == common::Code::kInvalidArgument);
  CHECK(low.message() == a.scheduler().Extend("same", 1).status().message());
  // A bad parallelism.
  common::Status zero = off(Kind::kParallelism, "same", 0);
  CHECK(zero.code() == common::Code::kInvalidArgument);
  CHECK(zero.message() == a.scheduler().SetParallelism("same", 0).status().message());
  // Metric names: one too many, and one given twice.
  auto names_off = [&](std::vector<std::string> names) {
    return StoreControl(conn, ControlChange{Kind::kMetricNames, "same", 0, names}, now).status();
  };
  for (const std::vector<std::string>& names :
       {std::vector<std::string>{"a", "b"}, std::vector<std::string>{""}}) {
    common::Status bad = names_off(names);
    CHECK(bad.code() == common::Code::kInvalidArgument);
    CHECK(bad.message() == a.scheduler().SetMetricNames("same", names).status().message());
  }
  // Nothing of those was stored.
  CHECK(n.c.Study("same").submit.metric_names.empty());
  const std::vector<std::string> kinds = a.EventKinds("same");
  for (const char* kind :
       {"study_paused", "study_resumed", "study_extended", "study_metric_names"}) {
    INFO(kind);
    CHECK(std::count(kinds.begin(), kinds.end(), kind) == 0);
  }
  // Cancelled once; the second is refused.
  StoreAndFollow(conn, a, Kind::kCancel, "same");
  common::Status again = off(Kind::kCancel, "same");
  CHECK(again.code() == common::Code::kFailedPrecondition);
  CHECK(again.message() == a.scheduler().Cancel("same").message());
}

TEST_CASE("a cancel stored off the loop ends every waiting trial and stops every node's trials",
          "[scheduler][shared][control]") {
  SchedulerCluster c({"alpha", "beta"});
  SchedulerHarness& a = c[0];
  std::unique_ptr<storage::Storage> connection = c.Connect("alpha");
  storage::Storage& conn = *connection;
  REQUIRE(a.Submit(OneFloat("stop", 10, 1)).ok());
  c[1].Tick();
  REQUIRE(a.launcher().live_count() == 1);
  REQUIRE(c[1].launcher().live_count() == 1);
  // Two trials waiting, claimed by no node, while the study is paused.
  REQUIRE(a.scheduler().Pause("stop", true).ok());
  REQUIRE(a.scheduler().Enqueue("stop", {{"x", "0.25"}}).ok());
  REQUIRE(a.scheduler().Enqueue("stop", {{"x", "0.75"}}).ok());
  REQUIRE(a.scheduler().Pause("stop", false).ok());
  a.Settle();
  c[1].Settle();
  // Both nodes' slots are full: the enqueued trials wait.
  std::vector<int> waiting;
  for (const TrialRecord& t : c.Trials("stop")) {
    if (t.state == TrialState::kWaiting) waiting.push_back(t.number);
  }
  REQUIRE(waiting.size() == 2);

  const ControlStored stored = StoreAndFollow(conn, a, Kind::kCancel, "stop");
  CHECK(stored.ended == waiting);
  CHECK(stored.errors.empty());
  CHECK(c.Study("stop").state == StudyState::kCancelled);
  const StudyCache* cached = a.scheduler().active_study("stop");
  if (cached != nullptr) {
    CHECK(cached->record.state == StudyState::kCancelled);
    for (int n : waiting) CHECK(cached->trials[n].state == TrialState::kFail);
  }
  // This node's trial is stopped at once; beta's at its next tick.
  Launched& mine = *a.launcher().Live().front();
  REQUIRE_FALSE(mine.stops.empty());
  CHECK(mine.stops.front() == launcher::StopReason::kCancel);
  ExitCancelled(a.launcher(), mine);
  c[1].Tick();
  Launched& theirs = *c[1].launcher().Live().front();
  REQUIRE_FALSE(theirs.stops.empty());
  ExitCancelled(c[1].launcher(), theirs);
  c.TickAll();
  CHECK(a.launcher().launch_count() == 1);
  CHECK(c[1].launcher().launch_count() == 1);
  for (const TrialRecord& t : c.Trials("stop")) {
    INFO("trial " << t.number);
    CHECK(t.state == TrialState::kFail);
    CHECK(t.fail.reason == "cancelled");
  }
  std::vector<std::string> kinds = a.EventKinds("stop");
  CHECK(std::count(kinds.begin(), kinds.end(), "study_cancelled") == 1);
}

TEST_CASE("an extend stored off the loop reopens a COMPLETE study, which this node runs again",
          "[scheduler][shared][control]") {
  Alpha n(/*own_reads_connection=*/true);
  SchedulerCluster& c = n.c;
  SchedulerHarness& a = n.a;
  storage::Storage& conn = *n.conn;
  REQUIRE(a.Submit(OneFloat("more", 2, 1)).ok());
  c.RunToEnd();
  REQUIRE(c.Study("more").state == StudyState::kComplete);
  REQUIRE(a.scheduler().active_study("more") == nullptr);  // dropped: loaded again below
  // The loop's own connection away: the study is loaded with the trials the store read, and
  // its next trial claimed on the reads' connection.
  a.flaky().down = true;
  const ControlStored stored = StoreAndFollow(conn, a, Kind::kExtend, "more", 4);
  CHECK(stored.decision.reopen);
  CHECK(stored.decision.detail == "n_trials 2 -> 4 (COMPLETE -> RUNNING)");
  REQUIRE(stored.trials.has_value());
  CHECK(stored.trials->size() == 2);
  const StudyCache* loaded = a.scheduler().active_study("more");
  REQUIRE(loaded != nullptr);
  CHECK(loaded->record.state == StudyState::kRunning);
  CHECK(loaded->record.n_trials == 4);
  a.Settle();  // the claim's completion
  CHECK(a.launcher().live_count() == 1);
  a.flaky().down = false;
  CHECK(c.Study("more").state == StudyState::kRunning);
  n.RunToComplete("more", 4);
}

TEST_CASE("a parallelism stored off the loop takes effect at the next launch",
          "[scheduler][shared][control]") {
  Alpha n;
  SchedulerHarness& a = n.a;
  storage::Storage& conn = *n.conn;
  REQUIRE(a.Submit(OneFloat("wide", 8, 1)).ok());
  REQUIRE(a.launcher().live_count() == 1);
  const ControlStored stored = StoreAndFollow(conn, a, Kind::kParallelism, "wide", 3);
  // As the loop's verb says it: the sweep's parallelism, read from the stored sweep.
  CHECK(stored.decision.detail == "parallelism 1 -> 3 (at the next launch)");
  a.Settle();
  CHECK(a.launcher().live_count() == 3);
  CHECK(n.c.Study("wide").parallelism == 3);
}

}  // namespace
}  // namespace triald::daemon
