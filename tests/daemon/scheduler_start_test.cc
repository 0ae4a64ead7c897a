// Trials that cannot be started (the launcher failing, back-off, a held study), asynchronous
// starts (a fork server's) and the study's fork server.
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
// Trials that cannot be started

TEST_CASE("a trial that cannot be started stays WAITING and the study backs off",
          "[scheduler][spawn]") {
  SchedulerHarness h;
  FakeLauncher& l = h.launcher();
  Sweep sweep;
  sweep.name = "spawny";
  sweep.n_trials = 3;
  sweep.parallelism = 2;
  l.FailAllLaunches("fork: Resource temporarily unavailable", {launcher::SpawnStep::kFork, EAGAIN});
  h.SubmitOk(sweep);

  // One attempt, then the study waits 0.1 s: trial 0 is WAITING, no other trial was drawn.
  REQUIRE(l.failed().size() == 1);
  CHECK(l.launch_count() == 0);
  std::vector<TrialRecord> trials = h.Trials("spawny");
  REQUIRE(trials.size() == 1);
  CHECK(trials[0].state == TrialState::kWaiting);
  REQUIRE_FALSE(h.wakes().empty());
  CHECK(h.wakes().back() == Approx(0.1));
  CHECK(h.scheduler().queued_count() == 1);

  // Pumped too early: nothing is tried.
  h.clock().Advance(0.05);
  h.scheduler().Pump();
  CHECK(l.failed().size() == 1);

  // Each failure doubles the wait, and each one is an event; the study never completes.
  std::vector<double> waits;
  for (int i = 0; i < 12; ++i) {
    h.PassWait();
    waits.push_back(h.wakes().back());
  }
  CHECK(l.failed().size() == 13);
  CHECK(waits[0] == Approx(0.2));
  CHECK(waits[1] == Approx(0.4));
  CHECK(waits[2] == Approx(0.8));
  CHECK(waits.back() == Approx(SpawnBackoff::kMaxDelay));  // 0.1 * 2^12 is past the cap
  CHECK(h.Trials("spawny").size() == 1);
  CHECK(h.Study("spawny").state == StudyState::kRunning);
  auto events = h.Events("spawny");
  CHECK(CountEvents(events, "spawn_failed") == 13);
  CHECK(CountEvents(events, "study_held") == 0);  // EAGAIN is transient: never held
  std::optional<SpawnBackoff::Snapshot> st = h.scheduler().spawn_status(h.Study("spawny").id);
  REQUIRE(st.has_value());
  CHECK_FALSE(st->held);
  CHECK(st->failures == 13);
  CHECK(st->cause == SpawnCause::kTransient);
  CHECK_THAT(st->reason, Catch::Contains("Resource temporarily unavailable"));

  // The cause goes away: the same trial starts, then the others, and the study completes with
  // n_trials COMPLETE trials and no failure.
  l.StopFailing();
  h.PassWait();
  REQUIRE(l.launch_count() == 2);
  CHECK(l.launch(0).trial == 0);
  CHECK(l.launch(1).trial == 1);
  CHECK_FALSE(h.scheduler().spawn_status(h.Study("spawny").id).has_value());
  CHECK(CountEvents(h.Events("spawny"), "spawn_recovered") == 1);
  CompleteAll(h, "spawny", 2);
  trials = h.Trials("spawny");
  REQUIRE(trials.size() == 3);
  for (const TrialRecord& t : trials) CHECK(t.state == TrialState::kComplete);
  CHECK(h.Study("spawny").state == StudyState::kComplete);
}

