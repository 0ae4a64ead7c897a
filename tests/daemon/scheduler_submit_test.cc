// Submitting a study and running it: n_trials and parallelism, max_workers shared between
// studies in turn, what a worker is given (its launch spec and environment), samplers through the
// scheduler, and the submissions refused.
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

const std::vector<std::string> kOptChoices = {"adam", "sgd", "adamw"};

// ---------------------------------------------------------------------------------------------
// Running a study

TEST_CASE("a study runs exactly n_trials trials, at most `parallelism` at once", "[scheduler]") {
  SchedulerHarness h;  // max_workers 4: the study's parallelism is the limit here
  FakeLauncher& l = h.launcher();
  Sweep sweep;
  sweep.name = "five";
  sweep.n_trials = 5;
  sweep.parallelism = 2;
  h.clock().SetWall(1000);
  h.SubmitOk(sweep);

  REQUIRE(l.launch_count() == 2);
  CHECK(l.launch(0).trial == 0);
  CHECK(l.launch(1).trial == 1);
  CHECK(h.scheduler().running_count() == 2);
  for (const TrialRecord& t : h.Trials("five")) CHECK(t.state == TrialState::kRunning);

  // Finishing one trial frees its slot: the next trial starts at once, and no other.
  std::map<int, double> value, finished_at;
  h.clock().SetWall(1010);
  l.Complete(l.launch(0), 0.25);
  value[0] = 0.25;
  finished_at[0] = 1010;
  REQUIRE(l.launch_count() == 3);
  CHECK(l.launch(2).trial == 2);
  CHECK(l.live_count() == 2);

  for (int guard = 0; l.live_count() > 0; ++guard) {
    REQUIRE(guard < 100);
    Launched& t = *l.Live().front();
    h.clock().Advance(10);
    value[t.trial] = 1.0 + 0.125 * t.trial;
    finished_at[t.trial] = h.clock().WallSeconds();
    l.Complete(t, value[t.trial]);
    CHECK(l.live_count() <= 2);
  }

  CHECK(l.launch_count() == 5);
  CHECK(l.max_live() == 2);
  std::vector<TrialRecord> trials = h.Trials("five");
  REQUIRE(trials.size() == 5);
  for (const TrialRecord& t : trials) {
    INFO(Describe(t));
    CHECK(t.state == TrialState::kComplete);
    REQUIRE(t.value.has_value());
    CHECK(*t.value == value[t.number]);
    CHECK(t.finished_at == finished_at[t.number]);  // times come from the injected clock
  }
  CHECK(trials[0].started_at == 1000);
  CHECK(trials[2].started_at == 1010);  // started when trial 0 ended
  CHECK(h.Study("five").state == StudyState::kComplete);
  CHECK(h.scheduler().running_count() == 0);
  CHECK(h.scheduler().active_study_count() == 0);
}

TEST_CASE("max_workers caps running trials across studies, and every study gets workers",
          "[scheduler]") {
  SchedulerHarnessOptions options;
  options.max_workers = 3;
  SchedulerHarness h(options);
  FakeLauncher& l = h.launcher();
  Sweep a, b;
  a.name = "alpha";
  b.name = "beta";
  a.n_trials = b.n_trials = 4;
  a.parallelism = b.parallelism = 2;

  h.SubmitOk(a);
  CHECK(l.live_count("alpha") == 2);
  h.SubmitOk(b);
  // Beta gets the one worker alpha's parallelism leaves free.
  CHECK(l.live_count() == 3);
  CHECK(l.live_count("alpha") == 2);
  CHECK(l.live_count("beta") == 1);
  CHECK(h.scheduler().running_count() == 3);

  // A worker freed by beta goes back to beta (alpha is at its parallelism)...
  l.Complete(LiveAt(l, "beta"), 1.0);
  CHECK(l.live_count("alpha") == 2);
  CHECK(l.live_count("beta") == 1);
  CHECK(h.Trials("beta").size() == 2);
  // ...and one freed by alpha is used at once (by either study: both are below parallelism).
  l.Complete(LiveAt(l, "alpha"), 2.0);
  CHECK(l.live_count() == 3);
  CHECK(h.Trials("alpha").size() + h.Trials("beta").size() == 5);

  CompleteAll(h, "", 3);
  CHECK(l.max_live() == 3);
  CHECK(l.max_live("alpha") <= 2);
  CHECK(l.max_live("beta") <= 2);
  CHECK(l.launch_count() == 8);
  for (const char* name : {"alpha", "beta"}) {
    INFO(name);
    std::vector<TrialRecord> trials = h.Trials(name);
    CHECK(trials.size() == 4);
    for (const TrialRecord& t : trials) CHECK(t.state == TrialState::kComplete);
    CHECK(h.Study(name).state == StudyState::kComplete);
  }
}

