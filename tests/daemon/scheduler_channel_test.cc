// Pruning, and the two-way trial channel: suggest, should_prune, pruned, kind = "python".
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
// Pruning

// SchedulerHarness options whose studies all get a ScriptedPruner answering with `rule`; its
// questions land in `log`.
SchedulerHarnessOptions WithPruner(ScriptedPruner::Rule rule,
                                   std::shared_ptr<std::vector<ScriptedPruner::Question>> log) {
  SchedulerHarnessOptions options;
  options.make_pruner = [rule, log](const config::PrunerConfig&) {
    return common::Result<std::unique_ptr<pruner::Pruner>>(
        std::unique_ptr<pruner::Pruner>(new ScriptedPruner(rule, log)));
  };
  return options;
}

TEST_CASE("a pruned trial is stopped, ends PRUNED with its last value, and frees its slot",
          "[scheduler][prune]") {
  auto log = std::make_shared<std::vector<ScriptedPruner::Question>>();
  // Prune trial 1 once it reports step 2.
  SchedulerHarness h(WithPruner(
      [](const pruner::PruneContext& c) {
        return c.trial->number == 1 && c.trial->intermediate.count(2) > 0;
      },
      log));
  FakeLauncher& l = h.launcher();
  Sweep sweep;
  sweep.name = "pruned";
  sweep.n_trials = 3;
  sweep.parallelism = 2;
  h.SubmitOk(sweep);
  REQUIRE(l.launch_count() == 2);
  Launched& t0 = l.launch(0);
  Launched& t1 = l.launch(1);

  l.Report(t0, 0, 0.5);
  l.Report(t1, 0, 9.0);
  l.Report(t1, 1, 8.0);
  // The pruner was asked after each report, shown the values including the one just reported
  // and the whole study.
  REQUIRE(log->size() == 3);
  CHECK(log->at(2).study == "pruned");
  CHECK(log->at(2).number == 1);
  CHECK(log->at(2).intermediate == std::map<int64_t, double>{{0, 9.0}, {1, 8.0}});
  CHECK(log->at(2).study_trials == 2);
  CHECK(t1.stops.empty());

  l.Report(t1, 2, 7.5);
  REQUIRE(log->size() == 4);
  CHECK(log->back().answer);
  CHECK(t1.stops == std::vector<StopReason>{StopReason::kPrune});  // SIGTERM, grace, SIGKILL
  CHECK(t0.stops.empty());
  // Its slot is held until its process is gone.
  CHECK(l.launch_count() == 2);
  CHECK(h.Trials("pruned")[1].state == TrialState::kRunning);

  // What it reports while dying is dropped, and the pruner is not asked again.
  l.Report(t1, 3, 0.001);
  CHECK(log->size() == 4);

  SECTION("killed after the grace period") {
    launcher::ProcessOutcome o;
    o.exit.signaled = true;
    o.exit.signal = SIGKILL;
    o.killed = true;
    l.Exit(t1, o);
  }
  SECTION("it reported a final value and exited 0 on SIGTERM") { l.Complete(t1, 0.001); }
  std::vector<TrialRecord> trials = h.Trials("pruned");
  INFO(Describe(trials[1]));
  CHECK(trials[1].state == TrialState::kPruned);
  REQUIRE(trials[1].value.has_value());
  CHECK(*trials[1].value == 7.5);
  CHECK(trials[1].fail.reason.empty());
  CHECK(trials[1].intermediate == std::map<int64_t, double>{{0, 9.0}, {1, 8.0}, {2, 7.5}});
  // The next trial started as soon as the pruned one was gone.
  REQUIRE(l.launch_count() == 3);
  CHECK(l.launch(2).trial == 2);
  CHECK(l.live_count() == 2);

  l.Complete(t0, 1.0);
  l.Complete(l.launch(2), 2.0);
  trials = h.Trials("pruned");
  REQUIRE(trials.size() == 3);
  CHECK(trials[0].state == TrialState::kComplete);
  CHECK(trials[2].state == TrialState::kComplete);
  CHECK(h.Study("pruned").state == StudyState::kComplete);
}

