// FollowStoredStudies (daemon/scheduler/stored_studies.h): this node's active studies brought in
// line with the stored ones: dropped when deleted elsewhere and idle here, joined when RUNNING
// and new here; over SQLite in memory, a fake environment and the local coordinator.

#include "daemon/scheduler/stored_studies.h"

#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <vector>

#include "tests/daemon/fake_scheduler_env.h"
#include "tests/daemon/fakes.h"
#include "tests/daemon/parts_fixture.h"

namespace triald::daemon {
namespace {

std::string Sweep(const std::string& name) {
  return "[study]\nname = \"" + name +
         "\"\nn_trials = 3\n\n[objective]\nkind = \"exec\"\ncommand = [\"train\"]\n\n"
         "[space.x]\ntype = \"float\"\nlow = 0\nhigh = 1\n";
}

struct StoredFixture : PartsFixture {
  testing::FakeSchedulerEnv env;
  std::unique_ptr<NodeCoordinator> coordinator = MakeCoordinator();
  std::unique_ptr<StudyLoader> loader = std::make_unique<StudyLoader>(LoaderOptions(&env));
  ActiveStudies studies;

  // A study submitted (stored); active here when `active`.
  model::StudyRecord Submit(const std::string& name, bool active) {
    auto rt = loader->Submit({Sweep(name), "/s/" + name + ".toml"}, {});
    REQUIRE(rt.ok());
    model::StudyRecord rec = (*rt)->record;
    if (active) studies[rec.id] = std::move(rt).value();
    return rec;
  }
  std::vector<int64_t> Follow(const std::vector<model::StudyRecord>& stored) {
    FollowOptions o;
    o.coordinator = coordinator.get();
    o.loader = loader.get();
    o.logger = common::MakeNullLogger();
    return FollowStoredStudies(stored, &studies, o);
  }
};

TEST_CASE("stored studies: a study deleted elsewhere is dropped once nothing of it runs here",
          "[scheduler][shared]") {
  StoredFixture f;
  const model::StudyRecord kept = f.Submit("kept", true);
  const model::StudyRecord idle = f.Submit("idle", true);
  const model::StudyRecord busy = f.Submit("busy", true);
  f.studies[busy.id]->running = 1;
  const StudyRuntime* before = f.studies[kept.id].get();
  CHECK(f.Follow({kept}) == std::vector<int64_t>{idle.id});
  CHECK(f.studies.count(idle.id) == 0);
  REQUIRE(f.studies.count(busy.id) == 1);     // its trial still runs here
  CHECK(f.studies[kept.id].get() == before);  // still stored: the same runtime goes on
  f.studies[busy.id]->running = 0;
  f.studies[busy.id]->pending_finishes = 1;  // a trial end not stored yet
  CHECK(f.Follow({kept}).empty());
  f.studies[busy.id]->pending_finishes = 0;
  CHECK(f.Follow({kept}) == std::vector<int64_t>{busy.id});
}

TEST_CASE("stored studies: a RUNNING study new here is joined, with its trials",
          "[scheduler][shared]") {
  StoredFixture f;
  model::StudyRecord other = f.Submit("other", false);
  REQUIRE(f.storage->CreateTrial(other.id, {}, 2).ok());
  model::StudyRecord done = f.Submit("done", false);
  done.state = model::StudyState::kComplete;
  CHECK(f.Follow({other, done}).empty());
  REQUIRE(f.studies.count(other.id) == 1);
  CHECK(f.studies[other.id]->trials.size() == 1);
  CHECK(f.studies[other.id]->waiting.size() == 1);
  CHECK(f.studies.count(done.id) == 0);  // not RUNNING: nothing to join
}

}  // namespace
}  // namespace triald::daemon
