#pragma once
// What trial-worker does for one trial once it knows its command line, shared by main() (the
// exec path: one process per trial) and the fork server's trials (worker/fork_server.h), so that
// a forked trial reports, exits and answers SIGTERM exactly as an exec'd one.
//
// Exit codes: 0 after a final line was sent; 1 on any error (also sent as an error line when the
// report channel is usable, and printed to stderr); 143 (128 + SIGTERM) when asked to stop.
//
// Thread-safety: RunTrial installs process-wide signal handlers and runs the objective, which
// sets process-wide LibTorch state; call it once per process, from the main thread.

#include <string>
#include <variant>
#include <vector>

namespace triald::worker {

struct LmInputs;  // worker/lm_objective.h

// trial-worker's command line, less the tools (worker/tools.h).
struct TrialCommand {
  std::string objective = "quadratic-sgd";
  std::string config;        // --config: the objective's fixed settings (lm: JSON)
  bool fork_server = false;  // --fork-server: serve forked trials instead (fork_server.h)
  bool fork_twice = false;   // --fork-twice (with --fork-server): never clone a trial
};

// SIGTERM sets the flag the objective polls (StopRequested), without SA_RESTART so a blocking
// sleep is cut short; SIGPIPE is ignored (a vanished log pipe fails a write instead of killing
// the worker before it can report). RunTrial installs them too; calling it twice is harmless.
void InstallTrialSignalHandlers();

// Parses `args` (the arguments after the program's name) with CLI11. Returns the command, or
// the exit code when parsing ends the run: 0 after --help (printed to stdout), 1 after an error
// (printed to stderr with the help).
std::variant<TrialCommand, int> ParseTrialCommandLine(const std::vector<std::string>& args);

// Runs the trial `command` names in this process, as `trial-worker --objective ... --config ...`
// does: SIGTERM handler installed (SIGPIPE ignored), the report channel from TRIALD_REPORT_FD,
// the parameters from TRIALD_PARAMS, step and attribute lines to stdout, then the final line.
// `lm_preloaded`: a fork server's inputs, used when the command is objective lm with exactly
// the config they were loaded for. Returns the exit code.
int RunTrial(const TrialCommand& command, LmInputs* lm_preloaded = nullptr,
             const std::string& lm_preloaded_config = "");

}  // namespace triald::worker
