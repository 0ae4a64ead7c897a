// Scheduler behaviour, driven without forking: a FakeLauncher plays every trial process, a
// FakeClock gives time, and the real SQLite storage (in memory) records what a user would later
// read with `trialctl`. Every assertion about trial and study state reads storage back, since
// that is what survives the daemon.

#include "daemon/scheduler.h"

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

#include "daemon/objective_command.h"
#include "daemon/storage/sqlite_storage.h"
#include "daemon/storage/storage.h"
#include "tests/daemon/fakes.h"
#include "tests/support/temp_dir.h"

namespace triald::daemon {
namespace {

using common::Code;
using launcher::StopReason;
using model::StudyRecord;
using model::StudyState;
using model::TrialRecord;
using model::TrialState;
using testing::FakeLauncher;
using testing::ScriptedPruner;
using Launched = FakeLauncher::Launched;

// Sweep files claim to live here; the harness creates it and its "run" folder (submit checks
// that workdir is a directory), and nothing is written to them.
const std::string kSweepDir = "/tmp/triald-scheduler-test";
const std::vector<std::string> kOptChoices = {"adam", "sgd", "adamw"};

const char* const kDefaultSpace = R"(
[space.lr]
type = "float"
low = 0.0001
high = 0.1
log = true

[space.layers]
type = "int"
low = 1
high = 8

[space.opt]
type = "categorical"
choices = ["adam", "sgd", "adamw"]
)";

// A sweep file, written out as a user would.
struct Sweep {
  std::string name = "study";
  int n_trials = 5;
  int parallelism = 1;
  std::string command = R"(["/bin/true"])";
  std::string study_extra;      // more "key = value" lines for [study]
  std::string objective_extra;  // more lines for [objective]
  std::string space = kDefaultSpace;
  std::string sampler;  // lines of a [sampler] table; none when empty

  std::string Toml() const {
    std::string t = "[study]\nname = \"" + name + "\"\nn_trials = " + std::to_string(n_trials) +
                    "\nparallelism = " + std::to_string(parallelism) + "\n" + study_extra +
                    "\n[objective]\nkind = \"exec\"\ncommand = " + command + "\n" +
                    objective_extra + space;
    if (!sampler.empty()) t += "\n[sampler]\n" + sampler + "\n";
    return t;
  }
  std::string Path() const { return kSweepDir + "/" + name + ".toml"; }
  config::SweepSource Source() const { return {Toml(), Path()}; }
};

struct HarnessOptions {
  int max_workers = 4;
  std::vector<std::string> base_env = {"PATH=/usr/local/bin:/usr/bin:/bin"};
  std::string state_dir = "/srv/triald-test";
  uint64_t drawn_seed = 7;  // what seed_source gives sweeps without a seed
  size_t log_head_bytes = 1 << 20;
  size_t log_tail_bytes = 1 << 20;
  // Replaces every study's pruner (see SchedulerOptions::make_pruner); empty: the real ones.
  std::function<common::Result<std::unique_ptr<pruner::Pruner>>(const config::PrunerConfig&)>
      make_pruner;
};

// One daemon's worth of scheduler, over a storage that outlives restarts.
class Harness {
 public:
  explicit Harness(HarnessOptions options = {}) : options_(std::move(options)) {
    std::filesystem::create_directories(kSweepDir + "/run");
    auto opened = storage::OpenSqliteStorage({":memory:"});
    INFO(opened.status().ToString());
    REQUIRE(opened.ok());
    storage_ = std::move(opened).value();
    Start();
  }

  // A new daemon on the same storage: a fresh launcher and scheduler, as after a crash. (The old
  // scheduler is destroyed, which only drops its fake process handles; it writes nothing.)
  void Restart(uint64_t drawn_seed) {
    scheduler_.reset();
    launcher_ = std::make_unique<FakeLauncher>();
    options_.drawn_seed = drawn_seed;
    Start();
  }

  Scheduler& scheduler() { return *scheduler_; }
  FakeLauncher& launcher() { return *launcher_; }
  storage::Storage& storage() { return *storage_; }
  testing::FakeClock& clock() { return clock_; }
  testing::FakeLeftovers& leftovers() { return leftovers_; }
  // Every delay the scheduler asked to be pumped after (SchedulerOptions::wake_after).
  const std::vector<double>& wakes() const { return wakes_; }
  // The kinds and details of the study's events, oldest first.
  std::vector<std::pair<std::string, std::string>> Events(const std::string& name) {
    common::Result<std::vector<model::EventRecord>> r = storage_->GetEvents(Study(name).id);
    REQUIRE(r.ok());
    std::vector<std::pair<std::string, std::string>> out;
    for (const model::EventRecord& e : *r) out.emplace_back(e.kind, e.detail);
    return out;
  }