TEST_CASE("a missing command holds the study after three failures and it resumes by itself",
          "[scheduler][spawn]") {
  SchedulerHarness h;
  FakeLauncher& l = h.launcher();
  Sweep sweep;
  sweep.name = "deploying";
  sweep.n_trials = 2;
  l.FailAllLaunches("exec /opt/train: No such file or directory",
                    {launcher::SpawnStep::kExec, ENOENT});
  h.SubmitOk(sweep);
  const int64_t id = h.Study("deploying").id;
  for (int i = 0; i < 2; ++i) {
    h.PassWait();
  }
  REQUIRE(l.failed().size() == 3);
  std::optional<SpawnBackoff::Snapshot> st = h.scheduler().spawn_status(id);
  REQUIRE(st.has_value());
  CHECK(st->held);
  CHECK(st->cause == SpawnCause::kPersistent);
  CHECK_THAT(st->reason, Catch::Contains("exec /opt/train: No such file or directory"));
  auto events = h.Events("deploying");
  REQUIRE(CountEvents(events, "study_held") == 1);
  for (const auto& [kind, detail] : events) {
    if (kind == "study_held") CHECK_THAT(detail, Catch::Contains("No such file or directory"));
  }
  // Held, it is still retried (one event of holding, not one per attempt), and n_trials is
  // untouched: one WAITING trial, the study RUNNING.
  for (int i = 0; i < 5; ++i) {
    h.PassWait();
  }
  CHECK(l.failed().size() == 8);
  CHECK(CountEvents(h.Events("deploying"), "study_held") == 1);
  std::vector<TrialRecord> trials = h.Trials("deploying");
  REQUIRE(trials.size() == 1);
  CHECK(trials[0].state == TrialState::kWaiting);
  CHECK(h.Study("deploying").state == StudyState::kRunning);

  l.StopFailing();
  h.PassWait();
  CHECK_FALSE(h.scheduler().spawn_status(id).has_value());
  CompleteAll(h, "deploying", 1);
  trials = h.Trials("deploying");
  REQUIRE(trials.size() == 2);
  for (const TrialRecord& t : trials) CHECK(t.state == TrialState::kComplete);
  CHECK(h.Study("deploying").state == StudyState::kComplete);
}

TEST_CASE("an enqueued trial that cannot be started keeps its parameters and its place",
          "[scheduler][spawn]") {
  SchedulerHarness h;
  FakeLauncher& l = h.launcher();
  Sweep sweep;
  sweep.name = "queued";
  sweep.n_trials = 2;
  // The first trial runs, so the enqueued one waits behind it.
  h.SubmitOk(sweep);
  REQUIRE(l.launch_count() == 1);
  common::Result<TrialRecord> q =
      h.scheduler().Enqueue("queued", {{"lr", "0.01"}, {"layers", "3"}, {"opt", "sgd"}});
  REQUIRE(q.ok());
  l.FailNextLaunch("fork: Cannot allocate memory", {launcher::SpawnStep::kFork, ENOMEM});
  l.Complete(l.launch(0), 1.0);
  REQUIRE(l.failed().size() == 1);
  CHECK(l.launch_count() == 1);
  h.PassWait();
  REQUIRE(l.launch_count() == 2);
  CHECK(l.launch(1).trial == q->number);
  CHECK(l.launch(1).env()["TRIALD_PARAMS"].find("\"sgd\"") != std::string::npos);
  l.Complete(l.launch(1), 2.0);
  std::vector<TrialRecord> trials = h.Trials("queued");
  REQUIRE(trials.size() == 2);
  CHECK(trials[1].state == TrialState::kComplete);
  CHECK(trials[1].params.at("opt").internal == 1);  // "sgd"
  CHECK(h.Study("queued").state == StudyState::kComplete);
}

