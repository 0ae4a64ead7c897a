#pragma once
// NodeCoordinator: what the scheduler asks before and after it changes a study's trials, so
// that several daemons (nodes) sharing one database agree; on a storage of its own the answers
// are trivial. The scheduler keeps the policy (which trial runs next, when a study ends) and
// has no "is the storage shared?" branches: it asks its coordinator instead.
//
//   LocalCoordinator (below): one daemon, one storage. Nothing to lock, claim, beat or follow;
//     every trial is this daemon's; a pass over several studies commits once.
//   SharedCoordinator (shared_coordinator.h): several daemons on one database. Leases,
//     heartbeats, claims under the study's lock, dead-node recovery, and re-reading the trials
//     other nodes changed.
//
// The coordinator reads and updates the scheduler's StudyCache (study_cache.h) and hands events
// back through a CoordinatorHost (stop trials, record an event, end a trial): the scheduler owns
// the running processes and the studies.
//
// Thread-safety: not thread-safe; both implementations run on the scheduler's thread.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/logging.h"
#include "common/status.h"
#include "daemon/model/records.h"
#include "daemon/scheduler/pending_finishes.h"
#include "daemon/scheduler/pending_writes.h"
#include "daemon/scheduler/storage_batch.h"
#include "daemon/scheduler/storage_reads.h"
#include "daemon/scheduler/study_cache.h"
#include "daemon/storage/storage.h"

