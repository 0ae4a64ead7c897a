#pragma once
// TpeSampler: the Tree-structured Parzen Estimator, as Optuna's TPESampler defines it
// (optuna/samplers/_tpe: sampler.py, parzen_estimator.py), with the options of TpeConfig.
//
// For trial N the sampler looks at the trials numbered below N:
//   - Fewer than n_startup_trials finished ones (COMPLETE with a value, or PRUNED): every
//     parameter is drawn uniformly, exactly as RandomSampler with the same seed draws it.
//   - Otherwise the finished trials are split into the gamma(n) = min(ceil(gamma_fraction * n),
//     gamma_max) best ("below") and the rest ("above"). COMPLETE trials rank by value (sign
//     flipped when maximizing) before every PRUNED trial; PRUNED trials rank by their last
//     reported step, later first, then by the value reported there (Optuna's rule; a pruned trial
//     that reported nothing ranks last). With constant_liar, RUNNING and WAITING trials join
//     "above" as if they had the worst value, so trials running in parallel spread out instead of
//     piling onto one promising point. (Optuna counts only RUNNING; a triald WAITING trial already
//     holds its parameters and will run, so it is just as pending.)
//   - A Parzen estimator (a weighted mixture of one kernel per trial plus a prior kernel over the
//     whole range) is fitted to each group: l(x) to "below", g(x) to "above". n_ei_candidates
//     points are drawn from l and the one maximising log l(x) - log g(x) is proposed.
//
// Kernels, as in Optuna: floats are truncated normals on [low, high] (on [log low, log high] for
// log floats); ints and stepped floats are truncated normals on [low - step/2, high + step/2]
// (in log space for log ints) discretised onto the grid: a draw is rounded to the nearest grid
// value and a value's density is the kernel's mass over its rounding interval; categoricals put
// weight 1 + prior_weight/(n+1) on the observed choice and prior_weight/(n+1) on every choice.
// Kernel weights follow Optuna's default_weights (trials older than the 25 most recent are
// ramped down linearly) plus a weight for the prior kernel. Bandwidths: multivariate (one joint
// estimator over the whole space, the default) uses Scott's rule, 0.2 * n^(-1/(d+4)) times the
// range, clipped to [range / min(100, n + 2), range] with consider_magic_clip; univariate uses
// the distance to the neighbouring observations, clipped the same way with n the estimator's own
// observations. Kernel densities are normalised truncated normals, 1/sigma factor included, as in
// Optuna since 3.5 (optuna#5109; Optuna 3.1 left it out).
//
// Where triald departs from Optuna: l and g are estimated on a common footing, so that
// l(x)/g(x), the odds that x is "below", reflects the data rather than the two fits' settings.
//   - Multivariate: both use one bandwidth, Scott's rule and the clip with n = every observation
//     (Optuna gives each its own n, so g, fitted to ~9 times as many trials, has narrower and
//     taller kernels than l and penalises the well-explored neighbourhood of the best trials).
//   - The prior kernel takes the same share of g as of l: prior_weight next to l's observation
//     weights (l is Optuna's), scaled by the ratio of the two groups' total weights for g. With
//     Optuna's prior_weight in each, a region far from every trial scores
//     (n_above + 1) / (n_below + 1), the best odds there are, as if half its trials were
//     "below"; here it scores the base rate (l = g there).
// In 5 and 6 dimensions, where most of the box is far from every trial, Optuna's argmax keeps
// landing in empty space: given the same history (40 trials of an Optuna 3.1 Hartmann6 study),
// suggestions average f = -2.47 here, -0.17 with Optuna 3.5+'s estimators and -1.07 with
// Optuna 3.1's (whose unnormalised kernels let the prior dominate both estimators).
// scripts/bench_search.py compares the two samplers on five functions.
//
// Ties at the split (one objective): COMPLETE trials of equal value are alike, but the split must
// put some of them "below" and the rest "above" (the oldest first, as Optuna's stable sort does).
// Rather than reading that arbitrary cut as information, the estimators share the tie: when k of
// the t COMPLETE trials whose value equals the worst "below" value are "below" and t > k, each of
// the t is a kernel of both l and g, with k/t of its weight in l and (t - k)/t in g. A study of
// all-equal values (a plateau) thus gets l = g, suggestions drawn from all its trials alike,
// instead of l fitted to its oldest trials and g penalising everything tried since, which
// kept the search circling the first random trials: on plateau4 of scripts/bench_search.py (flat
// but for a small basin), 30 seeds, the basin was found within 100 trials in 26 seeds against 14
// (Optuna 3.1: 15; random search: 23). Trials with distinct values are split as before. Scott's
// rule counts each observation once, tied ones included.
//
// Parameters with a single possible value are set to it and left out of the estimator.
//
// Several objectives (StudyView::directions) and constraints (a trial numbered below N reported
// them): the split into "below" and "above" and, with several objectives, the "below" kernel
// weights are Optuna 3.1's multi-objective and constrained TPE (non-domination ranks, greedy
// hypervolume subset selection, hypervolume-contribution weights; feasible trials first, then by
// total violation): see tpe_split.h. The estimators are the same as for one objective.
//
// Define-by-run studies (trials holding different parameters; see sampler.h), as Optuna 3.1's
// TPESampler does it:
//   - Relative search space (multivariate): the [space] parameters plus Optuna's intersection
//     search space of the finished trials (IntersectionSearchSpace), sampled by one joint
//     estimator. With group = true, Optuna's group decomposition instead
//     (GroupDecomposedSearchSpace): one joint estimator per group, so each branch of a
//     conditional space is modelled with the trials that took it. Within an estimator the
//     [space] parameters come first in declaration order, the others by name.
//   - The split into "below" and "above" ranks every finished trial, whether or not it holds the
//     parameters being estimated (gamma(n) counts them all, and so does n_startup_trials); then
//     each estimator keeps only the trials that hold all its parameters. So a branch whose
//     trials are all poor gets an l(x) of the prior alone, as in Optuna.
//   - Any other parameter is sampled independently (univariate over the trials that hold it,
//     split the same way). A running trial that lacks a parameter gives no constant-liar point
//     for it.
//   - In a conditional study (the finished trials do not all hold the same parameter names)
//     every estimator keeps Optuna's footing: l and g each their own bandwidth count and
//     prior_weight in each, so that regions far from every trial score the best odds there are.
//     Choosing a branch is a search over a categorical whose choices lead to different
//     subspaces, and the first branch to look good would otherwise hold the search: on the
//     conditional benchmark of scripts/bench_search.py (three optimizer branches, 100 trials,
//     200 seeds) the common footing found the best branch in 105 seeds, Optuna's in 151 (Optuna
//     3.1 itself in 33 of 40 seeds; median best after 100 trials over 40 seeds: triald 0.0040,
//     Optuna 0.0055). A study whose trials all hold the same parameters (every fixed-space
//     study) keeps the common footing.
//   - A trial's value counts for a parameter when it lies in the distribution being sampled
//     (a categorical choice is matched by its value when the trial stored other choices);
//     otherwise that trial is left out of the estimator, as is one holding a value outside its
//     distribution. With every parameter in [space] all of this reduces to the fixed-space TPE
//     above, value for value.
//
// Reproducibility: every random draw of trial N comes from TrialRng(seed, N, ...), and only
// trials numbered below N are read, so the same seed and history give the same suggestion,
// whatever the order of calls; nothing is cached between calls.
//
// Cost per suggestion: O(T log 25) to rank T trials plus O(n_ei_candidates * T * parameters) to
// evaluate the two estimators; no step is quadratic in T.
//
// Thread-safety: immutable after Create() (the seed and the options); concurrent calls would be
// safe, though the Sampler contract asks only for one at a time.

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "config/space.h"
#include "config/sweep.h"
#include "daemon/sampler/sampler.h"

