#pragma once
// Text forms of a study's best trials: `trialctl best` and the front lines of `trialctl watch`.
// A trial of a study with several objectives shows its values, one per direction, and a trial
// that reported constraints shows them and whether it is feasible (every value <= 0).
//
// Thread-safety: pure functions.

#include <boost/json.hpp>
#include <iosfwd>
#include <string>
#include <vector>

namespace triald::ctl {

// "values 0.31, 812" (several objectives) or "value 0.31", then "  constraints -1, 0.5
// (infeasible)" when the trial has constraints; from the trial's JSON.
std::string TrialValuesText(const boost::json::object& trial);

// Prints the `best` reply: one trial (one objective) or the Pareto front {study, directions,
// complete, feasible, best_trials}; each trial with its resources line (ResourcesLine) when the
// reply carries resources. Returns false when the front is empty (it then says why:
// no COMPLETE trial yet, or none of them feasible), true otherwise.
bool PrintBest(std::ostream& out, const boost::json::value& reply);

// The front as `watch` shows it: a summary line ("front: 3 trials of 40 complete (35
// feasible)") and one line per front trial, at most `max_lines` of them (then "... N more").
std::vector<std::string> FrontLines(const boost::json::object& reply, size_t max_lines);

}  // namespace triald::ctl
