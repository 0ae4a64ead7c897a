// TrialStarter (daemon/scheduler/trial_starter.h): a claimed trial launched with its spec, a
// retry's resume folder and its event, and a failed launch, over a FakeLauncher, a fake
// environment and SQLite in memory.

#include "daemon/scheduler/trial_starter.h"

#include <catch2/catch.hpp>
#include <cerrno>
#include <memory>
#include <string>
#include <vector>

#include "daemon/scheduler/study_loader.h"
#include "tests/daemon/fake_scheduler_env.h"
#include "tests/daemon/fakes.h"
#include "tests/daemon/parts_fixture.h"

namespace triald::daemon {
namespace {

const char* const kSweep = R"([study]
name = "s"
n_trials = 4

[objective]
kind = "exec"
command = ["train", "--fast"]

[space.x]
type = "float"
low = 0
high = 1
)";

struct StarterFixture : PartsFixture {
  testing::FakeSchedulerEnv env;
  testing::FakeLauncher launcher;
  std::unique_ptr<NodeCoordinator> coordinator = MakeCoordinator();
  std::unique_ptr<StudyRuntime> study;
  std::unique_ptr<TrialStarter> starter;

  StarterFixture() {
    auto submitted = StudyLoader(LoaderOptions(&env)).Submit({kSweep, "/s/a.toml"}, {});
    REQUIRE(submitted.ok());
    study = std::move(submitted).value();
    TrialStarter::Options o;
    o.launcher = &launcher;
    o.storage = storage.get();
    o.logger = common::MakeNullLogger();
    o.recorder = recorder.get();
    o.coordinator = coordinator.get();
    o.env = &env;
    o.settings.state_dir = "/srv/t";
    o.settings.base_env = {"PATH=/usr/bin", "HOME=/home/u"};
    starter = std::make_unique<TrialStarter>(std::move(o));
  }
  // A WAITING trial of the study, stored and mirrored; `retry_of`: the id of the trial it retries.
  int NewTrial(std::optional<int64_t> retry_of = std::nullopt) {
    auto t = storage->CreateTrial(study->record.id, {}, 1, retry_of);
    REQUIRE(t.ok());
    study->trials.push_back(*t);
    return t->number;
  }
  std::vector<std::string> Events() {
    std::vector<std::string> out;
    for (std::string& e : EventsOf(study->record.id, [](const model::EventRecord& e) {
           return e.kind + ": " + e.detail;
         })) {
      if (e.rfind("study_submitted: ", 0) != 0) out.push_back(std::move(e));
    }
    return out;
  }
};

TEST_CASE("trial starter: a claimed trial is launched with its spec and holds its process",
          "[scheduler][start]") {
  StarterFixture f;
  const int number = f.NewTrial();
  TrialStarter::Failure failure;
  std::unique_ptr<RunningTrial> rt = f.starter->Launch(*f.study, number, {}, {}, &failure);
  REQUIRE(rt != nullptr);
  REQUIRE(f.launcher.launch_count() == 1);
  testing::FakeLauncher::Launched& l = f.launcher.launch(0);
  CHECK(l.study == "s");
  CHECK(l.trial == number);
  CHECK(l.env().at("HOME") == "/home/u");
  CHECK(l.env().count("TRIALD_RESUME_DIR") == 0);
  CHECK(l.spec.argv == std::vector<std::string>{"train", "--fast"});
  CHECK(rt->study == f.study.get());
  CHECK(rt->number == number);
  CHECK(rt->process->identity().pid == l.identity.pid);
  CHECK(rt->channel != nullptr);
  CHECK_FALSE(rt->starting);
  CHECK(rt->gpus.empty());
  CHECK(f.Events().empty());  // not a retry: no resume_folder event
}

TEST_CASE("trial starter: a fork server's start is pending until the launcher starts it",
          "[scheduler][start]") {
  StarterFixture f;
  f.launcher.async_start = true;
  TrialStarter::Failure failure;
  std::unique_ptr<RunningTrial> rt = f.starter->Launch(*f.study, f.NewTrial(), {}, {}, &failure);
  REQUIRE(rt != nullptr);
  CHECK(rt->starting);
}

TEST_CASE("trial starter: a retry is told which folder it resumes from, or why none",
          "[scheduler][start]") {
  StarterFixture f;
  const int first = f.NewTrial();
  const int retry = f.NewTrial(f.study->trials[first].id);
  TrialStarter::Failure failure;
  SECTION("launched: a resume_folder event") {
    REQUIRE(f.starter->Launch(*f.study, retry, {}, {}, &failure) != nullptr);
    CHECK(f.Events() == std::vector<std::string>{
                            "resume_folder: trial 1 starts without a resume folder: trial 0's "
                            "folder does not exist (fake)"});
  }
  SECTION("not launched: no event, and the launcher's words") {
    f.launcher.FailNextLaunch("exec train: Permission denied",
                              {launcher::SpawnStep::kExec, EACCES});
    CHECK(f.starter->Launch(*f.study, retry, {}, {}, &failure) == nullptr);
    CHECK(failure.message == "exec train: Permission denied");
    CHECK(failure.error.step == launcher::SpawnStep::kExec);
    CHECK(failure.error.error_number == EACCES);
    CHECK(f.Events().empty());
  }
}

}  // namespace
}  // namespace triald::daemon