TEST_CASE("a study whose launches fail while another's succeed does not hold the other back",
          "[scheduler][spawn]") {
  SchedulerHarness h;
  FakeLauncher& l = h.launcher();
  Sweep broken, fine;
  broken.name = "broken";
  broken.n_trials = 3;
  broken.command = R"(["/bin/false"])";
  fine.name = "fine";
  fine.n_trials = 3;
  l.FailAllLaunches("exec /bin/false: Permission denied", {launcher::SpawnStep::kExec, EACCES});
  h.SubmitOk(broken);
  l.StopFailing();
  h.SubmitOk(fine);
  // The clock stands still: "broken" stays in its back-off while "fine" runs to its end.
  for (int guard = 0; !l.Live("fine").empty(); ++guard) {
    REQUIRE(guard < 10);
    l.Complete(*l.Live("fine").front(), 1.0);
  }
  CHECK(h.Study("fine").state == StudyState::kComplete);
  CHECK(h.Study("broken").state == StudyState::kRunning);
  CHECK(h.Trials("broken").size() == 1);
  CHECK(h.Trials("broken")[0].state == TrialState::kWaiting);
}

TEST_CASE("cancelling a study that backs off ends its waiting trial as cancelled",
          "[scheduler][spawn]") {
  SchedulerHarness h;
  FakeLauncher& l = h.launcher();
  Sweep sweep;
  sweep.name = "giveup";
  sweep.n_trials = 4;
  l.FailAllLaunches();
  h.SubmitOk(sweep);
  REQUIRE(h.scheduler().Cancel("giveup").ok());
  std::vector<TrialRecord> trials = h.Trials("giveup");
  REQUIRE(trials.size() == 1);
  CHECK(trials[0].fail.reason == "cancelled");
  CHECK(h.Study("giveup").state == StudyState::kCancelled);
  CHECK(h.scheduler().active_study_count() == 0);
}

// ---------------------------------------------------------------------------------------------
// Asynchronous starts (a fork server's) and the study's fork server

TEST_CASE("a forked start holds its slot and is RUNNING only once the launcher says it started",
          "[scheduler][fork_server]") {
  SchedulerHarness h;
  FakeLauncher& l = h.launcher();
  l.async_start = true;
  Sweep sweep;
  sweep.name = "async";
  sweep.n_trials = 3;
  sweep.parallelism = 2;
  h.SubmitOk(sweep);
  REQUIRE(l.launch_count() == 2);
  CHECK(h.scheduler().running_count() == 2);
  for (const TrialRecord& t : h.Trials("async")) {
    INFO(Describe(t));
    CHECK(t.state == TrialState::kWaiting);  // not recorded RUNNING before it runs
    CHECK(t.process.pid == 0);
  }
  h.scheduler().Pump();
  CHECK(l.launch_count() == 2);  // the slots are held while they start

  h.clock().SetWall(2000);
  l.Start(l.launch(1));
  std::vector<TrialRecord> trials = h.Trials("async");
  CHECK(trials[0].state == TrialState::kWaiting);
  CHECK(trials[1].state == TrialState::kRunning);
  CHECK(trials[1].process.pid == l.launch(1).identity.pid);
  CHECK(trials[1].process.start_time == l.launch(1).identity.start_time);
  CHECK(trials[1].started_at == 2000);

  l.Start(l.launch(0));
  l.Complete(l.launch(0), 0.5);
  REQUIRE(l.launch_count() == 3);
  l.Start(l.launch(2));
  l.Complete(l.launch(1), 0.25);
  l.Complete(l.launch(2), 0.75);
  CHECK(h.Study("async").state == StudyState::kComplete);
  for (const TrialRecord& t : h.Trials("async")) CHECK(t.state == TrialState::kComplete);
}

