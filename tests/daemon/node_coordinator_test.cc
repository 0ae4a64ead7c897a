// Node coordination on its own (daemon/scheduler/node_coordinator.h, shared_coordinator.h): the
// local coordinator answers without touching storage, and the shared one's lease and dead-node
// decisions. The whole protocol through schedulers is scheduler_shared_test.cc.

#include "daemon/scheduler/node_coordinator.h"

#include <catch2/catch.hpp>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "daemon/scheduler/shared_coordinator.h"
#include "daemon/storage/sqlite_storage.h"
#include "tests/daemon/fakes.h"
#include "tests/daemon/flaky_storage.h"
#include "tests/support/temp_dir.h"

namespace triald::daemon {
namespace {

using model::StudyState;
using model::TrialRecord;
using model::TrialState;

constexpr double kNodeTimeout = 30;

// Records what the coordinator asked of the scheduler.
class RecordingHost final : public CoordinatorHost {
 public:
  void StopTrialsEndedElsewhere(StudyCache& study) override {
    calls.push_back("stop ended elsewhere: " + study.record.name);
  }
  void StopStudyTrials(StudyCache& study) override {
    calls.push_back("stop all: " + study.record.name);
  }
  void FenceOwnTrials(const std::string& why) override { calls.push_back("fence: " + why); }
  void RecordEvent(const StudyCache&, const TrialRecord* trial, const std::string& kind,
                   const std::string& detail) override {
    calls.push_back("event " + kind + " trial " + (trial ? std::to_string(trial->number) : "-") +
                    ": " + detail);
  }
  void FinishTrial(StudyCache&, int number, const model::TrialOutcome& outcome, bool own) override {
    calls.push_back("finish trial " + std::to_string(number) + " " +
                    model::TrialStateName(outcome.state) + "(" + outcome.fail.reason + ")" +
                    (own ? " own" : " other's"));
  }
  StudyCache* FindStudy(int64_t id) override {
    auto it = studies.find(id);
    return it == studies.end() ? nullptr : it->second;
  }

