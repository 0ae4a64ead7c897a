#pragma once
// StudyControl: the verbs that change a study after submit (trialctl cancel, pause, resume,
// extend, set, delete, enqueue); the Scheduler's public methods of those names forward here,
// and scheduler.h states their contracts. Each verb reads the stored study, takes it under its
// lock (NodeCoordinator::LockForControl: on shared storage, so no node claims a trial of it
// meanwhile and a second verb sees the first), checks that the study's state allows it, stores
// the change with its event through the StudyRecorder, commits, and then lets the scheduler
// start what it now can (ControlHost::Pump).
//
// Pause, resume, extend, set parallelism and cancel decide with DecideControl
// (control_change.h). On shared storage the daemon's servers store those five off the event
// loop instead (StoreControl, on their reads' thread) and the scheduler then Follows what was
// stored, without storage. Delete decides with DecideDelete (study_delete.h), which the servers'
// reads' thread uses too (StoreDelete), the study held meanwhile; FollowDelete is its end.
//
// What a verb needs of the scheduler itself (its active studies, ending and stopping trials)
// goes through ControlHost, so the verbs are tested with a host of their own.
//
// Thread-safety: not thread-safe; the scheduler's event-loop thread owns it.

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/logging.h"
#include "common/status.h"
#include "daemon/model/records.h"
#include "daemon/scheduler/control_change.h"
#include "daemon/scheduler/enqueued_params.h"
#include "daemon/scheduler/node_coordinator.h"
#include "daemon/scheduler/scheduler_env.h"
#include "daemon/scheduler/study_delete.h"
#include "daemon/scheduler/study_recorder.h"
#include "daemon/scheduler/study_runtime.h"
#include "daemon/storage/storage.h"

namespace triald::daemon {

// What the control verbs ask of the scheduler.
class ControlHost {
 public:
  virtual ~ControlHost() = default;
  virtual bool shutting_down() const = 0;
  // The study when it is active on this node; nullptr otherwise.
  virtual StudyRuntime* ActiveStudy(int64_t study_id) = 0;
  // A stored study (a COMPLETE one extended) becomes active here: readmitted, with `trials`
  // (read already, off the event loop) or its trials read (nullopt). Ok also when it is left to
  // the other nodes (shared storage); an error when it cannot run.
  virtual common::Status Activate(const model::StudyRecord& study,
                                  std::optional<std::vector<model::TrialRecord>> trials) = 0;
  // A deleted study leaves the active set (its fork server released, a GPU reservation for it
  // dropped).
  virtual void Forget(int64_t study_id) = 0;
  // Ends trial `number` (Scheduler::FinishTrial; `own`: this node's).
  virtual void FinishTrial(StudyRuntime& study, int number, const model::TrialOutcome& outcome,
                           bool own) = 0;
  // Stops this node's running trials of the study (they end FAIL(cancelled)).
  virtual void StopTrials(StudyRuntime& study) = 0;
  // Starts what the limits now allow.
  virtual void Pump() = 0;
  // A write made off the loop failed with `status`: an outage holds the node (StorageOutage),
  // anything else is the caller's to report.
  virtual void StorageRefused(const common::Status& status) = 0;
};

class StudyControl {
 public:
  struct Options {
    storage::Storage* storage = nullptr;   // not owned
    const common::Clock* clock = nullptr;  // not owned
    common::Logger logger;
    NodeCoordinator* coordinator = nullptr;  // not owned
    StudyRecorder* recorder = nullptr;       // not owned
    SchedulerEnv* env = nullptr;             // not owned: removes a purged study's folder
    ControlHost* host = nullptr;             // not owned
    std::string state_dir;                   // a purged study's folder is state_dir/studies/<name>
  };
  explicit StudyControl(Options options) : options_(std::move(options)) {}

