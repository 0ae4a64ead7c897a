#pragma once
// trialctl's command line, declared once with CLI11: one row per verb (its arguments, options
// and help text) in command_line.cc. The parser, `trialctl --help`, `trialctl VERB --help` (and
// `trialctl help VERB`) and the usage errors all come from those declarations. `--opt value` and
// `--opt=value` both work; the global options (--socket, --json) may stand before or after the
// verb; an option given twice keeps the last value (--param collects every one).
//
// Thread-safety: pure functions; each call builds its own parser.

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace triald::ctl {

// What the command line asked for.
struct CommandLine {
  std::string verb;
  std::string socket;  // "" when not given
  bool json = false;
  bool wait = false;                                        // submit
  bool stderr_stream = false;                               // logs
  bool whole_log = false;                                   // logs --all
  bool force = false;                                       // export
  std::string output;                                       // report -o, export --out
  std::string format;                                       // export --format
  double interval_s = 0.5;                                  // watch, submit --wait
  std::vector<std::string> param_texts;                     // enqueue --param, as given
  bool skip_if_exists = false;                              // enqueue --skip-if-exists
  bool show_code = false;                                   // status --code
  std::vector<std::pair<std::string, std::string>> params;  // the same split at '=', in order
  std::string file;                                         // submit FILE
  std::string name;                                         // submit --name
  bool no_check = false;                                    // submit --no-check
  bool resume = false;                                      // submit --resume
  double check_timeout_s = 60;                              // submit --check-timeout
  std::string study;                                        // STUDY
  std::string trial;                                        // logs TRIAL (digits)
  long offset = 0;                                          // trials --offset
  long limit = 0;                                           // trials --limit (0: all)
  bool resources = false;                                   // trials --resources
  long n_trials = 0;                                        // extend --n-trials
  std::string setting;                                      // set KEY=VALUE, as given
  long parallelism = 0;                                     // set parallelism=N
  bool purge = false;                                       // delete --purge
  bool yes = false;                                         // delete --yes
};

// A parse: the command line to run, or text to print and the exit code to return (help on
// stdout with 0; a usage error, "trialctl: WHAT\n" and the relevant usage, on stderr with 2).
struct ParsedCommandLine {
  enum class Kind { kRun, kHelp, kUsageError };
  Kind kind = Kind::kRun;
  CommandLine command;
  std::string text;
};

// `args` without the program name.
ParsedCommandLine ParseCommandLine(const std::vector<std::string>& args);

// Every verb with its options ("-o", "--out", ...), and the global options under "": what shell
// completion offers (daemon/ctl/trialctl.bash-completion; a test checks it has them all).
std::map<std::string, std::vector<std::string>> CompletionWords();

}  // namespace triald::ctl
