// Fail-fast ([study] max_failures_in_a_row, daemon/scheduler/failure_streak.h): a failure in one
// line (model::FailSummary), what makes two failures the same (model::FailKey), the streak's
// policy alone, then a scheduler (tests/daemon/scheduler_harness.h, no forking) whose trials
// keep failing.

#include "daemon/scheduler/failure_streak.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "daemon/control/verbs.h"
#include "daemon/scheduler.h"
#include "tests/daemon/fakes.h"
#include "tests/daemon/scheduler_harness.h"

namespace triald::daemon {
namespace {

using model::FailInfo;
using model::TrialRecord;
using model::TrialState;

FailInfo Failure(const std::string& reason, const std::string& detail) {
  FailInfo f;
  f.reason = reason;
  f.detail = detail;
  return f;
}

TrialRecord Finished(int number, TrialState state, const FailInfo& fail = {}) {
  TrialRecord t;
  t.number = number;
  t.state = state;
  t.fail = fail;
  t.finished_at = 100 + number;
  return t;
}

const char kTraceback[] =
    "exited with code 1; worker said: Traceback (most recent call last):\n"
    "  File \"/w/obj.py\", line 1, in <module>\n    import torch\n"
    "ModuleNotFoundError: No module named 'torch'";

TEST_CASE("a failure in one line: the exception's last line, else the detail's own", "[failfast]") {
  CHECK(model::FailSummary(Failure("exit", kTraceback)) ==
        "ModuleNotFoundError: No module named 'torch'");
  // The tail of a detail (ReadModel::GetRecentFailures) gives the same line.
  const std::string tail = std::string(kTraceback).substr(std::string(kTraceback).size() - 60);
  CHECK(model::FailSummary(Failure("exit", tail)) ==
        "ModuleNotFoundError: No module named 'torch'");
  CHECK(model::FailSummary(Failure("exit", "exited with code 3")) == "exited with code 3");
  CHECK(model::FailSummary(Failure("exit", "exited with code 1; worker said: lr too large")) ==
        "lr too large");
  CHECK(model::FailSummary(Failure("signal", "killed by SIGSEGV (core dumped)")) ==
        "killed by SIGSEGV (core dumped)");
  CHECK(model::FailSummary(Failure("oom", "")) == "oom");
  CHECK(model::FailSummary(Failure("exit", "trailing blank lines\n\n  \n")) ==
        "trailing blank lines");
  const std::string long_line(500, 'x');
  const std::string cut = model::FailSummary(Failure("exit", "a\n" + long_line));
  CHECK(cut.size() == model::kFailSummaryChars);
  CHECK(cut.substr(cut.size() - 3) == "...");
}

TEST_CASE("two failures are the same way when reason and line agree, numbers aside", "[failfast]") {
  auto key = [](const std::string& reason, const std::string& line) {
    return model::FailKey(Failure(reason, line));
  };
  CHECK(key("exit", "ValueError: x = -0.27 too large") ==
        key("exit", "ValueError: x = 0.53 too large"));
  CHECK(key("exit", "loss 1e-05 diverged") == key("exit", "loss 3.5E+2 diverged"));
  CHECK(key("exit", "exited with code 1") == key("exit", "exited with code 2"));
  CHECK(key("exit", "ValueError: bad") != key("exit", "KeyError: bad"));
  CHECK(key("exit", "ValueError: bad") != key("timeout", "ValueError: bad"));
  // A hyphen inside a word is not a sign.
  CHECK(key("exit", "resnet-50 failed") != key("exit", "resnet 50 failed"));
}

TEST_CASE("the streak: K in a row the same way stops once, a success or another way resets",
          "[failfast]") {
  const FailInfo raises = Failure("exit", "ValueError: lr 0.1");
  const FailInfo other = Failure("signal", "killed by SIGSEGV");
  FailureStreak s(3);
  CHECK_FALSE(s.OnFinished(Finished(0, TrialState::kFail, raises)));
  CHECK_FALSE(s.OnFinished(Finished(1, TrialState::kFail, raises)));
  CHECK_FALSE(s.OnFinished(Finished(2, TrialState::kComplete)));  // resets
  CHECK_FALSE(s.OnFinished(Finished(3, TrialState::kFail, raises)));
  CHECK_FALSE(s.OnFinished(Finished(4, TrialState::kFail, other)));  // another way: 1 again
  CHECK_FALSE(s.OnFinished(Finished(5, TrialState::kFail, other)));
  // Failures that are not the objective's neither count nor reset.
  CHECK_FALSE(s.OnFinished(Finished(6, TrialState::kFail, Failure("lost", "node died"))));
  CHECK_FALSE(s.OnFinished(Finished(7, TrialState::kFail, Failure("shutdown", "stopped"))));
  std::optional<std::string> stop = s.OnFinished(Finished(8, TrialState::kFail, other));
  REQUIRE(stop);
  CHECK_THAT(*stop, Catch::Contains("3 trials in a row failed the same way"));
  CHECK_THAT(*stop, Catch::Contains("signal: killed by SIGSEGV"));
  CHECK_THAT(*stop, Catch::Contains("max_failures_in_a_row = 3"));
  // Once.
  CHECK_FALSE(s.OnFinished(Finished(9, TrialState::kFail, other)));

  FailureStreak off(0);
  for (int i = 0; i < 50; ++i) CHECK_FALSE(off.OnFinished(Finished(i, TrialState::kFail, raises)));
}

TEST_CASE("the streak is rebuilt from stored trials in the order they finished", "[failfast]") {
  const FailInfo raises = Failure("exit", "ValueError: lr 0.1");
  std::vector<TrialRecord> stored = {
      Finished(0, TrialState::kFail, raises), Finished(1, TrialState::kComplete),
      Finished(2, TrialState::kFail, raises), Finished(3, TrialState::kFail, raises)};
  stored[1].finished_at = 90;  // finished first: the three failures are in a row
  TrialRecord running;
  running.number = 4;
  running.state = TrialState::kRunning;
  stored.push_back(running);
  FailureStreak s(4);
  s.Rebuild(stored);
  CHECK(s.count() == 3);
  CHECK(s.OnFinished(Finished(4, TrialState::kFail, raises)));
}

TEST_CASE("a study whose trials keep failing the same way stops after max_failures_in_a_row",
          "[failfast][scheduler]") {
  SchedulerHarness h;
  FakeLauncher& l = h.launcher();
  Sweep sweep;
  sweep.name = "raises";
  sweep.n_trials = 20;
  sweep.parallelism = 2;
  sweep.study_extra = "max_failures_in_a_row = 3\nretries = 2\nretry_on = [\"signal\"]\n";
  h.SubmitOk(sweep);
  REQUIRE(l.live_count() == 2);
  // A crash of another kind first: retried, and it starts no streak of the import error.
  l.ExitSignal(LiveAt(l, "raises", 0), 11);
  for (int i = 0; i < 3; ++i) {
    Launched& t = LiveAt(l, "raises", 0);
    l.Error(t, "Traceback (most recent call last):\nImportError: cannot import name 'f' (line " +
                   std::to_string(i) + ")");
    l.ExitCode(t, 1);
  }
  // Stopped: the trial still running goes on; nothing new starts; the retry of the crash that
  // was waiting ends without starting.
  CHECK(h.HasEvent("raises", "study_failing"));
  REQUIRE(l.live_count() == 1);
  const size_t launched = l.launch_count();
  h.scheduler().Pump();
  CHECK(l.launch_count() == launched);
  CHECK(h.State("raises") == model::StudyState::kRunning);  // until its last trial ends
  l.Complete(LiveAt(l, "raises", 0), 1.0);
  CHECK(h.State("raises") == model::StudyState::kFailed);
  int failed = 0, cancelled = 0;
  for (const TrialRecord& t : h.Trials("raises")) {
    INFO(Describe(t));
    CHECK(t.state != TrialState::kWaiting);
    failed += t.state == TrialState::kFail;
    cancelled += t.fail.reason == "cancelled";
  }
  CHECK(failed >= 4);
  CHECK(cancelled <= 1);
  CHECK(static_cast<int>(h.Trials("raises").size()) < 20);

  // `status` says why it stopped and how its trials failed.
  VerbContext c;
  c.scheduler = &h.scheduler();
  c.storage = &h.storage();
  common::Result<boost::json::value> status =
      HandleVerb(c, "status", boost::json::object{{"study", "raises"}});
  REQUIRE(status.ok());
  const boost::json::object& s = status->as_object();
  INFO(boost::json::serialize(s));
  CHECK_THAT(std::string(s.at("failure").as_string()),
             Catch::Contains("3 trials in a row failed the same way (exit: ImportError: cannot "
                             "import name 'f' (line 2))"));
  const boost::json::object& f = s.at("failures").as_object();
  CHECK(f.at("reason").as_string() == "exit");
  CHECK(f.at("summary").as_string() == "ImportError: cannot import name 'f' (line 2)");
  CHECK(f.at("count").as_int64() == 3);
  CHECK(f.at("tallied").as_int64() == failed);
}

}  // namespace
}  // namespace triald::daemon
