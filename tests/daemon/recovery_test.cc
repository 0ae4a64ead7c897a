// Recovery (daemon/scheduler/recovery.h): the trials a previous daemon left RUNNING end
// FAIL(lost) with an event, after their processes were handed to the leftover kill.

#include "daemon/scheduler/recovery.h"

#include <catch2/catch.hpp>
#include <memory>
#include <vector>

#include "daemon/storage/sqlite_storage.h"
#include "tests/daemon/fakes.h"

namespace triald::daemon {
namespace {

TEST_CASE("recovery: running trials end lost, waiting ones are left alone",
          "[scheduler][recovery]") {
  testing::FakeClock clock;
  testing::FakeLeftovers leftovers;
  auto opened = storage::OpenSqliteStorage({":memory:"});
  REQUIRE(opened.ok());
  std::unique_ptr<storage::Storage> storage = std::move(opened).value();
  model::NewStudy ns;
  ns.name = "s";
  ns.n_trials = 3;
  ns.spec_toml = "[study]\n";
  auto study = storage->CreateStudy(ns, 1);
  REQUIRE(study.ok());
  auto running = storage->CreateTrial(study->id, {}, 2);
  auto waiting = storage->CreateTrial(study->id, {}, 2);
  REQUIRE(running.ok());
  REQUIRE(waiting.ok());
  const model::ProcessIdentity id{4242, 4242, 99};
  REQUIRE(storage->MarkRunning(running->id, id, 3).ok());

  CoordinatorOptions co;
  co.storage = storage.get();
  co.clock = &clock;
  co.logger = common::MakeNullLogger();
  std::unique_ptr<NodeCoordinator> coordinator = MakeNodeCoordinator(std::move(co));
  REQUIRE(coordinator->Join().ok());
  RecoveryOptions o;
  o.storage = storage.get();
  o.clock = &clock;
  o.logger = common::MakeNullLogger();
  o.coordinator = coordinator.get();
  o.leftovers = &leftovers;
  o.state_dir = "/srv/t";
  common::Result<Recovered> recovered = EndLostTrials(o);
  INFO(recovered.status().ToString());
  REQUIRE(recovered.ok());

  REQUIRE(recovered->studies.size() == 1);
  CHECK(recovered->lost == std::map<int64_t, std::vector<int>>{{study->id, {running->number}}});
  REQUIRE(leftovers.requests.size() == 1);
  CHECK(leftovers.requests[0].state_dir == "/srv/t");
  REQUIRE(leftovers.requests[0].lost.size() == 1);
  CHECK(leftovers.requests[0].lost[0].pid == 4242);
  auto trials = storage->GetTrials(study->id);
  REQUIRE(trials.ok());
  CHECK((*trials)[0].state == model::TrialState::kFail);
  CHECK((*trials)[0].fail.reason == "lost");
  CHECK((*trials)[1].state == model::TrialState::kWaiting);
  auto events = storage->GetEvents(study->id);
  REQUIRE(events.ok());
  REQUIRE(events->size() == 1);
  CHECK(events->front().kind == "trial_lost");
}

}  // namespace
}  // namespace triald::daemon
