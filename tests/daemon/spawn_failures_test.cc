// SpawnFailures (daemon/scheduler/spawn_failures.h): what follows a trial that could not be
// started, as events a user reads, with the time from a FakeClock and SQLite in memory.

#include "daemon/scheduler/spawn_failures.h"

#include <catch2/catch.hpp>
#include <cerrno>
#include <memory>
#include <string>
#include <vector>

#include "tests/daemon/fakes.h"
#include "tests/daemon/parts_fixture.h"

namespace triald::daemon {
namespace {

using launcher::SpawnError;
using launcher::SpawnStep;

struct Fixture : PartsFixture {
  std::unique_ptr<SpawnFailures> failures;
  ActiveStudies studies;

  Fixture() {
    SpawnFailures::Options o;
    o.clock = &clock;
    o.logger = common::MakeNullLogger();
    o.recorder = recorder.get();
    failures = std::make_unique<SpawnFailures>(std::move(o));
  }
  StudyRuntime& Study(const std::string& name) {
    auto rt = std::make_unique<StudyRuntime>();
    rt->record = StoredStudy(name, 2);
    auto t = storage->CreateTrial(rt->record.id, {}, 1);
    REQUIRE(t.ok());
    rt->trials.push_back(*t);
    const int64_t id = rt->record.id;
    return *(studies[id] = std::move(rt));
  }
  std::vector<std::string> EventKinds(int64_t study_id) { return EventsOf(study_id); }
};

TEST_CASE("spawn failures: each is an event, the third persistent one holds the study",
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
