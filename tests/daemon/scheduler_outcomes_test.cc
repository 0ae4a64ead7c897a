// How a trial ended, as stored: exit codes, signals, timeouts, protocol errors, and the
// final lines of studies with several objectives and constraints.
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
// How a trial ended

// Runs a one-trial study (trial_timeout 60) whose process does what `play` says, and returns the
// trial as stored.
TrialRecord RunOneTrial(const std::function<void(FakeLauncher&, Launched&)>& play) {
  SchedulerHarness h;
  Sweep sweep;
  sweep.name = "one";
  sweep.n_trials = 1;
  sweep.study_extra = "trial_timeout = 60\n";
  h.SubmitOk(sweep);
  FakeLauncher& l = h.launcher();
  REQUIRE(l.launch_count() == 1);
  play(l, l.launch(0));
  REQUIRE(l.live_count() == 0);
  CHECK(h.scheduler().running_count() == 0);
  std::vector<TrialRecord> trials = h.Trials("one");
  REQUIRE(trials.size() == 1);
  // However the trial ended, it counts as one of the study's n_trials finished trials.
  CHECK(h.Study("one").state == StudyState::kComplete);
  CHECK(l.launch_count() == 1);
  return trials[0];
}

TEST_CASE("how a trial ended is classified and stored", "[scheduler]") {
  SECTION("final value and exit 0: COMPLETE, with its reports and attributes") {
    TrialRecord t = RunOneTrial([](FakeLauncher& l, Launched& p) {
      l.Report(p, 0, 0.9);
      l.Report(p, 5, 0.7);
      proto::ReportMessage heartbeat;
      heartbeat.type = proto::ReportType::kHeartbeat;
      l.Message(p, heartbeat);
      l.Attr(p, "tokens_seen", "123456");
      l.Attr(p, "device", "\"cpu\"");
      l.Final(p, 0.42);
      l.ExitCode(p, 0, "some warning on stderr\n");
    });
    CHECK(t.state == TrialState::kComplete);
    REQUIRE(t.value.has_value());
    CHECK(*t.value == 0.42);
    CHECK(t.intermediate == std::map<int64_t, double>{{0, 0.9}, {5, 0.7}});
    CHECK(t.attrs ==
          std::map<std::string, std::string>{{"tokens_seen", "123456"}, {"device", "\"cpu\""}});
    CHECK(t.fail.reason.empty());
  }
  SECTION("non-zero exit: FAIL(exit) with the code and the stderr tail, even after a final") {
    TrialRecord t = RunOneTrial([](FakeLauncher& l, Launched& p) {
      l.Report(p, 1, 3.5);
      l.Final(p, 1.0);
      l.ExitCode(p, 3, "Traceback (most recent call last):\nValueError: boom\n");
    });
    CHECK(t.state == TrialState::kFail);
    CHECK(t.fail.reason == "exit");
    CHECK(t.fail.exit_code == 3);
    CHECK(t.fail.signal == 0);
    CHECK_THAT(t.fail.detail, Catch::Contains("code 3"));
    CHECK(t.fail.stderr_tail == "Traceback (most recent call last):\nValueError: boom\n");
    CHECK_FALSE(t.value.has_value());
    CHECK(t.intermediate == std::map<int64_t, double>{{1, 3.5}});  // kept for a failed trial
  }
  SECTION("killed by a signal: FAIL(signal) with the signal and core flag") {
    TrialRecord t = RunOneTrial(
        [](FakeLauncher& l, Launched& p) { l.ExitSignal(p, SIGSEGV, /*core_dumped=*/true); });
    CHECK(t.state == TrialState::kFail);
    CHECK(t.fail.reason == "signal");
    CHECK(t.fail.signal == SIGSEGV);
    CHECK(t.fail.core_dumped);
    CHECK_THAT(t.fail.detail, Catch::Contains("SIGSEGV"));
  }
  SECTION("killed by a signal without a core") {
    TrialRecord t =
        RunOneTrial([](FakeLauncher& l, Launched& p) { l.ExitSignal(p, SIGKILL, false); });
    CHECK(t.fail.reason == "signal");
    CHECK(t.fail.signal == SIGKILL);
    CHECK_FALSE(t.fail.core_dumped);
  }
  SECTION("stopped for its timeout: FAIL(timeout), naming the limit") {
    TrialRecord t = RunOneTrial([](FakeLauncher& l, Launched& p) {
      launcher::ProcessOutcome o;
      o.stop_reason = StopReason::kTimeout;
      o.exit.signaled = true;
      o.exit.signal = SIGKILL;
      o.killed = true;
      l.Exit(p, o);
    });
    CHECK(t.state == TrialState::kFail);
    CHECK(t.fail.reason == "timeout");
    CHECK_THAT(t.fail.detail, Catch::Contains("60"));
  }
  SECTION("stopped for a protocol error: FAIL(protocol), with the launcher's account") {
    TrialRecord t = RunOneTrial([](FakeLauncher& l, Launched& p) {
      launcher::ProcessOutcome o;
      o.stop_reason = StopReason::kProtocol;
      o.protocol_error = "report pipe: unknown type \"finale\"";
      o.exit.signaled = true;
      o.exit.signal = SIGTERM;
      l.Exit(p, o);
    });
    CHECK(t.state == TrialState::kFail);
    CHECK(t.fail.reason == "protocol");
    CHECK_THAT(t.fail.detail, Catch::Contains("unknown type \"finale\""));
  }
  SECTION("a protocol error found at the end of the pipe beats a final value and exit 0") {
    TrialRecord t = RunOneTrial([](FakeLauncher& l, Launched& p) {
      l.Final(p, 1.5);
      launcher::ProcessOutcome o;
      o.protocol_error = "report pipe: last line has no newline";
      l.Exit(p, o);
    });
    CHECK(t.state == TrialState::kFail);
    CHECK(t.fail.reason == "protocol");
    CHECK_THAT(t.fail.detail, Catch::Contains("no newline"));
  }
  SECTION("exit 0 without a final value: FAIL(protocol)") {
    TrialRecord t = RunOneTrial([](FakeLauncher& l, Launched& p) {
      l.Report(p, 0, 2.0);
      l.ExitCode(p, 0);
    });
    CHECK(t.state == TrialState::kFail);
    CHECK(t.fail.reason == "protocol");
    CHECK_FALSE(t.value.has_value());
  }
  SECTION("several objective values for a one-objective study: FAIL(protocol)") {
    TrialRecord t = RunOneTrial([](FakeLauncher& l, Launched& p) {
      l.FinalValues(p, {1.0, 2.0});
      l.ExitCode(p, 0);
    });
    CHECK(t.state == TrialState::kFail);
    CHECK(t.fail.reason == "protocol");
  }
  SECTION("the worker's own error message is part of the failure detail") {
    TrialRecord t = RunOneTrial([](FakeLauncher& l, Launched& p) {
      l.Error(p, "CUDA out of memory. Tried to allocate 2.00 GiB");
      l.ExitCode(p, 1, "RuntimeError: CUDA out of memory\n");
    });
    CHECK(t.state == TrialState::kFail);
    CHECK(t.fail.reason == "exit");
    CHECK(t.fail.exit_code == 1);
    CHECK_THAT(t.fail.detail, Catch::Contains("CUDA out of memory. Tried to allocate 2.00 GiB"));
    CHECK(t.fail.stderr_tail == "RuntimeError: CUDA out of memory\n");
  }
}

