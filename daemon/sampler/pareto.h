#pragma once
// Pareto dominance for studies with several objectives, as Optuna 3.1 defines it
// (optuna/study/_multi_objective.py, optuna/samplers/nsgaii, optuna/_hypervolume): dominance,
// constrained dominance, non-dominated ranks, crowding distance, hypervolume, and the Pareto
// front of a study's trials. Used by the samplers for several objectives, `trialctl best`, the
// report and the exports.
//
// Points are vectors of objective values already turned into minimisation (Minimized()), all of
// one length. Constraint vectors follow Optuna: feasible when every value is <= 0; empty means
// "no constraints reported".
//
// Thread-safety: pure functions.

#include <cstddef>
#include <vector>

#include "config/sweep.h"
#include "daemon/model/records.h"

namespace triald::sampler::pareto {

using Point = std::vector<double>;

// `values` as minimisation: each value of a maximised objective negated.
Point Minimized(const std::vector<double>& values,
                const std::vector<config::Direction>& directions);

// a dominates b: a <= b in every objective and a < b in at least one (minimisation). Points of
// different lengths never dominate each other.
bool Dominates(const Point& a, const Point& b);

// Optuna's constrained domination (NSGA-II with constraints_func): a point with constraints
// dominates one without; of two feasible points, plain dominance decides; a feasible point
// dominates an infeasible one; of two infeasible points, the smaller total violation (sum of the
// positive constraint values) dominates. Two points without constraints: plain dominance.
bool ConstrainedDominates(const Point& a, const std::vector<double>& a_constraints, const Point& b,
                          const std::vector<double>& b_constraints);

// Non-dominated rank of every point (0: not dominated by any; k: dominated only by points of
// ranks < k), by Deb's fast non-dominated sort, O(m n^2). With `constraints` (one vector per
// point, or empty for none at all) domination is ConstrainedDominates().
std::vector<int> NonDominatedRanks(const std::vector<Point>& points,
                                   const std::vector<std::vector<double>>& constraints = {});

// Optuna's crowding distance of each point of one front: per objective, the gap between the
// neighbours above and below in that objective over the range of finite values (an objective
// where all points are equal adds nothing; the extremes get +inf). Larger: less crowded.
std::vector<double> CrowdingDistance(const std::vector<Point>& front);

// The volume dominated by `points` and bounded by `reference` (minimisation): the measure of
// the union of the boxes [p, reference]. Points not strictly better than the reference in every
// objective add nothing. Exact: a sweep in 2-D, WFG's recursion above (exponential in the
// number of objectives, fine for the few objectives and hundreds of points of a study).
double Hypervolume(const std::vector<Point>& points, const Point& reference);

// Indices (in input order) of the trials on the study's Pareto front: COMPLETE, feasible
// (Feasible()), holding one value per direction, and not dominated by another such trial. Trials
// with equal values are all on the front. Empty when no trial qualifies (e.g. all infeasible).
std::vector<size_t> ParetoFront(const std::vector<model::TrialRecord>& trials,
                                const std::vector<config::Direction>& directions);

}  // namespace triald::sampler::pareto