namespace triald::daemon {

struct EndReaped;

// What a coordinator may ask of the scheduler. Every StudyCache passed back is one the
// scheduler gave (or FindStudy returned).
class CoordinatorHost {
 public:
  virtual ~CoordinatorHost() = default;
  // This node's running trials of `study` whose stored trial is finished (another node ended it
  // while this node was silent): stop them; their ends are not this node's to record.
  virtual void StopTrialsEndedElsewhere(StudyCache& study) = 0;
  // The study was cancelled through another node: stop its running trials here.
  virtual void StopStudyTrials(StudyCache& study) = 0;
  // Self-fencing (shared_coordinator.h): kills every trial this node runs, at once, and ends
  // each FAIL(lost) with `why` (kept until the database answers, dropped if another node ended
  // it first).
  virtual void FenceOwnTrials(const std::string& why) = 0;
  // Stores an event about the study (and trial).
  virtual void RecordEvent(const StudyCache& study, const model::TrialRecord* trial,
                           const std::string& kind, const std::string& detail) = 0;
  // Ends trial `number` as the scheduler ends any trial (its retry, the study's completion).
  // `own`: the trial is this node's; false for another node's (a dead node's).
  virtual void FinishTrial(StudyCache& study, int number, const model::TrialOutcome& outcome,
                           bool own) = 0;
  // Ends a dead node's trial `number` as lost off the event loop (NodeCoordinator::FinishOffLoop
  // with EndWrite::reaped), deciding its retry as FinishTrial does; false when this host stores
  // on the loop (the caller then records the event and calls FinishTrial).
  virtual bool FinishReapedOffLoop(StudyCache& study, int number,
                                   const model::TrialOutcome& outcome, const EndReaped& reaped) = 0;
  // The active study with this id, or nullptr.
  virtual StudyCache* FindStudy(int64_t study_id) = 0;
  // Every active study.
  virtual std::vector<StudyCache*> Studies() = 0;
  // The studies as a heartbeat tick read them (NodeCoordinator::OnTick): loads those to run
  // here, drops those that ended, calls Follow for each active study, completes those whose
  // last trials ended elsewhere, and starts what it can.
  virtual void FollowStored(const std::vector<model::StudyRecord>& stored) = 0;
};

// A dead node's trial ended as lost by this node (the reaping), off the event loop: whose it was,
// and the trial_lost event stored before its trial_finished.
struct EndReaped {
  std::string node;           // the node it ran on (or had claimed it)
  double node_timeout_s = 0;  // the node must still be silent for longer, under the lock
  std::string lost;           // the trial_lost event's detail
};

// The end of a trial, to be stored off the event loop (NodeCoordinator::FinishOffLoop): what the
// scheduler decided, and what is stored with it in one transaction under the study's lock. This
// node's own trial, or (`reaped`) a dead node's.
struct EndWrite {
  int64_t trial_id = 0;
  int number = 0;
  model::TrialOutcome outcome;
  double at = 0;  // wall time of the end
  // The trial's writes kept on the loop (an outage), stored first, in order; and, taken off the
  // loop just before the transaction begins, those still queued in the lazy writer (empty: none).
  std::vector<PendingWrites::Write> writes;
  std::function<std::vector<PendingWrites::Write>()> take_queued;
  std::string finished;                  // the trial_finished event's detail
  std::optional<std::string> exhausted;  // a retries_exhausted event's detail
  // A retry (or a requeue) to create with the end, while the study is RUNNING in storage.
  struct Retry {
    model::ParamMap params;
    std::string kind;                      // its event: trial_retry or trial_requeued
    std::function<std::string(int)> what;  // the event's detail, given the new trial's number
  };
  std::optional<Retry> retry;
  // Set: a dead node's trial (stored only if it is still open and that node's, and the node
  // still silent, under the lock; else dropped). Unset: this node's own.
  std::optional<EndReaped> reaped;
};

// What came of an EndWrite.
struct EndStored {
  // Ok and not dropped: stored. Dropped: another node ended or took over the trial first;
  // nothing is stored (logged). Not Ok: nothing is stored; the coordinator keeps the end for a
  // later tick (logged) and the caller keeps `writes`.
  common::Status status;
  bool dropped = false;
  std::optional<model::TrialRecord> retry;   // created with the end
  std::string retry_error;                   // why the retry asked for was not created (logged)
  std::vector<PendingWrites::Write> writes;  // not stored (not Ok), in order
  int refused_writes = 0;                    // writes refused for themselves (dropped, logged)
  int event_errors = 0;                      // events that could not be stored (logged)
};

// A claim to be made off the event loop (NodeCoordinator::ClaimOffLoop): what the scheduler
// picked on its cached copy of the study.
struct ClaimPick {
  // The WAITING trial to claim; nullopt: a new trial with `params`.
  std::optional<int> waiting;
  model::ParamMap params;
  // A new trial: the number its parameters were drawn for (the trials the cache knew then).
  int number = 0;
  // The study's n_trials in the cache when it picked.
  int n_trials = 0;
};

// What came of a ClaimPick.
struct ClaimMade {
  enum class Outcome {
    kClaimed,  // `trial` is this node's now (WAITING), committed; start it
    kStale,    // storage differs from what the pick was made on (`why`); nothing was written
    kFailed,   // `status`: storage refused or could not be reached; nothing was written
  };
  Outcome outcome = Outcome::kFailed;
  common::Status status;
  std::string why;                          // kStale: what differed
  std::optional<model::TrialRecord> trial;  // kClaimed
  bool created = false;                     // kClaimed: a new trial
};

// A trial to enqueue off the event loop (NodeCoordinator::EnqueueOffLoop): its parameters as
// resolved on the study's cached copy (enqueued_params.h).
struct EnqueuePick {
  model::ParamMap params;
  std::string deferred;  // the trial's kEnqueuedAttr (JSON text); "" when nothing is deferred
  std::string given;     // the values given, for the trial_enqueued event
  int number = 0;        // the trial number its parameters were drawn for
  int n_trials = 0;      // the study's n_trials in the cache when it resolved them
  // enqueue --skip-if-exists: the values given; a trial of the study that has them (one the
  // cache did not hold as it is stored now) is answered instead. Empty: none is looked for.
  std::map<std::string, std::string> skip_if_has;
};

// What came of an EnqueuePick.
struct EnqueueMade {
  enum class Outcome {
    kEnqueued,  // `trial` is stored, WAITING for any node, with its event; committed
    kSkipped,   // `trial` has the values already (skip_if_has); nothing was written
    kStale,     // storage differs from what the pick was made on (`why`); nothing was written
    kFailed,    // `status`: storage refused or could not be reached (a trial created before a
                // refusal of its attribute or event may stay, WAITING, as on the loop)
  };
  Outcome outcome = Outcome::kFailed;
  common::Status status;
  std::string why;
  std::optional<model::TrialRecord> trial;
};

// A study's end, to be stored off the event loop (NodeCoordinator::EndStudyOffLoop): what the
// scheduler decided on its cache.
struct StudyEndWrite {
  model::StudyState state = model::StudyState::kComplete;  // or kFailed
  int n_trials = 0;  // the study's n_trials in the cache when it decided
  std::string kind;  // its event: study_complete or study_failed
  std::string detail;
  double at = 0;  // wall time
};

class NodeCoordinator {
 public:
  virtual ~NodeCoordinator() = default;

