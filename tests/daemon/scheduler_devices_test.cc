// The scheduler's GPU slots and retry policy, driven without forking: FakeLauncher plays the
// trial processes, FakeGpuProbe the GPU driver, FakeClock the time, and the real SQLite storage
// (in memory) records what `trialctl` would show.

#include <signal.h>

#include <catch2/catch.hpp>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "daemon/devices/gpu_pool.h"
#include "daemon/scheduler.h"
#include "daemon/storage/sqlite_storage.h"
#include "tests/daemon/fakes.h"

namespace triald::daemon {
namespace {

using model::StudyState;
using model::TrialRecord;
using model::TrialState;
using testing::FakeGpuProbe;
using testing::FakeLauncher;
using Launched = FakeLauncher::Launched;

std::string SweepToml(const std::string& name, int n_trials, int parallelism,
                      const std::string& study_extra) {
  return "[study]\nname = \"" + name + "\"\nn_trials = " + std::to_string(n_trials) +
         "\nparallelism = " + std::to_string(parallelism) + "\n" + study_extra +
         "\n[objective]\nkind = \"exec\"\ncommand = [\"/bin/true\"]\n"
         "\n[space.x]\ntype = \"float\"\nlow = 0.0\nhigh = 1.0\n\n[sampler]\nseed = 3\n";
}

struct Options {
  int max_workers = 16;
  std::vector<int> gpus;  // empty: no GpuPool at all
  int slots_per_gpu = 1;
  bool probe = false;
  double release_timeout_s = 30;
  std::map<pid_t, pid_t> groups;  // pid -> process group, for the pool's pid tracking
};

Options GpuOptions(std::vector<int> gpus, int slots, bool probe = false, double timeout = 30) {
  Options o;
  o.gpus = std::move(gpus);
  o.slots_per_gpu = slots;
  o.probe = probe;
  o.release_timeout_s = timeout;
  return o;
}

// A scheduler over fakes; Restart() replaces it (and the launcher) as after a daemon crash.
class Harness {
 public:
  explicit Harness(Options o = {}) : o_(std::move(o)), probe_(4) {
    auto opened = storage::OpenSqliteStorage({":memory:"});
    REQUIRE(opened.ok());
    storage_ = std::move(opened).value();
    Start();
  }
  void Restart() {
    scheduler_.reset();
    launcher_ = std::make_unique<FakeLauncher>();
    Start();
    REQUIRE(scheduler_->Recover().ok());
  }
  Scheduler& scheduler() { return *scheduler_; }
  FakeLauncher& launcher() { return *launcher_; }
  FakeGpuProbe& probe() { return probe_; }
  testing::FakeClock& clock() { return clock_; }
  storage::Storage& storage() { return *storage_; }

  common::Result<model::StudyRecord> Submit(const std::string& name, int n, int par,
                                            const std::string& extra) {
    return scheduler_->Submit({SweepToml(name, n, par, extra), "/tmp/" + name + ".toml"});
  }
  void SubmitOk(const std::string& name, int n, int par, const std::string& extra) {
    auto r = Submit(name, n, par, extra);
    INFO(r.status().ToString());
    REQUIRE(r.ok());
  }
  std::vector<TrialRecord> Trials(const std::string& name) {
    auto s = storage_->GetStudy(name);
    REQUIRE(s.ok());
    auto t = storage_->GetTrials(s->id);
    REQUIRE(t.ok());
    return *t;
  }
  StudyState State(const std::string& name) { return storage_->GetStudy(name)->state; }

 private:
  void Start() {
    if (!o_.gpus.empty() && !pool_) {
      devices::GpuPoolOptions po;
      po.gpus = o_.gpus;
      po.slots_per_gpu = o_.slots_per_gpu;
      po.probe = o_.probe ? &probe_ : nullptr;
      po.release_timeout_s = o_.release_timeout_s;
      std::map<pid_t, pid_t> groups = o_.groups;
      po.process_group_of = [groups](pid_t pid) {
        auto it = groups.find(pid);
        return it == groups.end() ? pid_t{-1} : it->second;
      };
      pool_ = std::make_unique<devices::GpuPool>(po);
    }
    SchedulerOptions so;
    so.storage = storage_.get();
    so.launcher = launcher_.get();
    so.clock = &clock_;
    so.state_dir = "/srv/triald-test";
    so.max_workers = o_.max_workers;
    so.base_env = {"PATH=/usr/bin:/bin"};
    so.seed_source = [] { return 1; };
    so.gpus = pool_.get();
    scheduler_ = std::make_unique<Scheduler>(std::move(so));
  }

  Options o_;
  std::unique_ptr<storage::Storage> storage_;
  testing::FakeClock clock_;
  FakeGpuProbe probe_;
  std::unique_ptr<devices::GpuPool> pool_;
  std::unique_ptr<FakeLauncher> launcher_ = std::make_unique<FakeLauncher>();
  std::unique_ptr<Scheduler> scheduler_;
};

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
  Harness h(GpuOptions({0, 1, 2}, 2));
  h.SubmitOk("gpu", 12, 8, "gpus_per_trial = 2\n");
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
  Harness h(GpuOptions({0, 1}, 1));
  FakeLauncher& l = h.launcher();
  h.SubmitOk("small", 6, 2, "gpus_per_trial = 1\n");
  REQUIRE(l.live_count("small") == 2);
  h.SubmitOk("big", 1, 1, "gpus_per_trial = 2\n");
  CHECK(l.live_count("big") == 0);
  CHECK(h.Trials("big").empty());  // not even created: it waits for its GPUs
  h.SubmitOk("cpu", 2, 2, "");
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
  Harness none;
  auto r = none.Submit("g", 1, 1, "gpus_per_trial = 1\n");
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(), Catch::Contains("gpus_per_trial = 1: triald has no GPUs"));
  Harness two(GpuOptions({0, 1}, 4));
  r = two.Submit("g", 1, 1, "gpus_per_trial = 3\n");
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(), Catch::Contains("triald has 2 GPU(s); expected at most 2"));
}

TEST_CASE("an ended GPU trial's slot is given out again only once its processes' memory is gone",
          "[scheduler][devices]") {
  Options o = GpuOptions({0}, 1, /*probe=*/true, 30);
  const pid_t leader = FakeLauncher::kFirstFakePid;  // the first launch's pid and group
  o.groups = {{leader, leader}, {leader + 100, leader}};
  Harness h(o);
  FakeLauncher& l = h.launcher();
  h.SubmitOk("drain", 2, 2, "gpus_per_trial = 1\n");
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
  Harness h(GpuOptions({0}, 1, /*probe=*/true, /*timeout=*/30));
  FakeLauncher& l = h.launcher();
  h.SubmitOk("leak", 2, 2, "gpus_per_trial = 1\n");
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
  Harness h;
  FakeLauncher& l = h.launcher();
  h.SubmitOk("r", 3, 1, "retries = 2\nretry_on = [\"signal\"]\n");
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
  Harness h;
  FakeLauncher& l = h.launcher();
  h.SubmitOk("r", 2, 1, "retries = 2\nretry_on = [\"signal\", \"timeout\"]\n");
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
  Harness h;
  h.SubmitOk("lost", 2, 2, "retries = 1\n");  // default retry_on includes "lost"
  REQUIRE(h.launcher().live_count() == 2);
  h.Restart();
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

}  // namespace
}  // namespace triald::daemon
