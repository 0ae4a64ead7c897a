#include "daemon/pruner/threshold_pruner.h"

#include <cmath>

#include "daemon/pruner/percentile_pruner.h"

namespace triald::pruner {

bool ThresholdPruner::ShouldPrune(const PruneContext& context) {
  const model::TrialRecord& trial = *context.trial;
  if (trial.intermediate.empty()) return false;
  const auto& [step, latest] = *trial.intermediate.rbegin();  // Optuna's last_step
  if (step < options_.n_warmup_steps) return false;
  if (!IsFirstInIntervalStep(step, trial, options_.n_warmup_steps, options_.interval_steps)) {
    return false;
  }
  return std::isnan(latest) || latest < options_.lower || latest > options_.upper;
}

}  // namespace triald::pruner