// ---------------------------------------------------------------------------------------------
// Several objectives and constraints

TEST_CASE("every trial is told how many objectives its study has", "[scheduler][objectives]") {
  SchedulerHarness h;
  Sweep one;
  one.name = "single";
  one.n_trials = 1;
  Sweep two = one;
  two.name = "pair";
  two.study_extra = "directions = [\"minimize\", \"maximize\"]\n";
  Sweep three = one;
  three.name = "triple";
  three.study_extra = "directions = [\"minimize\", \"maximize\", \"minimize\"]\n";
  h.SubmitOk(one);
  h.SubmitOk(two);
  h.SubmitOk(three);
  FakeLauncher& l = h.launcher();
  REQUIRE(l.Find("single", 0) != nullptr);
  REQUIRE(l.Find("pair", 0) != nullptr);
  REQUIRE(l.Find("triple", 0) != nullptr);
  CHECK(testing::EnvMap(l.Find("single", 0)->spec.env)["TRIALD_N_OBJECTIVES"] == "1");
  CHECK(testing::EnvMap(l.Find("pair", 0)->spec.env)["TRIALD_N_OBJECTIVES"] == "2");
  CHECK(testing::EnvMap(l.Find("triple", 0)->spec.env)["TRIALD_N_OBJECTIVES"] == "3");
}

