#pragma once
// trialctl's command-line logic, separate from main() so tests run it in-process.
//
// Exit codes: 0 success; 1 triald answered with an error (unknown study, invalid sweep, ...)
// or a waited-for study ended without a COMPLETE trial; 2 bad command line; 3 triald cannot be
// reached.
//
// Thread-safety: RunTrialctl may run on any thread; it shares no state.

#include <iosfwd>
#include <string>
#include <vector>

namespace triald::ctl {

inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitUnavailable = 3;

// Which of trialctl's outputs are terminals (main fills it in; tests use forkpty): the live view
// of `watch` (stdout) and `submit --wait` (stderr) is redrawn in place on a terminal.
struct Terminals {
  int out_fd = -1;  // stdout's descriptor when it is a terminal, else -1
  int err_fd = -1;  // stderr's, likewise
  // stdin when it is a terminal (delete asks for the study's name there), else nullptr.
  std::istream* in = nullptr;
};

int RunTrialctl(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
int RunTrialctl(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
                const Terminals& terminals);

}  // namespace triald::ctl