  // ---- Recovery (Scheduler::Recover) ----

  // Before recovery reads anything. Shared: refuses a node name that another live daemon beats
  // for, beats, and reads which nodes are dead. Errors stop the daemon.
  virtual common::Status Join() = 0;
  // Whether a trial left RUNNING in storage is this daemon's to end as lost (shared: other
  // nodes' trials are theirs).
  virtual bool IsOwn(const model::TrialRecord& trial) const = 0;
  // Whether storage refusing to end a lost trial (`st`) means another node ended it first.
  virtual bool EndedElsewhere(const common::Status& st) const = 0;
  // A stored RUNNING study this node cannot run (`why`): true when it is left to the other
  // nodes (shared: logged, and tried again after a back-off, since the cause may pass); false
  // when the caller must stop it.
  virtual bool LeaveToOthers(const model::StudyRecord& study, const common::Status& why) = 0;
  // Whether LeaveToOthers() took the study of that name and its retry is not due yet.
  virtual bool LeftToOthers(const std::string& study_name) const = 0;
  // While the studies a tick read are followed (CoordinatorHost::FollowStored): the trials of a
  // stored study this node is about to join, as that tick read them off the event loop (taken:
  // a second call gives nullopt); nullopt when it read none (the caller reads them). Local:
  // always nullopt.
  virtual std::optional<common::Result<std::vector<model::TrialRecord>>> TrialsToJoin(
      int64_t study_id) {
    (void)study_id;
    return std::nullopt;
  }

  // ---- Decisions about a study's trials ----

  // Opens a pass over several studies (Recover, Pump). Local: one batch, so the pass commits
  // once. Shared: nullptr; every decision commits alone, so no transaction holds the locks of
  // several studies.
  virtual std::unique_ptr<StorageBatch> BeginPass() = 0;
  // Begins a decision on `study`: go on only if this returns Ok. Shared: a batch that holds the
  // study's lock until it commits (Commit(), or when it is destroyed), with the study's stored
  // state adopted and what the other nodes changed read (errors are logged). Local: nullptr;
  // there is nothing to lock, and changes commit as the caller's own batches say.
  virtual common::Result<std::unique_ptr<StorageBatch>> Lock(StudyCache& study) = 0;
  // A control verb (cancel, pause, resume, extend, set, delete), inside the caller's batch:
  // the study's stored record as the verb must decide on it. Shared: read again under the
  // study's lock, held until the batch commits, so no node claims a trial of the study
  // meanwhile and a second verb sees what the first stored. Local: `read`, as the caller read
  // it (nothing else writes the study). An error (the study is gone, the database is away)
  // ends the verb.
  virtual common::Result<model::StudyRecord> LockForControl(const model::StudyRecord& read) = 0;
  // Cancel: puts every WAITING trial of the study into study.waiting, whichever node claimed
  // it (a node about to start one then fails to mark it RUNNING and stops it). Local: they are
  // there already.
  virtual common::Status GatherWaiting(StudyCache& study) = 0;
  // Claims the trial to start next. `pick` chooses it (the oldest waiting trial or a new one;
  // nullopt: none); the claimed number leaves study.waiting. Local: what pick() chose. Shared:
  // only while this node's lease holds, under the study's lock, committed before this returns;
  // nullopt also when the lease lapsed meanwhile (the claim stays this node's).
  virtual std::optional<int> ClaimNext(StudyCache& study,
                                       const std::function<std::optional<int>()>& pick) = 0;
  // Whether a trial that failed to start ends Pump's pass. Local: no, every failed attempt stops
  // its study for the pass (a spawn failure starts its back-off; an exhausted sampler ends the
  // study). Shared: yes, a claim can find the study full or the storage failing.
  virtual bool FailedStartEndsPass() const = 0;
  // Whether a write the storage refused may succeed later (shared: the database may be away
  // for a while) rather than being final (local: a failing storage stops the study).
  virtual bool StorageMayRecover() const = 0;
  // Whether trials of the study may still be WAITING or RUNNING on other nodes.
  virtual bool OpenElsewhere(const StudyCache& study) const = 0;
  // Before a pruning decision: the other nodes' intermediate values, re-read when older than
  // kPruneSyncSeconds (shared_coordinator.h; with CoordinatorOptions::reads the read is made off
  // the event loop and this decision uses what the last one brought). Local: nothing to read.
  virtual void RefreshForPruning(StudyCache& study) = 0;

