#pragma once
// Turns a sweep's [objective] into the command a trial runs.
//
// kind = "exec" runs the sweep's own command. kind = "lm" runs the built-in LibTorch worker,
// `trial-worker --objective lm --config <LmObjectiveConfig as JSON>`; the trial's tuned
// hyperparameters arrive as usual in TRIALD_PARAMS and override the config's defaults. The
// model folder and text files are checked here, at submit, so a typo fails the submission with
// the key's name rather than every trial.
//
// kind = "python" runs `PYTHON -m triald run SPEC` (proto/client/python: the define-by-run
// runner), SPEC being the absolute file form "/abs/PATH.py:NAME" or "package.module:NAME". The
// runner's folder is put first on the trial's PYTHONPATH (before [objective] env's PYTHONPATH,
// else the daemon's), so users set nothing for it. The function is checked WITHOUT running any
// of the user's code (the daemon may run as root): the file (or the module's file under workdir
// and the PYTHONPATH entries) must exist and bind NAME at module level, as CheckPythonBinding
// (python_binding.h) reads it; a name bound only to a literal or a module is not callable.
// Errors carry the line:col of the function key. An optional `constraints = "PATH.py:NAME"` is
// resolved and checked the same way and passed to the runner as `--constraints SPEC`.
//
// With [objective] fork_server (daemon/README.md, "Fork server"), it also fills
// fork_server_command, the study's fork server:
//   python: `PYTHON -m triald fork-server [--preload A,B] [--objective SPEC [--constraints SPEC]]`
//           (--objective with preload_objective), run with the trial's PYTHONPATH and env;
//   lm:     `trial-worker --fork-server --objective lm --config JSON`;
// and fork_request_argv, the argv a fork request carries (proto/README.md, "Fork server
// protocol"): what the exec path runs after the interpreter (`run SPEC [--constraints SPEC]`),
// or after trial-worker (`--objective lm --config JSON`).
//
// Thread-safety: pure functions (they read the file system).

#include <string>
#include <vector>

#include "common/status.h"
#include "config/sweep.h"
#include "daemon/objective/python_binding.h"  // CheckPythonBinding

namespace triald::daemon {

// Fills spec.objective.command for kind = "lm" (from `trial_worker`, an absolute path) and
// kind = "python" (with `python_runner_dir`, the folder holding the triald package; empty:
// DefaultPythonRunnerDir(); `base_env`: the environment trials inherit, for its PYTHONPATH) and
// checks the files they name. `where` prefixes error messages (the sweep file's path).
common::Status PrepareObjective(config::SweepSpec& spec, const std::string& trial_worker,
                                const std::string& where,
                                const std::vector<std::string>& base_env = {},
                                const std::string& python_runner_dir = "");

// Checks that [objective] workdir names an existing directory the daemon can enter, so a typo
// fails the submission naming workdir rather than every trial's start. Called at submit only: a
// folder that goes missing later is a failure to start the trial.
common::Status CheckWorkdir(const config::ObjectiveConfig& objective, const std::string& where);

// The variables of the daemon's environment that trials inherit (PATH, HOME, LANG, PYTHONPATH,
// LD_LIBRARY_PATH, ...); nothing else of it reaches a trial. trialctl's check at submit takes
// the same ones from the submitter's environment (daemon/ctl/submit_check.h).
const std::vector<std::string>& InheritedEnvironment();
// Those of this process's environment that are set, as "NAME=VALUE".
std::vector<std::string> InheritedVariables();

// trial-worker beside the running executable (build/bin or the install's bin folder).
std::string DefaultTrialWorkerPath();

// The folder holding the Python runner's package (triald/__main__.py), found relative to the
// running executable as trial-worker is: the install prefix's Python folder
// (bin/../TRIALD_PYTHON_DIR), else, for an executable of the build tree, the source tree's
// proto/client/python. Empty when neither holds it.
std::string DefaultPythonRunnerDir();

}  // namespace triald::daemon
