#pragma once
// PercentilePruner and MedianPruner, as optuna.pruners.PercentilePruner (Optuna 3.1) defines
// them. When trial T reports, with S = T's largest step so far:
//   - no pruning while fewer than n_startup_trials trials are COMPLETE (and never with none);
//   - no pruning while S < n_warmup_steps;
//   - checks happen once per interval: only when S is the first step T reported at or after
//     the latest "pruning step" n_warmup_steps + k * interval_steps <= S;
//   - T's best intermediate value so far (min, or max when maximizing) is compared with the
//     `percentile`-th percentile (numpy's linear interpolation, NaNs ignored) of the values the
//     COMPLETE trials reported at exactly step S; when maximizing the (100 - percentile)-th
//     percentile is used. Fewer than n_min_trials such values: no pruning.
//   - T is pruned when its best is worse than that percentile (strictly), or when every value
//     it reported is NaN.
// MedianPruner is percentile 50.
//
// Thread-safety: stateless after construction; one thread at a time, like every Pruner.

#include <cstdint>
#include <vector>

#include "daemon/pruner/pruner.h"

namespace triald::pruner {

struct PercentilePrunerOptions {
  double percentile = 50;  // [0, 100]
  int n_startup_trials = 5;
  int n_warmup_steps = 0;
  int interval_steps = 1;
  int n_min_trials = 1;
};

class PercentilePruner final : public Pruner {
 public:
  // Options must be valid (MakePruner checks them).
  explicit PercentilePruner(PercentilePrunerOptions options) : options_(options) {}
  bool ShouldPrune(const PruneContext& context) override;

 private:
  PercentilePrunerOptions options_;
};

// Optuna's _is_first_in_interval_step (shared with the threshold pruner): `step` is checked only
// if no earlier report of the trial lies at or after the latest pruning step
// n_warmup_steps + k * interval_steps <= step, so a trial reporting every step is checked every
// `interval_steps` steps, and one that skips a pruning step is checked at its next report.
// Needs step >= n_warmup_steps and interval_steps >= 1.
bool IsFirstInIntervalStep(int64_t step, const model::TrialRecord& trial, int64_t n_warmup_steps,
                           int64_t interval_steps);

// numpy.nanpercentile(values, percentile) with the default "linear" method, reproduced to the
// last bit (numpy 1.24's interpolation formula), so decisions match Optuna's at ties. NaN when
// `values` holds no number. Exposed for tests.
double NanPercentile(std::vector<double> values, double percentile);

}  // namespace triald::pruner