  // ---- Ending a trial (Scheduler::FinishTrial) ----

  // Before trial `number`'s end is stored, inside `batch`: false when it is not to be stored
  // now. Shared: the end is kept for a later tick when the database cannot be reached, or
  // dropped when another node ended the trial or (own) took it over; both logged.
  virtual bool BeginFinish(StudyCache& study, int number, const model::TrialOutcome& outcome,
                           bool own, const StorageBatch& batch) = 0;
  // Storage refused to store the end (`st`): true when it is kept for a later tick (shared,
  // unless the trial is already finished in storage); false: the caller logs it and goes on.
  virtual bool KeepFailedFinish(StudyCache& study, int number, const model::TrialOutcome& outcome,
                                bool own, const common::Status& st) = 0;
  // After the end (and its retry and the study's completion) is stored and cached: commits the
  // batch. Shared: when the commit fails, the cache forgets all of it (`before`: Save(number)
  // taken after BeginFinish) and the end is kept for a later tick. Local: the batch commits
  // when the caller's scope ends.
  virtual void CommitFinish(StudyCache& study, int number, const model::TrialOutcome& outcome,
                            bool own, StorageBatch& batch, const StudyCache::Saved& before) = 0;
  // Needs WritesOffLoop() (otherwise the caller stores ends on the loop: BeginFinish ...
  // CommitFinish). Stores the end of this node's own trial `end.number` off the event loop;
  // `done` runs on the loop once the end is stored, kept (the coordinator keeps it for a later
  // tick) or dropped (another node ended or took over the trial first), with the study's trials
  // as the end's transaction read them already applied when no read of the study was applied
  // meanwhile; it gets nullptr for a study no longer active (FindStudy). Until then the trial
  // stays open in the cache and counts in study.pending_finishes.
  using EndDone = std::function<void(StudyCache*, const EndWrite&, EndStored)>;
  virtual void FinishOffLoop(StudyCache& study, EndWrite end, EndDone done) {
    (void)study, (void)end, (void)done;
  }
  // Whether this node's own trials' claims, starts and ends, and its studies' ends, are stored
  // off the event loop (ClaimOffLoop, MarkRunningOffLoop, FinishOffLoop, EndStudyOffLoop).
  virtual bool WritesOffLoop() const { return false; }
  // Records this node's own trial `trial_id` RUNNING with `process` (Storage::MarkRunning) off
  // the event loop; `done` runs on the loop with the outcome. Before any later end of the trial
  // (FinishOffLoop): one queue. Needs WritesOffLoop().
  virtual void MarkRunningOffLoop(int64_t trial_id, const model::ProcessIdentity& process,
                                  double at, std::function<void(common::Status)> done) {
    (void)trial_id, (void)process, (void)at, (void)done;
  }
  // Needs WritesOffLoop() (otherwise the caller claims on the loop: ClaimNext). Claims `pick`
  // off the event loop, in one transaction under the study's lock with the study read afresh:
  // only while the study is RUNNING and not paused with the n_trials the pick saw; the waiting
  // trial only while it is still WAITING and unclaimed (or this node's); a new trial only when
  // storage holds exactly the trials the pick knew (its number is the one the parameters were
  // drawn for) and none of them waits unclaimed. Otherwise kStale, and the scheduler picks again
  // on what was read. `done` runs on the loop with the read applied (unless a read of the study
  // was applied meanwhile) and gets nullptr for a study no longer active. False (nothing queued,
  // `done` never runs): this node's lease does not hold now. A kClaimed trial whose lease lapsed
  // meanwhile comes back kFailed; the claim stays this node's, WAITING, as ClaimNext leaves it.
  using ClaimDone = std::function<void(StudyCache*, ClaimMade)>;
  virtual bool ClaimOffLoop(StudyCache& study, ClaimPick pick, ClaimDone done) {
    (void)study, (void)pick, (void)done;
    return false;
  }
  // Needs WritesOffLoop() (otherwise the caller enqueues on the loop under Lock). Stores the
  // enqueued trial `pick` off the event loop, in one transaction under the study's lock with the
  // study read afresh: only while the study is RUNNING with the n_trials the pick saw and storage
  // holds exactly the trials the pick knew (the parameters were drawn for its number); with
  // skip_if_has, a trial read there that has the values is answered instead. Otherwise kStale,
  // and the caller decides again on what was read. The trial, its attribute and its
  // trial_enqueued event commit together. `done` runs on the loop with the read applied (and a
  // stored trial in the cache, waiting), nullptr for a study no longer active. Counts in
  // claims_in_flight() until then (a shutdown waits for it). False: not queued.
  using EnqueueDone = std::function<void(StudyCache*, EnqueueMade)>;
  virtual bool EnqueueOffLoop(StudyCache& study, EnqueuePick pick, EnqueueDone done) {
    (void)study, (void)pick, (void)done;
    return false;
  }
  // Gives back this node's claim of the WAITING trial `number` (Storage::ReleaseClaim) off the
  // event loop, so that any node may start it: a trial ClaimOffLoop claimed that is not to start
  // now (its study paused or ended, this node stopping). A refusal is logged and the claim
  // stays this node's (it starts here when the node does again). `done` runs on the loop when
  // it is back. Needs WritesOffLoop().
  virtual void ReleaseOffLoop(StudyCache& study, int number, std::function<void()> done) {
    (void)study, (void)number, (void)done;
  }
  // Needs WritesOffLoop() (otherwise the caller stores a study's end on the loop). Stores the
  // study's end off the event loop, in one transaction under its lock with its trials read
  // afresh, with its event: only while the study is RUNNING with the n_trials the decision saw,
  // none of its trials is open in storage and storage holds no trial the cache lacks (another
  // node's retry, an enqueued trial); otherwise nothing is written. `done` runs on the loop with
  // the read applied (unless a read of the study was applied meanwhile): Ok and true when the
  // end was stored, Ok and false when storage said not now, an error when it failed; nullptr
  // for a study no longer active. Counts in ends_in_flight() until then.
  using StudyEndDone = std::function<void(StudyCache*, const common::Status&, bool)>;
  virtual void EndStudyOffLoop(StudyCache& study, StudyEndWrite end, StudyEndDone done) {
    (void)study, (void)end, (void)done;
  }
  // Ends handed to FinishOffLoop or EndStudyOffLoop, and claims handed to ClaimOffLoop or
  // ReleaseOffLoop, whose `done` has not run yet.
  virtual size_t ends_in_flight() const { return 0; }
  virtual size_t claims_in_flight() const { return 0; }

