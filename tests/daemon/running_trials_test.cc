// RunningTrials (daemon/scheduler/running_trials.h): which of this node's launched trials are
// stopped, and how, when a study's trials or every trial must go, over FakeLauncher processes.

#include "daemon/scheduler/running_trials.h"

#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <vector>

#include "daemon/storage/sqlite_storage.h"
#include "tests/daemon/fakes.h"

namespace triald::daemon {
namespace {

using launcher::StopReason;

struct RunningFixture {
  testing::FakeLauncher launcher;
  std::unique_ptr<storage::Storage> storage;
  StudyRuntime a, b;
  RunningTrials running{common::MakeNullLogger()};

  RunningFixture() {
    auto opened = storage::OpenSqliteStorage({":memory:"});
    REQUIRE(opened.ok());
    storage = std::move(opened).value();
    a.record.id = 1;
    a.record.name = "a";
    b.record.id = 2;
    b.record.name = "b";
  }
  // Launches trial `number` of `study` (trial id = the launch's index + 10).
  testing::FakeLauncher::Launched& Add(StudyRuntime& study, int number) {
    study.trials.resize(std::max<size_t>(study.trials.size(), number + 1));
    auto proc = launcher.Launch(launcher::LaunchSpec{}, {});
    REQUIRE(proc.ok());
    auto rt = std::make_unique<RunningTrial>();
    rt->study = &study;
    rt->number = number;
    rt->process = std::move(proc).value();
    TrialChannel::Options co;
    co.storage = storage.get();
    co.logger = common::MakeNullLogger();
    co.process = rt->process.get();
    co.study = &study;
    co.number = number;
    rt->channel = std::make_unique<TrialChannel>(std::move(co));
    const size_t index = launcher.launch_count() - 1;
    running.Add(static_cast<int64_t>(index) + 10, std::move(rt));
    return launcher.launch(index);
  }
};

TEST_CASE("running trials: a study's trials are stopped as cancelled, the others run on",
          "[scheduler][running]") {
  RunningFixture f;
  auto& a0 = f.Add(f.a, 0);
  auto& a1 = f.Add(f.a, 1);
  auto& b0 = f.Add(f.b, 0);
  f.running.StopStudy(f.a, /*ended_elsewhere=*/false);
  CHECK(a0.stops == std::vector<StopReason>{StopReason::kCancel});
  CHECK(a1.stops == std::vector<StopReason>{StopReason::kCancel});
  CHECK(b0.stops.empty());
  f.running.StopAll();
  CHECK(b0.stops == std::vector<StopReason>{StopReason::kShutdown});
  CHECK(a0.stops.back() == StopReason::kShutdown);
}

TEST_CASE("running trials: only trials another node ended are stopped, each once",
          "[scheduler][running]") {
  RunningFixture f;
  auto& a0 = f.Add(f.a, 0);
  auto& a1 = f.Add(f.a, 1);
  f.a.trials[1].state = model::TrialState::kFail;  // ended elsewhere (storage says so)
  f.a.trials[1].fail.reason = "lost";
  f.running.StopStudy(f.a, /*ended_elsewhere=*/true);
  f.running.StopStudy(f.a, /*ended_elsewhere=*/true);
  CHECK(a0.stops.empty());
  CHECK(a1.stops == std::vector<StopReason>{StopReason::kCancel});
  CHECK(f.running.Find(11)->channel->taken_over());
  CHECK_FALSE(f.running.Find(10)->channel->taken_over());
}

TEST_CASE("running trials: found by trial id until taken out, the dashboard's view",
          "[scheduler][running]") {
  RunningFixture f;
  f.Add(f.a, 3);
  f.Add(f.b, 0);
  CHECK(f.running.size() == 2);
  CHECK_FALSE(f.running.HoldGpus());
  std::vector<RunningTrialView> views = f.running.Views();
  REQUIRE(views.size() == 2);
  CHECK(views[0].study_id == 1);
  CHECK(views[0].number == 3);
  CHECK(views[0].gpu_slots.empty());
  CHECK(views[1].study_id == 2);
  std::unique_ptr<RunningTrial> taken = f.running.Take(10);
  REQUIRE(taken != nullptr);
  CHECK(taken->number == 3);
  CHECK(f.running.Find(10) == nullptr);
  CHECK(f.running.Take(10) == nullptr);
  CHECK(f.running.size() == 1);
  taken.reset();
  CHECK(f.launcher.launch(0).destroyed);
  CHECK_FALSE(f.launcher.launch(1).destroyed);
}

}  // namespace
}  // namespace triald::daemon
