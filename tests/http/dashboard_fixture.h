#pragma once
// What the dashboard tests share: a sweep whose trials print to stdout and stderr, report a
// learning curve and two attributes ("seen": 1, and "note": HTML that would run script if the
// page parsed it), and end with value x^2; and the daemon's token.

#include <string>

#include "tests/integration/harness.h"

namespace triald::testing {

// Submits study `name` of `n_trials` trials, `parallelism` at once, each reporting 3 steps
// `step_s` seconds apart; returns the study's name.
std::string SubmitDashboardSweep(TestDaemon& d, TempDir& dir, const std::string& name, int n_trials,
                                 int parallelism, double step_s);

// STATE_DIR/http.token without its newline; fails the test when unreadable.
std::string ReadToken(const std::string& state_dir);

}  // namespace triald::testing
