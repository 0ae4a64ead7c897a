#pragma once
// SharedCoordinator: the multi-node protocol on shared storage (several daemons, one PostgreSQL
// database; daemon/storage/storage.h). Each daemon is a node. A study submitted through any
// node is run by every node that can run it (its objective prepares there and its GPUs fit; a
// node that cannot leaves it to the others). Every decision about a study's trials is taken
// under the study's lock with the shared history read afresh (GetTrialsSince), so:
//   - a trial is claimed by one node only: the oldest claimable WAITING trial (unclaimed, or
//     claimed by this node before a restart), else a new one from the sampler, which sees every
//     trial of every node, running ones included (constant liar), and n_trials is never
//     exceeded; the claim commits before the process starts, and MarkRunning records the node;
//   - a node whose heartbeat is older than node_timeout_s is dead (model::NodeRecord::
//     AliveWithin): the live node that notices first ends its RUNNING trials, and the WAITING
//     ones it had claimed (it may have started one just before going silent), as FAIL(lost),
//     and retries them per policy: a trial number never runs on two nodes;
//   - a node claims and starts trials only while it holds its lease (LeaseHolds): its last
//     heartbeat is recent enough that no other node can count it dead yet;
//   - self-fencing: a node none of whose heartbeats has reached the database for fence_after_s
//     (FenceAfterSeconds) kills its own running trials and ends them FAIL(lost), before any
//     other node may count it dead and take their work over (the ends are stored when the
//     database answers, unless another node ended the trials first);
//   - a node that comes back finds its trials ended (finished trials are immutable): it stops
//     their processes and records nothing for them, so nothing is resurrected or reported
//     twice;
//   - the node that ends a study's last trial completes the study (under the lock: not while
//     any trial of it is open, or exists unread, in storage); a cancel through any node
//     stops the trials of every node (each stops its own at its next tick);
//   - a trial's end that cannot be stored (the database is away) is kept and stored at a later
//     tick; the study cannot complete without it meanwhile.
// OnTick() (every heartbeat interval) beats, follows other nodes' studies and trials and reaps
// dead nodes; pruning decisions read other nodes' intermediate values at most kPruneSyncSeconds
// old (plus one read's trip, with CoordinatorOptions::reads).
//
// Reads off the event loop (CoordinatorOptions::reads, storage_reads.h; the daemon): the tick's
// beat and reads (its heartbeat, the nodes', the studies, each study's changed trials) and the
// pruning re-reads are made on the reads' thread and applied on the loop when they are back, so
// a frozen or distant database makes no trial channel, control request or dashboard wait for
// them. A read is applied to a study only if no other read of it was applied since it began
// (StudyCache::sync_epoch: a control verb or the reaping reads the study under its lock on the
// loop, and that is newer), and never over this node's own open trials (their start and reports are
// in memory before they are stored) unless storage has them ended or taken over. The lease runs
// from the tick's start (before the beat was sent); a tick whose predecessor's beat is not back
// checks the fence without waiting for it (otherwise the beat's outcome decides). This node's
// own trials' claims, starts and ends go there too (ClaimOffLoop, MarkRunningOffLoop,
// FinishOffLoop), in that order, and a study's end (EndStudyOffLoop): a claim, an end and a
// study's end each in a transaction of its own on the reads' connection, under the study's lock
// with its trials read afresh (shared_coordinator_off_loop.cc). What stays on the loop: other
// ends (a cancelled study's waiting ones), control verbs, each under the study's lock. A dead
// node's trials are ended off the loop too (ReapDeadNodes), each in a transaction that checks
// under the study's lock that the node is still silent.
//
// Owns: the node's lease, the set of nodes found dead, the studies it leaves to other nodes,
// and the trial ends waiting for the database. Not owned: the storage, clock and host.
//
// Thread-safety: not thread-safe; runs on the scheduler's thread.

#include <map>
#include <set>
#include <utility>
#include <vector>

#include "daemon/scheduler/node_coordinator.h"
#include "daemon/scheduler/pending_finishes.h"

