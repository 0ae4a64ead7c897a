// Control after submit (pause, resume, extend, parallelism, delete) and enqueued trials.
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
// Control after submit: pause, resume, extend, parallelism, delete

TEST_CASE("metric names are set after submit, checked against the objectives, and stored",
          "[scheduler][control]") {
  SchedulerHarness h;
  Sweep sweep;
  sweep.name = "named";
  h.SubmitOk(sweep);
  common::Result<StudyRecord> set = h.scheduler().SetMetricNames("named", {"val loss"});
  INFO(set.status().ToString());
  REQUIRE(set.ok());
  CHECK(h.Study("named").submit.metric_names == std::vector<std::string>{"val loss"});
  CHECK(h.HasEvent("named", "study_metric_names"));
  common::Result<StudyRecord> two = h.scheduler().SetMetricNames("named", {"a", "b"});
  CHECK(two.status().code() == Code::kInvalidArgument);
  CHECK_THAT(two.status().message(), Catch::Contains("2 given, the study has 1 objective"));
  CHECK(h.scheduler().SetMetricNames("named", {""}).status().code() == Code::kInvalidArgument);
  CHECK(h.scheduler().SetMetricNames("nope", {"x"}).status().code() == Code::kNotFound);
  REQUIRE(h.scheduler().SetMetricNames("named", {}).ok());  // cleared
  CHECK(h.Study("named").submit.metric_names.empty());
}

TEST_CASE("a paused study starts no trial, its running ones go on, and resume restarts it",
          "[scheduler][control]") {
  SchedulerHarness h;
  FakeLauncher& l = h.launcher();
  Sweep sweep;
  sweep.name = "pausable";
  sweep.n_trials = 5;
  sweep.parallelism = 2;
  h.SubmitOk(sweep);
  REQUIRE(l.live_count("pausable") == 2);

  common::Result<StudyRecord> paused = h.scheduler().Pause("pausable", true);
  INFO(paused.status().ToString());
  REQUIRE(paused.ok());
  CHECK(paused->paused);
  CHECK(h.Study("pausable").paused);
  CHECK(h.Study("pausable").state == StudyState::kRunning);
  // Running trials are not stopped, and their ends start nothing.
  for (Launched* p : l.Live("pausable")) CHECK(p->stops.empty());
  l.Complete(LiveAt(l, "pausable"), 1.0);
  l.Complete(LiveAt(l, "pausable"), 2.0);
  h.scheduler().Pump();
  CHECK(l.launch_count() == 2);
  CHECK(l.live_count() == 0);
  CHECK(h.Study("pausable").state == StudyState::kRunning);
  CHECK(h.HasEvent("pausable", "study_paused"));

  // Pausing again, resuming an unpaused study, an unknown study: refused, saying why.
  common::Result<StudyRecord> again = h.scheduler().Pause("pausable", true);
  CHECK(again.status().code() == Code::kFailedPrecondition);
  CHECK_THAT(again.status().message(), Catch::Contains("already paused"));
  CHECK(h.scheduler().Pause("no-such-study", true).status().code() == Code::kNotFound);

  // A paused study survives a restart paused.
  h.Restart(7);
  REQUIRE(h.scheduler().Recover().ok());
  h.scheduler().Pump();
  FakeLauncher& l2 = h.launcher();
  CHECK(l2.launch_count() == 0);
  CHECK(h.Study("pausable").paused);

  common::Result<StudyRecord> resumed = h.scheduler().Pause("pausable", false);
  INFO(resumed.status().ToString());
  REQUIRE(resumed.ok());
  CHECK_FALSE(h.Study("pausable").paused);
  CHECK(l2.live_count("pausable") == 2);  // trials start at once
  CHECK(h.HasEvent("pausable", "study_resumed"));
  CHECK(h.scheduler().Pause("pausable", false).status().code() == Code::kFailedPrecondition);
  CompleteAll(h, "pausable", 2);
  CHECK(h.Trials("pausable").size() == 5);
  CHECK(h.Study("pausable").state == StudyState::kComplete);
  // A finished study cannot be paused.
  common::Result<StudyRecord> done = h.scheduler().Pause("pausable", true);
  CHECK(done.status().code() == Code::kFailedPrecondition);
  CHECK_THAT(done.status().message(), Catch::Contains("COMPLETE"));
}