TEST_CASE("a trial pruned by a timeout first stays FAIL(timeout)", "[scheduler][prune]") {
  auto log = std::make_shared<std::vector<ScriptedPruner::Question>>();
  SchedulerHarness h(WithPruner([](const pruner::PruneContext&) { return true; }, log));
  FakeLauncher& l = h.launcher();
  Sweep sweep;
  sweep.name = "timed";
  sweep.n_trials = 1;
  h.SubmitOk(sweep);
  Launched& t = l.launch(0);
  launcher::ProcessOutcome o;
  o.stop_reason = StopReason::kTimeout;  // the launcher's timer fired before the prune
  l.Report(t, 0, 1.0);
  l.Exit(t, o);
  TrialRecord rec = h.Trials("timed")[0];
  CHECK(rec.state == TrialState::kFail);
  CHECK(rec.fail.reason == "timeout");
}

TEST_CASE("the real pruners are built from the sweep", "[scheduler][prune]") {
  SchedulerHarness h;
  Sweep sweep;
  sweep.name = "nop-pruned";
  sweep.n_trials = 1;
  sweep.space += "\n[pruner]\nkind = \"nop\"\n";
  h.SubmitOk(sweep);
  Launched& t = h.launcher().launch(0);
  for (int step = 0; step < 5; ++step) h.launcher().Report(t, step, 1e9);
  CHECK(t.stops.empty());
  h.launcher().Complete(t, 1.0);
  CHECK(h.Trials("nop-pruned")[0].state == TrialState::kComplete);
}

// ---------------------------------------------------------------------------------------------
// The two-way trial channel: suggest, should_prune, pruned

proto::SuggestDistribution FloatDist(double low, double high, bool log = false) {
  proto::SuggestDistribution d;
  d.type = "float";
  d.low = proto::SuggestNumber{low, false, 0};
  d.high = proto::SuggestNumber{high, false, 0};
  if (log) d.log = true;
  return d;
}

proto::SuggestDistribution IntDist(int64_t low, int64_t high) {
  proto::SuggestDistribution d;
  d.type = "int";
  d.low = proto::SuggestNumber{static_cast<double>(low), true, low};
  d.high = proto::SuggestNumber{static_cast<double>(high), true, high};
  return d;
}

// A decoded answer line.
boost::json::object AnswerJson(const std::string& line) {
  return boost::json::parse(line).as_object();
}

// Submits a one-trial sweep named `name` (with the [sampler] lines `sampler`, if any) and
// returns its launched trial.
Launched& LaunchOneTrial(SchedulerHarness& h, const std::string& name,
                         const std::string& sampler = "",
                         const std::string& space = kDefaultSpace) {
  Sweep sweep;
  sweep.name = name;
  sweep.n_trials = 1;
  sweep.sampler = sampler;
  sweep.space = space;
  h.SubmitOk(sweep);
  REQUIRE(h.launcher().launch_count() == 1);
  return h.launcher().launch(0);
}

