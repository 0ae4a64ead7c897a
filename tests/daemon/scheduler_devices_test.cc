// The scheduler's GPU slots and retry policy, driven without forking through the scheduler
// harness (tests/daemon/scheduler_harness.h): FakeLauncher plays the trial processes,
// FakeGpuProbe the GPU driver, FakeClock the time, and the real SQLite storage (in memory)
// records what `trialctl` would show.

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "daemon/devices/gpu_pool.h"
#include "daemon/scheduler.h"
#include "daemon/scheduler/resume_dir.h"
#include "tests/daemon/fakes.h"
#include "tests/daemon/scheduler_harness.h"
#include "tests/support/temp_dir.h"

namespace triald::daemon {
namespace {

using testing::FakeGpuProbe;
using testing::GpuHarnessOptions;

// A seeded sweep over one float x, with more [study] lines `study_extra`.
Sweep DeviceSweep(const std::string& name, int n_trials, int parallelism,
                  const std::string& study_extra) {
  Sweep s;
  s.name = name;
  s.n_trials = n_trials;
  s.parallelism = parallelism;
  s.study_extra = study_extra;
  s.space = testing::kUnitSpace;
  s.sampler = "seed = 3";
  s.dir = "/tmp";
  return s;
}

// The GPU slots ("0.1" = GPU 0, slot 1) each live trial holds, from its environment.
std::vector<std::string> Slots(const Launched& l) {
  std::vector<std::string> out;
  std::string list = l.env()["TRIALD_GPU_SLOTS"];
  for (size_t pos = 0; pos < list.size();) {
    size_t comma = list.find(',', pos);
    if (comma == std::string::npos) comma = list.size();
    out.push_back(list.substr(pos, comma - pos));
    pos = comma + 1;
  }
  return out;
}

// No slot is held by two live trials, and each trial's CUDA_VISIBLE_DEVICES names exactly the
// GPUs of its slots, all different.
void CheckNoSharedSlot(FakeLauncher& l, size_t gpus_per_trial) {
  std::set<std::string> held;
  for (Launched* t : l.Live()) {
    std::vector<std::string> slots = Slots(*t);
    REQUIRE(slots.size() == gpus_per_trial);
    std::string cuda;
    std::set<std::string> gpus;
    for (const std::string& s : slots) {
      INFO("slot " << s << " of trial " << t->trial);
      CHECK(held.insert(s).second);
      const std::string gpu = s.substr(0, s.find('.'));
      CHECK(gpus.insert(gpu).second);
      cuda += (cuda.empty() ? "" : ",") + gpu;
    }
    CHECK(t->env()["CUDA_VISIBLE_DEVICES"] == cuda);
    CHECK(t->env()["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID");
  }
}

TEST_CASE("GPU trials never share a slot: 3 GPUs x 2 slots, 2 GPUs per trial",
          "[scheduler][devices]") {
  SchedulerHarness h(GpuHarnessOptions({0, 1, 2}, 2));
  h.SubmitOk(DeviceSweep("gpu", 12, 8, "gpus_per_trial = 2\n"));
  FakeLauncher& l = h.launcher();
  REQUIRE(l.live_count() == 3);  // 6 slots, 2 per trial
  CheckNoSharedSlot(l, 2);
  for (int guard = 0; l.live_count() > 0; ++guard) {
    REQUIRE(guard < 100);
    h.clock().Advance(1);
    l.Complete(*l.Live().front(), 1.0);
    CheckNoSharedSlot(l, 2);
    CHECK(l.live_count() <= 3);
  }
  CHECK(h.State("gpu") == StudyState::kComplete);
  CHECK(h.Trials("gpu").size() == 12);
  CHECK(l.max_live() == 3);
}

TEST_CASE("a GPU trial that does not fit waits, CPU trials do not, and freed GPUs are held for it",
          "[scheduler][devices]") {
  SchedulerHarness h(GpuHarnessOptions({0, 1}, 1));
  FakeLauncher& l = h.launcher();
  h.SubmitOk(DeviceSweep("small", 6, 2, "gpus_per_trial = 1\n"));
  REQUIRE(l.live_count("small") == 2);
  h.SubmitOk(DeviceSweep("big", 1, 1, "gpus_per_trial = 2\n"));
  CHECK(l.live_count("big") == 0);
  CHECK(h.Trials("big").empty());  // not even created: it waits for its GPUs
  h.SubmitOk(DeviceSweep("cpu", 2, 2, ""));
  REQUIRE(l.live_count("cpu") == 2);  // CPU trials are never held back
  for (Launched* t : l.Live("cpu")) {
    CHECK(t->env()["CUDA_VISIBLE_DEVICES"] == "");
    CHECK(t->env().count("TRIALD_GPU_SLOTS") == 0);
  }

  // One GPU frees up: it is held for "big", not given to "small" again.
  l.Complete(*l.Live("small").front(), 1.0);
  CHECK(l.live_count("small") == 1);
  CHECK(l.live_count("big") == 0);
  l.Complete(*l.Live("small").front(), 1.0);
  REQUIRE(l.live_count("big") == 1);
  CHECK(l.Live("big").front()->env()["CUDA_VISIBLE_DEVICES"] == "0,1");
  CHECK(l.live_count("small") == 0);
  l.Complete(*l.Live("big").front(), 1.0);
  CHECK(l.live_count("small") == 2);  // and "small" goes on
}

TEST_CASE("a sweep asking for more GPUs than triald has is refused at submit",
          "[scheduler][devices]") {
  SchedulerHarness none(GpuHarnessOptions());
  auto r = none.Submit(DeviceSweep("g", 1, 1, "gpus_per_trial = 1\n"));
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(), Catch::Contains("gpus_per_trial = 1: triald has no GPUs"));
  SchedulerHarness two(GpuHarnessOptions({0, 1}, 4));
  r = two.Submit(DeviceSweep("g", 1, 1, "gpus_per_trial = 3\n"));
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(), Catch::Contains("triald has 2 GPU(s); expected at most 2"));
}

TEST_CASE("an ended GPU trial's slot is given out again only once its processes' memory is gone",
          "[scheduler][devices]") {
  SchedulerHarnessOptions o = GpuHarnessOptions({0}, 1, /*probe=*/true, 30);
  const pid_t leader = FakeLauncher::kFirstFakePid;  // the first launch's pid and group
  o.process_groups = {{leader, leader}, {leader + 100, leader}};
  SchedulerHarness h(o);
  FakeLauncher& l = h.launcher();
  h.SubmitOk(DeviceSweep("drain", 2, 2, "gpus_per_trial = 1\n"));
  REQUIRE(l.live_count() == 1);
  Launched& first = *l.Live().front();
  REQUIRE(first.identity.pid == leader);

  // A child of the trial takes GPU memory; the daemon's poll records it as the trial's.
  h.probe().Hold(0, leader + 100, 1 << 30);
  h.scheduler().PollDevices();
  h.probe().Hold(0, leader, 1 << 20);
  l.Complete(first, 1.0);
  CHECK(l.live_count() == 0);  // the slot drains
  CHECK(h.scheduler().gpu_work());
  h.clock().Advance(5);
  h.scheduler().PollDevices();
  CHECK(l.live_count() == 0);
  h.probe().Hold(0, leader, 0);
  h.scheduler().PollDevices();
  CHECK(l.live_count() == 0);  // the child still holds memory
  h.probe().Hold(0, leader + 100, 0);
  h.scheduler().PollDevices();
  REQUIRE(l.live_count() == 1);
  CHECK(l.Live().front()->env()["CUDA_VISIBLE_DEVICES"] == "0");
  auto events = h.storage().GetEvents(std::nullopt);
  REQUIRE(events.ok());
  for (const auto& e : *events) CHECK(e.kind != "gpu_leak");
}

TEST_CASE("a slot whose memory is never freed is given out after the bounded wait, as a leak",
          "[scheduler][devices]") {
  SchedulerHarness h(GpuHarnessOptions({0}, 1, /*probe=*/true, /*timeout=*/30));
  FakeLauncher& l = h.launcher();
  h.SubmitOk(DeviceSweep("leak", 2, 2, "gpus_per_trial = 1\n"));
  Launched& first = *l.Live().front();
  h.probe().Hold(0, first.identity.pid, 1 << 20);
  l.Complete(first, 1.0);
  h.clock().Advance(29);
  h.scheduler().PollDevices();
  CHECK(l.live_count() == 0);
  h.clock().Advance(2);
  h.scheduler().PollDevices();
  REQUIRE(l.live_count() == 1);
  auto events = h.storage().GetEvents(std::nullopt);
  REQUIRE(events.ok());
  int leaks = 0;
  for (const auto& e : *events) {
    if (e.kind != "gpu_leak") continue;
    ++leaks;
    CHECK(e.trial_id == std::optional<int64_t>(h.Trials("leak")[0].id));
    CHECK_THAT(e.detail, Catch::Contains("pid " + std::to_string(first.identity.pid) +
                                         " holds 1048576 bytes on GPU 0"));
  }
  CHECK(leaks == 1);
}

// ---- Retries ----

TEST_CASE(
    "a trial killed by a signal is retried with the same parameters, and n_trials counts "
    "configurations",
    "[scheduler][retry]") {
  SchedulerHarness h(GpuHarnessOptions());
  FakeLauncher& l = h.launcher();
  h.SubmitOk(DeviceSweep("r", 3, 1, "retries = 2\nretry_on = [\"signal\"]\n"));
  l.ExitSignal(*l.Live().front(), SIGSEGV);  // trial 0
  std::vector<TrialRecord> trials = h.Trials("r");
  REQUIRE(trials.size() == 2);
  CHECK(trials[0].state == TrialState::kFail);
  CHECK(trials[0].fail.reason == "signal");
  CHECK(trials[1].retry_of == std::optional<int64_t>(trials[0].id));
  CHECK(trials[1].params.at("x").internal == trials[0].params.at("x").internal);
  REQUIRE(l.live_count() == 1);
  CHECK(l.Live().front()->trial == 1);
  for (int guard = 0; l.live_count() > 0; ++guard) {
    REQUIRE(guard < 10);
    l.Complete(*l.Live().front(), 0.5);
  }
  trials = h.Trials("r");
  REQUIRE(trials.size() == 4);  // 3 configurations, one of them tried twice
  int complete = 0;
  for (const TrialRecord& t : trials) complete += t.state == TrialState::kComplete;
  CHECK(complete == 3);
  CHECK(h.State("r") == StudyState::kComplete);
}

TEST_CASE("retries stop after `retries` per configuration, and other reasons are not retried",
          "[scheduler][retry]") {
  SchedulerHarness h(GpuHarnessOptions());
  FakeLauncher& l = h.launcher();
  h.SubmitOk(DeviceSweep("r", 2, 1, "retries = 2\nretry_on = [\"signal\", \"timeout\"]\n"));
  for (int i = 0; i < 3; ++i) l.ExitSignal(*l.Live().front(), SIGKILL);  // 0, its retries 1, 2
  std::vector<TrialRecord> trials = h.Trials("r");
  REQUIRE(trials.size() == 4);  // the third failure is final; configuration 2 is trial 3
  CHECK(trials[1].retry_of == std::optional<int64_t>(trials[0].id));
  CHECK(trials[2].retry_of == std::optional<int64_t>(trials[1].id));
  CHECK_FALSE(trials[3].retry_of.has_value());
  CHECK(trials[3].params.at("x").internal != trials[0].params.at("x").internal);
  l.ExitCode(*l.Live().front(), 1);  // FAIL(exit): not in retry_on
  CHECK(l.live_count() == 0);
  trials = h.Trials("r");
  REQUIRE(trials.size() == 4);
  CHECK(trials[3].fail.reason == "exit");
  CHECK(h.State("r") == StudyState::kComplete);
}

TEST_CASE("after a daemon crash, lost trials are retried per the policy", "[scheduler][retry]") {
  SchedulerHarness h(GpuHarnessOptions());
  h.SubmitOk(DeviceSweep("lost", 2, 2, "retries = 1\n"));  // default retry_on includes "lost"
  REQUIRE(h.launcher().live_count() == 2);
  h.RestartAndRecover();
  std::vector<TrialRecord> trials = h.Trials("lost");
  REQUIRE(trials.size() == 4);
  for (int n : {0, 1}) {
    CHECK(trials[n].fail.reason == "lost");
    CHECK(trials[n + 2].state == TrialState::kWaiting);
    CHECK(trials[n + 2].retry_of == std::optional<int64_t>(trials[n].id));
    CHECK(trials[n + 2].params.at("x").internal == trials[n].params.at("x").internal);
  }
  h.scheduler().Pump();
  FakeLauncher& l = h.launcher();
  REQUIRE(l.live_count() == 2);
  l.Complete(*l.Live().front(), 1.0);
  l.Complete(*l.Live().front(), 1.0);
  CHECK(h.Trials("lost").size() == 4);
  CHECK(h.State("lost") == StudyState::kComplete);
}

// The event of each retry's start that says where it resumes from, oldest first.
std::vector<std::string> ResumeEvents(SchedulerHarness& h, const std::string& study) {
  auto s = h.storage().GetStudy(study);
  REQUIRE(s.ok());
  auto events = h.storage().GetEvents(s->id);
  REQUIRE(events.ok());
  std::vector<std::string> out;
  for (const model::EventRecord& e : *events) {
    if (e.kind == "resume_folder") out.push_back(e.detail);
  }
  return out;
}

TEST_CASE("a retry gets TRIALD_RETRY_HISTORY, the attempts before it, oldest first",
          "[scheduler][retry]") {
  SchedulerHarnessOptions o = GpuHarnessOptions();
  // A variable of that name in the daemon's environment reaches no worker.
  o.base_env = {"PATH=/usr/bin:/bin", "TRIALD_RETRY_HISTORY=9"};
  SchedulerHarness h(o);
  FakeLauncher& l = h.launcher();
  h.SubmitOk(DeviceSweep("h", 1, 1, "retries = 2\nretry_on = [\"signal\"]\n"));
  REQUIRE(l.live_count() == 1);
  CHECK(l.Live().front()->env().count("TRIALD_RETRY_HISTORY") == 0);  // a first attempt
  l.ExitSignal(*l.Live().front(), SIGKILL);
  REQUIRE(l.live_count() == 1);
  CHECK(l.Live().front()->env().at("TRIALD_RETRY_HISTORY") == "0");
  l.ExitSignal(*l.Live().front(), SIGKILL);
  REQUIRE(l.live_count() == 1);
  CHECK(l.Live().front()->trial == 2);
  CHECK(l.Live().front()->env().at("TRIALD_RETRY_HISTORY") == "0,1");
  l.Complete(*l.Live().front(), 1.0);
  CHECK(h.State("h") == model::StudyState::kComplete);
}

TEST_CASE("a retry gets TRIALD_RESUME_DIR, the failed attempt's own folder, only when it is fit",
          "[scheduler][retry][resume]") {
  testing::TempDir dir;
  const std::string state = dir.File("state");
  const std::string trials = state + "/studies/r/trials/";
  SchedulerHarnessOptions o = GpuHarnessOptions();
  o.state_dir = state;
  // A variable of that name in the daemon's environment reaches no worker.
  o.base_env = {"PATH=/usr/bin:/bin", "TRIALD_RESUME_DIR=/somewhere/else"};
  SchedulerHarness h(o);
  FakeLauncher& l = h.launcher();
  h.SubmitOk(DeviceSweep("r", 3, 1, "retries = 1\nretry_on = [\"signal\"]\n"));
  // The fake launcher makes no folders: each test step makes the failed attempt's by hand.
  auto kill = [&](int expected_trial) {
    REQUIRE(l.live_count() == 1);
    Launched& now = *l.Live().front();
    REQUIRE(now.trial == expected_trial);
    l.ExitSignal(now, SIGKILL);
    REQUIRE(l.live_count() == 1);
    return l.Live().front();
  };
  CHECK(l.Live().front()->env().count("TRIALD_RESUME_DIR") == 0);  // a first attempt
  std::filesystem::create_directories(trials + "0");
  Launched* retry = kill(0);
  CHECK(retry->trial == 1);
  CHECK(retry->env().at("TRIALD_RESUME_DIR") == trials + "0");
  REQUIRE(ResumeEvents(h, "r").size() == 1);
  CHECK(ResumeEvents(h, "r")[0] ==
        "trial 1 resumes from " + trials + "0 (trial 0's folder, TRIALD_RESUME_DIR)");
  l.Complete(*retry, 1.0);

  // A symbolic link where the folder was (planted to hand out another folder): refused.
  std::filesystem::create_directories(trials + "elsewhere");
  std::filesystem::create_directory_symlink(trials + "elsewhere", trials + "2");
  retry = kill(2);
  CHECK(retry->trial == 3);
  CHECK(retry->env().count("TRIALD_RESUME_DIR") == 0);
  REQUIRE(ResumeEvents(h, "r").size() == 2);
  CHECK(ResumeEvents(h, "r")[1] == "trial 3 starts without a resume folder: trial 2's folder " +
                                       trials + "2: " + trials +
                                       "2 is a symbolic link, not the trial's own folder");
  l.Complete(*retry, 1.0);

  // No folder on this node (the attempt never made one, or ran elsewhere).
  retry = kill(4);
  CHECK(retry->env().count("TRIALD_RESUME_DIR") == 0);
  REQUIRE(ResumeEvents(h, "r").size() == 3);
  CHECK(ResumeEvents(h, "r")[2] == "trial 5 starts without a resume folder: trial 4's folder " +
                                       trials + "4 does not exist on this node");
  l.Complete(*retry, 1.0);
  CHECK(h.State("r") == StudyState::kComplete);
}

TEST_CASE("a trial lost to a daemon crash is retried from its folder on this node",
          "[scheduler][retry][resume]") {
  testing::TempDir dir;
  SchedulerHarnessOptions o = GpuHarnessOptions();
  o.state_dir = dir.File("state");
  SchedulerHarness h(o);
  h.SubmitOk(DeviceSweep("lost", 1, 1, "retries = 1\n"));  // default retry_on includes "lost"
  REQUIRE(h.launcher().live_count() == 1);
  const std::string folder = o.state_dir + "/studies/lost/trials/0";
  std::filesystem::create_directories(folder);
  h.RestartAndRecover();  // trial 0 is FAIL(lost), trial 1 its retry
  h.scheduler().Pump();
  REQUIRE(h.launcher().live_count() == 1);
  Launched& retry = *h.launcher().Live().front();
  CHECK(retry.trial == 1);
  CHECK(retry.env().at("TRIALD_RESUME_DIR") == folder);
  CHECK(ResumeEvents(h, "lost") ==
        std::vector<std::string>{"trial 1 resumes from " + folder +
                                 " (trial 0's folder, TRIALD_RESUME_DIR)"});
}

TEST_CASE("a resume folder must be a folder, the retry user's own and readable by that user",
          "[scheduler][retry][resume]") {
  testing::TempDir dir;
  const std::string trials = dir.path() + "/studies/s/trials/";
  std::filesystem::create_directories(trials + "0");
  const uid_t me = ::geteuid();
  CHECK(FindResumeFolder(dir.path(), "s", 0, me).dir == trials + "0");
  CHECK(FindResumeFolder(dir.path(), "s", 0, me).reason.empty());
  // Someone else's folder (a retry run as another user could not read it, or it is not theirs).
  const ResumeFolder other = FindResumeFolder(dir.path(), "s", 0, me + 1);
  CHECK(other.dir.empty());
  CHECK(other.reason == "trial 0's folder " + trials + "0 belongs to uid " + std::to_string(me) +
                            ", not to the retry's user (uid " + std::to_string(me + 1) + ")");
  // Not readable by its owner (the trial took its own permissions away).
  REQUIRE(::chmod((trials + "0").c_str(), 0300) == 0);
  CHECK(FindResumeFolder(dir.path(), "s", 0, me).reason ==
        "trial 0's folder " + trials + "0 is not readable by its owner (mode 0300)");
  REQUIRE(::chmod((trials + "0").c_str(), 0700) == 0);
  // A file where the folder should be, and a link higher up the path.
  std::ofstream(trials + "1") << "not a folder";
  CHECK(FindResumeFolder(dir.path(), "s", 1, me).reason ==
        "trial 1's folder " + trials + "1: " + trials + "1 is not a folder");
  std::filesystem::create_directory_symlink(dir.path() + "/studies/s", dir.path() + "/studies/t");
  CHECK(FindResumeFolder(dir.path(), "t", 0, me).reason ==
        "trial 0's folder " + dir.path() + "/studies/t/trials/0: " + dir.path() +
            "/studies/t is a symbolic link, not the trial's own folder");
}

// Measured metrics ([study] resource_constraints, objectives) and the GPU peak.

constexpr uint64_t kMiB = 1 << 20;

// The worker reports `value`, then its process tree ends with `resources` measured.
void CompleteMeasured(FakeLauncher& l, Launched& t, double value,
                      const model::TrialResources& resources) {
  l.Final(t, value);
  launcher::ProcessOutcome o;
  o.exit.code = 0;
  o.resources = resources;
  l.Exit(t, o);
}

model::TrialResources Memory(uint64_t peak_bytes, double wall_s) {
  model::TrialResources r;
  r.peak_memory_bytes = peak_bytes;
  r.memory_source = "cgroup2 memory.peak";
  r.wall_s = wall_s;
  return r;
}

TEST_CASE("resource_constraints judge the measured resources, infeasible trials still finish",
          "[scheduler][resources]") {
  SchedulerHarness h(GpuHarnessOptions());
  FakeLauncher& l = h.launcher();
  h.SubmitOk(DeviceSweep("mem", 3, 3,
                         "resource_constraints = [\"peak_memory <= 100M\", \"wall >= 1\"]\n"));
  REQUIRE(l.live_count() == 3);
  std::vector<Launched*> live = l.Live();
  l.Constraints(*live[0], {-2});
  CompleteMeasured(l, *live[0], 1.0, Memory(150 * kMiB, 5));
  CompleteMeasured(l, *live[1], 2.0, Memory(50 * kMiB, 0.5));
  // Not measured at all (resources empty): its constraints count as violated.
  l.Complete(*live[2], 3.0);
  std::vector<TrialRecord> trials = h.Trials("mem");
  REQUIRE(trials.size() == 3);
  for (const TrialRecord& t : trials) REQUIRE(t.state == TrialState::kComplete);
  CHECK(trials[0].constraints == std::vector<double>{-2, 50.0 * kMiB, -4});
  CHECK_FALSE(trials[0].Feasible());
  CHECK(trials[0].value == 1.0);
  CHECK(trials[1].constraints == std::vector<double>{-50.0 * kMiB, 0.5});
  CHECK_FALSE(trials[1].Feasible());
  CHECK(trials[2].constraints == std::vector<double>{1.0, 1.0});
  // The measurement is stored with the trial.
  REQUIRE(trials[0].resources.has_value());
  CHECK(*trials[0].resources == Memory(150 * kMiB, 5));
  CHECK(h.State("mem") == StudyState::kComplete);
}

TEST_CASE("a measured objective follows the worker's value, the worker is told to send one",
          "[scheduler][resources]") {
  SchedulerHarness h(GpuHarnessOptions());
  FakeLauncher& l = h.launcher();
  h.SubmitOk(DeviceSweep("two", 2, 2,
                         "directions = [\"minimize\", \"minimize\"]\n"
                         "objectives = [\"value\", \"peak_memory\"]\n"));
  REQUIRE(l.live_count() == 2);
  std::vector<Launched*> live = l.Live();
  CHECK(live[0]->env()["TRIALD_N_OBJECTIVES"] == "1");
  CompleteMeasured(l, *live[0], 0.25, Memory(64 * kMiB, 2));
  l.Complete(*live[1], 0.5);  // nothing measured
  std::vector<TrialRecord> trials = h.Trials("two");
  REQUIRE(trials.size() == 2);
  CHECK(trials[0].state == TrialState::kComplete);
  CHECK(trials[0].values == std::vector<double>{0.25, 64.0 * kMiB});
  CHECK_FALSE(trials[0].value.has_value());
  CHECK(trials[1].state == TrialState::kFail);
  CHECK(trials[1].fail.reason == "protocol");
  CHECK_THAT(trials[1].fail.detail, Catch::StartsWith("objective peak_memory was not measured"));
  // Two values from the worker would break the protocol: it was told to send one.
  SchedulerHarness h2(GpuHarnessOptions());
  h2.SubmitOk(DeviceSweep("two", 1, 1,
                          "directions = [\"minimize\", \"minimize\"]\n"
                          "objectives = [\"value\", \"wall\"]\n"));
  Launched& t = *h2.launcher().Live().front();
  h2.launcher().FinalValues(t, {1, 2});
  h2.launcher().ExitCode(t, 0);
  std::vector<TrialRecord> t2 = h2.Trials("two");
  CHECK(t2[0].state == TrialState::kFail);
  CHECK_THAT(t2[0].fail.detail, Catch::Contains("final line carried 2 objective values"));
}

TEST_CASE(
    "a GPU trial's peak GPU memory is the largest sum of its processes' memory, sampled "
    "at each poll and at exit",
    "[scheduler][devices][resources]") {
  SchedulerHarnessOptions o = GpuHarnessOptions({0, 1}, 1, /*probe=*/true, 30);
  const pid_t leader = FakeLauncher::kFirstFakePid;
  // The trial's child on GPU 1, and a stranger (another process group) on GPU 0.
  o.process_groups = {{leader, leader}, {leader + 100, leader}, {leader + 200, leader}, {7, 7}};
  SchedulerHarness h(o);
  FakeLauncher& l = h.launcher();
  h.SubmitOk(DeviceSweep("gpu", 1, 1,
                         "gpus_per_trial = 2\ndirections = [\"minimize\", \"minimize\"]\n"
                         "objectives = [\"value\", \"peak_gpu_memory\"]\n"));
  REQUIRE(l.live_count() == 1);
  Launched& t = *l.Live().front();
  h.probe().Hold(0, 7, 8000 * kMiB);  // not the trial's
  h.probe().Hold(1, leader + 100, 1000 * kMiB);
  h.probe().Hold(0, leader + 200, devices::kUnknownBytes);  // counts as 0
  h.scheduler().PollDevices();                              // 1000 MiB
  h.probe().Hold(1, leader + 100, 500 * kMiB);
  h.probe().Hold(0, leader, 100 * kMiB);
  h.scheduler().PollDevices();  // 600 MiB: the peak stays 1000
  // Past the last poll the trial grows; the sample at exit sees it (the driver still shows the
  // exited processes' memory).
  h.probe().Hold(0, leader, 900 * kMiB);
  l.Final(t, 1.0);
  l.ExitCode(t, 0);
  std::vector<TrialRecord> trials = h.Trials("gpu");
  REQUIRE(trials.size() == 1);
  REQUIRE(trials[0].state == TrialState::kComplete);
  CHECK(trials[0].values == std::vector<double>{1.0, 1400.0 * kMiB});
  REQUIRE(trials[0].resources.has_value());
  CHECK(trials[0].resources->peak_gpu_memory_bytes == 1400 * kMiB);

  // Its processes all seen holding nothing: a peak of 0.
  h.probe().Hold(0, leader, 0);
  h.probe().Hold(1, leader + 100, 0);
  h.probe().Hold(0, leader + 200, 0);
  h.scheduler().PollDevices();  // the slots drain
  SchedulerHarnessOptions o2 = GpuHarnessOptions({0}, 1, /*probe=*/true, 30);
  SchedulerHarness zero(o2);
  zero.SubmitOk(DeviceSweep(
      "gpu", 1, 1, "gpus_per_trial = 1\nresource_constraints = [\"peak_gpu_memory <= 1M\"]\n"));
  Launched& z = *zero.launcher().Live().front();
  zero.scheduler().PollDevices();
  zero.launcher().Complete(z, 1.0);
  std::vector<TrialRecord> zt = zero.Trials("gpu");
  CHECK(zt[0].constraints == std::vector<double>{-1.0 * kMiB});
  REQUIRE(zt[0].resources.has_value());
  CHECK(zt[0].resources->peak_gpu_memory_bytes == uint64_t{0});

  // The probe failing throughout: not measured, so the constraint counts as violated.
  SchedulerHarness failing(o2);
  failing.probe().Fail("NVML: GPU is lost");
  failing.SubmitOk(DeviceSweep(
      "gpu", 1, 1, "gpus_per_trial = 1\nresource_constraints = [\"peak_gpu_memory <= 1M\"]\n"));
  Launched& f = *failing.launcher().Live().front();
  failing.scheduler().PollDevices();
  failing.launcher().Complete(f, 1.0);
  std::vector<TrialRecord> ft = failing.Trials("gpu");
  CHECK(ft[0].constraints == std::vector<double>{1.0});
  // Nothing measured at all here (the fake launcher measures nothing either): no resources.
  CHECK_FALSE(ft[0].resources.has_value());
}

TEST_CASE("a study measuring GPU memory is refused when triald cannot measure it",
          "[scheduler][devices][resources]") {
  // GPUs given by hand, no NVML.
  SchedulerHarness by_hand(GpuHarnessOptions({0}, 1, /*probe=*/false));
  auto r = by_hand.Submit(DeviceSweep("g", 1, 1,
                                      "gpus_per_trial = 1\n"
                                      "resource_constraints = [\"peak_gpu_memory <= 20G\"]\n"));
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message() ==
        "/tmp/g.toml: [study] resource_constraints entry \"peak_gpu_memory <= 20G\": triald "
        "cannot measure GPU memory (no NVML to report each process's memory; GPUs given by hand "
        "are not watched); expected a daemon with NVML, or no peak_gpu_memory");
  r = by_hand.Submit(DeviceSweep("g", 1, 1,
                                 "gpus_per_trial = 1\ndirections = [\"minimize\", \"minimize\"]\n"
                                 "objectives = [\"value\", \"peak_gpu_memory\"]\n"));
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(),
             Catch::StartsWith("/tmp/g.toml: [study] objectives entry \"peak_gpu_memory\": "
                               "triald cannot measure GPU memory"));
  // Other metrics need no probe; the study was not stored by the refusals.
  by_hand.SubmitOk(
      DeviceSweep("g", 1, 1, "gpus_per_trial = 1\nresource_constraints = [\"wall <= 9\"]\n"));
  SchedulerHarness with_probe(GpuHarnessOptions({0}, 1, /*probe=*/true));
  with_probe.SubmitOk(DeviceSweep(
      "g", 1, 1, "gpus_per_trial = 1\nresource_constraints = [\"peak_gpu_memory <= 20G\"]\n"));
}

}  // namespace
}  // namespace triald::daemon
