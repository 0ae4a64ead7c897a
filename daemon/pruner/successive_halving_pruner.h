#pragma once
// SuccessiveHalvingPruner (kind "asha"): asynchronous successive halving as
// optuna.pruners.SuccessiveHalvingPruner (Optuna 3.1) defines it.
//
// Rung r ends at step min_resource * reduction_factor^(min_early_stopping_rate + r). When a
// trial's largest step S reaches the end of its current rung, its value at S is the trial's
// value for that rung, and it competes with the values every other trial of the study (any
// state) recorded for the same rung:
//   - with bootstrap_count > 0, while at most bootstrap_count trials (itself included) have a
//     value for the rung, it is pruned (Optuna's rule, kept as is);
//   - otherwise it is promoted when it is among the best len/reduction_factor of those values
//     (the best one while fewer than reduction_factor trials competed); if not, it is pruned.
// A promoted trial moves to the next rung at once, and S may already complete that rung too.
//
// Where the rung values come from: Optuna writes each trial's rung value into a trial system
// attribute ("completed_rung_<r>") when it checks the trial. We derive it instead: a trial's
// value for rung r is its intermediate value at the first step it reported at or after the end
// of rung r. That is what Optuna records, because the daemon asks the pruner after every report
// and drops a pruned trial's later reports, with one exception: when one report jumps past the
// end of several rungs at once and the trial loses at one of them, Optuna records only the rungs
// up to that one, while the derivation also credits the trial with the later ones. Workers that
// report every step (or at least at every rung's end) never see the difference.
//
// Steps are assumed to be reported in increasing order (a trial's "current step" is its largest,
// as Optuna's last_step).
//
// Thread-safety: stateless after construction; one thread at a time, like every Pruner.

#include <cstdint>
#include <functional>
#include <optional>

#include "daemon/pruner/pruner.h"

namespace triald::pruner {

struct SuccessiveHalvingPrunerOptions {
  int min_resource = 1;             // >= 1 (Optuna's "auto" is not supported)
  int reduction_factor = 3;         // >= 2
  int min_early_stopping_rate = 0;  // >= 0
  int bootstrap_count = 0;          // >= 0
};

class SuccessiveHalvingPruner final : public Pruner {
 public:
  // Options must be valid (MakePruner checks them).
  explicit SuccessiveHalvingPruner(SuccessiveHalvingPrunerOptions options) : options_(options) {}

  bool ShouldPrune(const PruneContext& context) override;

  // The same decision, seeing only the other trials for which `member` is true (Hyperband runs
  // one of these per bracket over that bracket's trials).
  bool ShouldPruneAmong(const PruneContext& context,
                        const std::function<bool(const model::TrialRecord&)>& member) const;

  // The step that ends rung `rung` (saturates at INT64_MAX).
  int64_t RungEndStep(int rung) const;
  // The trial's recorded value for `rung`, derived from its intermediate values (see above);
  // nullopt when it has not reached that rung.
  std::optional<double> RungValue(const model::TrialRecord& trial, int rung) const;

 private:
  SuccessiveHalvingPrunerOptions options_;
};

}  // namespace triald::pruner