TEST_CASE("extending a COMPLETE study runs it again up to the new total", "[scheduler][control]") {
  SchedulerHarness h;
  FakeLauncher& l = h.launcher();
  Sweep sweep;
  sweep.name = "more";
  sweep.n_trials = 2;
  sweep.parallelism = 2;
  h.SubmitOk(sweep);
  CompleteAll(h, "more", 2);
  REQUIRE(h.Study("more").state == StudyState::kComplete);
  REQUIRE(h.scheduler().active_study_count() == 0);

  // Not above the finished trials: refused, naming both.
  common::Result<StudyRecord> low = h.scheduler().Extend("more", 2);
  CHECK(low.status().code() == Code::kInvalidArgument);
  CHECK_THAT(low.status().message(),
             Catch::Contains("--n-trials 2") && Catch::Contains("2 finished"));
  CHECK(h.Study("more").n_trials == 2);
  CHECK(h.Study("more").state == StudyState::kComplete);
  CHECK(h.scheduler().Extend("nothing-here", 5).status().code() == Code::kNotFound);

  common::Result<StudyRecord> ext = h.scheduler().Extend("more", 5);
  INFO(ext.status().ToString());
  REQUIRE(ext.ok());
  CHECK(ext->n_trials == 5);
  StudyRecord stored = h.Study("more");
  CHECK(stored.state == StudyState::kRunning);
  CHECK(stored.n_trials == 5);
  CHECK(stored.finished_at == 0);
  CHECK(l.live_count("more") == 2);  // started at once, at the sweep's parallelism
  CompleteAll(h, "more", 2);
  CHECK(h.Trials("more").size() == 5);
  CHECK(h.Study("more").state == StudyState::kComplete);
  const std::vector<std::string> kinds = h.EventKinds("more");
  CHECK(std::count(kinds.begin(), kinds.end(), "study_complete") == 2);
  CHECK(h.HasEvent("more", "study_extended"));

  // Extending a running study raises its total; a cancelled one is refused.
  Sweep other;
  other.name = "cut";
  other.n_trials = 3;
  h.SubmitOk(other);
  REQUIRE(h.scheduler().Extend("cut", 4).ok());
  CHECK(h.Study("cut").n_trials == 4);
  REQUIRE(h.scheduler().Cancel("cut").ok());
  common::Result<StudyRecord> cancelled = h.scheduler().Extend("cut", 9);
  CHECK(cancelled.status().code() == Code::kFailedPrecondition);
  CHECK_THAT(cancelled.status().message(), Catch::Contains("CANCELLED"));
}

TEST_CASE("the parallelism set after submit applies at the next launch and survives a restart",
          "[scheduler][control]") {
  SchedulerHarness h;
  FakeLauncher& l = h.launcher();
  Sweep sweep;
  sweep.name = "wide";
  sweep.n_trials = 8;
  sweep.parallelism = 1;
  h.SubmitOk(sweep);
  REQUIRE(l.live_count("wide") == 1);

  CHECK(h.scheduler().SetParallelism("wide", 0).status().code() == Code::kInvalidArgument);
  CHECK(h.Study("wide").parallelism == 0);

  // Up: more start at once.
  REQUIRE(h.scheduler().SetParallelism("wide", 3).ok());
  CHECK(h.Study("wide").parallelism == 3);
  CHECK(l.live_count("wide") == 3);
  // Down: nothing running stops; no new trial until fewer than 1 run.
  REQUIRE(h.scheduler().SetParallelism("wide", 1).ok());
  CHECK(l.live_count("wide") == 3);
  for (Launched* p : l.Live("wide")) CHECK(p->stops.empty());
  l.Complete(LiveAt(l, "wide"), 1.0);
  CHECK(l.live_count("wide") == 2);
  l.Complete(LiveAt(l, "wide"), 1.0);
  CHECK(l.live_count("wide") == 1);
  l.Complete(LiveAt(l, "wide"), 1.0);
  CHECK(l.live_count("wide") == 1);  // the next one
  const std::vector<std::pair<std::string, std::string>> events = h.Events("wide");
  CHECK(std::count_if(events.begin(), events.end(),
                      [](const auto& e) { return e.first == "study_parallelism"; }) == 2);

  // The override is stored over the sweep's (re-parsed at restart).
  REQUIRE(h.scheduler().SetParallelism("wide", 2).ok());
  h.Restart(7);
  REQUIRE(h.scheduler().Recover().ok());
  h.scheduler().Pump();
  CHECK(h.launcher().live_count("wide") == 2);
  CompleteAll(h, "wide", 2);
  CHECK(h.Study("wide").state == StudyState::kComplete);
}

