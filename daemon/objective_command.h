#pragma once
// Turns a sweep's [objective] into the command a trial runs.
//
// kind = "exec" runs the sweep's own command. kind = "lm" runs the built-in LibTorch worker,
// `trial-worker --objective lm --config <LmObjectiveConfig as JSON>`; the trial's tuned
// hyperparameters arrive as usual in TRIALD_PARAMS and override the config's defaults. The
// model folder and text files are checked here, at submit, so a typo fails the submission with
// the key's name rather than every trial.
//
// Thread-safety: pure functions (they read the file system).

#include <string>

#include "common/status.h"
#include "config/sweep.h"

namespace triald::daemon {

// Fills spec.objective.command for kind = "lm" (from `trial_worker`, an absolute path) and
// checks the files it names. `where` prefixes error messages (the sweep file's path).
common::Status PrepareObjective(config::SweepSpec& spec, const std::string& trial_worker,
                                const std::string& where);

// trial-worker beside the running executable (build/bin or the install's bin folder).
std::string DefaultTrialWorkerPath();

}  // namespace triald::daemon
