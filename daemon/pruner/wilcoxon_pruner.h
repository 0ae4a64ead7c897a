#pragma once
// WilcoxonPruner (kind "wilcoxon"), as optuna.pruners.WilcoxonPruner defines it (new in Optuna
// 3.6; this follows Optuna 4's version, whose n_startup_steps defaults to 2). Meant for
// objectives that average many evaluations (instances, folds, questions): the worker reports
// one value per instance with the instance's id as the step, in any order, and the pruner
// compares them with the best trial's values at the same steps.
//
// When trial T reports:
//   - no pruning while a value of T is NaN or infinite;
//   - the best trial B: the COMPLETE trial with the lowest value (highest when maximizing; the
//     lowest number among equal values). When B is infeasible (a constraint > 0), the best
//     feasible COMPLETE trial instead, as Optuna's study.best_trial. No B, or a B without
//     intermediate values or with a non-finite one: no pruning;
//   - d = T's value minus B's at every step both reported; fewer than max(2, n_startup_steps)
//     differences: no pruning;
//   - p = the one-sided Wilcoxon signed-rank p-value for "T is worse" (d > 0 when minimizing,
//     d < 0 when maximizing), zero differences split between the signs (WilcoxonPValue);
//   - T is pruned when p < p_threshold, except when the mean of all of T's values is no worse
//     than the mean of all of B's (Optuna's safety rule).
//
// Thread-safety: stateless after construction; one thread at a time, like every Pruner.

#include <vector>

#include "daemon/pruner/pruner.h"

namespace triald::pruner {

struct WilcoxonPrunerOptions {
  double p_threshold = 0.1;  // [0, 1]
  int n_startup_steps = 2;   // >= 0
};

class WilcoxonPruner final : public Pruner {
 public:
  // Options must be valid (MakePruner checks them).
  explicit WilcoxonPruner(WilcoxonPrunerOptions options) : options_(options) {}
  bool ShouldPrune(const PruneContext& context) override;

 private:
  WilcoxonPrunerOptions options_;
};

// Which way the one-sided test looks: kGreater, the differences tend to be positive.
enum class WilcoxonAlternative { kGreater, kLess };

// The p-value of the Wilcoxon signed-rank test of the differences `d` (finite numbers), as
// scipy.stats.wilcoxon(d, zero_method="zsplit", alternative=...) computes it with its defaults
// (method "auto", no continuity correction) in SciPy 1.15 and later:
//   - ranks of |d|, tied values sharing their average rank; the statistic is the sum of the
//     ranks of the positive differences plus half the ranks of the zeros;
//   - n <= 50 with no ties and no zeros: the exact null distribution (2^n sign assignments);
//   - n <= 13 with ties or zeros: every one of the 2^n sign flips of d (SciPy's permutation
//     test, exact at that size);
//   - otherwise the normal approximation with mean n(n+1)/4 and variance
//     (n(n+1)(2n+1) - sum(t^3 - t)/2) / 24 over the tie groups of size t (zeros included).
// NaN when `d` is empty.
double WilcoxonPValue(const std::vector<double>& d, WilcoxonAlternative alternative);

}  // namespace triald::pruner