  StudyRecord SubmitOk(const Sweep& sweep, const model::Submitter& submitter = {}) {
    common::Result<StudyRecord> r = scheduler_->Submit(sweep.Source(), submitter);
    INFO("Submit(" << sweep.name << "): " << r.status().ToString());
    REQUIRE(r.ok());
    return *r;
  }
  StudyRecord Study(const std::string& name) {
    common::Result<StudyRecord> r = storage_->GetStudy(name);
    INFO("GetStudy(" << name << "): " << r.status().ToString());
    REQUIRE(r.ok());
    return *r;
  }
  std::vector<TrialRecord> Trials(const std::string& name) {
    common::Result<std::vector<TrialRecord>> r = storage_->GetTrials(Study(name).id);
    INFO("GetTrials(" << name << "): " << r.status().ToString());
    REQUIRE(r.ok());
    return *r;
  }
  std::vector<std::string> StudyNames() {
    common::Result<std::vector<StudyRecord>> r = storage_->ListStudies();
    REQUIRE(r.ok());
    std::vector<std::string> names;
    for (const StudyRecord& s : *r) names.push_back(s.name);
    return names;
  }

 private:
  void Start() {
    SchedulerOptions so;
    so.storage = storage_.get();
    so.launcher = launcher_.get();
    so.clock = &clock_;
    so.state_dir = options_.state_dir;
    so.max_workers = options_.max_workers;
    so.base_env = options_.base_env;
    so.log_head_bytes = options_.log_head_bytes;
    so.log_tail_bytes = options_.log_tail_bytes;
    uint64_t seed = options_.drawn_seed;
    so.seed_source = [seed] { return seed; };
    so.make_pruner = options_.make_pruner;
    so.leftovers = &leftovers_;
    so.wake_after = [this](double delay_s) { wakes_.push_back(delay_s); };
    scheduler_ = std::make_unique<Scheduler>(std::move(so));
  }

