// Cancel, shutdown, and a restart's recovery: trials left RUNNING, processes to kill, trials
// created but never started.
// Driven without forking through the scheduler harness (tests/daemon/scheduler_harness.h): a
// FakeLauncher plays every trial process, a FakeClock gives time, and the real SQLite storage
// (in memory) records what a user would later read with `trialctl`.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "daemon/objective/objective_command.h"
#include "daemon/scheduler.h"
#include "daemon/storage/storage.h"
#include "tests/daemon/fakes.h"
#include "tests/daemon/scheduler_harness.h"

namespace triald::daemon {
namespace {

// ---------------------------------------------------------------------------------------------
// Cancel and shutdown

TEST_CASE("cancelling a study stops its running trials and starts no more", "[scheduler]") {
  SchedulerHarness h;
  FakeLauncher& l = h.launcher();
  Sweep sweep, other;
  sweep.name = "doomed";
  sweep.n_trials = 5;
  sweep.parallelism = 2;
  other.name = "bystander";
  other.n_trials = 2;
  h.SubmitOk(sweep);
  h.SubmitOk(other);
  REQUIRE(l.live_count("doomed") == 2);
  REQUIRE(l.live_count("bystander") == 1);

  common::Status st = h.scheduler().Cancel("doomed");
  INFO(st.ToString());
  REQUIRE(st.ok());
  CHECK(h.Study("doomed").state == StudyState::kCancelled);
  for (Launched* p : l.Live("doomed")) {
    CHECK(p->stops == std::vector<StopReason>{StopReason::kCancel});
  }
  CHECK(LiveAt(l, "bystander").stops.empty());  // other studies are untouched

  // The processes take their time to go: nothing new starts meanwhile, or after.
  Launched& first = LiveAt(l, "doomed", 0);
  Launched& second = LiveAt(l, "doomed", 1);
  l.ExitSignal(first, SIGTERM);
  CHECK(l.launch_count() == 3);
  l.ExitCode(second, 143);
  CHECK(l.launch_count() == 3);
  h.scheduler().Pump();
  CHECK(l.launch_count() == 3);

  std::vector<TrialRecord> trials = h.Trials("doomed");
  REQUIRE(trials.size() == 2);  // trials never started are not created
  for (const TrialRecord& t : trials) {
    INFO(Describe(t));
    CHECK(t.state == TrialState::kFail);
    CHECK(t.fail.reason == "cancelled");
  }
  CHECK(h.Study("doomed").state == StudyState::kCancelled);

  // Cancelling again, or an unknown study, is an error.
  common::Status again = h.scheduler().Cancel("doomed");
  CHECK_FALSE(again.ok());
  CHECK_THAT(again.message(), Catch::Contains("doomed"));
  common::Status unknown = h.scheduler().Cancel("no-such-study");
  CHECK(unknown.code() == Code::kNotFound);
  CHECK(h.Study("doomed").state == StudyState::kCancelled);

  // The other study runs on to completion.
  CompleteAll(h, "bystander", 4);
  CHECK(h.Trials("bystander").size() == 2);
  CHECK(h.Study("bystander").state == StudyState::kComplete);
  CHECK(h.scheduler().active_study_count() == 0);
}

TEST_CASE("cancelling a study that already completed is an error and changes nothing",
          "[scheduler]") {
  SchedulerHarness h;
  Sweep sweep;
  sweep.name = "done";
  sweep.n_trials = 1;
  h.SubmitOk(sweep);
  h.launcher().Complete(h.launcher().launch(0), 1.0);
  REQUIRE(h.Study("done").state == StudyState::kComplete);
  common::Status st = h.scheduler().Cancel("done");
  CHECK(st.code() == Code::kFailedPrecondition);
  CHECK(h.Study("done").state == StudyState::kComplete);
}

TEST_CASE("shutdown stops every trial and reports idle after the last one ends", "[scheduler]") {
  SchedulerHarnessOptions options;
  options.max_workers = 4;
  SchedulerHarness h(options);
  FakeLauncher& l = h.launcher();
  Sweep a, b;
  a.name = "first";
  a.n_trials = 5;
  a.parallelism = 2;
  b.name = "second";
  b.n_trials = 5;
  b.parallelism = 2;
  h.SubmitOk(a);
  h.SubmitOk(b);
  REQUIRE(l.live_count() == 4);
  Launched& finished_work = LiveAt(l, "first", 0);
  Launched& no_final = LiveAt(l, "first", 1);
  Launched& killed = LiveAt(l, "second", 0);
  Launched& failed_after_final = LiveAt(l, "second", 1);
  l.Final(finished_work, 0.5);
  l.Final(failed_after_final, 0.7);

  int idle_calls = 0;
  h.scheduler().BeginShutdown([&idle_calls] { ++idle_calls; });
  for (Launched* p : l.Live()) {
    CHECK(p->stops == std::vector<StopReason>{StopReason::kShutdown});
  }
  CHECK(idle_calls == 0);

  // Submitting is refused from now on, and stores nothing.
  Sweep late;
  late.name = "late";
  late.n_trials = 1;
  common::Result<StudyRecord> refused = h.scheduler().Submit(late.Source());
  CHECK_FALSE(refused.ok());
  CHECK(refused.status().code() == Code::kUnavailable);
  CHECK(h.StudyNames().size() == 2);

  l.ExitCode(finished_work, 0);  // it had reported its final value: its result counts
  CHECK(idle_calls == 0);
  l.ExitSignal(killed, SIGTERM);
  CHECK(idle_calls == 0);
  l.ExitCode(no_final, 0);
  CHECK(idle_calls == 0);
  h.scheduler().Pump();
  CHECK(idle_calls == 0);
  CHECK(l.launch_count() == 4);  // no trial started during shutdown
  l.ExitCode(failed_after_final, 1);
  CHECK(idle_calls == 1);
  h.scheduler().Pump();
  CHECK(idle_calls == 1);
  CHECK(l.launch_count() == 4);
  CHECK(h.scheduler().running_count() == 0);

  auto trial = [&h](const std::string& study, int number) {
    std::vector<TrialRecord> trials = h.Trials(study);
    REQUIRE(static_cast<size_t>(number) < trials.size());
    INFO(Describe(trials[number]));
    return trials[number];
  };
  TrialRecord t = trial("first", finished_work.trial);
  CHECK(t.state == TrialState::kComplete);
  REQUIRE(t.value.has_value());
  CHECK(*t.value == 0.5);
  for (const auto& [study, number] :
       std::vector<std::pair<std::string, int>>{{"first", no_final.trial},
                                                {"second", killed.trial},
                                                {"second", failed_after_final.trial}}) {
    t = trial(study, number);
    CHECK(t.state == TrialState::kFail);
    CHECK(t.fail.reason == "shutdown");
  }
  // Each trial the shutdown ended is put back ([study] requeue_on_shutdown, default true): a
  // WAITING retry of it, for the next start.
  CHECK(h.Trials("first").size() == 3);
  CHECK(h.Trials("second").size() == 4);
  for (const std::string study : {"first", "second"}) {
    CHECK(h.HasEvent(study, "trial_requeued"));
    for (const TrialRecord& w : h.Trials(study)) {
      if (w.state != TrialState::kWaiting) continue;
      REQUIRE(w.retry_of.has_value());
      const TrialRecord of = h.Trials(study)[*w.retry_of_number];  // a copy: Trials() is new
      CHECK(of.fail.reason == "shutdown");
    }
  }
  // Interrupted studies are not complete: a restarted daemon resumes them.
  CHECK(h.Study("first").state == StudyState::kRunning);
  CHECK(h.Study("second").state == StudyState::kRunning);
}

TEST_CASE(
    "a trial a shutdown ended runs again after the restart, spending neither n_trials "
    "nor retries",
    "[scheduler]") {
  SchedulerHarness h;
  FakeLauncher& l = h.launcher();
  Sweep sweep;
  sweep.name = "planned-restart";
  sweep.n_trials = 2;
  sweep.parallelism = 2;
  sweep.study_extra = "retries = 1\nretry_on = [\"exit\"]\n";
  h.SubmitOk(sweep);
  REQUIRE(l.live_count() == 2);
  Launched& done = LiveAt(l, "planned-restart", 0);
  Launched& stopped = LiveAt(l, "planned-restart", 1);
  l.Complete(done, 0.25);
  h.scheduler().BeginShutdown([] {});
  l.ExitSignal(stopped, SIGTERM);
  REQUIRE(h.Trials("planned-restart").size() == 3);
  const std::map<std::string, double> params = InternalParams(h.Trials("planned-restart")[1]);

  h.RestartAndRecover();
  h.scheduler().Pump();
  FakeLauncher& after = h.launcher();
  REQUIRE(after.live_count() == 1);  // the put-back trial, and nothing more (n_trials is 2)
  Launched& again = LiveAt(after, "planned-restart", 0);
  CHECK(again.trial == 2);
  CHECK(InternalParams(h.Trials("planned-restart")[2]) == params);
  // It fails: its retry budget (retries = 1) is whole, the put-back was not an attempt.
  after.ExitCode(again, 1);
  REQUIRE(after.live_count() == 1);
  Launched& retry = LiveAt(after, "planned-restart", 0);
  CHECK(retry.trial == 3);
  after.Complete(retry, 0.5);
  CHECK(h.Study("planned-restart").state == StudyState::kComplete);
  CHECK(h.Trials("planned-restart").size() == 4);
}

TEST_CASE("requeue_on_shutdown = false: a trial a shutdown ended stays FAIL(shutdown)",
          "[scheduler]") {
  SchedulerHarness h;
  FakeLauncher& l = h.launcher();
  Sweep sweep;
  sweep.name = "no-requeue";
  sweep.n_trials = 1;
  sweep.study_extra = "requeue_on_shutdown = false\n";
  h.SubmitOk(sweep);
  h.scheduler().BeginShutdown([] {});
  l.ExitSignal(LiveAt(l, "no-requeue", 0), SIGTERM);
  std::vector<TrialRecord> trials = h.Trials("no-requeue");
  REQUIRE(trials.size() == 1);
  CHECK(trials[0].fail.reason == "shutdown");
  CHECK_FALSE(h.HasEvent("no-requeue", "trial_requeued"));
}

TEST_CASE("shutdown with nothing running is idle at once", "[scheduler]") {
  SchedulerHarness h;
  int idle_calls = 0;
  h.scheduler().BeginShutdown([&idle_calls] { ++idle_calls; });
  CHECK(idle_calls == 1);
  h.scheduler().Pump();
  CHECK(idle_calls == 1);
}

// A trial stopped by a shutdown is still judged on what it reported: a protocol error, or a
// final with several values in a one-objective study, is FAIL(protocol), as without a shutdown.
TEST_CASE("during shutdown a bad report still makes the trial FAIL(protocol)", "[scheduler]") {
  SchedulerHarness h;
  FakeLauncher& l = h.launcher();
  Sweep sweep;
  sweep.name = "bad-final";
  sweep.n_trials = 1;
  h.SubmitOk(sweep);
  REQUIRE(l.live_count() == 1);
  Launched& p = l.launch(0);
  SECTION("a final with several values") {
    l.FinalValues(p, {1.0, 2.0});
    h.scheduler().BeginShutdown([] {});
    l.ExitCode(p, 0);
  }
  SECTION("a protocol error on the report pipe after the final value") {
    l.Final(p, 3.0);
    h.scheduler().BeginShutdown([] {});
    launcher::ProcessOutcome o;
    o.protocol_error = "report pipe: invalid JSON";
    l.Exit(p, o);  // stop_reason kShutdown, from the Stop() above
  }
  std::vector<TrialRecord> trials = h.Trials("bad-final");
  REQUIRE(trials.size() == 1);
  INFO(Describe(trials[0]));
  CHECK(trials[0].state == TrialState::kFail);
  CHECK(trials[0].fail.reason == "protocol");
}

// ---------------------------------------------------------------------------------------------
// Restart

TEST_CASE("after a restart, trials left RUNNING are FAIL(lost) and the study resumes",
          "[scheduler]") {
  SchedulerHarnessOptions options;
  options.drawn_seed = 0xFEDCBA9876543210ULL;  // no seed in the sweep: this one is drawn, >= 2^63
  SchedulerHarness h(options);
  Sweep sweep;
  sweep.name = "resumable";
  sweep.n_trials = 4;
  sweep.parallelism = 2;
  h.SubmitOk(sweep);
  REQUIRE(h.launcher().live_count() == 2);
  h.launcher().Complete(h.launcher().launch(0), 0.125);  // trial 2 starts
  REQUIRE(h.launcher().live_count() == 2);
  std::vector<TrialRecord> before = h.Trials("resumable");
  REQUIRE(before.size() == 3);
  REQUIRE(before[1].state == TrialState::kRunning);
  REQUIRE(before[2].state == TrialState::kRunning);

  // The daemon dies; a new one (which would draw a different seed) starts on the same storage.
  h.Restart(/*drawn_seed=*/12345);
  common::Status st = h.scheduler().Recover();
  INFO(st.ToString());
  REQUIRE(st.ok());
  CHECK(h.launcher().launch_count() == 0);  // Recover itself starts nothing

  std::vector<TrialRecord> trials = h.Trials("resumable");
  REQUIRE(trials.size() == 3);
  CHECK(trials[0].state == TrialState::kComplete);
  for (int n : {1, 2}) {
    INFO(Describe(trials[n]));
    CHECK(trials[n].state == TrialState::kFail);
    CHECK(trials[n].fail.reason == "lost");
  }
  CHECK(h.Study("resumable").state == StudyState::kRunning);

  h.scheduler().Pump();
  REQUIRE(h.launcher().launch_count() == 1);  // only one trial is left to run
  CHECK(h.launcher().launch(0).trial == 3);
  h.launcher().Complete(h.launcher().launch(0), 0.5);
  h.scheduler().Pump();
  CHECK(h.launcher().launch_count() == 1);

  trials = h.Trials("resumable");
  REQUIRE(trials.size() == 4);
  CHECK(trials[3].state == TrialState::kComplete);
  StudyRecord study = h.Study("resumable");
  CHECK(study.state == StudyState::kComplete);
  CHECK(study.seed == 0xFEDCBA9876543210ULL);

  // Trial 3 got the params the original seed gives it: a daemon that never restarted agrees.
  SchedulerHarness reference(options);
  reference.SubmitOk(sweep);
  CompleteAll(reference, "", 2);
  std::vector<TrialRecord> expected = reference.Trials("resumable");
  REQUIRE(expected.size() == 4);
  CHECK(InternalParams(trials[3]) == InternalParams(expected[3]));
  for (int n = 0; n < 3; ++n) CHECK(InternalParams(trials[n]) == InternalParams(expected[n]));
}

TEST_CASE("recovery asks to kill the recorded processes of the trials left running",
          "[scheduler]") {
  SchedulerHarness h;
  Sweep sweep;
  sweep.name = "crashed";
  sweep.n_trials = 4;
  sweep.parallelism = 2;
  h.SubmitOk(sweep);
  h.launcher().Complete(h.launcher().launch(0), 0.5);  // trial 2 starts
  std::set<std::tuple<pid_t, pid_t, uint64_t>> left;
  for (Launched* l : h.launcher().Live()) {
    left.insert({l->identity.pid, l->identity.pgid, l->identity.start_time});
  }
  REQUIRE(left.size() == 2);

  h.Restart(7);
  h.leftovers().found = 3;  // their processes, and a stray of one of them
  REQUIRE(h.scheduler().Recover().ok());
  REQUIRE(h.leftovers().requests.size() == 1);
  const testing::FakeLeftovers::Request& request = h.leftovers().requests[0];
  CHECK(request.state_dir == "/srv/triald-test");
  std::set<std::tuple<pid_t, pid_t, uint64_t>> asked;
  for (const model::ProcessIdentity& id : request.lost) {
    asked.insert({id.pid, id.pgid, id.start_time});
  }
  CHECK(asked == left);
  CHECK(request.lost.size() == 2);
  CHECK(h.launcher().launch_count() == 0);

  // Nothing was left running this time; recovery still looks for processes of the state
  // directory (a trial whose start the previous daemon never got to record).
  CompleteAll(h, "", 2);
  h.Restart(7);
  REQUIRE(h.scheduler().Recover().ok());
  REQUIRE(h.leftovers().requests.size() == 2);
  CHECK(h.leftovers().requests[1].lost.empty());
}

TEST_CASE("after a restart, a trial created but never started runs with its stored params",
          "[scheduler]") {
  SchedulerHarness h;
  Sweep sweep;
  sweep.name = "queued";
  sweep.n_trials = 2;
  sweep.sampler = "seed = 11";
  h.SubmitOk(sweep);
  REQUIRE(h.launcher().launch_count() == 1);
  const int64_t study_id = h.Study("queued").id;

  // The daemon died between storing trial 1 and starting its process.
  model::ParamMap params = h.Trials("queued")[0].params;
  params["layers"].internal = params["layers"].internal == 8 ? 1 : 8;
  auto created = h.storage().CreateTrial(study_id, params, 1.0);
  REQUIRE(created.ok());
  REQUIRE(created->number == 1);

  h.Restart(7);
  REQUIRE(h.scheduler().Recover().ok());
  CHECK(h.scheduler().queued_count() == 1);
  h.scheduler().Pump();
  REQUIRE(h.launcher().launch_count() == 1);
  Launched& p = h.launcher().launch(0);
  CHECK(p.trial == 1);
  boost::json::value env_params = boost::json::parse(p.env()["TRIALD_PARAMS"]);
  CHECK(static_cast<double>(env_params.at("layers").as_int64()) == params["layers"].internal);
  h.launcher().Complete(p, 1.0);

  std::vector<TrialRecord> trials = h.Trials("queued");
  REQUIRE(trials.size() == 2);
  CHECK(trials[0].fail.reason == "lost");
  CHECK(trials[1].state == TrialState::kComplete);
  CHECK(InternalParams(trials[1]) == InternalParams(*created));
  CHECK(h.Study("queued").state == StudyState::kComplete);
}

}  // namespace
}  // namespace triald::daemon