namespace triald::daemon {

// A study this node failed to load is tried again after this long, doubling each time it fails
// again, up to the maximum.
constexpr double kLoadRetryFirstSeconds = 10;
constexpr double kLoadRetryMaxSeconds = 300;

// Pruning decisions use other nodes' intermediate values at most this old.
constexpr double kPruneSyncSeconds = 0.5;
// A node claims and starts trials only while its last heartbeat is younger than this fraction
// of the node timeout (its lease), so that a node frozen or cut off for longer than that first
// beats again; the margin covers the beat's trip and timer delays.
constexpr double kLeaseFraction = 0.75;

// Whether a lease taken at monotonic time `lease_from` (just before a heartbeat that reached the
// database) still holds at `now`.
bool LeaseHolds(double now, double lease_from, double node_timeout_s);

// How long a node may go without a heartbeat reaching the database before it kills its own
// trials (self-fencing). Others count it dead after node_timeout_s; it notices at its next tick
// (every heartbeat_interval_s), which a storage call blocked on an unreachable database may
// delay by up to call_timeout_s; a 1 s margin covers the kill and timers. So
// node_timeout_s - call_timeout_s - heartbeat_interval_s - 1, at least one heartbeat interval:
// 30 - 10 - 2 - 1 = 17 s with the defaults.
double FenceAfterSeconds(double node_timeout_s, double heartbeat_interval_s, double call_timeout_s);

class SharedCoordinator final : public NodeCoordinator {
 public:
  explicit SharedCoordinator(CoordinatorOptions options);

  common::Status Join() override;
  bool IsOwn(const model::TrialRecord& trial) const override;
  bool EndedElsewhere(const common::Status& st) const override;
  bool LeaveToOthers(const model::StudyRecord& study, const common::Status& why) override;
  bool LeftToOthers(const std::string& study_name) const override;
  std::unique_ptr<StorageBatch> BeginPass() override { return nullptr; }
  common::Result<std::unique_ptr<StorageBatch>> Lock(StudyCache& study) override;
  common::Result<model::StudyRecord> LockForControl(const model::StudyRecord& read) override;
  common::Status GatherWaiting(StudyCache& study) override;
  std::optional<int> ClaimNext(StudyCache& study,
                               const std::function<std::optional<int>()>& pick) override;
  bool FailedStartEndsPass() const override { return true; }
  bool StorageMayRecover() const override { return true; }
  bool OpenElsewhere(const StudyCache& study) const override;
  void RefreshForPruning(StudyCache& study) override;
  bool BeginFinish(StudyCache& study, int number, const model::TrialOutcome& outcome, bool own,
                   const StorageBatch& batch) override;
  bool KeepFailedFinish(StudyCache& study, int number, const model::TrialOutcome& outcome, bool own,
                        const common::Status& st) override;
  void StorageBack() override { pending_.Retry(*options_.host); }
  void CommitFinish(StudyCache& study, int number, const model::TrialOutcome& outcome, bool own,
                    StorageBatch& batch, const StudyCache::Saved& before) override;
  void FinishOffLoop(StudyCache& study, EndWrite end, EndDone done) override;
  bool WritesOffLoop() const override { return options_.reads != nullptr; }
  void MarkRunningOffLoop(int64_t trial_id, const model::ProcessIdentity& process, double at,
                          std::function<void(common::Status)> done) override;
  size_t ends_in_flight() const override { return ends_in_flight_; }
  bool ClaimOffLoop(StudyCache& study, ClaimPick pick, ClaimDone done) override;
  void ReleaseOffLoop(StudyCache& study, int number, std::function<void()> done) override;
  bool EnqueueOffLoop(StudyCache& study, EnqueuePick pick, EnqueueDone done) override;
  void EndStudyOffLoop(StudyCache& study, StudyEndWrite end, StudyEndDone done) override;
  size_t claims_in_flight() const override { return claims_in_flight_; }
  void OnTick(bool shutting_down) override;
  void Adopt(StudyCache& study, const model::StudyRecord& stored) override;
  bool Follow(StudyCache& study) override;
  std::optional<common::Result<std::vector<model::TrialRecord>>> TrialsToJoin(
      int64_t study_id) override;

