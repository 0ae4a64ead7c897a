// The scheduler as one node of several sharing a storage (daemon/scheduler.h, "Shared
// storage"): claims, the shared history, dead nodes, a node coming back, cancel and completion
// across nodes. The nodes are schedulers in this process (SchedulerCluster,
// tests/daemon/scheduler_harness.h), each with its own connection to one SQLite file opened as
// shared (SqliteOptions::shared), its own fake launcher and node name, and one fake clock: no
// process is forked and no time passes. The same logic against a real PostgreSQL server and real
// daemons is tests/integration/postgres_cluster_test.cc.

#include <algorithm>
#include <catch2/catch.hpp>
#include <csignal>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "daemon/scheduler.h"
#include "daemon/scheduler/shared_coordinator.h"
#include "daemon/scheduler/study_delete.h"
#include "daemon/scheduler/study_loader.h"
#include "tests/daemon/fakes.h"
#include "tests/daemon/scheduler_harness.h"

namespace triald::daemon {
namespace {

using testing::SchedulerCluster;

constexpr double kNodeTimeout = SchedulerCluster::kNodeTimeout;

// A sweep over one float x (or the given [space] and [sampler] tables).
Sweep SharedSweep(const std::string& name, int n_trials, int parallelism,
                  const std::string& extra = "", const std::string& space = "") {
  Sweep s;
  s.name = name;
  s.n_trials = n_trials;
  s.parallelism = parallelism;
  s.study_extra = extra;
  s.space = space.empty() ? testing::kUnitSpace : space;
  s.dir = "/tmp";
  return s;
}

TEST_CASE("nodes sharing a study run every trial once, exactly n_trials, each on its claimer",
          "[scheduler][shared]") {
  SchedulerCluster c({"alpha", "beta", "gamma"});
  auto submitted = c[0].Submit(SharedSweep("shared", 30, 2));
  REQUIRE(submitted.ok());
  CHECK(c[0].launcher().live_count() == 2);
  c.TickAll();  // beta and gamma join the study and start their own two each
  CHECK(c[1].launcher().live_count() == 2);
  CHECK(c[2].launcher().live_count() == 2);

  std::map<std::string, int> ran = c.RunToEnd();
  std::vector<TrialRecord> trials = c.Trials("shared");
  REQUIRE(trials.size() == 30);
  std::map<int, std::string> launched_by;  // trial number -> node that launched it
  for (size_t i = 0; i < c.size(); ++i) {
    for (size_t k = 0; k < c[i].launcher().launch_count(); ++k) {
      const int trial = c[i].launcher().launch(k).trial;
      auto [it, first] = launched_by.emplace(trial, c[i].node());
      INFO("trial " << trial << " launched by " << c[i].node() << " and by " << it->second);
      CHECK(first);
    }
  }
  for (const TrialRecord& t : trials) {
    INFO("trial " << t.number);
    CHECK(t.state == TrialState::kComplete);
    CHECK(t.node == launched_by[t.number]);
  }
  for (const auto& [node, n] : ran) {
    INFO(node);
    CHECK(n >= 5);  // every node did a share of the work
  }
  CHECK(c.Study("shared").state == StudyState::kComplete);
}

TEST_CASE("a node's sampler sees the trials running on other nodes", "[scheduler][shared]") {
  // A grid of four points: a node that did not see the others' running trials would draw one
  // of their points again.
  const std::string grid =
      "\n[space.k]\ntype = \"categorical\"\nchoices = [\"a\", \"b\", \"c\", \"d\"]\n"
      "\n[sampler]\nkind = \"grid\"\n";
  SchedulerCluster c({"alpha", "beta"});
  REQUIRE(c[0].Submit(SharedSweep("grid", 4, 2, "", grid)).ok());
  c.TickAll();
  REQUIRE(c[0].launcher().live_count() == 2);
  REQUIRE(c[1].launcher().live_count() == 2);
  std::set<std::string> points;
  for (size_t i = 0; i < c.size(); ++i) {
    for (Launched* l : c[i].launcher().Live()) points.insert(l->env()["TRIALD_PARAMS"]);
  }
  CHECK(points.size() == 4);
}

TEST_CASE("a retry of a trial that ran on another node gets no resume folder, and says why",
          "[scheduler][shared][resume]") {
  SchedulerCluster c({"alpha", "beta"});
  REQUIRE(c[0].Submit(SharedSweep("gone", 2, 1, "retries = 1\nretry_on = [\"lost\"]\n")).ok());
  c.TickAll();
  REQUIRE(c[0].launcher().live_count() == 1);
  REQUIRE(c[1].launcher().live_count() == 1);
  const int lost = c[0].launcher().Live().front()->trial;
  // A folder of that number on beta is not the attempt's (it could be a stale one): the attempt
  // ran on alpha, whose folders are alpha's.
  std::filesystem::create_directories(c.StateDir("beta") + "/studies/gone/trials/" +
                                      std::to_string(lost));
  c.clock().Advance(kNodeTimeout + 1);
  c[1].Tick();  // alpha is dead: its trial is FAIL(lost) and retried
  c[1].launcher().Complete(*c[1].launcher().Live().front(), 1.0);  // beta's slot frees
  c[1].Tick();
  std::vector<Launched*> live = c[1].launcher().Live();
  REQUIRE(live.size() == 1);
  const TrialRecord retry = c.Trials("gone")[live.front()->trial];
  REQUIRE(retry.retry_of_number == std::optional<int>(lost));
  CHECK(live.front()->env().count("TRIALD_RESUME_DIR") == 0);
  auto events = c[1].storage().GetEvents(c.Study("gone").id);
  REQUIRE(events.ok());
  std::vector<std::string> resume;
  for (const model::EventRecord& e : *events) {
    if (e.kind == "resume_folder") resume.push_back(e.detail);
  }
  CHECK(resume == std::vector<std::string>{
                      "trial " + std::to_string(retry.number) +
                      " starts without a resume folder: trial " + std::to_string(lost) +
                      " ran on node alpha, and its folder is there, not on this node (beta)"});
}

TEST_CASE(
    "a dead node's trials end FAIL(lost), are retried elsewhere, and its return changes "
    "nothing",
    "[scheduler][shared]") {
  SchedulerCluster c({"alpha", "beta"});
  REQUIRE(c[0].Submit(SharedSweep("lost", 6, 2, "retries = 1\nretry_on = [\"lost\"]\n")).ok());
  c.TickAll();
  std::vector<Launched*> alpha_live = c[0].launcher().Live();
  REQUIRE(alpha_live.size() == 2);
  REQUIRE(c[1].launcher().live_count() == 2);

  // alpha goes silent (a frozen host or a cut network); beta keeps beating.
  c.clock().Advance(kNodeTimeout + 1);
  c[1].Tick();
  for (Launched* l : alpha_live) {
    const TrialRecord t = c.Trials("lost")[l->trial];
    INFO("trial " << t.number);
    CHECK(t.state == TrialState::kFail);
    CHECK(t.fail.reason == "lost");
    CHECK(t.fail.detail.find("node alpha") != std::string::npos);
  }
  // Their retries are claimable by beta, which starts them as its slots free up.
  std::vector<TrialRecord> trials = c.Trials("lost");
  int retries = 0;
  for (const TrialRecord& t : trials) retries += t.retry_of.has_value();
  CHECK(retries == 2);

  // alpha comes back: it stops the processes of the trials it lost and records nothing for
  // them, even when they exit with a result.
  c[0].Tick();
  for (Launched* l : alpha_live) {
    REQUIRE_FALSE(l->stops.empty());
    CHECK(l->stops.front() == StopReason::kCancel);
    c[0].launcher().Complete(*l, -100.0);
  }
  for (Launched* l : alpha_live) {
    const TrialRecord t = c.Trials("lost")[l->trial];
    CHECK(t.state == TrialState::kFail);
    CHECK(t.fail.reason == "lost");
    CHECK_FALSE(t.value.has_value());
  }

  c.RunToEnd();
  trials = c.Trials("lost");
  int configurations = 0;
  std::set<int64_t> retried;
  for (const TrialRecord& t : trials) {
    if (t.retry_of) retried.insert(*t.retry_of);
  }
  for (const TrialRecord& t : trials) {
    INFO("trial " << t.number << " " << model::TrialStateName(t.state));
    CHECK(model::IsFinished(t.state));
    configurations += retried.count(t.id) == 0;
  }
  CHECK(configurations == 6);
  CHECK(trials.size() == 8);
  CHECK(c.Study("lost").state == StudyState::kComplete);
}

TEST_CASE(
    "a dead node's trials are ended off the loop, with the loop's storage away, and not once the "
    "node beats again",
    "[scheduler][shared]") {
  SchedulerCluster c({"alpha", "beta"}, /*own_reads_connections=*/true);
  REQUIRE(c[0].Submit(SharedSweep("reaped", 6, 1, "retries = 1\nretry_on = [\"lost\"]\n")).ok());
  c.TickAll();
  REQUIRE(c[0].launcher().live_count() == 1);
  REQUIRE(c[1].launcher().live_count() == 1);
  const int alpha_trial = c[0].launcher().Live().front()->trial;

  // alpha goes silent. beta's tick finds it dead and ends its trial on the reads' connection:
  // the loop's own answers nothing meanwhile, and is not needed.
  c.clock().Advance(kNodeTimeout + 1);
  c[1].flaky().down = true;
  c[1].Tick();
  c[1].flaky().down = false;
  CHECK_FALSE(c[1].scheduler().storage_outage().held());
  TrialRecord lost = c.Trials("reaped")[alpha_trial];
  CHECK(lost.state == TrialState::kFail);
  CHECK(lost.fail.reason == "lost");
  CHECK(lost.fail.detail.find("node alpha") != std::string::npos);
  CHECK(c[1].HasEvent("reaped", "trial_lost"));
  int retries = 0;
  for (const TrialRecord& t : c.Trials("reaped")) retries += t.retry_of == lost.id;
  CHECK(retries == 1);
  // beta's memory has the end too: the study waits for the retry, not for alpha's trial.
  const StudyCache* cached = c[1].scheduler().active_study("reaped");
  REQUIRE(cached != nullptr);
  CHECK(cached->trials[alpha_trial].state == TrialState::kFail);
  CHECK(cached->pending_finishes == 0);

  // alpha is back: it stops the trial it lost (recording nothing for it), then starts another.
  c[0].Tick();
  for (Launched* l : c[0].launcher().Live()) {
    REQUIRE_FALSE(l->stops.empty());
    c[0].launcher().Complete(*l, -100.0);
  }
  c[0].Tick();
  std::optional<int> running;
  for (const TrialRecord& t : c.Trials("reaped")) {
    if (t.state == TrialState::kRunning && t.node == "alpha") running = t.number;
  }
  REQUIRE(running.has_value());
  const int second = *running;
  // alpha goes silent again: beta decides that trial is lost, but alpha beats before the end's
  // transaction runs, which then stores nothing.
  c.clock().Advance(kNodeTimeout + 1);
  c[1].reads().Hold();
  c[1].scheduler().SharedTick();  // its beat and reads wait
  c[1].reads().Release();         // read; applied at the next Drain
  c[1].reads().Hold();
  c[1].reads().Drain();  // alpha found dead: the end of its trial is handed over, and held
  CHECK(c[1].reads().held() == 1);
  REQUIRE(c[0].storage().Heartbeat(c.clock().WallSeconds()).ok());  // alpha is back
  c[1].reads().Release();
  c[1].Settle();
  const TrialRecord kept = c.Trials("reaped")[second];
  CHECK(kept.state == TrialState::kRunning);
  CHECK(kept.node == "alpha");
  CHECK(c[1].scheduler().active_study("reaped")->pending_finishes == 0);
}

TEST_CASE("a dead node's claimed trial is never run by another node under its number",
          "[scheduler][shared]") {
  SchedulerCluster c({"alpha", "beta"});
  REQUIRE(c[0].Submit(SharedSweep("claimed", 4, 1, "retries = 1\nretry_on = [\"lost\"]\n")).ok());
  c.TickAll();
  REQUIRE(c[0].launcher().live_count() == 1);
  REQUIRE(c[1].launcher().live_count() == 1);
  auto queued = c[1].scheduler().Enqueue("claimed", {{"x", "0.5"}});
  REQUIRE(queued.ok());
  // alpha claims it and goes silent before marking it running: it may have forked it already.
  REQUIRE(c[0].storage().ClaimTrial(queued->id).ok());
  c.clock().Advance(kNodeTimeout + 1);
  c[1].Tick();
  const TrialRecord lost = c.Trials("claimed")[queued->number];
  CHECK(lost.state == TrialState::kFail);
  CHECK(lost.fail.reason == "lost");
  CHECK_THAT(lost.fail.detail, Catch::Contains("after claiming the trial"));
  CHECK(c[1].launcher().Find("claimed", queued->number) == nullptr);
  // Its retry, a new number, is anyone's.
  bool retried = false;
  for (const TrialRecord& t : c.Trials("claimed")) retried = retried || t.retry_of == lost.id;
  CHECK(retried);
}

TEST_CASE("a dead node's claim given back before its end is stored leaves the trial to anyone",
          "[scheduler][shared]") {
  SchedulerCluster c({"alpha", "beta"});
  REQUIRE(c[0].Submit(SharedSweep("given", 4, 1)).ok());
  c.TickAll();
  REQUIRE(c[0].launcher().live_count() == 1);
  const int running = c[0].launcher().Live().front()->trial;
  auto queued = c[1].scheduler().Enqueue("given", {{"x", "0.5"}});
  REQUIRE(queued.ok());
  REQUIRE(c[0].storage().ClaimTrial(queued->id).ok());
  // alpha goes silent; beta finds it dead and hands both its trials' ends over (held).
  c.clock().Advance(kNodeTimeout + 1);
  c[1].reads().Hold();
  c[1].scheduler().SharedTick();
  c[1].reads().Release();
  c[1].reads().Hold();
  c[1].reads().Drain();
  CHECK(c[1].reads().held() == 2);
  // The claim is given back before those ends' transactions run (alpha still silent).
  REQUIRE(c[0].storage().ReleaseClaim(queued->id).ok());
  c[1].reads().Release();
  c[1].Settle();
  const TrialRecord given = c.Trials("given")[queued->number];
  CHECK(given.state == TrialState::kWaiting);
  CHECK(given.node.empty());
  // The trial alpha ran is lost all the same.
  const TrialRecord lost = c.Trials("given")[running];
  CHECK(lost.state == TrialState::kFail);
  CHECK(lost.fail.reason == "lost");
}

TEST_CASE("a study cancelled through one node stops the other nodes' trials",
          "[scheduler][shared]") {
  SchedulerCluster c({"alpha", "beta"});
  REQUIRE(c[0].Submit(SharedSweep("cancel", 20, 2)).ok());
  c.TickAll();
  std::vector<Launched*> beta_live = c[1].launcher().Live();
  REQUIRE(beta_live.size() == 2);
  REQUIRE(c[0].scheduler().Cancel("cancel").ok());
  CHECK(c[0].launcher().live_count() == 2);  // stopping, not yet exited
  c[1].Tick();
  for (Launched* l : beta_live) {
    REQUIRE_FALSE(l->stops.empty());
    CHECK(l->stops.front() == StopReason::kCancel);
    launcher::ProcessOutcome o;
    o.exit.signaled = true;
    o.exit.signal = 15;
    o.stop_reason = StopReason::kCancel;
    c[1].launcher().Exit(*l, o);
  }
  for (Launched* l : c[0].launcher().Live()) {
    launcher::ProcessOutcome o;
    o.exit.signaled = true;
    o.exit.signal = 15;
    o.stop_reason = StopReason::kCancel;
    c[0].launcher().Exit(*l, o);
  }
  c.TickAll();
  CHECK(c[0].launcher().launch_count() == 2);
  CHECK(c[1].launcher().launch_count() == 2);
  for (const TrialRecord& t : c.Trials("cancel")) {
    CHECK(t.state == TrialState::kFail);
    CHECK(t.fail.reason == "cancelled");
  }
  CHECK(c.Study("cancel").state == StudyState::kCancelled);
}

TEST_CASE("pause, parallelism, extend and delete through one node are obeyed by the others",
          "[scheduler][shared][control]") {
  SchedulerCluster c({"alpha", "beta"});
  REQUIRE(c[0].Submit(SharedSweep("ctl", 12, 2)).ok());
  c.TickAll();
  REQUIRE(c[0].launcher().live_count() == 2);
  REQUIRE(c[1].launcher().live_count() == 2);

  // Paused through alpha: beta's next claim re-reads the study under its lock and starts
  // nothing, even before its tick; running trials go on.
  REQUIRE(c[0].scheduler().Pause("ctl", true).ok());
  for (Launched* l : c[1].launcher().Live()) CHECK(l->stops.empty());
  c[1].launcher().Complete(*c[1].launcher().Live().front(), 0.5);
  c[0].launcher().Complete(*c[0].launcher().Live().front(), 0.5);
  c.TickAll();
  c.TickAll();
  CHECK(c[0].launcher().launch_count() == 2);
  CHECK(c[1].launcher().launch_count() == 2);
  CHECK(c.Study("ctl").paused);

  // Parallelism and resume through beta: beta starts at once, alpha at its next tick.
  REQUIRE(c[1].scheduler().SetParallelism("ctl", 3).ok());
  REQUIRE(c[1].scheduler().Pause("ctl", false).ok());
  c[1].Settle();  // its claims, made off the loop
  CHECK(c[1].launcher().live_count() == 3);
  c[0].Tick();
  CHECK(c[0].launcher().live_count() == 3);
  c.RunToEnd();
  CHECK(c.Trials("ctl").size() == 12);
  REQUIRE(c.Study("ctl").state == StudyState::kComplete);

  // Extended through beta: both nodes run the new trials, exactly up to the new total.
  REQUIRE(c[1].scheduler().Extend("ctl", 16).ok());
  c.TickAll();
  CHECK(c[0].launcher().live_count() > 0);
  CHECK(c[1].launcher().live_count() > 0);
  c.RunToEnd();
  CHECK(c.Trials("ctl").size() == 16);
  CHECK(c.Study("ctl").state == StudyState::kComplete);

  // Deleted through alpha: beta forgets it at its next tick.
  REQUIRE(c[0].scheduler().Delete("ctl", false).ok());
  c.TickAll();
  CHECK(c[0].scheduler().active_study_count() == 0);
  CHECK(c[1].scheduler().active_study_count() == 0);
  CHECK(c[1].storage().GetStudy("ctl").status().code() == common::Code::kNotFound);
}

TEST_CASE("an enqueued trial is claimed by one node only", "[scheduler][shared]") {
  SchedulerCluster c({"alpha", "beta"});
  REQUIRE(c[0].Submit(SharedSweep("enq", 3, 1)).ok());
  c.TickAll();
  REQUIRE(c[0].launcher().live_count() == 1);
  REQUIRE(c[1].launcher().live_count() == 1);
  auto queued = c[1].scheduler().Enqueue("enq", {{"x", "0.125"}});
  REQUIRE(queued.ok());
  // n_trials = 3 is reached: no node may create a fourth.
  CHECK_FALSE(c[0].scheduler().Enqueue("enq", {{"x", "0.5"}}).ok());
  c.RunToEnd();
  std::vector<TrialRecord> trials = c.Trials("enq");
  REQUIRE(trials.size() == 3);
  CHECK(trials[queued->number].params.at("x").internal == 0.125);
  CHECK(trials[queued->number].state == TrialState::kComplete);
  int launched = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    for (size_t k = 0; k < c[i].launcher().launch_count(); ++k) {
      launched += c[i].launcher().launch(k).trial == queued->number;
    }
  }
  CHECK(launched == 1);
}

TEST_CASE("a trial that ends while the database is away is recorded when it is back",
          "[scheduler][shared]") {
  SchedulerCluster c({"alpha"});
  REQUIRE(c[0].Submit(SharedSweep("away", 3, 1)).ok());
  Launched& first = *c[0].launcher().Live().front();
  c[0].flaky().down = true;
  c[0].launcher().Complete(first, 4.5);
  c[0].Tick();  // still away: kept, nothing new starts
  CHECK(c[0].launcher().live_count() == 0);
  c[0].flaky().down = false;
  CHECK(c.Trials("away")[first.trial].state == TrialState::kRunning);
  c[0].Tick();  // back: the end is stored
  const TrialRecord stored = c.Trials("away")[first.trial];
  CHECK(stored.state == TrialState::kComplete);
  REQUIRE(stored.value.has_value());
  CHECK(*stored.value == 4.5);
  // The claim that found the database away held the node; its probe finds it back, and the
  // study goes on.
  CHECK(c[0].launcher().live_count() == 0);
  c[0].PassWait();
  c[0].Settle();
  CHECK(c[0].launcher().live_count() == 1);
  c.RunToEnd();
  CHECK(c.Trials("away").size() == 3);
  CHECK(c.Study("away").state == StudyState::kComplete);
}

TEST_CASE("a node's own trials' ends are stored off the event loop, each with its retry",
          "[scheduler][shared][reads]") {
  // alpha's reads (and its own trials' ends) have a connection of their own, as the daemon's
  // reads' thread has; the loop's connection is the harness's.
  SchedulerCluster c({"alpha"}, /*own_reads_connections=*/true);
  SchedulerHarness& a = c[0];
  REQUIRE(a.Submit(SharedSweep("ends", 2, 1, "retries = 1\nretry_on = [\"signal\"]\n")).ok());
  Launched& first = *a.launcher().Live().front();
  const int n0 = first.trial;

  // The reads' thread is busy (a frozen database as that connection sees it): the end waits
  // there; nothing of it is stored or mirrored, and the study cannot complete without it.
  a.reads().Hold();
  a.launcher().Report(first, 0, 0.25);
  a.launcher().ExitSignal(first, SIGSEGV);
  CHECK(a.reads().held() == 2);  // its end, and the claim of a new trial in the freed slot
  CHECK(c.Trials("ends")[n0].state == TrialState::kRunning);
  const StudyCache* cached = a.scheduler().active_study("ends");
  REQUIRE(cached != nullptr);
  CHECK(cached->trials[n0].state == TrialState::kRunning);
  CHECK(cached->pending_finishes == 1);

  // The loop's own connection is down: the end is stored anyway, by the reads' connection, with
  // the trial's last report, its events and its retry, in one transaction.
  a.flaky().down = true;
  a.reads().Release();
  auto study_id = a.reads_flaky().GetStudy("ends");
  REQUIRE(study_id.ok());
  auto read = a.reads_flaky().GetTrials(study_id->id);
  REQUIRE(read.ok());
  // The end came first, with its retry (trial 1); the claim behind it, of a new trial drawn
  // before the retry existed, found the study changed and claimed nothing.
  std::vector<TrialRecord> stored = *read;
  REQUIRE(stored.size() == 2);
  CHECK(stored[n0].state == TrialState::kFail);
  CHECK(stored[n0].fail.reason == "signal");
  CHECK(stored[n0].intermediate == std::map<int64_t, double>{{0, 0.25}});
  const TrialRecord& retry = stored[1];
  CHECK(retry.retry_of == std::optional<int64_t>(stored[n0].id));
  CHECK(retry.state == TrialState::kWaiting);
  CHECK(retry.node.empty());
  auto events = a.reads_flaky().GetEvents(study_id->id);
  REQUIRE(events.ok());
  std::vector<std::string> kinds;
  for (const model::EventRecord& e : *events) {
    if (e.trial_id == stored[n0].id || e.trial_id == retry.id) kinds.push_back(e.kind);
  }
  CHECK(std::count(kinds.begin(), kinds.end(), "trial_finished") == 1);
  CHECK(std::count(kinds.begin(), kinds.end(), "trial_retry") == 1);
  // Mirrored once the completions run on the loop; the claim is made again then, of the retry,
  // and it starts (its claim also made by the reads' connection).
  CHECK(cached->trials[n0].state == TrialState::kRunning);
  CHECK(a.launcher().live_count() == 0);
  a.reads().Drain();
  CHECK(cached->trials[n0].state == TrialState::kFail);
  CHECK(cached->pending_finishes == 0);
  CHECK(cached->retried == 1);
  REQUIRE(cached->trials.size() == 2);
  CHECK(cached->trials[1].retry_of == std::optional<int64_t>(stored[n0].id));
  REQUIRE(a.launcher().live_count() == 1);
  Launched& second = *a.launcher().Live().front();
  CHECK(second.trial == 1);
  CHECK(a.reads_flaky().GetTrials(study_id->id)->at(1).node == "alpha");

  // The reads' connection down in its turn: the next end (the retry's) is kept, its report with
  // it, and stored once the database answers again.
  a.flaky().down = false;
  a.reads_flaky().down = true;
  a.launcher().Report(second, 3, 0.5);
  a.launcher().Complete(second, 0.75);
  a.reads().Drain();
  CHECK(cached->pending_finishes == 1);  // kept for a later tick
  CHECK(c.Trials("ends")[second.trial].state == TrialState::kRunning);
  a.Tick();  // still away: the beat does not reach it either
  CHECK(c.Trials("ends")[second.trial].state == TrialState::kRunning);
  a.reads_flaky().down = false;
  a.Tick();  // back: the beat, then the kept end
  const TrialRecord back = c.Trials("ends")[second.trial];
  CHECK(back.state == TrialState::kComplete);
  CHECK(back.value == std::optional<double>(0.75));
  CHECK(back.intermediate == std::map<int64_t, double>{{3, 0.5}});
  // The claim made in the freed slot while that connection was down held the node; the probe
  // finds storage back, and the last trial starts.
  CHECK(a.launcher().live_count() == 0);
  a.PassWait();
  a.Settle();
  CHECK(a.launcher().live_count() == 1);
  c.RunToEnd();
  CHECK(c.Trials("ends").size() == 3);
  CHECK(c.Study("ends").state == StudyState::kComplete);
}

TEST_CASE("a trial's start is stored off the loop, and a read on the loop never takes it back",
          "[scheduler][shared][reads]") {
  SchedulerCluster c({"alpha"});
  SchedulerHarness& a = c[0];
  // Its claim made off the loop, and back after the reads' thread is busy: the start waits there.
  REQUIRE(a.scheduler().Submit(SharedSweep("starts", 3, 1).Source(), {}).ok());
  CHECK(a.launcher().live_count() == 0);
  a.reads().Hold();
  a.Settle();
  REQUIRE(a.launcher().live_count() == 1);
  const int first = a.launcher().Live().front()->trial;
  TrialRecord stored = c.Trials("starts")[first];
  CHECK(stored.state == TrialState::kWaiting);  // claimed, not yet stored RUNNING
  CHECK(stored.node == "alpha");
  const StudyCache* cached = a.scheduler().active_study("starts");
  REQUIRE(cached != nullptr);
  CHECK(cached->trials[first].state == TrialState::kRunning);

  // An enqueue reads the study under the lock on the loop, where the first trial is still
  // WAITING and this node's: it stays running here, and is not claimed again.
  auto queued = a.scheduler().Enqueue("starts", {{"x", "0.125"}});
  REQUIRE(queued.ok());
  CHECK(cached->trials[first].state == TrialState::kRunning);
  CHECK(std::count(cached->waiting.begin(), cached->waiting.end(), first) == 0);
  // A second slot: its claim waits behind the start, and takes the enqueued trial.
  REQUIRE(a.scheduler().SetParallelism("starts", 2).ok());
  CHECK(a.reads().held() == 2);
  a.Settle();
  CHECK(a.launcher().live_count() == 1);
  a.reads().Release();  // the start stored, then the claim
  stored = c.Trials("starts")[first];
  CHECK(stored.state == TrialState::kRunning);
  CHECK(stored.process.pid == a.launcher().Live().front()->identity.pid);
  a.Settle();
  std::vector<Launched*> live = a.launcher().Live();
  REQUIRE(live.size() == 2);
  CHECK(live[1]->trial == queued->number);
  CHECK(cached->trials[first].state == TrialState::kRunning);
  c.RunToEnd();
  std::vector<TrialRecord> trials = c.Trials("starts");
  REQUIRE(trials.size() == 3);
  for (const TrialRecord& t : trials) CHECK(t.state == TrialState::kComplete);
  CHECK(a.launcher().launch_count() == 3);
  CHECK(c.Study("starts").state == StudyState::kComplete);
}

TEST_CASE("a claim is made off the loop: a node whose loop cannot reach the database goes on",
          "[scheduler][shared][reads][claims]") {
  SchedulerCluster c({"alpha"}, /*own_reads_connections=*/true);
  SchedulerHarness& a = c[0];
  REQUIRE(a.Submit(SharedSweep("claims", 3, 1)).ok());
  REQUIRE(a.launcher().live_count() == 1);
  Launched& first = *a.launcher().Live().front();
  // The loop's own connection down: the end, the next trial's claim (a new trial, created and
  // claimed in one transaction) and its start all go through the reads' connection.
  a.flaky().down = true;
  a.launcher().Complete(first, 1.5);
  a.Settle();
  REQUIRE(a.launcher().live_count() == 1);
  Launched& second = *a.launcher().Live().front();
  CHECK(second.trial == first.trial + 1);
  auto study = a.reads_flaky().GetStudy("claims");
  REQUIRE(study.ok());
  auto stored = a.reads_flaky().GetTrials(study->id);
  REQUIRE(stored.ok());
  REQUIRE(stored->size() == 2);
  CHECK((*stored)[first.trial].state == TrialState::kComplete);
  CHECK((*stored)[second.trial].state == TrialState::kRunning);
  CHECK((*stored)[second.trial].node == "alpha");
  CHECK((*stored)[second.trial].process.pid == second.identity.pid);
  CHECK_FALSE(a.scheduler().storage_outage().held());
  a.flaky().down = false;
  c.RunToEnd();
  CHECK(c.Trials("claims").size() == 3);
  CHECK(c.Study("claims").state == StudyState::kComplete);
}

TEST_CASE(
    "while storage is held its probe is made off the loop, and the node resumes when answered",
    "[scheduler][shared][reads][outage]") {
  SchedulerCluster c({"alpha"}, /*own_reads_connections=*/true);
  SchedulerHarness& a = c[0];
  REQUIRE(a.Submit(SharedSweep("probe", 3, 1)).ok());
  Launched& first = *a.launcher().Live().front();
  // The reads' connection (ends, claims, the protocol) refuses: the end is kept, the node held.
  a.reads_flaky().down = true;
  a.launcher().Complete(first, 0.5);
  a.Settle();
  REQUIRE(a.scheduler().storage_outage().held());
  CHECK(a.launcher().live_count() == 0);
  a.reads_flaky().down = false;
  // The probe, once due, waits on the reads' queue (held here), not on the loop.
  a.reads().Hold();
  a.clock().Advance(5);
  a.scheduler().Pump();
  CHECK(a.reads().held() == 1);
  CHECK(a.scheduler().storage_outage().held());
  a.reads().Release();
  a.Settle();
  CHECK_FALSE(a.scheduler().storage_outage().held());
  CHECK(a.HasEvent("probe", "trial_finished"));
  c.RunToEnd();
  CHECK(c.Trials("probe").size() == 3);
  CHECK(c.Study("probe").state == StudyState::kComplete);
  auto events = a.storage().GetEvents(std::nullopt);
  REQUIRE(events.ok());
  int resumed = 0;
  for (const model::EventRecord& e : *events) resumed += e.kind == "storage_resumed";
  CHECK(resumed == 1);
}

TEST_CASE("a study joined at a tick has its trials read off the loop with the tick's reads",
          "[scheduler][shared][reads]") {
  SchedulerCluster c({"alpha", "beta"}, /*own_reads_connections=*/true);
  REQUIRE(c[0].Submit(SharedSweep("join", 6, 1)).ok());
  c[0].launcher().Complete(*c[0].launcher().Live().front(), 0.5);
  c[0].Settle();
  REQUIRE(c.Trials("join").size() == 2);
  // beta's loop connection answers nothing: it joins with what its tick read off the loop.
  SchedulerHarness& b = c[1];
  b.flaky().down = true;
  b.Tick();
  b.Settle();
  const StudyCache* joined = b.scheduler().active_study("join");
  REQUIRE(joined != nullptr);
  CHECK(joined->trials.size() >= 2);
  CHECK(joined->trials[0].state == TrialState::kComplete);
  CHECK(b.launcher().live_count() == 1);
  b.flaky().down = false;
  c.RunToEnd();
  CHECK(c.Trials("join").size() == 6);
  CHECK(c.Study("join").state == StudyState::kComplete);
}

TEST_CASE(
    "a new study stored off the loop starts once it is added, and runs as joined when a tick "
    "found it first",
    "[scheduler][shared][reads]") {
  const bool tick_first = GENERATE(false, true);
  SchedulerCluster c({"alpha"});
  SchedulerHarness& a = c[0];
  // The servers' reads' connection (control/read_thread.h), where the control server stores it.
  std::unique_ptr<storage::Storage> elsewhere = c.Connect("alpha");
  const Sweep sweep = SharedSweep("stored", 4, 2);
  common::Result<config::SweepSpec> spec = a.scheduler().Admit(sweep.Source(), {});
  REQUIRE(spec.ok());
  REQUIRE(Scheduler::MakesNewStudy(sweep.Source(), *spec));
  // Neither the build nor the start touches the loop's connection.
  a.flaky().down = true;
  common::Result<PreparedStudy> prepared =
      a.scheduler().PrepareSubmitted(sweep.Source(), std::move(spec).value(), {});
  REQUIRE(prepared.ok());
  common::Result<model::StudyRecord> stored =
      StudyLoader::StoreSubmitted(*elsewhere, *prepared, 1.0, common::MakeNullLogger());
  REQUIRE(stored.ok());
  CHECK(a.launcher().live_count() == 0);
  a.flaky().down = false;
  if (tick_first) {
    a.Tick();
    a.Settle();
    REQUIRE(a.scheduler().active_study("stored") != nullptr);
    CHECK(a.launcher().live_count() == 2);
  }
  const model::StudyRecord added = a.scheduler().AddSubmitted(std::move(prepared).value(), *stored);
  CHECK(added.id == stored->id);
  a.Settle();  // the claims, off the loop
  CHECK(a.scheduler().active_study_count() == 1);
  CHECK(a.launcher().live_count() == 2);  // once: parallelism 2
  auto events = a.storage().GetEvents(stored->id);
  REQUIRE(events.ok());
  CHECK(std::count_if(events->begin(), events->end(), [](const model::EventRecord& e) {
          return e.kind == "study_submitted";
        }) == 1);
  c.RunToEnd();
  CHECK(c.Trials("stored").size() == 4);
  CHECK(c.Study("stored").state == StudyState::kComplete);

  // The same name again: refused with submit's own message, nothing stored.
  common::Result<config::SweepSpec> again = a.scheduler().Admit(sweep.Source(), {});
  REQUIRE(again.ok());
  common::Result<PreparedStudy> second =
      a.scheduler().PrepareSubmitted(sweep.Source(), std::move(again).value(), {});
  REQUIRE(second.ok());
  common::Result<model::StudyRecord> refused =
      StudyLoader::StoreSubmitted(*elsewhere, *second, 2.0, common::MakeNullLogger());
  REQUIRE(refused.status().code() == common::Code::kAlreadyExists);
  CHECK_THAT(refused.status().message(),
             Catch::Contains("[study] name = \"stored\": a study of that name already exists"));
  CHECK(c.Trials("stored").size() == 4);
}

TEST_CASE(
    "a delete stored off the loop: the study held here meanwhile, refused while another node "
    "runs a trial, then stored and followed",
    "[scheduler][shared][reads]") {
  SchedulerCluster c({"alpha", "beta"});
  SchedulerHarness& a = c[0];
  SchedulerHarness& b = c[1];
  // The servers' reads' connection (control/read_thread.h), where the control server stores it.
  std::unique_ptr<storage::Storage> elsewhere = c.Connect("alpha");
  REQUIRE(a.Submit(SharedSweep("gone", 6, 1)).ok());
  c.TickAll();
  REQUIRE(a.launcher().live_count() == 1);
  REQUIRE(b.launcher().live_count() == 1);

  common::Result<DeleteHold> hold = a.scheduler().HoldForDelete("gone");
  REQUIRE(hold.ok());
  CHECK(hold->study_id.has_value());
  CHECK(hold->running_here == 1);
  // Held: alpha's trial ends and nothing new starts there.
  a.launcher().Complete(*a.launcher().Live().front(), 0.5);
  a.Settle();
  CHECK(a.launcher().live_count() == 0);
  // Beta still runs one: refused under the lock, with the loop's message.
  common::Result<DeleteStored> refused = StoreDelete(*elsewhere, *hold, false, 5.0);
  REQUIRE(refused.status().code() == common::Code::kFailedPrecondition);
  CHECK_THAT(refused.status().message(),
             Catch::Contains("cannot delete study \"gone\": 1 of its trials is running"));
  a.scheduler().ReleaseDelete(*hold);
  a.Settle();
  CHECK(a.launcher().live_count() == 1);  // released: it goes on

  c.RunToEnd();
  REQUIRE(c.Study("gone").state == StudyState::kComplete);
  common::Result<DeleteHold> again = a.scheduler().HoldForDelete("gone");
  REQUIRE(again.ok());
  CHECK_FALSE(again->study_id.has_value());  // complete: not active here any more
  a.flaky().down = true;  // neither the hold nor the follow-up touches the loop's connection
  common::Result<DeleteStored> stored = StoreDelete(*elsewhere, *again, false, 6.0);
  REQUIRE(stored.ok());
  CHECK(stored->deleted_trials == 6);
  common::Result<int64_t> followed = a.scheduler().FollowDelete(*stored, false);
  a.flaky().down = false;
  REQUIRE(followed.ok());
  CHECK(*followed == 6);
  CHECK(a.storage().GetStudy("gone").status().code() == common::Code::kNotFound);
  // A study that is not there: the verbs' own answer.
  common::Result<DeleteStored> missing = StoreDelete(*elsewhere, *again, false, 7.0);
  CHECK(missing.status().code() == common::Code::kNotFound);
}

TEST_CASE(
    "an enqueue stored off the loop: decided again when another node enqueued meanwhile, and "
    "skipped when a trial has the values",
    "[scheduler][shared][reads]") {
  SchedulerCluster c({"alpha", "beta"}, /*own_reads_connections=*/true);
  SchedulerHarness& a = c[0];
  SchedulerHarness& b = c[1];
  REQUIRE(a.Submit(SharedSweep("enq", 8, 1)).ok());
  c.TickAll();
  a.Settle();
  b.Settle();
  struct Answer {
    common::Result<TrialRecord> trial = common::Unavailable("no answer");
    bool skipped = false;
    int answers = 0;
  };
  auto enqueue = [&](const std::string& x, bool skip) {
    auto answer = std::make_shared<Answer>();
    REQUIRE(a.scheduler().EnqueueOffLoop("enq", {{"x", x}}, skip,
                                         [answer](common::Result<TrialRecord> t, bool skipped) {
                                           answer->trial = std::move(t);
                                           answer->skipped = skipped;
                                           ++answer->answers;
                                         }));
    a.Settle();
    REQUIRE(answer->answers == 1);
    return answer;
  };
  a.Tick();  // alpha reads beta's trial
  a.Settle();
  const int known = static_cast<int>(a.scheduler().active_study("enq")->trials.size());
  REQUIRE(known == 2);
  // Stored off the loop: alpha's own connection answers nothing meanwhile.
  a.flaky().down = true;
  std::shared_ptr<Answer> first = enqueue("0.25", false);
  a.flaky().down = false;
  REQUIRE(first->trial.ok());
  CHECK_FALSE(first->skipped);
  CHECK(first->trial->number == known);
  CHECK(first->trial->state == TrialState::kWaiting);
  const StudyCache* cached = a.scheduler().active_study("enq");
  REQUIRE(cached->trials.size() == static_cast<size_t>(known + 1));
  CHECK(cached->trials[known].params.at("x").internal == 0.25);
  auto events = a.storage().GetEvents(cached->record.id);
  REQUIRE(events.ok());
  CHECK(std::count_if(events->begin(), events->end(), [&](const model::EventRecord& e) {
          return e.kind == "trial_enqueued" && e.trial_id == first->trial->id;
        }) == 1);

  // Beta enqueues one alpha has not read: alpha's pick is stale, decided again on the read.
  common::Result<TrialRecord> betas = b.scheduler().Enqueue("enq", {{"x", "0.5"}});
  REQUIRE(betas.ok());
  std::shared_ptr<Answer> second = enqueue("0.75", false);
  REQUIRE(second->trial.ok());
  CHECK(second->trial->number == betas->number + 1);
  // Beta's values again, skip_if_exists: its trial is answered, nothing stored.
  std::shared_ptr<Answer> skipped = enqueue("0.5", true);
  REQUIRE(skipped->trial.ok());
  CHECK(skipped->skipped);
  CHECK(skipped->trial->number == betas->number);
  CHECK(c.Trials("enq").size() == static_cast<size_t>(second->trial->number + 1));
  // A value outside the space: the verb's own error.
  std::shared_ptr<Answer> bad = enqueue("7", false);
  CHECK(bad->trial.status().code() == common::Code::kInvalidArgument);

  c.RunToEnd();
  CHECK(c.Study("enq").state == StudyState::kComplete);
  CHECK(c.Trials("enq").size() == 8);
}

TEST_CASE("a claim off the loop that finds other nodes' trials under the lock picks again",
          "[scheduler][shared][reads][claims]") {
  SchedulerCluster c({"alpha", "beta"});
  SchedulerHarness& a = c[0];
  REQUIRE(a.Submit(SharedSweep("again", 4, 1)).ok());
  c[1].Tick();
  REQUIRE(a.launcher().live_count() == 1);
  REQUIRE(c[1].launcher().live_count() == 1);
  Launched& mine = *a.launcher().Live().front();
  const StudyCache* cached = a.scheduler().active_study("again");
  REQUIRE(cached != nullptr);
  // alpha has not read beta's trial yet: its next trial is drawn as number 1.
  REQUIRE(cached->trials.size() == 1);
  a.reads().Hold();
  a.launcher().Complete(mine, 0.5);
  CHECK(a.reads().held() == 2);  // the end, then the claim
  a.reads().Release();
  // Under the lock the claim found two trials, not one: nothing created, picked again on the
  // loop with what it read, and claimed as number 2.
  CHECK(c.Trials("again").size() == 2);
  a.Settle();
  REQUIRE(a.launcher().live_count() == 1);
  CHECK(a.launcher().Live().front()->trial == 2);
  std::vector<TrialRecord> trials = c.Trials("again");
  REQUIRE(trials.size() == 3);
  CHECK(trials[2].node == "alpha");
  CHECK(trials[1].node == "beta");
  std::map<std::string, int> ran = c.RunToEnd();
  trials = c.Trials("again");
  REQUIRE(trials.size() == 4);
  std::map<int, int> launched;
  for (size_t i = 0; i < c.size(); ++i) {
    for (size_t k = 0; k < c[i].launcher().launch_count(); ++k) {
      ++launched[c[i].launcher().launch(k).trial];
    }
  }
  for (const TrialRecord& t : trials) {
    CHECK(t.state == TrialState::kComplete);
    CHECK(launched[t.number] == 1);
  }
  CHECK(ran["alpha"] + ran["beta"] == 4);
  CHECK(c.Study("again").state == StudyState::kComplete);
}

TEST_CASE("a claim off the loop for a study paused through another node meanwhile starts nothing",
          "[scheduler][shared][reads][claims]") {
  SchedulerCluster c({"alpha", "beta"});
  SchedulerHarness& a = c[0];
  REQUIRE(a.Submit(SharedSweep("paused", 3, 1)).ok());
  c[1].Tick();
  REQUIRE(c[1].launcher().live_count() == 1);
  Launched& mine = *a.launcher().Live().front();
  a.reads().Hold();
  a.launcher().Complete(mine, 0.5);
  REQUIRE(c[1].scheduler().Pause("paused", true).ok());
  a.reads().Release();
  a.Settle();
  CHECK(a.launcher().live_count() == 0);
  CHECK(a.launcher().launch_count() == 1);
  CHECK(c.Trials("paused").size() == 2);  // nothing created by the claim
  const StudyCache* cached = a.scheduler().active_study("paused");
  REQUIRE(cached != nullptr);
  CHECK(cached->record.paused);  // adopted from what the claim read
  REQUIRE(c[1].scheduler().Pause("paused", false).ok());
  a.Tick();
  CHECK(a.launcher().live_count() == 1);
  c.RunToEnd();
  CHECK(c.Trials("paused").size() == 3);
  CHECK(c.Study("paused").state == StudyState::kComplete);
}

TEST_CASE("a shutdown waits for a claim off the loop, and the trial claimed then is given back",
          "[scheduler][shared][reads][claims][shutdown]") {
  SchedulerCluster c({"alpha"});
  SchedulerHarness& a = c[0];
  REQUIRE(a.Submit(SharedSweep("late_claim", 3, 1)).ok());
  Launched& first = *a.launcher().Live().front();
  a.reads().Hold();
  a.launcher().Complete(first, 0.5);  // its end, and the next trial's claim, wait
  int idle = 0;
  a.scheduler().BeginShutdown([&idle] { ++idle; });
  a.reads().Release();
  CHECK(idle == 0);
  a.Settle();
  CHECK(idle == 1);
  CHECK(a.launcher().launch_count() == 1);
  std::vector<TrialRecord> trials = c.Trials("late_claim");
  REQUIRE(trials.size() == 2);
  CHECK(trials[0].state == TrialState::kComplete);
  CHECK(trials[1].state == TrialState::kWaiting);
  CHECK(trials[1].node.empty());  // given back: any node may start it
}

TEST_CASE("a trial claimed off the loop and cancelled before the claim is back never starts",
          "[scheduler][shared][reads][claims]") {
  SchedulerCluster c({"alpha"});
  SchedulerHarness& a = c[0];
  REQUIRE(a.Submit(SharedSweep("cancelled", 3, 1)).ok());
  Launched& first = *a.launcher().Live().front();
  a.reads().Hold();
  a.launcher().Complete(first, 0.5);
  a.reads().Release();  // the end and the claim stored; their completions not run yet
  std::vector<TrialRecord> trials = c.Trials("cancelled");
  REQUIRE(trials.size() == 2);
  CHECK(trials[1].node == "alpha");
  REQUIRE(a.scheduler().Cancel("cancelled").ok());  // ends the claimed trial, WAITING
  a.Settle();
  CHECK(a.launcher().launch_count() == 1);
  trials = c.Trials("cancelled");
  REQUIRE(trials.size() == 2);
  CHECK(trials[0].state == TrialState::kComplete);
  CHECK(trials[1].state == TrialState::kFail);
  CHECK(c.Study("cancelled").state == StudyState::kCancelled);
}

TEST_CASE("a trial claimed off the loop for a study paused before the claim is back is given back",
          "[scheduler][shared][reads][claims]") {
  SchedulerCluster c({"alpha", "beta"});
  SchedulerHarness& a = c[0];
  REQUIRE(a.Submit(SharedSweep("given_back", 3, 1)).ok());
  c[1].Tick();
  a.Tick();  // alpha reads beta's trial: its next draw is numbered 2
  Launched& first = *a.launcher().Live().front();
  a.reads().Hold();
  a.launcher().Complete(first, 0.5);
  a.reads().Release();  // the end stored, and a new trial created and claimed by alpha
  std::vector<TrialRecord> trials = c.Trials("given_back");
  REQUIRE(trials.size() == 3);
  CHECK(trials[2].node == "alpha");
  REQUIRE(a.scheduler().Pause("given_back", true).ok());
  a.Settle();
  CHECK(a.launcher().launch_count() == 1);
  trials = c.Trials("given_back");
  CHECK(trials[2].state == TrialState::kWaiting);
  CHECK(trials[2].node.empty());
  // Resumed through beta, whose slot is free: beta starts it.
  c[1].launcher().Complete(*c[1].launcher().Live().front(), 0.25);
  REQUIRE(c[1].scheduler().Pause("given_back", false).ok());
  c[1].Settle();
  REQUIRE(c[1].launcher().live_count() == 1);
  CHECK(c[1].launcher().Live().front()->trial == 2);
  c.RunToEnd();
  trials = c.Trials("given_back");
  REQUIRE(trials.size() == 3);
  for (const TrialRecord& t : trials) CHECK(t.state == TrialState::kComplete);
  CHECK(c.Study("given_back").state == StudyState::kComplete);
}

TEST_CASE("a study's end is decided again under its lock: more trials asked elsewhere keep it on",
          "[scheduler][shared][reads][claims]") {
  SchedulerCluster c({"alpha"});
  SchedulerHarness& a = c[0];
  REQUIRE(a.Submit(SharedSweep("extended", 2, 2)).ok());
  std::vector<Launched*> live = a.launcher().Live();
  REQUIRE(live.size() == 2);
  a.launcher().Complete(*live[0], 0.5);
  a.Settle();
  a.reads().Hold();
  a.launcher().Complete(*live[1], 0.25);
  a.reads().Release();  // the last end stored; its completion not run yet
  // Another node extends the study meanwhile (its verb's write, as stored).
  const StudyRecord before = c.Study("extended");
  REQUIRE(a.storage().SetStudyControl(before.id, false, 3, 0).ok());
  // The end's completion finds every trial it knows finished, with n_trials 2: the study's end
  // is stored only under the lock, where n_trials is 3, so it goes on.
  a.Settle();
  CHECK(c.Study("extended").state == StudyState::kRunning);
  CHECK_FALSE(a.HasEvent("extended", "study_complete"));
  REQUIRE(a.launcher().live_count() == 1);
  CHECK(a.launcher().Live().front()->trial == 2);
  c.RunToEnd();
  CHECK(c.Trials("extended").size() == 3);
  CHECK(c.Study("extended").state == StudyState::kComplete);
  std::vector<std::string> kinds = a.EventKinds("extended");
  CHECK(std::count(kinds.begin(), kinds.end(), "study_complete") == 1);
}

TEST_CASE("a trial a fork server is still starting is not claimed again by the next claim",
          "[scheduler][shared][reads][claims]") {
  SchedulerCluster c({"alpha"});
  SchedulerHarness& a = c[0];
  a.launcher().async_start = true;  // as a fork server's: started later
  REQUIRE(a.Submit(SharedSweep("forked", 4, 3)).ok());
  // Each claim's read has the trials launched before WAITING and this node's, as the cache has
  // them until their start: none is picked again.
  REQUIRE(a.launcher().launch_count() == 3);
  std::set<int> numbers;
  for (size_t k = 0; k < 3; ++k) numbers.insert(a.launcher().launch(k).trial);
  CHECK(numbers == std::set<int>{0, 1, 2});
  a.Tick();
  CHECK(a.launcher().launch_count() == 3);
  a.launcher().async_start = false;
  for (Launched* l : a.launcher().Live()) a.launcher().Start(*l);
  c.RunToEnd();
  std::vector<TrialRecord> trials = c.Trials("forked");
  REQUIRE(trials.size() == 4);
  for (const TrialRecord& t : trials) CHECK(t.state == TrialState::kComplete);
  CHECK(a.launcher().launch_count() == 4);
}

TEST_CASE("an end stored off the loop for a trial another node ended meanwhile is dropped",
          "[scheduler][shared][reads]") {
  SchedulerCluster c({"alpha", "beta"});
  SchedulerHarness& a = c[0];
  REQUIRE(a.Submit(SharedSweep("late", 1, 1)).ok());
  Launched& mine = *a.launcher().Live().front();
  // alpha's end waits off its loop (its database frozen), long enough for beta to count alpha
  // dead and end the trial as lost.
  a.reads().Hold();
  a.launcher().Complete(mine, 2.5);
  c.clock().Advance(kNodeTimeout + 1);
  c[1].Tick();
  TrialRecord stored = c.Trials("late")[mine.trial];
  REQUIRE(stored.state == TrialState::kFail);
  REQUIRE(stored.fail.reason == "lost");
  // alpha's database answers: the end finds the trial ended under the lock and stores nothing.
  a.reads().Release();
  a.reads().Drain();
  stored = c.Trials("late")[mine.trial];
  CHECK(stored.state == TrialState::kFail);
  CHECK(stored.fail.reason == "lost");
  CHECK_FALSE(stored.value.has_value());
  auto events = a.storage().GetEvents(c.Study("late").id);
  REQUIRE(events.ok());
  std::vector<std::string> finished;  // beta's end only: alpha's outcome was dropped
  for (const model::EventRecord& e : *events) {
    if (e.kind == "trial_finished") finished.push_back(e.detail);
  }
  REQUIRE(finished.size() == 1);
  CHECK(finished[0].rfind("FAIL(lost)", 0) == 0);
  const StudyCache* cached = a.scheduler().active_study("late");
  if (cached != nullptr) {  // the study may have left alpha's memory (it ended)
    CHECK(cached->pending_finishes == 0);
    CHECK(cached->trials[mine.trial].state == TrialState::kFail);
  }
  CHECK(c.Study("late").state == StudyState::kComplete);
}

TEST_CASE("a shutdown waits for the trial ends still being stored off the loop",
          "[scheduler][shared][reads][shutdown]") {
  SchedulerCluster c({"alpha"});
  SchedulerHarness& a = c[0];
  REQUIRE(a.Submit(SharedSweep("stop", 4, 2)).ok());
  std::vector<Launched*> live = a.launcher().Live();
  REQUIRE(live.size() == 2);
  a.reads().Hold();
  int idle = 0;
  a.scheduler().BeginShutdown([&idle] { ++idle; });
  a.launcher().Complete(*live[0], 1.0);
  a.launcher().ExitSignal(*live[1], SIGTERM);
  CHECK(a.launcher().live_count() == 0);
  CHECK(a.reads().held() == 2);
  CHECK(idle == 0);  // its trials are over, their ends are not stored yet
  a.reads().Release();
  CHECK(idle == 0);  // stored; mirrored when the completions run on the loop
  a.reads().Drain();
  CHECK(idle == 1);
  std::vector<TrialRecord> trials = c.Trials("stop");
  CHECK(trials[live[0]->trial].state == TrialState::kComplete);
  CHECK(trials[live[1]->trial].state == TrialState::kFail);
}

TEST_CASE("a node cut off from the database kills its own trials before others count it dead",
          "[scheduler][shared][fencing]") {
  SchedulerCluster c({"alpha", "beta"});
  REQUIRE(c[0].Submit(SharedSweep("fence", 6, 2, "retries = 1\nretry_on = [\"lost\"]\n")).ok());
  c.TickAll();
  std::vector<Launched*> alpha = c[0].launcher().Live();
  REQUIRE(alpha.size() == 2);
  c[0].flaky().down = true;  // alpha's link to the database is cut
  // Within its lease nothing happens; once no beat has reached the database for the fencing
  // time (the lease, kLeaseFraction of the node timeout, in this harness), it kills its trials.
  c.clock().Advance(kLeaseFraction * kNodeTimeout - 1);
  c[0].Tick();
  for (Launched* l : alpha) CHECK_FALSE(l->destroyed);
  c.clock().Advance(2);
  c[0].Tick();
  for (Launched* l : alpha) CHECK(l->destroyed);  // killed at once, before the node timeout
  CHECK(c[0].scheduler().running_count() == 0);
  CHECK(c[0].launcher().live_count() == 0);
  // beta counts alpha dead only later, and ends the trials FAIL(lost) itself.
  c.clock().Advance(kNodeTimeout);
  c[1].Tick();
  for (Launched* l : alpha) {
    const TrialRecord t = c[1].Trials("fence")[l->trial];  // alpha's storage is still cut off
    CHECK(t.state == TrialState::kFail);
    CHECK(t.fail.reason == "lost");
  }
  // alpha's link heals: its kept ends are dropped (beta ended the trials first), nothing twice.
  c[0].flaky().down = false;
  c.RunToEnd();
  CHECK(c.Study("fence").state == StudyState::kComplete);
  std::map<int, int> runs;
  for (size_t i = 0; i < c.size(); ++i) {
    for (size_t k = 0; k < c[i].launcher().launch_count(); ++k) {
      ++runs[c[i].launcher().launch(k).trial];
    }
  }
  for (const auto& [number, n] : runs) {
    INFO("trial " << number);
    CHECK(n == 1);  // every number ran once; the lost ones were retried under new numbers
  }
  int complete = 0;
  for (const TrialRecord& t : c.Trials("fence")) complete += t.state == TrialState::kComplete;
  CHECK(complete == 6);
}

TEST_CASE("a fenced node whose link heals before others count it dead ends its trials itself",
          "[scheduler][shared][fencing]") {
  SchedulerCluster c({"alpha"});
  REQUIRE(c[0].Submit(SharedSweep("heal", 3, 1, "retries = 1\nretry_on = [\"lost\"]\n")).ok());
  Launched& first = *c[0].launcher().Live().front();
  c[0].flaky().down = true;
  c.clock().Advance(kLeaseFraction * kNodeTimeout + 1);
  c[0].Tick();
  CHECK(first.destroyed);
  c[0].flaky().down = false;
  c[0].Tick();  // the kept end is stored: FAIL(lost), retried per policy
  const TrialRecord t = c.Trials("heal")[first.trial];
  CHECK(t.state == TrialState::kFail);
  CHECK(t.fail.reason == "lost");
  CHECK_THAT(t.fail.detail, Catch::Contains("this node killed the trial: no heartbeat of it "
                                            "reached the database"));
  c.RunToEnd();
  CHECK(c.Study("heal").state == StudyState::kComplete);
}

TEST_CASE("a write the database refuses, its trial taken over, stops the trial at once",
          "[scheduler][shared][fencing]") {
  SchedulerCluster c({"alpha", "beta"});
  REQUIRE(c[0].Submit(SharedSweep("late", 4, 1, "retries = 1\nretry_on = [\"lost\"]\n")).ok());
  c.TickAll();
  Launched& on_alpha = *c[0].launcher().Live().front();
  // alpha's event loop does not run (a frozen daemon: no tick, no fencing) while beta counts it
  // dead and ends its trial.
  c.clock().Advance(kNodeTimeout + 1);
  c[1].Tick();
  REQUIRE(c.Trials("late")[on_alpha.trial].state == TrialState::kFail);
  // Thawed, alpha's first event is an attribute of that trial: the database refuses it (the
  // trial is no longer open), and alpha stops the trial there, before any tick. (A report
  // would stop it too: it reads the other nodes' values for the pruner first.)
  c[0].launcher().Attr(on_alpha, "epoch", "3");
  REQUIRE(on_alpha.stops.size() == 1);
  CHECK(on_alpha.stops.front() == launcher::StopReason::kCancel);
  CHECK(c.Trials("late")[on_alpha.trial].attrs.empty());
  c[0].launcher().Complete(on_alpha, 0.25);  // its last words are dropped too
  const TrialRecord t = c.Trials("late")[on_alpha.trial];
  CHECK(t.state == TrialState::kFail);
  CHECK_THAT(t.fail.detail, Catch::Contains("node alpha stopped sending heartbeats"));
  c.RunToEnd();
  CHECK(c.Study("late").state == StudyState::kComplete);
}

TEST_CASE("after the database was away from every node, the first back counts no one dead yet",
          "[scheduler][shared][fencing]") {
  SchedulerCluster c({"alpha", "beta"});
  REQUIRE(c[0].Submit(SharedSweep("outage", 8, 1, "retries = 1\nretry_on = [\"lost\"]\n")).ok());
  c.TickAll();
  Launched& on_beta = *c[1].launcher().Live().front();
  c[0].flaky().down = true;
  c[1].flaky().down = true;
  c.clock().Advance(kNodeTimeout + 1);  // both silent past the node timeout: both fence
  c.TickAll();
  CHECK(on_beta.destroyed);
  // The database is back; alpha beats first. beta looks dead by its last beat, but alpha does
  // not end its trials: beta records its own end once it beats again.
  c[0].flaky().down = false;
  c[1].flaky().down = false;
  c[0].Tick();
  CHECK(c.Trials("outage")[on_beta.trial].state == TrialState::kRunning);
  c[1].Tick();
  TrialRecord t = c.Trials("outage")[on_beta.trial];
  CHECK(t.state == TrialState::kFail);
  CHECK_THAT(t.fail.detail, Catch::Contains("this node killed the trial"));

  // A node that stays silent is still counted dead, one node timeout after alpha's return.
  c.TickAll();
  Launched& again = *c[1].launcher().Live().front();
  c[1].flaky().down = true;
  c[0].flaky().down = true;
  c.clock().Advance(kNodeTimeout + 1);
  c.TickAll();
  c[0].flaky().down = false;
  c[0].Tick();
  CHECK(c.Trials("outage")[again.trial].state == TrialState::kRunning);
  c.clock().Advance(kNodeTimeout + 1);
  c[0].Tick();
  t = c.Trials("outage")[again.trial];
  CHECK(t.state == TrialState::kFail);
  CHECK_THAT(t.fail.detail, Catch::Contains("node beta stopped sending heartbeats"));
}

TEST_CASE("a study a node failed to load is tried again later, not left for ever",
          "[scheduler][shared]") {
  SchedulerCluster c({"alpha", "beta"});
  c[1].flaky().get_trials_down = true;  // beta cannot load the study for now
  REQUIRE(c[0].Submit(SharedSweep("later", 40, 40)).ok());
  c.TickAll();
  CHECK(c[1].launcher().launch_count() == 0);
  c[1].flaky().get_trials_down = false;
  c.TickAll();  // the retry is not due yet
  CHECK(c[1].launcher().launch_count() == 0);
  c.clock().Advance(kLoadRetryFirstSeconds + 1);
  c.TickAll();  // due: beta loads it and takes part
  CHECK(c[1].launcher().launch_count() > 0);
  std::map<std::string, int> ran = c.RunToEnd();
  CHECK(ran["alpha"] + ran["beta"] == 40);
  CHECK(c.Study("later").state == StudyState::kComplete);
}

TEST_CASE("a restarted node asks to kill only its own trials' processes", "[scheduler][shared]") {
  SchedulerCluster c({"alpha", "beta"});
  c[1].launcher().first_pid = FakeLauncher::kFirstFakePid + 1000;
  REQUIRE(c[0].Submit(SharedSweep("mine", 8, 2)).ok());
  c.TickAll();
  REQUIRE(c[0].launcher().live_count() == 2);
  REQUIRE(c[1].launcher().live_count() == 2);
  std::set<pid_t> alpha_pids;
  for (Launched* l : c[0].launcher().Live()) alpha_pids.insert(l->identity.pid);

  // alpha's daemon restarts (same instance) while its trials and beta's run.
  REQUIRE(c.AddNode("alpha", "alpha-host:/srv/triald").ok());
  REQUIRE(c[2].leftovers().requests.size() == 1);
  std::set<pid_t> asked;
  for (const model::ProcessIdentity& id : c[2].leftovers().requests[0].lost) asked.insert(id.pid);
  CHECK(asked == alpha_pids);
  CHECK(c[2].leftovers().requests[0].lost.size() == 2);
}

TEST_CASE("a node name in use by a live daemon elsewhere is refused, a silent one is taken over",
          "[scheduler][shared]") {
  SchedulerCluster c({"alpha"});
  common::Status twin = c.AddNode("alpha", "other-host:/var/lib/triald");
  CHECK(twin.code() == common::Code::kFailedPrecondition);
  CHECK_THAT(twin.message(), Catch::Contains("node name \"alpha\" is in use by another triald "
                                             "(alpha-host:/srv/triald, last heartbeat 0 s ago)"));
  // The same daemon restarted (same instance) is not a twin.
  CHECK(c.AddNode("alpha", "alpha-host:/srv/triald").ok());
  c.clock().Advance(kNodeTimeout + 1);
  CHECK(c.AddNode("alpha", "other-host:/var/lib/triald").ok());
}

}  // namespace
}  // namespace triald::daemon