TEST_CASE("a start that fails after Launch() waits again with back-off and never FAILs",
          "[scheduler][fork_server]") {
  SchedulerHarness h;
  FakeLauncher& l = h.launcher();
  l.async_start = true;
  Sweep sweep;
  sweep.name = "refork";
  sweep.n_trials = 2;
  sweep.parallelism = 1;
  h.SubmitOk(sweep);
  REQUIRE(l.launch_count() == 1);
  l.NeverStarted(l.launch(0), "the fork server exited (killed by SIGKILL)");
  CHECK(h.scheduler().running_count() == 0);
  std::vector<TrialRecord> trials = h.Trials("refork");
  REQUIRE(trials.size() == 1);
  CHECK(trials[0].state == TrialState::kWaiting);
  std::optional<SpawnBackoff::Snapshot> spawn = h.scheduler().spawn_status(h.Study("refork").id);
  REQUIRE(spawn.has_value());
  CHECK(spawn->failures == 1);
  CHECK_FALSE(spawn->held);
  CHECK(spawn->reason == "the fork server exited (killed by SIGKILL)");
  bool event = false;
  for (const auto& [kind, detail] : h.Events("refork")) {
    event = event || (kind == "spawn_failed" &&
                      detail.find("trial 0 could not start (transient, 1 in a row): the fork "
                                  "server exited") != std::string::npos);
  }
  CHECK(event);
  CHECK(l.launch_count() == 1);  // backing off

  h.clock().Advance(SpawnBackoff::kInitialDelay);
  h.scheduler().Pump();
  REQUIRE(l.launch_count() == 2);
  CHECK(l.launch(1).trial == 0);  // the same trial, first in line
  l.Start(l.launch(1));
  CHECK(h.Trials("refork")[0].state == TrialState::kRunning);
  CHECK_FALSE(h.scheduler().spawn_status(h.Study("refork").id).has_value());
  l.Complete(l.launch(1), 1.0);
  REQUIRE(l.launch_count() == 3);
  l.Start(l.launch(2));
  l.Complete(l.launch(2), 2.0);
  CHECK(h.Study("refork").state == StudyState::kComplete);
  trials = h.Trials("refork");
  REQUIRE(trials.size() == 2);
  for (const TrialRecord& t : trials) CHECK(t.state == TrialState::kComplete);
}

TEST_CASE("a start called off: by a cancel it ends CANCELLED, by a shutdown it stays WAITING",
          "[scheduler][fork_server]") {
  SchedulerHarness h;
  FakeLauncher& l = h.launcher();
  l.async_start = true;
  Sweep a;
  a.name = "cancelled";
  a.n_trials = 2;
  a.parallelism = 1;
  Sweep b = a;
  b.name = "stopped";
  h.SubmitOk(a);
  h.SubmitOk(b);
  REQUIRE(l.launch_count() == 2);
  Launched& ta = *l.Find("cancelled", 0);
  Launched& tb = *l.Find("stopped", 0);

  REQUIRE(h.scheduler().Cancel("cancelled").ok());
  REQUIRE(ta.stops == std::vector<StopReason>{StopReason::kCancel});
  CHECK(h.Study("cancelled").state == StudyState::kCancelled);
  CHECK(l.released.empty());  // a trial of it is still starting
  l.NeverStarted(ta, "stopped (cancel) before it started");
  std::vector<TrialRecord> trials = h.Trials("cancelled");
  REQUIRE(trials.size() == 1);
  INFO(Describe(trials[0]));
  CHECK(trials[0].state == TrialState::kFail);
  CHECK(trials[0].fail.reason == "cancelled");

  int idle = 0;
  h.scheduler().BeginShutdown([&idle] { ++idle; });
  CHECK(l.released_all == 1);
  REQUIRE(tb.stops == std::vector<StopReason>{StopReason::kShutdown});
  CHECK(idle == 0);
  l.NeverStarted(tb, "the study's fork server was stopped");
  CHECK(idle == 1);
  trials = h.Trials("stopped");
  REQUIRE(trials.size() == 1);
  CHECK(trials[0].state == TrialState::kWaiting);
  bool spawn_failed = false;
  for (const auto& [kind, detail] : h.Events("stopped")) spawn_failed |= kind == "spawn_failed";
  CHECK_FALSE(spawn_failed);
}