  // Storage takes writes again after an outage (storage_outage.h): stores the trial ends kept
  // meanwhile (pending_finishes.h), each with its retry and the study's completion.
  virtual void StorageBack() = 0;

  // ---- Following other nodes (Scheduler::SharedTick) ----

  // Every heartbeat interval. Shared: beats (shutting down too: its trials are still this
  // node's until they end), fences itself when no beat has reached the database for too long
  // (shared_coordinator.h), and when the beat reached it stores the ends kept for later and
  // unless shutting down re-reads which nodes are dead and hands the stored studies to
  // CoordinatorHost::FollowStored. With CoordinatorOptions::reads the reads are made off the
  // event loop and FollowStored comes when they are back (a tick while the last one's are not
  // back only checks the fence). Local: nothing.
  virtual void OnTick(bool shutting_down) = 0;
  // A study's stored record as just read: adopts a state set through another node (cancelled:
  // its trials here stop; completed; extended) and its control fields (paused, n_trials,
  // parallelism: Scheduler::Pause, Extend, SetParallelism).
  virtual void Adopt(StudyCache& study, const model::StudyRecord& stored) = 0;
  // Each active study at each tick (from FollowStored): reads what the other nodes changed (or
  // applies what the tick read off the event loop) and ends the trials dead nodes ran or
  // claimed. False when the study could not be read (logged). Outside a tick: reads at once.
  virtual bool Follow(StudyCache& study) = 0;
};

// One daemon on a storage of its own. A trial's end that storage refuses for an outage (a full
// disk, an I/O error, a read-only file system: StorageOutage::IsOutage) is kept and stored again
// once storage is back (StorageBack); any other refusal is final.
class LocalCoordinator final : public NodeCoordinator {
 public:
  // `storage` and `host` are not owned (`host` outlives this); `logger` may be null (nothing is
  // logged then).
  LocalCoordinator(storage::Storage* storage, common::Logger logger, CoordinatorHost* host)
      : storage_(storage),
        logger_(logger ? std::move(logger) : common::MakeNullLogger()),
        host_(host) {}