TEST_CASE(
    "a suggest is answered, stored with its distribution, and the same name gives the same "
    "value",
    "[scheduler][suggest]") {
  SchedulerHarness h;
  FakeLauncher& l = h.launcher();
  Launched& t = LaunchOneTrial(h, "dyn", "seed = 3");
  l.Suggest(t, "momentum", FloatDist(0.5, 0.99));
  l.Suggest(t, "units", IntDist(16, 64));
  l.Suggest(t, "momentum", FloatDist(0.5, 0.99));
  REQUIRE(t.answers.size() == 3);
  boost::json::object a0 = AnswerJson(t.answers[0]);
  CHECK(a0.at("type").as_string() == "suggestion");
  CHECK(a0.at("name").as_string() == "momentum");
  const double momentum = a0.at("value").to_number<double>();
  CHECK(momentum >= 0.5);
  CHECK(momentum <= 0.99);
  boost::json::object a1 = AnswerJson(t.answers[1]);
  REQUIRE(a1.at("value").is_int64());
  CHECK(a1.at("value").as_int64() >= 16);
  CHECK(a1.at("value").as_int64() <= 64);
  CHECK(t.answers[2] == t.answers[0]);  // Optuna's semantics
  CHECK(t.stops.empty());

  // A [space] parameter is answered with its drawn value when the distribution matches.
  proto::SuggestDistribution layers = IntDist(1, 8);
  l.Suggest(t, "layers", layers);
  REQUIRE(t.answers.size() == 4);
  TrialRecord running = h.Trials("dyn")[0];
  CHECK(AnswerJson(t.answers[3]).at("value").as_int64() ==
        static_cast<int64_t>(running.params.at("layers").internal));

  l.Complete(t, 1.0);
  TrialRecord done = h.Trials("dyn")[0];
  INFO(Describe(done));
  CHECK(done.state == TrialState::kComplete);
  REQUIRE(done.params.count("momentum") == 1);
  CHECK(done.params.at("momentum").internal == Approx(momentum).epsilon(1e-15));
  CHECK(done.params.at("momentum").dist.type == config::ParamType::kFloat);
  REQUIRE(done.params.count("units") == 1);
  CHECK(done.params.at("units").dist.type == config::ParamType::kInt);
  CHECK(done.params.size() == 5);  // lr, layers, opt from [space]; momentum, units suggested
}

TEST_CASE("suggests are reproducible: the same seed and order of suggests give the same values",
          "[scheduler][suggest]") {
  std::vector<std::string> runs[2];
  for (auto& answers : runs) {
    SchedulerHarness h;
    FakeLauncher& l = h.launcher();
    Launched& t = LaunchOneTrial(h, "again", "seed = 11");
    l.Suggest(t, "a", FloatDist(1e-5, 1, true));
    l.Suggest(t, "b", IntDist(0, 1000));
    answers = t.answers;
  }
  CHECK(runs[0] == runs[1]);
  CHECK(runs[0].size() == 2);
}

TEST_CASE("a name asked with another distribution ends the trial FAIL(protocol) naming both",
          "[scheduler][suggest]") {
  SchedulerHarness h;
  FakeLauncher& l = h.launcher();
  Launched& t = LaunchOneTrial(h, "conflict");
  l.Suggest(t, "x", FloatDist(0, 1));
  l.Suggest(t, "x", FloatDist(0, 2));
  REQUIRE(t.answers.size() == 2);
  boost::json::object err = AnswerJson(t.answers[1]);
  CHECK(err.at("type").as_string() == "error");
  const std::string message(err.at("message").as_string());
  CHECK_THAT(message, Catch::Contains("\"x\""));
  CHECK_THAT(message, Catch::Contains("float [0.0, 2.0]"));
  CHECK_THAT(message, Catch::Contains("float [0.0, 1.0]"));
  CHECK(t.stops == std::vector<StopReason>{StopReason::kProtocol});
  CHECK(t.protocol_error == message);
  // It ends FAIL(protocol) with the message.
  l.ExitSignal(t, SIGTERM);
  TrialRecord rec = h.Trials("conflict")[0];
  CHECK(rec.state == TrialState::kFail);
  CHECK(rec.fail.reason == "protocol");
  CHECK(rec.fail.detail == message);
}

TEST_CASE("bad suggests end the trial FAIL(protocol) with a message naming the field",
          "[scheduler][suggest]") {
  SchedulerHarness h;
  FakeLauncher& l = h.launcher();
  Launched& t = LaunchOneTrial(h, "bad");
  std::string expect;
  SECTION("low > high") {
    l.Suggest(t, "x", FloatDist(2, 1));
    expect = "low";
  }
  SECTION("log with low <= 0") {
    l.Suggest(t, "x", FloatDist(0, 1, true));
    expect = "log";
  }
  SECTION("an unknown distribution type") {
    proto::SuggestDistribution d = FloatDist(0, 1);
    d.type = "gaussian";
    l.Suggest(t, "x", d);
    expect = "gaussian";
  }
  SECTION("a suggest after the final value") {
    l.Final(t, 1.0);
    l.Suggest(t, "x", FloatDist(0, 1));
    expect = "after the final value";
  }
  REQUIRE(t.answers.size() == 1);
  CHECK(AnswerJson(t.answers[0]).at("type").as_string() == "error");
  CHECK_THAT(t.protocol_error, Catch::Contains(expect));
  CHECK(t.stops == std::vector<StopReason>{StopReason::kProtocol});
}

