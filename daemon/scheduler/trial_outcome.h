#pragma once
// Trial outcome: how a trial ended, as a pure function of what the scheduler observed.
//
// ClassifyExit() turns the launcher's ProcessOutcome and what the worker reported into the
// model::TrialOutcome that is stored:
//   COMPLETE  the main process exited 0 after a final line with one value per objective
//             (values; value too with one objective, unset with several), and constraints
//   PRUNED    the pruner stopped it; value = its last intermediate value (none if it had none)
//   FAIL      timeout | stalled | cancelled | protocol | oom | signal | exit | shutdown, with the
//             detail
//             messages users see in `trialctl trials` (the worker's last "error" line is
//             appended as "; worker said: ..."; a stalled trial's detail ends with the last
//             line of its stderr)
// Every outcome of a process exit carries the process's resources (ProcessOutcome::resources).
// A trial the daemon stopped for its own shutdown is judged like any other when it finished on
// its own terms (a result, or a broken protocol); otherwise it is FAIL(shutdown).
// The other FAIL reasons are decided without a process exit: SpawnFailed (spawn),
// CancelledBeforeStart (cancelled), LostAtRestart and LostWithNode (lost).
//
// Nothing here reads the clock, storage or the process table, so every case is table-tested
// (tests/daemon/trial_outcome_test.cc).
//
// Thread-safety: pure functions; thread-safe.

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "config/sweep.h"
#include "daemon/launcher/launcher.h"
#include "daemon/model/records.h"

namespace triald::daemon {

// What the scheduler saw of a trial that ended.
struct TrialObservation {
  launcher::ProcessOutcome process;  // from the launcher's on_exit
  std::vector<double> final_values;  // from the trial's last "final" line (empty: none)
  // The number of values the worker sends (StudyConfig::worker_objectives(): [study]
  // directions, less the measured metrics of [study] objectives): a final line must carry
  // exactly as many values, else the trial ends FAIL(protocol) naming both counts.
  size_t n_objectives = 1;
  // The study's objectives triald measures itself ([study] objectives naming metrics); they
  // are not in the final line, and the message for a wrong count names them.
  size_t measured_objectives = 0;
  // From its last "constraints" line (empty: none); kept on a COMPLETE or PRUNED trial.
  std::vector<double> constraints;
  std::string worker_error;  // from its last "error" line (empty: none)
  // Its intermediate value at its largest step (the value of a pruned trial).
  std::optional<double> last_intermediate;
  // The worker said "pruned" (its objective raised TrialPruned): with a clean exit and no final
  // value the trial ends PRUNED with its last intermediate value, as in Optuna.
  bool worker_pruned = false;
  double trial_timeout_s = 0;  // [study] trial_timeout, for the timeout message
  double stall_timeout_s = 0;  // [study] stall_timeout, for the stalled message
};

model::TrialOutcome ClassifyExit(const TrialObservation& seen);

// What the scheduler knows of a trial of `study` that ended with `process`: the objective
// counts, the trial's last intermediate value and the timeouts. The trial's channel adds what
// its lines said (TrialChannel::Observe).
TrialObservation ObserveExit(const config::StudyConfig& study, const model::TrialRecord& trial,
                             const launcher::ProcessOutcome& process);

// How a trial ended, as its trial_finished event and log line say it: "COMPLETE value=0.5",
// "FAIL(exit): exited with code 1", "PRUNED values=1,2 infeasible".
std::string DescribeOutcome(const model::TrialOutcome& outcome);

// A cached trial as its stored end (`out`, at wall time `at`) made it.
void MirrorEnd(model::TrialRecord& trial, const model::TrialOutcome& out, double at);

// The launcher could not start the trial (`error`: why), or could not record it as running.
model::TrialOutcome SpawnFailed(const std::string& error);
// The study was cancelled while the trial was still WAITING.
model::TrialOutcome CancelledBeforeStart();
// A WAITING trial of a study that fail-fast stopped (FailureStreak): FAIL(cancelled), `why`.
model::TrialOutcome StoppedBeforeStart(const std::string& why);
// The daemon stopped (or crashed) while the trial ran as process `pid`; found at restart.
model::TrialOutcome LostAtRestart(pid_t pid);
// Shared storage: node `trial.node` stopped sending heartbeats while it ran the trial (RUNNING)
// or after claiming it (WAITING); `ended_by` is the node that ends it.
model::TrialOutcome LostWithNode(const model::TrialRecord& trial, const std::string& ended_by);
// Shared storage: this node could not renew its lease (`why`) and killed the trial before any
// other node could count it dead (self-fencing, shared_coordinator.h).
model::TrialOutcome Fenced(const std::string& why);

}  // namespace triald::daemon