  std::vector<std::string> calls;
  std::map<int64_t, StudyCache*> studies;
};

TrialRecord Trial(int number, TrialState state, const std::string& node) {
  TrialRecord t;
  t.id = 100 + number;
  t.study_id = 1;
  t.number = number;
  t.state = state;
  t.node = node;
  return t;
}

TEST_CASE("the local coordinator answers every question without touching storage",
          "[coordinator]") {
  auto opened = storage::OpenSqliteStorage({":memory:"});
  REQUIRE(opened.ok());
  testing::FlakyStorage storage(std::move(opened).value());
  storage.down = true;  // every storage call fails: the local coordinator must make none
  testing::FakeClock clock;
  RecordingHost host;
  CoordinatorOptions co;
  co.storage = &storage;
  co.clock = &clock;
  co.host = &host;
  std::unique_ptr<NodeCoordinator> c = MakeNodeCoordinator(co);
  REQUIRE(dynamic_cast<LocalCoordinator*>(c.get()) != nullptr);

  StudyCache study;
  study.record.id = 1;
  study.record.name = "solo";
  study.record.n_trials = 4;
  study.trials = {Trial(0, TrialState::kRunning, "elsewhere"), Trial(1, TrialState::kWaiting, ""),
                  Trial(2, TrialState::kWaiting, "")};
  study.waiting = {1, 2};
  study.running = 1;

  // Recovery: every trial is this daemon's, and a study it cannot load is not left to others.
  CHECK(c->Join().ok());
  CHECK(c->IsOwn(study.trials[0]));
  CHECK_FALSE(c->EndedElsewhere(common::FailedPrecondition("trial 0 is already finished")));
  CHECK_FALSE(c->LeaveToOthers(study.record, common::InvalidArgument("bad sweep")));
  CHECK_FALSE(c->LeftToOthers("solo"));

  // Decisions: nothing to lock or re-read; a pass is one batch.
  CHECK(c->BeginPass() != nullptr);
  StorageBatch batch(&storage, common::MakeNullLogger());
  common::Result<std::unique_ptr<StorageBatch>> locked = c->Lock(study);
  REQUIRE(locked.ok());
  CHECK(*locked == nullptr);
  common::Result<model::StudyRecord> cancel = c->LockForControl(study.record);
  REQUIRE(cancel.ok());
  CHECK(cancel->id == 1);
  CHECK(cancel->state == StudyState::kRunning);
  CHECK(c->GatherWaiting(study).ok());
  CHECK(study.waiting == std::deque<int>{1, 2});
  CHECK_FALSE(c->FailedStartEndsPass());
  CHECK(c->StorageMayRecover());         // an outage passes: the daemon holds and waits
  CHECK_FALSE(c->OpenElsewhere(study));  // trial 0 RUNNING is this node's own
  clock.Advance(60);
  c->RefreshForPruning(study);
  CHECK(study.trials.size() == 3);
  CHECK(study.synced_at == -1);

  // A claim is what the scheduler picked, taken out of the waiting line.
  int picks = 0;
  CHECK(c->ClaimNext(study, [&] { return ++picks, std::optional<int>(2); }) == 2);
  CHECK(study.waiting == std::deque<int>{1});
  CHECK(c->ClaimNext(study, [&] { return ++picks, std::optional<int>(); }) == std::nullopt);
  CHECK(picks == 2);
  CHECK(study.waiting == std::deque<int>{1});

  // Ending a trial: stored at once. A write refused for an outage (storage_outage.h) is kept;
  // any other refusal is final. A commit refused for an outage takes the cached end back and
  // keeps it; StorageBack hands the kept ends to the scheduler again, oldest first.
  model::TrialOutcome done;
  done.state = TrialState::kComplete;
  done.value = 1.0;
  CHECK(c->BeginFinish(study, 0, done, true, batch));
  CHECK_FALSE(
      c->KeepFailedFinish(study, 0, done, true, common::FailedPrecondition("trial 0 is finished")));
  CHECK(study.pending_finishes == 0);
  CHECK(c->KeepFailedFinish(study, 0, done, true, common::IoError("database or disk is full")));
  CHECK(study.pending_finishes == 1);
  const StudyCache::Saved before = study.Save(0);
  study.trials[0].state = TrialState::kComplete;
  StorageBatch failing(&storage, common::MakeNullLogger());
  c->CommitFinish(study, 0, done, true, failing, before);
  CHECK(study.trials[0].state == TrialState::kRunning);  // taken back
  CHECK(study.pending_finishes == 2);
  host.studies[1] = &study;
  host.calls.clear();
  c->StorageBack();
  CHECK(host.calls ==
        std::vector<std::string>{"finish trial 0 COMPLETE() own", "finish trial 0 COMPLETE() own"});
  CHECK(study.pending_finishes == 0);
  host.studies.clear();
  host.calls.clear();

  // No other nodes to follow.
  CHECK(c->OnTick(false) == std::nullopt);
  CHECK(c->OnTick(true) == std::nullopt);
  model::StudyRecord cancelled = study.record;
  cancelled.state = StudyState::kCancelled;
  c->Adopt(study, cancelled);
  CHECK(study.record.state == StudyState::kRunning);
  CHECK(c->Follow(study));

  CHECK(host.calls.empty());
}

TEST_CASE("a node fences itself after the node timeout less a blocked call, a tick and 1 s",
          "[coordinator]") {
  CHECK(FenceAfterSeconds(30, 2, 10) == 17);  // the defaults
  CHECK(FenceAfterSeconds(60, 5, 20) == 34);
  CHECK(FenceAfterSeconds(4, 2, 4.0 / 3) == 2);  // never below one heartbeat interval
  CHECK(FenceAfterSeconds(30, 2, 10) + 10 + 2 < 30);
}

TEST_CASE("a lease holds for three quarters of the node timeout after the beat", "[coordinator]") {
  struct Row {
    double since_beat;
    bool holds;
  };
  for (const Row& row : {Row{0, true}, Row{10, true}, Row{22.49, true}, Row{22.5, false},
                         Row{30, false}, Row{-1, true}}) {
    INFO("seconds since the beat: " << row.since_beat);
    CHECK(LeaseHolds(1000 + row.since_beat, 1000, kNodeTimeout) == row.holds);
  }
  CHECK(kLeaseFraction * kNodeTimeout < kNodeTimeout);  // ends before others count it dead
}

// Nodes on one SQLite file opened as shared, one fake clock.
class Nodes {
 public:
  std::unique_ptr<storage::Storage> Open(const std::string& node) {
    storage::SqliteOptions so;
    so.path = dir_.path() + "/shared.db";
    so.node = node;
    so.instance = node + "-host:/srv/triald";
    so.shared = true;
    auto opened = storage::OpenSqliteStorage(so);
    REQUIRE(opened.ok());
    return std::move(opened).value();
  }
  std::unique_ptr<SharedCoordinator> Coordinator(storage::Storage* storage, CoordinatorHost* host) {
    CoordinatorOptions co;
    co.storage = storage;
    co.clock = &clock;
    co.host = host;
    co.node_timeout_s = kNodeTimeout;
    std::unique_ptr<NodeCoordinator> c = MakeNodeCoordinator(co);
    auto* shared = dynamic_cast<SharedCoordinator*>(c.get());
    REQUIRE(shared != nullptr);
    c.release();
    return std::unique_ptr<SharedCoordinator>(shared);
  }
  testing::FakeClock clock;