TEST_CASE("a trial may ask for at most 1,000 distinct parameters", "[scheduler][suggest]") {
  SchedulerHarness h;
  FakeLauncher& l = h.launcher();
  Launched& t = LaunchOneTrial(h, "many", "", "\n[space.p0]\ntype = \"int\"\nlow = 0\nhigh = 1\n");
  // p0 is the [space] parameter; 999 more fill the trial up.
  for (int i = 0; i < 1000; ++i) l.Suggest(t, "p" + std::to_string(i), IntDist(0, 1));
  CHECK(t.stops.empty());
  l.Suggest(t, "p5", IntDist(0, 1));  // asked again: no new name
  CHECK(t.stops.empty());
  l.Suggest(t, "p1000", IntDist(0, 1));
  REQUIRE(t.answers.size() == 1002);
  CHECK(AnswerJson(t.answers.back()).at("type").as_string() == "error");
  CHECK_THAT(t.protocol_error, Catch::Contains("more than 1000 distinct parameters"));
  CHECK(t.stops == std::vector<StopReason>{StopReason::kProtocol});
}

TEST_CASE("should_prune answers what the pruner decided at the trial's reports",
          "[scheduler][prune][suggest]") {
  auto log = std::make_shared<std::vector<ScriptedPruner::Question>>();
  SchedulerHarness h(WithPruner(
      [](const pruner::PruneContext& c) { return c.trial->intermediate.count(2) > 0; }, log));
  FakeLauncher& l = h.launcher();
  Launched& t = LaunchOneTrial(h, "ask");
  l.ShouldPrune(t);
  l.Report(t, 1, 5.0);
  l.ShouldPrune(t);
  CHECK(t.stops.empty());
  l.Report(t, 2, 4.0);
  l.ShouldPrune(t);
  REQUIRE(log->size() == 2);  // one decision per report, none per question
  CHECK(log->back().answer);
  REQUIRE(t.answers.size() == 3);
  CHECK(AnswerJson(t.answers[0]).at("value").as_bool() == false);
  CHECK(AnswerJson(t.answers[1]).at("value").as_bool() == false);
  CHECK(AnswerJson(t.answers[2]).at("value").as_bool() == true);
  // kind = "exec": stopped at once, as before the channel was two-way.
  CHECK(t.stops == std::vector<StopReason>{StopReason::kPrune});
  CHECK(t.deferred_stops.empty());
}

TEST_CASE("a worker that says pruned and exits 0 ends PRUNED with its last intermediate value",
          "[scheduler][prune][suggest]") {
  SchedulerHarness h;
  FakeLauncher& l = h.launcher();
  Launched& t = LaunchOneTrial(h, "raised");
  l.Report(t, 0, 3.0);
  l.Report(t, 1, 2.5);
  l.Pruned(t);
  l.ExitCode(t, 0);
  TrialRecord rec = h.Trials("raised")[0];
  INFO(Describe(rec));
  CHECK(rec.state == TrialState::kPruned);
  REQUIRE(rec.value.has_value());
  CHECK(*rec.value == 2.5);
}