TEST_CASE("deleting a study is refused while trials run, then removes it from storage",
          "[scheduler][control]") {
  testing::TempDir dir;
  SchedulerHarnessOptions options;
  options.state_dir = dir.path();
  SchedulerHarness h(options);
  FakeLauncher& l = h.launcher();
  Sweep sweep, keep;
  sweep.name = "gone";
  sweep.n_trials = 2;
  keep.name = "kept";
  keep.n_trials = 1;
  h.SubmitOk(sweep);
  REQUIRE(l.live_count("gone") == 1);

  common::Result<int64_t> busy = h.scheduler().Delete("gone", false);
  CHECK(busy.status().code() == Code::kFailedPrecondition);
  CHECK_THAT(busy.status().message(), Catch::Contains("1 of its trials is running"));
  CHECK(h.Study("gone").id > 0);
  CHECK(h.scheduler().Delete("never-was", false).status().code() == Code::kNotFound);

  l.Attr(LiveAt(l, "gone"), "k", "1");
  l.Report(LiveAt(l, "gone"), 1, 0.5);
  CompleteAll(h, "gone", 1);
  REQUIRE(h.Study("gone").state == StudyState::kComplete);
  h.SubmitOk(keep);
  CompleteAll(h, "kept", 1);
  const std::filesystem::path folder = std::filesystem::path(dir.path()) / "studies" / "gone";
  std::filesystem::create_directories(folder / "trials" / "0");
  { std::ofstream(folder / "trials" / "0" / "checkpoint") << "x"; }

  common::Result<int64_t> deleted = h.scheduler().Delete("gone", /*purge=*/true);
  INFO(deleted.status().ToString());
  REQUIRE(deleted.ok());
  CHECK(*deleted == 2);
  CHECK(h.storage().GetStudy("gone").status().code() == Code::kNotFound);
  CHECK(h.StudyNames() == std::vector<std::string>{"kept"});
  CHECK_FALSE(std::filesystem::exists(folder));
  CHECK(h.Trials("kept").size() == 1);  // the other study is untouched
  // The deletion is among the daemon's own events, naming the study.
  common::Result<std::vector<model::EventRecord>> all = h.storage().GetEvents(std::nullopt);
  REQUIRE(all.ok());
  bool seen = false;
  for (const model::EventRecord& e : *all) {
    if (e.kind == "study_deleted") {
      seen = true;
      CHECK_FALSE(e.study_id.has_value());
      CHECK_THAT(e.detail, Catch::Contains("study gone") && Catch::Contains("2 trials"));
    }
  }
  CHECK(seen);
  // Its name can be used again.
  h.SubmitOk(sweep);
  CHECK(h.Study("gone").n_trials == 2);
}

// ---------------------------------------------------------------------------------------------
// Enqueue

std::string ParamsEnv(Launched& l) { return l.env()["TRIALD_PARAMS"]; }

TEST_CASE("enqueued trials run next, in order, with the given params, the rest sampled",
          "[scheduler][enqueue]") {
  SchedulerHarness h;
  FakeLauncher& l = h.launcher();
  Sweep sweep;
  sweep.name = "queue";
  sweep.n_trials = 4;
  sweep.parallelism = 1;
  sweep.sampler = "seed = 5";
  h.SubmitOk(sweep);
  REQUIRE(l.launch_count() == 1);

  common::Result<TrialRecord> first =
      h.scheduler().Enqueue("queue", {{"lr", "0.01"}, {"opt", "sgd"}});
  INFO(first.status().ToString());
  REQUIRE(first.ok());
  CHECK(first->number == 1);
  CHECK(first->state == TrialState::kWaiting);
  common::Result<TrialRecord> second = h.scheduler().Enqueue("queue", {{"layers", " 3 "}});
  REQUIRE(second.ok());
  CHECK(second->number == 2);
  CHECK(h.scheduler().queued_count() == 2);
  CHECK(l.launch_count() == 1);  // parallelism 1: they wait for trial 0

  // Stored at once, WAITING, counting toward n_trials.
  std::vector<TrialRecord> stored = h.Trials("queue");
  REQUIRE(stored.size() == 3);
  CHECK(stored[1].state == TrialState::kWaiting);
  CHECK(stored[1].params.at("lr").internal == 0.01);
  CHECK(stored[1].params.at("opt").internal == 1);  // "sgd"
  CHECK(stored[2].params.at("layers").internal == 3);

  // Parameters not given are what the sampler gives that trial number: a study with the same
  // seed and nothing enqueued agrees.
  SchedulerHarness reference;
  reference.SubmitOk(sweep);
  CompleteAll(reference, "", 1);
  std::vector<TrialRecord> sampled = reference.Trials("queue");
  REQUIRE(sampled.size() == 4);
  CHECK(stored[1].params.at("layers").internal == sampled[1].params.at("layers").internal);
  CHECK(stored[2].params.at("lr").internal == sampled[2].params.at("lr").internal);
  CHECK(stored[2].params.at("opt").internal == sampled[2].params.at("opt").internal);

  l.Complete(l.launch(0), 1.0);
  REQUIRE(l.launch_count() == 2);
  CHECK(l.launch(1).trial == 1);
  boost::json::value p1 = boost::json::parse(ParamsEnv(l.launch(1)));
  CHECK(p1.at("lr").to_number<double>() == 0.01);
  CHECK(p1.at("opt").as_string() == "sgd");
  l.Complete(l.launch(1), 2.0);
  REQUIRE(l.launch_count() == 3);
  CHECK(l.launch(2).trial == 2);
  CHECK(boost::json::parse(ParamsEnv(l.launch(2))).at("layers").as_int64() == 3);
  l.Complete(l.launch(2), 3.0);
  REQUIRE(l.launch_count() == 4);
  CHECK(l.launch(3).trial == 3);
  CHECK(InternalParams(h.Trials("queue")[3]) == InternalParams(sampled[3]));
  l.Complete(l.launch(3), 4.0);

  stored = h.Trials("queue");
  REQUIRE(stored.size() == 4);
  for (const TrialRecord& t : stored) CHECK(t.state == TrialState::kComplete);
  CHECK(h.Study("queue").state == StudyState::kComplete);
}