TEST_CASE("a trial that was starting when the daemon died starts again after recovery",
          "[scheduler][fork_server]") {
  SchedulerHarness h;
  h.launcher().async_start = true;
  Sweep sweep;
  sweep.name = "crashed";
  sweep.n_trials = 2;
  sweep.parallelism = 2;
  h.SubmitOk(sweep);
  REQUIRE(h.launcher().launch_count() == 2);
  h.launcher().Start(h.launcher().launch(1));  // trial 1 runs; trial 0 is still starting

  h.Restart(7);
  REQUIRE(h.scheduler().Recover().ok());
  std::vector<TrialRecord> trials = h.Trials("crashed");
  REQUIRE(trials.size() == 2);
  // The running one was lost; the starting one never ran: it is an ordinary WAITING trial.
  CHECK(trials[0].state == TrialState::kWaiting);
  CHECK(trials[1].state == TrialState::kFail);
  CHECK(trials[1].fail.reason == "lost");
  h.scheduler().Pump();
  REQUIRE(h.launcher().launch_count() >= 1);
  CHECK(h.launcher().launch(0).trial == 0);
  CompleteAll(h, "crashed", 2);
  trials = h.Trials("crashed");
  CHECK(trials[0].state == TrialState::kComplete);
  CHECK(h.Study("crashed").state == StudyState::kComplete);
}

// A kind = "python" sweep with a fork server (the objective's file is written beside it).
config::SweepSource ForkSweep(const std::string& name, int n_trials) {
  std::ofstream(kSweepDir + "/fork_obj.py") << "def objective(trial):\n    return 1.0\n";
  return {"[study]\nname = \"" + name + "\"\nn_trials = " + std::to_string(n_trials) +
              "\nparallelism = 2\n\n[objective]\nkind = \"python\"\nfunction = "
              "\"fork_obj.py:objective\"\npreload = [\"json\"]\n",
          kSweepDir + "/" + name + ".toml"};
}

TEST_CASE("a fork server study: its spec, its events, its status, and its release at the end",
          "[scheduler][fork_server]") {
  SchedulerHarness h;
  FakeLauncher& l = h.launcher();
  REQUIRE(h.scheduler().Submit(ForkSweep("fs", 3)).ok());
  REQUIRE(l.launch_count() == 2);
  const launcher::LaunchSpec& spec = l.launch(0).spec;
  REQUIRE(spec.fork_server.has_value());
  CHECK(spec.fork_server->key == "fs");
  CHECK(spec.fork_server->argv == std::vector<std::string>{"python3", "-m", "triald", "fork-server",
                                                           "--preload", "json", "--objective",
                                                           kSweepDir + "/fork_obj.py:objective"});
  CHECK(spec.fork_server->executable == "/usr/bin/python3");
  CHECK(spec.fork_server->request_argv ==
        std::vector<std::string>{"run", kSweepDir + "/fork_obj.py:objective"});
  CHECK(spec.fork_server->log_path == "/srv/triald-test/studies/fs/fork-server.log");
  CHECK(spec.fork_server->workdir == kSweepDir);
  auto server_env = testing::EnvMap(spec.fork_server->env);
  CHECK(server_env.count("PYTHONPATH") == 1);
  CHECK(server_env.count("TRIALD_TRIAL") == 0);  // nothing of one trial's
  CHECK(server_env.count("CUDA_VISIBLE_DEVICES") == 0);
  // OpenBLAS's idle threads spin briefly: in the trial's environment as in an exec'd one's,
  // and in the server's, where OpenBLAS reads it as it loads.
  CHECK(server_env.at("OPENBLAS_THREAD_TIMEOUT") == "20");
  CHECK(testing::EnvMap(spec.env).at("OPENBLAS_THREAD_TIMEOUT") == "20");

  const int64_t id = h.Study("fs").id;
  std::optional<launcher::ForkServerStatus> st = h.scheduler().fork_server_status(id);
  REQUIRE(st.has_value());
  CHECK(st->state == "not started");
  launcher::ForkServerStatus on;
  on.state = "on";
  on.pid = 4242;
  on.preloaded = {"json"};
  on.forked = 2;
  l.fork_status["fs"] = on;
  st = h.scheduler().fork_server_status(id);
  REQUIRE(st.has_value());
  CHECK(st->state == "on");
  CHECK(st->pid == 4242);
  CHECK(st->forked == 2);

  using Kind = launcher::ForkServerEvent::Kind;
  l.ForkEvent("fs", Kind::kStarted, "pid 4242, preloaded: json");
  l.ForkEvent("fs", Kind::kOff, "not safe to fork: 2 threads; trials start by exec");
  l.ForkEvent("nosuchstudy", Kind::kOff, "ignored");
  std::vector<std::pair<std::string, std::string>> fork_events;
  for (const auto& e : h.Events("fs")) {
    if (e.first.rfind("fork_server_", 0) == 0) fork_events.push_back(e);
  }
  CHECK(fork_events ==
        std::vector<std::pair<std::string, std::string>>{
            {"fork_server_started", "pid 4242, preloaded: json"},
            {"fork_server_off", "not safe to fork: 2 threads; trials start by exec"}});

  CompleteAll(h, "fs", 2);
  CHECK(h.Study("fs").state == StudyState::kComplete);
  CHECK(l.released == std::vector<std::string>{"fs"});
  CHECK_FALSE(h.scheduler().fork_server_status(id).has_value());

  // An exec study has no server to release; its trials' OpenBLAS spins as briefly.
  Sweep plain;
  plain.name = "plain";
  plain.n_trials = 1;
  h.SubmitOk(plain);
  const Launched& last = l.launch(l.launch_count() - 1);
  CHECK_FALSE(last.spec.fork_server.has_value());
  CHECK(last.env().at("OPENBLAS_THREAD_TIMEOUT") == "20");
  CompleteAll(h, "plain", 1);
  CHECK(l.released == std::vector<std::string>{"fs"});
}

