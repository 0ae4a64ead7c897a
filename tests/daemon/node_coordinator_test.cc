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
#include "tests/daemon/inline_storage_reads.h"
#include "tests/support/temp_dir.h"

namespace triald::daemon {
namespace {

using model::StudyState;
using model::TrialRecord;
using model::TrialState;

constexpr double kCoordinatorNodeTimeout = 30;

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
  bool FinishReapedOffLoop(StudyCache&, int number, const model::TrialOutcome& outcome,
                           const EndReaped& reaped) override {
    if (!reap_off_loop) return false;
    calls.push_back("reap off the loop trial " + std::to_string(number) + " " +
                    model::TrialStateName(outcome.state) + "(" + outcome.fail.reason + ") of " +
                    reaped.node);
    return true;
  }
  StudyCache* FindStudy(int64_t id) override {
    auto it = studies.find(id);
    return it == studies.end() ? nullptr : it->second;
  }
  std::vector<StudyCache*> Studies() override {
    std::vector<StudyCache*> all;
    for (auto& [id, study] : studies) all.push_back(study);
    return all;
  }
  void FollowStored(const std::vector<model::StudyRecord>& stored) override {
    followed.push_back(stored);
  }

  bool reap_off_loop = true;  // FinishReapedOffLoop takes the ends (else the loop stores them)
  std::vector<std::string> calls;
  std::map<int64_t, StudyCache*> studies;
  std::vector<std::vector<model::StudyRecord>> followed;  // each FollowStored's studies
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
  c->OnTick(false);
  c->OnTick(true);
  CHECK(host.followed.empty());
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
    CHECK(LeaseHolds(1000 + row.since_beat, 1000, kCoordinatorNodeTimeout) == row.holds);
  }
  CHECK(kLeaseFraction * kCoordinatorNodeTimeout <
        kCoordinatorNodeTimeout);  // ends before others count it dead
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
  std::unique_ptr<SharedCoordinator> Coordinator(storage::Storage* storage, CoordinatorHost* host,
                                                 StorageReads* reads = nullptr) {
    CoordinatorOptions co;
    co.storage = storage;
    co.clock = &clock;
    co.host = host;
    co.node_timeout_s = kCoordinatorNodeTimeout;
    co.reads = reads;
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

  c->OnTick(false);  // beats
  CHECK(host.followed.size() == 1);
  CHECK(c->LeaseValid());
}

// A study of three trials created through `alpha`: beta runs trial 0 (pid 77) and has claimed
// trial 1.
model::StudyRecord BetaRunsAndClaims(storage::Storage& alpha, storage::Storage& beta,
                                     const std::string& name, double now) {
  model::NewStudy ns;
  ns.name = name;
  ns.n_trials = 3;
  auto created = alpha.CreateStudy(ns, now);
  REQUIRE(created.ok());
  for (int i = 0; i < 3; ++i) REQUIRE(alpha.CreateTrial(created->id, {}, 1.0).ok());
  auto trials = alpha.GetTrials(created->id);
  REQUIRE(trials.ok());
  REQUIRE(beta.ClaimTrial((*trials)[0].id).ok());
  REQUIRE(beta.MarkRunning((*trials)[0].id, {77, 77, 1234}, 2.0).ok());
  REQUIRE(beta.ClaimTrial((*trials)[1].id).ok());
  return *created;
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

  StudyCache study;
  study.record = BetaRunsAndClaims(*alpha, *beta, "shared", nodes.clock.WallSeconds());
  alpha_host.studies[study.record.id] = &study;

  nodes.clock.Advance(kCoordinatorNodeTimeout);  // silent for exactly the timeout: still alive
  a->OnTick(false);
  REQUIRE(alpha_host.followed.size() == 1);
  CHECK(a->dead_nodes().empty());
  REQUIRE(a->Follow(study));
  CHECK(study.trials.size() == 3);
  CHECK(study.waiting == std::deque<int>{2});  // beta's claim is not alpha's to take
  CHECK(alpha_host.calls == std::vector<std::string>{"stop ended elsewhere: shared"});

  nodes.clock.Advance(1);
  alpha_host.calls.clear();
  a->OnTick(false);
  REQUIRE(alpha_host.followed.size() == 2);
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
  a->OnTick(false);
  REQUIRE(alpha_host.followed.size() == 3);
  CHECK(a->dead_nodes().empty());
}

TEST_CASE("with reads off the loop, a dead node's trials' ends are handed over once each",
          "[coordinator][shared][reads]") {
  Nodes nodes;
  auto alpha = nodes.Open("alpha");
  auto beta = nodes.Open("beta");
  RecordingHost host;
  testing::InlineStorageReads reads(alpha.get());
  auto a = nodes.Coordinator(alpha.get(), &host, &reads);
  REQUIRE(a->Join().ok());
  REQUIRE(beta->Heartbeat(nodes.clock.WallSeconds()).ok());
  StudyCache study;
  study.record = BetaRunsAndClaims(*alpha, *beta, "reaped", nodes.clock.WallSeconds());
  host.studies[study.record.id] = &study;
  nodes.clock.Advance(kCoordinatorNodeTimeout + 1);
  a->OnTick(false);
  reads.Drain();
  REQUIRE(a->dead_nodes() == std::set<std::string>{"beta"});

  SECTION("the host takes them off the loop, and they are not handed over again meanwhile") {
    REQUIRE(a->Follow(study));
    CHECK(host.calls == std::vector<std::string>{
                            "stop ended elsewhere: reaped",
                            "reap off the loop trial 0 FAIL(lost) of beta",
                            "reap off the loop trial 1 FAIL(lost) of beta",
                        });
    host.calls.clear();
    REQUIRE(a->Follow(study));  // the ends are not back: nothing is handed over twice
    CHECK(host.calls == std::vector<std::string>{"stop ended elsewhere: reaped"});
  }
  SECTION("a host that stores its ends on the loop gets them there, with their events") {
    host.reap_off_loop = false;
    REQUIRE(a->Follow(study));
    REQUIRE(host.calls.size() == 6);
    CHECK(host.calls[3] == "finish trial 0 FAIL(lost) other's");
    CHECK(host.calls[5] == "finish trial 1 FAIL(lost) other's");
  }
}

TEST_CASE("a tick read off the loop: the lease runs from its start, the fence does not wait for it",
          "[coordinator][shared][reads]") {
  Nodes nodes;
  auto storage = nodes.Open("alpha");
  RecordingHost host;
  testing::InlineStorageReads reads(storage.get());
  auto c = nodes.Coordinator(storage.get(), &host, &reads);
  REQUIRE(c->Join().ok());

  // A frozen database: the tick's beat and reads wait off the loop; the tick returns at once.
  reads.Hold();
  nodes.clock.Advance(2);
  c->OnTick(false);
  CHECK(reads.held() == 1);
  nodes.clock.Advance(2);
  c->OnTick(false);  // the last tick's reads are not back: nothing more is sent
  CHECK(reads.held() == 1);
  CHECK(host.followed.empty());
  CHECK(host.calls.empty());

  // 22.5 s (0.75 of the node timeout) after the last beat that reached it: fenced at a tick,
  // though the beat sent since has not come back.
  nodes.clock.Advance(18.5);
  c->OnTick(false);
  REQUIRE(host.calls.size() == 1);
  CHECK(host.calls[0].rfind("fence: no heartbeat of it reached the database for 22.5 s", 0) == 0);
  CHECK_FALSE(c->LeaseValid());

  // The database answers: the beat sent at the tick 2 s in is stored, and the lease runs from
  // that tick (20.5 s ago), not from now; the studies are followed.
  reads.Release();
  CHECK(reads.completions() == 1);
  CHECK(reads.Drain() == 1);
  CHECK(host.followed.size() == 1);
  CHECK(c->LeaseValid());
  nodes.clock.Advance(2);
  CHECK_FALSE(c->LeaseValid());  // 22.5 s since that tick
  c->OnTick(false);
  reads.Drain();
  CHECK(c->LeaseValid());
  CHECK(host.followed.size() == 2);
}

TEST_CASE("a pruning read off the loop is applied unless a newer read was, never over own trials",
          "[coordinator][shared][reads]") {
  Nodes nodes;
  auto alpha = nodes.Open("alpha");
  auto beta = nodes.Open("beta");
  RecordingHost host;
  testing::InlineStorageReads reads(alpha.get());
  auto c = nodes.Coordinator(alpha.get(), &host, &reads);
  REQUIRE(c->Join().ok());
  model::NewStudy ns;
  ns.name = "pruned";
  ns.n_trials = 2;
  auto created = alpha->CreateStudy(ns, nodes.clock.WallSeconds());
  REQUIRE(created.ok());
  for (int i = 0; i < 2; ++i) REQUIRE(alpha->CreateTrial(created->id, {}, 1.0).ok());
  auto stored = alpha->GetTrials(created->id);
  REQUIRE(stored.ok());
  const int64_t own_id = (*stored)[0].id;
  const int64_t other_id = (*stored)[1].id;
  REQUIRE(alpha->ClaimTrial(own_id).ok());
  REQUIRE(beta->ClaimTrial(other_id).ok());
  REQUIRE(beta->MarkRunning(other_id, {88, 88, 1}, 2.0).ok());

  StudyCache study;
  study.record = *created;
  host.studies[study.record.id] = &study;
  REQUIRE(c->Follow(study));  // on the loop: both trials known
  REQUIRE(study.trials.size() == 2);
  // alpha started its trial 0 and its channel took a report: in memory first (MarkRunning is
  // not stored yet as far as a read off the loop may see).
  study.trials[0].state = TrialState::kRunning;
  study.trials[0].process = {55, 55, 1};
  study.trials[0].intermediate[0] = 3.0;

  // beta's trial reports; alpha's next pruning decision reads it off the loop.
  REQUIRE(beta->AddIntermediate(other_id, 0, 7.0).ok());
  nodes.clock.Advance(kPruneSyncSeconds);
  const uint64_t epoch = study.sync_epoch;
  c->RefreshForPruning(study);
  CHECK(study.read_in_flight);
  CHECK(study.trials[1].intermediate.empty());  // not back yet: this decision goes without it
  c->RefreshForPruning(study);                  // one read at a time
  CHECK(reads.Drain() == 1);
  CHECK_FALSE(study.read_in_flight);
  CHECK(study.sync_epoch != epoch);
  CHECK(study.trials[1].intermediate == std::map<int64_t, double>{{0, 7.0}});
  // Its own trial as memory holds it: RUNNING with its process and report.
  CHECK(study.trials[0].state == TrialState::kRunning);
  CHECK(study.trials[0].process.pid == 55);
  CHECK(study.trials[0].intermediate == std::map<int64_t, double>{{0, 3.0}});

  // A read that a read on the loop (a claim, an end: under the study's lock) overtook is
  // dropped: it may be older.
  reads.Hold();
  nodes.clock.Advance(kPruneSyncSeconds);
  c->RefreshForPruning(study);
  REQUIRE(reads.held() == 1);
  REQUIRE(c->Follow(study));  // on the loop
  REQUIRE(beta->AddIntermediate(other_id, 1, 6.0).ok());
  reads.Release();  // reads step 1 now
  const uint64_t after_loop_read = study.sync_epoch;
  CHECK(reads.Drain() == 1);
  CHECK(study.sync_epoch == after_loop_read);
  CHECK(study.trials[1].intermediate.count(1) == 0);
  CHECK_FALSE(study.read_in_flight);

  // A trial another node ended is applied over this node's own, and its process stopped.
  REQUIRE(beta->FinishTrial(
                  own_id,
                  [] {
                    model::TrialOutcome o;
                    o.state = TrialState::kFail;
                    o.fail.reason = "lost";
                    return o;
                  }(),
                  3.0)
              .ok());
  host.calls.clear();
  nodes.clock.Advance(kPruneSyncSeconds);
  c->RefreshForPruning(study);
  reads.Drain();
  CHECK(study.trials[0].state == TrialState::kFail);
  CHECK(host.calls == std::vector<std::string>{"stop ended elsewhere: pruned"});

  // The study ended meanwhile: its read comes back to nothing.
  nodes.clock.Advance(kPruneSyncSeconds);
  c->RefreshForPruning(study);
  host.studies.clear();
  CHECK(reads.Drain() == 1);
}

}  // namespace
}  // namespace triald::daemon