TEST_CASE("an enqueued trial starts at once when its study has a free slot",
          "[scheduler][enqueue]") {
  SchedulerHarness h;
  FakeLauncher& l = h.launcher();
  Sweep sweep;
  sweep.name = "grid-queue";
  sweep.n_trials = 5;
  sweep.parallelism = 3;
  sweep.space = "[space.letter]\ntype = \"categorical\"\nchoices = [\"a\", \"b\"]\n";
  sweep.sampler = "kind = \"grid\"\nseed = 1";
  h.SubmitOk(sweep);
  REQUIRE(l.launch_count() == 2);  // the grid has two points; a slot is free
  common::Result<TrialRecord> r = h.scheduler().Enqueue("grid-queue", {{"letter", "b"}});
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  REQUIRE(l.launch_count() == 3);
  CHECK(l.launch(2).trial == r->number);
  CHECK(boost::json::parse(ParamsEnv(l.launch(2))).at("letter").as_string() == "b");
  CompleteAll(h, "", 3);
  CHECK(h.Trials("grid-queue").size() == 3);
  CHECK(h.Study("grid-queue").state == StudyState::kComplete);
}

TEST_CASE("a refused enqueue says why and stores nothing", "[scheduler][enqueue]") {
  SchedulerHarness h;
  FakeLauncher& l = h.launcher();
  Sweep sweep;
  sweep.name = "q";
  sweep.n_trials = 3;
  h.SubmitOk(sweep);
  common::Result<TrialRecord> r = common::Internal("not called");
  size_t trials_after = 1;  // trial 0, started by Submit
  SECTION("an unknown study") {
    r = h.scheduler().Enqueue("nope", {});
    CHECK(r.status().code() == Code::kNotFound);
    CHECK_THAT(r.status().message(), Catch::Contains("\"nope\""));
  }
  SECTION("an unknown parameter, listing the study's") {
    r = h.scheduler().Enqueue("q", {{"lr", "0.01"}, {"depth", "3"}});
    CHECK(r.status().code() == Code::kInvalidArgument);
    CHECK_THAT(r.status().message(),
               Catch::Contains("\"depth\"") && Catch::Contains("lr, layers, opt"));
  }
  SECTION("a value outside the parameter's distribution") {
    for (auto [param, text] : std::vector<std::pair<std::string, std::string>>{
             {"lr", "abc"}, {"lr", "5"}, {"layers", "2.5"}, {"layers", "9"}, {"opt", "rmsprop"}}) {
      INFO(param << " = " << text);
      r = h.scheduler().Enqueue("q", {{param, text}});
      CHECK(r.status().code() == Code::kInvalidArgument);
      CHECK_THAT(r.status().message(),
                 Catch::Contains(param) && Catch::Contains(text) && Catch::Contains("expected"));
    }
  }
  SECTION("a study that already has its n_trials trials") {
    REQUIRE(h.scheduler().Enqueue("q", {}).ok());
    REQUIRE(h.scheduler().Enqueue("q", {}).ok());
    trials_after = 3;
    r = h.scheduler().Enqueue("q", {});
    CHECK(r.status().code() == Code::kFailedPrecondition);
    CHECK_THAT(r.status().message(),
               Catch::Contains("study \"q\" already has its n_trials = 3 trials"));
  }
  SECTION("a study that is no longer running") {
    REQUIRE(h.scheduler().Cancel("q").ok());
    l.ExitSignal(l.launch(0), SIGTERM);
    r = h.scheduler().Enqueue("q", {});
    CHECK(r.status().code() == Code::kFailedPrecondition);
    CHECK_THAT(r.status().message(), Catch::Contains("CANCELLED"));
  }
  INFO(r.status().ToString());
  CHECK_FALSE(r.ok());
  CHECK(h.Trials("q").size() == trials_after);
  CHECK(l.launch_count() == 1);
}