namespace triald::sampler {

class TpeSampler final : public Sampler {
 public:
  // Fails with kInvalidArgument naming the option and the value given when an option is out of
  // range (n_startup_trials < 0, n_ei_candidates < 1, prior_weight <= 0, gamma_fraction outside
  // (0, 1], gamma_max < 1, group without multivariate), and naming the parameter when a
  // distribution is invalid.
  static common::Result<std::unique_ptr<TpeSampler>> Create(const config::SearchSpace& space,
                                                            uint64_t seed,
                                                            const config::TpeConfig& config);

  // multivariate: every [space] parameter with more than one possible value, plus those of the
  // finished trials' intersection (group = false) or of their group decomposition (group =
  // true); see the file comment. Otherwise nothing (each parameter is then estimated on its own
  // by SampleIndependent).
  config::SearchSpace InferRelativeSearchSpace(const StudyView& study, int trial_number) override;
  // The joint TPE suggestion (one per group with group = true), or nothing during start-up
  // (SampleIndependent then draws every parameter uniformly).
  common::Result<config::ParamValues> SampleRelative(
      const StudyView& study, int trial_number, const config::SearchSpace& relative_space) override;
  // A parameter's single value; a uniform draw during start-up; otherwise a univariate TPE
  // suggestion for this parameter alone.
  common::Result<double> SampleIndependent(const StudyView& study, int trial_number,
                                           const config::ParamSpec& param) override;

 private:
  TpeSampler(uint64_t seed, const config::TpeConfig& config);

  // The relative search space as the groups of parameters estimated jointly, each non-empty,
  // none holding a single-valued parameter (see the file comment). Empty unless multivariate.
  std::vector<config::SearchSpace> RelativeGroups(const StudyView& study, int trial_number) const;

  // Internal values for `params` (in that order), or nullopt while fewer than n_startup_trials
  // trials have finished. `stream` names the RNG stream of the draw.
  common::Result<std::optional<std::vector<double>>> Suggest(
      const StudyView& study, int trial_number, const std::vector<const config::ParamSpec*>& params,
      std::string_view stream) const;

  uint64_t seed_;
  config::TpeConfig config_;
};

// Numerical building blocks, exposed for their tests. Standard normal throughout.
namespace tpe_internal {

// Phi^-1(p) for p in (0, 1), to about machine precision; -inf / +inf at 0 / 1.
double NormalQuantile(double p);
// log(Phi(b) - Phi(a)) for a <= b, accurate in both tails (no cancellation, no underflow to -inf
// for |a|, |b| up to at least 1e150); -inf when a == b.
double LogGaussMass(double a, double b);
// The u-quantile (u in [0, 1)) of the standard normal truncated to [a, b], a < b: a draw when u
// is uniform. Always within [a, b].
double TruncatedNormalQuantile(double a, double b, double u);
// Optuna's default_weights(n): 1 for the 25 most recent of n observations, a linear ramp from 1/n
// up to 1 for the older ones (oldest first).
std::vector<double> DefaultWeights(int n);

}  // namespace tpe_internal

}  // namespace triald::sampler