  HarnessOptions options_;
  // Declaration order is destruction order reversed: the scheduler goes before the launcher
  // whose processes it holds, and both before the storage.
  std::unique_ptr<storage::Storage> storage_;
  testing::FakeClock clock_;
  testing::FakeLeftovers leftovers_;
  std::unique_ptr<FakeLauncher> launcher_ = std::make_unique<FakeLauncher>();
  std::unique_ptr<Scheduler> scheduler_;
  std::vector<double> wakes_;
};

// Completes live trials of `study` (all studies when empty), oldest first, until none is left;
// `value` gives each trial's objective from its number. Checks `max_live` after every exit.
void CompleteAll(
    Harness& h, const std::string& study, int max_live,
    const std::function<double(int)>& value = [](int n) { return n * 0.5; }) {
  FakeLauncher& l = h.launcher();
  for (int guard = 0; !l.Live(study).empty(); ++guard) {
    REQUIRE(guard < 1000);
    Launched& t = *l.Live(study).front();
    h.clock().Advance(1);
    l.Complete(t, value(t.trial));
    CHECK(l.live_count() <= max_live);
  }
}

// The `i`-th oldest live process of `study` (of any study when empty); fails the test, rather
// than crash it, when there is none.
Launched& LiveAt(FakeLauncher& l, const std::string& study, size_t i = 0) {
  std::vector<Launched*> live = l.Live(study);
  INFO("live processes of study \"" << study << "\": " << live.size());
  REQUIRE(i < live.size());
  return *live[i];
}

std::string Describe(const TrialRecord& t) {
  return "trial " + std::to_string(t.number) + " " + model::TrialStateName(t.state) + " (" +
         t.fail.reason + ": " + t.fail.detail + ")";
}

std::map<std::string, double> InternalParams(const TrialRecord& t) {
  std::map<std::string, double> out;
  for (const auto& [name, p] : t.params) out[name] = p.internal;
  return out;
}

// ---------------------------------------------------------------------------------------------
// Running a study

TEST_CASE("a study runs exactly n_trials trials, at most `parallelism` at once", "[scheduler]") {
  Harness h;  // max_workers 4: the study's parallelism is the limit here
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
  HarnessOptions options;
  options.max_workers = 3;
  Harness h(options);
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
  HarnessOptions options;
  options.max_workers = 1;
  Harness h(options);
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
  HarnessOptions options;
  options.base_env = {"PATH=/usr/bin:/bin", "HOME=/home/trials", "LANG=C.UTF-8"};
  options.state_dir = "/srv/triald";
  options.log_head_bytes = 4096;
  options.log_tail_bytes = 8192;
  Harness h(options);
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
  Harness h;
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
  Harness h;
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
  Harness h;
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
// How a trial ended

// Runs a one-trial study (trial_timeout 60) whose process does what `play` says, and returns the
// trial as stored.
TrialRecord RunOneTrial(const std::function<void(FakeLauncher&, Launched&)>& play) {
  Harness h;
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

// Lets the wait the scheduler asked for pass, then pumps (as the daemon's timer does).
void RetryAfterWait(Harness& h) {
  REQUIRE_FALSE(h.wakes().empty());
  h.clock().Advance(h.wakes().back() + 1e-6);
  h.scheduler().Pump();
}

// Counts the events of `kind`.
int CountEvents(const std::vector<std::pair<std::string, std::string>>& events,
                const std::string& kind) {
  return static_cast<int>(
      std::count_if(events.begin(), events.end(), [&](const auto& e) { return e.first == kind; }));
}

TEST_CASE("a trial that cannot be started stays WAITING and the study backs off",
          "[scheduler][spawn]") {
  Harness h;
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
    RetryAfterWait(h);
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
  RetryAfterWait(h);
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
  Harness h;
  FakeLauncher& l = h.launcher();
  Sweep sweep;
  sweep.name = "deploying";
  sweep.n_trials = 2;
  l.FailAllLaunches("exec /opt/train: No such file or directory",
                    {launcher::SpawnStep::kExec, ENOENT});
  h.SubmitOk(sweep);
  const int64_t id = h.Study("deploying").id;
  for (int i = 0; i < 2; ++i) {
    RetryAfterWait(h);
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
    RetryAfterWait(h);
  }
  CHECK(l.failed().size() == 8);
  CHECK(CountEvents(h.Events("deploying"), "study_held") == 1);
  std::vector<TrialRecord> trials = h.Trials("deploying");
  REQUIRE(trials.size() == 1);
  CHECK(trials[0].state == TrialState::kWaiting);
  CHECK(h.Study("deploying").state == StudyState::kRunning);

  l.StopFailing();
  RetryAfterWait(h);
  CHECK_FALSE(h.scheduler().spawn_status(id).has_value());
  CompleteAll(h, "deploying", 1);
  trials = h.Trials("deploying");
  REQUIRE(trials.size() == 2);
  for (const TrialRecord& t : trials) CHECK(t.state == TrialState::kComplete);
  CHECK(h.Study("deploying").state == StudyState::kComplete);
}

TEST_CASE("an enqueued trial that cannot be started keeps its parameters and its place",
          "[scheduler][spawn]") {
  Harness h;
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
  RetryAfterWait(h);
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
  Harness h;
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
  Harness h;
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
// Cancel and shutdown

TEST_CASE("cancelling a study stops its running trials and starts no more", "[scheduler]") {
  Harness h;
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
  Harness h;
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
  HarnessOptions options;
  options.max_workers = 4;
  Harness h(options);
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
  CHECK(h.Trials("first").size() == 2);
  CHECK(h.Trials("second").size() == 2);
  // Interrupted studies are not complete: a restarted daemon resumes them.
  CHECK(h.Study("first").state == StudyState::kRunning);
  CHECK(h.Study("second").state == StudyState::kRunning);
}

TEST_CASE("shutdown with nothing running is idle at once", "[scheduler]") {
  Harness h;
  int idle_calls = 0;
  h.scheduler().BeginShutdown([&idle_calls] { ++idle_calls; });
  CHECK(idle_calls == 1);
  h.scheduler().Pump();
  CHECK(idle_calls == 1);
}

// A trial stopped by a shutdown is still judged on what it reported: a protocol error, or a
// final with several values in a one-objective study, is FAIL(protocol), as without a shutdown.
TEST_CASE("during shutdown a bad report still makes the trial FAIL(protocol)", "[scheduler]") {
  Harness h;
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
  HarnessOptions options;
  options.drawn_seed = 0xFEDCBA9876543210ULL;  // no seed in the sweep: this one is drawn, >= 2^63
  Harness h(options);
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
  Harness reference(options);
  reference.SubmitOk(sweep);
  CompleteAll(reference, "", 2);
  std::vector<TrialRecord> expected = reference.Trials("resumable");
  REQUIRE(expected.size() == 4);
  CHECK(InternalParams(trials[3]) == InternalParams(expected[3]));
  for (int n = 0; n < 3; ++n) CHECK(InternalParams(trials[n]) == InternalParams(expected[n]));
}

TEST_CASE("recovery asks to kill the recorded processes of the trials left running",
          "[scheduler]") {
  Harness h;
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
  Harness h;
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

// ---------------------------------------------------------------------------------------------
// Samplers through the scheduler

TEST_CASE("a grid study ends when the grid is exhausted, before n_trials", "[scheduler]") {
  const int parallelism = GENERATE(1, 4);
  INFO("parallelism " << parallelism);
  Harness h;
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
    HarnessOptions options;
    options.max_workers = 5;
    Harness h(options);
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
// Pruning

// Harness options whose studies all get a ScriptedPruner answering with `rule`; its questions
// land in `log`.
HarnessOptions WithPruner(ScriptedPruner::Rule rule,
                          std::shared_ptr<std::vector<ScriptedPruner::Question>> log) {
  HarnessOptions options;
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
  Harness h(WithPruner(
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
  Harness h(WithPruner([](const pruner::PruneContext&) { return true; }, log));
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
  Harness h;
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
// Enqueue

std::string ParamsEnv(Launched& l) { return l.env()["TRIALD_PARAMS"]; }

TEST_CASE("enqueued trials run next, in order, with the given params, the rest sampled",
          "[scheduler][enqueue]") {
  Harness h;
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
  Harness reference;
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
  Harness h;
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
  Harness h;
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
  Harness h;
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

// ---------------------------------------------------------------------------------------------
// Refused submissions

TEST_CASE("a refused submission says why and stores nothing", "[scheduler]") {
  Harness h;
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
Launched& LaunchOneTrial(Harness& h, const std::string& name, const std::string& sampler = "",
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
  Harness h;
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
    Harness h;
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
  Harness h;
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
  Harness h;
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
  Harness h;
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
  Harness h(WithPruner(
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
  Harness h;
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
  Harness h(WithPruner(
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
  Harness h;
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

// ---------------------------------------------------------------------------------------------
// Several objectives and constraints

TEST_CASE("every trial is told how many objectives its study has", "[scheduler][objectives]") {
  Harness h;
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
  Harness h;
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
  Harness h;
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

// ---------------------------------------------------------------------------------------------
// Control after submit: pause, resume, extend, parallelism, delete

// The kinds of the study's events, oldest first.
std::vector<std::string> EventKinds(Harness& h, const std::string& name) {
  std::vector<std::string> kinds;
  for (const auto& [kind, detail] : h.Events(name)) kinds.push_back(kind);
  return kinds;
}

bool HasEvent(Harness& h, const std::string& name, const std::string& kind) {
  const std::vector<std::string> kinds = EventKinds(h, name);
  return std::find(kinds.begin(), kinds.end(), kind) != kinds.end();
}

TEST_CASE("a paused study starts no trial, its running ones go on, and resume restarts it",
          "[scheduler][control]") {
  Harness h;
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
  CHECK(HasEvent(h, "pausable", "study_paused"));

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
  CHECK(HasEvent(h, "pausable", "study_resumed"));
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
  Harness h;
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
  const std::vector<std::string> kinds = EventKinds(h, "more");
  CHECK(std::count(kinds.begin(), kinds.end(), "study_complete") == 2);
  CHECK(HasEvent(h, "more", "study_extended"));

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
  Harness h;
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
  HarnessOptions options;
  options.state_dir = dir.path();
  Harness h(options);
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
// Asynchronous starts (a fork server's) and the study's fork server

TEST_CASE("a forked start holds its slot and is RUNNING only once the launcher says it started",
          "[scheduler][fork_server]") {
  Harness h;
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
  Harness h;
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
  Harness h;
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
  Harness h;
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
  Harness h;
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

  // An exec study has no server to release.
  Sweep plain;
  plain.name = "plain";
  plain.n_trials = 1;
  h.SubmitOk(plain);
  CompleteAll(h, "plain", 1);
  CHECK(l.released == std::vector<std::string>{"fs"});
}

TEST_CASE("a fork server study's server is released when it is cancelled or deleted",
          "[scheduler][fork_server]") {
  Harness h;
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
