#pragma once
// The split of TPE's history into "below" (the good trials, fitted by l(x)) and "above" for
// studies with several objectives or with constraints, and the weights of the "below" trials
// with several objectives, as Optuna 3.1's TPESampler defines them (optuna/samplers/_tpe/
// sampler.py: _get_observation_pairs, _split_observation_pairs,
// _calculate_weights_below_for_multi_objective; optuna/_hypervolume/hssp.py). A single-objective
// study without constraints keeps TpeSampler's own split (the same rule, without the detour).
//
// Several objectives (Optuna's multi-objective TPE):
//   - Only COMPLETE trials holding one value per objective take part (Optuna 3.1 leaves PRUNED
//     and RUNNING trials out of a multi-objective study's split; n_startup_trials and gamma(n)
//     count the COMPLETE ones).
//   - "below" takes whole non-domination ranks, best first, while they fit in gamma(n); the
//     rank that does not fit is cut by greedy hypervolume subset selection: repeatedly the
//     point adding the most hypervolume to those chosen (reference point: per objective the
//     rank's worst value w, max(1.1 w, 0.9 w), 1e-12 where that is 0; ties go to the earlier
//     trial).
//   - Each "below" trial's kernel weight is its hypervolume contribution among the feasible
//     "below" trials (reference point as above, from their worst values), plus 1e-12, divided by
//     the largest; 1 for a single trial; 1e-12 for an infeasible one. Optuna's default_weights
//     (the ramp over old trials) are not used; "above" keeps them.
//   - triald departs in one point: with constant_liar, RUNNING and WAITING trials join "above"
//     (after the split, so "below" is Optuna's), as in a single-objective study; Optuna 3.1
//     ignores running trials in a multi-objective study.
//
// Constraints (Optuna's constraints_func): violation = the sum of a trial's positive constraint
// values; a finished trial that reported none counts as violating infinitely (Optuna's rule for
// a trial without constraint values: ranked after every other) and so does a pending one. The
// trials, in trial order, are stable-sorted by violation; when at most gamma(n) trials are
// feasible, "below" is the first gamma(n) of that order (every feasible trial, then the least
// violating); otherwise "below" is the gamma(n) best feasible trials by the unconstrained rule
// (single objective: by value, PRUNED after COMPLETE as in TpeSampler; several: ranks and
// hypervolume as above) and every infeasible trial is "above".
//
// Optuna turns this on with TPESampler(constraints_func=...); triald has no such option: it is on
// for a trial when any trial numbered below it reported constraints (Constrained()).
//
// Thread-safety: pure functions.

#include <cstddef>
#include <optional>
#include <vector>

#include "config/sweep.h"
#include "daemon/model/records.h"

namespace triald::sampler::tpe_split {

// A trial as the split sees it: Optuna's observation pair ((step, loss)) and its violation.
struct Observation {
  int number = 0;
  bool pending = false;      // RUNNING or WAITING (constant liar)
  double step = 0;           // COMPLETE: -inf; PRUNED: minus the last step reported, 1 when it
                             // reported nothing; pending: +inf
  std::vector<double> loss;  // minimisation, one per objective; NaN and pending: +inf
  double violation = 0;      // constrained: see the file comment; 0 otherwise
};

// True when a trial numbered below `trial_number` reported constraints: the split then follows
// Optuna's constrained rule for trial `trial_number`.
bool Constrained(const std::vector<model::TrialRecord>& trials, int trial_number);

// The observation of `trial` in a study with `directions`, or nullopt when the trial takes no
// part in the split (FAIL; COMPLETE without its values; with several objectives PRUNED; pending
// without constant_liar).
std::optional<Observation> Observe(const model::TrialRecord& trial,
                                   const std::vector<config::Direction>& directions,
                                   bool constrained, bool constant_liar);

struct Split {
  std::vector<size_t> below;    // indices into the observations, ascending
  std::vector<double> weights;  // several objectives: the kernel weight of each below[i]
};

// Optuna's split of `obs` (in trial order) with n_below = gamma(n), n counting the observations
// that are not pending. Several objectives when the observations hold more than one loss; their
// pending observations are always "above". With one objective a pending observation is "above"
// too, except in Optuna's corner case of a constrained split short of trials with a finite
// violation (pending ones count as violating infinitely and keep their trial order).
Split SplitObservations(const std::vector<Observation>& obs, size_t n_below, bool constrained);

// Greedy hypervolume subset selection (Optuna's _solve_hssp, evaluated lazily): `subset_size`
// indices into `points` (minimisation), in the order chosen.
std::vector<size_t> GreedyHypervolumeSubset(const std::vector<std::vector<double>>& points,
                                            size_t subset_size,
                                            const std::vector<double>& reference);

// Optuna's reference point for a set of points: per objective max(1.1 w, 0.9 w) of the worst
// value w, 1e-12 where that is 0.
std::vector<double> ReferencePoint(const std::vector<std::vector<double>>& points);

}  // namespace triald::sampler::tpe_split