TEST_CASE("kind = python: the runner is launched, and pruning is cooperative first",
          "[scheduler][prune][suggest]") {
  auto log = std::make_shared<std::vector<ScriptedPruner::Question>>();
  SchedulerHarness h(WithPruner(
      [](const pruner::PruneContext& c) { return c.trial->intermediate.count(1) > 0; }, log));
  FakeLauncher& l = h.launcher();
  testing::TempDir dir;
  dir.Write("obj.py", "def objective(trial):\n    return trial.suggest_float('x', 0, 1)\n");
  const std::string toml =
      "[study]\nname = \"coop\"\nn_trials = 1\nkill_grace = 4\n\n[objective]\nkind = "
      "\"python\"\nfunction = \"obj.py:objective\"\n";
  common::Result<StudyRecord> submitted = h.scheduler().Submit({toml, dir.File("coop.toml")});
  INFO(submitted.status().ToString());
  REQUIRE(submitted.ok());
  REQUIRE(l.launch_count() == 1);
  Launched& t = l.launch(0);
  REQUIRE(t.spec.argv.size() == 5);
  CHECK(t.spec.argv[1] == "-m");
  CHECK(t.spec.argv[2] == "triald");
  CHECK(t.spec.argv[3] == "run");
  CHECK(t.spec.argv[4] == dir.File("obj.py") + ":objective");
  CHECK(t.env().at("PYTHONPATH").rfind(DefaultPythonRunnerDir(), 0) == 0);
  CHECK(t.spec.kill_grace_s == 4);

  l.Suggest(t, "x", FloatDist(0, 1));
  REQUIRE(t.answers.size() == 1);
  const double x = AnswerJson(t.answers[0]).at("value").to_number<double>();
  l.Report(t, 0, 2.0);
  l.ShouldPrune(t);
  l.Report(t, 1, 1.5);
  // The decision is made at the report; the trial learns it from should_prune and has
  // kill_grace to end by itself before it is stopped as other kinds are.
  CHECK(t.stops.empty());
  CHECK(t.deferred_stops == std::vector<StopReason>{StopReason::kPrune});
  l.ShouldPrune(t);
  REQUIRE(t.answers.size() == 3);
  CHECK(AnswerJson(t.answers[1]).at("value").as_bool() == false);
  CHECK(AnswerJson(t.answers[2]).at("value").as_bool() == true);
  REQUIRE(log->size() == 2);

  TrialRecord rec;
  SECTION("it raises TrialPruned: PRUNED with its last intermediate value") {
    l.Pruned(t);
    l.ExitCode(t, 0);
    rec = h.Trials("coop")[0];
    CHECK(rec.state == TrialState::kPruned);
    REQUIRE(rec.value.has_value());
    CHECK(*rec.value == 1.5);
  }
  SECTION("it returns a value instead: COMPLETE with that value, as in Optuna") {
    l.Complete(t, 0.25);
    rec = h.Trials("coop")[0];
    CHECK(rec.state == TrialState::kComplete);
    REQUIRE(rec.value.has_value());
    CHECK(*rec.value == 0.25);
  }
  SECTION("it does not end within kill_grace: stopped, PRUNED") {
    launcher::ProcessOutcome o;
    o.stop_reason = StopReason::kPrune;  // the launcher's grace timer stopped it
    o.exit.signaled = true;
    o.exit.signal = SIGTERM;
    l.Exit(t, o);
    rec = h.Trials("coop")[0];
    CHECK(rec.state == TrialState::kPruned);
    REQUIRE(rec.value.has_value());
    CHECK(*rec.value == 1.5);
  }
  INFO(Describe(rec));
  REQUIRE(rec.params.count("x") == 1);
  CHECK(rec.params.at("x").internal == Approx(x).epsilon(1e-15));
}

TEST_CASE("kind = python with grid and no [space] is refused at submit", "[scheduler][suggest]") {
  SchedulerHarness h;
  testing::TempDir dir;
  dir.Write("obj.py", "def objective(trial):\n    return 1.0\n");
  const std::string toml =
      "[study]\nname = \"g\"\nn_trials = 1\n\n[objective]\nkind = \"python\"\nfunction = "
      "\"obj.py:objective\"\n\n[sampler]\nkind = \"grid\"\n";
  common::Result<StudyRecord> r = h.scheduler().Submit({toml, dir.File("g.toml")});
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(), Catch::Contains(sampler::FixedSpaceRequiredMessage("grid")));
  CHECK(h.StudyNames().empty());
}

}  // namespace
}  // namespace triald::daemon