// Round-robin: with max_workers = 1 and two studies, a freed worker goes to the other study,
// so the second study is not held back until the first has started all of its trials.
TEST_CASE("a freed worker goes to the next study in turn, not always to the oldest",
          "[scheduler]") {
  SchedulerHarnessOptions options;
  options.max_workers = 1;
  SchedulerHarness h(options);
  FakeLauncher& l = h.launcher();
  Sweep a, b;
  a.name = "alpha";
  b.name = "beta";
  a.n_trials = b.n_trials = 3;
  h.SubmitOk(a);
  h.SubmitOk(b);
  CHECK(l.live_count() == 1);

  CompleteAll(h, "", 1);
  REQUIRE(l.launch_count() == 6);
  std::vector<std::string> order;
  for (size_t i = 0; i < l.launch_count(); ++i) order.push_back(l.launch(i).study);
  CHECK(order == std::vector<std::string>{"alpha", "beta", "alpha", "beta", "alpha", "beta"});
}

// ---------------------------------------------------------------------------------------------
// What a worker is given

TEST_CASE("a trial's launch spec carries its params, identity, limits and environment",
          "[scheduler]") {
  SchedulerHarnessOptions options;
  options.base_env = {"PATH=/usr/bin:/bin", "HOME=/home/trials", "LANG=C.UTF-8"};
  options.state_dir = "/srv/triald";
  options.log_head_bytes = 4096;
  options.log_tail_bytes = 8192;
  SchedulerHarness h(options);
  FakeLauncher& l = h.launcher();
  // Something in the daemon's own environment that must not leak into a worker's.
  REQUIRE(::setenv("TRIALD_SCHEDULER_TEST_LEAK", "1", 1) == 0);

  Sweep sweep;
  sweep.name = "spec-check";
  sweep.n_trials = 2;
  sweep.parallelism = 2;
  sweep.command = R"(["sh", "-c", "exit 0"])";
  sweep.study_extra = "trial_timeout = 30\nkill_grace = 2.5\n";
  sweep.objective_extra =
      "workdir = \"run\"\nenv = { OMP_NUM_THREADS = \"2\", LANG = \"en_US\" }\n";
  sweep.sampler = "seed = 3";
  StudyRecord submitted = h.SubmitOk(sweep, {1001, "alice"});
  ::unsetenv("TRIALD_SCHEDULER_TEST_LEAK");
  // Who submitted it is stored, and each trial is launched for that user.
  CHECK(submitted.submitter.uid == 1001);
  CHECK(h.Study("spec-check").submitter.name == "alice");

  REQUIRE(l.launch_count() == 2);
  std::vector<TrialRecord> trials = h.Trials("spec-check");
  REQUIRE(trials.size() == 2);
  for (size_t i = 0; i < 2; ++i) {
    const launcher::LaunchSpec& spec = l.launch(i).spec;
    const int n = l.launch(i).trial;
    INFO("launch " << i << " (trial " << n << ")");
    REQUIRE(n == static_cast<int>(i));
    const std::string trial_dir = "/srv/triald/studies/spec-check/trials/" + std::to_string(n);

    CHECK(spec.argv == std::vector<std::string>{"sh", "-c", "exit 0"});
    // Resolved through the worker's PATH to an absolute executable.
    REQUIRE(!spec.executable.empty());
    CHECK(spec.executable.front() == '/');
    CHECK(std::filesystem::path(spec.executable).filename() == "sh");
    CHECK(::access(spec.executable.c_str(), X_OK) == 0);
    CHECK(spec.workdir == kSweepDir + "/run");
    CHECK(spec.trial_dir == trial_dir);
    CHECK(spec.log_dir == "/srv/triald/studies/spec-check/logs/" + std::to_string(n));
    CHECK(spec.timeout_s == 30);
    CHECK(spec.kill_grace_s == 2.5);
    CHECK(spec.log_head_bytes == 4096);
    CHECK(spec.log_tail_bytes == 8192);
    CHECK(spec.submitter.uid == 1001);
    CHECK(spec.submitter.name == "alice");

    CHECK(testing::DuplicateEnvKeys(spec.env).empty());
    std::map<std::string, std::string> env = testing::EnvMap(spec.env);
    CHECK(env["TRIALD_STUDY"] == "spec-check");
    CHECK(env["TRIALD_TRIAL"] == std::to_string(n));
    CHECK(env["TRIALD_TRIAL_DIR"] == trial_dir);
    CHECK(env["TRIALD_REPORT_FD"] == "3");
    REQUIRE(env.count("CUDA_VISIBLE_DEVICES") == 1);
    CHECK(env["CUDA_VISIBLE_DEVICES"].empty());
    CHECK(env["OMP_NUM_THREADS"] == "2");  // from the sweep
    CHECK(env["LANG"] == "en_US");         // the sweep's value wins over base_env
    CHECK(env["HOME"] == "/home/trials");  // from base_env
    CHECK(env["PATH"] == "/usr/bin:/bin");
    CHECK(env.count("TRIALD_SCHEDULER_TEST_LEAK") == 0);

    // TRIALD_PARAMS: every parameter, in its external form, equal to what storage recorded.
    boost::system::error_code ec;
    boost::json::value params = boost::json::parse(env["TRIALD_PARAMS"], ec);
    INFO("TRIALD_PARAMS=" << env["TRIALD_PARAMS"]);
    REQUIRE(!ec);
    REQUIRE(params.is_object());
    const boost::json::object& obj = params.as_object();
    CHECK(obj.size() == 3);
    const TrialRecord& t = trials[n];
    REQUIRE(obj.contains("lr"));
    REQUIRE(obj.at("lr").is_double());
    CHECK(obj.at("lr").as_double() == Approx(t.params.at("lr").internal).epsilon(1e-12));
    CHECK(obj.at("lr").as_double() >= 0.0001);
    CHECK(obj.at("lr").as_double() <= 0.1);
    REQUIRE(obj.contains("layers"));
    REQUIRE(obj.at("layers").is_int64());
    CHECK(static_cast<double>(obj.at("layers").as_int64()) == t.params.at("layers").internal);
    REQUIRE(obj.contains("opt"));
    REQUIRE(obj.at("opt").is_string());  // the choice itself, not its index
    const size_t index = static_cast<size_t>(t.params.at("opt").internal);
    REQUIRE(index < kOptChoices.size());
    CHECK(std::string(obj.at("opt").as_string()) == kOptChoices[index]);
  }
}

