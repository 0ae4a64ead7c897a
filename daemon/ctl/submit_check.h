#pragma once
// What `trialctl submit` does before it sends a sweep of kind = "python", in the submitter's own
// process (so with the submitter's rights and environment, and never on the daemon's event loop):
//
// 1. The interpreter (daemon/README.md, "Which Python runs the trials"): [objective] python
//    (default "python3") resolved as the submitter's shell would run it: a name is looked up in
//    $VIRTUAL_ENV/bin, then $CONDA_PREFIX/bin, then the submitter's PATH; a path with '/' is
//    taken relative to the objective's workdir. The interpreter itself then says which it is
//    (sys.executable: the real one behind a pyenv shim; a venv's own link, so the venv's
//    packages) and its version; trialctl sends both, and the study's trials run that interpreter
//    whatever the daemon's PATH.
// 2. The check (unless --no-check): `PYTHON -m triald check SPEC [--constraints SPEC]
//    [--preload A,B] --report` in a short-lived process, in the objective's workdir, with the
//    submitter's environment (the variables a trial inherits from the daemon's,
//    daemon::InheritedEnvironment(), taken from the submitter's) and the
//    sweep's [objective] env, bounded by `timeout_s` (then its process group is killed). It
//    imports the preload modules and the objective's module (and the constraints function's),
//    running their top-level code as a trial would. A failure refuses the submission with the
//    interpreter, the module and the exception's last line.
//
// Thread-safety: functions of their arguments (they read the file system and run processes).

#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "config/sweep.h"

namespace triald::ctl {

// The parts of the submitter's environment the resolution reads.
struct SubmitterEnvironment {
  std::string virtual_env;             // $VIRTUAL_ENV
  std::string conda_prefix;            // $CONDA_PREFIX
  std::string path;                    // $PATH
  std::vector<std::string> inherited;  // "K=V" of daemon::InheritedEnvironment() that are set
  // This process's environment.
  static SubmitterEnvironment Current();
};

// Step 1's lookup: the absolute path of `python` (as [objective] python gives it), or an error
// naming what was searched.
common::Result<std::string> ResolveInterpreter(const std::string& python,
                                               const std::string& workdir,
                                               const SubmitterEnvironment& env);

struct SubmitCheckOptions {
  bool import_objective = true;  // false (--no-check): only ask the interpreter what it is
  double timeout_s = 60;
  std::string runner_dir;  // the folder of the triald package; empty: DefaultPythonRunnerDir()
};

// What the interpreter said of itself.
struct CheckedInterpreter {
  std::string executable;  // sys.executable
  std::string version;     // platform.python_version()
  // The files the objective and constraints functions came from, as the check imported them
  // (absolute; empty with --no-check): what submit_code.h records of a module-form function.
  std::vector<std::string> files;
};

// Steps 1 and 2 for `spec` (kind = "python"; parsed from the file at `where`): the interpreter
// the trials will run, or why the sweep is refused (kFailedPrecondition, a message for the
// submitter that names the interpreter, the module and the exception's last line).
common::Result<CheckedInterpreter> CheckPythonSweep(const config::SweepSpec& spec,
                                                    const std::string& where,
                                                    const SubmitterEnvironment& env,
                                                    const SubmitCheckOptions& options);

}  // namespace triald::ctl
