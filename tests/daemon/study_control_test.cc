// StudyControl (daemon/scheduler/study_control.h) and StudyRecorder: the control verbs against
// SQLite in memory and a host that plays the scheduler, and the one step of a study change.

#include "daemon/scheduler/study_control.h"

#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <vector>

#include "daemon/scheduler/study_recorder.h"
#include "daemon/storage/sqlite_storage.h"
#include "tests/daemon/fake_scheduler_env.h"
#include "tests/daemon/fakes.h"

namespace triald::daemon {
namespace {

using model::StudyState;

// Plays the scheduler: one active study (or none), and what the verbs asked of it.
class RecordingHost final : public ControlHost {
 public:
  StudyRuntime* active = nullptr;
  bool shutting = false;
  std::vector<int> finished;  // trial numbers FinishTrial ended
  std::vector<int64_t> forgotten;
  int stops = 0, pumps = 0, activations = 0;

  bool shutting_down() const override { return shutting; }
  StudyRuntime* ActiveStudy(int64_t id) override {
    return active != nullptr && active->record.id == id ? active : nullptr;
  }
  common::Status Activate(const model::StudyRecord&,
                          std::optional<std::vector<model::TrialRecord>>) override {
    ++activations;
    return common::Status::Ok();
  }
  void Forget(int64_t id) override { forgotten.push_back(id); }
  void FinishTrial(StudyRuntime& study, int number, const model::TrialOutcome& outcome,
                   bool) override {
    study.trials[number].state = outcome.state;
    finished.push_back(number);
  }
  void StopTrials(StudyRuntime&) override { ++stops; }
  void Pump() override { ++pumps; }
  void StorageRefused(const common::Status&) override {}
};

struct ControlFixture {
  testing::FakeClock clock;
  testing::FakeSchedulerEnv env;
  std::unique_ptr<storage::Storage> storage;
  std::unique_ptr<NodeCoordinator> coordinator;
  std::unique_ptr<StudyRecorder> recorder;
  RecordingHost host;
  std::unique_ptr<StudyControl> control;
  StudyRuntime study;

  ControlFixture() {
    auto opened = storage::OpenSqliteStorage({":memory:"});
    REQUIRE(opened.ok());
    storage = std::move(opened).value();
    CoordinatorOptions co;
    co.storage = storage.get();
    co.clock = &clock;
    co.logger = common::MakeNullLogger();
    coordinator = MakeNodeCoordinator(std::move(co));
    StudyRecorder::Options ro;
    ro.storage = storage.get();
    ro.clock = &clock;
    ro.logger = common::MakeNullLogger();
    recorder = std::make_unique<StudyRecorder>(std::move(ro));
    StudyControl::Options o;
    o.storage = storage.get();
    o.clock = &clock;
    o.logger = common::MakeNullLogger();
    o.coordinator = coordinator.get();
    o.recorder = recorder.get();
    o.env = &env;
    o.host = &host;
    o.state_dir = "/srv/t";
    control = std::make_unique<StudyControl>(std::move(o));
    model::NewStudy ns;
    ns.name = "s";
    ns.n_trials = 4;
    ns.spec_toml = "[study]\n";
    auto rec = storage->CreateStudy(ns, 1);
    REQUIRE(rec.ok());
    study.record = *rec;
    for (int i = 0; i < 2; ++i) {
      auto t = storage->CreateTrial(rec->id, {}, 2);
      REQUIRE(t.ok());
      study.trials.push_back(*t);
      study.waiting.push_back(t->number);
    }
  }
  model::StudyRecord Stored() {
    auto r = storage->GetStudy("s");
    REQUIRE(r.ok());
    return *r;
  }
  std::vector<std::string> EventKinds(std::optional<int64_t> id) {
    auto r = storage->GetEvents(id);
    REQUIRE(r.ok());
    std::vector<std::string> out;
    for (const auto& e : *r) out.push_back(e.kind);
    return out;
  }
};

TEST_CASE("control: cancel ends the waiting trials, stops the running ones, and is stored",
          "[scheduler][control]") {
  ControlFixture f;
  f.host.active = &f.study;
  REQUIRE(f.control->Cancel("s").ok());
  CHECK(f.Stored().state == StudyState::kCancelled);
  CHECK(f.study.record.state == StudyState::kCancelled);
  CHECK(f.host.finished == std::vector<int>{0, 1});
  CHECK(f.host.stops == 1);
  CHECK(f.host.pumps == 1);
  CHECK(f.EventKinds(f.study.record.id) == std::vector<std::string>{"study_cancelled"});
  auto again = f.control->Cancel("s");
  CHECK(again.code() == common::Code::kFailedPrecondition);
}

TEST_CASE("control: pause and resume are stored, mirrored and refused when redundant",
          "[scheduler][control]") {
  ControlFixture f;
  f.host.active = &f.study;
  auto paused = f.control->Pause("s", true);
  REQUIRE(paused.ok());
  CHECK(f.Stored().paused);
  CHECK(f.study.record.paused);
  CHECK(f.control->Pause("s", true).status().code() == common::Code::kFailedPrecondition);
  REQUIRE(f.control->Pause("s", false).ok());
  CHECK_FALSE(f.Stored().paused);
  CHECK(f.EventKinds(f.study.record.id) ==
        std::vector<std::string>{"study_paused", "study_resumed"});
  CHECK(f.control->Pause("nope", true).status().code() == common::Code::kNotFound);
  f.host.shutting = true;
  CHECK(f.control->Pause("s", true).status().code() == common::Code::kUnavailable);
}

TEST_CASE("control: a FAILED study is neither extended nor given a parallelism",
          "[scheduler][control]") {
  ControlFixture f;
  model::StudyRecord rec = f.study.record;
  REQUIRE(f.recorder->SetState(rec, nullptr, StudyState::kFailed, "study_failed", "why").ok());
  CHECK(f.Stored().state == StudyState::kFailed);
  auto extended = f.control->Extend("s", 10);
  CHECK(extended.status().code() == common::Code::kFailedPrecondition);
  CHECK_THAT(extended.status().message(), Catch::Contains("FAILED"));
  CHECK(f.control->SetParallelism("s", 2).status().code() == common::Code::kFailedPrecondition);
}

TEST_CASE("control: extending a COMPLETE study reopens it and loads it here",
          "[scheduler][control]") {
  ControlFixture f;
  model::StudyRecord rec = f.study.record;
  REQUIRE(f.recorder->SetState(rec, nullptr, StudyState::kComplete, "study_complete", "").ok());
  auto extended = f.control->Extend("s", 10);
  INFO(extended.status().ToString());
  REQUIRE(extended.ok());
  CHECK(extended->state == StudyState::kRunning);
  CHECK(f.Stored().state == StudyState::kRunning);
  CHECK(f.Stored().n_trials == 10);
  CHECK(f.host.activations == 1);
}

TEST_CASE("control: delete removes the study, forgets it, and purges its folder through the env",
          "[scheduler][control]") {
  ControlFixture f;
  auto deleted = f.control->Delete("s", /*purge=*/true);
  REQUIRE(deleted.ok());
  CHECK(*deleted == 2);
  CHECK(f.storage->GetStudy("s").status().code() == common::Code::kNotFound);
  CHECK(f.host.forgotten == std::vector<int64_t>{f.study.record.id});
  CHECK(f.env.removed == std::vector<std::string>{"/srv/t/studies/s"});
  CHECK(f.EventKinds(std::nullopt).back() == "study_deleted");
}

}  // namespace
}  // namespace triald::daemon
