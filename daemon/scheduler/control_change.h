#pragma once
// ControlChange: what the control verbs pause, resume, extend, set (parallelism or metric
// names) and cancel do to a study, as one decision on the study's record read under its lock
// (DecideControl) and, on shared storage, one transaction stored off the event loop (StoreControl).
//
// Both paths decide with DecideControl, so they refuse with the same messages and record the
// same events:
//   - on the event loop (StudyControl's verbs, daemon/scheduler/study_control.h): the storage
//     of a daemon of its own, and any caller without a servers' reads thread;
//   - off the loop (the control socket and the dashboard on shared storage): the server's reads'
//     thread (daemon/control/read_thread.h) stores the change with its own connection, in one
//     transaction under the study's lock, and the scheduler then follows what was stored on the
//     loop without storage (StudyControl::Follow), as it follows another node's change, only at
//     once. So a verb sent while the database is slow or frozen waits alone; the trial channels
//     and the other requests do not wait with it.
//
// Thread-safety: DecideControl is a pure function; StoreControl uses only the storage it is
// given (from the thread that owns it).

#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "daemon/model/records.h"
#include "daemon/storage/storage.h"

namespace triald::daemon {

struct ControlChange {
  enum class Kind { kPause, kResume, kExtend, kParallelism, kCancel, kMetricNames };
  Kind kind = Kind::kPause;
  std::string study;  // its name
  int value = 0;      // kExtend: the new n_trials; kParallelism: the new parallelism
  // kMetricNames (Optuna's study.set_metric_names): one distinct name of 1 to 64 characters per
  // objective, or none to clear them.
  std::vector<std::string> names = {};
};

// What a change stores with the study's new record: its event.
struct ControlDecision {
  std::string kind;  // study_paused, study_resumed, study_extended, study_parallelism,
                     // study_cancelled, study_metric_names
  std::string detail;
  bool reopen = false;  // kExtend of a COMPLETE study: it runs again (state RUNNING first)
};

// Decides `change` on `rec`, the study as read under its lock, and applies it to `rec` (its
// paused, n_trials, parallelism, metric names and, for a cancel or a reopening extend, its
// state).
// `counts`: the study's trials as counted under the lock (kExtend needs them; else unused, may
// be null). `parallelism_now`: the parallelism the study runs with now, for the event's detail
// (empty: from `rec`, "the sweep's" when it has none of its own). An error refuses the verb
// (FailedPrecondition, InvalidArgument) and leaves nothing to store.
common::Result<ControlDecision> DecideControl(const ControlChange& change, model::StudyRecord& rec,
                                              const storage::TrialCounts* counts,
                                              const std::string& parallelism_now);

// A change stored off the event loop: the study as stored, what was decided, when, and, for a
// cancel, the numbers of the trials that were waiting and are ended with it
// (CancelledBeforeStart, at `at`).
struct ControlStored {
  model::StudyRecord rec;
  ControlDecision decision;
  double at = 0;  // wall time
  std::vector<int> ended;
  // A reopening extend: the study's trials, read in the same transaction, so this node can load
  // it without storage (nullopt: not read, or the read failed; the loop reads them).
  std::optional<std::vector<model::TrialRecord>> trials;
  // What could not be stored beside the change (its event, a waiting trial's end), for the
  // log; the change stands.
  std::vector<std::string> errors;
};

// "no study named "NAME" (see `trialctl studies`)": the verbs' answer for a missing study.
common::Status NoStudyNamed(const std::string& name);

// Stores `change` with `storage` in one transaction of its own: the study read and locked,
// DecideControl, the study's new state and control fields, the event, and (a cancel) every
// WAITING trial of the study, whichever node claimed it, ended with its trial_finished event.
// Nothing is stored when the decision refuses, or the study's own write or the commit fails (the
// error); an event or a waiting trial's end that fails is named in ControlStored::errors (as on
// the loop, StudyRecorder). `now`: wall time.
common::Result<ControlStored> StoreControl(storage::Storage& storage, const ControlChange& change,
                                           double now);

}  // namespace triald::daemon