  common::Status Join() override { return common::Status::Ok(); }
  bool IsOwn(const model::TrialRecord&) const override { return true; }
  bool EndedElsewhere(const common::Status&) const override { return false; }
  bool LeaveToOthers(const model::StudyRecord&, const common::Status&) override { return false; }
  bool LeftToOthers(const std::string&) const override { return false; }
  std::unique_ptr<StorageBatch> BeginPass() override {
    return std::make_unique<StorageBatch>(storage_, logger_);
  }
  common::Result<std::unique_ptr<StorageBatch>> Lock(StudyCache&) override {
    return std::unique_ptr<StorageBatch>();
  }
  common::Result<model::StudyRecord> LockForControl(const model::StudyRecord& read) override {
    return read;
  }
  common::Status GatherWaiting(StudyCache&) override { return common::Status::Ok(); }
  std::optional<int> ClaimNext(StudyCache& study,
                               const std::function<std::optional<int>()>& pick) override;
  bool FailedStartEndsPass() const override { return false; }
  // A storage outage passes (the disk is freed, remounted): the daemon holds and waits.
  bool StorageMayRecover() const override { return true; }
  bool OpenElsewhere(const StudyCache&) const override { return false; }
  void RefreshForPruning(StudyCache&) override {}
  bool BeginFinish(StudyCache&, int, const model::TrialOutcome&, bool,
                   const StorageBatch&) override {
    return true;
  }
  bool KeepFailedFinish(StudyCache& study, int number, const model::TrialOutcome& outcome, bool own,
                        const common::Status& st) override;
  // Commits now: when the commit fails for an outage, nothing of the end is stored, so the
  // cache forgets it (the end, the retry, the completion) and the end is kept.
  void CommitFinish(StudyCache& study, int number, const model::TrialOutcome& outcome, bool own,
                    StorageBatch& batch, const StudyCache::Saved& before) override;
  void StorageBack() override { pending_.Retry(*host_); }
  void OnTick(bool) override {}
  void Adopt(StudyCache&, const model::StudyRecord&) override {}
  bool Follow(StudyCache&) override { return true; }

 private:
  storage::Storage* storage_;
  common::Logger logger_;
  CoordinatorHost* host_;
  PendingFinishes pending_;  // trial ends kept through an outage
};

struct CoordinatorOptions {
  storage::Storage* storage = nullptr;  // not owned
  const common::Clock* clock = nullptr;
  common::Logger logger;
  CoordinatorHost* host = nullptr;  // not owned; outlives the coordinator
  double node_timeout_s = 30;       // a node silent for longer is dead
  // Shared: this node kills its own trials once no heartbeat has reached the database for this
  // long (self-fencing); 0: kLeaseFraction * node_timeout_s. The daemon derives it
  // (FenceAfterSeconds).
  double fence_after_s = 0;
  // Shared: reads off the event loop (storage_reads.h; not owned, outlives the coordinator and
  // runs no completion after it); null: every read on the event loop.
  StorageReads* reads = nullptr;
};

// A SharedCoordinator when options.storage->shared(), else a LocalCoordinator.
std::unique_ptr<NodeCoordinator> MakeNodeCoordinator(CoordinatorOptions options);

}  // namespace triald::daemon