TEST_CASE("a final line with the wrong number of values ends FAIL(protocol) naming both counts",
          "[scheduler][objectives]") {
  SchedulerHarness h;
  Sweep sweep;
  sweep.name = "pair";
  sweep.n_trials = 3;
  sweep.study_extra = "directions = [\"minimize\", \"maximize\"]\n";
  h.SubmitOk(sweep);
  FakeLauncher& l = h.launcher();
  Launched& one = LiveAt(l, "pair");
  l.Final(one, 0.5);
  l.ExitCode(one, 0);
  Launched& three = LiveAt(l, "pair");
  l.FinalValues(three, {1, 2, 3});
  l.ExitCode(three, 0);
  Launched& two = LiveAt(l, "pair");
  l.FinalValues(two, {0.25, 9.5});
  l.ExitCode(two, 0);
  std::vector<TrialRecord> trials = h.Trials("pair");
  REQUIRE(trials.size() == 3);
  CHECK(trials[0].state == TrialState::kFail);
  CHECK(trials[0].fail.reason == "protocol");
  CHECK(trials[0].fail.detail ==
        "final line carried 1 objective value; this study has 2 objectives, so expected 2 values");
  CHECK(trials[1].fail.reason == "protocol");
  CHECK_THAT(trials[1].fail.detail, Catch::StartsWith("final line carried 3 objective values"));
  CHECK(trials[2].state == TrialState::kComplete);
  CHECK_FALSE(trials[2].value.has_value());
}

TEST_CASE("constraints after the final line end the trial FAIL(protocol)",
          "[scheduler][objectives]") {
  TrialRecord late = RunOneTrial([](FakeLauncher& l, Launched& p) {
    l.Final(p, 1.0);
    l.Constraints(p, {0.5});
    l.ExitCode(p, 0);
  });
  CHECK(late.state == TrialState::kFail);
  CHECK(late.fail.reason == "protocol");
  CHECK(late.fail.detail ==
        "a constraints line after the final line; send constraints before final");
  TrialRecord early = RunOneTrial([](FakeLauncher& l, Launched& p) {
    l.Constraints(p, {0.5});
    l.Constraints(p, {-0.5, -1});  // the last one counts
    l.Final(p, 1.0);
    l.ExitCode(p, 0);
  });
  CHECK(early.state == TrialState::kComplete);
  REQUIRE(early.value.has_value());
  CHECK(*early.value == 1.0);
}

TEST_CASE("the Pareto front size of an active study follows its finished trials",
          "[scheduler][objectives]") {
  SchedulerHarness h;
  Sweep sweep;
  sweep.name = "pair";
  sweep.n_trials = 6;  // one more than finished below: the study stays active
  sweep.study_extra = "directions = [\"minimize\", \"maximize\"]\n";
  const StudyRecord pair = h.SubmitOk(sweep);
  Sweep single;
  single.name = "single";
  single.n_trials = 1;
  const StudyRecord one = h.SubmitOk(single);
  CHECK_FALSE(h.scheduler().pareto_front_size(one.id).has_value());
  CHECK_FALSE(h.scheduler().pareto_front_size(pair.id + one.id + 100).has_value());
  CHECK(h.scheduler().pareto_front_size(pair.id) == 0);
  FakeLauncher& l = h.launcher();
  auto finish = [&](std::vector<double> values, std::vector<double> constraints) {
    Launched& p = LiveAt(l, "pair");
    if (!constraints.empty()) l.Constraints(p, constraints);
    l.FinalValues(p, values);
    l.ExitCode(p, 0);
  };
  finish({1, 1}, {});
  CHECK(h.scheduler().pareto_front_size(pair.id) == 1);
  finish({0, 2}, {});  // dominates (1, 1)
  CHECK(h.scheduler().pareto_front_size(pair.id) == 1);
  finish({2, 3}, {});  // worse in the first, better in the second
  CHECK(h.scheduler().pareto_front_size(pair.id) == 2);
  finish({-1, 10}, {0.5});  // would dominate both, but infeasible
  CHECK(h.scheduler().pareto_front_size(pair.id) == 2);
  finish({-1, 10}, {-0.5});  // feasible: the whole front
  CHECK(h.scheduler().pareto_front_size(pair.id) == 1);
  finish({5, 0}, {});  // the last trial: the study completes and is no longer the scheduler's
  CHECK_FALSE(h.scheduler().pareto_front_size(pair.id).has_value());
}

}  // namespace
}  // namespace triald::daemon