TEST_CASE("a study that sets OPENBLAS_THREAD_TIMEOUT gets its own value in its fork server",
          "[scheduler][fork_server]") {
  SchedulerHarness h;
  FakeLauncher& l = h.launcher();
  config::SweepSource source = ForkSweep("spin", 2);
  source.text += "env = { OPENBLAS_THREAD_TIMEOUT = \"28\" }\n";
  REQUIRE(h.scheduler().Submit(source).ok());
  REQUIRE(l.launch_count() == 2);
  const launcher::LaunchSpec& spec = l.launch(0).spec;
  REQUIRE(spec.fork_server.has_value());
  CHECK(testing::EnvMap(spec.fork_server->env).at("OPENBLAS_THREAD_TIMEOUT") == "28");
  CHECK(testing::EnvMap(spec.env).at("OPENBLAS_THREAD_TIMEOUT") == "28");
}

TEST_CASE("a fork server study's server is released when it is cancelled or deleted",
          "[scheduler][fork_server]") {
  SchedulerHarness h;
  FakeLauncher& l = h.launcher();
  REQUIRE(h.scheduler().Submit(ForkSweep("gone", 4)).ok());
  REQUIRE(h.scheduler().Submit(ForkSweep("del", 4)).ok());
  REQUIRE(h.scheduler().Cancel("gone").ok());
  CHECK(l.released.empty());  // its trials are still being stopped
  for (Launched* t : l.Live("gone")) l.ExitSignal(*t, SIGTERM);
  CHECK(l.released == std::vector<std::string>{"gone"});
  // Paused with nothing running, it is still active: deleting it releases its server.
  REQUIRE(h.scheduler().Pause("del", true).ok());
  for (Launched* t : l.Live("del")) l.Complete(*t, 1.0);
  CHECK(l.released == std::vector<std::string>{"gone"});
  REQUIRE(h.scheduler().Delete("del", false).ok());
  CHECK(l.released == std::vector<std::string>{"gone", "del"});
}

}  // namespace
}  // namespace triald::daemon