 private:
  triald::testing::TempDir dir_;
};

TEST_CASE("a shared node claims nothing once its lease has lapsed, until it beats again",
          "[coordinator][shared]") {
  Nodes nodes;
  auto storage = nodes.Open("alpha");
  RecordingHost host;
  auto c = nodes.Coordinator(storage.get(), &host);
  CHECK_FALSE(c->LeaseValid());  // no heartbeat yet
  REQUIRE(c->Join().ok());
  CHECK(c->LeaseValid());

  nodes.clock.Advance(22.4);
  CHECK(c->LeaseValid());
  nodes.clock.Advance(0.1);  // 22.5 s = 0.75 * 30 s since the beat
  CHECK_FALSE(c->LeaseValid());
  StudyCache study;
  study.record.id = 1;
  int picks = 0;
  CHECK(c->ClaimNext(study, [&] { return ++picks, std::optional<int>(0); }) == std::nullopt);
  CHECK(picks == 0);  // not even asked

  REQUIRE(c->OnTick(false).has_value());  // beats
  CHECK(c->LeaseValid());
}

TEST_CASE("a shared node counts a node dead after node_timeout_s of silence and ends its trials",
          "[coordinator][shared]") {
  Nodes nodes;
  auto alpha = nodes.Open("alpha");
  auto beta = nodes.Open("beta");
  RecordingHost alpha_host;
  auto a = nodes.Coordinator(alpha.get(), &alpha_host);
  REQUIRE(a->Join().ok());
  REQUIRE(beta->Heartbeat(nodes.clock.WallSeconds()).ok());

  // beta runs trial 0 and has claimed trial 1.
  model::NewStudy ns;
  ns.name = "shared";
  ns.n_trials = 3;
  auto created = alpha->CreateStudy(ns, nodes.clock.WallSeconds());
  REQUIRE(created.ok());
  for (int i = 0; i < 3; ++i) REQUIRE(alpha->CreateTrial(created->id, {}, 1.0).ok());
  auto trials = alpha->GetTrials(created->id);
  REQUIRE(trials.ok());
  REQUIRE(beta->ClaimTrial((*trials)[0].id).ok());
  REQUIRE(beta->MarkRunning((*trials)[0].id, {77, 77, 1234}, 2.0).ok());
  REQUIRE(beta->ClaimTrial((*trials)[1].id).ok());

  StudyCache study;
  study.record = *created;
  alpha_host.studies[study.record.id] = &study;

  nodes.clock.Advance(kNodeTimeout);  // silent for exactly the timeout: still alive
  REQUIRE(a->OnTick(false).has_value());
  CHECK(a->dead_nodes().empty());
  REQUIRE(a->Follow(study));
  CHECK(study.trials.size() == 3);
  CHECK(study.waiting == std::deque<int>{2});  // beta's claim is not alpha's to take
  CHECK(alpha_host.calls == std::vector<std::string>{"stop ended elsewhere: shared"});

  nodes.clock.Advance(1);
  alpha_host.calls.clear();
  REQUIRE(a->OnTick(false).has_value());
  CHECK(a->dead_nodes() == std::set<std::string>{"beta"});
  REQUIRE(a->Follow(study));
  CHECK(alpha_host.calls ==
        std::vector<std::string>{
            "stop ended elsewhere: shared",  // Follow reads the study
            "stop ended elsewhere: shared",  // and again under its lock
            "event trial_lost trial 0: node beta stopped sending heartbeats while the trial ran "
            "there (pid 77); ended by node alpha",
            "finish trial 0 FAIL(lost) other's",
            "event trial_lost trial 1: node beta stopped sending heartbeats after claiming the "
            "trial (it may have started it); ended by node alpha",
            "finish trial 1 FAIL(lost) other's",
        });

  // beta beats again: alive at alpha's next look.
  REQUIRE(beta->Heartbeat(nodes.clock.WallSeconds()).ok());
  REQUIRE(a->OnTick(false).has_value());
  CHECK(a->dead_nodes().empty());
}

}  // namespace
}  // namespace triald::daemon