  // Whether this node may claim and start trials now (LeaseHolds since its last heartbeat).
  bool LeaseValid() const;
  // Self-fencing: kills this node's trials (once per lapse) when no heartbeat has reached the
  // database for fence_after_s; a heartbeat that reaches it ends the lapse.
  void FenceIfSilent();
  // The nodes found silent for longer than node_timeout_s at the last look.
  const std::set<std::string>& dead_nodes() const { return dead_nodes_; }

 private:
  // Reads the trials other nodes changed since this node last looked, stops this node's trials
  // that another node ended, and recounts.
  common::Status Sync(StudyCache& study);
  // What a read of a study's changed trials starts from (GetTrialsSince's arguments).
  struct ReadFrom {
    int64_t study_id = 0;
    int known = 0;          // trials this node knows of
    std::vector<int> open;  // the unfinished ones
    uint64_t epoch = 0;     // the study's sync_epoch then
  };
  static ReadFrom ReadFromNow(const StudyCache& study);
  // Applies trials read from storage (stops this node's trials another node ended, recounts,
  // and starts a new sync epoch). `off_loop`: read off the event loop, so this node's own open
  // trials keep what memory holds unless storage has them ended or another node's.
  void Apply(StudyCache& study, std::vector<model::TrialRecord> changed, bool off_loop);
  // Studies' changed trials read off the loop, by study id: the study's epoch the read began
  // from, and what was read.
  using StudyReads =
      std::map<int64_t, std::pair<uint64_t, common::Result<std::vector<model::TrialRecord>>>>;
  // What a tick reads off the loop, and applies when it is back.
  struct TickRead {
    double started = 0;  // monotonic, before the beat was sent
    bool shutting_down = false;
    common::Status beat;
    common::Result<std::vector<model::NodeRecord>> nodes = common::Unavailable("not read");
    common::Result<std::vector<model::StudyRecord>> studies = common::Unavailable("not read");
    StudyReads trials;
    // The trials of each RUNNING study this node did not run when the tick began, nor had left
    // to the others: what joining it needs (TrialsToJoin), read here rather than on the loop.
    std::map<int64_t, common::Result<std::vector<model::TrialRecord>>> to_join;
  };
  void OnTickRead(TickRead read);
  // What an end's transaction read: the study's changed trials since `from`, and how the end
  // went.
  struct EndRead {
    common::Result<std::vector<model::TrialRecord>> changed = common::Unavailable("not read");
    EndStored stored;
  };
  // Off the loop, on `storage`: begins a transaction, takes the study's lock and reads into
  // `changed` its trials changed since `from`; the study's record as locked. On an error the
  // transaction is ended, nothing of it stored.
  static common::Result<model::StudyRecord> BeginLocked(
      storage::Storage& storage, const ReadFrom& from,
      common::Result<std::vector<model::TrialRecord>>* changed);
  // FinishOffLoop's job, on the reads' storage: under the study's lock, checks that the trial
  // is still this node's and open (reaped: the dead node's and open, the node still silent), then
  // stores its writes, its end, its events and its retry in one transaction.
  static EndRead StoreEnd(storage::Storage& storage, const ReadFrom& from, const std::string& me,
                          EndWrite& end);
  void OnEndRead(const ReadFrom& from, const EndWrite& end, EndRead read, const EndDone& done);
  // What a claim's transaction read (the study's record and its changed trials since `from`),
  // and what came of the claim.
  struct ClaimRead {
    common::Result<std::vector<model::TrialRecord>> changed = common::Unavailable("not read");
    std::optional<model::StudyRecord> record;
    ClaimMade made;
  };
  // ClaimOffLoop's job, on the reads' storage: under the study's lock, checks the pick against
  // the study as stored, then claims the waiting trial or creates and claims the new one, in
  // one transaction.
  static ClaimRead TakeClaim(storage::Storage& storage, const ReadFrom& from, const std::string& me,
                             const ClaimPick& pick, double at);
  void OnClaimRead(const ReadFrom& from, ClaimRead read, const ClaimDone& done);
  // What an enqueue's transaction read, and what came of it.
  struct EnqueueRead {
    common::Result<std::vector<model::TrialRecord>> changed = common::Unavailable("not read");
    std::optional<model::StudyRecord> record;
    EnqueueMade made;
  };
  // EnqueueOffLoop's job, on the reads' storage: under the study's lock, checks the pick against
  // the study as stored, then creates the trial with its attribute and event, in one
  // transaction.
  static EnqueueRead StoreEnqueued(storage::Storage& storage, const ReadFrom& from,
                                   const EnqueuePick& pick, double at);
  // What a study end's transaction read, and whether the end was stored (status: a failure).
  struct StudyEndRead {
    common::Result<std::vector<model::TrialRecord>> changed = common::Unavailable("not read");
    std::optional<model::StudyRecord> record;
    common::Status status;
    bool ended = false;
  };
  // EndStudyOffLoop's job, on the reads' storage.
  static StudyEndRead StoreStudyEnd(storage::Storage& storage, const ReadFrom& from,
                                    const StudyEndWrite& end);
  // A beat (taken at `started`) reached the database: the lease runs from then.
  void OnBeat(double started);
  // Sets the nodes found silent for longer than node_timeout_s from `nodes`.
  void ApplyNodes(const std::vector<model::NodeRecord>& nodes);
  // Takes the study's lock (inside a batch), adopts its stored state and Syncs. Logs and
  // returns the first error.
  common::Status LockAndSync(StudyCache& study);
  // LockAndSync inside `batch`; Unavailable when the batch did not begin.
  common::Status LockIn(StudyCache& study, const StorageBatch& batch);
  // Under the study's lock, ends the trials dead nodes ran or had claimed (not before
  // reap_after_). With CoordinatorOptions::reads, off the loop: each end is stored by
  // FinishOffLoop (EndWrite::reaped), which checks under the lock that the node is still silent.
  void ReapDeadNodes(StudyCache& study);
  // Records this node's heartbeat; on success (true) the lease runs from just before it.
  bool Beat();
  // Re-reads which nodes have been silent for longer than node_timeout_s.
  common::Status RefreshDeadNodes();
  CoordinatorOptions options_;
  PendingFinishes pending_;           // trial ends not yet stored
  std::set<std::string> dead_nodes_;  // nodes found silent at the last look
  bool fenced_ = false;               // this lapse's trials were killed
  // After a lapse (a beat that did not reach the database), the other nodes' silence is not held
  // against them until one node timeout after this node's first beat that did: when the
  // database itself was unreachable, every node was silent, and each beats again within a
  // heartbeat interval of the database's return. Without it the first node back would count
  // the others dead and end their (already fenced) trials as lost to them.
  bool lapsed_ = false;
  double reap_after_ = -1e300;  // monotonic
  double lease_from_ = -1e300;  // monotonic time before the last heartbeat
  // Studies this node could not load: why, and when to try again. A failure may be passing (the
  // database, a file being deployed), so each is retried after kLoadRetryFirstSeconds, doubling
  // up to kLoadRetryMaxSeconds while it keeps failing.
  struct NotLoaded {
    std::string why;
    double retry_at = 0;  // monotonic
    double delay = 0;
  };
  std::map<std::string, NotLoaded> not_loaded_;
  bool tick_in_flight_ = false;  // a tick's reads are off the loop and not back
  size_t ends_in_flight_ = 0;    // FinishOffLoop's ends not back
  std::set<int64_t> reaping_;    // ids of the dead nodes' trials whose ends are not back
  size_t claims_in_flight_ = 0;  // ClaimOffLoop's and ReleaseOffLoop's claims not back
  // While FollowStored runs for a tick read off the loop: what it read of each study.
  bool following_read_ = false;
  StudyReads tick_trials_;
  std::map<int64_t, common::Result<std::vector<model::TrialRecord>>> tick_to_join_;
};

}  // namespace triald::daemon