TEST_CASE("a sweep without workdir runs in the sweep file's folder", "[scheduler]") {
  SchedulerHarness h;
  Sweep sweep;
  sweep.name = "plain";
  sweep.n_trials = 1;
  h.SubmitOk(sweep);
  REQUIRE(h.launcher().launch_count() == 1);
  const launcher::LaunchSpec& spec = h.launcher().launch(0).spec;
  CHECK(spec.workdir == kSweepDir);
  CHECK(spec.executable == "/bin/true");
  CHECK(spec.argv == std::vector<std::string>{"/bin/true"});
  CHECK(spec.timeout_s == 0);  // no trial_timeout given: none
}

TEST_CASE("a trial past a report cap ends FAIL(protocol) naming the cap", "[scheduler]") {
  SchedulerHarness h;
  Sweep sweep;
  sweep.name = "caps";
  sweep.n_trials = 3;
  sweep.parallelism = 3;
  sweep.study_extra = "max_intermediate_steps = 3\nmax_attrs = 2\nmax_attr_bytes = 1024\n";
  h.SubmitOk(sweep);
  FakeLauncher& l = h.launcher();
  REQUIRE(l.launch_count() == 3);
  Launched& steps = l.launch(0);
  Launched& attrs = l.launch(1);
  Launched& bytes = l.launch(2);

  for (int step = 0; step < 3; ++step) l.Report(steps, step, 1.0);
  l.Report(steps, 2, 0.5);  // a step reported again replaces its value: no new step
  CHECK(steps.protocol_error.empty());
  l.Report(steps, 3, 1.0);
  CHECK(steps.protocol_error ==
        "more than 3 distinct steps with an intermediate value (step 3; [study] "
        "max_intermediate_steps = 3)");
  l.Report(steps, 4, 1.0);  // after the cap nothing more is kept

  l.Attr(attrs, "a", "1");
  l.Attr(attrs, "b", "2");
  l.Attr(attrs, "a", "3");  // a key set again is not a new attribute
  CHECK(attrs.protocol_error.empty());
  l.Attr(attrs, "c", "4");
  CHECK(attrs.protocol_error == "more than 2 attributes (key \"c\"; [study] max_attrs = 2)");

  l.Attr(bytes, "big", "\"" + std::string(1000, 'x') + "\"");  // 3 + 1002 bytes: fits
  l.Attr(bytes, "big", "\"" + std::string(1010, 'x') + "\"");  // replaced: 3 + 1012 fits
  CHECK(bytes.protocol_error.empty());
  l.Attr(bytes, "more", "\"" + std::string(20, 'x') + "\"");
  CHECK(bytes.protocol_error ==
        "more than 1024 bytes of attributes (key \"more\" brings them to 1041; [study] "
        "max_attr_bytes = 1024)");

  for (Launched* p : {&steps, &attrs, &bytes}) l.ExitSignal(*p, SIGTERM);
  std::vector<TrialRecord> trials = h.Trials("caps");
  REQUIRE(trials.size() == 3);
  for (const TrialRecord& t : trials) {
    INFO("trial " << t.number << ": " << t.fail.detail);
    CHECK(t.state == TrialState::kFail);
    CHECK(t.fail.reason == "protocol");
  }
  CHECK_THAT(trials[0].fail.detail, Catch::Contains("max_intermediate_steps = 3"));
  CHECK(trials[0].intermediate.size() == 3);
  CHECK(trials[0].intermediate.at(2) == 0.5);
  CHECK_THAT(trials[1].fail.detail, Catch::Contains("max_attrs = 2"));
  CHECK(trials[1].attrs.size() == 2);
  CHECK_THAT(trials[2].fail.detail, Catch::Contains("max_attr_bytes = 1024"));
  CHECK(trials[2].attrs.count("more") == 0);
}

