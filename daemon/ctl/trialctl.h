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

int RunTrialctl(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace triald::ctl