TEST_CASE("an enqueued trial survives a restart and runs first", "[scheduler][enqueue]") {
  SchedulerHarness h;
  Sweep sweep;
  sweep.name = "persist";
  sweep.n_trials = 3;
  sweep.sampler = "seed = 3";
  h.SubmitOk(sweep);
  REQUIRE(h.scheduler().Enqueue("persist", {{"opt", "adamw"}}).ok());
  h.Restart(7);
  REQUIRE(h.scheduler().Recover().ok());
  CHECK(h.scheduler().queued_count() == 1);
  h.scheduler().Pump();
  REQUIRE(h.launcher().launch_count() == 1);
  Launched& p = h.launcher().launch(0);
  CHECK(p.trial == 1);
  CHECK(boost::json::parse(ParamsEnv(p)).at("opt").as_string() == "adamw");
}

// --exit-when-idle leaves when HasWork() has been false for a while.
TEST_CASE("HasWork: a running trial or a study that could start one here is work",
          "[scheduler][pilot]") {
  SchedulerHarness h;
  FakeLauncher& l = h.launcher();
  CHECK_FALSE(h.scheduler().HasWork());  // no study at all
  Sweep sweep;
  sweep.name = "pilot";
  sweep.n_trials = 2;
  sweep.parallelism = 1;
  h.SubmitOk(sweep);
  CHECK(h.scheduler().HasWork());
  // Paused with nothing running: no work (the node may go); resumed: work again.
  REQUIRE(h.scheduler().Pause("pilot", true).ok());
  l.Complete(l.launch(0), 1.0);
  CHECK_FALSE(h.scheduler().HasWork());
  REQUIRE(h.scheduler().Pause("pilot", false).ok());
  CHECK(h.scheduler().HasWork());
  // The last configuration runs: work until it ends, none after.
  REQUIRE(l.launch_count() == 2);
  CHECK(h.scheduler().HasWork());
  l.Complete(l.launch(1), 2.0);
  CHECK_FALSE(h.scheduler().HasWork());
}

// max_workers bounds the trials that run on this host; Slurm trials (their bridges are local
// processes, but their work is the cluster's) only by their study's parallelism, and they take
// no GPU slot of this host's pool.
TEST_CASE("max_workers bounds local trials only, Slurm trials take no local GPU slot",
          "[scheduler][slurm]") {
  SchedulerHarnessOptions o;
  o.max_workers = 1;
  o.check_executor = [](const config::SweepSpec&, const std::string&) {
    return common::Status::Ok();
  };
  SchedulerHarness h(o);
  FakeLauncher& l = h.launcher();
  Sweep slurm;
  slurm.name = "on-slurm";
  slurm.n_trials = 6;
  slurm.parallelism = 4;
  slurm.study_extra = "gpus_per_trial = 2\n";  // this harness has no GPUs at all
  slurm.space += "\n[executor]\nkind = \"slurm\"\n";
  h.SubmitOk(slurm);
  Sweep local;
  local.name = "here";
  local.n_trials = 3;
  local.parallelism = 3;
  h.SubmitOk(local);
  // Four Slurm trials (their parallelism) and one local one (max_workers), at once.
  CHECK(l.max_live("on-slurm") == 4);
  CHECK(l.max_live("here") == 1);
  for (size_t i = 0; i < l.launch_count(); ++i) {
    const FakeLauncher::Launched& launch = l.launch(i);
    INFO(launch.study << " trial " << launch.trial);
    CHECK(launch.spec.slurm.has_value() == (launch.study == "on-slurm"));
    if (launch.spec.slurm) CHECK(launch.spec.slurm->gpus == 2);
  }
  // Without an executor check (a daemon without Slurm), such a study is refused.
  SchedulerHarness bare;
  slurm.name = "refused";
  common::Result<StudyRecord> r = bare.Submit(slurm);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(), Catch::Contains("[executor] kind = \"slurm\": this daemon runs "
                                                   "trials on its own host only"));
}

}  // namespace
}  // namespace triald::daemon