TEST_CASE("submit refuses a workdir that is missing or not a directory, naming workdir",
          "[scheduler]") {
  SchedulerHarness h;
  testing::TempDir dir;
  const std::string file = dir.Write("file", "x");
  for (const std::string& workdir : {dir.path() + "/missing", file}) {
    INFO(workdir);
    Sweep sweep;
    sweep.name = "nowhere";
    sweep.objective_extra = "workdir = \"" + workdir + "\"\n";
    common::Result<StudyRecord> r = h.scheduler().Submit(sweep.Source());
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == common::Code::kInvalidArgument);
    CHECK_THAT(r.status().message(), Catch::Contains("[objective] workdir = \"" + workdir + "\"") &&
                                         Catch::Contains("expected an existing directory"));
    CHECK(h.launcher().launch_count() == 0);
  }
  CHECK(h.storage().ListStudies()->empty());
}

// ---------------------------------------------------------------------------------------------
// Samplers through the scheduler

TEST_CASE("a grid study ends when the grid is exhausted, before n_trials", "[scheduler]") {
  const int parallelism = GENERATE(1, 4);
  INFO("parallelism " << parallelism);
  SchedulerHarness h;
  FakeLauncher& l = h.launcher();
  Sweep sweep;
  sweep.name = "grid";
  sweep.n_trials = 10;
  sweep.parallelism = parallelism;
  sweep.space = "[space.letter]\ntype = \"categorical\"\nchoices = [\"a\", \"b\", \"c\"]\n";
  sweep.sampler = "kind = \"grid\"\nseed = 5";
  h.SubmitOk(sweep);
  CHECK(l.live_count() == std::min(parallelism, 3));
  CompleteAll(h, "", 3);

  CHECK(l.launch_count() == 3);
  std::vector<TrialRecord> trials = h.Trials("grid");
  REQUIRE(trials.size() == 3);
  std::set<std::string> seen;
  for (size_t i = 0; i < l.launch_count(); ++i) {
    boost::json::value params = boost::json::parse(l.launch(i).env()["TRIALD_PARAMS"]);
    seen.insert(std::string(params.at("letter").as_string()));
  }
  CHECK(seen == std::set<std::string>{"a", "b", "c"});
  for (const TrialRecord& t : trials) CHECK(t.state == TrialState::kComplete);
  CHECK(h.Study("grid").state == StudyState::kComplete);
  CHECK(h.scheduler().active_study_count() == 0);
}