  common::Status Cancel(const std::string& study_name);
  common::Result<model::StudyRecord> Pause(const std::string& study_name, bool paused);
  common::Result<model::StudyRecord> Extend(const std::string& study_name, int n_trials);
  common::Result<model::StudyRecord> SetParallelism(const std::string& study_name, int parallelism);
  // Names the study's objectives (Optuna's study.set_metric_names): one distinct name of 1 to
  // 64 characters per objective, or none to clear them; event study_metric_names.
  common::Result<model::StudyRecord> SetMetricNames(const std::string& study_name,
                                                    const std::vector<std::string>& names);
  common::Result<int64_t> Delete(const std::string& study_name, bool purge);
  // Enqueue's decision on the study's cached copy (on the loop under the study's lock; off it
  // before the lock, NodeCoordinator::EnqueueOffLoop checking it again): a trial that has the
  // values already (skip_if_exists: `existing`), or the new trial's parameters. Errors: the
  // study not RUNNING, its n_trials reached, ResolveEnqueuedParams'.
  struct EnqueueDecision {
    std::optional<model::TrialRecord> existing;
    EnqueuedParams params;
  };
  common::Result<EnqueueDecision> DecideEnqueue(StudyRuntime& study, const std::string& name,
                                                const std::map<std::string, std::string>& given,
                                                bool skip_if_exists);
  // Scheduler::EnqueueOffLoop for the study `study_id` (`name`), active here: one try, and
  // another on what a stale one read, up to kEnqueueTries in all (`tries` made before this).
  using EnqueuedDone = std::function<void(common::Result<model::TrialRecord>, bool skipped)>;
  static constexpr int kEnqueueTries = 4;
  void EnqueueOffLoop(int64_t study_id, const std::string& name,
                      std::map<std::string, std::string> given, bool skip_if_exists,
                      EnqueuedDone done, int tries);
  // The enqueue's refusals: a study that is not RUNNING, one stored as RUNNING that this node
  // did not load (its sweep no longer builds).
  static common::Status NotRunning(const std::string& name, model::StudyState state);
  static common::Status NotLoadedHere(const std::string& name);
  // EnqueuedParams::deferred as the trial's kEnqueuedAttr text; "" when none.
  static std::string DeferredText(const EnqueuedParams& params);
  // What this node's memory holds against deleting `name`, active here as `study` (nullptr:
  // not active), `claim_in_flight` a trial of it being claimed off the loop (study_delete.h).
  static DeleteHold HoldOf(const std::string& name, const StudyRuntime* study,
                           bool claim_in_flight);
  // A deletion stored (by Delete, or off the loop: StoreDelete): the study forgotten here, the
  // errors beside it logged, its folder removed when `purge`, and what can start started.
  // Returns the deleted trials' count; an error when the folder could not be removed (the
  // study stays deleted).
  common::Result<int64_t> FollowDelete(const DeleteStored& stored, bool purge);
  // A change of pause, resume, extend, set parallelism or cancel stored off the event loop
  // (StoreControl, control_change.h): mirrored in the study's memory here, as a change through
  // another node is but at once and logged as this node's; a cancel's waiting trials ended and
  // this node's running trials stopped; a COMPLETE study extended loaded again (with the trials
  // the store read, else read here: an error when it cannot run here, the change standing);
  // then what can start starts. No storage call but that fallback read.
  common::Status Follow(const ControlStored& stored);
  // A submission that continues the stored study of its name (trialctl submit --resume, [study]
  // load_if_exists): `spec` is the admitted sweep, `submitter` who sent it. Refused unless the
  // submitter submitted the study (or is root, or triald's user: `trusted`), and unless its
  // directions, space and objective are the study's (StudyAdmission::ResumeMismatch, named in
  // the error). Then n_trials becomes the study's trials so far plus the file's n_trials (as
  // Optuna's optimize(n_trials) on a loaded study), a COMPLETE, FAILED or CANCELLED study runs
  // again (with a fresh fail-fast count), and a study_resubmitted event says so.
  common::Result<model::StudyRecord> Resume(const config::SweepSpec& spec,
                                            const model::Submitter& submitter, bool trusted);
  common::Result<model::TrialRecord> Enqueue(const std::string& study_name,
                                             const std::map<std::string, std::string>& params,
                                             bool skip_if_exists, bool* skipped);

 private:
  // The stored study `name`: kNotFound naming it when there is none, kUnavailable while
  // shutting down.
  common::Result<model::StudyRecord> StudyFor(const std::string& name) const;

  Options options_;
};

}  // namespace triald::daemon
