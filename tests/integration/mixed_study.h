#pragma once
// A study with every kind of parameter and every way a trial ends, for the tests of trialctl's
// watch, report and exports: 8 trials, 2 at a time, of a Python worker (/usr/bin/python3).
//   number % 4 == 3: exits 3 before reporting anything (FAIL, reason exit)
//   number % 4 == 2: reports a poor learning curve slowly; the median pruner stops it (PRUNED)
//   otherwise:       reports kSteps intermediate values at once, then a final value (COMPLETE)
// Parameters: lr float log, dropout float step 0.1, layers int, batch int log, width int step
// 32, opt categorical with a string, an int, a float and a bool choice. Every worker sets an
// attribute "note" whose text needs escaping in JSON, CSV and HTML.

#include <string>
#include <vector>

#include "tests/integration/harness.h"

namespace triald::testing {

inline constexpr int kMixedTrials = 8;
inline constexpr int kMixedSteps = 60;

// Writes the worker and the sweep into `dir`; returns the sweep file's path. With
// `trial1_wait_s`, trial 1 (started at submit, beside trial 0) waits that long before anything
// else: trial 3, the first to fail, starts only once 1 or the slow trial 2 has ended, so no trial
// fails before then (a pause sent after the submit lands first).
std::string WriteMixedStudy(TempDir& dir, const std::string& study, double trial1_wait_s = 0);

// One trial of an "export" reply written by hand: its values and constraints as JSON arrays
// ("null" for none).
struct ReplyTrial {
  int number = 0;
  std::string state;
  std::string values;
  std::string constraints = "[]";
  std::string resources = "null";  // the trial's "resources" JSON
};
// An "export" reply as the daemon sends it, of a study `name` with `directions` (JSON array)
// and `trials`, each with a float parameter x and a categorical s whose choice "=1" a
// spreadsheet would take for a formula.
std::string ExportReply(const std::string& name, const std::string& directions,
                        const std::vector<ReplyTrial>& trials);
// Two objectives (minimize, maximize) and constraints: trials 0, 2 and 4 are on the front (2
// and 4 tie in both objectives); trial 1 would dominate them all but is infeasible; 3 is
// dominated by 2; 5 is PRUNED, 6 FAILED. Without constraints, trial 1 alone is the front.
std::string MultiObjectiveReply(bool with_constraints);
// Two objectives (minimize, minimize) and measured resources: trials 0 (200M peak memory), 1
// (500M, 1G of GPU memory, a planned_memory_bytes), 3 (PRUNED, 100M) and 4 (FAIL, 300M, getrusage
// sources) measured; 2 COMPLETE but stored before resources were measured; 5 WAITING.
std::string ResourcesReply();
// The "resources" JSON of trial `n` of ResourcesReply ("null" for 2 and 5).
std::string MeasuredResources(int n);

}  // namespace triald::testing
