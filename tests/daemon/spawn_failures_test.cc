// SpawnFailures (daemon/scheduler/spawn_failures.h): what follows a trial that could not be
// started, as events a user reads, with the time from a FakeClock and SQLite in memory.

#include "daemon/scheduler/spawn_failures.h"

#include <catch2/catch.hpp>
#include <cerrno>
#include <memory>
#include <string>
#include <vector>

#include "daemon/storage/sqlite_storage.h"
#include "tests/daemon/fakes.h"

namespace triald::daemon {
namespace {

using launcher::SpawnError;
using launcher::SpawnStep;

struct Fixture {
  testing::FakeClock clock;
  std::unique_ptr<storage::Storage> storage;
  std::unique_ptr<StudyRecorder> recorder;
  std::unique_ptr<SpawnFailures> failures;
  ActiveStudies studies;

  Fixture() {
    auto opened = storage::OpenSqliteStorage({":memory:"});
    REQUIRE(opened.ok());
    storage = std::move(opened).value();
    StudyRecorder::Options ro;
    ro.storage = storage.get();
    ro.clock = &clock;
    ro.logger = common::MakeNullLogger();
    recorder = std::make_unique<StudyRecorder>(std::move(ro));
    SpawnFailures::Options o;
    o.clock = &clock;
    o.logger = common::MakeNullLogger();
    o.recorder = recorder.get();
    failures = std::make_unique<SpawnFailures>(std::move(o));
  }
  StudyRuntime& Study(const std::string& name) {
    model::NewStudy ns;
    ns.name = name;
    ns.n_trials = 2;
    ns.spec_toml = "[study]\n";
    auto rec = storage->CreateStudy(ns, 1);
    REQUIRE(rec.ok());
    auto rt = std::make_unique<StudyRuntime>();
    rt->record = *rec;
    auto t = storage->CreateTrial(rec->id, {}, 1);
    REQUIRE(t.ok());
    rt->trials.push_back(*t);
    return *(studies[rec->id] = std::move(rt));
  }
  std::vector<std::string> EventKinds(int64_t study_id) {
    auto r = storage->GetEvents(study_id);
    REQUIRE(r.ok());
    std::vector<std::string> out;
    for (const auto& e : *r) out.push_back(e.kind);
    return out;
  }
};

TEST_CASE("spawn failures: each is an event; the third persistent one holds the study",
          "[scheduler][spawn]") {
  Fixture f;
  StudyRuntime& s = f.Study("s");
  for (int i = 0; i < 3; ++i) {
    f.failures->OnFailure(s, 0, {SpawnStep::kExec, ENOENT}, "exec train: No such file");
  }
  CHECK(s.spawn.held());
  CHECK(f.EventKinds(s.record.id) ==
        std::vector<std::string>{"spawn_failed", "spawn_failed", "spawn_failed", "study_held"});
  auto status = f.failures->Status(s);
  REQUIRE(status.has_value());
  CHECK(status->held);
  CHECK(status->failures == 3);
  CHECK(status->reason == "exec train: No such file");

  f.failures->OnStarted(s, 0);
  CHECK_FALSE(s.spawn.backing_off());
  CHECK_FALSE(f.failures->Status(s).has_value());
  CHECK(f.EventKinds(s.record.id).back() == "spawn_recovered");
  // A start with no back-off before it records nothing.
  f.failures->OnStarted(s, 0);
  CHECK(f.EventKinds(s.record.id).size() == 5);
}

TEST_CASE("spawn failures: the wake-up is the earliest back-off of a running study",
          "[scheduler][spawn]") {
  Fixture f;
  StudyRuntime& a = f.Study("a");
  StudyRuntime& b = f.Study("b");
  CHECK_FALSE(f.failures->WakeDelay(f.studies).has_value());
  const SpawnError busy{SpawnStep::kFork, EAGAIN};
  f.failures->OnFailure(a, 0, busy, "busy");  // 0.1 s
  f.failures->OnFailure(a, 0, busy, "busy");  // 0.2 s
  f.failures->OnFailure(b, 0, busy, "busy");  // 0.1 s
  REQUIRE(f.failures->WakeDelay(f.studies).has_value());
  CHECK(*f.failures->WakeDelay(f.studies) == Approx(0.1));
  f.clock.Advance(0.15);
  CHECK(*f.failures->WakeDelay(f.studies) == Approx(0.0));  // due already: never negative
  b.record.state = model::StudyState::kCancelled;           // no longer waits for anything
  CHECK(*f.failures->WakeDelay(f.studies) == Approx(0.05));
}

}  // namespace
}  // namespace triald::daemon