TEST_CASE("the same seed gives the same params, trial by trial", "[scheduler]") {
  auto params_of = [](uint64_t seed) {
    SchedulerHarnessOptions options;
    options.max_workers = 5;
    SchedulerHarness h(options);
    Sweep sweep;
    sweep.name = "repro";
    sweep.n_trials = 5;
    sweep.parallelism = 5;
    sweep.sampler = "seed = " + std::to_string(seed);
    h.SubmitOk(sweep);
    REQUIRE(h.launcher().launch_count() == 5);
    std::vector<std::map<std::string, double>> stored;
    std::vector<std::string> env;
    for (const TrialRecord& t : h.Trials("repro")) stored.push_back(InternalParams(t));
    for (int n = 0; n < 5; ++n) {
      Launched* p = h.launcher().Find("repro", n);
      REQUIRE(p != nullptr);
      env.push_back(p->env()["TRIALD_PARAMS"]);
    }
    return std::make_pair(stored, env);
  };
  auto first = params_of(42);
  auto second = params_of(42);
  REQUIRE(first.first.size() == 5);
  CHECK(first.first == second.first);
  CHECK(first.second == second.second);
  // And the seed matters: another one gives other params.
  CHECK(params_of(43).first != first.first);
}

// ---------------------------------------------------------------------------------------------
// Refused submissions

TEST_CASE("a refused submission says why and stores nothing", "[scheduler]") {
  SchedulerHarness h;
  FakeLauncher& l = h.launcher();
  Sweep existing;
  existing.name = "taken";
  existing.n_trials = 1;
  h.SubmitOk(existing);
  REQUIRE(l.launch_count() == 1);
  const std::vector<std::string> names_before = h.StudyNames();

  Sweep sweep;
  common::Result<StudyRecord> r = common::Internal("not submitted");
  SECTION("a study name already in use") {
    sweep.name = "taken";
    sweep.n_trials = 3;
    r = h.scheduler().Submit(sweep.Source());
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kAlreadyExists);
    CHECK_THAT(r.status().message(), Catch::Contains("\"taken\""));
    CHECK(h.Trials("taken").size() == 1);
    CHECK(h.Study("taken").n_trials == 1);
  }
  SECTION("a command that does not exist") {
    sweep.name = "no-command";
    sweep.command = R"(["triald-no-such-command-x7", "--lr"])";
    r = h.scheduler().Submit(sweep.Source());
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kInvalidArgument);
    CHECK_THAT(r.status().message(), Catch::Contains("triald-no-such-command-x7"));
    CHECK_THAT(r.status().message(), Catch::Contains(sweep.Path()));
  }
  SECTION("an invalid sweep") {
    sweep.name = "invalid";
    sweep.n_trials = 0;
    r = h.scheduler().Submit(sweep.Source());
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kInvalidArgument);
    CHECK_THAT(r.status().message(), Catch::Contains(sweep.Path()));
    CHECK_THAT(r.status().message(), Catch::Contains("n_trials"));
  }
  SECTION("a grid over a continuous parameter") {
    sweep.name = "bad-grid";
    sweep.sampler = "kind = \"grid\"";
    r = h.scheduler().Submit(sweep.Source());
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kInvalidArgument);
    CHECK_THAT(r.status().message(), Catch::Contains(sweep.Path()));
    CHECK_THAT(r.status().message(), Catch::Contains("lr"));
  }
  INFO(r.status().ToString());
  CHECK(h.StudyNames() == names_before);
  CHECK(l.launch_count() == 1);
  CHECK(l.failed().empty());
  CHECK(h.scheduler().active_study_count() == 1);
}

}  // namespace
}  // namespace triald::daemon
